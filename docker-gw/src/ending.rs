//! The end of a session, as far as its containers are concerned: none that it made or set
//! running keeps running after the sandbox has exited.
//!
//! *Why*: the launcher's look at the checkouts when a sandbox exits reports what the agent
//! planted (a repository with `core.fsmonitor`, an index entry under `.git/`), and the next
//! start takes what is there for the user's. A container the agent left running could plant it
//! a moment after that look, where nothing looks again before the user's own git runs. Not only
//! one with the project bound writable: any container can be handed an open descriptor of the
//! project (over a socket in a shared volume, in a read-only bind, or through a shared process
//! namespace) by one that has it, and write through it after that one stopped. So every
//! container the session made or set running is stopped (kept, not removed) before the look.
//! The gateway serves only restart policies under which a stopped container stays stopped
//! (`ocsb_policy::docker`), so a restart of the daemon does not bring one back either.
//!
//! A launcher that dies (SIGKILL, the OOM killer, a reboot) makes no end. So each session
//! keeps a [`Journal`] of what it set running, written before the daemon is asked, and holds
//! it locked while it lives; the next start of the project stops what a journal nobody holds
//! lists ([`stop_left_behind`]) before its check of the checkouts, as that check does the dead
//! run's look for it.
//!
//! Once a session's containers are stopped, what they left on the paths they could write that
//! the sandbox itself could not leave (a set-id program, a device node, a file of another uid)
//! is moved aside and reported ([`ocsb_sandbox::strays`], which says why only after a session
//! that started a container). The journal names those paths and when the session began, so a
//! dead launcher's sweep is made by whoever stops its containers: its watcher, or the next start.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ocsb_policy::docker::SESSION_LABEL;

use super::daemon::{Daemon, seg};
use crate::Paths;
use crate::error::{Error, Result};

/// How long the end of a session waits for calls that are setting a container running (the
/// daemon's answer; the client's request is read whole before such a call is recorded).
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Seconds a container gets to stop on `SIGTERM` (or its stop signal) before it is killed.
const STOP_GRACE_SECS: u32 = 5;

/// Container states in which there is nothing left to stop.
const STOPPED: &[&str] = &["created", "exited", "dead", "removing"];

/// The containers the session's calls set running (`start`, `restart`, `unpause`), the calls
/// still in flight, and whether the session has ended. Shared by the connections, which record
/// each such call, and the session's end, which closes the record and stops what it holds.
#[derive(Default)]
pub(super) struct Started {
    state: Mutex<State>,
    settled: Condvar,
    /// Where each container is written before it is set running (none in unit tests).
    journal: Option<Journal>,
    /// The host paths the session's containers could write ([`Started::reaches`]).
    roots: Mutex<Vec<PathBuf>>,
    /// Starts the launcher's watcher ([`super::watcher`]) before the first container is set
    /// running (none in unit tests). *Why then, not at the gateway's start*: the watcher is
    /// there to stop what a killed launcher's session set running; until a start is recorded
    /// there is nothing, and a process started at every sandbox's start, for sessions that
    /// mostly never use Docker, was a millisecond of each start and a core's worth of exec.
    watch: Option<Watch>,
}

/// See [`Started::watch`]: `Ok` once the watcher runs (again a no-op after the first).
pub(super) type Watch = Box<dyn Fn() -> std::result::Result<(), String> + Send + Sync>;

#[derive(Default)]
struct State {
    closed: bool,
    ids: BTreeSet<String>,
    /// The containers of the calls in flight (one entry per call).
    in_flight: Vec<String>,
}

/// [`Started`], shared.
pub(super) type Record = Arc<Started>;

/// A call that sets a container running, recorded and in flight until dropped.
pub(super) struct InFlight<'a>(&'a Started, String);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = s.in_flight.iter().position(|id| *id == self.1) {
            s.in_flight.swap_remove(i);
        }
        self.0.settled.notify_all();
    }
}

impl Started {
    /// A record kept in `journal` too.
    pub(super) fn with_journal(journal: Journal) -> Started {
        Started { journal: Some(journal), ..Started::default() }
    }

    /// This record, with `watch` run before each start is recorded ([`Started::watch`]).
    pub(super) fn watched_by(self, watch: Watch) -> Started {
        Started { watch: Some(watch), ..self }
    }

    /// Notes the host paths the session's containers may write (the sandbox's writable binds,
    /// as the gateway judges binds by them), in the journal too: they are swept once the
    /// containers are stopped.
    pub(super) fn reaches(&self, roots: &[PathBuf]) {
        if let Some(j) = &self.journal {
            for r in roots {
                let _ =
                    j.note(ROOT, &serde_json::Value::String(r.to_string_lossy().into_owned()).to_string());
            }
        }
        self.roots.lock().unwrap_or_else(|p| p.into_inner()).extend(roots.iter().cloned());
    }

    /// Records that `id` is being set running, unless the session has ended or the journal
    /// cannot be written (the reason is returned). Hold what it returns until the daemon has
    /// answered: the session's end waits for it, so that it sees the container running (and
    /// stops it) rather than missing a start that lands after.
    pub(super) fn record(&self, id: &str) -> std::result::Result<InFlight<'_>, String> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return Err("the session has ended: nothing more is started in it".into());
        }
        // Before the journal, and before the daemon is asked: no container of the session
        // runs while no watcher would stop it.
        if let Some(watch) = &self.watch {
            watch()?;
        }
        if let Some(j) = &self.journal {
            j.append(id).map_err(|e| {
                format!("the session cannot write down what it starts ({}: {e})", j.path.display())
            })?;
        }
        s.ids.insert(id.to_string());
        s.in_flight.push(id.to_string());
        Ok(InFlight(self, id.to_string()))
    }

    /// Closes the record (no call sets a container running from now on) and waits up to
    /// [`CLOSE_WAIT`] for the calls in flight. Returns every container recorded, and those
    /// whose calls were still in flight when the wait ended.
    fn close(&self) -> (BTreeSet<String>, Vec<String>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        let (mut s, _) = self
            .settled
            .wait_timeout_while(s, CLOSE_WAIT, |s| !s.in_flight.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut s.ids), s.in_flight.clone())
    }
}

/// Closes the record and stops every container it holds or the session made that is not
/// stopped already (running, paused or restarting), all at once. Says on stderr what it
/// stopped, and names what it could not. The journal goes once everything is stopped; if
/// something could not be, it stays for the next start to try again.
pub(super) fn stop_all(started: &Started, daemon: &Daemon, session: &str) {
    let (ids, in_flight) = started.close();
    let ran = !ids.is_empty() || !in_flight.is_empty();
    let mut failed = Vec::new();
    // A start the daemon has not answered may land after the stops below.
    for id in in_flight {
        failed.push(format!("{id} (its start was not answered in {}s)", CLOSE_WAIT.as_secs()));
    }
    // Every start is recorded before the daemon is asked: a session that recorded none set
    // nothing running, and the daemon is not asked (a round trip at every sandbox's exit).
    let stopped = if ran { stop(ids, daemon, session, &mut failed) } else { Vec::new() };
    if !stopped.is_empty() {
        eprintln!(
            "ocsb: docker: stopped {} (kept, not removed): nothing the session started runs on after \
             it; `docker start` in the next session runs it again",
            stopped.join(", ")
        );
    }
    if !failed.is_empty() {
        eprintln!(
            "ocsb: docker: could not stop {}: it may still change the project after this check; \
             stop it with `docker stop`, then look at `git status` before running git there",
            failed.join(", ")
        );
    }
    if let Some(j) = &started.journal {
        if ran {
            let roots = started.roots.lock().unwrap_or_else(|p| p.into_inner()).clone();
            sweep(&j.state_dir, &roots, j.since);
        }
        // Only now: a launcher that dies in the sweep leaves it to the next start.
        if failed.is_empty() {
            j.remove();
        }
    }
}

/// Sweeps `roots` for what a session's containers left since `since`
/// ([`ocsb_sandbox::strays`]), says on stderr what was moved aside (the terminal at a session's
/// end and at a start, `docker.log` for the watcher), and keeps what grants a privilege among
/// the audit's findings: `ocsb audit` lists them, and no sandbox starts while one stands.
fn sweep(state_dir: &Path, roots: &[PathBuf], since: i64) {
    use ocsb_sandbox::strays;
    if roots.is_empty() {
        return;
    }
    // The launcher runs as the user whose sandbox it is.
    let user = nix::unistd::geteuid().as_raw();
    let swept = strays::sweep(roots, since.saturating_sub(strays::CLOCK_SLACK), user, strays::LIMITS);
    let granting: Vec<_> =
        swept.found.iter().filter(|f| f.stray.grants()).map(|f| f.finding.clone()).collect();
    let recorded = ocsb_sandbox::audit::record(state_dir, &granting);
    if !swept.found.is_empty() {
        let all: Vec<_> = swept.found.iter().map(|f| f.finding.clone()).collect();
        let refuse = if granting.is_empty() {
            ""
        } else {
            "; ocsb will not start here until those that grant a privilege are resolved"
        };
        eprintln!(
            "ocsb: WARNING: the session's containers left on the project's paths what the sandbox \
             itself cannot (moved aside where they could be, into a directory only you can enter; nothing was \
             deleted){refuse}:{}\n  \
             fix: {SWEEP_FIX}",
            ocsb_sandbox::audit::render(&all)
        );
    }
    if let Err(e) = recorded {
        eprintln!("ocsb: warning: {e}");
    }
    if !swept.unseen.is_empty() {
        eprintln!(
            "ocsb: warning: docker: the look for what the session's containers left did not see {}",
            swept.unseen.join(", ")
        );
    }
}

/// What to do about what [`sweep`] moved aside.
const SWEEP_FIX: &str = "inspect each path (`ls -la PATH`); remove what you do not want (`sudo rm -r \
    PATH` for what another uid owns), then run `ocsb audit`; to keep one, put it back as its line says and \
    run `ocsb audit --accept`";

/// Stops what the sessions of launchers that died left running: every container a journal in
/// `dir` lists that no live launcher holds, and every container labelled with that session,
/// each on the daemon that session used (whatever the settings or `DOCKER_HOST` of this start
/// say). A journal whose containers are all stopped goes; one with a container that could not
/// be stopped stays, and the caller is told: the check that follows cannot vouch for a project
/// such a container may still write.
///
/// It holds the journals' directory locked throughout, so a start made meanwhile (right after a
/// kill, while the launcher's watcher stops what it left) waits for the stops to end: it would
/// take a journal locked for them for a live session's, and check the checkouts while its
/// containers still ran.
pub(super) fn stop_left_behind(at: &Paths) -> Result<()> {
    stop_left_behind_by(at, None)
}

/// What the watcher of the launcher `pid` does once that launcher is gone: [`stop_left_behind`],
/// after waiting, at most `limit` and under the directory's lock (so that a start made
/// meanwhile waits too), until the launcher's own journals are let go ([`wait_released`]).
pub(super) fn stop_after_exit(at: &Paths, pid: u32, limit: Duration) -> Result<()> {
    stop_left_behind_by(at, Some((pid, limit)))
}

fn stop_left_behind_by(at: &Paths, exited: Option<(u32, Duration)>) -> Result<()> {
    let journals = at.sessions.clone();
    let _looking = match lock_directory(&journals, false) {
        Ok(Some(lock)) => lock,
        Ok(None) => return Ok(()), // no session has run
        Err(e) => {
            return Err(Error::failed(
                format!("the Docker sessions' journals in {} cannot be read: {e}", journals.display()),
                "make it a directory of yours that you can read, or remove it if no container of the \
                 project runs",
            ));
        }
    };
    if let Some((pid, limit)) = exited
        && !wait_released(&journals, pid, limit)
    {
        eprintln!(
            "ocsb: docker: the journal of launcher {pid} was still held {} s after it ended; what it \
             lists is left to the project's next start",
            limit.as_secs()
        );
    }
    let (dead, mut failed) = dead_journals(&journals);
    for dead in dead {
        let mut not_stopped = Vec::new();
        let ran = !dead.ids.is_empty();
        let stopped = match &dead.daemon {
            Some(daemon) => stop(dead.ids, daemon, &dead.session, &mut not_stopped),
            // Its launcher died while making it, before the session served anything.
            None if dead.ids.is_empty() => Vec::new(),
            None => {
                not_stopped.push(format!(
                    "those of {} (its journal names no daemon; remove it if they are gone)",
                    dead.path.display()
                ));
                Vec::new()
            }
        };
        if !stopped.is_empty() {
            eprintln!(
                "ocsb: docker: stopped {} (kept, not removed): left running by session {}, whose \
                 launcher ended without stopping it",
                stopped.join(", "),
                dead.session
            );
        }
        // Every start is in the journal before the daemon is asked: a session that lists none
        // ran no container.
        if ran {
            sweep(&at.state_dir, &dead.roots, dead.since.unwrap_or(0));
        }
        if not_stopped.is_empty() {
            let _ = std::fs::remove_file(&dead.path);
        }
        failed.extend(not_stopped);
    }
    if failed.is_empty() {
        return Ok(());
    }
    Err(Error::failed(
        format!(
            "containers a session whose launcher died left running could not be stopped: {}; they may \
             still change the project",
            failed.join(", ")
        ),
        "start the Docker daemon the session used if it is down, or stop them with `docker stop`; then \
         start again",
    ))
}

/// The journal of a session whose launcher died, locked now by the caller.
struct Dead {
    session: String,
    path: PathBuf,
    /// The daemon the session's containers ran on; `None` when the journal names none.
    daemon: Option<Daemon>,
    ids: BTreeSet<String>,
    /// What its containers could write, and when it began (none in an older build's journal:
    /// then whatever changed is the session's).
    roots: Vec<PathBuf>,
    since: Option<i64>,
    _lock: File,
}

/// The journals in `journals` that no live launcher holds, each locked for the caller, and what
/// could not be read (a journal unread is never taken for none). The caller holds the
/// directory's lock, so a journal being made is never taken for a dead launcher's.
fn dead_journals(journals: &Path) -> (Vec<Dead>, Vec<String>) {
    let (mut dead, mut unread) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(journals) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (dead, unread),
        Err(e) => return (dead, vec![format!("those {} lists ({e})", journals.display())]),
    };
    let mut names = entries.flatten().filter_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        (e.file_type().is_ok_and(|t| t.is_file()) && is_session_name(&name)).then_some(name)
    });
    for name in names.by_ref().take(MAX_JOURNALS) {
        let path = journals.join(&name);
        let file = match open_journal(&path, false) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // its session ended
            Err(e) => {
                unread.push(format!("those {} lists ({e})", path.display()));
                continue;
            }
        };
        // Held by a launcher that lives: its own end stops its containers.
        if file.try_lock().is_err() {
            continue;
        }
        let mut lines = std::io::BufReader::new(&file).lines().map_while(std::result::Result::ok);
        let daemon = lines
            .next()
            .and_then(|l| l.strip_prefix(DAEMON).map(PathBuf::from))
            .filter(|p| p.is_absolute())
            .map(|socket| Daemon { socket });
        let (mut ids, mut roots, mut since) = (BTreeSet::new(), Vec::new(), None);
        for l in lines {
            if let Some(t) = l.strip_prefix(SINCE) {
                since = t.parse().ok();
            } else if let Some(r) = l.strip_prefix(ROOT) {
                let r: Option<PathBuf> = serde_json::from_str::<String>(r).ok().map(PathBuf::from);
                roots.extend(r.filter(|r| r.is_absolute()));
            } else if is_container_ref(&l) {
                ids.insert(l);
            }
        }
        dead.push(Dead { session: name, path, daemon, ids, roots, since, _lock: file });
    }
    // Those handled now go; the next start looks at the rest.
    if names.next().is_some() {
        unread
            .push(format!("those of the journals in {} beyond the first {MAX_JOURNALS}", journals.display()));
    }
    (dead, unread)
}

/// Stops, all at once, each of `ids` and each container labelled with `session` that is not
/// stopped already. Returns the names of those it stopped; adds what it could not to `failed`.
fn stop(mut ids: BTreeSet<String>, daemon: &Daemon, session: &str, failed: &mut Vec<String>) -> Vec<String> {
    // Every start is in `ids` before the daemon is asked; the label only adds what a daemon
    // started on its own. So a daemon this user cannot reach, which started nothing for the
    // session, leaves nothing to stop, and any recorded start it cannot be asked about fails
    // below.
    if let Ok((containers, _)) = daemon.labelled(SESSION_LABEL, session) {
        ids.extend(containers.into_iter().map(|c| c.id));
    }
    let mut running = Vec::new();
    for id in ids {
        match daemon.call("GET", &format!("/containers/{}/json", seg(&id)), None) {
            Ok((200, v)) => {
                let status = v["State"]["Status"].as_str().unwrap_or_default();
                if !STOPPED.contains(&status) {
                    let name = v["Name"].as_str().unwrap_or(&id).trim_start_matches('/').to_string();
                    running.push((id, name));
                }
            }
            Ok((404, _)) => {} // removed meanwhile
            Ok((code, _)) => failed.push(format!("{id} (inspect answered {code})")),
            Err(e) => failed.push(format!("{id} ({e})")),
        }
    }
    // All at once: each may take the whole grace period.
    let results: Vec<(String, Result<bool, String>)> = std::thread::scope(|scope| {
        let stops: Vec<_> = running
            .iter()
            .map(|(id, name)| {
                let target = format!("/containers/{}/stop?t={STOP_GRACE_SECS}", seg(id));
                (name.clone(), scope.spawn(move || daemon.call("POST", &target, None)))
            })
            .collect();
        stops
            .into_iter()
            .map(|(name, stop)| {
                let result = match stop.join() {
                    Ok(Ok((204, _))) => Ok(true),
                    Ok(Ok((304, _))) => Ok(false), // stopped already
                    Ok(Ok((code, v))) => Err(format!("stop answered {code}: {}", v["message"])),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the stop call failed".into()),
                };
                (name, result)
            })
            .collect()
    });
    let mut stopped = Vec::new();
    for (name, result) in results {
        match result {
            Ok(true) => stopped.push(name),
            Ok(false) => {}
            Err(e) => failed.push(format!("{name} ({e})")),
        }
    }
    stopped
}

/// Journals looked at per start: they are one per session whose launcher died, and each is
/// removed once its containers are stopped.
const MAX_JOURNALS: usize = 256;

/// The first line of a journal: the daemon's socket, after this.
const DAEMON: &str = "daemon ";

/// A journal's line with the session's start (seconds since the epoch), after this.
const SINCE: &str = "since ";

/// A journal's line with a host path the session's containers could write (a JSON string),
/// after this.
const ROOT: &str = "root ";

/// The lock file of the journals' directory. A journal is made (created, locked, headed) under
/// it, and every look for dead journals takes it: without it a start looking in the moment
/// between another's creating its journal and locking it took that journal for a dead
/// launcher's, and the other start failed.
const DIRECTORY_LOCK: &str = ".lock";

/// A session's journal: the daemon's socket, then the full id of each container it set
/// running, a line each, written before the daemon is asked to. The session holds it locked
/// (`flock`) until its launcher exits, however it exits, so a journal that can be locked is a
/// dead launcher's.
pub(super) struct Journal {
    path: PathBuf,
    file: Mutex<File>,
    /// The project's state directory (the egress state directory's parent).
    state_dir: PathBuf,
    /// When the session began, in seconds since the epoch.
    since: i64,
}

impl Journal {
    /// Makes and locks the journal of `session`, whose containers run on `daemon`, in the
    /// gateway's files `at` ([`Paths::sessions`]).
    pub(super) fn create(at: &Paths, session: &str, daemon: &Daemon) -> Result<Journal> {
        let journals = at.sessions.clone();
        let socket =
            daemon.socket.to_str().filter(|s| !s.contains('\n') && daemon.socket.is_absolute()).ok_or_else(
                || {
                    Error::failed(
                        format!("the Docker socket {} cannot be written down", daemon.socket.display()),
                        "give DOCKER_HOST an absolute unix:// path of UTF-8 without a line break",
                    )
                },
            )?;
        let _making = lock_directory(&journals, true).map_err(|e| Error::io("lock", &journals, e))?;
        let path = journals.join(session);
        let mut file = open_journal(&path, true).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Error::failed(
                format!("{} exists already", path.display()),
                "report this: a session's name is its own",
            ),
            _ => Error::io("create", &path, e),
        })?;
        file.try_lock().map_err(|e| Error::io("lock", &path, std::io::Error::other(e.to_string())))?;
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        file.write_all(format!("{DAEMON}{socket}\n{SINCE}{since}\n").as_bytes())
            .map_err(|e| Error::io("write", &path, e))?;
        let state_dir = at.state_dir.clone();
        Ok(Journal { path, file: Mutex::new(file), state_dir, since })
    }

    fn append(&self, id: &str) -> std::io::Result<()> {
        self.note("", id)
    }

    /// Writes the line `<prefix><text>`.
    fn note(&self, prefix: &str, text: &str) -> std::io::Result<()> {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(format!("{prefix}{text}\n").as_bytes())
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Waits, at most `limit`, until no journal in `journals` of the launcher `pid` (one named
/// `<pid>-…`) is locked, and says whether none is. The launcher's watcher wakes when the
/// launcher's pipe closes, and the kernel lets go of a dying process's descriptors one by one:
/// a journal may still be locked then (by a thread still closing them after the main one is a
/// zombie), and would be taken for a live session's. The caller holds the directory's lock:
/// the probe locks each journal for a moment, in which a start's look would take it for live.
fn wait_released(journals: &Path, pid: u32, limit: Duration) -> bool {
    let prefix = format!("{pid}-");
    let until = std::time::Instant::now() + limit;
    let held = || {
        std::fs::read_dir(journals).into_iter().flatten().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix)
                && is_session_name(&name)
                && open_journal(&e.path(), false).is_ok_and(|f| f.try_lock().is_err())
        })
    };
    loop {
        if !held() {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Takes the lock of the journals' directory `journals` ([`DIRECTORY_LOCK`]), waiting for it,
/// and returns it held; `make` creates the directory (its owner's alone) first. `None` when the
/// directory does not exist and `make` is not set.
fn lock_directory(journals: &Path, make: bool) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if make {
        match std::fs::DirBuilder::new().mode(0o700).create(journals) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    match std::fs::symlink_metadata(journals) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "not a directory; remove it, ocsb keeps its Docker sessions' journals there ({}/)",
                journals.file_name().unwrap_or_default().to_string_lossy()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !make => return Ok(None),
        Err(e) => return Err(e),
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(journals.join(DIRECTORY_LOCK))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            eprintln!(
                "ocsb: docker: waiting for another ocsb of this project (it may be stopping the \
                 containers a killed launcher left)"
            );
            lock.lock()?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    Ok(Some(lock))
}

/// Opens a journal without following a link; `new` makes it (and refuses a name that exists).
fn open_journal(path: &Path, new: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.read(true).custom_flags(nix::libc::O_NOFOLLOW).mode(0o600);
    if new {
        o.append(true).create_new(true);
    }
    o.open(path)
}

/// A session's name as `project_context` makes it: a pid and a hexadecimal number.
fn is_session_name(s: &str) -> bool {
    s.split_once('-').is_some_and(|(pid, n)| {
        !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A container's id or name as the gateway records it (a full id once the policy has named the
/// container it checked); anything else in a journal is not the gateway's.
fn is_container_ref(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory in `dir`, with its gateway's directory made.
    fn at(dir: &tempfile::TempDir) -> Paths {
        let at = Paths::under(dir.path());
        std::fs::create_dir_all(&at.dir).unwrap();
        at
    }

    /// The watcher is started before a start is written down, at each start (its own
    /// `ensure` makes it once), and a watcher that cannot start refuses the start: no container
    /// of the session runs unwatched.
    #[test]
    fn a_start_is_recorded_only_once_the_watcher_runs() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon { socket: dir.path().join("none.sock") };
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = asked.clone();
        let journal = Journal::create(&at(&dir), "2-1", &daemon).unwrap();
        let path = journal.path.clone();
        let started = Started::with_journal(journal).watched_by(Box::new(move || {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0, "none before a start");
        drop(started.record("c0ffee"));
        drop(started.record("web_1"));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(std::fs::read_to_string(&path).unwrap().contains("web_1"));

        let journal = Journal::create(&at(&dir), "2-2", &daemon).unwrap();
        let path = journal.path.clone();
        let refused = Started::with_journal(journal).watched_by(Box::new(|| Err("no watcher".into())));
        let why = refused.record("c0ffee").map(|_| ()).unwrap_err();
        assert!(why.contains("no watcher"), "{why}");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("c0ffee"), "not written down");
        assert!(refused.close().0.is_empty(), "not recorded");
    }

    #[test]
    fn the_end_waits_for_starts_in_flight_and_refuses_later_ones() {
        let started = Arc::new(Started::default());
        drop(started.record("a"));
        let held = started.record("b").map(|_| ());
        assert!(held.is_ok());
        // A start in flight while the session ends: the end waits until it is answered.
        let waiting = started.clone();
        let in_flight = std::thread::spawn(move || {
            let call = waiting.record("c");
            std::thread::sleep(Duration::from_millis(200));
            drop(call);
        });
        std::thread::sleep(Duration::from_millis(50));
        let t = std::time::Instant::now();
        let (ids, left) = started.close();
        assert!(t.elapsed() >= Duration::from_millis(100), "returned before the call was answered");
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(started.record("d").is_err(), "a call after the end is refused");
        let _ = in_flight.join();
    }

    #[test]
    fn a_journal_is_left_behind_only_once_its_launcher_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon { socket: "/run/d.sock".into() };
        let journal = Journal::create(&at(&dir), "4242-1f", &daemon).unwrap();
        let started = Started::with_journal(journal);
        drop(started.record("c0ffee"));
        drop(started.record("web_1"));
        assert!(dead_journals(&at(&dir).sessions).0.is_empty(), "held by a launcher that lives");
        assert!(Journal::create(&at(&dir), "4242-1f", &daemon).is_err(), "a session's name is its own");
        // What a foreign file in the directory holds is not taken for a journal; one without
        // a daemon is dead with no daemon to ask.
        let journals = at(&dir).sessions;
        std::fs::write(journals.join("notes"), "daemon /x\nc0ffee\n").unwrap();
        std::fs::write(journals.join("7-a"), "../x\n\nabc\n").unwrap();
        drop(started);
        let (mut dead, unread) = dead_journals(&at(&dir).sessions);
        assert!(unread.is_empty(), "{unread:?}");
        dead.sort_by(|a, b| a.session.cmp(&b.session));
        let found: Vec<(&str, Option<&Path>, Vec<&str>)> = dead
            .iter()
            .map(|d| {
                let daemon = d.daemon.as_ref().map(|d| d.socket.as_path());
                (d.session.as_str(), daemon, d.ids.iter().map(String::as_str).collect())
            })
            .collect();
        assert_eq!(
            found,
            [
                ("4242-1f", Some(Path::new("/run/d.sock")), vec!["c0ffee", "web_1"]),
                ("7-a", None, vec!["abc"])
            ]
        );
        // While one start handles them, another skips them.
        assert!(dead_journals(&at(&dir).sessions).0.is_empty());
        drop(dead);
        // A journal that cannot be read is not taken for none (as root, modes do not hold).
        if !nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(journals.join("7-a"), std::fs::Permissions::from_mode(0o000)).unwrap();
            let (_, unread) = dead_journals(&at(&dir).sessions);
            assert!(unread.iter().any(|u| u.contains("7-a")), "{unread:?}");
        }
    }

    /// A dead session's journal says what its containers could write and when it began, for
    /// the sweep its watcher or the next start makes; a path with a line break stays one line.
    #[test]
    fn a_journal_names_what_its_containers_could_write_and_since_when() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon { socket: "/run/d.sock".into() };
        let started = Started::with_journal(Journal::create(&at(&dir), "5-1", &daemon).unwrap());
        let odd = PathBuf::from("/p/a\nbadf00d");
        started.reaches(&[PathBuf::from("/p/proj"), odd.clone()]);
        drop(started.record("c0ffee"));
        assert_eq!(started.journal.as_ref().unwrap().state_dir, dir.path());
        drop(started);
        let (dead, _) = dead_journals(&at(&dir).sessions);
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].roots, [PathBuf::from("/p/proj"), odd]);
        assert_eq!(dead[0].ids.iter().collect::<Vec<_>>(), ["c0ffee"]);
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        assert!(dead[0].since.is_some_and(|t| (now - 5..=now).contains(&t)), "{:?}", dead[0].since);
    }

    #[test]
    fn a_journal_being_made_or_stopped_for_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let journals = at(&dir).sessions;
        // Another start is between creating its journal and locking it, or a watcher is
        // stopping what a dead launcher left: the look waits.
        let making = lock_directory(&journals, true).unwrap().unwrap();
        std::fs::write(journals.join("9-c"), "").unwrap();
        let path = at(&dir);
        let look = std::thread::spawn(move || stop_left_behind(&path).map_err(|e| e.to_string()));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!look.is_finished(), "looked while the directory was held");
        // That start died there: its journal names no daemon and lists nothing, and goes.
        drop(making);
        look.join().unwrap().unwrap();
        assert!(!journals.join("9-c").exists());
    }

    #[test]
    fn the_watcher_waits_until_its_launchers_journals_are_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon { socket: "/run/d.sock".into() };
        let journal = Journal::create(&at(&dir), "77-1", &daemon).unwrap();
        let let_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(journal);
        });
        let t = std::time::Instant::now();
        assert!(wait_released(&at(&dir).sessions, 77, Duration::from_secs(5)));
        assert!(t.elapsed() >= Duration::from_millis(100), "returned while the journal was held");
        let_go.join().unwrap();
        // Another launcher's journal is not waited for; one never let go, only up to the limit.
        let _other = Journal::create(&at(&dir), "78-1", &daemon).unwrap();
        let t = std::time::Instant::now();
        assert!(wait_released(&at(&dir).sessions, 77, Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_millis(100));
        assert!(!wait_released(&at(&dir).sessions, 78, Duration::from_millis(100)));
        assert!(t.elapsed() >= Duration::from_millis(100));
        // The watcher's stop waits for the launcher's journal under the directory's lock, and
        // leaves one still held to the next start.
        let look = std::thread::spawn({
            let path = at(&dir);
            move || stop_after_exit(&path, 78, Duration::from_millis(300)).map_err(|e| e.to_string())
        });
        std::thread::sleep(Duration::from_millis(100));
        let blocked = std::fs::OpenOptions::new().read(true).open(at(&dir).sessions.join(DIRECTORY_LOCK));
        assert!(blocked.unwrap().try_lock().is_err(), "waited without the directory's lock");
        look.join().unwrap().unwrap();
        assert!(at(&dir).sessions.join("78-1").exists());
    }

    /// A session that set nothing running ends without asking the daemon anything.
    #[test]
    fn a_session_that_started_nothing_does_not_ask_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("quiet-daemon.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let daemon = Daemon { socket };
        let started = Started::with_journal(Journal::create(&at(&dir), "3-1", &daemon).unwrap());
        stop_all(&started, &daemon, "3-1");
        assert!(!at(&dir).sessions.join("3-1").exists());
        let asked = listener.accept();
        assert!(asked.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock), "{asked:?}");
    }

    /// A daemon that answers every call with an empty list.
    fn empty_daemon(dir: &Path) -> Daemon {
        use std::io::Read;
        let socket = dir.join("empty-daemon.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                let mut head = [0u8; 4096];
                let _ = c.read(&mut head);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]",
                );
            }
        });
        Daemon { socket }
    }

    #[test]
    fn a_session_whose_containers_all_stopped_leaves_no_journal() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = empty_daemon(dir.path());
        let started = Started::with_journal(Journal::create(&at(&dir), "1-1", &daemon).unwrap());
        // Nothing recorded and nothing labelled with the session: the journal goes.
        stop_all(&started, &daemon, "1-1");
        assert!(!at(&dir).sessions.join("1-1").exists());
        // Nor with a daemon that does not answer (or that this user cannot reach): every start
        // would be in the journal.
        let missing = Daemon { socket: dir.path().join("no-daemon.sock") };
        let started = Started::with_journal(Journal::create(&at(&dir), "1-2", &missing).unwrap());
        stop_all(&started, &missing, "1-2");
        assert!(!at(&dir).sessions.join("1-2").exists());
        // A container that could not be stopped (no daemon answers) keeps it.
        let started = Started::with_journal(Journal::create(&at(&dir), "1-3", &missing).unwrap());
        drop(started.record("c0ffee"));
        stop_all(&started, &missing, "1-3");
        assert!(at(&dir).sessions.join("1-3").exists());
        // Nor does the next start, while that daemon does not answer: it is refused.
        drop(started);
        let e = stop_left_behind(&at(&dir)).unwrap_err().to_string();
        assert!(e.contains("c0ffee") && e.contains("could not be stopped"), "{e}");
        assert!(at(&dir).sessions.join("1-3").exists());
    }
}
