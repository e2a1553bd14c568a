//! `ocsb exec`, `ocsb shell`, `ocsb sandbox status`: the sandbox as a command. `exec` and
//! `shell` use the same policy as `run` (settings mapped by `run::spec`), with the filter started
//! and the lock checked by `run::prepare`.

use crate::error::{Error, Result};
use crate::project::Project;

use super::spec::TtyMode;

/// Environment for a command the user runs by hand: `OCSB_ENV_FILE`, then `OCSB_ENV`.
fn extra_env(project: &Project) -> Result<Vec<(String, String)>> {
    let s = &project.settings;
    let mut env = match s.env_file() {
        Some(p) => crate::opencode::envfile::load(&p)?,
        None => Vec::new(),
    };
    env.extend(s.env_vars());
    Ok(env)
}

/// Run `argv` in the project's sandbox; returns its exit status.
pub fn exec(project: &Project, argv: Vec<String>) -> Result<i32> {
    if argv.is_empty() {
        return Err(Error::failed("no command given", "ocsb exec -- CMD [ARGS...]"));
    }
    // `prepare` reports progress on stdout; for `exec` stdout belongs to the command, so the
    // progress lines go to stderr.
    let prepared = with_stdout_on_stderr(|| crate::run::prepare(project))?;
    let mut spec = crate::run::spec(project, prepared.netlock, &extra_env(project)?, argv);
    spec.tty = TtyMode::Auto;
    Ok(super::run(&spec)?)
}

fn with_stdout_on_stderr<T>(f: impl FnOnce() -> T) -> T {
    use std::io::Write;
    let saved = nix::unistd::dup(std::io::stdout());
    let _ = std::io::stdout().flush();
    // SAFETY-free: dup2 over fd 1 with fd 2; restored below from the saved copy.
    let redirected = saved.is_ok() && nix::unistd::dup2_stdout(std::io::stderr()).is_ok();
    let r = f();
    let _ = std::io::stdout().flush();
    if redirected && let Ok(fd) = saved {
        let _ = nix::unistd::dup2_stdout(&fd);
    }
    r
}

/// An interactive login shell (`$SHELL`, else bash) in the project's sandbox.
pub fn shell(project: &Project) -> Result<i32> {
    let sh = std::env::var("SHELL").ok().filter(|s| s.starts_with('/')).unwrap_or_else(|| "/bin/bash".into());
    exec(project, vec![sh, "-i".into()])
}

/// Print what this host can enforce; exit status 1 when the sandbox cannot be built here.
pub fn status() -> Result<()> {
    let st = super::status();
    println!("{st}");
    if st.ok() {
        Ok(())
    } else {
        Err(Error::failed(
            "the sandbox cannot be built on this host (see above)",
            "fix the failing line, or set OCSB_SANDBOX=0 to run with the filter and netlock only",
        ))
    }
}
