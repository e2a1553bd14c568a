//! `ocsb prepare`, and the first half of every start: the checks before anything is written,
//! then the filter, the netlock and the self-tests. Each step prints one line; a failing step
//! says which, why, and the fix, and nothing after it starts. What it made is handed on in
//! [`Prepared`], so the start after it loads nothing twice.

use std::net::SocketAddr;
use std::path::Path;

use ocsb_egress::{UpAction, UpReport};
use ocsb_policy::egress::Policy;
use ocsb_sandbox::audit::Checked;
use ocsb_sandbox::session_git::Begun;
use ocsb_sandbox::statefs::StateDir;
use ocsb_sandbox::{Ahead, Early, Netlock, Network, SandboxSpec};

use super::start::{self, Command, Launch};
use super::{checkouts, gitconfig, network};
use crate::error::{Error, Result};
use crate::project::Project;
use crate::state;

/// What [`open`] established: the session's spec, checked, and its state directory.
pub struct Opened<'p> {
    project: &'p Project,
    spec: SandboxSpec,
    /// The project's state directory, opened once (no symlink followed).
    pub state: StateDir,
    /// The web password was made now (the state directory is new).
    pub created: bool,
    checked: Checked,
    /// The session's git, begun on a thread while the filter and the start's servers come up
    /// ([`Opened::begin_git`]).
    git: Option<Begun>,
    /// The running filter's status, asked on a thread beside the look (`exec`: see [`open`]).
    asked: Option<ocsb_egress::lifecycle::Asked>,
}

/// What `prepare` established, for the start that comes next.
pub struct Prepared<'p> {
    project: &'p Project,
    /// The session's spec, with the netlock that was checked.
    spec: SandboxSpec,
    /// The project's state directory, opened once (no symlink followed).
    pub state: StateDir,
    /// The egress rules as compiled once: the filter runs them, the self-tests checked them.
    pub policy: Policy,
    /// The check of the checkouts made before anything was written: the sandbox started next
    /// begins from it rather than looking again, while it stands ([`Checked::begin`]).
    checked: Checked,
    /// See [`Opened::begin_git`].
    git: Option<Begun>,
}

/// The checks before anything is written into the state directory, then the directory itself
/// and the launcher's private files in it.
///
/// `ask_filter` (`exec`, whose next step is the filter): the running filter's status is asked
/// on a thread once the state directory is claimed, so that its round trip overlaps the look.
/// Asking writes and changes nothing ([`ocsb_egress::lifecycle::Asked`]): the filter is still
/// started or reloaded only in [`Opened::bring_up`], after every check.
pub(super) fn open(project: &Project, spec: SandboxSpec, ask_filter: bool) -> Result<Opened<'_>> {
    // A committed settings file must not widen the sandbox unseen, and nothing a sandbox
    // planted for host git may stand.
    project.require_trusted()?;
    ocsb_sandbox::stages::mark("launcher: settings trusted");
    project.check_writable_roots()?;
    state::claim(project)?;
    ocsb_sandbox::stages::mark("launcher: trust and writable roots checked");
    let asked = match ask_filter {
        true => Some(ocsb_egress::lifecycle::Asked::now(&crate::filter::instance(project)?)),
        false => None,
    };
    let checked = checkouts::refuse_planted(project, &spec, "start a sandbox")?;
    ocsb_sandbox::stages::mark("launcher: checkouts looked at (before)");
    let sd = state::Layout::of(&project.settings).open()?;
    let created = state::ensure_private(&sd)?;
    state::ensure_caches(&sd, &project.settings)?;
    ocsb_sandbox::stages::mark("launcher: state directory opened");
    // The sandbox's global git config, from the user's as it stands now.
    gitconfig::write(project, &sd)?;
    ocsb_sandbox::stages::mark("launcher: generated git config written");
    Ok(Opened { project, spec, state: sd, created, checked, git: None, asked })
}

impl<'p> Opened<'p> {
    /// Begin the session's git (the agent's git directories, the gates, the tree watch) on a
    /// thread, from the look just made, for a start that follows: it is ready by the time the
    /// filter, the Docker gateway and the relays are ([`Begun`] says why this is safe).
    pub fn begin_git(&mut self) {
        self.git = Begun::start(&self.spec, &self.checked);
    }

    /// The filter up, the netlock checked, the self-tests passed (`retest`: even when they
    /// passed before with the same inputs).
    pub fn bring_up(self, retest: bool) -> Result<Prepared<'p>> {
        let Opened { project, mut spec, state: sd, checked, git, asked, .. } = self;
        let s = &project.settings;
        // 1. The egress filter, given the rules compiled once.
        let inst = crate::filter::instance(project)?;
        let policy = project.egress_policy()?;
        ocsb_sandbox::stages::mark("launcher: rules compiled");
        let progress = ocsb_egress::lifecycle::stderr_progress();
        let up = match asked {
            Some(asked) => ocsb_egress::lifecycle::up_after(&inst, &policy, progress, asked),
            None => ocsb_egress::up(&inst, &policy, progress),
        }
        .map_err(|e| egress_err("egress", e))?;
        ocsb_sandbox::stages::mark("launcher: state directory, rules, filter status");
        let verb = match up.action {
            UpAction::Started => "started",
            UpAction::Reloaded => "running, rules reloaded",
            UpAction::Current => "running, rules current",
        };
        println!("egress:     {} filter {verb} on {}", up.backend.as_str(), up.listen.join(" "));
        let gw = up
            .listen
            .iter()
            .filter_map(|a| a.parse::<SocketAddr>().ok())
            .map(|a| a.ip())
            .find(|ip| !ip.is_loopback());
        state::write_docker_config(&sd, s.docker(), gw, s.egress_port())?;

        spec.netlock = network::netlock_for(&spec.network, s)?;
        let curl = crate::filter::system_curl()?;
        let record =
            selftest_record(&up, &spec.netlock, network::name(&spec.network), s.egress_port(), &curl);
        let prepared =
            |spec, state, policy, checked, git| Prepared { project, spec, state, policy, checked, git };
        if !retest
            && record
                .as_deref()
                .is_some_and(|r| sd.read(Path::new(SELFTESTS)).as_deref() == Some(r.as_bytes()))
        {
            // Every sandbox start probes the lock itself and refuses without it, so the separate
            // check below adds only its earlier message; the self-tests would give what they gave.
            println!(
                "self-tests: passed before with these rules, this filter and this netlock; not run again \
                 (`ocsb prepare --retest` runs them now)"
            );
            return Ok(prepared(spec, sd, policy, checked, git));
        }
        let _ = sd.remove(Path::new(SELFTESTS));
        // The session's git begun ahead is ended before the checks below: they run sandboxes
        // of their own in the same store, and take seconds a Ctrl-C would cut short, leaving
        // it for the next start to take for a killed session's.
        drop(git);

        // 2. The netlock (or the isolated network), checked the way the sandbox will use it.
        check_netlock(project, &policy, &spec)?;
        // 3. Self-tests, with curl run inside the sandbox, against the rules the filter was given.
        self_tests(s.egress_port(), &sd, &policy, &spec, &curl)?;
        if let Some(r) = record {
            sd.write(Path::new(SELFTESTS), r.as_bytes(), 0o600)?;
        }
        Ok(prepared(spec, sd, policy, checked, None))
    }

    /// `ocsb egress verify`: the expectations (and, with `direct`, the bypass check) by the
    /// system's curl in the sandbox, under the netlock, as the self-tests run them.
    pub fn verify(mut self, policy: &Policy, direct: bool) -> Result<ocsb_egress::verify::Report> {
        self.spec.netlock = network::netlock_for(&self.spec.network, &self.project.settings)?;
        let curl = crate::filter::system_curl()?;
        let port = self.project.settings.egress_port();
        Ok(verify_as_sandbox(port, &self.state, policy, &self.spec, &curl, direct)?)
    }
}

impl Prepared<'_> {
    /// The start of `cmd` in the session's sandbox ([`start::launch`]), beginning from the
    /// check of the checkouts `prepare` made; `stage2`: started early for it, if it was.
    pub fn start(self, cmd: &Command, stage2: Option<Early>) -> Result<Launch> {
        let ahead = Ahead { checked: Some(self.checked), stage2, git: self.git, ..Ahead::default() };
        start::launch(self.project, &self.policy, &self.spec, cmd, ahead)
    }
}

/// Where the last passing self-tests are recorded: `egress/` is hidden from every sandbox, so
/// the agent can neither read nor forge the record.
const SELFTESTS: &str = "egress/selftests-passed";

/// What the self-tests depend on, as one line: the rules the filter runs (their hash, as the
/// filter reported it), the filter process itself, the netlock (gid and how the sandbox joins
/// it), the network mode, the proxy port, the curl that ran them and this `ocsb`. `None` when the filter cannot
/// name its process (squid): then they always run.
fn selftest_record(up: &UpReport, lock: &Netlock, network: &str, port: u16, curl: &Path) -> Option<String> {
    let process = up.process.as_deref()?;
    let lock = serde_json::to_string(lock).ok()?;
    let exe = std::env::current_exe().ok().and_then(|e| e.metadata().ok()).and_then(|m| m.modified().ok());
    Some(format!(
        "v1 rules={} backend={} filter={process} port={port} netlock={lock} network={network} curl={} ocsb={}@{exe:?}\n",
        up.config_hash,
        up.backend.as_str(),
        curl.display(),
        env!("CARGO_PKG_VERSION"),
    ))
}

fn check_netlock(project: &Project, policy: &Policy, spec: &SandboxSpec) -> Result<()> {
    let check = Command::check(vec!["true".into()]);
    match start::launch(project, policy, spec, &check, Ahead::default()).and_then(Launch::run) {
        Ok(0) => {}
        Ok(code) => {
            return Err(Error::failed(
                format!("netlock: a sandboxed `true` exited with status {code}"),
                "run `ocsb netlock verify` and `ocsb doctor`",
            ));
        }
        Err(e) => {
            return Err(Error::failed(
                format!("netlock/sandbox check failed: {e}"),
                "run `ocsb netlock verify`; see the fix above",
            ));
        }
    }
    let group = project.settings.netlock_group();
    match (&spec.network, &spec.netlock) {
        (Network::Host, Netlock::Required { gid, .. }) => {
            println!(
                "netlock:    ok: the sandbox starts as group {group} (gid {gid}) and the lock rejects its probe"
            )
        }
        (Network::Host, Netlock::Off) => println!("netlock:    off"),
        (Network::Isolated { .. }, Netlock::Required { gid, .. }) => println!(
            "network:    isolated: the sandbox has its own network namespace, served by this launcher; \
             it also runs as the netlock group {group} (gid {gid}), which would lock any socket of the \
             host's network it got hold of"
        ),
        (Network::Isolated { .. }, Netlock::Off) => println!(
            "network:    isolated: the sandbox has its own network namespace, served by this launcher \
             (no netlock installed; none needed)"
        ),
    }
    Ok(())
}

/// The rules' `expect-*` lines and the bypass check, by the system's curl (never one from `PATH`)
/// run inside the sandbox as the agent's commands are.
fn self_tests(port: u16, sd: &StateDir, policy: &Policy, spec: &SandboxSpec, curl: &Path) -> Result<()> {
    let report =
        verify_as_sandbox(port, sd, policy, spec, curl, true).map_err(|e| egress_err("self-tests", e))?;
    let (n, direct) = (report.checks.len(), report.checks.iter().any(|c| c.kind == "direct-blocked"));
    report.into_result().map_err(|e| egress_err("self-tests", e))?;
    println!("self-tests: {}", selftest_summary(n - usize::from(direct), direct));
    Ok(())
}

/// What the self-tests checked, in words: a count alone ("0 checks passed") reads as a failure
/// when the rules simply have no `expect-*` lines.
fn selftest_summary(expects: usize, direct: bool) -> String {
    const NONE: &str = "the rules have no expect-pass/expect-block lines";
    const DIRECT: &str = "a direct connection around the filter was refused";
    let rules = match expects {
        1 => "the filter answered the 1 expect-pass/expect-block rule as written".to_string(),
        n => format!("the filter answered all {n} expect-pass/expect-block rules as written"),
    };
    match (expects, direct) {
        (0, false) => format!("nothing to check: {NONE}"),
        (0, true) => format!("passed: {DIRECT} ({NONE})"),
        (_, false) => format!("passed: {rules}"),
        (_, true) => format!("passed: {rules}; {DIRECT}"),
    }
}

/// Every `expect-*` line (and, with `direct`, the bypass check) by `curl` started the way the
/// agent's commands are: inside the sandbox, in the netlock's group, through the same proxy
/// variables. *Why not as the caller*: the caller is not locked, so a direct connection would
/// pass and the bypass check would fail for every user; and an expectation must hold for the
/// requests the sandbox sends, not for the user's own.
///
/// Each curl runs in a sandbox of its own, through `ocsb __sandbox-run` ([`super::replay`])
/// with the session's spec as a check is handed it; no Docker gateway serves those.
fn verify_as_sandbox(
    port: u16,
    sd: &StateDir,
    policy: &Policy,
    spec: &SandboxSpec,
    curl: &Path,
    direct: bool,
) -> std::result::Result<ocsb_egress::verify::Report, ocsb_egress::Error> {
    let spec_rel = Path::new("egress/selftest-spec.json");
    let spec = start::handed(spec, &Command::check(vec!["true".into()]), None);
    sd.write(spec_rel, &serde_json::to_vec(&spec).unwrap_or_default(), 0o600)
        .map_err(|e| ocsb_egress::Error::state(e.to_string(), "check the state directory"))?;
    let exe = std::env::current_exe().map_err(|e| ocsb_egress::Error::io("cannot find", "ocsb", e))?;
    let mut opts = ocsb_egress::verify::VerifyOptions::new(SocketAddr::from(([127, 0, 0, 1], port)));
    opts.wrap = vec![exe.into(), super::replay::SANDBOX_RUN.into(), sd.path().join(spec_rel).into()];
    opts.max_time = 10;
    opts.curl = curl.into();
    // In an isolated sandbox a direct connection is not blocked but judged by the same rules
    // (the transparent path): the expectations cover it; there is no bypass to check.
    opts.direct_check = direct && spec.network == Network::Host;
    ocsb_egress::verify::run(policy, &opts)
}

/// An egress error of one `prepare` step, its message prefixed with the step's name.
fn egress_err(step: &str, e: ocsb_egress::Error) -> Error {
    let verify = matches!(e, ocsb_egress::Error::Verify { .. });
    match Error::from(e) {
        Error::Failed { what, .. } if verify => Error::failed(
            format!("{step}: {what}"),
            "each line names the expectation and the rule that decided it: change that rule or the \
             expect-* line, then run `ocsb prepare` again",
        ),
        Error::Failed { what, fix } => Error::failed(format!("{step}: {what}"), fix),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::selftest_summary;

    #[test]
    fn the_self_tests_say_what_ran() {
        let none = "the rules have no expect-pass/expect-block lines";
        assert_eq!(selftest_summary(0, false), format!("nothing to check: {none}"));
        assert_eq!(
            selftest_summary(0, true),
            format!("passed: a direct connection around the filter was refused ({none})")
        );
        assert_eq!(
            selftest_summary(1, false),
            "passed: the filter answered the 1 expect-pass/expect-block rule as written"
        );
        assert_eq!(
            selftest_summary(3, true),
            "passed: the filter answered all 3 expect-pass/expect-block rules as written; \
             a direct connection around the filter was refused"
        );
    }
}
