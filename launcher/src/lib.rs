//! `ocsb`: the unprivileged launcher. The binary is `main.rs` calling [`main`]; the library exists
//! so that packaging renders man pages and completions from the very clap definitions in [`cli`].
// `unsafe` only to install signal handlers (`signals`, `worktree::hooks`); each block says why it
// is sound. Everything else the launcher needs from the kernel is in `ocsb-sandbox`.
#![deny(unsafe_code)]

pub mod cli;
mod commands;
mod doctor;
mod error;
mod filter;
mod install;
mod netlock;
mod opencode;
mod project;
mod run;
mod served;
mod session;
mod signals;
mod state;
mod tls;
mod web;
mod worktree;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;

/// The notification bus proxy's command, for the tests that run it against a real bus.
#[doc(hidden)]
pub use crate::run::notify::proxy_command as notify_proxy_command;

/// The whole program: what `ocsb`'s `main` runs.
pub fn main() -> ExitCode {
    // Stage 2 of the sandbox (`ocsb __sandbox-init`) runs before anything else, the command
    // line included: it forks, which is sound only while the process has a single thread.
    if let Some(code) = ocsb_sandbox::stage2_dispatch() {
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    ocsb_sandbox::stages::mark("launcher: main");
    // The detached filter (`ocsb egress serve ARGS`) parses its own arguments and runs for the
    // whole session: started before the command line is parsed, it never maps the code of the
    // rest of `ocsb` (its resident memory is what the filter uses).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "egress") && args.get(2).is_some_and(|a| a == "serve") {
        std::process::exit(ocsb_egress::builtin::serve::main(&args[3..]));
    }
    match commands::dispatch(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ocsb: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
