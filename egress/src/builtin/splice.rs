//! Zero-copy CONNECT relay with splice(2): socket → pipe → socket, per direction.
//!
//! *Why*: a tunnel copies every byte twice through user space with `copy_bidirectional`; on a
//! small machine the proxy then competes with the agent for CPU. splice moves pages between the
//! sockets inside the kernel (measured in `benches/proxy.rs`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

const CHUNK: usize = 1 << 20;

/// A thin wrapper around `splice(2)` between two descriptors, non-blocking.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain syscall on descriptors owned by the caller for the duration of the call; no
    // offsets (both ends are sockets or pipes), no memory is passed.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)?;
    // A bigger pipe means fewer syscalls per MB; failure (limits) just keeps the default.
    // SAFETY: fcntl on a descriptor we own; F_SETPIPE_SZ takes an int argument.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, CHUNK as libc::c_int) };
    Ok((r, w))
}

/// Move bytes from `src` to `dst` until EOF, then half-close `dst`. Returns the byte count;
/// `moved` is called whenever bytes moved (the tunnel's idle clock).
async fn one_way(src: &TcpStream, dst: &TcpStream, moved: &(dyn Fn() + Sync)) -> io::Result<u64> {
    let (pr, pw) = pipe()?;
    let mut total = 0u64;
    loop {
        let n = loop {
            src.readable().await?;
            match src.try_io(Interest::READABLE, || splice(src.as_raw_fd(), pw.as_raw_fd(), CHUNK)) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            let _ = nix::sys::socket::shutdown(dst.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            return Ok(total);
        }
        let mut left = n;
        while left > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || splice(pr.as_raw_fd(), dst.as_raw_fd(), left)) {
                Ok(m) => {
                    left -= m;
                    total += m as u64;
                    moved();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Relay both directions; returns (client → server, server → client) bytes.
pub async fn relay(
    client: &TcpStream,
    server: &TcpStream,
    moved: &(dyn Fn() + Sync),
) -> io::Result<(u64, u64)> {
    tokio::try_join!(one_way(client, server, moved), one_way(server, client, moved))
}
