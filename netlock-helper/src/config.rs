//! Inputs of the helper: `/etc/ocsb/netlock.toml`, `/etc/resolv.conf` and the group database.
//!
//! The paths are compile-time constants on purpose: the helper takes no path, address, gid or table
//! name from its command line, its environment or a D-Bus caller. Tests never need an override: they
//! run the helper inside a private mount namespace that overlays its own `/etc` (see tests/support).

use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;

use anyhow::{Context, Result, bail};
use nix::unistd::Group;
use serde::Deserialize;

use crate::model::Model;
use crate::resolv;

pub const CONFIG_PATH: &str = "/etc/ocsb/netlock.toml";
pub const RESOLV_PATH: &str = "/etc/resolv.conf";
/// Below this the gid is a system group (sysusers allocates there); a regular user's primary group
/// must never be locked by accident.
pub const SYS_GID_MAX: u32 = 999;
const MAX_CONFIG: u64 = 64 * 1024;

/// Missing keys take the values of [`Config::default`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Name of the group whose sockets are locked (the shim's group).
    pub group: String,
    pub dns: Dns,
    /// `false`: never use the kernel's `owner|persist` table flags (see [`Model::owner_flags`]).
    pub owner_flags: bool,
}

/// Which DNS servers a locked process may reach on port 53.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Dns {
    /// The `nameserver` lines of /etc/resolv.conf, followed when the file changes.
    #[default]
    ResolvConf,
    /// No DNS at all: both sets stay empty and port 53 is closed on loopback too, so a local
    /// resolver (systemd-resolved, dnsmasq) is no way out either; names are resolved by the
    /// egress filter, which runs outside the group.
    None,
    /// A fixed list, written by the admin: `dns = { static = ["192.0.2.53"] }`.
    Static(Vec<IpAddr>),
}

impl Default for Config {
    fn default() -> Self {
        Config { group: "opencode-sandbox".into(), dns: Dns::ResolvConf, owner_flags: true }
    }
}

impl Config {
    /// Parses the config text; errors name the file and the line.
    pub fn parse(text: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| {
            anyhow::anyhow!("{CONFIG_PATH}: {e}\nhint: allowed keys are `group = \"NAME\"`, `dns = \"resolv-conf\" | \"none\" | {{ static = [\"ADDR\", ...] }}` and `owner_flags = false`")
        })
    }

    /// Reads the config. A missing file means the built-in defaults (they lock nothing less);
    /// a file that is not root-owned or is writable by others is refused, because whoever can
    /// write it decides which gid is locked.
    pub fn load() -> Result<Config> {
        let meta = match fs::metadata(CONFIG_PATH) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {CONFIG_PATH}")),
        };
        let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
        if uid != 0 || mode & 0o022 != 0 {
            bail!(
                "{CONFIG_PATH} must be owned by root and not writable by group or others (found uid {uid} mode {mode:o}); fix with: chown root: {CONFIG_PATH} && chmod 0644 {CONFIG_PATH}"
            );
        }
        if meta.len() > MAX_CONFIG {
            bail!("{CONFIG_PATH} is larger than 64 KiB");
        }
        let text = fs::read_to_string(CONFIG_PATH).with_context(|| format!("cannot read {CONFIG_PATH}"))?;
        Config::parse(&text)
    }

    /// Resolves the group to a gid and refuses gids that would lock someone by accident.
    pub fn gid(&self) -> Result<u32> {
        let name = &self.group;
        let group = Group::from_name(name).with_context(|| format!("cannot look up group {name:?}"))?;
        let gid = group.map(|g| g.gid.as_raw()).with_context(|| {
            format!("group {name:?} (from {CONFIG_PATH}) does not exist; create it with `systemd-sysusers` (packaging/sysusers.d/ocsb.conf) or `groupadd --system {name}`")
        })?;
        if gid == 0 || gid > SYS_GID_MAX {
            bail!(
                "group {name:?} has gid {gid}; the netlock group must be a system group (1..={SYS_GID_MAX}) so that no login user's primary group is locked by accident"
            );
        }
        Ok(gid)
    }

    /// Everything the table is built from, read fresh.
    pub fn model(&self) -> Result<Model> {
        let gid = self.gid()?;
        let servers = match &self.dns {
            Dns::None => Vec::new(),
            Dns::Static(list) => list.clone(),
            Dns::ResolvConf => resolv::read(RESOLV_PATH)?,
        };
        Ok(Model { owner_flags: self.owner_flags, ..Model::new(gid, &servers, self.dns == Dns::None) })
    }
}

/// Reads config, group and resolv.conf in one go.
pub fn load_model() -> Result<Model> {
    Config::load()?.model()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_modes() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        let c = Config::parse("group = \"g\"\ndns = \"none\"\n").unwrap();
        assert_eq!((c.group.as_str(), c.dns), ("g", Dns::None));
        let c = Config::parse("dns = { static = [\"192.0.2.53\", \"2001:db8::53\"] }").unwrap();
        assert_eq!(c.dns, Dns::Static(vec!["192.0.2.53".parse().unwrap(), "2001:db8::53".parse().unwrap()]));
        assert_eq!(Config::parse("dns = \"resolv-conf\"").unwrap().dns, Dns::ResolvConf);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_line() {
        let e = Config::parse("group = \"g\"\ntable = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("table"), "{e}");
        let e = Config::parse("dns = { static = [\"not-an-ip\"] }").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(Config::parse("dns = \"bogus\"").is_err());
        assert!(Config::parse("dns = { static = [], extra = 1 }").is_err());
    }
}
