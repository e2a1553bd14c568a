//! The daemon: owns the table for as long as it runs (owner|persist), re-reads its inputs on SIGHUP,
//! on resolv.conf changes and every 60 s, and without the owner flags re-applies within a tick
//! when the table disappears or anything in the ruleset changes. SIGTERM leaves the table
//! enforcing (no open window during a restart or upgrade); only `remove` takes it away.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::config::{self, RESOLV_PATH};
use crate::model::Model;
use crate::nft::{Nl, OWNED};
use crate::notify::notify;
use crate::status::{Status, now};

const REREAD: Duration = Duration::from_secs(60);
/// How often the table is checked: often where the kernel cannot protect it.
const TICK_OWNED: Duration = Duration::from_secs(1);
const TICK_WATCH: Duration = Duration::from_millis(200);
const REFRESH_MIN_GAP: Duration = Duration::from_secs(2);
#[cfg_attr(not(feature = "dbus"), allow(dead_code))]
const BUS_RETRY: Duration = Duration::from_secs(5);

/// A request from the D-Bus thread; the answer is the new state or an error text.
pub enum Request {
    Refresh,
    Apply,
    Remove,
}
pub type Call = (Request, Reply);

/// The daemon thread's answer to one D-Bus call, awaited by the handler ([`Answer`]) without
/// blocking zbus's executor: `send` fills the slot and wakes the handler's task; a reply dropped
/// unanswered (the loop ended) answers with an error, so no call waits forever.
pub struct Reply(Arc<Mutex<Slot>>);

#[derive(Default)]
pub struct Slot {
    value: Option<Result<String, String>>,
    waker: Option<std::task::Waker>,
}

/// The handler's side of a [`Reply`].
pub struct Answer(Arc<Mutex<Slot>>);

pub fn reply_pair() -> (Reply, Answer) {
    let slot = Arc::new(Mutex::new(Slot::default()));
    (Reply(slot.clone()), Answer(slot))
}

impl Reply {
    pub fn send(self, value: Result<String, String>) {
        lock(&self.0).value = Some(value);
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        let mut s = lock(&self.0);
        s.value.get_or_insert_with(|| Err("the daemon loop ended".into()));
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

impl std::future::Future for Answer {
    type Output = Result<String, String>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut s = lock(&self.0);
        match s.value.take() {
            Some(v) => std::task::Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}

/// The daemon thread's state. The netlink socket lives here, on one thread, because with owner
/// flags only the socket that created the table may change it.
pub struct Engine {
    nl: Nl,
    flags: u32,
    enabled: bool,
    model: Option<Model>,
    /// Without owner flags: the ruleset generation right after our last apply.
    generation: Option<u32>,
    last_refresh: Option<Instant>,
    pub status: Status,
    /// A copy for readers on other threads (D-Bus `Status`).
    shared: Arc<Mutex<Status>>,
}

impl Engine {
    pub fn start() -> Result<Engine> {
        let mut nl = Nl::open()?;
        let owned = nl.use_owner(&config::load_model()?)?;
        let flags = if owned { OWNED } else { 0 };
        let status = Status::new(owned);
        let shared = Arc::new(Mutex::new(status.clone()));
        Ok(Engine {
            nl,
            flags,
            enabled: true,
            model: None,
            generation: None,
            last_refresh: None,
            status,
            shared,
        })
    }

    /// Applies `model`. Without owner flags, the ruleset generation before and after tells
    /// whether this batch was the only commit in between; only then is the generation kept as
    /// "ours", otherwise the next check applies again.
    fn apply(&mut self, model: &Model) -> Result<()> {
        let before = if self.flags == 0 { Some(self.nl.generation()?) } else { None };
        self.nl.apply(model, self.flags)?;
        self.status.last_apply = now();
        if let Some(b) = before {
            let after = self.nl.generation()?;
            self.generation = (after == b.wrapping_add(1)).then_some(after);
        }
        Ok(())
    }

    /// Re-reads the inputs; applies when they changed, when `force`, or when the table is gone.
    /// On error the previous table stays in force (fail closed) and the status says why.
    pub fn refresh(&mut self, force: bool) -> Result<()> {
        self.last_refresh = Some(Instant::now());
        let r = self.refresh_inner(force);
        if let Err(e) = &r {
            self.status.state = "error".into();
            self.status.error = Some(format!("{e:#}"));
            eprintln!("ocsb-netlock-helper: {e:#} (previous table left in force)");
        }
        self.publish();
        r
    }

    fn refresh_inner(&mut self, force: bool) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let model = config::load_model()?;
        let present = self.nl.table()?.is_some_and(|t| t.flags & self.flags == self.flags);
        if force || !present || self.model.as_ref() != Some(&model) {
            self.apply(&model)?;
            if self.model.as_ref() != Some(&model) {
                eprintln!(
                    "ocsb-netlock-helper: applied gid {} dns4 {:?} dns6 {:?}",
                    model.gid, model.dns4, model.dns6
                );
            }
        }
        self.status.set_model(&model);
        self.status.state = "enforcing".into();
        self.status.error = None;
        self.model = Some(model);
        Ok(())
    }

    /// The watcher: puts the table back if someone removed it (only possible without owner flags,
    /// or after `nft` adopted an orphan), and without owner flags also if anything in the ruleset
    /// changed since our last apply (a rule added to or flushed from our chains).
    pub fn check(&mut self) -> Result<()> {
        self.status.last_check = now();
        if !self.enabled {
            return Ok(());
        }
        let present = self.nl.table()?.is_some_and(|t| t.flags & self.flags == self.flags);
        let changed = self.flags == 0 && Some(self.nl.generation()?) != self.generation;
        match (self.model.clone(), present, changed) {
            (Some(m), false, _) | (Some(m), _, true) => {
                let what = if present { "the ruleset changed" } else { "table missing" };
                eprintln!("ocsb-netlock-helper: {what}, re-applying");
                self.apply(&m)?;
                self.publish();
            }
            (None, _, _) => self.refresh(true)?,
            _ => {}
        }
        Ok(())
    }

    /// D-Bus `Refresh`: rate-limited, so an allowed caller cannot keep the daemon busy.
    pub fn refresh_limited(&mut self) -> Result<()> {
        if self.last_refresh.is_some_and(|t| t.elapsed() < REFRESH_MIN_GAP) {
            return Ok(());
        }
        self.refresh(false)
    }

    pub fn enable(&mut self) -> Result<()> {
        self.enabled = true;
        self.refresh(true)
    }

    /// Takes the lock away until `Apply` or a restart.
    pub fn remove(&mut self) -> Result<()> {
        self.nl.remove(self.flags)?;
        self.enabled = false;
        self.model = None;
        self.status.state = "removed".into();
        self.publish();
        Ok(())
    }

    fn handle(&mut self, req: Request) -> Result<String, String> {
        let r = match req {
            Request::Refresh => self.refresh_limited(),
            Request::Apply => self.enable(),
            Request::Remove => self.remove(),
        };
        r.map(|()| self.status.state.clone()).map_err(|e| format!("{e:#}"))
    }

    fn publish(&mut self) {
        *lock(&self.shared) = self.status.clone();
        if let Err(e) = self.status.write() {
            eprintln!("ocsb-netlock-helper: {e:#}");
        }
    }
}

pub fn lock<T>(e: &Mutex<T>) -> MutexGuard<'_, T> {
    e.lock().unwrap_or_else(|p| p.into_inner())
}

/// Directories whose changes can change the DNS set: the one holding /etc/resolv.conf and the one
/// holding its final target (resolved and NetworkManager replace the target by rename).
fn watch_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(RESOLV_PATH).parent().unwrap_or(Path::new("/")).to_path_buf()];
    if let Ok(target) = std::fs::canonicalize(RESOLV_PATH) {
        if let Some(d) = target.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
    }
    dirs
}

fn arm_inotify() -> Result<Inotify> {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).context("inotify_init")?;
    let mask = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_ONLYDIR;
    for d in watch_dirs() {
        // A directory that does not exist yet is noticed by the 60 s re-read.
        let _ = ino.add_watch(&d, mask);
    }
    Ok(ino)
}

pub fn run() -> Result<()> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        mask.add(s);
    }
    // Blocked before any thread exists, so every thread (zbus's too) inherits the mask.
    mask.thread_block().context("sigprocmask")?;
    let sfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;

    let mut engine = Engine::start()?;
    engine.refresh(true).context("initial apply failed")?;
    let owned = engine.status.owner_flags;
    let tick = if owned { TICK_OWNED } else { TICK_WATCH };

    // D-Bus requests arrive on a channel; a byte on `wake` makes poll() return at once.
    let (tx, rx): (Sender<Call>, Receiver<Call>) = std::sync::mpsc::channel();
    let (mut wake, wake_tx) = UnixStream::pair().context("socketpair")?;
    wake.set_nonblocking(true)?;
    serve_bus(tx, wake_tx, engine.shared.clone());

    notify(&format!("READY=1\nSTATUS=enforcing (owner flags: {owned})"));
    eprintln!("ocsb-netlock-helper: daemon ready (owner flags: {owned})");
    let mut ino = arm_inotify()?;
    let mut last_read = Instant::now();
    loop {
        let mut fds = [
            PollFd::new(sfd.as_fd_ref(), PollFlags::POLLIN),
            PollFd::new(ino.as_fd_ref(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd_ref(), PollFlags::POLLIN),
        ];
        let ms = u16::try_from(tick.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e).context("poll"),
        }
        let sig_ready = fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
        let ino_ready = fds[1].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
        let _ = wake.read(&mut [0u8; 64]);
        while let Ok((req, reply)) = rx.try_recv() {
            reply.send(engine.handle(req));
        }
        if sig_ready {
            while let Ok(Some(info)) = sfd.read_signal() {
                if info.ssi_signo == Signal::SIGHUP as u32 {
                    notify("RELOADING=1");
                    let _ = engine.enable();
                    notify("READY=1");
                } else {
                    notify("STOPPING=1");
                    let e = &mut engine;
                    e.status.state =
                        if e.enabled { "stopped (table left enforcing)".into() } else { "stopped".into() };
                    e.publish();
                    eprintln!("ocsb-netlock-helper: stopping; the table stays in force");
                    return Ok(());
                }
            }
        }
        if ino_ready {
            let _ = ino.read_events();
            // Give a writer that renames several files a moment, then re-arm (the target may move).
            std::thread::sleep(Duration::from_millis(50));
            ino = arm_inotify()?;
            let _ = engine.refresh(false);
            last_read = Instant::now();
        } else if last_read.elapsed() >= REREAD {
            ino = arm_inotify()?;
            let _ = engine.refresh(false);
            last_read = Instant::now();
        }
        if let Err(e) = engine.check() {
            eprintln!("ocsb-netlock-helper: check failed: {e:#}");
        }
        // The loop is alive (WatchdogSec= in the unit restarts a daemon stuck anywhere).
        notify("WATCHDOG=1");
    }
}

/// The optional system-bus interface, on a thread of its own. The unit starts before
/// dbus.service (the lock must be in force before any network comes up), so a missing bus is
/// retried every few seconds, and a bus that goes away (a restart of dbus.service) is noticed by
/// a ping and connected to again; the lock never depends on it.
#[cfg(feature = "dbus")]
fn serve_bus(tx: Sender<Call>, wake: UnixStream, shared: Arc<Mutex<Status>>) {
    std::thread::spawn(move || {
        let mut warned = false;
        loop {
            let conn = wake
                .try_clone()
                .map_err(zbus::Error::from)
                .and_then(|w| crate::dbus::serve(crate::dbus::Handle::new(tx.clone(), w, shared.clone())));
            match conn {
                Ok(c) => {
                    eprintln!("ocsb-netlock-helper: serving {} on the system bus", crate::dbus::BUS_NAME);
                    warned = false;
                    while crate::dbus::alive(&c) {
                        std::thread::sleep(BUS_RETRY);
                    }
                    eprintln!("ocsb-netlock-helper: lost the system bus; connecting again");
                }
                Err(e) if !warned => {
                    eprintln!(
                        "ocsb-netlock-helper: D-Bus interface not available yet ({e}); retrying every {}s; the lock itself is in force",
                        BUS_RETRY.as_secs()
                    );
                    warned = true;
                }
                Err(_) => {}
            }
            std::thread::sleep(BUS_RETRY);
        }
    });
}

#[cfg(not(feature = "dbus"))]
fn serve_bus(_tx: Sender<Call>, _wake: UnixStream, _shared: Arc<Mutex<Status>>) {}

/// `AsFd` borrowing for poll without naming the concrete fd types.
trait AsFdRef {
    fn as_fd_ref(&self) -> std::os::fd::BorrowedFd<'_>;
}
impl<T: std::os::fd::AsFd> AsFdRef for T {
    fn as_fd_ref(&self) -> std::os::fd::BorrowedFd<'_> {
        self.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    fn poll(a: &mut Answer) -> Poll<Result<String, String>> {
        std::pin::Pin::new(a).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_reply_answers_once_and_a_dropped_one_answers_with_an_error() {
        let (reply, mut answer) = reply_pair();
        assert_eq!(poll(&mut answer), Poll::Pending);
        reply.send(Ok("enforcing".into()));
        assert_eq!(poll(&mut answer), Poll::Ready(Ok("enforcing".into())));
        let (reply, mut answer) = reply_pair();
        drop(reply);
        assert_eq!(poll(&mut answer), Poll::Ready(Err("the daemon loop ended".into())));
    }
}
