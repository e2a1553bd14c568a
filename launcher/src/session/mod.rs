//! The one way a command starts a sandbox: `ocsb run`, `exec`, `shell`, `prepare`'s checks and
//! `egress verify` all go through here, and so do the looks at the checkouts of `audit` and
//! `ocsb wt`. The path, in order:
//!
//! 1. [`Session::new`]: the settings become the sandbox's spec, once ([`spec::build`]), with
//!    `OCSB_NETWORK` resolved into the spec's [`Network`] ([`network::of`]), which everything
//!    after reads.
//! 2. [`Session::open`]: trust, writable roots, the project's claim on its state directory, the
//!    look at the checkouts ([`checkouts`]), the state directory opened once, the sandbox's
//!    global git config written there ([`gitconfig`]).
//! 3. [`Opened::bring_up`]: the filter up with the rules compiled once, the netlock for the
//!    network set into the spec, then (skipped while their inputs are unchanged) a sandboxed
//!    `true` and the self-tests, each started by this same path ([`prepare`]).
//! 4. [`Prepared::start`]: the spec as the command is handed it ([`start::handed`]), then the
//!    steps the settings choose, whichever command called: the Docker gateway
//!    (`OCSB_DOCKER=1`, with its watcher; [`docker`]), the filtering ssh-agent (when the user
//!    has an agent; [`ssh_agent`]) and the isolated network's server
//!    (`OCSB_NETWORK=isolated`; [`isolated`]). What a command adds is only what it says of
//!    itself in its [`Command`]: argv, environment, terminal, the key broker's port it reaches
//!    and OpenCode's port it listens on.
//! 5. [`start::Launch::run`]: the sandbox runs (`ocsb_sandbox::run_served`), served until it exits.
//!
//! `ocsb __sandbox-run` ([`replay`]) starts a spec written before, as written.

mod checkouts;
mod docker;
mod gitconfig;
pub mod isolated;
pub mod network;
mod prepare;
pub mod publish;
pub mod replay;
mod spec;
mod ssh_agent;
mod start;

#[cfg(test)]
mod tests;

pub use prepare::{Opened, Prepared};
pub use spec::{PROJECT_VAR, home_entries};
pub use start::Command;

use ocsb_policy::guard::Finding;
use ocsb_sandbox::audit::Checked;
use ocsb_sandbox::{Early, Network, SandboxSpec};

use crate::error::{Error, Result};
use crate::project::Project;

/// A command's session: the project and the sandbox its settings describe, built once.
pub struct Session<'p> {
    project: &'p Project,
    /// No netlock until `prepare` checked it, no command until the start.
    spec: SandboxSpec,
}

impl<'p> Session<'p> {
    pub fn new(project: &'p Project) -> Result<Session<'p>> {
        let spec = spec::build(project, network::of(&project.settings))?;
        Ok(Session { project, spec })
    }

    /// The sandbox's network, as resolved from `OCSB_NETWORK`.
    pub fn network(&self) -> &Network {
        &self.spec.network
    }

    /// The checks before anything is written, then the state directory ([`prepare`]).
    pub fn open(self) -> Result<Opened<'p>> {
        prepare::open(self.project, self.spec, false)
    }

    /// `ocsb prepare [--retest]`: [`Session::open`], then [`Opened::bring_up`].
    pub fn prepare(self, retest: bool) -> Result<Prepared<'p>> {
        self.open()?.bring_up(retest)
    }

    /// Refuse while anything planted stands in the checkouts ([`checkouts::refuse_planted`]).
    pub fn refuse_planted(&self, doing: &str) -> Result<Checked> {
        checkouts::refuse_planted(self.project, &self.spec, doing)
    }

    /// What a start would refuse over ([`checkouts::report`]).
    pub fn audit(&self, accept: bool) -> Result<Vec<Finding>> {
        checkouts::report(self.project, &self.spec, accept)
    }

    /// What the import gate held back in the checkouts ([`ocsb_sandbox::session_git::held`]).
    pub fn held(&self) -> Vec<ocsb_sandbox::session_git::HeldRef> {
        ocsb_sandbox::session_git::held(&self.spec)
    }

    /// `ocsb audit --accept` for what the gate held back ([`ocsb_sandbox::session_git::accept`]).
    pub fn accept_held(&self) -> Result<Vec<String>> {
        Ok(ocsb_sandbox::session_git::accept(&self.spec)?)
    }

    /// The project's checkout, as the sandbox sees it.
    pub fn project_dir(&self) -> &std::path::Path {
        &self.spec.project_dir
    }

    /// Stage 2 of `cmd`'s sandbox, started while the checks of `prepare` run: it builds its
    /// landlock rules meanwhile, and waits for its request (a start refused later stops it).
    /// Only from trusted settings: an untrusted committed file must change nothing, not even
    /// how stage 2 is started (`prepare` refuses it and says why). Where this is not the
    /// stage 2 the start needs, or cannot be made, the start makes its own.
    pub fn early(&self, cmd: &Command) -> Option<Early> {
        let settings = &self.project.settings;
        let lock =
            self.project.require_trusted().and_then(|()| network::netlock_for(self.network(), settings));
        let mut base = self.spec.clone();
        base.netlock = lock.ok()?;
        let spec = start::handed(&base, cmd, None);
        Early::start(&spec).ok().map(|e| e.premount(&spec))
    }
}

/// `ocsb exec` and `ocsb shell`: `argv` in the project's sandbox; its exit status.
pub fn exec(project: &Project, argv: Vec<String>) -> Result<i32> {
    if argv.is_empty() {
        return Err(Error::failed("no command given", "ocsb exec -- CMD [ARGS...]"));
    }
    let session = Session::new(project)?;
    ocsb_sandbox::stages::mark("launcher: the spec built");
    let mut cmd = Command::interactive(argv, Vec::new());
    // Stage 2 first, while stdout is still the command's.
    let early = session.early(&cmd);
    ocsb_sandbox::stages::mark("launcher: settings read, stage 2 started");
    // `prepare` reports progress on stdout; for `exec` stdout belongs to the command, so the
    // progress lines go to stderr.
    let prepared = with_stdout_on_stderr(|| {
        // The filter's status asked beside the look, the session's git begun after it.
        let mut opened = prepare::open(project, session.spec, true)?;
        opened.begin_git();
        opened.bring_up(false)
    })?;
    cmd.env = user_env(project)?;
    ocsb_sandbox::stages::mark("launcher: netlock and self-test records");
    let status = prepared.start(&cmd, early)?.run();
    ocsb_sandbox::stages::mark("launcher: returns");
    status
}

/// `ocsb shell`'s command: `$SHELL -i`, or bash when `SHELL` names no absolute path.
pub fn shell_argv() -> Vec<String> {
    let sh = std::env::var("SHELL").ok().filter(|s| s.starts_with('/')).unwrap_or_else(|| "/bin/bash".into());
    vec![sh, "-i".into()]
}

/// Environment for a command the user runs by hand: `OCSB_ENV_FILE` without its model-provider
/// keys (they never enter a sandbox; only `ocsb run`'s broker uses them), then `OCSB_ENV`.
fn user_env(project: &Project) -> Result<Vec<(String, String)>> {
    let s = &project.settings;
    let mut env = crate::run::broker::keys(s)?.env_file;
    env.extend(s.env_vars());
    Ok(env)
}

fn with_stdout_on_stderr<T>(f: impl FnOnce() -> T) -> T {
    use std::io::Write;
    use std::os::fd::AsFd;
    // The saved copy is close-on-exec (`try_clone_to_owned` is F_DUPFD_CLOEXEC): the filter
    // that `prepare` may start outlives this command, and must not hold the caller's stdout
    // open (`ocsb exec … | tail` would hang).
    let saved = std::io::stdout().as_fd().try_clone_to_owned();
    let _ = std::io::stdout().flush();
    let redirected = saved.is_ok() && nix::unistd::dup2_stdout(std::io::stderr()).is_ok();
    let r = f();
    let _ = std::io::stdout().flush();
    if redirected && let Ok(fd) = saved {
        let _ = nix::unistd::dup2_stdout(&fd);
    }
    r
}
