//! The control socket of the `serve` process: its protocol, and the client the lifecycle uses.
//!
//! One line in each direction: the request as its bare name (`status\n`, `reload\n`, `stop\n`,
//! `serve\n` with a descriptor: [`super::lend`]), the answer as one JSON object. The server ([`super::serve`]) and the client below share the
//! types here, so a field is named, typed and parsed in one place only.
//!
//! *Why a socket and not only signals*: a reload must tell the caller whether the new rules were
//! taken or refused (and why), which a signal cannot. *Why bare names on the wire and the
//! answers' field names kept as they are*: a filter started by an older `ocsb` keeps running
//! across an upgrade, and the newer `ocsb egress up|down|status` must still understand it.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::de::{DeserializeOwned, IntoDeserializer};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a client may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Request {
    /// Who is running, where, with which rules: [`StatusAnswer`].
    Status,
    /// Re-read and compile the rule layers; swap only if they compile: [`ReloadAnswer`].
    Reload,
    /// Stop serving and exit: [`Ack`].
    Stop,
    /// Accept on the listening socket sent with this line for as long as the connection stays
    /// open ([`super::lend`]): [`Ack`].
    Serve,
}

impl Request {
    /// The request's line on the wire (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Reload => "reload",
            Request::Stop => "stop",
            Request::Serve => "serve",
        }
    }

    /// Read one request line. The error is the answer's text for an unknown request.
    pub fn parse(line: &str) -> std::result::Result<Self, String> {
        let word = line.trim();
        let de: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = word.into_deserializer();
        Request::deserialize(de).map_err(|_| format!("unknown command {word:?}"))
    }
}

/// The answer to [`Request::Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub ok: bool,
    /// Always `builtin`: squid has no control socket.
    pub backend: String,
    pub pid: u32,
    /// The addresses the proxy accepts on.
    pub listen: Vec<SocketAddr>,
    /// [`ocsb_policy::egress::Policy::hash`] of the rules in force.
    pub policy_hash: String,
    /// Unix time (seconds) the process started.
    pub started: u64,
    pub open_connections: usize,
    /// The fingerprint of the sources the filter was built from ([`BUILD`]); empty from a
    /// filter that predates it.
    #[serde(default)]
    pub build: String,
}

/// The fingerprint of the sources this filter was built from (version, then a hash of this
/// crate's and the policy crate's sources and the lock file; see `build.rs`).
pub const BUILD: &str = env!("OCSB_EGRESS_BUILD");

/// The answer to [`Request::Reload`]: `ok` with the new hash, or refused with the reason (the
/// old rules stay in force).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadAnswer {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The refusal comes from the rule files (file and line in `error`), not from I/O.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_error: Option<bool>,
}

impl ReloadAnswer {
    pub fn taken(hash: String) -> Self {
        Self { ok: true, hash: Some(hash), error: None, input_error: None }
    }
    pub fn refused(error: String, input_error: bool) -> Self {
        Self { ok: false, hash: None, error: Some(error), input_error: Some(input_error) }
    }
}

/// The answer to [`Request::Stop`], and to a request the server does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Ask the filter who it is (sync; used by `up` and `status`).
pub fn status(socket: &Path, timeout: Duration) -> Result<StatusAnswer> {
    call(socket, Request::Status, timeout)
}

/// [`status`] of the filter whose control socket is in the directory `dir`, opened already:
/// the socket is reached through that descriptor, whatever is renamed meanwhile. `None` when
/// nothing accepts there (no filter runs, or one is starting).
pub fn status_in(dir: std::os::fd::BorrowedFd<'_>, timeout: Duration) -> Option<Result<StatusAnswer>> {
    use std::os::fd::AsRawFd;
    let socket = format!("/proc/self/fd/{}/{}", dir.as_raw_fd(), crate::paths::CONTROL_SOCKET);
    let s = UnixStream::connect(&socket).ok()?;
    Some(exchange(s, Path::new(&socket), Request::Status, timeout))
}

/// Ask the filter to re-read its rules (sync; used by `up`).
pub fn reload(socket: &Path, timeout: Duration) -> Result<ReloadAnswer> {
    call(socket, Request::Reload, timeout)
}

/// Ask the filter to exit (sync; used by `down`).
pub fn stop(socket: &Path, timeout: Duration) -> Result<Ack> {
    call(socket, Request::Stop, timeout)
}

/// Send one request and read its one-line answer as `A`.
fn call<A: DeserializeOwned>(socket: &Path, request: Request, timeout: Duration) -> Result<A> {
    let s = UnixStream::connect(socket)
        .map_err(|e| Error::io("cannot connect to the filter's control socket", socket, e))?;
    exchange(s, socket, request, timeout)
}

/// [`call`] on a connection made: the request, then its one-line answer as `A`.
fn exchange<A: DeserializeOwned>(
    mut s: UnixStream,
    socket: &Path,
    request: Request,
    timeout: Duration,
) -> Result<A> {
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    s.write_all(format!("{}\n", request.as_str()).as_bytes())
        .map_err(|e| Error::io("cannot write to the control socket", socket, e))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| Error::io("no answer on the control socket", socket, e))?;
    serde_json::from_str(&line).map_err(|e| {
        Error::state(
            format!("unexpected answer on {}: {e}: {line:?}", socket.display()),
            "run `ocsb egress down` and `ocsb egress up`",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_travel_as_their_serde_names() {
        for r in [Request::Status, Request::Reload, Request::Stop, Request::Serve] {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            assert_eq!(Request::parse(&format!("{}\n", r.as_str())), Ok(r));
        }
        assert_eq!(Request::parse("restart\n"), Err("unknown command \"restart\"".to_string()));
    }

    #[test]
    fn answers_keep_the_wire_format_of_earlier_filters() {
        let st: StatusAnswer = serde_json::from_str(
            r#"{"ok":true,"backend":"builtin","pid":7,"listen":["127.0.0.1:3128"],"policy_hash":"h","started":1,"open_connections":0}"#,
        )
        .unwrap();
        assert_eq!(st.listen, vec!["127.0.0.1:3128".parse::<SocketAddr>().unwrap()]);
        assert_eq!(
            serde_json::to_string(&ReloadAnswer::taken("h".into())).unwrap(),
            r#"{"ok":true,"hash":"h"}"#
        );
        assert_eq!(
            serde_json::to_string(&ReloadAnswer::refused("bad".into(), true)).unwrap(),
            r#"{"ok":false,"error":"bad","input_error":true}"#
        );
        assert_eq!(serde_json::to_string(&Ack { ok: true, error: None }).unwrap(), r#"{"ok":true}"#);
    }
}
