//! The status file `/run/ocsb-netlock/status.json` (0644): what the daemon last did, for
//! `ocsb netlock status` and for admins. Written atomically (temp file + rename).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::model::Model;

pub const STATUS_DIR: &str = "/run/ocsb-netlock";
pub const STATUS_FILE: &str = "/run/ocsb-netlock/status.json";

#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    /// starting | enforcing | removed | error | stopped
    pub state: String,
    /// The model last applied: `gid`, `dns4`, `dns6`, `no_dns`.
    #[serde(flatten)]
    pub model: Option<Model>,
    /// The table has `owner|persist` (kernel >= 6.9 and not turned off in the config);
    /// otherwise the watcher guards it.
    pub owner_flags: bool,
    /// Seconds since the epoch of the last apply.
    pub last_apply: u64,
    pub error: Option<String>,
    pub pid: u32,
    pub version: &'static str,
}

impl Status {
    pub fn new(owner_flags: bool) -> Status {
        let (state, pid, version) = ("starting".into(), std::process::id(), env!("CARGO_PKG_VERSION"));
        Status { state, owner_flags, pid, version, ..Status::default() }
    }

    /// Written to a temporary name and renamed, so a reader never sees half a file; the
    /// temporary file is never a symlink followed (`O_NOFOLLOW`, its mode set on the descriptor).
    pub fn write(&self) -> Result<()> {
        let tmp = format!("{STATUS_FILE}.tmp");
        fs::create_dir_all(STATUS_DIR).with_context(|| format!("cannot create {STATUS_DIR}"))?;
        let mut open = fs::OpenOptions::new();
        open.write(true).create(true).truncate(true).custom_flags(nix::libc::O_NOFOLLOW);
        let mut f = open.open(&tmp).with_context(|| format!("cannot write {tmp}"))?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        f.write_all((serde_json::to_string_pretty(self)? + "\n").as_bytes())?;
        fs::rename(&tmp, STATUS_FILE).with_context(|| format!("cannot write {STATUS_FILE}"))
    }
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model is flattened into the status: each key must appear once (`Model::owner_flags`
    /// is the config's wish, skipped; the status's own says what the table has), and the model's
    /// keys are absent before the first apply.
    #[test]
    fn every_key_appears_once_and_owner_flags_is_the_tables() {
        let mut st = Status::new(false);
        let before = serde_json::to_string(&st).unwrap();
        assert!(!before.contains("\"gid\""), "{before}");
        st.model = Some(Model::new(1234, &[], false));
        let text = serde_json::to_string(&st).unwrap();
        for key in
            ["state", "gid", "dns4", "dns6", "no_dns", "owner_flags", "last_apply", "error", "pid", "version"]
        {
            assert_eq!(text.matches(&format!("\"{key}\":")).count(), 1, "{key} in {text}");
        }
        assert!(text.contains("\"owner_flags\":false"), "{text}");
    }
}
