//! `ocsb`: the unprivileged launcher. The binary is `main.rs` calling [`main`]; the library exists
//! so that packaging renders man pages and completions from the very clap definitions in [`cli`].

pub mod cli;
mod commands;
mod doctor;
mod egress_cmd;
mod error;
mod netlock;
mod opencode;
mod project;
mod run;
mod sandbox;
mod statefs;
mod web;
mod worktree;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command, EgressCommand, SandboxCommand, WtCommand};

use crate::error::Result;
use crate::project::Project;
/// The notification bus proxy's command, for the tests that run it against a real bus.
#[doc(hidden)]
pub use crate::run::notify::proxy_command as notify_proxy_command;

/// The whole program: what `ocsb`'s `main` runs.
pub fn main() -> ExitCode {
    // Stage 2 of the sandbox (`ocsb __sandbox-init`) must run before anything else.
    if let Some(code) = sandbox::stage2_dispatch() {
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // The netlock probe (`ocsb __netlock-probe`), run as the locked gid through the shim.
    if let Some(code) = netlock::probe_dispatch() {
        return ExitCode::from(code);
    }
    if let Some(code) = opencode::dispatch() {
        return ExitCode::from(code);
    }
    if let Some(code) = web::dispatch() {
        return ExitCode::from(code);
    }
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ocsb: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let explicit = cli.project.as_deref();
    match cli.command {
        Command::Init => {
            let start = project::locate(explicit)?;
            let outcomes = commands::init::run(&start)?;
            let root = project::git_toplevel(&start).unwrap_or(start);
            commands::init::report(&outcomes, &root);
            Ok(())
        }
        Command::Config(args) => commands::config::run(&Project::load(explicit)?, args.origin, args.trust),
        Command::Egress(EgressCommand::Render(args)) => {
            commands::egress::render(&Project::load(explicit)?, args.format)
        }
        Command::Egress(EgressCommand::Lifecycle(cmd)) => egress_cmd::run(explicit, cmd),
        Command::Egress(EgressCommand::Explain(args)) => {
            commands::egress::explain(&Project::load(explicit)?, &args)
        }
        Command::Wt(wt) => match wt {
            WtCommand::Add { branch, args } => worktree::add(explicit, &branch, &args),
            WtCommand::Rm { name, force } => worktree::rm(explicit, &name, force),
            WtCommand::List => worktree::list(explicit),
        },
        Command::Netlock(cmd) => netlock::run(cmd, &Project::load(explicit)?.settings),
        Command::Doctor(args) => doctor::run(explicit, args.json),
        Command::Prepare => run::prepare(&Project::load(explicit)?).map(drop),
        Command::Run(args) => run::run(&Project::load(explicit)?, &args.opencode_args, args.no_browser),
        Command::Exec(args) => {
            let code = sandbox::commands::exec(&Project::load(explicit)?, args.command)?;
            std::process::exit(code)
        }
        Command::Shell => {
            let code = sandbox::commands::shell(&Project::load(explicit)?)?;
            std::process::exit(code)
        }
        Command::Sandbox(SandboxCommand::Status) => sandbox::commands::status(),
        Command::Audit(args) => sandbox::commands::audit(&Project::load(explicit)?, args.accept),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ocsb", &mut std::io::stdout());
            Ok(())
        }
    }
}
