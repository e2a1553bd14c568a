//! What the daemon's network is like, read from this machine: the gateway asks before it lets a
//! container with a network be made or started ([`check`]), and `ocsb doctor` shows the same
//! ([`observe`]). The verdict is the policy's ([`ocsb_policy::docker::firewall`]).
//!
//! The daemon is found by its data directory: `GET /info` names it (`DockerRootDir`), and the
//! `dockerd` process whose command line and configuration file lead to the same directory is
//! the one behind the socket (two daemons cannot share one; look-alikes: `local_daemon`). *Why
//! not the socket's peer*: with
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
    let snmp = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/net/snmp"))
            .ok()
            .and_then(|s| firewall::forwarding_from_snmp(&s))
    };
    Ok(match local_daemon(Path::new(root)) {
        Found::One(pid, args) => DaemonNet { iptables: iptables(&args), forwarding: snmp(pid).or(reported) },
        Found::Several(pids) => DaemonNet {
            iptables: Iptables::Unreadable(format!(
                "{} processes named dockerd name its data directory {root} (pids {}): the daemon cannot be told \
                 apart from a look-alike",
                pids.len(),
                pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            )),
            // Whichever is the daemon, the worst of their namespaces counts.
            forwarding: pids.iter().map(|p| snmp(*p)).try_fold(false, |any, f| Some(any || f?)).or(reported),
        },
        Found::None => DaemonNet {
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
    let config = read_config(&path).map_err(|e| format!("cannot read {shown}: {e}"));
    firewall::iptables(args, config.as_ref().map(Option::as_deref).map_err(Clone::clone), &shown)
}

/// The most of a configuration file read; dockerd's are a few hundred bytes.
const CONFIG_MAX: u64 = 1 << 20;

/// A daemon's configuration file (`None`: there is none). *Why not `read_to_string`*: the path
/// comes from a process's command line, which any process named `dockerd` sets; a FIFO would
/// hold the gateway, `/dev/zero` would fill its memory. Only a regular file, opened without
/// waiting, read up to [`CONFIG_MAX`].
fn read_config(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > CONFIG_MAX {
        return Err(std::io::Error::other(format!("not a regular file of at most {CONFIG_MAX} bytes")));
    }
    let mut text = String::new();
    f.take(CONFIG_MAX).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// The `dockerd` processes that name a data directory.
enum Found {
    None,
    One(u32, Vec<String>),
    /// More than one: the daemon is among them, and a process can name itself `dockerd` and
    /// write any command line.
    Several(Vec<u32>),
}

/// The `dockerd` whose data directory is `root`. *Why so careful*: the name and the command
/// line of a process are its own to choose, so the agent can start a look-alike that names the
/// real data directory and no `--iptables=false`. Processes in another PID namespace whose
/// namespace we can read are ours (every sandbox has a PID namespace of its own) and never the
/// daemon; of the rest, more than one claiming the directory is [`Found::Several`], which the
/// policy refuses, never "the first one wins".
fn local_daemon(root: &Path) -> Found {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let own_ns = std::fs::read_link("/proc/self/ns/pid").ok();
    let mut found: Vec<(u32, Vec<String>)> = Vec::new();
    let Ok(proc) = std::fs::read_dir("/proc") else { return Found::None };
    for entry in proc.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let dir = PathBuf::from(format!("/proc/{pid}"));
        if std::fs::read_to_string(dir.join("comm")).map(|c| c.trim() != "dockerd").unwrap_or(true) {
            continue;
        }
        if let (Some(own), Ok(theirs)) = (&own_ns, std::fs::read_link(dir.join("ns/pid")))
            && &theirs != own
        {
            continue;
        }
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else { continue };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let config = read_config(&firewall::config_file(&args)).ok().flatten();
        let theirs = firewall::data_root(&args, config.as_deref());
        let theirs = std::fs::canonicalize(&theirs).unwrap_or(theirs);
        if theirs == root {
            found.push((pid, args));
        }
    }
    match found.len() {
        0 => Found::None,
        1 => {
            let (pid, args) = found.remove(0);
            Found::One(pid, args)
        }
        _ => Found::Several(found.into_iter().map(|(p, _)| p).collect()),
    }
}
