//! Structural verification: the kernel's table, as nft(8) renders it, against `netlock.nft` filled
//! with a fresh read of the inputs. nft(8) is the canonical renderer and the same text an admin
//! reads, so "verify" and "the audited contract" can never mean two different things.
//! (The launcher's probe, run as the locked gid, is the authoritative *functional* check.)

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::model::{Model, TABLE, normalize};
use crate::nft::{Nl, PERSIST};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Ok,
    Missing,
    Drift,
    StaleDns,
}

impl Outcome {
    /// Exit codes of `verify`: 0 ok, 2 missing, 3 drift, 4 stale-dns (1 = could not check).
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Ok => 0,
            Outcome::Missing => 2,
            Outcome::Drift => 3,
            Outcome::StaleDns => 4,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub outcome: Outcome,
    pub table_flags: Option<u32>,
    pub expected: String,
    pub actual: Option<String>,
}

const NFT_PATHS: [&str; 3] = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"];

/// `nft -s list table inet ocsb_netlock` (absolute path, no PATH lookup).
pub fn list_table() -> Result<String> {
    let Some(nft) = NFT_PATHS.iter().find(|p| Path::new(p).exists()) else {
        bail!("nft(8) not found in /usr/sbin or /sbin; install the `nftables` package to verify");
    };
    let out = Command::new(nft)
        .args(["-s", "list", "table", "inet", TABLE])
        .env_clear()
        .output()
        .with_context(|| format!("cannot run {nft}"))?;
    if !out.status.success() {
        bail!("{nft} -s list table inet {TABLE} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `want_owned`: the kernel supports owner|persist, so the table must carry PERSIST (without it
/// `nft flush ruleset` would remove the lock).
pub fn verify(nl: &mut Nl, model: &Model, want_owned: bool) -> Result<Report> {
    let Some(info) = nl.table()? else {
        return Ok(Report {
            outcome: Outcome::Missing,
            table_flags: None,
            expected: model.render(want_owned),
            actual: None,
        });
    };
    let owned = info.flags & PERSIST != 0;
    let expected = model.render(owned);
    let actual = list_table()?;
    let (want, got) = (normalize(&expected), normalize(&actual));
    let outcome = if want_owned && !owned {
        Outcome::Drift
    } else if want == got {
        Outcome::Ok
    } else if strip_elements(&want) == strip_elements(&got) {
        Outcome::StaleDns
    } else {
        Outcome::Drift
    };
    Ok(Report { outcome, table_flags: Some(info.flags), expected, actual: Some(actual) })
}

fn strip_elements(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("elements = {")).collect::<Vec<_>>().join("\n")
}

/// A minimal line diff for humans (`-` expected, `+` found).
pub fn diff(expected: &str, actual: &str) -> String {
    let (e, a) = (normalize(expected), normalize(actual));
    let mut out = String::new();
    for l in e.lines().filter(|l| !a.lines().any(|x| x == *l)) {
        out.push_str(&format!("-{l}\n"));
    }
    for l in a.lines().filter(|l| !e.lines().any(|x| x == *l)) {
        out.push_str(&format!("+{l}\n"));
    }
    out
}
