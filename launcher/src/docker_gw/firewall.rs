//! What the daemon's network is like, read from this machine: the gateway asks before it lets a
//! container with a network be made or started ([`check`]), and `ocsb doctor` shows the same
//! ([`observe`]). The verdict is the policy's ([`ocsb_policy::docker::firewall`]).
//!
//! The daemon is found by its data directory: `GET /info` names it (`DockerRootDir`), and the
//! `dockerd` process whose command line and configuration file lead to the same directory is
//! the one behind the socket (two daemons cannot share one). *Why not the socket's peer*: with
//! socket activation the socket is systemd's. Its forwarding is read from
//! `/proc/<pid>/net/snmp`, which shows the daemon's own network namespace to any user; its
//! firewall setting from its command line and its configuration file, both readable by
//! users as Docker installs them.

use std::path::{Path, PathBuf};

use ocsb_policy::docker::Refusal;
use ocsb_policy::docker::firewall::{self, DaemonNet, Iptables};

use super::Daemon;

/// What is known of the daemon's network, or why the daemon could not be asked.
pub fn observe(daemon: &Daemon) -> Result<DaemonNet, String> {
    let (code, info) = daemon.call("GET", "/info", None).map_err(|e| e.to_string())?;
    if code != 200 {
        return Err(format!("GET /info answered {code}"));
    }
    let root = info["DockerRootDir"].as_str().unwrap_or_default();
    let reported = info["IPv4Forwarding"].as_bool();
    Ok(match local_daemon(Path::new(root)) {
        Some((pid, args)) => DaemonNet {
            iptables: iptables(&args),
            forwarding: std::fs::read_to_string(format!("/proc/{pid}/net/snmp"))
                .ok()
                .and_then(|s| firewall::forwarding_from_snmp(&s))
                .or(reported),
        },
        None => DaemonNet {
            iptables: Iptables::Unknown(format!(
                "no dockerd process with the data directory {root} is visible here (a daemon in a VM, \
                 in another PID namespace or on another machine): its firewall setting cannot be read"
            )),
            forwarding: reported,
        },
    })
}

/// Refuses when the daemon would let a container out ([`DaemonNet::verdict`]). A daemon that
/// cannot be asked is refused too: the container's start would fail anyway.
pub fn check(daemon: &Daemon) -> Result<(), Refusal> {
    let net = observe(daemon).map_err(|e| {
        Refusal::new(
            firewall::RULE,
            format!("the gateway could not ask the daemon how its containers are kept in: {e}"),
        )
        .allow("try again; `docker version` shows whether the daemon answers")
    })?;
    net.verdict()
}

/// The firewall setting of a `dockerd` with these arguments.
fn iptables(args: &[String]) -> Iptables {
    let path = firewall::config_file(args);
    let shown = path.display().to_string();
    let config = match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    };
    firewall::iptables(args, config.as_ref().map(Option::as_deref).map_err(Clone::clone), &shown)
}

/// The pid and arguments of the `dockerd` whose data directory is `root`.
fn local_daemon(root: &Path) -> Option<(u32, Vec<String>)> {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let dir = PathBuf::from(format!("/proc/{pid}"));
        if std::fs::read_to_string(dir.join("comm")).map(|c| c.trim() != "dockerd").unwrap_or(true) {
            continue;
        }
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else { continue };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let config = std::fs::read_to_string(firewall::config_file(&args)).ok();
        let theirs = firewall::data_root(&args, config.as_deref());
        let theirs = std::fs::canonicalize(&theirs).unwrap_or(theirs);
        if theirs == root {
            return Some((pid, args));
        }
    }
    None
}
