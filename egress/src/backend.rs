//! The contract between the facade ([`crate::Filter`]) and the two backends
//! ([`crate::builtin::lifecycle`], [`crate::squid::lifecycle`]).
//!
//! *Why a trait*: the facade picks the backend once, when it is made, and every operation after
//! that is a plain call. Each backend keeps its whole implementation in its own module, and what
//! is common to both (the listen plan, the state directory, the report shapes) stays in the
//! facade.

use std::io::Write;
use std::net::SocketAddr;

use ocsb_policy::egress::Policy;

use crate::error::Result;
use crate::listen::ListenPlan;
use crate::logline::LogsOptions;
use crate::report::UpAction;
use crate::squid::Progress;

/// One backend's `up`, `down`, `status`, `logs` and `render`.
pub(crate) trait Lifecycle {
    /// Start the filter with `policy` on `plan`'s addresses, or have the running one take the
    /// new rules without a restart. The state directory exists when this is called.
    fn up(&self, policy: &Policy, plan: &ListenPlan, progress: &Progress) -> Result<Up>;
    /// Stop and remove the filter. Returns whether something was running.
    fn down(&self) -> Result<bool>;
    /// The filter as it is now, `None` when there is none.
    fn observe(&self) -> Result<Option<Observed>>;
    /// Exactly what this backend gives the filter for `policy` (`egress render`).
    fn render(&self, policy: &Policy, plan: &ListenPlan) -> Result<String>;
    /// The fingerprint the running filter would report after loading `policy`, `None` when
    /// `policy` cannot be rendered for this backend.
    fn config_hash(&self, policy: &Policy, plan: &ListenPlan) -> Option<String>;
    /// Print the access log as `opts` asks (and follow it).
    fn logs(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()>;
}

/// What `up` did, in the backend's words; the facade adds what is common to both.
pub(crate) struct Up {
    pub action: UpAction,
    /// Where the filter accepts now.
    pub listen: Vec<SocketAddr>,
    pub config_hash: String,
    /// `pid@start-time` of the filter process, where there is one.
    pub process: Option<String>,
}

/// A filter found running (or a container found stopped).
pub(crate) struct Observed {
    pub running: bool,
    /// Where it accepts, when it says so itself (otherwise the plan's addresses are shown).
    pub listen: Option<Vec<SocketAddr>>,
    pub running_hash: Option<String>,
    /// Pid (builtin) or short container id (squid).
    pub process: Option<String>,
    pub health: Option<String>,
}
