//! The clap command trees of the two installed programs, from their own definitions (build.rs
//! mirrors the clap items of launcher/src and netlock-helper/src into these modules).

#[allow(dead_code, unused_imports, clippy::all)]
pub mod launcher {
    include!(concat!(env!("OUT_DIR"), "/launcher_cli.rs"));
}

#[allow(dead_code, unused_imports, clippy::all)]
pub mod helper {
    include!(concat!(env!("OUT_DIR"), "/helper_cli.rs"));
}

/// The `ocsb` command, as `ocsb --help` and `ocsb completions` see it.
pub fn ocsb() -> clap::Command {
    launcher::command()
}

/// The `ocsb-netlock-helper` command.
pub fn netlock_helper() -> clap::Command {
    helper::command()
}
