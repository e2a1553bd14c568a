//! What one project's filter is: the description both backends read and none of them owns.
//!
//! *Why a file of its own*: the renderer, the facade and both backends all need it, and none
//! of them should need each other to get it.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;

use ocsb_policy::egress::{Policy, load_layers};
use serde::Serialize;

use crate::error::Result;
use crate::listen::{self, GatewaySetting, ListenPlan};
use crate::paths::EgressPaths;
use crate::squid::ImageSource;

/// `OCSB_EGRESS_BACKEND`: which implementation enforces the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Builtin,
    Squid,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Builtin => "builtin",
            Backend::Squid => "squid",
        }
    }
}

/// Test scaffolding for the squid configuration (never set in production): where squid sends
/// DNS queries and which hosts file it reads.
#[derive(Debug, Clone, Default)]
pub struct SquidOverrides {
    pub dns_nameservers: Vec<IpAddr>,
    pub hosts_file: Option<String>,
}

/// Everything the lifecycle needs to know about one project's filter. The launcher fills it
/// from the settings; tests fill it with temporary directories.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `OCSB_NAME`: names the container.
    pub name: String,
    /// `OCSB_EGRESS_BACKEND`.
    pub backend: Backend,
    /// `OCSB_STATE_DIR`.
    pub state_dir: PathBuf,
    /// `~/.config/opencode-sandbox` (the user's rule layer).
    pub user_config_dir: PathBuf,
    pub project_dir: PathBuf,
    /// `OCSB_EGRESS_PORT`.
    pub port: u16,
    /// `OCSB_DOCKER_GW`: detect docker0, a fixed address, or loopback only.
    pub docker_gw: GatewaySetting,
    /// Program and leading arguments that start the builtin filter process, e.g.
    /// `[current_exe, "egress", "serve"]`; [`crate::builtin::serve::ServeArgs`] are appended.
    pub serve_command: Vec<OsString>,
    pub image_source: ImageSource,
    pub squid_overrides: SquidOverrides,
}

impl Instance {
    pub fn paths(&self) -> EgressPaths {
        EgressPaths::new(&self.state_dir)
    }

    /// Where the filter listens, detected now (docker0 may come and go between commands).
    pub fn listen_plan(&self) -> ListenPlan {
        listen::plan(self.port, self.docker_gw)
    }

    /// Read and compile this project's rule layers. Callers compile once and hand the result to
    /// [`crate::up`], so the rules the filter gets are the ones the caller checked.
    pub fn load_policy(&self) -> Result<Policy> {
        let layers = load_layers(&self.user_config_dir, &self.project_dir)?;
        Ok(Policy::compile(&layers)?)
    }
}
