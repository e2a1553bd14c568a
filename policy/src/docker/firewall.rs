//! Whether the daemon keeps the project's containers in.
//!
//! *Why*: an internal network has no route out by the daemon's firewall rules only (its
//! iptables chains drop what leaves the bridge). A daemon started with `--iptables=false`
//! (users do it to manage their own firewall) writes none, and when the kernel forwards
//! (`ip_forward`, which such a daemon still turns on by default), every container the agent
//! starts reaches any host directly, around the filter. The gateway then starts no container
//! that has a network: the user gets the cause and the fix, never a weaker sandbox.
//!
//! Pure: the launcher reads the daemon's command line, its configuration file and its network
//! namespace's forwarding, and this module decides.

use std::path::PathBuf;

use serde_json::Value;

use super::{Refusal, Verdict};

/// The configuration file dockerd reads when its command line names none.
pub const DEFAULT_CONFIG: &str = "/etc/docker/daemon.json";
/// Where dockerd keeps its data when neither its command line nor its file says otherwise.
pub const DEFAULT_DATA_ROOT: &str = "/var/lib/docker";

/// The daemon's firewall setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Iptables {
    /// Docker writes its rules (the default).
    On,
    /// Turned off, by what (`--iptables=false`, or the file's `"iptables": false`).
    Off(String),
    /// Not known here, and why: a daemon in a VM or on another machine, whose rules cannot be
    /// seen from this one.
    Unknown(String),
    /// The daemon runs on this machine but its setting cannot be read, and why: its
    /// configuration file is not a readable JSON file, or more than one process claims to be
    /// it. *Why apart from `Unknown`*: on this machine a setting we cannot read is one the
    /// sandbox could be fooled about (a look-alike `dockerd` the agent started, a FIFO for a
    /// configuration file), so it is refused like `Off` when the daemon forwards.
    Unreadable(String),
}

/// What is known of the daemon's network: its firewall setting, and whether its network
/// namespace forwards IPv4 (`None`: not known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonNet {
    pub iptables: Iptables,
    pub forwarding: Option<bool>,
}

/// The rule's name in a refusal.
pub const RULE: &str = "daemon-firewall";

impl DaemonNet {
    /// Refused when the daemon writes no firewall rules and forwards (or its forwarding
    /// cannot be read): nothing keeps a container in. Forwarding off is safe (nothing routes
    /// out of a bridge). A local daemon whose setting cannot be read is refused the same way;
    /// an unknown setting is let through only for a daemon not on this machine, where its
    /// rules cannot be seen (`ocsb doctor` says so).
    pub fn verdict(&self) -> Verdict<()> {
        match (&self.iptables, self.forwarding) {
            (Iptables::Unreadable(why), f) if f != Some(false) => Err(Refusal::new(
                RULE,
                format!(
                    "cannot tell whether the Docker daemon keeps containers in ({why}), and IP forwarding is {}",
                    if f.is_some() { "on" } else { "not known to be off" }
                ),
            )
            .allow(
                "make the daemon's configuration file a readable JSON file (it runs with iptables enabled by                  default), stop any other process named dockerd that names the same data directory, or set                  OCSB_DOCKER=0",
            )),
            (Iptables::Off(by), f) if f != Some(false) => Err(Refusal::new(
                RULE,
                format!(
                    "the Docker daemon runs with {by} and IP forwarding {}: containers on internal \
                     networks could reach any host directly, around the filter",
                    if f.is_some() { "on" } else { "not known to be off" }
                ),
            )
            .allow(
                "start dockerd with iptables enabled (the default: remove --iptables=false or \
                 \"iptables\": false from /etc/docker/daemon.json), or set OCSB_DOCKER=0",
            )),
            _ => Ok(()),
        }
    }
}

/// The value of the option `name` (`--name=v` or `--name v`) in dockerd's arguments; the last
/// one wins, as for dockerd.
fn option<'a>(args: &'a [String], names: &[&str]) -> Option<&'a str> {
    let mut found = None;
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        for n in names {
            if let Some(v) = a.strip_prefix(n) {
                if let Some(v) = v.strip_prefix('=') {
                    found = Some(v);
                } else if v.is_empty() {
                    found = it.peek().map(|s| s.as_str());
                }
            }
        }
    }
    found
}

/// A boolean flag as dockerd's flag parser reads it: `--flag` alone is true, `--flag=V` takes
/// Go's `ParseBool` spellings. `None` when absent or not a boolean.
fn flag(args: &[String], name: &str) -> Option<bool> {
    let mut found = None;
    for a in args {
        if a == name {
            found = Some(true);
        } else if let Some(v) = a.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            found = match v {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
                _ => found,
            };
        }
    }
    found
}

/// The configuration file dockerd reads, given its arguments.
pub fn config_file(args: &[String]) -> PathBuf {
    PathBuf::from(option(args, &["--config-file"]).unwrap_or(DEFAULT_CONFIG))
}

/// Where dockerd keeps its data, given its arguments and its configuration file's text
/// (`None`: no file).
pub fn data_root(args: &[String], config: Option<&str>) -> PathBuf {
    let file = config.and_then(|c| serde_json::from_str::<Value>(c).ok());
    let from_file = file.as_ref().and_then(|f| f.get("data-root").or_else(|| f.get("graph"))?.as_str());
    PathBuf::from(option(args, &["--data-root", "--graph", "-g"]).or(from_file).unwrap_or(DEFAULT_DATA_ROOT))
}

/// The firewall setting, given dockerd's arguments and its configuration file (`Ok(None)`: no
/// file; `Err`: the file could not be read, and why). dockerd refuses to start when the two
/// disagree, so either one saying `false` is what it runs with.
pub fn iptables(args: &[String], config: Result<Option<&str>, String>, config_path: &str) -> Iptables {
    if flag(args, "--iptables") == Some(false) {
        return Iptables::Off("--iptables=false".into());
    }
    match config {
        Ok(None) => Iptables::On,
        Ok(Some(text)) => match serde_json::from_str::<Value>(text) {
            Ok(v) if v.get("iptables") == Some(&Value::Bool(false)) => {
                Iptables::Off(format!("\"iptables\": false in {config_path}"))
            }
            Ok(_) => Iptables::On,
            Err(e) => Iptables::Unreadable(format!("{config_path} is not JSON: {e}")),
        },
        Err(why) => Iptables::Unreadable(why),
    }
}

/// IPv4 forwarding from a network namespace's `/proc/<pid>/net/snmp` (readable by anyone,
/// unlike the sysctl of another namespace): the `Ip:` header's `Forwarding` column, 1 for on
/// and 2 for off (SNMP's `ipForwarding`).
pub fn forwarding_from_snmp(snmp: &str) -> Option<bool> {
    let mut ip = snmp.lines().filter_map(|l| l.strip_prefix("Ip:"));
    let header = ip.next()?;
    let values = ip.next()?;
    let col = header.split_whitespace().position(|h| h == "Forwarding")?;
    match values.split_whitespace().nth(col)? {
        "1" => Some(true),
        "2" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn iptables_off_is_read_from_the_command_line_and_the_file() {
        let none = Ok(None);
        assert_eq!(iptables(&args("-H fd://"), none.clone(), DEFAULT_CONFIG), Iptables::On);
        for off in ["--iptables=false", "--iptables=0", "--iptables=F", "--iptables --iptables=False"] {
            assert_eq!(
                iptables(&args(off), none.clone(), DEFAULT_CONFIG),
                Iptables::Off("--iptables=false".into()),
                "{off}"
            );
        }
        // `--iptables false` is a flag and a stray argument to dockerd: the flag is true.
        assert_eq!(iptables(&args("--iptables=false --iptables"), none, DEFAULT_CONFIG), Iptables::On);
        let file = |t: &'static str| iptables(&[], Ok(Some(t)), "/etc/docker/daemon.json");
        assert_eq!(
            file(r#"{"iptables": false}"#),
            Iptables::Off("\"iptables\": false in /etc/docker/daemon.json".into())
        );
        assert_eq!(file(r#"{"iptables": true, "bip": "10.0.0.1/24"}"#), Iptables::On);
        assert!(matches!(file("{"), Iptables::Unreadable(_)));
        assert!(matches!(iptables(&[], Err("permission denied".into()), "x"), Iptables::Unreadable(_)));
    }

    #[test]
    fn the_data_root_and_the_file_are_found_as_dockerd_finds_them() {
        assert_eq!(data_root(&[], None), PathBuf::from("/var/lib/docker"));
        assert_eq!(data_root(&args("--data-root /srv/d"), None), PathBuf::from("/srv/d"));
        assert_eq!(
            data_root(&args("--data-root=/srv/d"), Some(r#"{"data-root":"/x"}"#)),
            PathBuf::from("/srv/d")
        );
        assert_eq!(data_root(&[], Some(r#"{"data-root":"/x"}"#)), PathBuf::from("/x"));
        assert_eq!(config_file(&[]), PathBuf::from(DEFAULT_CONFIG));
        assert_eq!(config_file(&args("--config-file /etc/d.json")), PathBuf::from("/etc/d.json"));
    }

    #[test]
    fn forwarding_is_read_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 10\nIcmp: InMsgs\nIcmp: 0\n";
        assert_eq!(forwarding_from_snmp(snmp), Some(true));
        assert_eq!(forwarding_from_snmp(&snmp.replace("Ip: 1 64", "Ip: 2 64")), Some(false));
        assert_eq!(forwarding_from_snmp("Icmp: InMsgs\n"), None);
    }

    #[test]
    fn only_no_rules_with_forwarding_is_refused() {
        let net = |iptables, forwarding| DaemonNet { iptables, forwarding };
        let off = || Iptables::Off("--iptables=false".into());
        let r = net(off(), Some(true)).verdict().unwrap_err();
        assert_eq!(r.rule, RULE);
        assert!(r.what.contains("--iptables=false and IP forwarding on"), "{}", r.what);
        assert!(
            r.body().contains("start dockerd with iptables enabled") && r.body().contains("OCSB_DOCKER=0")
        );
        assert!(net(off(), Some(false)).verdict().is_ok(), "nothing routes");
        assert!(net(off(), None).verdict().unwrap_err().what.contains("not known to be off"));
        assert!(net(Iptables::On, Some(true)).verdict().is_ok());
        assert!(net(Iptables::Unknown("remote".into()), Some(true)).verdict().is_ok());
        let unreadable = || Iptables::Unreadable("two processes claim the data directory".into());
        let r = net(unreadable(), Some(true)).verdict().unwrap_err();
        assert!(r.what.contains("two processes claim") && r.body().contains("OCSB_DOCKER=0"), "{}", r.what);
        assert!(net(unreadable(), None).verdict().is_err());
        assert!(net(unreadable(), Some(false)).verdict().is_ok(), "nothing routes");
    }
}
