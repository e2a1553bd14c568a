//! A unix socket a launcher serves a sandbox through (the Docker gateway's, the ssh-agent
//! relay's): listening in the project's private egress directory, which its sandboxes see
//! hidden and no other project's sandbox mounts, so that the only way in is the bind the
//! launcher makes.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use super::error::{Error, Result};

/// A socket listening at [`Listening::socket`].
pub struct Listening {
    pub listener: UnixListener,
    pub socket: PathBuf,
    /// The socket's inode: its server removes its own socket only, whatever took the name since.
    pub inode: u64,
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
    Ok(Listening { listener, socket, inode })
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
        let again = listen(d.path(), "relay", "dddddddd").unwrap();
        assert!(alive.socket.exists(), "a socket that answers stays");
        assert!(alive.socket.file_name().unwrap().to_string_lossy().ends_with("-bbbbbbbb.sock"));
        UnixStream::connect(&again.socket).unwrap();
        assert_ne!(alive.inode, again.inode);
    }
}
