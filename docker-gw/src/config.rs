//! What the launcher hands the gateway of one project: the project's facts, where the
//! gateway's files are, how the filter is reached, and the few things the gateway does not
//! make itself. *Why values*: the launcher owns the settings, the state directory's layout, the
//! filter and the TLS client; the gateway is given what they say, and so depends on none of them.

use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

/// One project's gateway, as the launcher sets it up ([`crate::Gateway::start`]).
pub struct Config {
    /// The project's name: the label of everything its sessions make, and its network's name.
    pub project: String,
    /// The host's loopback ports the sandbox may reach: the only ones a container may publish.
    pub ports: Vec<u16>,
    /// Remove what a session made when it ends (`OCSB_DOCKER_CLEANUP=1`), rather than keep it.
    pub cleanup: bool,
    pub paths: Paths,
    pub filter: Filter,
    /// Makes the TLS client of the gateway's pulls (the system's roots), at each pull: a system
    /// without trusted certificates refuses pulls, not the gateway.
    pub tls: fn() -> Result<Arc<rustls::ClientConfig>, String>,
    /// Random text that makes the socket's name this gateway's (its first 8 characters).
    pub nonce: String,
    /// The program the watcher runs as, `PROGRAM __docker-watch PID DIR` ([`crate::WATCH`]):
    /// the launcher's own.
    pub program: PathBuf,
}

/// Where the gateway keeps its files. All in a directory the project's sandboxes hide and no
/// other project's sandbox mounts; the launcher's layout of the state directory names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The project's state directory: what a sweep finds is recorded there for the audit.
    pub state_dir: PathBuf,
    /// The gateway's directory (the filter's too): its sockets are made here, and the watcher
    /// is handed it.
    pub dir: PathBuf,
    /// The sessions' journals.
    pub sessions: PathBuf,
    /// Where pulls keep their blobs until the daemon has loaded them.
    pub pulls: PathBuf,
    /// The gateway's log (and its watcher's).
    pub log: PathBuf,
    /// The empty file bound over what a container must not see.
    pub empty: PathBuf,
}

/// The project's filter, on the host's loopback at `port`.
pub struct Filter {
    pub port: u16,
    pub reach: Reach,
}

/// How the project's containers reach the filter (`egress.rs` says why).
pub enum Reach {
    /// The builtin filter: each network's listener is lent to it by this function.
    Lend(Box<Lender>),
    /// Squid: the gateway relays to squid's port on loopback.
    Relay,
}

/// Lends a listener to the builtin filter and returns the lease: the filter serves the
/// listener while the lease is open (the launcher's `ocsb_egress::builtin::lend`).
pub type Lender = dyn Fn(&TcpListener) -> Result<UnixStream, String> + Send + Sync;

#[cfg(test)]
impl Paths {
    /// The gateway's files in the state directory `root`, for tests (the launcher's layout
    /// names them in the product).
    pub(crate) fn under(root: &std::path::Path) -> Paths {
        let dir = root.join("gateway");
        Paths {
            state_dir: root.to_path_buf(),
            sessions: dir.join("sessions"),
            pulls: dir.join("pulls"),
            log: dir.join("gateway.log"),
            empty: dir.join("empty"),
            dir,
        }
    }
}
