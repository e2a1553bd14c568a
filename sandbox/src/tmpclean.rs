//! The private `/tmp` lives in `<state>/tmp`; files older than a week are removed on start so it
//! does not grow forever.
//!
//! The tree belongs to the agent, and a sandbox of the same project (`ocsb exec`) may be running
//! while another start cleans it, so the walk must not be steerable by swapping an entry for a
//! symlink between a check and a removal: every step is relative to a directory descriptor
//! opened with `O_NOFOLLOW` (`openat`, `fstatat(AT_SYMLINK_NOFOLLOW)`, `unlinkat`). A symlink is
//! removed as a link when old, never followed.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, open, openat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Deeper trees are left alone (each level holds a descriptor).
const MAX_DEPTH: usize = 64;

const DIR_FLAGS: OFlag =
    OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// Remove files (and then empty directories) under `dir` last modified before `now - max_age`.
/// Returns how many entries were removed. Errors on single entries are skipped: a file the
/// agent made unreadable must not stop the start.
pub fn clean(dir: &Path, max_age: Duration, now: SystemTime) -> usize {
    let Some(cutoff) = now.checked_sub(max_age) else { return 0 };
    let cutoff = cutoff.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let Ok(fd) = open(dir, DIR_FLAGS, Mode::empty()) else { return 0 };
    clean_dir(fd, cutoff, 0)
}

/// Remove everything beneath the directory `fd` (opened without following links), never
/// following a link on the way: a tree the agent could write is emptied in place.
/// Directories are made writable first (0700: they are the user's own), so a `chmod 555` the
/// agent left cannot keep entries in place.
pub fn clear(fd: OwnedFd) -> usize {
    clean_dir(fd, i64::MAX, 0)
}

fn clean_dir(fd: OwnedFd, cutoff: i64, depth: usize) -> usize {
    if cutoff == i64::MAX {
        let _ = nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700));
    }
    let Ok(mut d) = Dir::from_fd(fd) else { return 0 };
    let names: Vec<CString> = d
        .iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    let mut removed = 0;
    for name in names {
        let Ok(st) = fstatat(d.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
        let old = st.st_mtime < cutoff;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
            if depth < MAX_DEPTH
                && let Ok(sub) = openat(d.as_fd(), name.as_c_str(), DIR_FLAGS, Mode::empty())
            {
                removed += clean_dir(sub, cutoff, depth + 1);
            }
            if old && unlinkat(d.as_fd(), name.as_c_str(), UnlinkatFlags::RemoveDir).is_ok() {
                removed += 1;
            }
        } else if old && unlinkat(d.as_fd(), name.as_c_str(), UnlinkatFlags::NoRemoveDir).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};

    fn age(p: &Path, days: u64) {
        let t = SystemTime::now() - Duration::from_secs(days * 24 * 3600);
        File::options().write(true).open(p).or_else(|_| File::open(p)).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn removes_old_keeps_new_and_does_not_follow_links() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let keep_out = outside.path().join("precious");
        fs::write(&keep_out, "x").unwrap();
        age(&keep_out, 30);
        fs::write(d.path().join("old"), "x").unwrap();
        age(&d.path().join("old"), 8);
        fs::write(d.path().join("new"), "x").unwrap();
        fs::create_dir(d.path().join("sub")).unwrap();
        fs::write(d.path().join("sub/old"), "x").unwrap();
        age(&d.path().join("sub/old"), 10);
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
        let n = clean(d.path(), MAX_AGE, SystemTime::now());
        assert!(!d.path().join("old").exists());
        assert!(!d.path().join("sub/old").exists());
        assert!(d.path().join("new").exists());
        assert!(d.path().join("sub").exists(), "directory itself is recent");
        assert!(keep_out.exists(), "links are not followed");
        assert_eq!(n, 2);
    }
}
