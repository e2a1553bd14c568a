//! `ocsb exec`, `ocsb shell`, `ocsb sandbox status`, `ocsb audit`, `ocsb __sandbox-run`: the
//! sandbox as a command. `exec` and
//! `shell` use the same policy as `run` (settings mapped by `sandbox_spec`), with the filter started
//! and the lock checked by `run::prepare`.

use crate::error::{Error, Result};
use crate::project::Project;

use ocsb_sandbox::{Ahead, Netlock, TtyMode, audit};

/// Environment for a command the user runs by hand: `OCSB_ENV_FILE` without its model-provider
/// keys (they never enter a sandbox; only `ocsb run`'s broker uses them), then `OCSB_ENV`.
fn extra_env(project: &Project) -> Result<Vec<(String, String)>> {
    let s = &project.settings;
    let mut env = crate::broker::Keys::load(s)?.env_file;
    env.extend(s.env_vars());
    Ok(env)
}

/// Run `argv` in the project's sandbox; returns its exit status.
pub fn exec(project: &Project, argv: Vec<String>) -> Result<i32> {
    if argv.is_empty() {
        return Err(Error::failed("no command given", "ocsb exec -- CMD [ARGS...]"));
    }
    // Stage 2 first, while stdout is still the command's: it builds its landlock rules while
    // the checks below run, and waits for its request (a start refused below stops it). Only
    // from trusted settings: an untrusted committed file must change nothing, not even how
    // stage 2 is started (`prepare` refuses it and says why). Where this spec is not the one
    // built below as far as stage 2 is concerned, or cannot be made, the start makes its own.
    let early = project
        .require_trusted()
        .and_then(|()| crate::sandbox_spec::netlock_for(&project.settings))
        .and_then(|lock| crate::sandbox_spec::spec(project, lock, &[], argv.clone()))
        .ok()
        .and_then(|mut s| {
            s.tty = TtyMode::Auto;
            ocsb_sandbox::Early::start(&s).ok()
        });
    // `prepare` reports progress on stdout; for `exec` stdout belongs to the command, so the
    // progress lines go to stderr.
    let prepared = with_stdout_on_stderr(|| crate::run::prepare(project, false))?;
    let mut spec = crate::sandbox_spec::spec(project, prepared.netlock, &extra_env(project)?, argv)?;
    spec.tty = TtyMode::Auto;
    let ahead = Ahead { checked: Some(prepared.checked), stage2: early, ..Ahead::default() };
    crate::isolated::run_for(project, &prepared.policy, &spec, ahead)
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

/// `ocsb __sandbox-run SPEC.json [CMD ARGS…]`: the exit status is the command's, or the
/// sandbox's set-up status when it could not start (what stage 2 reports for the same failure).
///
/// An isolated spec is served with the rules of the project it names (`project_dir`).
pub fn run_spec(spec: &std::path::Path, argv: Vec<String>) -> i32 {
    let run = || -> Result<i32> {
        let text = std::fs::read(spec).map_err(|e| Error::io("read", spec, e))?;
        let mut parsed: ocsb_sandbox::SandboxSpec = serde_json::from_slice(&text)
            .map_err(|e| Error::failed(format!("{}: {e}", spec.display()), "fix the spec"))?;
        if !argv.is_empty() {
            parsed.argv = argv;
        }
        let server = match parsed.network {
            ocsb_sandbox::Network::Host => None,
            ocsb_sandbox::Network::Isolated { .. } => {
                let project = Project::load(Some(&parsed.project_dir))?;
                Some(crate::isolated::Server::new(&project, &project.egress_policy()?)?)
            }
        };
        crate::isolated::run(&parsed, server.as_ref(), ocsb_sandbox::Ahead::default())
    };
    run().unwrap_or_else(|e| {
        eprintln!("ocsb: {e}");
        ocsb_sandbox::stage2::EXIT_SETUP
    })
}

/// An interactive login shell (`$SHELL`, else bash) in the project's sandbox.
pub fn shell(project: &Project) -> Result<i32> {
    let sh = std::env::var("SHELL").ok().filter(|s| s.starts_with('/')).unwrap_or_else(|| "/bin/bash".into());
    exec(project, vec![sh, "-i".into()])
}

/// Print what this host can enforce; exit status 1 when the sandbox cannot be built here.
pub fn status() -> Result<()> {
    let st = ocsb_sandbox::status();
    println!("{st}");
    if st.ok() {
        Ok(())
    } else {
        Err(Error::failed(
            "the sandbox cannot be built on this host (see above)",
            "fix the failing line as it says (with landlock ABI 1 to 5, OCSB_NETWORK=isolated runs the sandbox)",
        ))
    }
}

/// `ocsb audit [--accept]`: what a sandbox start would refuse over (see [`ocsb_sandbox::audit`]).
pub fn audit(project: &Project, accept: bool) -> Result<()> {
    crate::docker_gw::stop_left_behind(project)?;
    let spec = crate::sandbox_spec::spec(project, Netlock::Off, &[], vec![])?;
    let findings = audit::report(&spec, accept)?;
    if findings.is_empty() {
        println!("audit: nothing planted in {} and its worktrees", spec.project_dir.display());
        return Ok(());
    }
    Err(Error::failed(
        format!(
            "{} cannot be accepted, or was not accepted:{}",
            if findings.len() == 1 { "this path" } else { "these paths" },
            audit::render(&findings)
        ),
        if accept {
            "git never makes these: inspect and remove them (`rm PATH`), then run `ocsb audit`"
        } else {
            audit::FIX
        },
    ))
}

/// Refuse a host command that runs git in the project (`ocsb wt …`), or starts sandboxes
/// (`prepare`, so the refusal is the first thing said), while anything planted stands: the
/// same check every sandbox start makes. `doing` completes "refusing to …".
///
/// Returns the check, for the sandbox started next ([`audit::Checked::begin`]).
pub fn refuse_planted(project: &Project, doing: &str) -> Result<audit::Checked> {
    // Before the check: a container a killed launcher left running could write after it.
    crate::docker_gw::stop_left_behind(project)?;
    let spec = crate::sandbox_spec::spec(project, Netlock::Off, &[], vec![])?;
    let checked = audit::check(&spec)?;
    if checked.findings.is_empty() {
        return Ok(checked);
    }
    Err(Error::failed(
        format!(
            "refusing to {doing}: git or host tools would run what was planted{}",
            audit::render(&checked.findings)
        ),
        audit::FIX,
    ))
}
