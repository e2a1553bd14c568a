//! The look at the project's checkouts before git or a sandbox runs there
//! ([`ocsb_sandbox::audit`]): what a sandbox planted that host git or host tools would run.
//! Every start, `ocsb wt` and `ocsb audit` look through here, with the session's spec.

use ocsb_policy::guard::Finding;
use ocsb_sandbox::SandboxSpec;
use ocsb_sandbox::audit::{self, Checked};

use crate::error::{Error, Result};
use crate::project::Project;

/// Refuse a host command that runs git in the project (`ocsb wt …`), or starts sandboxes
/// (`prepare`, so the refusal is the first thing said), while anything planted stands: the
/// same check every sandbox start makes. `doing` completes "refusing to …".
///
/// Returns the check, for the sandbox started next ([`Checked::begin`]).
pub fn refuse_planted(project: &Project, spec: &SandboxSpec, doing: &str) -> Result<Checked> {
    // Before the check: a container a killed launcher left running could write after it.
    super::docker::stop_left_behind(project)?;
    let checked = audit::check(spec)?;
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

/// `ocsb audit [--accept]`: what a sandbox start would refuse over, with `accept` the user's
/// own made acceptable first ([`audit::report`]).
pub fn report(project: &Project, spec: &SandboxSpec, accept: bool) -> Result<Vec<Finding>> {
    super::docker::stop_left_behind(project)?;
    Ok(audit::report(spec, accept)?)
}
