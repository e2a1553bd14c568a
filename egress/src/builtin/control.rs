//! The control socket of the `serve` process: one JSON line in each direction.
//!
//! Commands: `status`, `reload`, `stop`. *Why a socket and not only signals*: a reload must tell
//! the caller whether the new rules were taken or refused (and why), which a signal cannot.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};

/// Send one command and read the one-line JSON answer (sync; used by `up`, `down`, `status`).
pub fn request(socket: &Path, command: &str, timeout: Duration) -> Result<Value> {
    let mut s = UnixStream::connect(socket)
        .map_err(|e| Error::io("cannot connect to the filter's control socket", socket, e))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    s.write_all(format!("{command}\n").as_bytes())
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
