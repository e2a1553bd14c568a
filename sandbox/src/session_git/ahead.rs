//! A session's git begun on a thread of its own, right after the look at the checkouts,
//! while the launcher's other steps run (the filter's status, the Docker gateway, the
//! ssh-agent relay, the isolated network's server). *Why*: making the agent's git
//! directories, the gates and the tree watch's first walk was a fifth of a start, all of it on
//! one core while the other waited.
//!
//! *Why it is safe to begin early*: nothing of the sandbox exists before the hand-over, so a
//! session begun early is the session the start would begin later, with the same inputs. Those
//! inputs are compared when the start takes it ([`Begun::take`]): a spec that differs in
//! anything but what a command adds to it (its argv, environment, terminal, the ports it
//! reaches, the relays' sockets, the netlock's group), or other checkouts (a look made again),
//! and the session begun early is ended and a new one begun. A start refused meanwhile drops
//! it, which ends it: the last import (nothing ran, so nothing to import) and the agent's
//! directories removed; so does a start that runs its self-tests (their sandboxes take
//! seconds, and have sessions of their own).

use std::thread::JoinHandle;

use ocsb_policy::guard::Checkout;

use super::SessionGit;
use crate::audit::Checked;
use crate::error::Result;
use crate::spec::SandboxSpec;

/// What the thread made: the spec's agent-git part and the running session.
type Made = Result<(Vec<crate::spec::AgentGit>, Vec<std::path::PathBuf>, SessionGit)>;

/// A session's git being begun on its own thread ([`Begun::start`]); the start takes it
/// ([`Begun::take`]) or, dropped, it is ended.
pub struct Begun {
    /// The spec as the session was begun for, in the form [`inputs`] gives.
    spec: Option<Vec<u8>>,
    checkouts: Vec<Checkout>,
    thread: Option<JoinHandle<Made>>,
}

/// What of `spec` a session's git depends on, as bytes to compare: all of it but what a
/// command's start adds to the session's spec. Nothing of these decides what the session
/// makes: the plan's writable part (the checkout rule's input) is made before the relays'
/// sockets are looked at.
fn inputs(spec: &SandboxSpec) -> Option<Vec<u8>> {
    let mut s = spec.clone();
    s.argv.clear();
    s.env.clear();
    s.tty = crate::spec::TtyMode::Never;
    s.tcp = None;
    s.netlock = crate::spec::Netlock::Off;
    s.docker_gateway = None;
    s.ssh_agent = None;
    // `None` for a spec that cannot be written out: never the same as another.
    serde_json::to_vec(&s).ok()
}

impl Begun {
    /// Begin the git of a session of `spec` (the session's spec as `prepare` made it), from
    /// the look `checked` made, on a thread; `None` for a sandbox without namespaces (it has no
    /// agent's git) or when no thread can be started (the start then begins it itself).
    pub fn start(spec: &SandboxSpec, checked: &Checked) -> Option<Begun> {
        if !spec.namespaces {
            return None;
        }
        let mut spec = checked.for_start(spec);
        let checkouts = crate::checkouts::of_spec_known(&spec, checked.checkouts());
        let inputs = inputs(&spec);
        let given = checkouts.clone();
        let thread = std::thread::Builder::new()
            .name("ocsb-git-ahead".into())
            .spawn(move || {
                let git = super::begin(&mut spec, &given)?;
                Ok((spec.agent_git, spec.git_read_only, git))
            })
            .ok()?;
        Some(Begun { spec: inputs, checkouts, thread: Some(thread) })
    }

    /// The session begun ahead, for a start of `spec` in `checkouts`, with its agent-git part
    /// put in `spec`: `None` when it was begun for other inputs (then it is ended here).
    pub fn take(mut self, spec: &mut SandboxSpec, checkouts: &[Checkout]) -> Option<Result<SessionGit>> {
        let same = self.spec.is_some() && self.spec == inputs(spec);
        if self.checkouts != checkouts || !same {
            crate::stages::mark("git: begun ahead for other inputs, ended");
            return None;
        }
        let made = self.thread.take()?.join().ok()?;
        crate::stages::mark("git: begun ahead, taken");
        Some(made.map(|(agent_git, read_only, git)| {
            spec.agent_git = agent_git;
            spec.git_read_only = read_only;
            git
        }))
    }
}

impl Drop for Begun {
    fn drop(&mut self) {
        if let Some(Ok(Ok((_, _, git)))) = self.thread.take().map(JoinHandle::join) {
            drop(git.end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        crate::spec::minimal("/work/p".into(), "/state/p".into(), "/home/u".into())
    }

    #[test]
    fn what_a_command_adds_is_not_an_input() {
        let base = spec();
        let mut handed = base.clone();
        handed.argv = vec!["true".into()];
        handed.env.push(("DOCKER_HOST".into(), "unix:///x".into()));
        handed.tty = crate::spec::TtyMode::Auto;
        handed.netlock = crate::spec::Netlock::Required {
            gid: 1990,
            acquire: crate::spec::Acquire::Inherited,
            probe_interval: std::time::Duration::from_secs(5),
        };
        handed.docker_gateway = Some("/run/gw.sock".into());
        handed.ssh_agent = Some("/run/agent.sock".into());
        assert!(inputs(&base).is_some());
        assert_eq!(inputs(&base), inputs(&handed));
    }

    #[test]
    fn what_the_session_depends_on_is() {
        let base = spec();
        for change in [
            (|s: &mut SandboxSpec| s.state_dir = "/elsewhere".into()) as fn(&mut SandboxSpec),
            |s| s.home = "/home/other".into(),
            |s| s.rw.push("/work/q".into()),
            |s| s.rw_tool_files.push(".envrc".into()),
            |s| s.nested_repos.push("/work/p/sub".into()),
            |s| s.worktrees_dir = Some("/work/wt".into()),
            |s| s.namespaces = !s.namespaces,
        ] {
            let mut other = base.clone();
            change(&mut other);
            assert_ne!(inputs(&base), inputs(&other));
        }
    }
}
