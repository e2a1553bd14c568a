//! `ocsb exec`, `ocsb shell`, `ocsb sandbox status`, `ocsb audit`: the sandbox as a command.
//! Every start and every look at the checkouts is the session's ([`crate::session`]).

use crate::error::{Error, Result};
use crate::project::Project;
use crate::session::{self, Session};

use ocsb_sandbox::audit;

/// Run `argv` in the project's sandbox; returns its exit status.
pub fn exec(project: &Project, argv: Vec<String>) -> Result<i32> {
    session::exec(project, argv)
}

/// An interactive login shell (`$SHELL`, else bash) in the project's sandbox.
pub fn shell(project: &Project) -> Result<i32> {
    session::exec(project, session::shell_argv())
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
    let session = Session::new(project)?;
    if accept {
        for line in session.accept_held()? {
            println!("audit: accepted {line}");
        }
    } else {
        for h in session.held() {
            println!(
                "held back: {} in {} ({} {}){}",
                h.name,
                h.root.display(),
                &h.oid[..h.oid.len().min(12)],
                h.subject,
                h.why.map(|w| format!("\n    why: {w}")).unwrap_or_default()
            );
        }
    }
    let findings = session.audit(accept)?;
    if findings.is_empty() {
        println!("audit: nothing planted in {} and its worktrees", session.project_dir().display());
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
