//! `ocsb-xtask`: release chores for ocsb that the installed binaries should not carry.
//!
//! * `gen [--out DIR]`: man pages and shell completions (default DIR: the cargo target
//!   directory's `release/`, where packaging/files.list expects them);
//! * `sync` / `check`: the .deb/.rpm asset lists in packaging/xtask/Cargo.toml from files.list;
//! * `files LAYOUT`: files.list expanded for `deb`, `rpm` or `arch` (`SOURCE DEST MODE [FLAG]`),
//!   which the package tests compare with what each package really contains;
//! * `circles [DIR]`: import circles among a crate's files (default: the launcher's), a measure
//!   of how its modules depend on each other.
#![forbid(unsafe_code)]

mod circles;
mod clis;
mod error;
mod files;
mod generate;
mod msrv;
mod sync;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::Result;

#[derive(Parser)]
#[command(name = "ocsb-xtask", about = "Release chores: man pages, completions, package file lists")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write man pages and completions.
    Gen {
        /// Output directory (default: $CARGO_TARGET_DIR/release, else target/release).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Rewrite the package asset lists in packaging/xtask/Cargo.toml from packaging/files.list.
    Sync,
    /// Fail if those asset lists differ from packaging/files.list.
    Check,
    /// Print packaging/files.list expanded for a layout (deb, rpm, arch).
    Files { layout: String },
    /// Print the import circles among a crate's source files (`crate::` paths).
    Circles {
        /// The crate's source directory (default: launcher/src).
        dir: Option<PathBuf>,
    },
}

/// The repository root (this crate is packaging/xtask).
fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn main() -> ExitCode {
    match run(Args::parse().cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ocsb-xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Gen { out } => {
            let out = out.unwrap_or_else(|| {
                std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| root().join("target"))
                    .join("release")
            });
            generate::run(&out)
        }
        Cmd::Circles { dir } => circles::run(&dir.unwrap_or_else(|| root().join("launcher/src"))),
        Cmd::Sync => sync::run(&root(), true),
        Cmd::Check => sync::run(&root(), false),
        Cmd::Files { layout } => {
            let layout = files::Layout::parse(&layout)?;
            for e in files::read(&root().join("packaging/files.list"))? {
                if !files::Flag::in_layout(e.flag, layout) {
                    continue;
                }
                let flag = match e.flag {
                    None => "",
                    Some(files::Flag::SetgidShim) => " setgid-shim",
                    Some(files::Flag::Config) => " config",
                    Some(files::Flag::Unit) => " unit",
                    Some(files::Flag::Doc) => " doc",
                    Some(files::Flag::DebOnly) => " deb-only",
                    Some(files::Flag::AppArmor) => " apparmor",
                };
                println!("{} {} {}{flag}", e.source, files::expand(&e.dest, layout)?, e.mode);
            }
            Ok(())
        }
    }
}
