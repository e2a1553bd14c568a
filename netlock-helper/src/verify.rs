//! Structural verification: the kernel's table, as nft(8) renders it, against `netlock.nft` filled
//! with a fresh read of the inputs. nft(8) is the canonical renderer and the same text an admin
//! reads, so "verify" and "the audited contract" can never mean two different things.
//! (The launcher's probe, run as the locked gid, is the authoritative *functional* check.)

use std::path::Path;
use std::process::Command;

use crate::model::{Model, TABLE, normalize};
use crate::nft::{Nl, PERSIST};
use anyhow::{Context, Result, bail};

/// The outcome; its value is the exit code of `verify` (1 = could not check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok = 0,
    Missing = 2,
    Drift = 3,
}

/// Where every distribution's `nftables` package puts nft(8) (on merged-/usr systems the other
/// directories are links to it). No PATH lookup: the caller's PATH chooses nothing run as root.
const NFT: &str = "/usr/sbin/nft";

/// `nft -s list table inet ocsb_netlock`.
pub fn list_table() -> Result<String> {
    let nft = Some(NFT).filter(|p| Path::new(p).exists());
    let nft = nft.context("nft(8) is not in /usr/sbin; install the `nftables` package to verify")?;
    let out = Command::new(nft).args(["-s", "list", "table", "inet", TABLE]).env_clear().output();
    let out = out.with_context(|| format!("cannot run {nft}"))?;
    if !out.status.success() {
        bail!("{nft} -s list table inet {TABLE} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The outcome and what `verify` prints for it. `want_owned`: the kernel supports owner|persist,
/// so the table must carry PERSIST (without it `nft flush ruleset` would remove the lock).
pub fn verify(nl: &mut Nl, model: &Model, want_owned: bool) -> Result<(Outcome, String)> {
    let Some(flags) = nl.table()? else {
        return Ok((Outcome::Missing, "missing: table inet ocsb_netlock is not installed\n".into()));
    };
    if want_owned && flags & PERSIST == 0 {
        return Ok((Outcome::Drift, "drift: the table lacks the owner/persist flags (`nft flush ruleset` would remove it); run `ocsb-netlock-helper apply` or restart the daemon\n".into()));
    }
    let expected = normalize(&model.render(flags & PERSIST != 0));
    let actual = normalize(&list_table()?);
    if expected == actual {
        return Ok((Outcome::Ok, "ok: table inet ocsb_netlock matches the contract\n".into()));
    }
    let mut out = "drift: table differs from the contract (- expected, + found):\n".to_string();
    expected.lines().filter(|l| !actual.lines().any(|x| x == *l)).for_each(|l| out += &format!("-{l}\n"));
    actual.lines().filter(|l| !expected.lines().any(|x| x == *l)).for_each(|l| out += &format!("+{l}\n"));
    Ok((Outcome::Drift, out))
}
