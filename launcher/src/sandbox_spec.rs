//! Settings → [`SandboxSpec`]: the one place where the launcher's settings become the sandbox's
//! policy. `ocsb run`, `exec`, `shell`, `audit` and the checks before `ocsb wt` all take their
//! spec from here, so they cannot disagree about what the agent may reach.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use ocsb_policy::settings::DockerMode;
use ocsb_policy::settings::{CacheUse, NetlockAcquire, NetworkMode, Settings};
use ocsb_sandbox::spec::{DOCKER_SOCKETS, TcpPorts, parse_port_range};
use ocsb_sandbox::{Acquire, Limits, Netlock, Network, SandboxSpec, TtyMode};

use crate::error::{Error, Result};
use crate::install::Installation;
use crate::project::Project;
use crate::state;

/// The netlock part of the sandbox spec for the network mode. In `isolated` mode the netlock is
/// defence in depth: the sandbox joins the group where the netlock is installed (the group and
/// the way to join it exist), and needs nothing otherwise.
pub fn netlock_for(settings: &Settings) -> Result<Netlock> {
    match (settings.network(), netlock(settings)) {
        (NetworkMode::Netlock, lock) => lock,
        (NetworkMode::Isolated, Ok(Netlock::Required { acquire: Acquire::Shim { path }, .. }))
            if !path.exists() =>
        {
            Ok(Netlock::Off)
        }
        (NetworkMode::Isolated, lock) => Ok(lock.unwrap_or(Netlock::Off)),
    }
}

/// The sandbox's network for the settings: the host's, or a namespace of its own with the
/// filter's port and the declared loopback ports relayed in.
pub fn network(settings: &Settings) -> Network {
    match settings.network() {
        NetworkMode::Netlock => Network::Host,
        NetworkMode::Isolated => {
            let mut forward = vec![settings.egress_port()];
            forward.extend(settings.loopback_ports().into_iter().filter(|p| *p != settings.egress_port()));
            Network::Isolated { forward }
        }
    }
}

/// The netlock part of the sandbox spec: the group's gid and how the sandbox gets it.
pub fn netlock(settings: &Settings) -> Result<Netlock> {
    let group = settings.netlock_group();
    let gid = match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => g.gid.as_raw(),
        _ => {
            return Err(Error::failed(
                format!("netlock: the group {group} does not exist, so the netlock is not installed"),
                "install the netlock helper (`sudo make install`), then `ocsb netlock setup`",
            ));
        }
    };
    let ids =
        nix::unistd::getresgid().map_err(|e| Error::failed(format!("getresgid: {e}"), "report this"))?;
    let acquire = if [ids.real, ids.effective, ids.saved].iter().all(|g| g.as_raw() == gid) {
        // Already the group (e.g. started through `sg`): nothing to acquire.
        Acquire::Inherited
    } else {
        match settings.netlock_acquire() {
            NetlockAcquire::Exec => Acquire::Shim { path: Installation::current()?.shim() },
            NetlockAcquire::Sg => Acquire::Sg { group: group.to_string() },
        }
    };
    Ok(Netlock::Required { gid, acquire, probe_interval: Duration::from_secs(5) })
}

/// Let the sandbox reach a port the launcher serves on the host's loopback (the model-key
/// broker's): a landlock connect rule on the host's network, a relay into an isolated one.
pub fn reach_host_port(spec: &mut SandboxSpec, port: u16) {
    if let Some(tcp) = spec.tcp.as_mut()
        && !tcp.connect.contains(&port)
    {
        tcp.connect.push(port);
    }
    if let Network::Isolated { forward } = &mut spec.network
        && !forward.contains(&port)
    {
        forward.push(port);
    }
}

/// The sandbox for this project, from its settings (the seed's policy).
pub fn spec(
    project: &Project,
    netlock: Netlock,
    extra_env: &[(String, String)],
    argv: Vec<String>,
) -> Result<SandboxSpec> {
    let s = &project.settings;
    let state = s.state_dir();
    let ssh_agent =
        std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from).filter(|p| p.is_absolute() && p.exists());
    let host: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut env = ocsb_sandbox::env::build(&ocsb_sandbox::env::EnvInputs {
        host: &host,
        home: &project.home,
        state_dir: &state,
        proxy_port: s.egress_port(),
        ssh_agent: ssh_agent.as_deref(),
        extra: extra_env,
    });
    // Last, so no `OCSB_ENV` entry replaces it: an `ocsb` started inside says at once that it
    // runs on the host (`commands::inside`).
    let inside = crate::commands::inside::VAR;
    env.retain(|(k, _)| k != inside);
    env.push((inside.to_string(), project.checkout.display().to_string()));
    let mut hide = s.hide();
    hide.extend(state::hidden_from_sandbox(&state));
    // The files that hold model-provider keys, wherever the user keeps them (a readable part
    // of `~` included): the broker reads them outside, nothing inside may.
    hide.extend(crate::broker::key_files(s));
    // Other projects' state (their web passwords, sessions, /tmp) and the trust and audit
    // records beside each state directory; this project's own state directory is mounted
    // writable on top (a deeper mount comes later in the plan).
    hide.push(project.home.join(".local/share/opencode-sandbox"));
    let wt = s.worktrees_dir();
    let (mut rw_home, mut caches) = (Vec::new(), Vec::new());
    for (dir, usage) in s.home_dirs() {
        match usage {
            CacheUse::Shared => rw_home.push(dir),
            CacheUse::Private(name) => caches.push((dir, state::Layout::new(&state).home_cache(&name))),
            CacheUse::ReadOnly => {}
        }
    }
    Ok(SandboxSpec {
        project_dir: project.checkout.clone(),
        state_dir: state,
        home: project.home.clone(),
        worktrees_dir: wt.is_dir().then_some(wt),
        rw: s.rw(),
        rw_home,
        caches,
        hide,
        hide_home: s.hide_home(),
        tmp: s.tmp().into(),
        docker_socket: if s.docker() == DockerMode::Raw {
            DOCKER_SOCKETS.iter().map(PathBuf::from).find(|p| p.exists())
        } else {
            None
        },
        // Set by the run itself, which serves the gateway (`docker_gw::attach`).
        docker_gateway: None,
        ssh_agent,
        env,
        argv,
        cwd: None,
        namespaces: s.sandbox_enabled(),
        netlock,
        network: network(s),
        // In an isolated sandbox the namespace, not landlock, decides what loopback is.
        tcp: (s.network() == NetworkMode::Netlock).then(|| {
            TcpPorts::for_sandbox(
                s.egress_port(),
                s.opencode_port(),
                &s.loopback_ports(),
                std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                    .ok()
                    .and_then(|t| parse_port_range(&t)),
            )
        }),
        limits: Limits::default(),
        tty: TtyMode::Never,
        rw_tool_files: s.rw_tool_files().to_vec(),
        nested_repos: Vec::new(),
        protect: Vec::new(),
        programs: Installation::current()?.program_dirs(),
    })
}
