//! The Docker gateway (`OCSB_DOCKER=1`) as a step of every start: the gateway listens before
//! the sandbox starts, is put into the spec (its socket at `/run/docker.sock`, `DOCKER_HOST`),
//! serves once the start hands it the sandbox's own mount plan ([`Gateway::judge_by`]) and
//! stops the session's containers once the sandbox has exited ([`Gateway::at_exit`]). The
//! caller keeps the gateway until the sandbox has exited.
//!
//! The gateway is a crate of its own (`ocsb-docker-gw`); this is where it is given what the
//! launcher owns ([`config`]): the settings, the state directory's layout, the filter and the
//! TLS client.

use std::path::PathBuf;
use std::time::Duration;

use ocsb_docker_gw::{Config, Daemon, Filter, Gateway, Reach, reach, upstream};
use ocsb_policy::settings::DockerMode;
use ocsb_sandbox::{Ahead, SandboxSpec};

use crate::error::{Error, Result};
use crate::project::Project;
use crate::state::Layout;

/// The program the watcher runs: the launcher's own, this very program even if an upgrade has
/// replaced the file it was started from.
const SELF: &str = "/proc/self/exe";

/// How long the builtin filter has to take a listener lent to it.
const LEND_WAIT: Duration = Duration::from_secs(5);

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
    Ok(Some(Gateway::start(config(project)?, Daemon { socket })?))
}

/// What the gateway of `project` is given: the settings it needs, its files in the state
/// directory, the filter (its directory made private here, as the filter makes it), the TLS
/// client of its pulls and what names its socket.
fn config(project: &Project) -> Result<Config> {
    let s = &project.settings;
    let inst = crate::filter::instance(project)?;
    let paths = inst.paths();
    let reach = match inst.backend {
        ocsb_egress::Backend::Builtin => {
            let control = paths.control_socket();
            Reach::Lend(Box::new(move |listener| {
                ocsb_egress::builtin::lend::lend(&control, listener, LEND_WAIT).map_err(|e| e.to_string())
            }))
        }
        ocsb_egress::Backend::Squid => Reach::Relay,
    };
    paths.create_private().map_err(|e| Error::io("create", &paths.dir, e))?;
    Ok(Config {
        project: s.name().to_string(),
        ports: s.loopback_ports(),
        cleanup: s.docker_cleanup(),
        paths: Layout::of(s).docker(),
        filter: Filter { port: inst.port, reach },
        tls: || crate::tls::client_config().map_err(|e| e.to_string()),
        nonce: crate::web::auth::random_secret()?,
        program: PathBuf::from(SELF),
    })
}

/// Stops what the Docker sessions of `project` whose launchers died left running
/// ([`ocsb_docker_gw::stop_left_behind`]), before every look at the checkouts.
pub fn stop_left_behind(project: &Project) -> Result<()> {
    Ok(ocsb_docker_gw::stop_left_behind(&Layout::of(&project.settings).docker())?)
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
