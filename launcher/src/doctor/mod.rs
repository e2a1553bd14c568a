//! `ocsb doctor`: dependencies and host setup, one line per check (ok / warn / fail), every
//! failure with the command that fixes it. `--json` prints the same as an array of
//! `{id, status, message, fix}`. Exit status 0 when nothing failed, 1 otherwise.
//!
//! Split so the verdicts are testable without a machine in each state: [`observe`] looks at the
//! machine and produces [`facts::Facts`]; [`judge`] turns facts into [`check::Check`]s and touches
//! nothing. Outside a project only the host is checked (no `.opencode-sandbox/` is not an error).

pub mod check;
pub mod facts;
pub mod judge;
pub mod observe;

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

pub fn run(explicit: Option<&Path>, json: bool) -> Result<()> {
    let facts = observe::observe(explicit)?;
    let checks = judge::judge(&facts);
    let text = if json { format!("{}\n", check::render_json(&checks)) } else { check::render_text(&checks) };
    // A closed pipe (`ocsb doctor | head`) is not an error worth a panic.
    let _ = std::io::stdout().write_all(text.as_bytes());
    if check::exit_code(&checks) == 0 {
        Ok(())
    } else {
        let failed: Vec<&str> =
            checks.iter().filter(|c| c.status == check::Status::Fail).map(|c| c.id).collect();
        Err(Error::failed(
            format!("doctor: {} check(s) failed: {}", failed.len(), failed.join(", ")),
            "run the `fix:` command of each failed line, then `ocsb doctor` again",
        ))
    }
}
