//! A unix socket a launcher serves a sandbox through (the Docker gateway's, the ssh-agent
//! relay's): listening in the project's private egress directory, which its sandboxes see
//! hidden and no other project's sandbox mounts, so that the only way in is the bind the
//! launcher makes.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use super::error::{Error, Result};

/// A socket listening, and what stops it.
pub struct Listening {
    pub listener: UnixListener,
    pub closer: Closer,
}

/// Stops a socket's server: [`Closer::close`] (or its drop) shuts the listener down, which wakes
/// an accept loop blocked on it (a connect by the socket's path fails for a path over the 108
/// bytes of a socket address), and removes the socket while it is still the one listened on.
pub struct Closer {
    socket: PathBuf,
    /// The socket's inode: its server removes its own socket only, whatever took the name since.
    inode: u64,
    wake: Option<std::os::fd::OwnedFd>,
}

impl Closer {
    /// Where the socket listens.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Shuts the listener down and removes the socket; once.
    pub fn close(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let Some(wake) = self.wake.take() else { return };
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&wake),
            nix::sys::socket::Shutdown::Both,
        );
        if std::fs::symlink_metadata(&self.socket).is_ok_and(|m| m.ino() == self.inode) {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.close();
    }
}

/// Listens on `<dir>/<prefix>-<pid>-<nonce>.sock` (the first 8 characters of `nonce`, random
/// text). Each start serves a socket of its own, so the name is fresh; sockets of `prefix`
/// that killed launchers left there are removed when nothing answers on them. The address goes
/// through the directory's descriptor, so a long home cannot pass the 108-byte limit of a
/// socket address (a connect by the socket's path can fail for that reason: wake a listener by
/// shutting it down).
pub fn listen(dir: &Path, prefix: &str, nonce: &str) -> Result<Listening> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| Error::io("open", dir, e))?;
    let via = |name: &str| PathBuf::from(format!("/proc/self/fd/{}/{name}", fd.as_raw_fd()));
    let head = format!("{prefix}-");
    let stale = std::fs::read_dir(dir).into_iter().flatten().flatten().take(256).filter(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with(&head) && name.ends_with(".sock") && e.file_type().is_ok_and(|t| t.is_socket())
    });
    for e in stale {
        let path = via(&e.file_name().to_string_lossy());
        if UnixStream::connect(&path).is_err_and(|err| err.kind() == std::io::ErrorKind::ConnectionRefused) {
            let _ = std::fs::remove_file(&path);
        }
    }
    let name = format!("{prefix}-{}-{}.sock", std::process::id(), nonce.get(..8).unwrap_or_default());
    let socket = dir.join(&name);
    let listener = UnixListener::bind(via(&name)).map_err(|e| Error::io("listen on", &socket, e))?;
    let inode = std::fs::symlink_metadata(via(&name)).map_err(|e| Error::io("inspect", &socket, e))?.ino();
    let wake = listener.try_clone().map_err(|e| Error::io("duplicate the listener of", &socket, e))?;
    Ok(Listening { listener, closer: Closer { socket, inode, wake: Some(wake.into()) } })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket answers at its name; one a dead launcher left is removed, one that answers
    /// and another server's are kept.
    #[test]
    fn a_fresh_socket_and_what_dead_launchers_left() {
        let d = tempfile::tempdir().unwrap();
        let dead = d.path().join("relay-1-aaaaaaaa.sock");
        drop(UnixListener::bind(&dead).unwrap());
        let other = d.path().join("other-1-aaaaaaaa.sock");
        drop(UnixListener::bind(&other).unwrap());
        let alive = listen(d.path(), "relay", "bbbbbbbbcccc").unwrap();
        assert!(!dead.exists(), "a dead launcher's socket is removed");
        assert!(other.exists(), "another server's name is not touched");
        let mut again = listen(d.path(), "relay", "dddddddd").unwrap();
        let socket = alive.closer.socket().to_path_buf();
        assert!(socket.exists(), "a socket that answers stays");
        assert!(socket.file_name().unwrap().to_string_lossy().ends_with("-bbbbbbbb.sock"));
        UnixStream::connect(again.closer.socket()).unwrap();
        // Closing wakes a blocked accept and removes the socket.
        let listener = again.listener.try_clone().unwrap();
        let waiting = std::thread::spawn(move || listener.accept().map(|_| ()));
        std::thread::sleep(std::time::Duration::from_millis(100));
        let gone = again.closer.socket().to_path_buf();
        again.closer.close();
        let _ = waiting.join().unwrap();
        assert!(!gone.exists());
        drop(alive);
        assert!(!socket.exists(), "dropped: removed");
    }
}
