//! Ctrl-C and friends for `ocsb run`: a handler only records the signal; the main loop stops
//! the web front and asks the sandbox to end (SIGTERM to the launcher's own children in its
//! session, which leaves out the egress filter: it runs in a session of its own and outlives
//! `run`, as in the seed).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Install the handlers for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    let act = SigAction::new(SigHandler::Handler(record), SaFlags::SA_RESTART, SigSet::empty());
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores an integer into an atomic (async-signal-safe).
        let _ = unsafe { sigaction(s, &act) };
    }
}

/// The last signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Children of this process (any thread) that share its session.
fn own_children() -> Vec<i32> {
    let me = std::process::id();
    let my_sid = session_of(me as i32);
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{me}/task")) else { return out };
    for t in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(t.path().join("children")) else { continue };
        for pid in list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            if my_sid.is_some() && session_of(pid) == my_sid && !out.contains(&pid) {
                out.push(pid);
            }
        }
    }
    out
}

fn session_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Ask the sandbox to stop: SIGTERM to our children in our session (the sandbox's stage 2
/// forwards it to OpenCode).
pub fn terminate_children() {
    for pid in own_children() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_children_in_our_session_only() {
        let mut same = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut other = std::process::Command::new("setsid").arg("sleep").arg("30").spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let kids = own_children();
        assert!(kids.contains(&(same.id() as i32)));
        assert!(
            !kids.contains(&(other.id() as i32)),
            "a child in its own session (the filter) is left alone"
        );
        same.kill().unwrap();
        same.wait().unwrap();
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
