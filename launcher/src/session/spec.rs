//! Settings → [`SandboxSpec`]: the one place where the launcher's settings become the sandbox's
//! policy. [`build`] is called once per command, by [`super::Session::new`]; `ocsb run`, `exec`,
//! `shell`, `prepare`'s checks, `audit` and the check before `ocsb wt` all take their spec from
//! there, so they cannot disagree about what the agent may reach.

use std::ffi::OsString;
use std::path::PathBuf;

use std::path::Path;

use ocsb_policy::home::{Access, Present};
use ocsb_policy::settings::{CacheUse, DockerMode, Settings};
use ocsb_sandbox::spec::{DOCKER_SOCKETS, TcpPorts, parse_port_range};
use ocsb_sandbox::{Limits, Netlock, Network, SandboxSpec, TtyMode};

use crate::error::Result;
use crate::install::Installation;
use crate::project::Project;
use crate::state;

/// Set in every sandbox's environment: the project it was made for, so that an `ocsb` started
/// inside says at once that it runs on the host (`commands::inside`). Not a setting (the
/// `OCSB_INTERNAL_` prefix keeps the settings' environment layer away from it).
pub const PROJECT_VAR: &str = "OCSB_INTERNAL_SANDBOX_PROJECT";

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

/// Add `extra` to the sandbox's environment, each name replacing the one it had. The project's
/// name stays last, so no `OCSB_ENV` entry replaces it.
pub fn add_env(spec: &mut SandboxSpec, extra: &[(String, String)]) {
    for (k, v) in extra {
        spec.env.retain(|(ek, _)| ek != k);
        spec.env.push((k.clone(), v.clone()));
    }
    spec.env.retain(|(k, _)| k != PROJECT_VAR);
    spec.env.push((PROJECT_VAR.to_string(), spec.project_dir.display().to_string()));
}

/// The sandbox for this project, from its settings (the seed's policy), with `network` (the
/// settings' [`super::network::of`]): no netlock yet (the start sets the one it checked), no
/// command, no environment beyond the settings' own.
pub fn build(project: &Project, network: Network) -> Result<SandboxSpec> {
    let s = &project.settings;
    let state = s.state_dir();
    let host: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut env = ocsb_sandbox::env::build(&ocsb_sandbox::env::EnvInputs {
        host: &host,
        home: &project.home,
        state_dir: &state,
        proxy_port: s.egress_port(),
        extra: &[],
    });
    // Last, so no `OCSB_ENV` entry replaces it ([`add_env`]).
    env.retain(|(k, _)| k != PROJECT_VAR);
    env.push((PROJECT_VAR.to_string(), project.checkout.display().to_string()));
    let mut hide = s.hide();
    hide.extend(state::hidden_from_sandbox(&state));
    // The files that hold model-provider keys, wherever the user keeps them (a readable part
    // of `~` included): the broker reads them outside, nothing inside may.
    hide.extend(ocsb_broker::key_files(s));
    // Other projects' state (their web passwords, sessions, /tmp) and the trust and audit
    // records beside each state directory; this project's own state directory is mounted
    // writable on top (a deeper mount comes later in the plan).
    hide.push(project.home.join(".local/share/opencode-sandbox"));
    // The user's own agent socket, wherever the sandbox would see it (a shared `/tmp`): the
    // sandbox gets the launcher's filtering one instead (`super::ssh_agent`).
    hide.extend(super::ssh_agent::user_agent());
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
        home_ro: home_read_only(s, &project.home),
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
        // Set by the start, which serves the gateway (`super::docker`).
        docker_gateway: None,
        // Set by the start, which serves the filtering agent (`super::ssh_agent`).
        ssh_agent: None,
        env,
        argv: Vec::new(),
        cwd: None,
        namespaces: s.sandbox_enabled(),
        netlock: Netlock::Off,
        // In an isolated sandbox the namespace, not landlock, decides what loopback is.
        tcp: (network == Network::Host).then(|| {
            TcpPorts::for_sandbox(
                s.egress_port(),
                s.opencode_port(),
                &s.loopback_ports(),
                std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                    .ok()
                    .and_then(|t| parse_port_range(&t)),
            )
        }),
        network,
        limits: Limits::default(),
        tty: TtyMode::Never,
        rw_tool_files: s.rw_tool_files().to_vec(),
        nested_repos: Vec::new(),
        tool_files: Default::default(),
        agent_git: Vec::new(),
        git_read_only: Vec::new(),
        protect: Vec::new(),
        programs: Installation::current()?.program_dirs(),
    })
}

/// What the sandbox's home holds from the host now, as `ocsb_policy::home` rules it: what
/// `ocsb config` and `ocsb doctor` print, and what [`build`] binds.
pub fn home_entries(s: &Settings) -> Vec<Present> {
    ocsb_policy::home::entries(s, &ocsb_sandbox::plan::RealFs)
}

/// The read-only entries of the home for the spec: the allowed ones (`~/.ssh` aside: the plan
/// picks its files itself, as the policy says), and what the sandbox mounts on purpose from
/// the home: the skill directories, the plugin files and the OpenCode binary, where they lie
/// there. The plan ignores the paths outside the home.
fn home_read_only(s: &Settings, home: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = home_entries(s)
        .into_iter()
        .filter(|e| e.access == Access::ReadOnly && !e.rel.starts_with(".ssh"))
        .map(|e| e.path)
        .collect();
    out.extend(s.skill_dirs());
    out.extend(s.plugins().iter().map(PathBuf::from).filter(|p| p.is_absolute()));
    let path = std::env::var("PATH").ok();
    if let Ok(bin) = crate::opencode::find_binary(&s.opencode_bin(), path.as_deref()) {
        out.extend(program_dirs(&bin));
    }
    out.retain(|p| p.starts_with(home));
    out
}

/// The directories a program needs when it lives in the home: the one it is named in, the
/// one its link points to, and for a package of npm (`…/node_modules/opencode-ai/bin/opencode`,
/// a script that starts the package's own binary) the `node_modules` directory that holds it.
fn program_dirs(bin: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = bin.parent().map(Path::to_path_buf).into_iter().collect();
    if let Ok(real) = std::fs::canonicalize(bin) {
        let modules = real.ancestors().find(|a| a.file_name().is_some_and(|n| n == "node_modules"));
        match modules {
            Some(m) => out.push(m.to_path_buf()),
            None => out.extend(real.parent().map(Path::to_path_buf)),
        }
    }
    out
}
