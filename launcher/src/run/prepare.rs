//! `ocsb prepare`, and the first half of `run`, `exec` and `shell`: the checks before anything
//! is written, then the filter, the netlock and the self-tests. Each step prints one line; a
//! failing step says which, why, and the fix, and nothing after it starts. What it made is
//! handed on in [`Prepared`], so the command after it loads nothing twice.

use std::net::SocketAddr;
use std::path::Path;

use ocsb_egress::{UpAction, UpReport};
use ocsb_policy::egress::Policy;
use ocsb_sandbox::audit::Checked;
use ocsb_sandbox::statefs::StateDir;
use ocsb_sandbox::{Netlock, Network};

use crate::error::{Error, Result};
use crate::project::Project;
use crate::sandbox_spec;
use crate::state;

/// What `prepare` established, for the command that runs next.
pub struct Prepared {
    /// The project's state directory, opened once (no symlink followed).
    pub state: StateDir,
    /// The egress rules as compiled once: the filter runs them, the self-tests checked them.
    pub policy: Policy,
    pub netlock: Netlock,
    /// The check of the checkouts made before anything was written: the sandbox started next
    /// begins from it rather than looking again, while it stands ([`Checked::begin`]).
    pub checked: Checked,
}

/// `ocsb prepare [--retest]`.
pub fn prepare(project: &Project, retest: bool) -> Result<Prepared> {
    let opened = open_state(project)?;
    bring_up(project, opened.state, opened.checked, retest)
}

/// What [`open_state`] established.
pub struct Opened {
    pub state: StateDir,
    /// The web password was made now (the state directory is new).
    pub created: bool,
    pub checked: Checked,
}

/// The checks before anything is written into the state directory, then the directory itself
/// and the launcher's private files in it.
pub fn open_state(project: &Project) -> Result<Opened> {
    // A committed settings file must not widen the sandbox unseen, and nothing a sandbox
    // planted for host git may stand.
    project.require_trusted()?;
    project.check_writable_roots()?;
    state::claim(project)?;
    let checked = crate::commands::sandbox::refuse_planted(project, "start a sandbox")?;
    let sd = state::Layout::of(&project.settings).open()?;
    let created = state::ensure_private(&sd)?;
    state::ensure_caches(&sd, &project.settings)?;
    Ok(Opened { state: sd, created, checked })
}

/// The filter up, the netlock checked, the self-tests passed (`retest`: even when they passed
/// before with the same inputs).
pub fn bring_up(project: &Project, sd: StateDir, checked: Checked, retest: bool) -> Result<Prepared> {
    let s = &project.settings;
    // 1. The egress filter, given the rules compiled once.
    let inst = crate::egress_cmd::instance(project)?;
    let policy = project.egress_policy()?;
    let up = ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress())
        .map_err(|e| egress_err("egress", e))?;
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

    let lock = sandbox_spec::netlock_for(s)?;
    let curl = crate::egress_cmd::system_curl()?;
    let record = selftest_record(&up, &lock, s.network().as_str(), s.egress_port(), &curl);
    if !retest
        && record.as_deref().is_some_and(|r| sd.read(Path::new(SELFTESTS)).as_deref() == Some(r.as_bytes()))
    {
        // Every sandbox start probes the lock itself and refuses without it, so the separate
        // check below adds only its earlier message; the self-tests would give what they gave.
        println!(
            "self-tests: passed before with these rules, this filter and this netlock; not run again \
             (`ocsb prepare --retest` runs them now)"
        );
        return Ok(Prepared { state: sd, policy, netlock: lock, checked });
    }
    let _ = sd.remove(Path::new(SELFTESTS));

    // 2. The netlock (or the isolated network), checked the way the sandbox will use it.
    check_netlock(project, &policy, &lock)?;
    // 3. Self-tests, with curl run inside the sandbox, against the rules the filter was given.
    self_tests(project, &sd, &policy, &lock, &curl)?;
    if let Some(r) = record {
        sd.write(Path::new(SELFTESTS), r.as_bytes(), 0o600)?;
    }
    Ok(Prepared { state: sd, policy, netlock: lock, checked })
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

fn check_netlock(project: &Project, policy: &Policy, lock: &Netlock) -> Result<()> {
    let check = sandbox_spec::spec(project, lock.clone(), &[], vec!["true".into()])?;
    match crate::isolated::run_for(project, policy, &check, ocsb_sandbox::Ahead::default()) {
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
    match (check.network, lock) {
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
fn self_tests(project: &Project, sd: &StateDir, policy: &Policy, lock: &Netlock, curl: &Path) -> Result<()> {
    let report =
        verify_as_sandbox(project, sd, policy, lock, curl, true).map_err(|e| egress_err("self-tests", e))?;
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
pub fn verify_as_sandbox(
    project: &Project,
    sd: &StateDir,
    policy: &Policy,
    lock: &Netlock,
    curl: &Path,
    direct: bool,
) -> std::result::Result<ocsb_egress::verify::Report, ocsb_egress::Error> {
    let s = &project.settings;
    let spec_rel = Path::new("egress/selftest-spec.json");
    let spec = sandbox_spec::spec(project, lock.clone(), &[], vec!["true".into()])
        .map_err(|e| ocsb_egress::Error::state(e.to_string(), "see `ocsb doctor`"))?;
    sd.write(spec_rel, &serde_json::to_vec(&spec).unwrap_or_default(), 0o600)
        .map_err(|e| ocsb_egress::Error::state(e.to_string(), "check the state directory"))?;
    let exe = std::env::current_exe().map_err(|e| ocsb_egress::Error::io("cannot find", "ocsb", e))?;
    let mut opts =
        ocsb_egress::verify::VerifyOptions::new(SocketAddr::from(([127, 0, 0, 1], s.egress_port())));
    opts.wrap = vec![exe.into(), crate::cli::SANDBOX_RUN.into(), sd.path().join(spec_rel).into()];
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
