//! The daemon: owns the table for as long as it runs (owner|persist) and looks at its inputs and
//! at the table every tick — 1 s, or 200 ms where no owner flag protects the table. A changed
//! config or resolv.conf, a missing table, and (without owner flags) any change to the ruleset
//! are repaired within a tick. SIGTERM leaves the table enforcing (no open window during a
//! restart or upgrade); only `remove` takes it away.
//!
//! Everything that happens arrives on one channel and is handled on this thread, which holds
//! the netlink socket (with owner flags, only the socket that made the table may change it):
//! D-Bus calls from the bus thread, SIGHUP and SIGTERM from a thread that waits for signals.

use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{SigSet, Signal};

use crate::config;
use crate::dbus::{self, Reply};
use crate::model::Model;
use crate::nft::Nl;
use crate::notify::notify;
use crate::status::{Status, now};

const TICK_OWNED: Duration = Duration::from_secs(1);
const TICK_WATCH: Duration = Duration::from_millis(200);
const BUS_RETRY: Duration = Duration::from_secs(5);

/// What reaches the daemon thread: a D-Bus call polkit authorised, to put the lock in force
/// (`Apply`) or take it away (`Remove`), with the way to answer it; SIGHUP; SIGTERM or SIGINT.
/// No call takes an argument, and none asks for a look at the table: the daemon looks every tick.
pub enum Event {
    Call { enable: bool, reply: Reply },
    Reload,
    Stop,
}

pub fn lock<T>(e: &Mutex<T>) -> MutexGuard<'_, T> {
    e.lock().unwrap_or_else(|p| p.into_inner())
}

struct Engine {
    nl: Nl,
    /// `OWNED` or 0, fixed at start.
    flags: u32,
    enabled: bool,
    /// Changed inputs read once, applied when the next read agrees.
    pending: Option<Model>,
    /// Without owner flags: the ruleset generation right after our last apply.
    generation: Option<u32>,
    /// What the daemon did; `status.model` is the model last applied.
    status: Status,
    /// A copy for readers on other threads (D-Bus `Status`).
    shared: Arc<Mutex<Status>>,
}

impl Engine {
    fn start() -> Result<Engine> {
        let mut nl = Nl::open()?;
        let flags = nl.flags_for(Some(&config::load_model()?))?;
        // `shared` is filled by the first tick's publish, before the bus is served.
        let (status, shared) = (Status::new(flags != 0), Arc::default());
        Ok(Engine { nl, flags, enabled: true, pending: None, generation: None, status, shared })
    }

    /// Re-reads the inputs and looks at the table; applies when `force`, when the inputs changed,
    /// when the table is missing or lost its flags, or (without owner flags) when the ruleset's
    /// generation moved since our apply. On error the table in the kernel stays as it is (fail
    /// closed) and the status says why.
    fn tick(&mut self, force: bool) -> Result<()> {
        let r = self.look(force);
        let (state, error) = match &r {
            Ok(()) => (if self.enabled { "enforcing" } else { "removed" }, None),
            Err(e) => ("error", Some(format!("{e:#}"))),
        };
        if (state, &error) != (self.status.state.as_str(), &self.status.error) {
            if let Some(e) = &error {
                eprintln!("ocsb-netlock-helper: {e} (the table in the kernel is left as it is)");
            }
            (self.status.state, self.status.error) = (state.into(), error);
            self.publish();
        }
        r
    }

    fn look(&mut self, force: bool) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let read = config::load_model();
        // Changed inputs are applied once two reads a tick apart agree (at once when asked to or
        // at start): a resolv.conf being rewritten in place is never taken half-written.
        let last = self.status.model.clone();
        let fresh = match &read {
            Ok(m) if force || last.is_none() => Some(m.clone()),
            Ok(m) if last.as_ref() == Some(m) => None,
            Ok(m) if self.pending.as_ref() == Some(m) => Some(m.clone()),
            Ok(m) => self.pending.replace(m.clone()).and(None),
            Err(_) => None,
        };
        let present = self.nl.table()?.is_some_and(|f| f & self.flags == self.flags);
        let generation = if self.flags == 0 { Some(self.nl.generation()?) } else { None };
        let moved = generation.is_some() && generation != self.generation;
        // Repairs use the last model applied, also while the inputs cannot be read: a broken
        // config must not leave a deleted or edited table as it is.
        let (model, why) = match (fresh, last) {
            (Some(m), _) => (m, if force { "asked to" } else { "inputs changed" }),
            (None, Some(m)) if !present => (m, "table missing"),
            (None, Some(m)) if moved => (m, "the ruleset changed"),
            _ => return read.map(drop),
        };
        self.nl.apply(&model, self.flags)?;
        // The generation before and after tells whether this batch was the only commit in
        // between; only then is the new one kept as ours, otherwise the next tick applies again.
        if let Some(b) = generation {
            let after = self.nl.generation()?;
            self.generation = (after == b.wrapping_add(1)).then_some(after);
        }
        let (gid, dns4, dns6) = (model.gid, &model.dns4, &model.dns6);
        eprintln!("ocsb-netlock-helper: {why}: applied gid {gid} dns {dns4:?} {dns6:?}");
        (self.status.last_apply, self.status.model, self.pending) = (now(), Some(model), None);
        self.publish();
        read.map(drop)
    }

    /// Puts the lock in force from a fresh read of the inputs, or takes it away until the next
    /// `Apply`, SIGHUP or restart. The answer is the new state, or the error.
    fn set(&mut self, enable: bool) -> Result<String, String> {
        let r = if enable {
            self.enabled = true;
            self.tick(true)
        } else {
            self.nl.remove(self.flags).and_then(|()| {
                (self.enabled, self.status.model) = (false, None);
                self.tick(false)
            })
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

pub fn run() -> Result<()> {
    let signals: SigSet = [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT].into_iter().collect();
    // Blocked before any thread exists, so every thread inherits the mask and only the waiting
    // thread below takes them.
    signals.thread_block().context("sigprocmask")?;

    let mut engine = Engine::start()?;
    engine.tick(true).context("initial apply failed")?;
    let owned = engine.flags != 0;
    let tick = if owned { TICK_OWNED } else { TICK_WATCH };

    let (tx, rx) = std::sync::mpsc::channel();
    let to_loop = tx.clone();
    std::thread::spawn(move || {
        while let Ok(s) = signals.wait() {
            let _ = to_loop.send(if s == Signal::SIGHUP { Event::Reload } else { Event::Stop });
        }
    });
    serve_bus(tx, engine.shared.clone());

    notify(&format!("READY=1\nSTATUS=enforcing (owner flags: {owned})"));
    eprintln!("ocsb-netlock-helper: daemon ready (owner flags: {owned})");
    let mut next = Instant::now() + tick;
    loop {
        match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(Event::Call { enable, reply }) => reply.send(engine.set(enable)),
            Ok(Event::Reload) => {
                notify("RELOADING=1");
                let _ = engine.set(true);
                notify("READY=1");
            }
            Ok(Event::Stop) => break,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => bail!("the signal thread ended"),
        }
        // Checked after every event too, so a stream of calls cannot starve the watcher.
        if Instant::now() >= next {
            let _ = engine.tick(false);
            // The loop is alive (WatchdogSec= in the unit restarts a daemon stuck anywhere).
            notify("WATCHDOG=1");
            next = Instant::now() + tick;
        }
    }
    notify("STOPPING=1");
    engine.status.state = if engine.enabled { "stopped (table left enforcing)" } else { "stopped" }.into();
    engine.publish();
    eprintln!("ocsb-netlock-helper: stopping; the table stays in force");
    Ok(())
}

/// The system-bus interface, on a thread of its own. The unit starts before dbus.service (the
/// lock must be in force before any network comes up), so a missing bus is retried every few
/// seconds, and after a restart of dbus.service the interface connects again; the lock never
/// depends on it.
fn serve_bus(tx: Sender<Event>, shared: Arc<Mutex<Status>>) {
    std::thread::spawn(move || {
        let mut warned = false;
        loop {
            let r = dbus::serve(&tx, &shared);
            match &r {
                Ok(()) => eprintln!("ocsb-netlock-helper: lost the system bus; connecting again"),
                Err(e) if !warned => {
                    eprintln!("ocsb-netlock-helper: no system bus ({e}); retrying; the lock is in force")
                }
                Err(_) => {}
            }
            warned = r.is_err();
            std::thread::sleep(BUS_RETRY);
        }
    });
}
