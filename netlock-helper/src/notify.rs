//! sd_notify(3) without libsystemd: one datagram to `$NOTIFY_SOCKET` (path or `@abstract`).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. "READY=1\nSTATUS=...") if systemd asked for notifications. Errors are
/// ignored on purpose: a missing notification makes systemd time the unit out, which is visible.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    if let (Ok(sock), Ok(addr)) = (UnixDatagram::unbound(), addr) {
        let _ = sock.send_to_addr(state.as_bytes(), &addr);
    }
}
