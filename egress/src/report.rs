//! What the lifecycle answers: the results of `up` and `status`, as the CLI prints them (and
//! serialises them for `--json`). The same shapes for both backends.

use serde::Serialize;

use crate::instance::Backend;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpAction {
    Started,
    Reloaded,
    /// Running with exactly these rules already: nothing was sent to it.
    Current,
}

#[derive(Debug, Clone, Serialize)]
pub struct UpReport {
    pub action: UpAction,
    pub backend: Backend,
    pub listen: Vec<String>,
    pub listen_note: String,
    pub config_hash: String,
    /// The process that filters now, `pid@start-time` (builtin), when the backend can say:
    /// with the hash, what names this filter for the self-test record.
    pub process: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub running: bool,
    pub backend: Backend,
    pub listen: Vec<String>,
    pub listen_note: String,
    /// `current`, `stale` (rules changed since the filter loaded them: run `egress up`), or
    /// `unknown`.
    pub config: String,
    pub running_hash: Option<String>,
    pub wanted_hash: Option<String>,
    /// Pid (builtin) or container id (squid).
    pub process: Option<String>,
    pub health: Option<String>,
    /// When the current rules do not compile: the error (the running filter keeps its old ones).
    pub rules_error: Option<String>,
}

/// `current` when the filter runs the rules it would be given now, `stale` when it runs others,
/// `unknown` when either side is not known (or nothing runs).
pub(crate) fn freshness(running: bool, running_hash: Option<&str>, wanted_hash: Option<&str>) -> String {
    match (running, running_hash, wanted_hash) {
        (true, Some(a), Some(b)) if a == b => "current".into(),
        (true, Some(_), Some(_)) => "stale".into(),
        _ => "unknown".into(),
    }
}
