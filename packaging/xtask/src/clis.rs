//! The clap command trees of the two installed binaries, from their own definitions.

/// `ocsb`'s clap definitions, compiled here exactly as the launcher compiles them.
#[allow(dead_code)]
#[path = "../../../launcher/src/cli.rs"]
mod launcher;

/// `ocsb-netlock-helper`'s clap definitions (see build.rs for where they come from).
#[allow(dead_code, unused_imports)]
mod helper {
    include!(concat!(env!("OUT_DIR"), "/helper_cli.rs"));
}

use clap::CommandFactory;

/// The `ocsb` command, as `ocsb --help` and `ocsb completions` see it.
pub fn ocsb() -> clap::Command {
    launcher::Cli::command()
}

/// The `ocsb-netlock-helper` command.
pub fn netlock_helper() -> clap::Command {
    helper::command()
}
