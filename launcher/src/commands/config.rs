//! `ocsb config [--origin]`: the effective settings, printed so that the output is itself a
//! valid `sandbox.conf` (it re-parses to the same values).

use crate::error::Result;
use crate::project::Project;

pub fn run(project: &Project, origin: bool) -> Result<()> {
    print!("{}", ocsb_policy::settings::print::render(&project.settings, origin));
    Ok(())
}
