//! The part of `doctor` that looks at the machine and fills in [`Facts`]. It changes nothing:
//! it reads files and sysctls, runs `--version`s, binds and closes loopback ports, asks the
//! Docker socket a few questions (a ping, the squid backend's version and image), and runs the
//! netlock probe (one datagram on a socket bound to `lo`, which cannot leave the machine even when
//! the lock is missing).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::unistd::{Group, User, getuid};
use ocsb_policy::egress;
use ocsb_policy::settings::{
    DockerMode, EgressBackend, Layer, LoadInput, NetlockAcquire, NetworkMode, Settings,
};

use super::facts::{
    DockerDaemonFacts, EgressFacts, Facts, HelperFacts, KernelFacts, NetlockFacts, OpencodeFacts, PortFacts,
    ProbeFacts, ProjectFacts, ShimFacts,
};
use crate::error::{Error, Result};
use crate::install::Installation;
use crate::netlock::{self, probe::Outcome};
use crate::project::{self, PROJECT_CONF_DIR};

/// The netlock helper's status file (netlock-helper/src/status.rs).
pub const HELPER_STATUS_FILE: &str = "/run/ocsb-netlock/status.json";
/// The squid backend's image (egress/src/squid/image.rs).
const EGRESS_IMAGE: &str = "opencode-sandbox-egress:latest";
/// `opencode --version` starts node; a cold start measured 2.3 s.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);
/// Name used for settings outside a project, where there is no project directory to name them.
const HOST_ONLY_NAME: &str = "host";

pub fn observe(explicit: Option<&Path>) -> Result<Facts> {
    let (project, settings, untrusted) = project_and_settings(explicit)?;
    let status = ocsb_sandbox::status();
    let sysctl = |k: &str| status.sysctls.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    let kernel = KernelFacts {
        userns: status.namespaces.clone(),
        as_root: nix::unistd::geteuid().is_root(),
        userns_clone: sysctl("kernel/unprivileged_userns_clone"),
        max_user_namespaces: sysctl("user/max_user_namespaces"),
        apparmor_restrict: sysctl("kernel/apparmor_restrict_unprivileged_userns"),
        landlock_abi: status.landlock_abi,
        seccomp: status.seccomp,
    };
    let web = settings.web_port();
    let ports = vec![
        port("port-web", "OCSB_WEB_PORT", web),
        port("port-opencode", "OCSB_WEB_PORT + 1", settings.opencode_port()),
        port("port-egress", "OCSB_EGRESS_PORT", settings.egress_port()),
    ];
    Ok(Facts {
        project,
        sandbox_enabled: settings.sandbox_enabled(),
        kernel,
        netlock: netlock(&settings),
        egress: match settings.egress_backend() {
            EgressBackend::Builtin => EgressFacts::Builtin,
            EgressBackend::Squid => squid(),
        },
        loopback_ports: settings.loopback_ports(),
        network: settings.network(),
        isolated_net: match settings.network() {
            NetworkMode::Isolated => isolated_net(),
            NetworkMode::Netlock => Ok(()),
        },
        docker: settings.docker(),
        docker_daemon: docker_daemon(&settings),
        docker_firewall: docker_firewall(&settings),
        opencode: opencode(&settings, untrusted),
        ports,
        notifications: settings.notifications(),
        dbus_proxy: which("xdg-dbus-proxy"),
        git: version_of(Path::new("git")),
        // The curl the self-tests use: the system's, not the first in PATH.
        curl: ocsb_egress::verify::system_curl(),
        ncat: which("ncat"),
        rg: which("rg"),
        sg: which("sg"),
        home: crate::session::home_entries(&settings)
            .into_iter()
            .map(|e| (e.rel.display().to_string(), e.access.as_str(), e.source.as_str()))
            .collect(),
    })
}

/// Inside a project (a `.opencode-sandbox/` here or above, or `-C DIR` holding one): all five
/// settings layers and the egress rules. Outside one: the user layer, the environment and the
/// defaults only, and no project checks — a missing project is not an error on the host.
/// The third value: the project's settings file widens the sandbox and the user has not
/// accepted that (doctor then runs no program the file names).
fn project_and_settings(explicit: Option<&Path>) -> Result<(ProjectFacts, Settings, bool)> {
    let dir = project::locate(explicit)?;
    if dir.join(PROJECT_CONF_DIR).is_dir() {
        return Ok(match project::Project::load(Some(&dir)) {
            Ok(p) => {
                let rules = egress::load_layers(&p.user_config_dir, &p.dir)
                    .and_then(|layers| egress::Policy::compile(&layers).map(|_| layers.len()))
                    .map_err(|e| e.to_string());
                let untrusted = p.require_trusted().is_err();
                (ProjectFacts::Inside { dir: p.dir, rules }, p.settings, untrusted)
            }
            Err(e) => (ProjectFacts::BadSettings { error: e.to_string() }, defaults()?, true),
        });
    }
    let mut input = LoadInput::from_process(dir.clone())?;
    if !input.env.iter().any(|(k, _)| k == "OCSB_NAME") {
        // The default name comes from the project directory; here there is none, and a
        // directory like `/` would give an invalid name — a false error on the host.
        input.env.push(("OCSB_NAME".into(), HOST_ONLY_NAME.into()));
    }
    Ok(match Settings::load(&input) {
        Ok(s) => (ProjectFacts::Outside { dir }, s, false),
        Err(e) => (ProjectFacts::BadSettings { error: e.to_string() }, defaults()?, false),
    })
}

/// The package defaults alone, for the checks that follow a broken settings file.
fn defaults() -> Result<Settings> {
    let nowhere = PathBuf::from("/nonexistent/ocsb-doctor");
    let input = LoadInput {
        home: project::home_dir()?,
        project_dir: nowhere.clone(),
        user_config_dir: nowhere,
        env: vec![("OCSB_NAME".into(), HOST_ONLY_NAME.into())],
    };
    Ok(Settings::load(&input)?)
}

fn netlock(settings: &Settings) -> NetlockFacts {
    let group = settings.netlock_group().to_string();
    let grp = Group::from_name(&group).ok().flatten();
    let uid = getuid();
    let me = User::from_uid(uid).ok().flatten();
    let user = me.as_ref().map(|u| u.name.clone()).unwrap_or_else(|| uid.to_string());
    let member = uid.is_root()
        || grp.as_ref().is_some_and(|g| me.as_ref().is_some_and(|u| u.gid == g.gid) || g.mem.contains(&user));
    let acquire = settings.netlock_acquire();
    let shim = shim();
    let gid = grp.map(|g| g.gid.as_raw());
    let probe = probe(acquire, &group, gid, member, &shim.path);
    let group_files = gid.map(|g| group_files(g, &shim.path));
    NetlockFacts { gid, group, user, member, acquire, shim, helper: helper(), probe, group_files }
}

/// The system trees searched for files of the netlock group: where a package, a script or an
/// admin could leave one that every sandbox (which runs as the group) could then write or run.
pub const GROUP_SCAN: &[&str] = &["/etc", "/usr", "/opt", "/srv", "/var/lib", "/boot"];
const GROUP_SCAN_LIMIT: usize = 2_000_000;

/// Entries under [`GROUP_SCAN`] with group `gid`, besides the shim: each tree on its own
/// filesystem only, unreadable directories skipped, at most 10 reported. `Err` when the walk
/// stopped at its limit before finding any (a clean result would claim too much).
fn group_files(gid: u32, shim: &Path) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut seen = 0;
    for root in GROUP_SCAN {
        let Ok(top) = std::fs::symlink_metadata(root) else { continue };
        let mut stack = vec![PathBuf::from(root)];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                seen += 1;
                let Ok(m) = e.metadata() else { continue };
                let p = e.path();
                if m.gid() == gid && p != shim {
                    found.push(p.clone());
                    if found.len() >= 10 {
                        return Ok(found);
                    }
                }
                if m.is_dir() && m.dev() == top.dev() {
                    stack.push(p);
                }
            }
            if seen > GROUP_SCAN_LIMIT && found.is_empty() {
                return Err(format!("stopped after {GROUP_SCAN_LIMIT} entries in {}", dir.display()));
            } else if seen > GROUP_SCAN_LIMIT {
                return Ok(found);
            }
        }
    }
    Ok(found)
}

fn shim() -> ShimFacts {
    // The shim execs `<prefix>/bin/ocsb`, so it is looked for beside this `ocsb`.
    let install = Installation::current()
        .unwrap_or_else(|_| Installation { exe: PathBuf::from("/usr/local/bin/ocsb") });
    let path = install.shim();
    let meta = std::fs::metadata(&path).ok().map(|m| (m.uid(), m.gid(), m.permissions().mode() & 0o7777));
    let group_name = meta.and_then(|(_, gid, _)| Group::from_gid(gid.into()).ok().flatten()).map(|g| g.name);
    let unit_installed = ["/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"]
        .iter()
        .any(|d| Path::new(d).join("ocsb-netlock.service").exists());
    ShimFacts {
        helper_installed: install.helper().exists(),
        path,
        meta,
        group_name,
        unit_installed,
        prefix: install.prefix().to_path_buf(),
    }
}

fn helper() -> HelperFacts {
    let text = match std::fs::read_to_string(HELPER_STATUS_FILE) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HelperFacts::NoStatusFile,
        Err(e) => return HelperFacts::Unreadable(e.to_string()),
    };
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return HelperFacts::Unreadable(format!("not JSON: {e}")),
    };
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).and_then(|n| u32::try_from(n).ok());
    let pid = num("pid");
    // A status file outlives a killed daemon: only a live process with the helper's name counts.
    // (comm is cut to 15 bytes: "ocsb-netlock-he".)
    let alive = pid.is_some_and(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .is_ok_and(|c| "ocsb-netlock-helper".starts_with(c.trim()))
    });
    HelperFacts::Status {
        state: v.get("state").and_then(serde_json::Value::as_str).unwrap_or("unknown").to_string(),
        pid,
        alive,
        gid: num("gid"),
        error: v.get("error").and_then(serde_json::Value::as_str).map(str::to_string),
    }
}

/// The probe as the locked group, the way the sandbox gets the group (shim or sg):
/// `crate::netlock::probe`, one UDP datagram from a socket bound to `lo` (it cannot leave the
/// machine even when the lock is missing). Not run when the group cannot be obtained (no group,
/// no shim, or sg without membership): those have their own lines.
fn probe(acquire: NetlockAcquire, group: &str, gid: Option<u32>, member: bool, shim: &Path) -> ProbeFacts {
    // With sg and no membership, sg would ask for a group password: not run either.
    let obtainable = match acquire {
        NetlockAcquire::Exec => shim.exists(),
        NetlockAcquire::Sg => member,
    };
    if gid.is_none() || !obtainable {
        return ProbeFacts::NotRun;
    }
    match netlock::probe::run(acquire, group) {
        Ok(r) => match r.outcome {
            Outcome::Locked => ProbeFacts::Locked { gid: r.gid },
            Outcome::Open => ProbeFacts::Open { gid: r.gid },
            Outcome::Error(e) => ProbeFacts::Error {
                what: format!("the netlock probe could not decide: {e}"),
                fix: "ip link set lo up; then ocsb netlock verify".into(),
            },
        },
        Err(Error::Failed { what, fix }) => ProbeFacts::Error { what, fix },
        Err(e) => ProbeFacts::Error { what: e.to_string(), fix: "ocsb netlock verify".into() },
    }
}

fn squid() -> EgressFacts {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let socket = match host.as_deref() {
        None => Some(PathBuf::from("/var/run/docker.sock")),
        Some(h) => h.strip_prefix("unix://").map(PathBuf::from),
    };
    let endpoint = host.unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let Some(socket) = socket else { return EgressFacts::SquidUnchecked { endpoint } };
    let docker = docker_get(&socket, "/version").and_then(|(code, body)| {
        if code != 200 {
            return Err(format!("GET /version answered {code}"));
        }
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("bad /version reply: {e}"))?;
        Ok(v.get("Version").and_then(serde_json::Value::as_str).unwrap_or("(unknown version)").to_string())
    });
    let image = docker
        .as_ref()
        .ok()
        .and_then(|_| docker_get(&socket, &format!("/images/{EGRESS_IMAGE}/json")).ok())
        .map(|(code, _)| code == 200);
    EgressFacts::Squid { endpoint, docker, image }
}

/// One `GET` on the Docker Engine API over its unix socket (HTTP/1.0: the engine closes the
/// connection after the reply, so reading to the end is the whole answer).
fn docker_get(socket: &Path, path: &str) -> std::result::Result<(u16, String), String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    let t = Some(Duration::from_secs(5));
    s.set_read_timeout(t).and_then(|()| s.set_write_timeout(t)).map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let reply = String::from_utf8_lossy(&bytes);
    let code = reply.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no HTTP reply")?;
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

/// With `OCSB_DOCKER=1`: a ping, as the user, of the daemon the gateway forwards to (the one it
/// finds the same way).
fn docker_daemon(settings: &Settings) -> DockerDaemonFacts {
    if settings.docker() != DockerMode::Gateway {
        return DockerDaemonFacts::NotAsked;
    }
    let Some(socket) = ocsb_docker_gw::upstream() else {
        let docker_host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        return DockerDaemonFacts::NoSocket { docker_host };
    };
    match ocsb_docker_gw::reach::ping(&socket) {
        Ok(()) => DockerDaemonFacts::Answered { socket },
        Err(why) => DockerDaemonFacts::Unreachable(why),
    }
}

/// With `OCSB_DOCKER=1`: the daemon's firewall setting and forwarding, read as the gateway
/// reads them before it starts a container; `None` when there is no daemon to ask.
fn docker_firewall(settings: &Settings) -> Option<ocsb_policy::docker::firewall::DaemonNet> {
    if settings.docker() != ocsb_policy::settings::DockerMode::Gateway {
        return None;
    }
    let socket = ocsb_docker_gw::upstream()?;
    ocsb_docker_gw::firewall::observe(&ocsb_docker_gw::Daemon { socket }).ok()
}

fn opencode(settings: &Settings, untrusted: bool) -> OpencodeFacts {
    let bin = settings.opencode_bin();
    let setting = bin.display().to_string();
    let found = if setting.contains('/') { is_executable(&bin).then_some(bin) } else { which(&setting) };
    // A program named by a committed settings file the user has not accepted is never run: a
    // cloned repository (or the agent, through a worktree) could name any file.
    let from_project = settings.get("OCSB_OPENCODE_BIN").is_some_and(|e| e.origin.layer == Layer::Project);
    let version = match &found {
        Some(_) if untrusted && from_project => {
            Err("not run: OCSB_OPENCODE_BIN comes from .opencode-sandbox/sandbox.conf, which you have not \
             accepted (`ocsb config` lists it; `ocsb config --trust` accepts it)"
                .into())
        }
        Some(p) => version_of(p),
        None => Err("not found".into()),
    };
    OpencodeFacts { setting, found, version }
}

fn port(id: &'static str, setting: &'static str, port: u16) -> PortFacts {
    // Loopback only: the filter and the web UI listen on 127.0.0.1.
    let free = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(drop).map_err(|e| e.to_string());
    PortFacts { id, setting, port, free }
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A bare command name looked up in PATH, as the shell would.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

/// `<bin> --version`, first non-empty line.
fn version_of(bin: &Path) -> std::result::Result<String, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("--version").stdin(Stdio::null());
    let out = run_with_timeout(&mut cmd, VERSION_TIMEOUT).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "not found".to_string(),
        _ => e.to_string(),
    })?;
    if !out.success {
        return Err(format!("`{} --version` failed: {}", bin.display(), out.stderr.trim()));
    }
    out.stdout
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("`{} --version` printed nothing", bin.display()))
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs a short command with a deadline (a hung `--version` must not hang `doctor`).
fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> std::io::Result<Output> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let start = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            let o = child.wait_with_output()?;
            return Ok(Output {
                success: o.status.success(),
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            });
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The hidden subcommand that builds an isolated sandbox's network and exits ([`isolated_net`]).
pub const ISOLATED_PROBE: &str = "__isolated-probe";

/// An isolated sandbox's network, built in a namespace of a child's own by the code stage 2
/// runs (`ocsb __isolated-probe`): the kernel's nftables and NAT support is what it needs.
fn isolated_net() -> Result<(), (String, String)> {
    let exe = std::env::current_exe()
        .map_err(|e| (format!("cannot find ocsb itself: {e}"), "report this".into()))?;
    let mut cmd = Command::new(exe);
    cmd.arg(ISOLATED_PROBE);
    match run_with_timeout(&mut cmd, VERSION_TIMEOUT) {
        Ok(o) if o.success => Ok(()),
        // What failed, then its fix (the sandbox's error, as stage 2 would report it).
        Ok(o) => {
            let (what, fix) =
                o.stderr.trim().split_once("\n  fix: ").unwrap_or((o.stderr.trim(), "report this"));
            Err((what.trim_start_matches("sandbox: ").to_string(), fix.to_string()))
        }
        Err(e) => Err((e.to_string(), "report this".into())),
    }
}
