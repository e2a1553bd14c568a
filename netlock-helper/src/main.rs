//! `ocsb-netlock-helper`: see lib.rs and netlock.nft. No subcommand takes an address, a gid, a path
//! or a table name: everything comes from /etc/ocsb/netlock.toml and /etc/resolv.conf.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use ocsb_netlock_helper::cli::{Cli, Cmd};
use ocsb_netlock_helper::config::load_model;
use ocsb_netlock_helper::nft::Nl;
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
    if let Cmd::Daemon = cmd {
        return daemon::run().map(|()| 0);
    }
    let mut nl = Nl::open()?;
    if let Cmd::Remove = cmd {
        // An orphaned owned table is adopted whatever the config says now.
        let flags = nl.flags_for(None)?;
        nl.remove(flags)?;
        println!("removed");
        return Ok(0);
    }
    let model = load_model()?;
    let flags = nl.flags_for(Some(&model))?;
    let owned = flags != 0;
    match cmd {
        Cmd::Apply => {
            nl.apply(&model, flags)?;
            let (gid, dns4, dns6) = (model.gid, model.dns4, model.dns6);
            println!("applied: gid {gid} dns4 {dns4:?} dns6 {dns6:?} (owner flags: {owned})");
        }
        Cmd::Verify => {
            let report = verify::verify(&mut nl, &model, owned)?;
            print!("{}", report.text());
            return Ok(report.outcome as u8);
        }
        Cmd::Print => print!("{}", model.render(owned)),
        Cmd::Daemon | Cmd::Remove => {}
    }
    Ok(0)
}
