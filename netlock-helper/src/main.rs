//! `ocsb-netlock-helper`: see lib.rs and netlock.nft. No subcommand takes an address, a gid, a path
//! or a table name: everything comes from /etc/ocsb/netlock.toml and /etc/resolv.conf.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use ocsb_netlock_helper::cli::{Cli, Cmd};
use ocsb_netlock_helper::config::load_model;
use ocsb_netlock_helper::nft::{Nl, OWNED};
use ocsb_netlock_helper::{daemon, verify};

fn main() -> ExitCode {
    match run(Cli::parse().cmd) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ocsb-netlock-helper: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cmd: Cmd) -> Result<u8> {
    match cmd {
        Cmd::Daemon => daemon::run()?,
        Cmd::Apply => {
            let (model, mut nl) = (load_model()?, Nl::open()?);
            let owned = nl.use_owner(&model)?;
            nl.apply(&model, if owned { OWNED } else { 0 })?;
            let (gid, dns4, dns6) = (model.gid, model.dns4, model.dns6);
            println!("applied: gid {gid} dns4 {dns4:?} dns6 {dns6:?} (owner flags: {owned})");
        }
        Cmd::Remove => {
            let mut nl = Nl::open()?;
            // An orphaned owned table is adopted whatever the config says now.
            let owned = nl.supports_owner()?;
            nl.remove(if owned { OWNED } else { 0 })?;
            println!("removed");
        }
        Cmd::Verify { json } => {
            let (model, mut nl) = (load_model()?, Nl::open()?);
            let want_owned = nl.use_owner(&model)?;
            let report = verify::verify(&mut nl, &model, want_owned)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.text());
            }
            return Ok(report.outcome as u8);
        }
        Cmd::Print => {
            let model = load_model()?;
            // Without CAP_NET_ADMIN the feature probe is impossible; the kernel version decides.
            let owned = Nl::open().and_then(|mut nl| nl.use_owner(&model));
            print!(
                "{}",
                model.render(owned.unwrap_or_else(|_| model.owner_flags && kernel_has_owner_flags()))
            );
        }
    }
    Ok(0)
}

fn kernel_has_owner_flags() -> bool {
    let release = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned());
    let release = release.unwrap_or_default();
    let mut it = release.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (6, 9)
}
