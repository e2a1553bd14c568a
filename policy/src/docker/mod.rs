//! The Docker gateway's policy: which Docker Engine API calls the agent may make, and what a
//! container, a network or a volume it asks for may be. Pure data and functions: the gateway
//! (in the launcher) parses the requests, asks the daemon who owns what, and enforces.
//!
//! *Why a gateway at all*: the raw `docker.sock` is root on the host (`docker run -v /:/host`,
//! `--privileged`, `--pid host`), and a container's traffic takes the host's forward path, which
//! the netlock never sees. The gateway lets through what a coding agent needs (build, run, exec,
//! logs, Compose) in a shape that gives a container no more of the host than the sandbox has.
//!
//! The rules, each with its name in a refusal:
//! - [`route`]: a call is one of the endpoints listed there, on an API version the gateway was
//!   built for; anything else is refused (`endpoint`, `api-version`). Calls on a container,
//!   an exec instance, a network or a volume need it to be the project's own (`ownership`).
//! - [`create`]: a container's configuration — no privilege, no host namespace, no devices, no
//!   added capabilities beyond Docker's defaults, no security option that turns a protection
//!   off, no sysctls, binds only of the sandbox's writable set, ports on loopback only, the
//!   project's network only — and every field of it one the gateway knows (`unknown-field`).
//! - [`user`]: a container with a host directory runs as the sandbox's user, with no power over
//!   files beyond the user's (`user`, `capabilities`); no container makes device nodes.
//! - [`limits`]: memory and processes capped on every container, nothing above the sandbox's
//!   own rlimits and `/dev/shm`, no realtime CPU (`resources`).
//! - [`objects`]: networks are internal (no route out) and labelled; volumes are labelled and
//!   plain (no driver options: `local` with `o=bind` is a bind mount by another name).
//! - [`firewall`]: no container with a network starts on a daemon that writes no firewall
//!   rules and forwards (`daemon-firewall`): its internal networks would route out.
//!
//! [`proxy`] decides what a container and a build are handed as their proxy: the filter on
//! their own network, over whatever the client sent.

pub mod create;
pub mod distribution;
pub mod dockerfile;
pub mod firewall;
pub mod limits;
pub mod objects;
pub mod proxy;
pub mod registry;
pub mod route;
pub mod user;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// The label every object the gateway lets the agent make carries, with the project's name.
pub const PROJECT_LABEL: &str = "dev.ocsb.project";
/// The label with the session (one gateway, one `ocsb run` or `exec`) that made the object.
pub const SESSION_LABEL: &str = "dev.ocsb.session";

/// The Engine API versions the gateway was written against (the Docker CLI negotiates down to
/// what the daemon offers; a newer one may carry fields this policy does not know).
pub const API_MIN: (u32, u32) = (1, 24);
pub const API_MAX: (u32, u32) = (1, 47);

/// What the policy needs to know of the sandbox it serves.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The project's name: the value of [`PROJECT_LABEL`].
    pub project: String,
    /// The session's id: the value of [`SESSION_LABEL`].
    pub session: String,
    /// The network the project's containers join (internal, made by the gateway).
    pub network: String,
    /// Canonical host paths the sandbox may write: the only sources a bind may have.
    pub writable: Vec<PathBuf>,
    /// Canonical host paths hidden from the sandbox: no bind may reach into one, and one
    /// inside a bind is covered in the container.
    pub hidden: Vec<PathBuf>,
    /// Canonical host paths the sandbox sees read-only inside its writable set (the checkout's
    /// git metadata and the other names of the checkout rule): read-only in the container too.
    pub read_only: Vec<PathBuf>,
    /// The host loopback ports the sandbox may reach (`OCSB_FORWARD_PORTS`,
    /// `OCSB_LOOPBACK_PORTS`): the only ones a container may publish on.
    pub ports: Vec<u16>,
    /// The sandbox's user: a container with a host directory runs as it.
    pub uid: u32,
    /// The sandbox's group: the group of what such a container writes.
    pub gid: u32,
    /// Other groups the user's own files have (its primary group in the user database, when
    /// the launcher runs with another): accepted in `--user UID:GID` too.
    pub own_gids: Vec<u32>,
    /// The most a container may have of memory, `/dev/shm` and each rlimit: the sandbox's own.
    pub limits: limits::Limits,
}

impl Context {
    /// The labels an object made through the gateway gets.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (PROJECT_LABEL.to_string(), self.project.clone()),
            (SESSION_LABEL.to_string(), self.session.clone()),
        ])
    }
}

/// A refused call: the rule, what was wrong, and how to allow it where that is possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: &'static str,
    pub what: String,
    pub allow: Option<String>,
}

impl Refusal {
    pub fn new(rule: &'static str, what: impl Into<String>) -> Refusal {
        Refusal { rule, what: what.into(), allow: None }
    }

    pub fn allow(mut self, how: impl Into<String>) -> Refusal {
        self.allow = Some(how.into());
        self
    }

    /// The Docker-style error body (`{"message": …}`), which the Docker CLI and Compose print
    /// as they are.
    pub fn body(&self) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            message: &'a str,
        }
        serde_json::to_string(&Body { message: &self.message() }).unwrap_or_default()
    }

    /// The message alone, as a stream's error line carries it.
    pub fn message(&self) -> String {
        let mut message = format!("ocsb: refused by the Docker gateway (rule {}): {}", self.rule, self.what);
        if let Some(a) = &self.allow {
            message += &format!("; to allow it: {a}");
        }
        message
    }
}

pub type Verdict<T> = std::result::Result<T, Refusal>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_a_docker_error() {
        let r =
            Refusal::new("ports", "-P publishes on every address of the host").allow("-p 127.0.0.1:80:80");
        assert_eq!(
            r.body(),
            r#"{"message":"ocsb: refused by the Docker gateway (rule ports): -P publishes on every address of the host; to allow it: -p 127.0.0.1:80:80"}"#
        );
        let plain = Refusal::new("privileged", "--privileged is root on the host").body();
        assert!(plain.ends_with("(rule privileged): --privileged is root on the host\"}"), "{plain}");
    }
}
