//! `ocsb-policy`: what the sandbox allows, apart from how it is enforced.
//!
//! * [`settings`]: the five `sandbox.conf` layers. The files use bash syntax so existing files keep
//!   loading, but they are **parsed, never executed**: a committed file that the agent can edit must
//!   never run code on the host.
//! * [`egress`]: the egress rule language, its layers, the decision function and the squid.conf
//!   renderer.
//!
//! * [`docker`]: what the Docker gateway lets through to the daemon.
//!
//! * [`guard`]: what in a writable checkout the agent must not create or change, because git or
//!   another host tool later reads or runs it.
//!
//! * [`toolfiles`]: the files host tools read or run by themselves in a directory (direnv's
//!   `.envrc`, an editor's settings, a hook manager's config), at any depth.
//!
//! * [`home`]: what the sandbox's home holds (an allowlist; the rest of `~` is absent).
//!
//! * [`http`]: what every HTTP hop of ocsb shares: the hop-by-hop headers, percent coding.
//!
//! * [`strays`]: what a container may leave on a writable path that the sandbox itself could not.
//!
//! * [`ssh_agent`]: which requests of the sandbox reach the user's ssh-agent.
//!
//! * [`gitconfig`]: the git config the agent's git reads: the user's, without credentials.
//!
//! * [`gitimport`]: which of the agent's commits and refs reach the user's repository.
//!
//! This crate spawns no process and opens no socket; it only reads the layer files it is pointed at.
#![forbid(unsafe_code)]

pub mod clock;
pub mod docker;
pub mod egress;
pub mod error;
pub mod gitconfig;
pub mod gitimport;
pub mod guard;
pub mod home;
pub mod http;
pub mod publish;
pub mod settings;
pub mod ssh_agent;
pub mod strays;
pub mod toolfiles;

pub use error::{Error, Location, Result};
