//! The gates at work while a session runs: the agent's refs are watched with inotify (not
//! polled), and a change is imported once the agent's git has been quiet for a moment (a
//! commit is several renames: ref, then `HEAD`'s log), at most 300 ms after it began.
//!
//! Only the names that carry refs are watched for: `HEAD` and `packed-refs` at the top of the
//! agent's git directory, and everything under `refs/heads` and `refs/tags` (new directories
//! there are watched as they appear: `feature/x` is one). The agent's index, logs and objects
//! change far more often and say nothing the gate imports. A watch by path may lead elsewhere
//! if the agent swaps `refs` for a link; that only wakes the gate, which reads through its
//! descriptor ([`crate::gate`]) and finds what it finds.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::error::{Error, Result};
use crate::gate::{Gate, Imported};

/// Quiet this long after the last change before importing.
const QUIET: Duration = Duration::from_millis(40);
/// Import this long after the first change at the latest, however busy the agent's git is.
const LATEST: Duration = Duration::from_millis(300);

/// Told what each import did (`root` of the checkout, what happened).
pub type Report = Box<dyn FnMut(&std::path::Path, &Imported) + Send>;

/// The watching thread; [`Running::finish`] stops it and hands the gates back.
pub struct Running {
    stop: OwnedFd,
    thread: std::thread::JoinHandle<(Vec<Gate>, OwnedFd)>,
}

const DIR_EVENTS: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_DONT_FOLLOW)
    .union(AddWatchFlags::IN_ONLYDIR);

struct Watched {
    /// Which gate, and whether the directory is the git directory's top (where only `HEAD` and
    /// `packed-refs` count) or under `refs/`.
    by_wd: BTreeMap<WatchDescriptor, (usize, PathBuf, bool)>,
}

/// At most this many directories watched for all gates: refs directories are few, and a path
/// the agent redirected (`refs` swapped for a link after its watch was put) must not make the
/// launcher watch a whole tree of the host. A ref in a directory past it is still imported
/// with the next change elsewhere, or at the session's end.
const MAX_WATCHED: usize = 4096;

impl Watched {
    fn add(&mut self, ino: &Inotify, gate: usize, dir: PathBuf, top: bool) {
        if self.by_wd.len() >= MAX_WATCHED {
            return;
        }
        if let Ok(wd) = ino.add_watch(&dir, DIR_EVENTS) {
            if !top {
                // What was made before the watch existed (`mkdir -p refs/heads/a/b` then a ref).
                if let Ok(rd) = std::fs::read_dir(&dir) {
                    for e in rd.flatten() {
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            self.add(ino, gate, e.path(), false);
                        }
                    }
                }
            }
            self.by_wd.insert(wd, (gate, dir, top));
        }
    }
}

/// Start watching `gates`' agent repositories; each import's outcome goes to `report`.
pub fn start(gates: Vec<Gate>, mut report: Report) -> Result<Running> {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| Error::io("start watching", "the agent's git directories", e.into()))?;
    let mut watched = Watched { by_wd: BTreeMap::new() };
    for (i, g) in gates.iter().enumerate() {
        let dir = g.agent_dir().to_path_buf();
        watched.add(&ino, i, dir.clone(), true);
        watched.add(&ino, i, dir.join("refs"), false);
    }
    let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::io("create", "the watch's stop pipe", e.into()))?;
    let thread = std::thread::Builder::new()
        .name("ocsb-gate".into())
        .spawn(move || {
            let mut gates = gates;
            let mut dirty: BTreeSet<usize> = BTreeSet::new();
            let mut first: Option<Instant> = None;
            let mut last = Instant::now();
            loop {
                let timeout = match first {
                    None => PollTimeout::NONE,
                    Some(f) => {
                        let due = (last + QUIET).min(f + LATEST);
                        let left = due.saturating_duration_since(Instant::now());
                        PollTimeout::from(left.as_millis().min(60_000) as u16)
                    }
                };
                let mut fds = [
                    PollFd::new(ino.as_fd(), PollFlags::POLLIN),
                    PollFd::new(stop_r.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, timeout) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break,
                    Ok(_) => {}
                }
                if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                    break;
                }
                if fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
                    let events = ino.read_events().unwrap_or_default();
                    for ev in events {
                        if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                            dirty.extend(0..gates.len());
                            continue;
                        }
                        let Some((gate, dir, top)) = watched.by_wd.get(&ev.wd).cloned() else { continue };
                        let name = ev.name.as_deref().map(|n| n.to_os_string()).unwrap_or_default();
                        if top && name != "HEAD" && name != "packed-refs" && name != "refs" {
                            continue;
                        }
                        if ev.mask.contains(AddWatchFlags::IN_ISDIR)
                            && (ev.mask.contains(AddWatchFlags::IN_CREATE)
                                || ev.mask.contains(AddWatchFlags::IN_MOVED_TO))
                        {
                            watched.add(&ino, gate, dir.join(&name), false);
                        }
                        dirty.insert(gate);
                    }
                    if !dirty.is_empty() {
                        last = Instant::now();
                        first.get_or_insert(last);
                    }
                    continue;
                }
                // Quiet: import.
                for i in std::mem::take(&mut dirty) {
                    let done = gates[i].import();
                    if !done.is_empty() {
                        report(&gates[i].repo().root, &done);
                    }
                }
                first = None;
            }
            (gates, OwnedFd::from(ino))
        })
        .map_err(|e| Error::io("start", "the gate's thread", e))?;
    Ok(Running { stop: stop_w, thread })
}

impl Running {
    /// Stop watching; the gates come back for the session's last import, with the inotify
    /// instance to close late ([`crate::watch::Watch::stop`] says why).
    pub fn finish(self) -> (Vec<Gate>, Option<OwnedFd>) {
        let _ = nix::unistd::write(&self.stop, b"x");
        match self.thread.join() {
            Ok((gates, ino)) => (gates, Some(ino)),
            Err(_) => (Vec::new(), None),
        }
    }
}
