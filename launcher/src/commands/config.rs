//! `ocsb config [--origin] [--trust]`: the effective settings, printed so that the output is
//! itself a valid `sandbox.conf` (it re-parses to the same values), and the list of ways the
//! committed project layer widens the sandbox.

use crate::error::Result;
use crate::project::{Project, render_widenings};

pub fn run(project: &Project, origin: bool, trust: bool) -> Result<()> {
    if trust {
        let w = project.trust()?;
        if w.is_empty() {
            println!("the project's sandbox.conf does not widen the sandbox; nothing to accept");
        } else {
            print!("accepted for this project:\n{}", render_widenings(&w));
        }
        return Ok(());
    }
    print!("{}", ocsb_policy::settings::print::render(&project.settings, origin));
    let w = project.widenings()?;
    if !w.is_empty() {
        // stderr, so that stdout stays a valid settings file.
        eprint!(
            "warning: .opencode-sandbox/sandbox.conf widens the sandbox (`run` asks you to accept \
             this once with `ocsb config --trust`):\n{}",
            render_widenings(&w)
        );
    }
    Ok(())
}
