//! Whether the user can reach the Docker daemon the gateway forwards to, and what to say when
//! they cannot: the same cause and fix at the start of a sandbox, from `ocsb doctor`, and in
//! the gateway's answer to the agent's Docker client.
//!
//! *Why*: the gateway runs as the user. A user who may not open the daemon's socket (not in
//! its group) otherwise got a closed connection inside the sandbox, which the Docker CLI
//! reports as a refused API version (its ping failed, so it falls back to its newest) or a bare
//! `EOF`, while the cause was written only to a log the agent cannot read.

use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a ping may take: a daemon that does not answer within it is reported as such.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The daemon at `socket` could not be reached, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    pub socket: PathBuf,
    pub cause: Cause,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The socket's permissions keep the user out; `group` owns the socket (Docker's packages
    /// make it `docker`), `None` when it is root's or has no name.
    Denied { group: Option<String> },
    /// No daemon listens there (it is stopped, or the socket is gone).
    NotRunning,
    /// Something else: the error as the system or the socket's answer gave it.
    Other(String),
}

impl Unreachable {
    /// The cause of a failed connection to `socket`.
    pub fn of_connect(socket: &Path, e: &io::Error) -> Unreachable {
        let cause = match e.kind() {
            io::ErrorKind::PermissionDenied => Cause::Denied { group: group_of(socket) },
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => Cause::NotRunning,
            _ => Cause::Other(e.to_string()),
        };
        Unreachable { socket: socket.to_path_buf(), cause }
    }

    /// `cannot reach the Docker daemon at /var/run/docker.sock: permission denied`.
    pub fn what(&self) -> String {
        let why = match &self.cause {
            Cause::Denied { .. } => "permission denied",
            Cause::NotRunning => "no daemon is listening there",
            Cause::Other(e) => e,
        };
        format!("cannot reach the Docker daemon at {}: {why}", self.socket.display())
    }

    /// What the user does about it; every fix ends with the way to go without Docker.
    pub fn fix(&self) -> String {
        let how = match &self.cause {
            Cause::Denied { group: Some(g) } if g != "root" => {
                format!("add yourself to the group {g} (sudo usermod -aG {g} $USER, then log in again)")
            }
            Cause::Denied { .. } => {
                format!("ask the machine's administrator for access to {}", self.socket.display())
            }
            Cause::NotRunning => "start the Docker daemon (sudo systemctl start docker)".to_string(),
            Cause::Other(_) => "check that `docker version` answers outside the sandbox".to_string(),
        };
        format!("{how} or set OCSB_DOCKER=0")
    }

    /// [`Unreachable::what`] and [`Unreachable::fix`] in one sentence.
    pub fn message(&self) -> String {
        format!("{}; {}", self.what(), self.fix())
    }

    /// The Docker-style error body (`{"message": …}`), which the Docker CLI prints as it is.
    pub fn body(&self) -> String {
        serde_json::json!({ "message": format!("ocsb: the Docker gateway {}", self.message()) }).to_string()
    }
}

/// A connection to the daemon at `socket`, or why there is none.
pub fn connect(socket: &Path) -> Result<UnixStream, Unreachable> {
    UnixStream::connect(socket).map_err(|e| Unreachable::of_connect(socket, &e))
}

/// `GET /_ping` on the daemon at `socket`: it must answer `200 OK`, as a Docker daemon does.
pub fn ping(socket: &Path) -> Result<(), Unreachable> {
    let mut s = connect(socket)?;
    let other = |what: String| Unreachable { socket: socket.to_path_buf(), cause: Cause::Other(what) };
    let answer = (|| -> io::Result<Vec<u8>> {
        s.set_read_timeout(Some(PING_TIMEOUT))?;
        s.set_write_timeout(Some(PING_TIMEOUT))?;
        s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")?;
        let mut bytes = Vec::new();
        s.take(64 * 1024).read_to_end(&mut bytes)?;
        Ok(bytes)
    })()
    .map_err(|e| other(format!("no answer to a ping: {e}")))?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split_whitespace().nth(1).unwrap_or_default();
    if status == "200" {
        return Ok(());
    }
    let first = text.lines().next().unwrap_or("nothing").trim();
    Err(other(format!("a ping was answered with {first:?}, not 200")))
}

/// The name of the group that owns `socket`.
fn group_of(socket: &Path) -> Option<String> {
    let gid = std::fs::metadata(socket).ok()?.gid();
    nix::unistd::Group::from_gid(gid.into()).ok().flatten().map(|g| g.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(cause: Cause) -> Unreachable {
        Unreachable { socket: "/var/run/docker.sock".into(), cause }
    }

    #[test]
    fn each_cause_names_its_fix_and_the_way_without_docker() {
        assert_eq!(
            at(Cause::Denied { group: Some("docker".into()) }).message(),
            "cannot reach the Docker daemon at /var/run/docker.sock: permission denied; add yourself to the \
             group docker (sudo usermod -aG docker $USER, then log in again) or set OCSB_DOCKER=0"
        );
        let root = at(Cause::Denied { group: Some("root".into()) }).fix();
        assert!(!root.contains("usermod") && root.contains("/var/run/docker.sock"), "{root}");
        assert!(at(Cause::NotRunning).fix().starts_with("start the Docker daemon"));
        for c in [Cause::NotRunning, Cause::Other("x".into()), Cause::Denied { group: None }] {
            assert!(at(c).fix().ends_with(" or set OCSB_DOCKER=0"));
        }
        let body: serde_json::Value =
            serde_json::from_str(&at(Cause::Denied { group: Some("docker".into()) }).body()).unwrap();
        assert!(body["message"].as_str().unwrap().starts_with("ocsb: the Docker gateway cannot reach"));
    }

    #[test]
    fn a_socket_nobody_listens_on_is_not_running_and_a_non_daemon_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        assert_eq!(ping(&path).unwrap_err().cause, Cause::NotRunning);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = c.read(&mut buf).unwrap();
            c.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n").unwrap();
        });
        let e = ping(&path).unwrap_err();
        server.join().unwrap();
        assert!(e.what().contains("HTTP/1.0 404 Not Found"), "{e:?}");
        drop(std::fs::remove_file(&path));
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(listener);
        assert_eq!(ping(&path).unwrap_err().cause, Cause::NotRunning, "a socket left behind");
    }
}
