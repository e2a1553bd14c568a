//! The probe as the locked group, run the way the sandbox runs: through the setgid shim
//! (`OCSB_NETLOCK_ACQUIRE=exec`, default) or through `sg` (`=sg`, for admins who refuse a set-id
//! file; needs group membership). The shim execs `<prefix>/bin/ocsb __netlock-probe`, which
//! sends one UDP datagram bound to `lo` to a documentation address ([`ocsb_sandbox::netlock`]):
//! EPERM means locked, and with the lock missing the datagram still cannot leave the machine.

use std::process::Command;

use nix::unistd::{Group, getresgid};

use crate::error::{Error, Result};
use crate::install::Installation;
use ocsb_policy::settings::NetlockAcquire;
use ocsb_sandbox::netlock::{PROBE_TARGET, Probe, probe};

/// The hidden subcommand the probe runs as (`ocsb __netlock-probe`).
pub const NETLOCK_PROBE: &str = "__netlock-probe";
use NETLOCK_PROBE as ARG;
pub const TARGET: std::net::SocketAddrV4 = PROBE_TARGET;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Locked,
    Open,
    Error(String),
}

#[derive(Debug)]
pub struct Report {
    pub gid: u32,
    pub outcome: Outcome,
}

/// `ocsb __netlock-probe`, run as the locked group: prints `gids R E S locked|open|error
/// MESSAGE`; the exit status is 1 only when the gids cannot be read.
pub fn main() -> u8 {
    let Ok(r) = getresgid() else { return 1 };
    let outcome = match probe() {
        Ok(Probe::Locked) => "locked".to_string(),
        Ok(Probe::Open) => "open".to_string(),
        Err(e) => format!("error {}", e.to_string().replace('\n', " ")),
    };
    println!("gids {} {} {} {outcome}", r.real, r.effective, r.saved);
    0
}

pub fn run(acquire: NetlockAcquire, group: &str) -> Result<Report> {
    let gid = match Group::from_name(group) {
        Ok(Some(g)) => g.gid.as_raw(),
        _ => {
            return Err(Error::failed(
                format!("the netlock group {group:?} does not exist, so the netlock is not installed"),
                super::INSTALL_HINT,
            ));
        }
    };
    let mut cmd = match acquire {
        NetlockAcquire::Exec => {
            let shim = Installation::current()?.shim();
            if !shim.exists() {
                return Err(Error::failed(
                    format!("the setgid shim {} is missing", shim.display()),
                    format!(
                        "{}; or set OCSB_NETLOCK_ACQUIRE=sg and join the group {group}",
                        super::INSTALL_HINT
                    ),
                ));
            }
            let mut c = Command::new(shim);
            c.arg(ARG);
            c
        }
        NetlockAcquire::Sg => {
            let exe = std::env::current_exe().map_err(|e| Error::io("find", "/proc/self/exe", e))?;
            let quoted = format!("'{}'", exe.to_string_lossy().replace('\'', r"'\''"));
            let mut c = Command::new("sg");
            c.arg(group).arg("-c").arg(format!("exec {quoted} {ARG}"));
            c
        }
    };
    let out = cmd
        .output()
        .map_err(|e| Error::failed(format!("cannot run {cmd:?}: {e}"), "check the installation"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("gids ")).unwrap_or_default().to_string();
    if !out.status.success() || line.is_empty() {
        let how = match acquire {
            NetlockAcquire::Exec => {
                "check that the shim is installed `2755 root:opencode-sandbox` and that ocsb does not run under no_new_privs"
            }
            NetlockAcquire::Sg => {
                "join the group (`sudo usermod -aG opencode-sandbox $USER`, then log in again)"
            }
        };
        return Err(Error::failed(
            format!(
                "could not run the probe as group {group}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            how,
        ));
    }
    parse(&line, gid)
}

fn parse(line: &str, gid: u32) -> Result<Report> {
    let mut words = line.split_whitespace().skip(1);
    let ids: Vec<u32> = words.by_ref().take(3).filter_map(|w| w.parse().ok()).collect();
    if ids != [gid, gid, gid] {
        return Err(Error::failed(
            format!("the probe ran with gids {ids:?} (real/effective/saved), not the netlock group's {gid}"),
            "the shim's group must be the netlock group: chown root:opencode-sandbox on it",
        ));
    }
    let rest: Vec<&str> = words.collect();
    let outcome = match rest.first().copied() {
        Some("locked") => Outcome::Locked,
        Some("open") => Outcome::Open,
        _ => Outcome::Error(rest.get(1..).map(|r| r.join(" ")).unwrap_or_default()),
    };
    Ok(Report { gid, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_probe_lines() {
        assert_eq!(parse("gids 995 995 995 locked", 995).unwrap().outcome, Outcome::Locked);
        assert_eq!(parse("gids 995 995 995 open", 995).unwrap().outcome, Outcome::Open);
        assert_eq!(parse("gids 995 995 995 error x y", 995).unwrap().outcome, Outcome::Error("x y".into()));
        assert!(parse("gids 1000 995 995 locked", 995).is_err());
    }
}
