//! The live watch of a session's writable trees: what git (or, through another [`Matcher`], a
//! tool) would act on, appearing while the agent works, is moved aside within the same round
//! of events, and reported.
//!
//! *Why live*: a mount protects a name that exists; it cannot stop the agent from creating a
//! `.git` (a repository whose config and hooks git obeys when the user runs it there, or which
//! the superproject's `git status` enters) or a directory laid out as a git directory in a
//! writable tree. A look after the session leaves the user's own git, run meanwhile in another
//! terminal, to meet the plant first; the watch closes that window to the time of one event.
//!
//! How: one inotify instance, a watch on every directory of the roots (`IN_CREATE |
//! IN_MOVED_TO`, `IN_ONLYDIR`), added by a walk at the start and for each new directory at
//! once, which is then listed, so an entry made before its directory's watch existed (`mkdir -p
//! a/b/.git`) is still judged. Every step is relative to a descriptor: a directory is opened
//! from its root's descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and must be
//! the very directory (device, inode) the watch was put on; the watch itself is put through
//! that descriptor (`/proc/self/fd/<n>`), so no link is ever followed and nothing outside the
//! roots is touched. A directory renamed within a tree is walked again at its new place (that
//! also renews the paths of the watches below it, which the kernel keeps).
//!
//! Mounts inside a root are crossed: the sandbox binds each writable root recursively, so what
//! is mounted below it is writable inside too, and inotify sees changes through any mount of
//! the same filesystem. (Changes a network filesystem's server makes are not seen: no local
//! event exists for them.)
//!
//! What existed when the watch started is the session's starting point, not a plant: a `.git`
//! then present is not entered (its inner workings change all the time and none of it is a
//! plant), and a match then present (a fixture bare repository, say) is left alone at that
//! place later too. `skip` paths (the `.git` mount points at checkout tops, the nested
//! repositories the session knows, the state directory's own trees) are never entered nor acted
//! on.
//!
//! Never silence: a lost queue (`IN_Q_OVERFLOW`) or a directory whose path no longer leads to
//! it makes a rescan of everything (bounded in time); a directory that cannot be watched
//! (`ENOSPC`: the user's inotify watch limit, `fs.inotify.max_user_watches`; more than
//! [`MAX_DIRS`]; unreadable) is reported as [`Found::Blind`].

pub mod aside;
pub mod plant;
#[cfg(test)]
mod tests;
pub mod tools;

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::{FileStat, fstat, fstatat};

use crate::error::{Error, Result};
use crate::sys;
pub use plant::{Action, Entry, Git, Kind, Layout, Match, Matcher, Plant};
pub use tools::Tools;

/// The most directories one watch holds: each costs the kernel about a kilobyte of memory the
/// user is charged for, and the launcher a path.
pub const MAX_DIRS: usize = 1_000_000;

/// How long a walk (the start's, a rescan's) may take before what it has not reached is
/// reported unwatched.
pub const WALK_TIME: Duration = Duration::from_secs(60);

/// The most events one round reads before it acts (the kernel's queue holds 16,384 by
/// default, `fs.inotify.max_queued_events`).
const ROUND: usize = 65_536;

/// What the watch reports.
#[derive(Debug, Clone)]
pub enum Found {
    /// A plant appeared: `path` is where it appeared (for a git directory's layout, the
    /// directory), `at` when the watch acted on it.
    Plant { path: PathBuf, plant: Plant, why: String, outcome: Outcome, at: Instant },
    /// A directory the watch does not see into, and why: what appears there is not acted on.
    Blind { dir: PathBuf, why: String },
}

/// What became of a plant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Moved to this path.
    Moved(PathBuf),
    /// Reported only, as its matcher asked.
    Reported,
    /// It could not be moved: why.
    NotMoved(String),
}

/// The running watch; dropping it stops its thread and waits for it.
pub struct Watch {
    /// Its closing wakes the thread (`POLLHUP` on the other end).
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<OwnedFd>>,
}

impl Watch {
    /// Watches `roots` (absolute directories; one inside another is watched once; a file is
    /// passed over, nothing can appear in it) from now on: walks them in this thread, so what
    /// exists when it returns is the starting point, not a plant; then acts on what appears,
    /// in a thread of its own, reporting to `sink` (from that thread; the start's walk reports
    /// what it cannot see from this one). `skip` paths are spelled as the roots are (below a
    /// root, as its path joined with the names on the way).
    ///
    /// Whatever the launcher itself makes in the roots afterwards is judged like the agent's:
    /// start the watch once the launcher's own entries there exist, or name them in `skip`.
    pub fn start(
        roots: Vec<PathBuf>,
        skip: Vec<PathBuf>,
        matcher: Box<dyn Matcher>,
        sink: Box<dyn FnMut(Found) + Send>,
    ) -> Result<Watch> {
        let mut tree = Tree::new(roots, skip, matcher, sink)?;
        let (wake, stop) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::kernel("pipe2 for the tree watch", e.into(), "raise the open-file limit"))?;
        tree.wake = Some(wake);
        let thread = std::thread::Builder::new()
            .name("ocsb-watch".into())
            .spawn(move || {
                tree.run();
                let Tree { inotify, .. } = tree;
                OwnedFd::from(inotify)
            })
            .map_err(|e| Error::kernel("starting the tree watch's thread", e, "raise the thread limit"))?;
        Ok(Watch { stop: Some(stop), thread: Some(thread) })
    }
}

impl Watch {
    /// Stop watching, and hand back the inotify instance rather than close it here: closing
    /// an instance that holds watches waits for the kernel to free them (a grace period of
    /// several milliseconds), which the caller can leave to a process nobody waits for
    /// ([`crate::launch`] gives it to stage 2 as it lets go).
    pub fn stop(mut self) -> Option<OwnedFd> {
        drop(self.stop.take());
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A directory's identity: device and inode.
type Id = (u64, u64);

fn id(st: &FileStat) -> Id {
    (st.st_dev, st.st_ino)
}

struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

/// A watched directory: where it is (below which root), and which directory it is.
struct Watched {
    root: usize,
    rel: PathBuf,
    id: Id,
}

/// How a walk treats what it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// The start: matches are the starting point, remembered and left.
    Start,
    /// Matches are acted on.
    Act,
    /// Only watched: what a plant moved aside holds was the plant's, reported with it.
    Quiet,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

const RESOLVE: u64 = sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS;

/// One event, as the watch needs it (tests make them).
struct Event {
    wd: i32,
    mask: AddWatchFlags,
    name: Option<OsString>,
}

/// The watch's state, owned by its thread.
struct Tree {
    inotify: Inotify,
    roots: Vec<Root>,
    skip: HashSet<PathBuf>,
    matcher: Box<dyn Matcher>,
    sink: Box<dyn FnMut(Found) + Send>,
    dirs: HashMap<i32, (WatchDescriptor, Watched)>,
    /// Matches present at the start: (directory, subject), left alone there.
    known: HashSet<(Id, OsString)>,
    /// Names our own moves made, whose `IN_MOVED_TO` is ours: (directory, new name).
    ours: HashSet<(Id, OsString)>,
    /// A watch could not be added (limit): reported once until one can again.
    full: bool,
    /// Readable (hung up) once the [`Watch`] is dropped.
    wake: Option<OwnedFd>,
    /// [`MAX_DIRS`] (tests take less).
    max_dirs: usize,
}

impl Tree {
    fn new(
        roots: Vec<PathBuf>,
        skip: Vec<PathBuf>,
        matcher: Box<dyn Matcher>,
        sink: Box<dyn FnMut(Found) + Send>,
    ) -> Result<Tree> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(|e| {
            Error::kernel(
                "inotify_init1 for the tree watch",
                e.into(),
                "raise `fs.inotify.max_user_instances` (sysctl)",
            )
        })?;
        let mut opened: Vec<Root> = Vec::new();
        for path in roots {
            if opened.iter().any(|r| path.starts_with(&r.path)) {
                continue;
            }
            let fd = match sys::openat2(None, &path, libc::O_PATH | libc::O_DIRECTORY, 0, 0) {
                Ok(fd) => fd,
                // A file named as writable: no entry can appear in it.
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
                Err(e) => return Err(Error::io("watch", &path, e)),
            };
            opened.retain(|r| !r.path.starts_with(&path));
            opened.push(Root { path, fd });
        }
        let mut tree = Tree {
            inotify,
            roots: opened,
            skip: skip.into_iter().collect(),
            matcher,
            sink,
            dirs: HashMap::new(),
            known: HashSet::new(),
            ours: HashSet::new(),
            full: false,
            wake: None,
            max_dirs: MAX_DIRS,
        };
        tree.walk_all(Walk::Start);
        Ok(tree)
    }

    /// Waits for events until the [`Watch`] is dropped.
    fn run(&mut self) {
        loop {
            let (woken, failed) = {
                let Some(wake) = &self.wake else { return };
                let mut fds = [
                    PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                    PollFd::new(wake.as_fd(), PollFlags::POLLIN),
                ];
                let failed = poll(&mut fds, PollTimeout::NONE).err().filter(|e| *e != Errno::EINTR);
                (fds[1].any().unwrap_or(true), failed)
            };
            if let Some(e) = failed {
                return self.blind_all(&format!("the watch stopped: poll: {e}"));
            }
            if woken {
                return;
            }
            if let Err(e) = self.pump() {
                return self.blind_all(&format!("the watch stopped: reading its events: {e}"));
            }
        }
    }

    /// Whether the [`Watch`] was dropped: a long walk stops then.
    fn stopping(&self) -> bool {
        let Some(wake) = &self.wake else { return false };
        let mut fds = [PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }

    /// Reads every event pending (at most [`ROUND`]), then handles them as one round: the
    /// events of one change (a rename's, a removal's) are then seen together.
    fn pump(&mut self) -> nix::Result<()> {
        let mut round = Vec::new();
        while round.len() < ROUND {
            match self.inotify.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => round.extend(events.into_iter().map(|e| Event {
                    wd: e.wd.as_raw(),
                    mask: e.mask,
                    name: e.name,
                })),
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        self.handle(round);
        Ok(())
    }

    /// One round of events: each new entry judged (and acted on) now. An event of a directory
    /// no longer where its path says is tried again after the round (a rename in it renews
    /// the paths); a lost queue, or a directory still not found then, makes a rescan.
    fn handle(&mut self, events: Vec<Event>) {
        let mut rescan = false;
        let mut later = Vec::new();
        for e in events {
            if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                rescan = true;
            } else if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&e.wd);
            } else if !self.event(&e) {
                later.push(e);
            }
        }
        for e in later {
            if !self.event(&e) {
                // Moved out of every walk's way, or gone: a watch of a path that leads elsewhere
                // goes; the rescan puts one on the directory wherever it is in the roots.
                if let Some((wd, _)) = self.dirs.remove(&e.wd) {
                    let _ = self.inotify.rm_watch(wd);
                }
                rescan = true;
            }
        }
        if rescan {
            self.rescan();
        }
    }

    /// Acts on one event of a new entry; `false` when its directory is not where its path says.
    /// (`IN_DELETE_SELF` is followed by `IN_IGNORED`; after `IN_MOVE_SELF` the path is renewed
    /// by the walk of the `IN_MOVED_TO` at the new place, and checked at each use.)
    fn event(&mut self, e: &Event) -> bool {
        let Some(name) = &e.name else { return true };
        if !e.mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
            return true;
        }
        let Some((_, w)) = self.dirs.get(&e.wd) else { return true };
        let (root, rel, want) = (w.root, w.rel.clone(), w.id);
        if self.ours.remove(&(want, name.clone())) {
            return true;
        }
        let fd = match self.open(root, &rel) {
            Ok((fd, got)) if got == want => fd,
            Ok(_) | Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => return false,
            Err(err) => {
                self.blind(self.path(root, &rel), format!("it cannot be opened: {err}"));
                return true;
            }
        };
        if let Some(dir) = self.entry(fd.as_fd(), want, root, &rel, name, Walk::Act) {
            self.walk(root, dir, Walk::Act, Instant::now() + WALK_TIME);
        }
        true
    }

    /// Walks every root again and acts on what is new: after a lost queue, nothing else says
    /// what changed.
    fn rescan(&mut self) {
        self.walk_all(Walk::Act);
    }

    fn walk_all(&mut self, how: Walk) {
        let until = Instant::now() + WALK_TIME;
        for r in 0..self.roots.len() {
            self.walk(r, PathBuf::new(), how, until);
        }
    }

    fn path(&self, root: usize, rel: &Path) -> PathBuf {
        let top = &self.roots[root].path;
        if rel.as_os_str().is_empty() { top.clone() } else { top.join(rel) }
    }

    /// Opens the directory `rel` below root `root`, never through a link nor above the root.
    fn open(&self, root: usize, rel: &Path) -> nix::Result<(OwnedFd, Id)> {
        let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
        let fd = aside::open_dir(Some(self.roots[root].fd.as_fd()), rel, RESOLVE)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let st = fstat(fd.as_fd())?;
        Ok((fd, id(&st)))
    }

    /// Watches the directory `rel` below root `root` and every directory below it, judging
    /// what it holds as `how` says.
    fn walk(&mut self, root: usize, rel: PathBuf, how: Walk, until: Instant) {
        let mut stack = vec![rel];
        let mut seen = 0usize;
        while let Some(rel) = stack.pop() {
            seen += 1;
            if seen.is_multiple_of(256) && self.stopping() {
                return;
            }
            if Instant::now() > until {
                let why = format!(
                    "the walk stopped after {} s; {} directories below it are not watched",
                    WALK_TIME.as_secs(),
                    stack.len() + 1
                );
                return self.blind(self.path(root, &rel), why);
            }
            let (fd, did) = match self.open(root, &rel) {
                Ok(opened) => opened,
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => continue, // changed meanwhile
                Err(e) => {
                    self.blind(self.path(root, &rel), format!("it cannot be opened: {e}"));
                    continue;
                }
            };
            // Unwatched (reported), it is still looked at once, as it is now.
            self.add(fd.as_fd(), root, &rel, did);
            let names = match names(&fd) {
                Ok(names) => names,
                Err(e) => {
                    self.blind(self.path(root, &rel), format!("it cannot be listed: {e}"));
                    continue;
                }
            };
            for name in names {
                if let Some(dir) = self.entry(fd.as_fd(), did, root, &rel, &name, how) {
                    stack.push(dir);
                }
            }
        }
    }

    /// Puts a watch on the directory `fd`, or says why it cannot.
    fn add(&mut self, fd: BorrowedFd<'_>, root: usize, rel: &Path, did: Id) {
        // Through the descriptor: the directory opened, not whatever its path names now.
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let added = aside::owner_may(fd, || self.inotify.add_watch(proc.as_str(), MASK));
        let (why, limit) = match added {
            Ok(wd) if self.dirs.len() < self.max_dirs || self.dirs.contains_key(&wd.as_raw()) => {
                self.full = false;
                let w = Watched { root, rel: rel.to_path_buf(), id: did };
                self.dirs.insert(wd.as_raw(), (wd, w));
                return;
            }
            Ok(wd) => {
                let _ = self.inotify.rm_watch(wd);
                (format!("the watch holds {} directories, its most", self.max_dirs), true)
            }
            Err(Errno::ENOSPC) => (
                "the user's inotify watch limit is reached: raise `fs.inotify.max_user_watches` (sysctl)"
                    .to_owned(),
                true,
            ),
            Err(e) => (format!("it cannot be watched: {e}"), false),
        };
        // At a limit, the first directory left unwatched is reported, until one is watched again.
        if !(limit && self.full) {
            self.full |= limit;
            self.blind(self.path(root, rel), why);
        }
    }

    /// Judges the entry `name` of the directory `dir` (`did`, at `rel` below root `root`) as
    /// `how` says, acting on a plant; returns the entry's path below the root when it is a
    /// directory to walk.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        did: Id,
        root: usize,
        rel: &Path,
        name: &OsStr,
        how: Walk,
    ) -> Option<PathBuf> {
        let cname = CString::new(name.as_bytes()).ok()?;
        let kind = kind_at(dir, &cname)?;
        let path = self.path(root, rel).join(name);
        if self.skip.contains(&path) {
            return None;
        }
        let sub = (kind == Kind::Dir).then(|| rel.join(name));
        if how == Walk::Quiet {
            return sub;
        }
        let here = self.path(root, rel);
        let sibling = |n: &OsStr| CString::new(n.as_bytes()).ok().and_then(|n| kind_at(dir, &n));
        let Some(m) = self.matcher.judge(&Entry { dir: &here, name, kind, sibling: &sibling }) else {
            return sub;
        };
        let key = (did, m.subject.clone());
        if how == Walk::Start || self.known.contains(&key) {
            self.known.insert(key);
            // A `.git` of the starting point is not entered: the user's repository at work.
            return if m.plant == Plant::GitEntry && m.subject.as_os_str() == name { None } else { sub };
        }
        let path = if m.plant == Plant::GitDirLayout { here.clone() } else { here.join(&m.subject) };
        let (outcome, gone) = match m.action {
            Action::Report => (Outcome::Reported, false),
            Action::MoveAside => match self.move_aside(dir, did, &m.subject) {
                Ok(new) => (Outcome::Moved(here.join(&new)), true),
                Err(e) => (Outcome::NotMoved(e.to_string()), false),
            },
        };
        let at = Instant::now();
        let moved_dir = match &outcome {
            Outcome::Moved(to) if m.subject.as_os_str() == name && kind == Kind::Dir => {
                to.file_name().map(|n| rel.join(n))
            }
            _ => None,
        };
        (self.sink)(Found::Plant { path, plant: m.plant, why: m.why, outcome, at });
        if let Some(moved) = moved_dir {
            // What it holds went with it: watched from now on, not judged again.
            self.walk(root, moved, Walk::Quiet, Instant::now() + WALK_TIME);
        }
        // The entry itself, moved aside, is walked above; anything else is walked as it is.
        if gone && m.subject.as_os_str() == name { None } else { sub }
    }

    /// Moves `subject` of `dir` aside; the name it gets is remembered as ours.
    fn move_aside(&mut self, dir: BorrowedFd<'_>, did: Id, subject: &OsStr) -> std::io::Result<OsString> {
        let name = CString::new(subject.as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let new = aside::move_aside_at(dir, &name, aside::now_secs())?;
        let new = OsStr::from_bytes(new.as_bytes()).to_os_string();
        self.ours.insert((did, new.clone()));
        Ok(new)
    }

    fn blind(&mut self, dir: PathBuf, why: String) {
        (self.sink)(Found::Blind { dir, why });
    }

    fn blind_all(&mut self, why: &str) {
        for r in 0..self.roots.len() {
            self.blind(self.roots[r].path.clone(), why.to_owned());
        }
    }
}

/// The type of the entry `name` of `dir`, never following a link; `None` when it is gone.
fn kind_at(dir: BorrowedFd<'_>, name: &CStr) -> Option<Kind> {
    fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok().map(|st| Kind::of_mode(st.st_mode))
}

/// The names a directory holds (not `.` and `..`).
fn names(fd: &OwnedFd) -> nix::Result<Vec<OsString>> {
    let mut d =
        Dir::from_fd(fd.try_clone().map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?)?;
    Ok(d.iter()
        .flatten()
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n != "." && n != "..")
        .collect())
}
