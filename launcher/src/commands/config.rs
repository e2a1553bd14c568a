//! `ocsb config [--origin] [--trust]`: the effective settings, printed so that the output is
//! itself a valid `sandbox.conf` (it re-parses to the same values), and the list of ways the
//! committed project layer widens the sandbox; then, as comments, what the sandbox's home holds.

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
    // Comments, so that stdout stays a valid settings file.
    print!("{}", home_comment(&project.settings));
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

/// What the sandbox's home holds from the host now, one comment line per entry.
pub fn home_comment(s: &ocsb_policy::settings::Settings) -> String {
    let entries = crate::session::home_entries(s);
    let mut out = String::from(
        "\n# The sandbox's home holds only these entries of yours (ro: read-only, rw: writable,\n\
         # own: the project's own copy); the rest of ~ is absent. Allow more with OCSB_HOME.\n",
    );
    if entries.is_empty() {
        out.push_str("#   (none)\n");
    }
    for line in ocsb_policy::home::render(&entries) {
        out.push_str(&format!("#   {line}\n"));
    }
    out
}
