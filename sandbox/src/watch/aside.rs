//! Moving a plant aside, descriptor-relative: `<name>.ocsb-planted-<secs>[-n]` beside it.
//!
//! *Why the care*: the agent owns the tree it plants in. It could take the new name first (a
//! file, a directory that is not empty), make the directory read-only or unreadable, or swap a
//! directory on the way for a link to somewhere else; a plant left in place silently would be
//! run by the user's next git, and a rename done through a link would act outside the tree.
//! So the rename is `renameat2(RENAME_NOREPLACE)` relative to a directory descriptor (the
//! entry itself is renamed, never what a link names), and a directory of the user's own that
//! refuses is made accessible for its owner (it was changed during the session, or it would
//! hold no plant), then asked once more. Nothing is ever deleted.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{RenameFlags, renameat2};
use nix::sys::stat::{Mode, fchmod, fstat};

use crate::sys;

/// What marks a name as one the launcher moved a plant to.
pub const MARK: &str = ".ocsb-planted-";

/// Seconds since the epoch, the stamp of a move.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Renames the entry `name` of `dir` to `<name>.ocsb-planted-<stamp>[-n]` in the same
/// directory, a name nothing holds yet; returns the new name. When the agent took all those
/// names first (it can tell the time), a random suffix follows, which it cannot foresee.
pub fn move_aside_at(dir: BorrowedFd<'_>, name: &CStr, stamp: u64) -> io::Result<CString> {
    for n in 0..116 {
        let suffix = match n {
            0 => format!("{MARK}{stamp}"),
            1..100 => format!("{MARK}{stamp}-{n}"),
            _ => format!("{MARK}{stamp}-{:016x}", random()?),
        };
        let mut new = name.to_bytes().to_vec();
        new.extend_from_slice(suffix.as_bytes());
        let new = CString::new(new).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        match owner_may(dir, || renameat2(dir, name, dir, new.as_c_str(), RenameFlags::RENAME_NOREPLACE)) {
            Ok(()) => return Ok(new),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("every name to move it to is taken"))
}

fn random() -> io::Result<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// Runs `op`, a change of the directory `dir`; if that is refused (`EACCES`) and `dir` is the
/// user's own, makes it writable for its owner and runs `op` once more.
pub fn owner_may<T>(dir: BorrowedFd<'_>, mut op: impl FnMut() -> nix::Result<T>) -> nix::Result<T> {
    match op() {
        Err(Errno::EACCES) => {
            let st = fstat(dir)?;
            if st.st_uid != nix::unistd::geteuid().as_raw() {
                return Err(Errno::EACCES);
            }
            fchmod(dir, Mode::from_bits_truncate((st.st_mode & 0o7777) | 0o700))?;
            op()
        }
        r => r,
    }
}

/// Opens the directory `path` (relative to `at`, resolved with `resolve`, the last component
/// never a link) for reading. A directory of the user's own that refuses it (the agent's
/// `chmod 000`) is opened without access (`O_PATH`), made accessible for its owner through
/// that descriptor, and opened again: the mode changed is that of the very directory opened,
/// whatever meanwhile became of its name.
pub fn open_dir(at: Option<BorrowedFd<'_>>, path: &Path, resolve: u64) -> io::Result<OwnedFd> {
    let open = |flags: i32| sys::openat2(at, path, flags | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0, resolve);
    match open(libc::O_RDONLY) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            let fd = open(libc::O_PATH)?;
            let st = fstat(fd.as_fd())?;
            if st.st_uid != nix::unistd::geteuid().as_raw() {
                return Err(e);
            }
            // An `O_PATH` descriptor takes no `fchmod`; its `/proc/self/fd` link names the same
            // directory, whatever its path is now.
            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
            std::fs::set_permissions(proc, std::fs::Permissions::from_mode((st.st_mode & 0o7777) | 0o700))?;
            open(libc::O_RDONLY)
        }
        r => r,
    }
}

/// `move_aside_at` for a path: its directory is opened without following a link at its end.
pub fn move_aside(from: &Path) -> io::Result<std::path::PathBuf> {
    let (Some(dir), Some(name)) = (from.parent(), from.file_name()) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let fd = open_dir(None, dir, 0)?;
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let new = move_aside_at(fd.as_fd(), &name, now_secs())?;
    Ok(dir.join(std::ffi::OsStr::from_bytes(new.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Never over what holds the name; a link is moved, not followed; a read-only or closed
    /// directory of the user's own still gives its plant up.
    #[test]
    fn moves_aside_beside_never_over_anything_nor_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::create_dir(d.join(".git")).unwrap();
        fs::write(d.join(format!(".git{MARK}7")), "taken").unwrap();
        let fd = open_dir(None, d, 0).unwrap();
        let new = move_aside_at(fd.as_fd(), c".git", 7).unwrap();
        assert_eq!(new.to_str().unwrap(), format!(".git{MARK}7-1"));
        assert!(d.join(format!(".git{MARK}7-1")).is_dir());
        assert_eq!(fs::read_to_string(d.join(format!(".git{MARK}7"))).unwrap(), "taken");

        // Every name of the scheme taken: a random one.
        fs::create_dir(d.join(".git")).unwrap();
        for n in 0..100 {
            let taken = if n == 0 { format!(".git{MARK}8") } else { format!(".git{MARK}8-{n}") };
            fs::write(d.join(taken), "").unwrap();
        }
        let new = move_aside_at(fd.as_fd(), c".git", 8).unwrap();
        let new = new.to_str().unwrap();
        assert!(new.len() == format!(".git{MARK}8-").len() + 16 && d.join(new).is_dir(), "{new}");

        fs::create_dir(outside.path().join("HEAD")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join(".git")).unwrap();
        let to = move_aside(&d.join(".git")).unwrap();
        assert!(to.symlink_metadata().unwrap().file_type().is_symlink());
        assert!(outside.path().join("HEAD").is_dir(), "followed the link");

        for mode in [0o555, 0o000] {
            let ro = d.join(format!("ro{mode:o}"));
            fs::create_dir_all(ro.join(".git")).unwrap();
            fs::set_permissions(&ro, fs::Permissions::from_mode(mode)).unwrap();
            let to = move_aside(&ro.join(".git")).unwrap();
            assert!(to.is_dir() && !ro.join(".git").exists(), "{mode:o}");
        }
    }
}
