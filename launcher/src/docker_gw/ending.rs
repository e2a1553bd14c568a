//! The end of a session, as far as its containers are concerned: none that can write a host
//! path keeps running after the sandbox has exited.
//!
//! *Why*: the launcher's look at the checkouts when a sandbox exits reports what the agent
//! planted (a repository with `core.fsmonitor`, an index entry under `.git/`), and the next
//! start takes what is there for the user's. A container the agent left running with the
//! project bound writable could plant it a moment after that look, where nothing looks again
//! before the user's own git runs. So the containers the session set running that hold a
//! writable bind are stopped (kept, not removed) before the look; those with only volumes and
//! read-only binds run on, since nothing outside Docker reads a volume.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use ocsb_policy::docker::SESSION_LABEL;
use serde_json::Value;

use super::daemon::{Daemon, seg};

/// How long the end of a session waits for a call that is setting a container running.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Seconds a container gets to stop on `SIGTERM` (or its stop signal) before it is killed.
const STOP_GRACE_SECS: u32 = 5;

/// The containers the session's calls set running (`start`, `restart`, `unpause`), and whether
/// the session has ended. Shared by the connections, which record each such call, and the
/// session's end, which closes the record and stops what it holds.
#[derive(Default)]
pub(super) struct Started {
    closed: bool,
    ids: BTreeSet<String>,
}

/// [`Started`], shared.
pub(super) type Record = Arc<Mutex<Started>>;

/// Held while a call that sets a container running is forwarded and answered, so that the
/// session's end sees either the container running or the call refused.
pub(super) struct Recorded<'a> {
    _held: MutexGuard<'a, Started>,
}

/// Records that `id` is being set running, unless the session has ended. *Why a guard*: the
/// end closes the record under the same lock, so a call in flight has finished (the daemon has
/// answered it) before the end lists what to stop.
pub(super) fn record<'a>(started: &'a Mutex<Started>, id: &str) -> Option<Recorded<'a>> {
    let mut s = started.lock().unwrap_or_else(|p| p.into_inner());
    if s.closed {
        return None;
    }
    s.ids.insert(id.to_string());
    Some(Recorded { _held: s })
}

/// Closes the record: no call sets a container running from now on. Returns what it held,
/// or `None` when a call held it for [`CLOSE_WAIT`] (a daemon that does not answer): the end
/// of a session waits for a start in flight, not forever.
fn close(started: &Mutex<Started>) -> Option<BTreeSet<String>> {
    let until = Instant::now() + CLOSE_WAIT;
    loop {
        let held = match started.try_lock() {
            Ok(s) => Some(s),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(mut s) = held {
            s.closed = true;
            return Some(std::mem::take(&mut s.ids));
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether an inspected container can write a path of the host: a bind mount that is not
/// read-only. Volumes live in Docker's own directory (the gateway serves no driver options, so
/// no volume is a host path under another name).
pub(super) fn writes_host_paths(inspected: &Value) -> bool {
    inspected["Mounts"]
        .as_array()
        .is_some_and(|mounts| mounts.iter().any(|m| m["Type"] == "bind" && m["RW"] == true))
}

/// Closes the record and stops every container it holds, or that the session made, that is
/// running with a writable bind. Says on stderr what it stopped, and what it could not.
pub(super) fn stop_writers(started: &Mutex<Started>, daemon: &Daemon, session: &str) {
    let (mut ids, mut failed) = match close(started) {
        Some(ids) => (ids, Vec::new()),
        None => (BTreeSet::new(), vec!["a container whose start the daemon had not answered".to_string()]),
    };
    // Made by the session: set running only through it, so in the record too, unless the
    // record missed one; asking costs one call.
    if let Ok((containers, _)) = daemon.labelled(SESSION_LABEL, session) {
        ids.extend(
            containers.into_iter().filter(|c| c.state == "running" || c.state == "paused").map(|c| c.id),
        );
    }
    let mut writers = Vec::new();
    for id in ids {
        let inspected = match daemon.call("GET", &format!("/containers/{}/json", seg(&id)), None) {
            Ok((200, v)) => v,
            Ok((404, _)) => continue, // removed meanwhile
            Ok((code, _)) => {
                failed.push(format!("{id} (inspect answered {code})"));
                continue;
            }
            Err(e) => {
                failed.push(format!("{id} ({e})"));
                continue;
            }
        };
        if inspected["State"]["Running"] == true && writes_host_paths(&inspected) {
            let name = inspected["Name"].as_str().unwrap_or(&id).trim_start_matches('/').to_string();
            writers.push((id, name));
        }
    }
    // All at once: each may take the whole grace period.
    let results: Vec<(String, Result<(), String>)> = std::thread::scope(|scope| {
        let stops: Vec<_> = writers
            .iter()
            .map(|(id, name)| {
                let stop = scope.spawn(move || {
                    match daemon.call(
                        "POST",
                        &format!("/containers/{}/stop?t={STOP_GRACE_SECS}", seg(id)),
                        None,
                    ) {
                        Ok((204 | 304, _)) => Ok(()),
                        Ok((code, v)) => Err(format!("stop answered {code}: {}", v["message"])),
                        Err(e) => Err(e.to_string()),
                    }
                });
                (name.clone(), stop)
            })
            .collect();
        stops
            .into_iter()
            .map(|(name, stop)| (name, stop.join().unwrap_or_else(|_| Err("the stop call failed".into()))))
            .collect()
    });
    let mut stopped = Vec::new();
    for (name, result) in results {
        match result {
            Ok(()) => stopped.push(name),
            Err(e) => failed.push(format!("{name} ({e})")),
        }
    }
    if !stopped.is_empty() {
        eprintln!(
            "ocsb: docker: stopped {} (kept, not removed): a container that can write the project does \
             not outlive its session; `docker start` in the next session runs it again",
            stopped.join(", ")
        );
    }
    if !failed.is_empty() {
        eprintln!(
            "ocsb: docker: could not stop {}: it may still write the project after this check; \
             stop it with `docker stop`, then look at `git status` before running git there",
            failed.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_writable_bind_is_a_way_to_the_hosts_files() {
        let bind = |rw: bool| json!({"Mounts": [{"Type": "bind", "Source": "/home/u/p", "RW": rw}]});
        assert!(writes_host_paths(&bind(true)));
        assert!(!writes_host_paths(&bind(false)));
        assert!(!writes_host_paths(&json!({"Mounts": [{"Type": "volume", "Name": "data", "RW": true}]})));
        assert!(!writes_host_paths(&json!({"Mounts": [{"Type": "tmpfs", "RW": true}]})));
        assert!(!writes_host_paths(&json!({"Mounts": []})));
        assert!(!writes_host_paths(&json!({})));
        let mixed = json!({"Mounts": [{"Type": "volume", "RW": true}, {"Type": "bind", "RW": true}]});
        assert!(writes_host_paths(&mixed));
    }

    #[test]
    fn once_the_session_has_ended_nothing_more_is_set_running() {
        let started = Mutex::new(Started::default());
        {
            let held = record(&started, "a");
            assert!(held.is_some());
        }
        assert!(record(&started, "b").is_some());
        let taken = close(&started).unwrap_or_default();
        assert_eq!(taken.into_iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(record(&started, "c").is_none(), "a call after the end is refused");
    }
}
