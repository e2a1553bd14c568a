//! A start: the session's spec made the command's ([`handed`]), then the steps the settings
//! choose, never the command: the Docker gateway (`OCSB_DOCKER=1`), the filtering ssh-agent
//! (when the user has an agent) and the isolated network's server (`OCSB_NETWORK=isolated`). What differs between commands is only what the command
//! says of itself ([`Command`]): what it runs, its environment, its terminal, the ports of this
//! launcher it reaches and those it listens on.

use std::path::PathBuf;

use ocsb_docker_gw::Gateway;
use ocsb_policy::egress::Policy;
use ocsb_sandbox::{Ahead, SandboxSpec, TtyMode};

use super::{docker, isolated, spec, ssh_agent};
use crate::error::Result;
use crate::project::Project;

/// What a command runs in the session's sandbox, and what of this launcher it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub argv: Vec<String>,
    /// Added to the sandbox's environment (each name replaces the settings' own).
    pub env: Vec<(String, String)>,
    pub tty: TtyMode,
    /// Ports this launcher serves on the host's loopback that the command reaches (the key
    /// broker's): a landlock connect rule on the host's network, a relay into an isolated one.
    pub reaches: Vec<u16>,
    /// Ports the command listens on: on the host's network it listens there itself; out of an
    /// isolated one the host's `127.0.0.1:port` leads in to it (OpenCode's, for the web front
    /// and the browser).
    pub listens: Vec<u16>,
}

impl Command {
    /// A check of the launcher's own (`prepare`'s sandboxed `true`): no terminal.
    pub fn check(argv: Vec<String>) -> Command {
        Command { argv, env: Vec::new(), tty: TtyMode::Never, reaches: Vec::new(), listens: Vec::new() }
    }

    /// The user's command (`ocsb exec`, `ocsb shell`): a terminal of its own when stdin is one.
    pub fn interactive(argv: Vec<String>, env: Vec<(String, String)>) -> Command {
        Command { argv, env, tty: TtyMode::Auto, reaches: Vec::new(), listens: Vec::new() }
    }

    /// OpenCode's server (`ocsb run`): it reaches the key broker, when one runs, and listens on
    /// OpenCode's port.
    pub fn server(argv: Vec<String>, env: Vec<(String, String)>, broker: Option<u16>, port: u16) -> Command {
        Command { argv, env, tty: TtyMode::Never, reaches: broker.into_iter().collect(), listens: vec![port] }
    }
}

/// The spec a sandbox for `cmd` is handed: the session's `base` with the command's argv,
/// environment, terminal and the ports it reaches, and the Docker gateway's socket when one
/// serves it.
pub fn handed(base: &SandboxSpec, cmd: &Command, gateway: Option<PathBuf>) -> SandboxSpec {
    let mut spec = base.clone();
    spec.argv = cmd.argv.clone();
    spec.tty = cmd.tty;
    spec::add_env(&mut spec, &cmd.env);
    for &port in &cmd.reaches {
        spec::reach_host_port(&mut spec, port);
    }
    if let Some(socket) = gateway {
        docker::into_spec(&mut spec, socket);
    }
    spec
}

/// A sandbox ready to run: its spec, what serves it, what was made ahead of it.
pub struct Launch {
    spec: SandboxSpec,
    server: Option<isolated::Server>,
    ahead: Ahead,
    gateway: Option<Gateway>,
    agent: Option<ssh_agent::Relay>,
}

/// The start of `cmd` in a sandbox of `base` (whose netlock is the one checked): the steps the
/// settings choose, in order. `ahead`: what the caller made before (the check of the
/// checkouts, stage 2 started early).
pub fn launch(
    project: &Project,
    policy: &Policy,
    base: &SandboxSpec,
    cmd: &Command,
    mut ahead: Ahead,
) -> Result<Launch> {
    // The Docker gateway: it listens from now on, and serves once the start gives it the plan.
    let gateway = docker::start(project, base)?;
    ocsb_sandbox::stages::mark("launcher: Docker gateway started");
    let mut spec = handed(base, cmd, gateway.as_ref().map(Gateway::socket));
    // The user's ssh-agent, filtered: it listens from now until the sandbox has exited.
    let agent = ssh_agent::start(project, base)?;
    if let Some(relay) = &agent {
        ssh_agent::into_spec(&mut spec, relay);
    }
    if let Some(gw) = &gateway {
        docker::into_ahead(gw, &mut ahead);
    }
    // The isolated network's server: the relays, the DNS stub, the ports that lead in.
    let server =
        isolated::server_for(&spec, || Ok(isolated::Server::new(project, policy)?.expose(&cmd.listens)))?;
    ocsb_sandbox::stages::mark("launcher: ssh-agent and isolated network served");
    Ok(Launch { spec, server, ahead, gateway, agent })
}

impl Launch {
    /// What the isolated network publishes while the sandbox runs (none on the host's network).
    pub fn publications(&self) -> Option<ocsb_policy::publish::Publications> {
        self.server.as_ref().map(isolated::Server::publications)
    }

    /// Runs the sandbox until it exits; its exit status. The gateway and the ssh-agent relay
    /// serve until then (the gateway's containers are stopped by then), and are gone before
    /// this returns.
    pub fn run(self) -> Result<i32> {
        let Launch { spec, server, ahead, gateway, agent } = self;
        let status = isolated::run(&spec, server.as_ref(), ahead);
        drop(gateway);
        drop(agent);
        status
    }
}

#[cfg(test)]
impl Launch {
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// Whether the isolated network's server serves it.
    pub fn served(&self) -> bool {
        self.server.is_some()
    }
}
