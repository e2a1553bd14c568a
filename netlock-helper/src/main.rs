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
    // `remove` reads no config: an orphaned owned table is adopted whatever the config says now.
    let model = if let Cmd::Remove = cmd { None } else { Some(load_model()?) };
    let flags = nl.flags_for(model.as_ref())?;
    let owned = flags != 0;
    match (cmd, model) {
        (Cmd::Apply, Some(m)) => {
            nl.apply(&m, flags)?;
            println!("applied: gid {} dns4 {:?} dns6 {:?} (owner flags: {owned})", m.gid, m.dns4, m.dns6);
        }
        (Cmd::Verify, Some(m)) => {
            let (outcome, text) = verify::verify(&mut nl, &m, owned)?;
            print!("{text}");
            return Ok(outcome as u8);
        }
        (Cmd::Print, Some(m)) => print!("{}", m.render(owned)),
        (Cmd::Remove, _) => {
            nl.remove(flags)?;
            println!("removed");
        }
        // `daemon` returned above; the others have their model.
        _ => {}
    }
    Ok(0)
}
