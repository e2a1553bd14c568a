//! A listener lent to the running filter: the launcher of an isolated sandbox hands over the
//! listening socket that stage 2 made for `127.0.0.1:OCSB_EGRESS_PORT` inside the sandbox's
//! network namespace, and the filter accepts on it as on its own port, for as long as the
//! launcher keeps the control connection that carried it open.
//!
//! *Why*: relaying the proxy port puts a second hop (the launcher) in front of the filter on
//! every byte; a lent listener takes it away, so a tunnel from an isolated sandbox costs what
//! it costs from the host's network. *Why tied to the connection*: a socket keeps its network
//! namespace alive; when the sandbox ends, or its launcher is killed, the kernel closes the
//! connection and the filter lets the listener (and the namespace) go.
//!
//! On the wire: the request line `serve\n` with the descriptor in the same message
//! (`SCM_RIGHTS`); the answer is an [`Ack`]. Only a listening TCP socket is taken.
#![allow(unsafe_code)]

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockType, SockaddrLike, SockaddrStorage,
    getsockname, getsockopt, recvmsg, sendmsg, sockopt,
};

use super::control::{Ack, Request};
use crate::error::{Error, Result};

/// The longest request line a control connection may send.
const MAX_LINE: usize = 256;

/// Lends `listener` to the filter whose control socket is `socket`. The filter accepts on it
/// until the returned stream is dropped.
pub fn lend(socket: &Path, listener: &impl AsFd, timeout: Duration) -> Result<UnixStream> {
    let io = |what: &'static str| move |e: io::Error| Error::io(what, socket, e);
    let s = UnixStream::connect(socket).map_err(io("cannot connect to the filter's control socket"))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    let line = format!("{}\n", Request::Serve.as_str());
    let fds = [listener.as_fd().as_raw_fd()];
    sendmsg::<()>(
        s.as_raw_fd(),
        &[IoSlice::new(line.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| io("cannot write to the control socket")(e.into()))?;
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).map_err(io("no answer on the control socket"))?;
    let ack: Ack = serde_json::from_str(&answer).map_err(|e| {
        Error::state(
            format!("unexpected answer on {}: {e}: {answer:?}", socket.display()),
            "run `ocsb egress up`",
        )
    })?;
    match ack {
        Ack { ok: true, .. } => Ok(s),
        Ack { error, .. } => Err(Error::state(
            format!("the filter did not take the listener: {}", error.unwrap_or_default()),
            "run `ocsb egress down` and `ocsb egress up` (a filter started by an older ocsb cannot)",
        )),
    }
}

/// Reads a control connection's request line, and the first descriptor sent with it (any
/// other is closed at once).
pub(crate) async fn read_request(stream: &tokio::net::UnixStream) -> io::Result<(String, Option<OwnedFd>)> {
    let (mut line, mut fd) = (Vec::new(), None);
    while !line.contains(&b'\n') && line.len() < MAX_LINE {
        let (bytes, fds) =
            stream.async_io(tokio::io::Interest::READABLE, || receive(stream.as_raw_fd())).await?;
        if bytes.is_empty() {
            break;
        }
        line.extend_from_slice(&bytes);
        fd = fd.or(fds.into_iter().next());
    }
    Ok((String::from_utf8_lossy(&line).into_owned(), fd))
}

/// One `recvmsg` without waiting: the bytes and the descriptors that came with them.
fn receive(sock: RawFd) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = [0u8; MAX_LINE];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let flags = MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT;
        let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), flags)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: the kernel installed each of these descriptors in this process while
                // receiving the message just now; nothing else holds or will close them.
                fds.extend(raw.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        (msg.bytes, fds)
    };
    Ok((buf[..n].to_vec(), fds))
}

/// The lent descriptor as a listener, when it is one: a TCP socket (IPv4 or IPv6) in the
/// listening state. Anything else is refused with the reason.
pub(crate) fn listener(fd: OwnedFd) -> std::result::Result<tokio::net::TcpListener, String> {
    let listening = getsockopt(&fd, sockopt::AcceptConn).map_err(|e| format!("not a socket ({e})"))?;
    let stream = getsockopt(&fd, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let family = getsockname::<SockaddrStorage>(fd.as_raw_fd()).ok().and_then(|a| a.family());
    let inet = matches!(family, Some(AddressFamily::Inet | AddressFamily::Inet6));
    if !(listening && stream && inet) {
        return Err("only a listening TCP socket can be lent".into());
    }
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true).map_err(|e| e.to_string())?;
    tokio::net::TcpListener::from_std(std).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listening_tcp_socket_is_taken() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let l_addr = l.local_addr().unwrap();
            let keep = l.try_clone().unwrap();
            assert!(listener(OwnedFd::from(l)).is_ok());
            let connected = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            assert!(listener(OwnedFd::from(connected)).is_err());
            let tcp = std::net::TcpStream::connect(l_addr).unwrap();
            assert!(listener(OwnedFd::from(tcp)).is_err(), "a connected stream is not a listener");
            let path = std::env::temp_dir().join(format!("ocsb-lend-{}", std::process::id()));
            let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let _ = std::fs::remove_file(&path);
            assert!(listener(OwnedFd::from(unix)).is_err());
            let file = std::fs::File::open("/dev/null").unwrap();
            assert!(listener(OwnedFd::from(file)).is_err());
            drop(keep);
        });
    }
}
