//! `ocsb __sandbox-run SPEC.json [CMD ARGS…]`: a sandbox from a spec written before, as it is
//! written, bypassing the settings: how `prepare`'s self-tests wrap the system's curl, and
//! what the escape tests and the start-up benchmark use. The one step it adds is the one its
//! spec asks for: an isolated network is served with the rules of the project it names
//! (`project_dir`). No Docker gateway: the spec's own socket, if any, is bound as written.

use std::path::Path;

use ocsb_sandbox::{Ahead, Early, SandboxSpec};

use super::isolated;
use crate::error::{Error, Result};
use crate::project::Project;

/// The hidden subcommand.
pub const SANDBOX_RUN: &str = "__sandbox-run";

/// The exit status is the command's, or the sandbox's set-up status when it could not start
/// (what stage 2 reports for the same failure).
pub fn main(spec: &Path, argv: Vec<String>) -> i32 {
    let run = || -> Result<i32> {
        let text = std::fs::read(spec).map_err(|e| Error::io("read", spec, e))?;
        let mut parsed: SandboxSpec = serde_json::from_slice(&text)
            .map_err(|e| Error::failed(format!("{}: {e}", spec.display()), "fix the spec"))?;
        if !argv.is_empty() {
            parsed.argv = argv;
        }
        // Stage 2 first, as `ocsb exec` starts it, with the mounts ahead: it builds its part
        // while the project's rules are loaded and the checkouts looked at.
        let stage2 = Early::start(&parsed).ok().map(|e| e.premount(&parsed));
        let server = isolated::server_for(&parsed, || {
            let project = Project::load(Some(&parsed.project_dir))?;
            isolated::Server::new(&project, &project.egress_policy()?)
        })?;
        isolated::run(&parsed, server.as_ref(), Ahead { stage2, ..Ahead::default() })
    };
    run().unwrap_or_else(|e| {
        eprintln!("ocsb: {e}");
        ocsb_sandbox::stage2::EXIT_SETUP
    })
}
