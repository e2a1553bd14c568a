//! The launcher-owned pseudo-terminal. The sandbox never gets the host terminal: with it, a
//! process could push input into the user's shell (`TIOCSTI`, CVE-2017-5226) or paste from the
//! console (`TIOCLINUX`). Instead the command's session leader gets a pty slave as controlling
//! terminal and the launcher relays bytes between the host terminal and the pty master; window
//! size changes are forwarded. (seccomp also denies both ioctls.) What the relay passes to the
//! terminal goes through [`super::termfilter`].

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, SetArg, Termios};

use super::error::{Error, Result};
use super::sys;

pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Open a pty whose size matches the host terminal on stdin.
pub fn open() -> Result<Pty> {
    let ws = sys::get_winsize(0).ok();
    let r = nix::pty::openpty(ws.as_ref(), None).map_err(|e| {
        Error::kernel("opening a pty", e.into(), "check that /dev/ptmx and /dev/pts are usable")
    })?;
    for fd in [&r.master, &r.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
            .map_err(|e| Error::kernel("opening a pty", e.into(), "report this"))?;
    }
    Ok(Pty { master: r.master, slave: r.slave })
}

/// Puts the host terminal into raw mode; restores it on drop.
pub struct RawMode {
    saved: Option<Termios>,
}

impl RawMode {
    pub fn enter() -> RawMode {
        let stdin = io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            termios::cfmakeraw(&mut raw);
            let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        }
        RawMode { saved }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = termios::tcsetattr(io::stdin().as_fd(), SetArg::TCSAFLUSH, t);
        }
    }
}

fn write_all(fd: BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Relay until the pty master reports hang-up (every slave closed, i.e. the sandbox is gone).
/// `done` is polled so the loop also ends when the child is reaped elsewhere.
pub fn relay(master: &OwnedFd, done: &AtomicBool) {
    let _ = sys::watch_winch();
    let stdin = io::stdin();
    let mut stdin_open = true;
    let mut buf = [0u8; 8192];
    let mut filter = super::termfilter::Filter::default();
    let mut filtered = Vec::with_capacity(buf.len());
    loop {
        if sys::winch_pending()
            && let Ok(ws) = sys::get_winsize(0)
        {
            let _ = sys::set_winsize(master.as_raw_fd(), &ws);
        }
        let mut fds = vec![PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        if stdin_open {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(200u16)) {
            Ok(0) if done.load(Ordering::Relaxed) => return,
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let m = fds[0].revents().unwrap_or(PollFlags::empty());
        let s = fds.get(1).and_then(|f| f.revents()).unwrap_or(PollFlags::empty());
        if m.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            match nix::unistd::read(master.as_fd(), &mut buf) {
                Ok(0) | Err(nix::errno::Errno::EIO) => return,
                Ok(n) => {
                    filtered.clear();
                    filter.push(&buf[..n], &mut filtered);
                    let mut out = io::stdout().lock();
                    let _ = out.write_all(&filtered);
                    let _ = out.flush();
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return,
            }
        }
        if s.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) {
            match nix::unistd::read(stdin.as_fd(), &mut buf) {
                Ok(0) | Err(_) => stdin_open = false,
                Ok(n) => {
                    if write_all(master.as_fd(), &buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
