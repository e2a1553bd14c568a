//! The clap command trees of the two installed programs, from their own definitions: the man
//! pages and completions cannot drift from `--help`.

use clap::CommandFactory;

/// The `ocsb` command, as `ocsb --help` and `ocsb completions` see it.
pub fn ocsb() -> clap::Command {
    ocsb::cli::Cli::command()
}

/// The `ocsb-netlock-helper` command.
pub fn netlock_helper() -> clap::Command {
    ocsb_netlock_helper::cli::Cli::command()
}
