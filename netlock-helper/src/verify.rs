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

#[derive(Debug)]
pub struct Report {
    pub outcome: Outcome,
    pub table_flags: Option<u32>,
    pub expected: String,
    pub actual: Option<String>,
}

/// `nft -s list table inet ocsb_netlock` (absolute path, no PATH lookup).
pub fn list_table() -> Result<String> {
    let nft = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"].into_iter().find(|p| Path::new(p).exists());
    let nft =
        nft.context("nft(8) not found in /usr/sbin or /sbin; install the `nftables` package to verify")?;
    let out = Command::new(nft).args(["-s", "list", "table", "inet", TABLE]).env_clear().output();
    let out = out.with_context(|| format!("cannot run {nft}"))?;
    if !out.status.success() {
        bail!("{nft} -s list table inet {TABLE} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `want_owned`: the kernel supports owner|persist, so the table must carry PERSIST (without it
/// `nft flush ruleset` would remove the lock).
pub fn verify(nl: &mut Nl, model: &Model, want_owned: bool) -> Result<Report> {
    let Some(flags) = nl.table()? else {
        let expected = model.render(want_owned);
        return Ok(Report { outcome: Outcome::Missing, table_flags: None, expected, actual: None });
    };
    let owned = flags & PERSIST != 0;
    let (expected, actual) = (model.render(owned || want_owned), list_table()?);
    let same = (owned || !want_owned) && normalize(&expected) == normalize(&actual);
    let outcome = if same { Outcome::Ok } else { Outcome::Drift };
    Ok(Report { outcome, table_flags: Some(flags), expected, actual: Some(actual) })
}

impl Report {
    /// What `verify` prints for a human.
    pub fn text(&self) -> String {
        let unflagged =
            self.table_flags.unwrap_or(0) & PERSIST == 0 && self.expected.contains("\tflags owner");
        match self.outcome {
            Outcome::Ok => return "ok: table inet ocsb_netlock matches the contract\n".into(),
            Outcome::Missing => return "missing: table inet ocsb_netlock is not installed\n".into(),
            Outcome::Drift if unflagged => return "drift: the table lacks the owner/persist flags (`nft flush ruleset` would remove it); run `ocsb-netlock-helper apply` or restart the daemon\n".into(),
            Outcome::Drift => {}
        }
        let (e, a) = (normalize(&self.expected), normalize(self.actual.as_deref().unwrap_or("")));
        let mut out = "drift: table differs from the contract (- expected, + found):\n".to_string();
        e.lines().filter(|l| !a.lines().any(|x| x == *l)).for_each(|l| out += &format!("-{l}\n"));
        a.lines().filter(|l| !e.lines().any(|x| x == *l)).for_each(|l| out += &format!("+{l}\n"));
        out
    }
}
