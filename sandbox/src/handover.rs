//! How stage 2 gets its request and its stdin: over a unix socket pair that is its fd 0.
//!
//! *Why not the environment*: stage 2 is started before the launcher has finished checking the
//! project ([`crate::launch::Early`]), so that the slow part of its set-up (the landlock port
//! rules) runs beside those checks; the mount plan does not exist yet when it is started. The
//! set-gid shim passes fds 0 to 2 on and closes the rest, so fd 0 is the one channel that
//! crosses it besides the environment, and a socket pair is known to nobody but its two ends.
//!
//! *Why stdin is checked here*: the shim refuses a network socket on fds 0 to 2 (one made
//! before the switch to the netlock group is not locked). The stdin that arrives here never
//! passed the shim, so stage 2 applies the same rule to it.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage, getsockname,
    recvmsg, sendmsg,
};

use super::error::{Error, Result};
use super::sys;

/// The largest request accepted (a home with many entries makes a large plan).
const MAX_REQUEST: u64 = 64 << 20;

/// The launcher's side: stdin for the command first (with one byte, `i`), then the request
/// (its length first: the channel stays open for [`leave`]).
pub fn send(chan: &mut UnixStream, stdin: BorrowedFd<'_>, request: &[u8]) -> std::io::Result<()> {
    let fds = [stdin.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(chan.as_raw_fd(), &[IoSlice::new(b"i")], &cmsg, MsgFlags::empty(), None)?;
    chan.write_all(&(request.len() as u64).to_le_bytes())?;
    chan.write_all(request)
}

/// The launcher's last word, as it lets go: descriptors for stage 2 to close as it exits. Stage
/// 2 never reads them; they stay queued on its end of the channel, and the kernel closes them
/// when that end goes, with stage 2's exit, which nobody waits for. *Why*: the last close of an
/// inotify instance that holds watches waits for the kernel to free them (a grace period, 8 to
/// 12 ms measured per instance), and the launcher's exit would wait for it. A stage 2 that is
/// gone already (`EPIPE`) gets nothing: they are closed here.
pub fn leave(chan: &UnixStream, fds: Vec<OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let _ = sendmsg::<()>(chan.as_raw_fd(), &[IoSlice::new(b"l")], &cmsg, MsgFlags::MSG_NOSIGNAL, None);
}

/// The launcher's side, before [`send`] and at most once: the mounts the plan will begin with
/// ([`crate::plan::build_prefix`], as JSON), for an isolated sandbox's pid 1 to make while
/// the launcher is still checking. Only a speed-up: stage 2 uses them only where the plan it is
/// then sent begins with the same mounts.
pub fn send_prefix(chan: &mut UnixStream, prefix: &[u8]) -> std::io::Result<()> {
    chan.write_all(b"p")?;
    chan.write_all(&(prefix.len() as u64).to_le_bytes())?;
    chan.write_all(prefix)
}

/// What arrives on stage 2's fd 0.
#[derive(Debug)]
pub enum Message {
    /// [`send_prefix`]'s mounts.
    Prefix(Vec<u8>),
    /// The command's stdin and the request ([`send`]).
    Request(OwnedFd, Vec<u8>),
}

/// Stage 2's side, on fd 0: the next message; `None` when the launcher gave up before sending
/// the request (it closed its end: it reports why itself).
pub fn receive(chan: &mut UnixStream) -> Result<Option<Message>> {
    let err =
        |e: std::io::Error| Error::kernel("reading the sandbox request from the launcher", e, "report this");
    let (tag, mut fds) = match tagged(chan).map_err(err)? {
        None => return Ok(None),
        Some(t) => t,
    };
    match (&tag, fds.len()) {
        (b"p", 0) => Ok(Some(Message::Prefix(sized(chan).map_err(err)?))),
        (b"i", 1) => {
            let request = sized(chan).map_err(err)?;
            let stdin = fds.remove(0);
            refuse_network_socket(stdin.as_fd())?;
            Ok(Some(Message::Request(stdin, request)))
        }
        _ => Err(err(std::io::Error::other("a message that is neither the mounts ahead nor the request"))),
    }
}

/// One tag byte and the descriptors that came with it; `None` at the end of the stream.
fn tagged(chan: &mut UnixStream) -> std::io::Result<Option<([u8; 1], Vec<OwnedFd>)>> {
    let mut tag = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; PASSED_AT_ONCE]);
    let mut iov = [IoSliceMut::new(&mut tag)];
    let msg = recvmsg::<()>(chan.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            fds.extend(raw.into_iter().map(sys::adopt_received_fd));
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(std::io::Error::other(
            "descriptors were cut off (the open files limit: raise `ulimit -n`)",
        ));
    }
    Ok((msg.bytes > 0).then_some((tag, fds)))
}

/// Bytes sent after their length ([`MAX_REQUEST`] at most).
fn sized(chan: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let len = word(chan)?;
    if len > MAX_REQUEST {
        return Err(std::io::Error::other(format!("a request of {len} bytes")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    chan.take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::Error::other("the request ended early"));
    }
    Ok(bytes)
}

fn word(chan: &mut UnixStream) -> std::io::Result<u64> {
    let mut w = [0u8; 8];
    chan.read_exact(&mut w).map(|()| u64::from_le_bytes(w))
}

/// The most descriptors sent with one message (the kernel's limit is 253).
const PASSED_AT_ONCE: usize = 200;

/// pid 1's word to stage 2 once it has made the mounts ahead (`made`) or could not, with its
/// own mount namespace when it has one. *Why the namespace*: stage 2 keeps it open, so that the
/// namespace is torn down when stage 2 exits, after the launcher has let go, not as pid 1
/// exits, which is on the way to the command's exit status.
pub fn say_made(link: &mut UnixStream, made: bool, ns: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
    let word: &[u8] = if made { b"y" } else { b"n" };
    let raw: Vec<RawFd> = ns.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(link.as_raw_fd(), &[IoSlice::new(word)], cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// Stage 2's side of [`say_made`]: whether pid 1 made its mounts ahead, and its mount
/// namespace; nothing made when it died.
pub fn heard_made(link: &mut UnixStream) -> (bool, Option<OwnedFd>) {
    match tagged(link) {
        Ok(Some((word, mut fds))) => (word == *b"y", fds.pop()),
        _ => (false, None),
    }
}

/// What stage 2 passes to a pid 1 that began mounting before the request: the command's
/// stdin, how many of the plan's mounts pid 1 keeps of those it made ahead, the request, and
/// a clone of the host source of every bind after those, in the plan's order.
pub struct Passed {
    pub stdin: OwnedFd,
    pub kept: usize,
    pub request: Vec<u8>,
    pub sources: Vec<OwnedFd>,
}

/// Stage 2's side of [`Passed`], on the socket pair it shares with pid 1.
pub fn pass(link: &mut UnixStream, p: &Passed) -> std::io::Result<()> {
    let fds = [p.stdin.as_raw_fd()];
    sendmsg::<()>(
        link.as_raw_fd(),
        &[IoSlice::new(b"r")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    link.write_all(&(p.kept as u64).to_le_bytes())?;
    link.write_all(&(p.sources.len() as u64).to_le_bytes())?;
    link.write_all(&(p.request.len() as u64).to_le_bytes())?;
    link.write_all(&p.request)?;
    for chunk in p.sources.chunks(PASSED_AT_ONCE) {
        let raw: Vec<RawFd> = chunk.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        sendmsg::<()>(link.as_raw_fd(), &[IoSlice::new(b"s")], &cmsg, MsgFlags::MSG_NOSIGNAL, None)?;
    }
    Ok(())
}

/// pid 1's side of [`pass`]; `None` when stage 2 closed the pair without passing anything
/// (the launcher did not start the sandbox after all).
pub fn take(link: &mut UnixStream) -> Result<Option<Passed>> {
    let err = |e: std::io::Error| Error::kernel("reading the sandbox request from stage 2", e, "report this");
    let (tag, mut fds) = match tagged(link).map_err(err)? {
        None => return Ok(None),
        Some(t) => t,
    };
    if tag != *b"r" || fds.len() != 1 {
        return Err(err(std::io::Error::other("the first message is not the command's stdin")));
    }
    let kept = word(link).map_err(err)? as usize;
    let count = word(link).map_err(err)? as usize;
    let request = sized(link).map_err(err)?;
    let mut sources = Vec::with_capacity(count.min(1 << 16));
    while sources.len() < count {
        match tagged(link).map_err(err)? {
            Some((t, got)) if t == *b"s" && !got.is_empty() => sources.extend(got),
            _ => return Err(err(std::io::Error::other("the mounts' sources ended early"))),
        }
    }
    if sources.len() != count {
        return Err(err(std::io::Error::other("more mount sources than announced")));
    }
    Ok(Some(Passed { stdin: fds.remove(0), kept, request, sources }))
}

/// Stage 2's last word, on the same channel: the command's exit status, said before stage 2
/// exits. *Why*: the exit of the last process in the sandbox's mount namespace waits while the
/// kernel tears the namespace down (an RCU grace period: milliseconds), and the launcher has
/// nothing to wait for by then: pid 1 has exited and been reaped, and the kernel kills and
/// reaps everything else in its pid namespace before that. (With `OCSB_SANDBOX=0` there is no
/// pid namespace: what the command left running was never waited for, then as before.)
pub fn report(chan: &mut UnixStream, code: i32) {
    // The launcher that does not read it falls back to the exit status.
    let _ = chan.write_all(&code.to_le_bytes());
}

/// Stage 2's side, after [`report`]: wait until the launcher lets go of the hand-over (shuts
/// it down whole, or exits), at most `within`. *Why not a read*: what the launcher leaves on
/// the channel ([`leave`]) is not for reading; only the hang-up (`POLLHUP`, reported whether
/// asked for or not) says the launcher is done.
pub fn await_let_go(chan: &UnixStream, within: std::time::Duration) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut pfd = [PollFd::new(chan.as_fd(), PollFlags::empty())];
    let _ = poll(&mut pfd, PollTimeout::try_from(within).unwrap_or(PollTimeout::MAX));
}

/// The launcher's side: the status stage 2 reported; `None` when it exited without saying one
/// (it failed, and said why on stderr).
pub fn reported(chan: &mut UnixStream) -> Option<i32> {
    let mut code = [0u8; 4];
    chan.read_exact(&mut code).ok().map(|()| i32::from_le_bytes(code))
}

/// The shim's rule for what it passes on: no socket of a family other than unix. A socket
/// whose address cannot be read (`getsockname` fails other than with `ENOTSOCK`: an XDP
/// socket does) is refused too.
pub fn refuse_network_socket(fd: BorrowedFd<'_>) -> Result<()> {
    match getsockname::<SockaddrStorage>(fd.as_raw_fd()) {
        Ok(addr) if addr.family() == Some(AddressFamily::Unix) => Ok(()),
        Err(Errno::ENOTSOCK) => Ok(()),
        _ => Err(Error::refused(
            "the command's stdin is a network socket made outside the network lock",
            "give ocsb a terminal, a pipe, a file or a unix socket as stdin",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_and_stdin_arrive_whole_and_a_closed_launcher_is_none() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let big = vec![7u8; 3 << 20];
        let (r, w) = nix::unistd::pipe().unwrap();
        let sender = std::thread::spawn(move || send(&mut a, r.as_fd(), &big).map(|()| big.len()));
        let Some(Message::Request(stdin, request)) = receive(&mut b).unwrap() else { panic!("no request") };
        assert_eq!(request.len(), sender.join().unwrap().unwrap());
        assert!(request.iter().all(|x| *x == 7));
        // The received stdin is the pipe's read end.
        nix::unistd::write(&w, b"x").unwrap();
        let mut got = [0u8; 1];
        assert_eq!(nix::unistd::read(&stdin, &mut got).unwrap(), 1);

        let (a, mut b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(receive(&mut b).unwrap().is_none(), "the launcher gave up");
    }

    /// The mounts ahead come before the request, each whole; a second message that is
    /// neither is refused.
    #[test]
    fn the_mounts_ahead_then_the_request_arrive_in_order() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let (r, _w) = nix::unistd::pipe().unwrap();
        let sender = std::thread::spawn(move || {
            send_prefix(&mut a, &vec![3u8; 1 << 20]).unwrap();
            send(&mut a, r.as_fd(), b"request").unwrap();
            a.write_all(b"x").unwrap();
            a
        });
        let Some(Message::Prefix(p)) = receive(&mut b).unwrap() else { panic!("no prefix") };
        assert_eq!(p.len(), 1 << 20);
        let Some(Message::Request(_, req)) = receive(&mut b).unwrap() else { panic!("no request") };
        assert_eq!(req, b"request");
        let _a = sender.join().unwrap();
        assert!(receive(&mut b).is_err(), "an unknown message");
    }

    /// pid 1 gets the command's stdin, the request and every source, more than one message
    /// holds, in order; its word says whether it made its mounts, with its namespace.
    #[test]
    fn pid_1_takes_the_request_and_every_source_in_order() {
        let (mut s2, mut p1) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        let files: Vec<(OwnedFd, OwnedFd)> = (0..450).map(|_| nix::unistd::pipe().unwrap()).collect();
        let sources: Vec<OwnedFd> = files.iter().map(|(_, w)| w.try_clone().unwrap()).collect();
        let ns = std::fs::File::open("/proc/self/ns/mnt").unwrap();
        say_made(&mut p1, true, Some(ns.as_fd())).unwrap();
        let (made, held) = heard_made(&mut s2);
        assert!(made && held.is_some());
        let passed = Passed { stdin: r, kept: 7, request: b"req".to_vec(), sources };
        let sender = std::thread::spawn(move || pass(&mut s2, &passed).map(|()| s2));
        let got = take(&mut p1).unwrap().unwrap();
        let s2 = sender.join().unwrap().unwrap();
        assert_eq!((got.kept, got.request.as_slice(), got.sources.len()), (7, &b"req"[..], 450));
        for (i, (src, (r, _))) in got.sources.iter().zip(&files).enumerate() {
            nix::unistd::write(src, &[(i % 251) as u8]).unwrap();
            let mut b = [0u8; 1];
            nix::unistd::read(r, &mut b).unwrap();
            assert_eq!(b[0], (i % 251) as u8, "source {i} out of order");
        }
        nix::unistd::write(&w, b"x").unwrap();
        let mut b = [0u8; 1];
        assert_eq!(nix::unistd::read(&got.stdin, &mut b).unwrap(), 1);
        drop(s2);
        assert!(take(&mut p1).unwrap().is_none(), "stage 2 gone without passing anything");
        let (mut gone, mut s2) = UnixStream::pair().unwrap();
        say_made(&mut gone, false, None).unwrap();
        drop(gone);
        assert!(!heard_made(&mut s2).0);
        assert!(!heard_made(&mut s2).0, "pid 1 gone");
    }

    /// What the launcher leaves stays open while stage 2's end lives, and closes with it; a
    /// stage 2 that is gone takes nothing (and no `SIGPIPE`).
    #[test]
    fn what_the_launcher_leaves_closes_with_stage_2s_end() {
        let (launcher, stage2) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        leave(&launcher, vec![w]);
        drop(launcher);
        let mut fds = [nix::poll::PollFd::new(r.as_fd(), nix::poll::PollFlags::POLLIN)];
        assert_eq!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap(), 0, "still open");
        drop(stage2);
        let mut got = [0u8; 1];
        assert_eq!(nix::unistd::read(&r, &mut got).unwrap(), 0, "closed with stage 2's end");

        let (launcher, stage2) = UnixStream::pair().unwrap();
        drop(stage2);
        let (r, w) = nix::unistd::pipe().unwrap();
        leave(&launcher, vec![w]);
        assert_eq!(nix::unistd::read(&r, &mut got).unwrap(), 0, "dropped by the launcher");
    }

    #[test]
    fn a_reported_status_arrives_and_a_stage_2_gone_without_one_is_none() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        report(&mut a, 137);
        assert_eq!(reported(&mut b), Some(137));
        drop(a);
        assert_eq!(reported(&mut b), None);
    }

    /// Stage 2 waits past a half-close and past the status, and goes on once the launcher
    /// shuts the hand-over down whole, or is gone.
    #[test]
    fn stage_2_waits_for_the_launcher_to_let_go() {
        use std::time::{Duration, Instant};
        let (launcher, stage2) = UnixStream::pair().unwrap();
        launcher.shutdown(std::net::Shutdown::Write).unwrap();
        let t = Instant::now();
        await_let_go(&stage2, Duration::from_millis(300));
        assert!(t.elapsed() >= Duration::from_millis(250), "a half-close is no let-go");
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            launcher.shutdown(std::net::Shutdown::Both).unwrap();
            launcher
        });
        let t = Instant::now();
        await_let_go(&stage2, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "the let-go was not seen");
        drop(closer.join().unwrap());
        let (gone, stage2) = UnixStream::pair().unwrap();
        drop(gone);
        let t = Instant::now();
        await_let_go(&stage2, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "a launcher gone is a let-go");
    }

    #[test]
    fn a_network_socket_is_refused_as_stdin_and_a_unix_one_is_not() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = refuse_network_socket(tcp.as_fd()).unwrap_err().to_string();
        assert!(e.contains("network socket"), "{e}");
        let (u, _) = UnixStream::pair().unwrap();
        refuse_network_socket(u.as_fd()).unwrap();
        let f = std::fs::File::open("/dev/null").unwrap();
        refuse_network_socket(f.as_fd()).unwrap();

        // Through the hand-over, as stage 2 receives it.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        send(&mut a, tcp.as_fd(), b"{}").unwrap();
        assert!(receive(&mut b).unwrap_err().to_string().contains("network socket"));
    }
}
