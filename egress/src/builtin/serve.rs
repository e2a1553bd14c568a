//! The detached `serve` process of the builtin backend: binds the listeners, keeps the policy,
//! answers the control socket, writes the access log.
//!
//! The launcher runs it as `ocsb egress serve <args>` (see [`ServeArgs::to_args`]) and hands the
//! raw arguments to [`main`]; the crate's own `ocsb-egress` binary does the same for tests.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ocsb_policy::egress::{Policy, load_layers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;

use super::control::{self, Ack, ReloadAnswer, Request, StatusAnswer};
use super::lend;
use super::logger::Logger;
use super::proxy::{self, Limits, PolicyCell};
use crate::error::{Error, Result};
use crate::listen::{host_addresses, host_addresses_checked};
use crate::paths::EgressPaths;

/// What a `serve` process needs: where the rules are, where its state goes, what to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    pub state_dir: PathBuf,
    pub user_config_dir: PathBuf,
    pub project_dir: PathBuf,
    pub listen: Vec<SocketAddr>,
    /// Resource limits other than the defaults (tests use small ones to reach them quickly).
    pub limits: LimitOverrides,
}

/// `--max-connections N`, `--max-per-client N`, `--tunnel-idle SECS`, `--quiet-tunnel SECS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    pub max_connections: Option<usize>,
    pub max_per_client: Option<usize>,
    pub tunnel_idle_secs: Option<u64>,
    pub quiet_tunnel_secs: Option<u64>,
}

impl LimitOverrides {
    fn apply(&self, mut l: Limits) -> Limits {
        if let Some(n) = self.max_connections {
            l.max_connections = n;
            l.max_per_client = l.max_per_client.min(n);
        }
        if let Some(n) = self.max_per_client {
            l.max_per_client = n;
        }
        if let Some(s) = self.tunnel_idle_secs {
            l.tunnel_idle = Duration::from_secs(s);
        }
        if let Some(s) = self.quiet_tunnel_secs {
            l.quiet_tunnel = Duration::from_secs(s);
        }
        l
    }
}

impl ServeArgs {
    pub fn to_args(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            "--state-dir".into(),
            self.state_dir.clone().into(),
            "--user-config-dir".into(),
            self.user_config_dir.clone().into(),
            "--project-dir".into(),
            self.project_dir.clone().into(),
        ];
        for l in &self.listen {
            v.push("--listen".into());
            v.push(l.to_string().into());
        }
        let l = &self.limits;
        for (flag, value) in [
            ("--max-connections", l.max_connections.map(|n| n as u64)),
            ("--max-per-client", l.max_per_client.map(|n| n as u64)),
            ("--tunnel-idle", l.tunnel_idle_secs),
            ("--quiet-tunnel", l.quiet_tunnel_secs),
        ] {
            if let Some(n) = value {
                v.push(flag.into());
                v.push(n.to_string().into());
            }
        }
        v
    }

    pub fn parse(args: &[OsString]) -> std::result::Result<Self, String> {
        let (mut state, mut user, mut project, mut listen) = (None, None, None, Vec::new());
        let mut limits = LimitOverrides::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val =
                || it.next().cloned().ok_or_else(|| format!("{} needs a value", a.to_string_lossy()));
            match a.to_str() {
                Some("--state-dir") => state = Some(PathBuf::from(val()?)),
                Some("--user-config-dir") => user = Some(PathBuf::from(val()?)),
                Some("--project-dir") => project = Some(PathBuf::from(val()?)),
                Some("--listen") => {
                    let v = val()?;
                    let s = v.to_string_lossy();
                    listen.push(s.parse().map_err(|e| format!("--listen {s}: {e}"))?);
                }
                Some(
                    flag @ ("--max-connections" | "--max-per-client" | "--tunnel-idle" | "--quiet-tunnel"),
                ) => {
                    let v = val()?;
                    let n: u64 = v
                        .to_str()
                        .and_then(|s| s.parse().ok())
                        .filter(|n| *n > 0 || !flag.starts_with("--max-"))
                        .ok_or_else(|| format!("{flag} {}: not a number", v.to_string_lossy()))?;
                    match flag {
                        "--max-connections" => limits.max_connections = Some(n as usize),
                        "--max-per-client" => limits.max_per_client = Some(n as usize),
                        "--tunnel-idle" => limits.tunnel_idle_secs = Some(n),
                        _ => limits.quiet_tunnel_secs = Some(n),
                    }
                }
                _ => return Err(format!("unknown argument {:?}", a)),
            }
        }
        if listen.is_empty() {
            return Err("at least one --listen ADDR:PORT is needed".into());
        }
        Ok(Self {
            state_dir: state.ok_or("--state-dir is missing")?,
            user_config_dir: user.ok_or("--user-config-dir is missing")?,
            project_dir: project.ok_or("--project-dir is missing")?,
            listen,
            limits,
        })
    }

    /// The rules, with the host's addresses as they are now, or (when they cannot be read)
    /// as `previous` had them; with neither, the filter does not start.
    fn load_policy(&self, previous: Option<&Policy>) -> Result<Policy> {
        let layers = load_layers(&self.user_config_dir, &self.project_dir)?;
        let policy = Policy::compile(&layers)?;
        match (host_addresses_checked(), previous) {
            (Ok(addrs), _) => Ok(policy.with_host_addresses(addrs)),
            (Err(_), Some(p)) => Ok(policy.with_host_addresses(p.private_set().host_addresses().to_vec())),
            (Err(e), None) => Err(e),
        }
    }
}

/// Entry point of `ocsb egress serve ARGS` (blocking; returns the process exit code).
/// Exit codes: 0 stopped normally, 1 runtime failure, 2 bad arguments, 3 bad rules.
pub fn main(args: &[OsString]) -> i32 {
    let args = match ServeArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ocsb egress serve: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ocsb egress serve: cannot start the runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ocsb egress serve: {e}");
            if e.is_input() { 3 } else { 1 }
        }
    }
}

/// Raise the soft fd limit to the hard one: each client connection and each tunnel costs fds,
/// and the default soft limit (1024) is below the connection cap plus tunnels.
pub(crate) fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

async fn run(args: ServeArgs) -> Result<()> {
    let paths = EgressPaths::new(&args.state_dir);
    paths.create_private().map_err(|e| Error::io("cannot create", &paths.dir, e))?;
    let policy = args.load_policy(None)?;
    raise_nofile();

    let mut listeners = Vec::new();
    for a in &args.listen {
        let l = bind_listener(*a).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "port {} is busy: another project or an old instance uses it; set another OCSB_EGRESS_PORT, or run `ocsb egress down` in the other project",
                    a.port()
                )
            } else {
                "check that the address exists on this machine".to_string()
            };
            Error::net(format!("cannot listen on {a} ({why})"), e)
        })?;
        listeners.push(l);
    }

    let sock = paths.control_socket();
    if sock.exists() {
        if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
            return Err(Error::state(
                format!("another egress filter already answers on {}", sock.display()),
                "run `ocsb egress down` first",
            ));
        }
        let _ = std::fs::remove_file(&sock);
    }
    let control =
        UnixListener::bind(&sock).map_err(|e| Error::io("cannot create the control socket", &sock, e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600));
    }

    // Keep one previous log: the access log is append-only and would otherwise grow forever.
    if std::fs::metadata(paths.access_log()).is_ok_and(|m| m.len() > 64 << 20) {
        let _ = std::fs::rename(paths.access_log(), paths.access_log().with_extension("log.1"));
    }
    let log = paths
        .open_access_log()
        .map_err(|e| Error::io("cannot open the access log", paths.access_log(), e))?;
    let logger = Logger::new(Box::new(log));
    let hash = policy.hash();
    let cell = PolicyCell::new(policy);
    let limits = args.limits.apply(Limits::default());
    let resolver = super::dial::Resolver::from_system(limits.dns_timeout)
        .map_err(|e| Error::state(e, "check /etc/resolv.conf: the filter resolves names for the sandbox"))?;
    if let Some(note) = resolver.order_note() {
        logger.note(&format!("/etc/nsswitch.conf: {note}"));
    }
    let running = proxy::start(listeners, cell.clone(), logger.clone(), limits, resolver);
    let listen = running.addrs.clone();
    let shown: Vec<String> = listen.iter().map(|a| a.to_string()).collect();
    logger.note(&format!(
        "started pid {} listening on {} policy {hash}",
        std::process::id(),
        shown.join(" ")
    ));
    crate::paths::write_atomic(&paths.pid_file(), format!("{}\n", std::process::id()).as_bytes())
        .map_err(|e| Error::io("cannot write the pid file", paths.pid_file(), e))?;

    let state = Arc::new(ServeState {
        args: args.clone(),
        cell,
        logger: logger.clone(),
        hash: std::sync::Mutex::new(hash),
        listen,
        started: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        stop: Notify::new(),
    });

    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| Error::net("cannot install the SIGHUP handler", e))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::net("cannot install the SIGTERM handler", e))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Error::net("cannot install the SIGINT handler", e))?;
    let mut addresses = tokio::time::interval(HOST_ADDRESS_REFRESH);
    let lending = Lending { conns: running.connections(), lender: running.lender() };
    loop {
        tokio::select! {
            c = control.accept() => {
                if let Ok((stream, _)) = c {
                    tokio::spawn(control_conn(stream, state.clone(), lending.clone()));
                }
            }
            _ = hup.recv() => { let _ = state.reload(); }
            _ = addresses.tick() => state.refresh_host_addresses(),
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = state.stop.notified() => break,
        }
    }
    logger.note("stopping");
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(paths.pid_file());
    tokio::time::timeout(Duration::from_secs(2), running.stop()).await.ok();
    Ok(())
}

/// Bind with a deep accept queue: std's default backlog (128) overflows when a client opens
/// connections in a burst, and the kernel then drops SYNs for a full second.
fn bind_listener(a: SocketAddr) -> std::io::Result<TcpListener> {
    let s = if a.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    s.set_reuseaddr(true)?;
    s.bind(a)?;
    s.listen(4096)
}

struct ServeState {
    args: ServeArgs,
    cell: PolicyCell,
    logger: Logger,
    hash: std::sync::Mutex<String>,
    listen: Vec<SocketAddr>,
    started: u64,
    stop: Notify,
}

/// How often the host's interface addresses are re-read: a new address (DHCP, a VPN, a Docker
/// network) is judged private within this time.
const HOST_ADDRESS_REFRESH: Duration = Duration::from_secs(2);

impl ServeState {
    fn refresh_host_addresses(&self) {
        // Unreadable now (no descriptor left): keep the addresses known so far.
        let Ok(addrs) = host_addresses() else { return };
        let now = ocsb_policy::egress::PrivateSet::with_host_addresses(addrs);
        if self.cell.get().private_set() != &now {
            let addrs = now.host_addresses().to_vec();
            self.cell.update(|p| p.clone().with_host_addresses(addrs));
            self.logger.note(&format!("host addresses now {:?}", now.host_addresses()));
        }
    }

    /// Re-read and compile the layers; swap only if they compile. *Why*: a typo in a rule file
    /// must not open (or close) the network; the old policy stays in force and the caller is
    /// told what is wrong, with file and line.
    fn reload(&self) -> ReloadAnswer {
        match self.args.load_policy(Some(&self.cell.get())) {
            Ok(p) => {
                let h = p.hash();
                self.cell.set(p);
                if let Ok(mut g) = self.hash.lock() {
                    *g = h.clone();
                }
                self.logger.note(&format!("reloaded policy {h}"));
                ReloadAnswer::taken(h)
            }
            Err(e) => {
                self.logger
                    .note(&format!("reload refused, old policy kept: {}", e.to_string().replace('\n', " ")));
                ReloadAnswer::refused(e.to_string(), e.is_input())
            }
        }
    }

    fn status(&self, open: usize) -> StatusAnswer {
        StatusAnswer {
            ok: true,
            backend: "builtin".into(),
            pid: std::process::id(),
            listen: self.listen.clone(),
            policy_hash: self.hash.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            started: self.started,
            open_connections: open,
            build: control::BUILD.into(),
        }
    }
}

async fn control_conn(stream: tokio::net::UnixStream, state: Arc<ServeState>, running: Lending) {
    let open = running.conns.open();
    let Ok(Ok((line, fd))) = tokio::time::timeout(Duration::from_secs(5), lend::read_request(&stream)).await
    else {
        return;
    };
    // Read first, so that the refused client gets its answer rather than a broken pipe; a
    // descriptor it sent is closed here, unused.
    let request = if same_pid_namespace(&stream) { Request::parse(&line) } else { Err(OUTSIDE_ONLY.into()) };
    let stop = request == Ok(Request::Stop);
    let mut lent = None;
    let answer = match request {
        Ok(Request::Status) => serde_json::to_string(&state.status(open)),
        Ok(Request::Reload) => serde_json::to_string(&state.reload()),
        Ok(Request::Stop) => serde_json::to_string(&Ack { ok: true, error: None }),
        Ok(Request::Serve) => {
            let taken =
                fd.ok_or_else(|| "no descriptor came with `serve`".to_string()).and_then(lend::listener);
            let ack = match taken {
                Ok(l) => {
                    lent = Some(l);
                    Ack { ok: true, error: None }
                }
                Err(e) => Ack { ok: false, error: Some(e) },
            };
            serde_json::to_string(&ack)
        }
        Err(error) => serde_json::to_string(&Ack { ok: false, error: Some(error) }),
    };
    // The answers are plain structs of strings and numbers: serialising them cannot fail, and
    // if it ever did the client's read ends with no line, which it reports.
    let (r, mut w) = stream.into_split();
    if let Ok(answer) = answer {
        let _ = w.write_all(format!("{answer}\n").as_bytes()).await;
    }
    let _ = w.flush().await;
    if stop {
        state.stop.notify_one();
    }
    if let Some(listener) = lent {
        // Served until the lender's end closes (anything it sends is ignored). The write half
        // lives as long: dropping it would shut the connection down for writing, and the
        // lender would take that for the end of the lease.
        let until = async move {
            let (mut r, _w, mut sink) = (r, w, [0u8; 64]);
            while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
        };
        running.lender.serve(listener, until);
    }
}

const OUTSIDE_ONLY: &str =
    "the filter's control socket answers only outside the sandbox (a process in another pid namespace asked)";

/// Whether the peer runs in this process's pid namespace. *Why*: the socket is the user's own,
/// but a sandbox that can reach it (a state directory outside the hidden tree) runs in a pid
/// namespace of its own, and must not stop the filter, reload it, or lend it a listener of its
/// own (which would give it another project's rules). *Why the pid namespace*: the depth of
/// `NSpid` in `/proc/PID/status` can be read for every process of the user, while
/// `/proc/PID/ns/` cannot for one that changed its gid (the netlock shim's).
fn same_pid_namespace(stream: &tokio::net::UnixStream) -> bool {
    let Some(pid) = stream.peer_cred().ok().and_then(|c| c.pid()) else { return false };
    let depth = |p: &str| {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("NSpid:")).map(|v| v.split_whitespace().count())
    };
    depth(&pid.to_string()).is_some_and(|theirs| Some(theirs) == depth("self"))
}

/// What a control connection needs of the running proxy.
#[derive(Clone)]
struct Lending {
    conns: Arc<super::conns::Table>,
    lender: super::proxy::Lender,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_args_round_trip_and_errors() {
        let a = ServeArgs {
            state_dir: "/s".into(),
            user_config_dir: "/u".into(),
            project_dir: "/p".into(),
            listen: vec!["127.0.0.1:3128".parse().unwrap(), "172.17.0.1:3128".parse().unwrap()],
            limits: LimitOverrides {
                max_connections: Some(4),
                max_per_client: Some(2),
                tunnel_idle_secs: Some(0),
                quiet_tunnel_secs: None,
            },
        };
        assert_eq!(ServeArgs::parse(&a.to_args()).unwrap(), a);
        let e = ServeArgs::parse(&["--state-dir".into(), "/s".into()]).unwrap_err();
        assert!(e.contains("--listen"), "{e}");
        let e = ServeArgs::parse(&["--listen".into(), "nope".into()]).unwrap_err();
        assert!(e.contains("nope"), "{e}");
        let e = ServeArgs::parse(&["--max-connections".into(), "0".into()]).unwrap_err();
        assert!(e.contains("--max-connections 0"), "{e}");
    }
}
