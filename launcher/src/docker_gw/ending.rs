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

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ocsb_policy::docker::SESSION_LABEL;

use super::daemon::{Daemon, seg};

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
}

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
    /// Records that `id` is being set running, unless the session has ended. Hold what it
    /// returns until the daemon has answered: the session's end waits for it, so that it sees
    /// the container running (and stops it) rather than missing a start that lands after.
    pub(super) fn record(&self, id: &str) -> Option<InFlight<'_>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return None;
        }
        s.ids.insert(id.to_string());
        s.in_flight.push(id.to_string());
        Some(InFlight(self, id.to_string()))
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
/// stopped, and names what it could not.
pub(super) fn stop_all(started: &Started, daemon: &Daemon, session: &str) {
    let (mut ids, in_flight) = started.close();
    if let Ok((containers, _)) = daemon.labelled(SESSION_LABEL, session) {
        ids.extend(containers.into_iter().map(|c| c.id));
    }
    let mut failed = Vec::new();
    // A start the daemon has not answered may land after the stops below.
    for id in in_flight {
        failed.push(format!("{id} (its start was not answered in {}s)", CLOSE_WAIT.as_secs()));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_waits_for_starts_in_flight_and_refuses_later_ones() {
        let started = Arc::new(Started::default());
        drop(started.record("a"));
        let held = started.record("b").map(|_| ());
        assert!(held.is_some());
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
        assert!(started.record("d").is_none(), "a call after the end is refused");
        let _ = in_flight.join();
    }
}
