//! `ocsb-netlock-helper`: see lib.rs and netlock.nft. No subcommand takes an address, a gid, a path
//! or a table name: everything comes from /etc/ocsb/netlock.toml and /etc/resolv.conf.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use ocsb_netlock_helper::cli::{Cli, Cmd};
use ocsb_netlock_helper::config::{self, CONFIG_PATH, Config, RESOLV_PATH};
use ocsb_netlock_helper::nft::{Nl, OWNED, PERSIST};
use ocsb_netlock_helper::verify::{self, Outcome};
use ocsb_netlock_helper::{daemon, model::Model};

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
        Cmd::Daemon => daemon::run().map(|()| 0),
        Cmd::Apply => {
            let model = config::load_model()?;
            let mut nl = Nl::open()?;
            let f = if nl.use_owner(&model)? { OWNED } else { 0 };
            nl.apply(&model, f)?;
            println!(
                "applied: gid {} dns4 {:?} dns6 {:?} (owner flags: {})",
                model.gid,
                model.dns4,
                model.dns6,
                f != 0
            );
            Ok(0)
        }
        Cmd::Remove => {
            let mut nl = Nl::open()?;
            // An orphaned owned table is adopted whatever the config says now.
            let f = if nl.supports_owner()? { OWNED } else { 0 };
            nl.remove(f)?;
            println!("removed");
            Ok(0)
        }
        Cmd::Verify { json } => {
            let model = config::load_model()?;
            let mut nl = Nl::open()?;
            let want_owned = nl.use_owner(&model)?;
            let report = verify::verify(&mut nl, &model, want_owned)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                match report.outcome {
                    Outcome::Ok => println!("ok: table inet ocsb_netlock matches the contract"),
                    Outcome::Missing => println!("missing: table inet ocsb_netlock is not installed"),
                    Outcome::Drift if want_owned && report.table_flags.unwrap_or(0) & PERSIST == 0 => {
                        println!(
                            "drift: the table lacks the owner/persist flags (`nft flush ruleset` would remove it); run `ocsb-netlock-helper apply` or restart the daemon"
                        )
                    }
                    o => {
                        let label = if o == Outcome::Drift { "drift" } else { "stale-dns" };
                        println!("{label}: table differs from the contract (- expected, + found):");
                        print!("{}", verify::diff(&report.expected, report.actual.as_deref().unwrap_or("")));
                    }
                }
            }
            Ok(u8::try_from(report.outcome.exit_code()).unwrap_or(1))
        }
        Cmd::Print => {
            let model = config::load_model()?;
            // Without CAP_NET_ADMIN the feature probe is impossible; the kernel version decides.
            let owned = match Nl::open().and_then(|mut nl| nl.use_owner(&model)) {
                Ok(o) => o,
                Err(_) => model.owner_flags && kernel_has_owner_flags(),
            };
            print!("{}", model.render(owned));
            Ok(0)
        }
        Cmd::CheckConfig => {
            let cfg = Config::load()?;
            let model: Model = cfg.model()?;
            println!("config: {CONFIG_PATH} (group {:?}, dns {:?})", cfg.group, cfg.dns);
            println!("resolv.conf: {RESOLV_PATH}");
            println!("{}", serde_json::to_string_pretty(&model)?);
            Ok(0)
        }
    }
}

fn kernel_has_owner_flags() -> bool {
    let release =
        nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let mut it = release.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (6, 9)
}
