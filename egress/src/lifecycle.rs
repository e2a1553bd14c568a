//! One lifecycle for both backends: `up`, `down`, `status`, `logs`, `render` (and `verify` in
//! [`crate::verify`]). Synchronous API for the launcher; the squid backend runs its Docker calls
//! on a private runtime.
//!
//! [`Filter`] is the facade: it picks the backend once, from [`Instance::backend`], and each of
//! its methods does what is common to both (the listen plan, the state directory, the report
//! shapes) around one call into that backend. The free functions are shorthands for a
//! `Filter` used once.

use std::io::Write;
use std::sync::Arc;

use ocsb_policy::egress::Policy;

use crate::backend::Lifecycle;
use crate::builtin::lifecycle::Builtin;
use crate::error::{Error, Result};
use crate::instance::{Backend, Instance};
use crate::logline::LogsOptions;
use crate::report::{Status, UpReport, freshness};
use crate::squid::Progress;
use crate::squid::lifecycle::Squid;

/// One project's egress filter, whichever backend enforces it.
pub struct Filter<'a> {
    inst: &'a Instance,
    inner: Box<dyn Lifecycle + 'a>,
}

impl<'a> Filter<'a> {
    pub fn new(inst: &'a Instance) -> Self {
        let inner: Box<dyn Lifecycle + 'a> = match inst.backend {
            Backend::Builtin => Box::new(Builtin::new(inst)),
            Backend::Squid => Box::new(Squid::new(inst)),
        };
        Self { inst, inner }
    }

    /// `egress up`: start the filter with `policy`, or reload it without a restart. The caller
    /// compiles the rules ([`Instance::load_policy`]), so invalid rules fail before anything is
    /// touched and a running filter keeps its old ones.
    pub fn up(&self, policy: &Policy, progress: Progress) -> Result<UpReport> {
        let plan = self.inst.listen_plan();
        let paths = self.inst.paths();
        paths.create_private().map_err(|e| Error::io("cannot create", &paths.dir, e))?;
        let up = self.inner.up(policy, &plan, &progress)?;
        Ok(UpReport {
            action: up.action,
            backend: self.inst.backend,
            listen: up.listen.iter().map(|a| a.to_string()).collect(),
            listen_note: plan.note(),
            config_hash: up.config_hash,
            process: up.process,
        })
    }

    /// `egress down`. Returns whether something was running.
    pub fn down(&self) -> Result<bool> {
        self.inner.down()
    }

    /// `egress status`. Compiles the rules itself: a status must also report rules that no
    /// longer compile (the running filter keeps its old ones).
    pub fn status(&self) -> Result<Status> {
        let plan = self.inst.listen_plan();
        let policy = self.inst.load_policy();
        let rules_error = policy.as_ref().err().map(|e| e.to_string());
        let wanted_hash = policy.as_ref().ok().and_then(|p| self.inner.config_hash(p, &plan));
        let found = self.inner.observe()?;
        let mut st = Status {
            running: false,
            backend: self.inst.backend,
            listen: plan.addrs.iter().map(|a| a.to_string()).collect(),
            listen_note: plan.note(),
            config: String::new(),
            running_hash: None,
            wanted_hash,
            process: None,
            health: None,
            rules_error,
        };
        if let Some(o) = found {
            st.running = o.running;
            if let Some(listen) = o.listen {
                st.listen = listen.iter().map(|a| a.to_string()).collect();
            }
            st.running_hash = o.running_hash;
            st.process = o.process;
            st.health = o.health;
        }
        st.config = freshness(st.running, st.running_hash.as_deref(), st.wanted_hash.as_deref());
        Ok(st)
    }

    /// `egress logs`: every request and refusal, denials highlighted, or JSON lines.
    pub fn logs(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
        self.inner.logs(opts, out)
    }

    /// `egress render`: squid.conf for squid, the normalised policy for builtin.
    pub fn render(&self, policy: &Policy) -> Result<String> {
        self.inner.render(policy, &self.inst.listen_plan())
    }
}

/// [`Filter::up`] once.
pub fn up(inst: &Instance, policy: &Policy, progress: Progress) -> Result<UpReport> {
    Filter::new(inst).up(policy, progress)
}

/// [`Filter::down`] once.
pub fn down(inst: &Instance) -> Result<bool> {
    Filter::new(inst).down()
}

/// [`Filter::status`] once.
pub fn status(inst: &Instance) -> Result<Status> {
    Filter::new(inst).status()
}

/// [`Filter::logs`] once.
pub fn logs(inst: &Instance, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
    Filter::new(inst).logs(opts, out)
}

/// `egress render` for this project's rules as they are on disk now.
pub fn render(inst: &Instance) -> Result<String> {
    Filter::new(inst).render(&inst.load_policy()?)
}

/// Print progress messages on stderr (the launcher's default).
pub fn stderr_progress() -> Progress {
    Arc::new(|m: &str| eprintln!("egress: {m}"))
}
