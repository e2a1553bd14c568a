//! The Docker gateway (`OCSB_DOCKER=1`) as a step of every start: the gateway listens before
//! the sandbox starts, is put into the spec (its socket at `/run/docker.sock`, `DOCKER_HOST`),
//! serves once the start hands it the sandbox's own mount plan ([`Gateway::judge_by`]) and
//! stops the session's containers once the sandbox has exited ([`Gateway::at_exit`]). The
//! caller keeps the gateway until the sandbox has exited.

use std::path::PathBuf;

use ocsb_policy::settings::DockerMode;
use ocsb_sandbox::{Ahead, SandboxSpec};

use crate::docker_gw::{Daemon, Gateway, reach, upstream};
use crate::error::Result;
use crate::project::Project;

/// Whether the settings ask for the gateway for a sandbox of `spec`: `OCSB_DOCKER=1` and a
/// sandbox with namespaces (without them there is no bind to give it).
pub fn wanted(project: &Project, spec: &SandboxSpec) -> bool {
    project.settings.docker() == DockerMode::Gateway && spec.namespaces
}

/// Starts the gateway for a sandbox of `project` when it is [`wanted`] and a daemon answers
/// on a unix socket. With no daemon there is nothing to serve, as there was no socket to pass
/// before.
///
/// A daemon the user cannot reach (the socket's group, a stopped daemon) is said once, with
/// its fix, and the gateway still serves: the sandbox works without Docker, and the agent's
/// Docker client gets the same cause and fix as its error.
pub fn start(project: &Project, spec: &SandboxSpec) -> Result<Option<Gateway>> {
    if !wanted(project, spec) {
        return Ok(None);
    }
    let Some(socket) = upstream() else { return Ok(None) };
    if let Err(why) = reach::ping(&socket) {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "ocsb: warning: Docker will not work in the sandbox: {}; fix: {}",
                why.what(),
                why.fix()
            );
        });
    }
    Gateway::start(project, Daemon { socket }).map(Some)
}

/// What the gateway at `socket` puts into the spec: the socket, and `DOCKER_HOST` naming it
/// where the sandbox sees it.
pub fn into_spec(spec: &mut SandboxSpec, socket: PathBuf) {
    spec.docker_gateway = Some(socket);
    spec.env.retain(|(k, _)| k != "DOCKER_HOST");
    spec.env.push(("DOCKER_HOST".into(), format!("unix://{}", ocsb_sandbox::spec::DOCKER_GATEWAY_INSIDE)));
}

/// What the gateway hooks into the start: it serves with the sandbox's plan, and stops the
/// session's containers once the sandbox has exited.
pub fn into_ahead(gateway: &Gateway, ahead: &mut Ahead) {
    ahead.on_plan = Some(gateway.judge_by());
    ahead.on_exit = Some(gateway.at_exit());
}
