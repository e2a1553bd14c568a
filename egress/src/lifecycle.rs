//! One lifecycle for both backends: `up`, `down`, `status`, `logs`, `render` (and `verify` in
//! [`crate::verify`]). Synchronous API for the launcher; Docker calls run on a private runtime.

use std::ffi::OsString;
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ocsb_policy::egress::{Policy, load_layers};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::builtin::control;
use crate::builtin::serve::ServeArgs;
use crate::error::{Error, Result};
use crate::listen::{self, GatewaySetting, ListenPlan};
use crate::logline::{LogLine, pretty};
use crate::paths::{EgressPaths, write_atomic};
use crate::squid::{self, ImageSource, Progress};

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
    /// `[current_exe, "egress", "serve"]`; [`ServeArgs`] are appended.
    pub serve_command: Vec<OsString>,
    pub image_source: ImageSource,
    pub squid_overrides: SquidOverrides,
}

impl Instance {
    pub fn paths(&self) -> EgressPaths {
        EgressPaths::new(&self.state_dir)
    }
    pub fn listen_plan(&self) -> ListenPlan {
        listen::plan(self.port, self.docker_gw)
    }
    pub fn load_policy(&self) -> Result<Policy> {
        let layers = load_layers(&self.user_config_dir, &self.project_dir)?;
        Ok(Policy::compile(&layers)?)
    }
    fn serve_args(&self, plan: &ListenPlan) -> ServeArgs {
        ServeArgs {
            state_dir: self.state_dir.clone(),
            user_config_dir: self.user_config_dir.clone(),
            project_dir: self.project_dir.clone(),
            listen: plan.addrs.clone(),
        }
    }
    fn project_hash(&self) -> String {
        hex(&Sha256::digest(self.project_dir.to_string_lossy().as_bytes())[..8])
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn sha256(text: &str) -> String {
    format!("sha256:{}", hex(&Sha256::digest(text.as_bytes())))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::net("cannot start the async runtime", e))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpAction {
    Started,
    Reloaded,
}

#[derive(Debug, Clone, Serialize)]
pub struct UpReport {
    pub action: UpAction,
    pub backend: Backend,
    pub listen: Vec<String>,
    pub listen_note: String,
    pub config_hash: String,
}

/// `egress up`: start the filter, or reload it without a restart. Invalid rules fail before
/// anything is touched; a running filter keeps its old rules.
pub fn up(inst: &Instance, progress: Progress) -> Result<UpReport> {
    let policy = inst.load_policy()?;
    let plan = inst.listen_plan();
    inst.paths().create_private().map_err(|e| Error::io("cannot create", inst.paths().dir, e))?;
    match inst.backend {
        Backend::Builtin => builtin_up(inst, &policy, &plan),
        Backend::Squid => runtime()?.block_on(squid_up(inst, &policy, &plan, progress)),
    }
}

fn builtin_up(inst: &Instance, policy: &Policy, plan: &ListenPlan) -> Result<UpReport> {
    let paths = inst.paths();
    let report = |action, listen: Vec<String>| UpReport {
        action,
        backend: Backend::Builtin,
        listen,
        listen_note: plan.note(),
        config_hash: policy.hash(),
    };
    if let Ok(st) = control::request(&paths.control_socket(), "status", Duration::from_secs(3)) {
        let listen: Vec<String> = st["listen"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        let wanted: Vec<String> = plan.addrs.iter().map(|a| a.to_string()).collect();
        if listen != wanted {
            return Err(Error::state(
                format!(
                    "the running filter listens on {} but the settings ask for {}",
                    listen.join(" "),
                    wanted.join(" ")
                ),
                "run `ocsb egress down` and `ocsb egress up` to restart it on the new addresses",
            ));
        }
        let r = control::request(&paths.control_socket(), "reload", Duration::from_secs(10))?;
        if r["ok"] != true {
            let msg = r["error"].as_str().unwrap_or("unknown error").to_string();
            return Err(Error::state(
                format!("reload refused, the old rules stay in force: {msg}"),
                "fix the rule named above and run `ocsb egress up` again",
            ));
        }
        return Ok(report(UpAction::Reloaded, listen));
    }
    if inst.serve_command.is_empty() {
        return Err(Error::state(
            "no command to start the builtin filter was given",
            "the launcher must set Instance::serve_command",
        ));
    }
    let err_file = std::fs::File::create(paths.serve_err())
        .map_err(|e| Error::io("cannot create", paths.serve_err(), e))?;
    let mut cmd = Command::new(&inst.serve_command[0]);
    cmd.args(&inst.serve_command[1..])
        .args(inst.serve_args(plan).to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file);
    // Detach: own session, so the filter outlives the command (and the terminal) that started it.
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let mut child =
        cmd.spawn().map_err(|e| Error::io("cannot start the filter process", &inst.serve_command[0], e))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(st) = control::request(&paths.control_socket(), "status", Duration::from_secs(2)) {
            // Reap the child when it eventually exits, without blocking the caller.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            let listen = st["listen"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            return Ok(report(UpAction::Started, listen));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let err = std::fs::read_to_string(paths.serve_err()).unwrap_or_default();
            return Err(Error::state(
                format!("the builtin filter exited ({status}) while starting: {}", err.trim()),
                "fix the cause above, then `ocsb egress up` again",
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(Error::state(
                "the builtin filter did not answer within 10 s",
                format!("see {}", paths.serve_err().display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The squid.conf for this instance (container paths; listen addresses from the plan).
pub fn render_squid_conf(inst: &Instance, policy: &Policy, plan: &ListenPlan) -> Result<String> {
    crate::render::squid_conf(inst, policy, plan)
}

async fn squid_up(
    inst: &Instance,
    policy: &Policy,
    plan: &ListenPlan,
    progress: Progress,
) -> Result<UpReport> {
    let docker = squid::connect().await?;
    let name = squid::container_name(&inst.name);
    let paths = inst.paths();
    let dir = paths.squid_dir();
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        // squid in the container runs as uid 13 and must read this directory.
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
    }
    let conf = render_squid_conf(inst, policy, plan)?;
    let hash = sha256(&conf);
    let new = dir.join("squid.conf.new");
    write_atomic(&new, conf.as_bytes()).map_err(|e| Error::io("cannot write", &new, e))?;
    set_readable(&new);
    let report = |action| UpReport {
        action,
        backend: Backend::Squid,
        listen: plan.addrs.iter().map(|a| a.to_string()).collect(),
        listen_note: plan.note(),
        config_hash: hash.clone(),
    };
    match squid::container::inspect(&docker, &name).await {
        Some(st) if st.running => {
            // Validate the exact file first; only then make it live and reconfigure.
            let (code, out) = squid::container::exec(
                &docker,
                &name,
                &["-k", "parse", "-f", &format!("{}/squid.conf.new", squid::image::CONF_DIR)],
            )
            .await?;
            if let Err(e) = squid::container::parse_ok(code, &out) {
                let _ = std::fs::remove_file(&new);
                return Err(e);
            }
            std::fs::rename(&new, paths.squid_conf())
                .map_err(|e| Error::io("cannot install", paths.squid_conf(), e))?;
            let (code, out) =
                squid::container::exec(&docker, &name, &["-k", "reconfigure", "-f", squid::image::CONF])
                    .await?;
            if code != 0 {
                return Err(Error::SquidConfig {
                    output: format!("squid -k reconfigure (exit {code}): {out}"),
                });
            }
            let _ = std::fs::write(dir.join("applied.hash"), &hash);
            Ok(report(UpAction::Reloaded))
        }
        existing => {
            if existing.is_some() {
                squid::container::remove(&docker, &name).await?;
            }
            squid::image::ensure(&docker, inst.image_source, &progress).await?;
            progress("checking the rendered squid.conf with `squid -k parse`");
            if let Err(e) = squid::container::parse_in_throwaway(&docker, &dir, "squid.conf.new").await {
                let _ = std::fs::remove_file(&new);
                return Err(e);
            }
            std::fs::rename(&new, paths.squid_conf())
                .map_err(|e| Error::io("cannot install", paths.squid_conf(), e))?;
            let _ = std::fs::write(dir.join("applied.hash"), &hash);
            progress(&format!("starting {name}"));
            let labels = squid::image::labels(&inst.name, &inst.project_hash(), &hash);
            squid::container::create_and_start(&docker, &name, &dir, labels).await?;
            // "healthy" means squid wrote its pid file; the listening socket comes a moment later.
            // `up` promises a filter that accepts connections, so wait for that too.
            wait_listening(&plan.addrs).await?;
            Ok(report(UpAction::Started))
        }
    }
}

/// Wait (up to 10 s) until the filter accepts on its loopback listen addresses. Only loopback
/// is probed: it says squid is up, and it keeps this check from sending anything anywhere else.
async fn wait_listening(addrs: &[std::net::SocketAddr]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for a in addrs.iter().filter(|a| a.ip().is_loopback()) {
        loop {
            if tokio::net::TcpStream::connect(a).await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::docker(
                    format!("the squid container is healthy but nothing accepts on {a}"),
                    "see `ocsb egress logs`; a busy port needs another OCSB_EGRESS_PORT",
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

fn set_readable(p: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644));
}

/// `egress down`. Returns whether something was running.
pub fn down(inst: &Instance) -> Result<bool> {
    match inst.backend {
        Backend::Builtin => builtin_down(inst),
        Backend::Squid => runtime()?.block_on(async {
            let docker = squid::connect().await?;
            squid::container::remove(&docker, &squid::container_name(&inst.name)).await
        }),
    }
}

fn builtin_down(inst: &Instance) -> Result<bool> {
    let paths = inst.paths();
    let pid = std::fs::read_to_string(paths.pid_file()).ok().and_then(|s| s.trim().parse::<i32>().ok());
    if control::request(&paths.control_socket(), "stop", Duration::from_secs(3)).is_ok() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while paths.control_socket().exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(pid) = pid {
            while pid_is_our_server(pid, inst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        return Ok(true);
    }
    // No answer: a crashed or hung process. Signal it only if the pid really is our server for
    // this state directory (the pid file alone could be stale or replaced).
    if let Some(pid) = pid
        && pid_is_our_server(pid, inst)
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        let _ = std::fs::remove_file(paths.pid_file());
        let _ = std::fs::remove_file(paths.control_socket());
        return Ok(true);
    }
    let _ = std::fs::remove_file(paths.pid_file());
    Ok(false)
}

fn pid_is_our_server(pid: i32, inst: &Instance) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let state = inst.state_dir.to_string_lossy();
    args.iter().any(|a| *a == b"serve")
        && args.windows(2).any(|w| w[0] == b"--state-dir" && w[1] == state.as_bytes())
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub running: bool,
    pub backend: Backend,
    pub listen: Vec<String>,
    pub listen_note: String,
    /// `current`, `stale` (rules changed since the filter loaded them: run `egress up`), or
    /// `unknown`.
    pub config: String,
    pub running_hash: Option<String>,
    pub wanted_hash: Option<String>,
    /// Pid (builtin) or container id (squid).
    pub process: Option<String>,
    pub health: Option<String>,
    /// When the current rules do not compile: the error (the running filter keeps its old ones).
    pub rules_error: Option<String>,
}

/// `egress status`.
pub fn status(inst: &Instance) -> Result<Status> {
    let plan = inst.listen_plan();
    let policy = inst.load_policy();
    let rules_error = policy.as_ref().err().map(|e| e.to_string());
    let mut st = Status {
        running: false,
        backend: inst.backend,
        listen: plan.addrs.iter().map(|a| a.to_string()).collect(),
        listen_note: plan.note(),
        config: "unknown".into(),
        running_hash: None,
        wanted_hash: None,
        process: None,
        health: None,
        rules_error,
    };
    match inst.backend {
        Backend::Builtin => {
            st.wanted_hash = policy.as_ref().ok().map(|p| p.hash());
            if let Ok(v) = control::request(&inst.paths().control_socket(), "status", Duration::from_secs(3))
            {
                st.running = true;
                st.listen = v["listen"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect();
                st.running_hash = v["policy_hash"].as_str().map(String::from);
                st.process = v["pid"].as_u64().map(|p| p.to_string());
            }
        }
        Backend::Squid => {
            st.wanted_hash =
                policy.as_ref().ok().and_then(|p| render_squid_conf(inst, p, &plan).ok()).map(|c| sha256(&c));
            let name = squid::container_name(&inst.name);
            let found = runtime()?.block_on(async {
                let docker = squid::connect().await?;
                Ok::<_, Error>(squid::container::inspect(&docker, &name).await)
            })?;
            if let Some(c) = found {
                st.running = c.running;
                st.health = c.health;
                st.process = Some(c.id.chars().take(12).collect());
                st.running_hash = std::fs::read_to_string(inst.paths().squid_dir().join("applied.hash"))
                    .ok()
                    .or_else(|| c.labels.get("dev.opencode-sandbox.config-hash").cloned());
            }
        }
    }
    if st.running {
        st.config = match (&st.running_hash, &st.wanted_hash) {
            (Some(a), Some(b)) if a == b => "current".into(),
            (Some(_), Some(_)) => "stale".into(),
            _ => "unknown".into(),
        };
    }
    Ok(st)
}

#[derive(Debug, Clone, Default)]
pub struct LogsOptions {
    pub follow: bool,
    pub json: bool,
    /// Colour denials (a terminal).
    pub color: bool,
    /// Print only the last N lines before following (`None` = all).
    pub tail: Option<usize>,
}

fn emit(line: &str, opts: &LogsOptions, out: &mut dyn Write) -> std::io::Result<()> {
    match LogLine::parse(line) {
        Some(l) if opts.json => writeln!(out, "{}", crate::logline::to_json(&l)),
        Some(l) => writeln!(out, "{}", pretty(&l, opts.color)),
        None if opts.json => Ok(()),
        None => {
            let t = line.trim_end();
            if t.is_empty() { Ok(()) } else { writeln!(out, "  {t}") }
        }
    }
}

/// `egress logs`: every request and refusal, denials highlighted, or JSON lines.
pub fn logs(inst: &Instance, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
    let werr = |e: std::io::Error| Error::net("cannot write the log", e);
    match inst.backend {
        Backend::Builtin => {
            let path = inst.paths().access_log();
            let mut f = std::fs::File::open(&path).map_err(|e| {
                Error::io("no access log yet (has the filter run? `ocsb egress up`)", &path, e)
            })?;
            let mut text = String::new();
            f.read_to_string(&mut text).map_err(|e| Error::io("cannot read", &path, e))?;
            let lines: Vec<&str> = text.lines().collect();
            let skip = opts.tail.map(|n| lines.len().saturating_sub(n)).unwrap_or(0);
            for l in &lines[skip..] {
                emit(l, opts, out).map_err(werr)?;
            }
            out.flush().map_err(werr)?;
            if !opts.follow {
                return Ok(());
            }
            let mut pos = text.len() as u64;
            let mut partial = String::new();
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                if len < pos {
                    pos = 0; // truncated or replaced
                    f = std::fs::File::open(&path).map_err(|e| Error::io("cannot reopen", &path, e))?;
                }
                f.seek(SeekFrom::Start(pos)).map_err(|e| Error::io("cannot read", &path, e))?;
                let mut r = std::io::BufReader::new(&f);
                let mut buf = String::new();
                while r.read_line(&mut buf).map_err(|e| Error::io("cannot read", &path, e))? > 0 {
                    pos += buf.len() as u64;
                    if buf.ends_with('\n') {
                        partial.push_str(&buf);
                        emit(&partial, opts, out).map_err(werr)?;
                        partial.clear();
                    } else {
                        partial.push_str(&buf);
                    }
                    buf.clear();
                }
                out.flush().map_err(werr)?;
            }
        }
        Backend::Squid => runtime()?.block_on(async {
            use bollard::query_parameters::LogsOptionsBuilder;
            use futures_util::StreamExt;
            let docker = squid::connect().await?;
            let name = squid::container_name(&inst.name);
            let tail = opts.tail.map(|n| n.to_string()).unwrap_or_else(|| "all".into());
            let o = LogsOptionsBuilder::default()
                .follow(opts.follow)
                .stdout(true)
                .stderr(!opts.json)
                .tail(&tail)
                .build();
            let mut s = docker.logs(&name, Some(o));
            let mut pending = String::new();
            while let Some(item) = s.next().await {
                let chunk = item.map_err(|e| {
                    Error::docker(
                        format!("cannot read the logs of {name}: {e}"),
                        "is the filter up? `ocsb egress status`",
                    )
                })?;
                pending.push_str(&chunk.to_string());
                while let Some(i) = pending.find('\n') {
                    let line: String = pending.drain(..=i).collect();
                    emit(&line, opts, out).map_err(werr)?;
                }
                out.flush().map_err(werr)?;
            }
            Ok(())
        }),
    }
}

/// `egress render`: squid.conf for squid, the normalised policy for builtin.
pub fn render(inst: &Instance) -> Result<String> {
    let policy = inst.load_policy()?;
    Ok(match inst.backend {
        Backend::Squid => render_squid_conf(inst, &policy, &inst.listen_plan())?,
        Backend::Builtin => crate::render::builtin(&policy),
    })
}

/// Print progress messages on stderr (the launcher's default).
pub fn stderr_progress() -> Progress {
    Arc::new(|m: &str| eprintln!("egress: {m}"))
}
