//! The private `/tmp` lives in `<state>/tmp`; files older than a week are removed on start so it
//! does not grow forever. Symlinks are removed as links, never followed.

use std::path::Path;
use std::time::{Duration, SystemTime};

pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Remove files (and then empty directories) under `dir` last modified before `now - max_age`.
/// Returns how many entries were removed. Errors on single entries are skipped: a file the
/// agent made unreadable must not stop the start.
pub fn clean(dir: &Path, max_age: Duration, now: SystemTime) -> usize {
    let Some(cutoff) = now.checked_sub(max_age) else { return 0 };
    clean_dir(dir, cutoff)
}

fn clean_dir(dir: &Path, cutoff: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        let old = m.modified().map(|t| t < cutoff).unwrap_or(false);
        if m.is_dir() {
            removed += clean_dir(&p, cutoff);
            if old && std::fs::remove_dir(&p).is_ok() {
                removed += 1;
            }
        } else if old && std::fs::remove_file(&p).is_ok() {
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
