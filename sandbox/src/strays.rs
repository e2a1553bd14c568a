//! The sweep after a session whose Docker gateway started a container: what a container left
//! on the sandbox's writable paths that the sandbox itself could not leave (a set-id program, a
//! device node, a program with file capabilities, a file of another uid; the judgment is
//! `ocsb_policy::strays`) is moved aside into a directory only the user can enter, and
//! reported. Nothing is ever deleted.
//!
//! *Why only after such a session*: the sandbox cannot make a file of another uid (`chown` is
//! `EINVAL` in its user namespace), a device (`mknod` is `EACCES`), file capabilities or a
//! set-group-id file (its seccomp filter refuses the bit), so only a process outside it can: a
//! container the gateway started. A session that started none has nothing to sweep, and pays
//! nothing. (A set-user-id file of the user's own the sandbox can make; it hands no one more
//! than the user's identity, and is moved aside too when a sweep runs.)
//!
//! *Why only what changed since the session began*: an entry's `ctime` is set by the kernel on
//! every change of its owner, mode, links or name, and no process without `CAP_SYS_TIME` can set
//! it back; so anything a container made, `chown`ed, `chmod`ed or moved in during the session
//! has a `ctime` after its start, while the user's own files of another uid from before (a
//! build once run with `sudo`, a container the user ran themselves) stay where they are.
//!
//! *Why moved into a directory of mode 0700 at the top of the root*: renaming a file needs
//! only a writable parent, whoever owns the file, and a rename never leaves the filesystem;
//! the directory keeps every other local user from reaching what it holds (a set-user-id-root
//! program run by another user gave them euid 0). A directory of another uid cannot be moved
//! out of its parent by the user (the kernel wants write access to it, to update its `..`): it
//! is renamed where it is, and what it holds is reported as beyond the user's reach, to be
//! removed as root.
//!
//! The walk never follows a link and never leaves the root's filesystem: every step is
//! relative to a directory descriptor opened with `O_NOFOLLOW` (`openat`,
//! `fstatat(AT_SYMLINK_NOFOLLOW)`, `renameat2(RENAME_NOREPLACE)`), as in [`super::tmpclean`],
//! since a sandbox of another session of the project may be changing the tree meanwhile. It
//! is bounded in entries, depth and time, and says what it did not look at.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, open, openat, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use ocsb_policy::guard::Finding;
use ocsb_policy::strays::{Facts, Stray, judge};

use super::watch::aside::{move_aside_at, owner_may};

/// How much one sweep looks at, over all its roots.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub entries: usize,
    pub time: Duration,
}

/// A session's end waits this long at most: a project with a few hundred thousand files
/// (dependency trees, build caches) is walked in a few seconds.
pub const LIMITS: Limits = Limits { entries: 2_000_000, time: Duration::from_secs(60) };

/// Deeper directories are not entered (each level holds a descriptor).
const MAX_DEPTH: usize = 128;

/// How far before the session's start a change still counts as the session's: the clock the
/// `ctime` is taken from may be set back a little (NTP) while the session runs.
pub const CLOCK_SLACK: i64 = 10;

/// The prefix of the directory, at the top of a root, things are moved into.
pub const ASIDE: &str = super::watch::aside::MARK;

const DIR_FLAGS: OFlag =
    OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// One stray found: what it is, and where it is now (or why it is still where it was).
#[derive(Debug, Clone)]
pub struct Found {
    pub stray: Stray,
    /// Moved out of every other user's reach.
    pub moved: bool,
    pub finding: Finding,
}

/// What a sweep found, and what it could not look at.
#[derive(Debug, Default)]
pub struct Swept {
    pub found: Vec<Found>,
    /// Directories it could not read, entries beyond its limits.
    pub unseen: Vec<String>,
}

/// Sweeps `roots` (absolute; a root inside another on the same filesystem is walked once) for
/// what changed since `since` (seconds since the epoch) and `ocsb_policy::strays::judge` takes
/// for a stray of the user `user`.
pub fn sweep(roots: &[PathBuf], since: i64, user: u32, limits: Limits) -> Swept {
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut s = Sweeper {
        since,
        dev: 0,
        user,
        stamp,
        seen: 0,
        limits,
        began: Instant::now(),
        stopped: false,
        out: Swept::default(),
    };
    let mut walked: Vec<(PathBuf, u64)> = Vec::new();
    for root in roots {
        let Ok(fd) = open(root.as_path(), DIR_FLAGS, Mode::empty()) else { continue };
        let Ok(st) = fstat(&fd) else { continue };
        let dev = st.st_dev;
        if walked.iter().any(|(w, d)| root.starts_with(w) && *d == dev) {
            continue;
        }
        walked.push((root.clone(), dev));
        let Ok(top) = fd.try_clone() else { continue };
        let mut aside = Aside { root: root.clone(), top, made: None };
        s.dev = dev;
        s.dir(fd, root, Path::new(""), None, 0, &mut aside);
        if s.stopped {
            break;
        }
    }
    s.out
}

struct Sweeper {
    since: i64,
    /// The filesystem of the root being walked.
    dev: u64,
    user: u32,
    stamp: u64,
    seen: usize,
    limits: Limits,
    began: Instant,
    stopped: bool,
    out: Swept,
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

impl Sweeper {
    /// Walks the directory `fd`, at `path` on the host and `rel` below its root. `guard`: it
    /// lies in a directory of another uid that could not be moved aside, already reported,
    /// found in the user's directory `guard`: what it holds of other uids goes without saying (a
    /// tree of thousands); what grants a privilege is reported, each, and `guard` is closed to
    /// other users, the one way left to keep them from it without root.
    fn dir(
        &mut self,
        fd: OwnedFd,
        path: &Path,
        rel: &Path,
        guard: Option<Guard<'_>>,
        depth: usize,
        aside: &mut Aside,
    ) {
        let Ok(mut d) = Dir::from_fd(fd) else { return };
        let names: Vec<CString> = d
            .iter()
            .flatten()
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect();
        for name in names {
            if self.stopped {
                return;
            }
            self.seen += 1;
            if self.seen > self.limits.entries || self.began.elapsed() > self.limits.time {
                self.stopped = true;
                self.out.unseen.push(format!(
                    "what lies beyond the first {} entries or {} s (stopped in {})",
                    self.seen - 1,
                    self.limits.time.as_secs(),
                    path.display()
                ));
                return;
            }
            let Ok(st) = fstatat(d.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else { continue };
            // A mount inside the root (another filesystem) is no part of it.
            if st.st_dev != self.dev {
                continue;
            }
            let os = OsStr::from_bytes(name.to_bytes());
            let (p, r) = (path.join(os), rel.join(os));
            let is_dir = kind(&st) == SFlag::S_IFDIR;
            let foreign = guard.is_some();
            let (mut enter, mut within) = (name.clone(), foreign);
            if st.st_ctime >= self.since
                && let Some(stray) = self.judge(d.as_fd(), &name, &st, &p)
                && (!foreign || stray.grants())
            {
                let facts = facts(&st, stray == Stray::Capabilities);
                let why = stray.why(&facts);
                match aside.take(d.as_fd(), &name, &r, self.stamp) {
                    Ok(to) => {
                        let finding = Finding {
                            why: format!(
                                "moved aside from {}: {why}; to put it back, `mv {} {}`",
                                p.display(),
                                to.display(),
                                p.display()
                            ),
                            path: to,
                        };
                        self.out.found.push(Found { stray, moved: true, finding });
                        continue; // out of reach, with all it holds
                    }
                    Err(e) if is_dir => match move_aside_at(d.as_fd(), &name, self.stamp) {
                        Ok(new) => {
                            let to = path.join(OsStr::from_bytes(new.to_bytes()));
                            let finding = Finding {
                                why: format!(
                                    "renamed in place from {} (a directory of another uid cannot be moved \
                                     out of its parent by you: {e}): {why}; what it holds is beyond your \
                                     reach: remove it as root (`sudo rm -r {}`)",
                                    p.display(),
                                    to.display()
                                ),
                                path: to,
                            };
                            self.out.found.push(Found { stray, moved: false, finding });
                            (enter, within) = (new, true);
                        }
                        Err(e2) => {
                            self.not_moved(stray, &p, &why, &format!("{e}; {e2}"), guard);
                            within = true;
                        }
                    },
                    Err(e) => self.not_moved(stray, &p, &why, &e.to_string(), guard),
                }
            }
            if is_dir {
                let p = path.join(OsStr::from_bytes(enter.to_bytes()));
                if depth >= MAX_DEPTH {
                    self.out.unseen.push(format!("{} (deeper than {MAX_DEPTH} levels)", p.display()));
                    continue;
                }
                match openat(d.as_fd(), enter.as_c_str(), DIR_FLAGS, Mode::empty()) {
                    Ok(sub) => {
                        let here = Guard { fd: d.as_fd(), path };
                        let guard = guard.or(within.then_some(here));
                        self.dir(sub, &p, &r, guard, depth + 1, aside)
                    }
                    Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => {} // changed meanwhile
                    Err(e) => self.out.unseen.push(format!("{} (cannot be read: {e})", p.display())),
                }
            }
        }
    }

    /// The judgment on the entry `name` of `dir`; file capabilities are asked of regular
    /// files only (they do nothing on anything else).
    fn judge(&mut self, dir: BorrowedFd<'_>, name: &CStr, st: &FileStat, p: &Path) -> Option<Stray> {
        let caps = kind(st) == SFlag::S_IFREG
            && super::sys::has_xattr_at(dir, name, c"security.capability").unwrap_or_else(|e| {
                self.out
                    .unseen
                    .push(format!("the file capabilities of {} (cannot be read: {e})", p.display()));
                false
            });
        judge(&facts(st, caps), self.user)
    }

    fn not_moved(&mut self, stray: Stray, p: &Path, why: &str, e: &str, guard: Option<Guard<'_>>) {
        let closed = match guard {
            Some(g) if stray.grants() => g.close(),
            _ => String::new(),
        };
        let finding = Finding {
            path: p.to_path_buf(),
            why: format!(
                "NOT moved aside ({e}): {why}{closed}; remove it as root (`sudo rm -r {}`)",
                p.display()
            ),
        };
        self.out.found.push(Found { stray, moved: false, finding });
    }
}

/// A directory of the user's that holds a directory of another uid the sweep could not move.
#[derive(Clone, Copy)]
struct Guard<'a> {
    fd: BorrowedFd<'a>,
    path: &'a Path,
}

impl Guard<'_> {
    /// Takes group and other users' access away from the directory, and says so.
    fn close(self) -> String {
        let Ok(st) = fstat(self.fd) else { return String::new() };
        let (was, now) = (st.st_mode & 0o7777, st.st_mode & 0o7700);
        if was == now {
            return format!("; {} is closed to other users", self.path.display());
        }
        match fchmod(self.fd, Mode::from_bits_truncate(now)) {
            Ok(()) => format!(
                "; other users can no longer reach it: {} was closed to them (mode {was:o}, now {now:o}; \
                 `chmod {was:o} {}` once it is gone)",
                self.path.display(),
                self.path.display()
            ),
            Err(e) => format!(
                "; other users can still run it ({} could not be closed to them: {e})",
                self.path.display()
            ),
        }
    }
}

fn facts(st: &FileStat, capabilities: bool) -> Facts {
    Facts { mode: st.st_mode, uid: st.st_uid, capabilities }
}

/// The directory at the top of a root that strays are moved into, made at the first one.
struct Aside {
    root: PathBuf,
    top: OwnedFd,
    /// Its name and descriptor.
    made: Option<(String, OwnedFd)>,
}

impl Aside {
    /// Moves the entry `name` of `parent` (at `rel` below the root) to the same place below
    /// this directory, and returns where it is now. Never over anything.
    fn take(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        rel: &Path,
        stamp: u64,
    ) -> std::io::Result<PathBuf> {
        let made = match self.made.take() {
            Some(made) => made,
            None => make_private(&self.top, stamp)?,
        };
        let (top_name, top) = self.made.insert(made);
        let mut at = top.try_clone()?;
        for c in rel.parent().into_iter().flat_map(Path::components) {
            let c = c.as_os_str();
            match mkdirat(&at, c, Mode::from_bits_truncate(0o700)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
            at = openat(&at, c, DIR_FLAGS, Mode::empty())?;
        }
        // A directory of the user's that is not writable (a container's `chmod 555`) was changed
        // during the session, or it would hold no stray: writable for its owner again.
        owner_may(parent, || renameat2(parent, name, &at, name, RenameFlags::RENAME_NOREPLACE))?;
        Ok(self.root.join(top_name).join(rel))
    }
}

/// Makes `.ocsb-planted-<stamp>[-n]` in `top`, a name nothing holds yet, with mode 0700
/// whatever the umask; returns its name and descriptor.
fn make_private(top: &OwnedFd, stamp: u64) -> std::io::Result<(String, OwnedFd)> {
    for n in 0..100 {
        let name = if n == 0 { format!("{ASIDE}{stamp}") } else { format!("{ASIDE}{stamp}-{n}") };
        match mkdirat(top, name.as_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
        let fd = openat(top, name.as_str(), DIR_FLAGS, Mode::empty())?;
        fchmod(&fd, Mode::from_bits_truncate(0o700))?;
        return Ok((name, fd));
    }
    Err(std::io::Error::other("every name to move it to is taken"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(p: &Path, m: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    /// The user's own files stay; a set-id program is moved into a directory only its owner
    /// enters, where it came from named; nothing is deleted; a link is not followed.
    #[test]
    fn strays_are_moved_aside_and_the_users_files_stay() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        fs::create_dir_all(root.join("src/bin")).unwrap();
        fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        fs::write(root.join("src/bin/tool"), "#!/bin/sh\n").unwrap();
        mode(&root.join("src/bin/tool"), 0o4755);
        nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        fs::write(outside.path().join("elsewhere"), "x").unwrap();
        mode(&outside.path().join("elsewhere"), 0o4755);
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        // Changed before the session's start: not the session's.
        let later =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let none = sweep(std::slice::from_ref(&root), later + 100, me, LIMITS);
        assert!(none.found.is_empty() && none.unseen.is_empty(), "{none:?}");
        let swept = sweep(std::slice::from_ref(&root), 0, me, LIMITS);
        assert!(swept.unseen.is_empty(), "{:?}", swept.unseen);
        assert_eq!(swept.found.len(), 1, "{:?}", swept.found);
        let f = &swept.found[0];
        assert!(f.moved && f.stray == Stray::SetId, "{f:?}");
        assert!(!root.join("src/bin/tool").exists());
        let aside = f.finding.path.parent().unwrap().parent().unwrap().parent().unwrap();
        assert!(aside.file_name().unwrap().to_string_lossy().starts_with(ASIDE), "{f:?}");
        assert_eq!(aside.metadata().unwrap().mode() & 0o7777, 0o700);
        assert_eq!(f.finding.path, aside.join("src/bin/tool"));
        assert!(f.finding.why.contains(&format!("moved aside from {}", root.join("src/bin/tool").display())));
        assert_eq!(fs::read_to_string(&f.finding.path).unwrap(), "#!/bin/sh\n", "kept whole");
        for stays in ["src/main.rs", "fifo", "link"] {
            assert!(root.join(stays).symlink_metadata().is_ok(), "{stays} was moved");
        }
        assert!(outside.path().join("elsewhere").exists(), "followed a link");
    }

    /// Devices and files of other uids (root only: nobody else can make them).
    #[test]
    fn devices_and_files_of_other_uids_are_moved_aside() {
        if !nix::unistd::geteuid().is_root() {
            return; // the unprivileged half is the test above; CI runs this one as root
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let user = 4242;
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/mine"), "x").unwrap();
        nix::sys::stat::mknod(
            &root.join("a/dev"),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        fs::create_dir(root.join("rootdir")).unwrap();
        fs::write(root.join("rootdir/f"), "y").unwrap();
        std::os::unix::fs::chown(&root, Some(user), None).unwrap();
        for p in ["a", "a/b", "a/b/mine"] {
            std::os::unix::fs::lchown(root.join(p), Some(user), None).unwrap();
        }
        let swept = sweep(std::slice::from_ref(&root), 0, user, LIMITS);
        let mut got: Vec<(Stray, String)> = swept
            .found
            .iter()
            .map(|f| (f.stray, f.finding.path.strip_prefix(&root).unwrap().to_string_lossy().into_owned()))
            .collect();
        got.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, Stray::Device);
        assert!(got[0].1.starts_with(ASIDE) && got[0].1.ends_with("/a/dev"), "{got:?}");
        assert_eq!(got[1].0, Stray::Foreign { uid: 0 });
        assert!(got[1].1.ends_with("/rootdir"), "{got:?}");
        assert!(root.join("a/b/mine").exists());
        assert_eq!(fs::read_to_string(root.join(&got[1].1).join("f")).unwrap(), "y");
    }
}
