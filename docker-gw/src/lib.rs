//! The Docker gateway (`OCSB_DOCKER=1`): a Docker API socket for the sandbox that forwards to
//! the real daemon only what `ocsb_policy::docker` allows, with containers, networks and
//! volumes labelled as the project's and kept to its shape. Refusals answer with a Docker
//! error body naming the rule, and go to the gateway's log ([`Paths::log`], hidden from the
//! sandbox).
//!
//! The socket lives in the project's egress state directory, which its sandboxes hide and no
//! other project's sandbox mounts, and is bound into the sandbox at `/run/docker.sock`.
//!
//! The launcher starts it as a step of a sandbox's start, with a [`Config`] of values it owns
//! (the settings, the state directory's layout, the filter, the TLS client); `README.md` has
//! the module map.
#![deny(unsafe_code)]

mod build;
mod caller;
mod config;
mod conn;
mod daemon;
mod egress;
mod ending;
pub mod error;
mod fetch;
pub mod firewall;
mod http;
mod ports;
mod pull;
pub mod reach;
mod watcher;

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ocsb_policy::docker::Context;
use ocsb_sandbox::plan::{Access, Op, Plan};

pub use config::{Config, Filter, Lender, Paths, Reach};
pub use daemon::{Daemon, upstream};
pub use error::{Error, Result};

/// Client connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 256;

/// What every connection needs.
pub(crate) struct Shared {
    ctx: Context,
    daemon: Daemon,
    /// An empty read-only file that covers a hidden file inside a bind.
    empty_file: PathBuf,
    /// The filter, reachable on each network containers are created on.
    egress: egress::Egress,
    /// The ports the project's containers publish, forwarded by the gateway.
    ports: ports::Ports,
    /// The containers the session set running ([`Gateway::at_exit`] stops them).
    started: ending::Record,
    /// What the gateway's own pulls need ([`pull::serve`]).
    registries: pull::Registries,
    log: Mutex<Option<std::fs::File>>,
}

impl Shared {
    fn log(&self, line: &str) {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        if let Some(f) = self.log.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let _ = writeln!(f, "{}.{:03} {line}", t.as_secs(), t.subsec_millis());
        }
    }

    fn note(&self, line: &str) {
        self.log(&format!("note {line}"));
    }
}

/// A running gateway. When it is dropped (the session ended) it stops serving, and removes
/// what the session made (`OCSB_DOCKER_CLEANUP=1`) or says that it is kept.
pub struct Gateway {
    /// The session's label value and the daemon, to list (and remove) what it made.
    session: String,
    daemon: Daemon,
    cleanup: bool,
    /// The containers the session set running, shared with the connections.
    started: ending::Record,
    /// Set when the gateway is dropped: the accept loop ends at its next connection.
    closing: Arc<AtomicBool>,
    /// Stops the accept loop and removes the socket, after `closing` is set.
    closer: ocsb_sandbox::served::Closer,
    /// What serving needs but the sandbox's plan, until [`Gateway::judge_by`] takes it.
    waiting: Arc<Mutex<Option<Waiting>>>,
}

/// A gateway listening, not yet serving: connections wait in the listen queue.
struct Waiting {
    listener: UnixListener,
    /// Everything of it but the paths, which come from the sandbox's plan.
    ctx: Context,
    daemon: Daemon,
    empty_file: PathBuf,
    egress: egress::Egress,
    started: ending::Record,
    closing: Arc<AtomicBool>,
    registries: pull::Registries,
    log: Option<std::fs::File>,
}

impl Gateway {
    /// Listens for the sandbox of `config`'s project in front of `daemon`, in `config.paths.dir`
    /// (made by the launcher, private). It serves once it has the plan the sandbox is made from
    /// ([`Gateway::judge_by`]): the plan says which host paths a container may bind, as it says
    /// which the sandbox may write.
    pub fn start(config: Config, daemon: Daemon) -> Result<Gateway> {
        let Config { project, ports, cleanup, paths: at, filter, tls, nonce, program } = config;
        let ctx = project_context(project, ports);
        let egress = egress::Egress::new(filter.reach, filter.port);
        let empty_file = at.empty.clone();
        write_empty(&empty_file)?;
        let log = open_log(&at.log).ok();
        let registries = pull::Registries {
            filter: std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, filter.port)),
            tls,
            work_dir: at.pulls.clone(),
            docker_log: at.log.clone(),
        };
        // The path the sandbox binds from: its mounts follow no link on the way, and a home
        // may be reached through one.
        let dir = std::fs::canonicalize(&at.dir).map_err(|e| Error::io("resolve", &at.dir, e))?;
        let ocsb_sandbox::served::Listening { listener, closer } = listen(&dir, &nonce)?;
        let session = ctx.session.clone();
        let journal = ending::Journal::create(&at, &session, &daemon)?;
        let (dir, log_path) = (at.dir.clone(), at.log.clone());
        let watch: ending::Watch = Box::new(move || {
            watcher::ensure(&dir, &program, || open_log(&log_path).ok()).map_err(|e| {
                format!("the watcher that stops the session's containers should this launcher be killed did not start: {e}")
            })
        });
        let started = Arc::new(ending::Started::with_journal(journal).watched_by(watch));
        let closing = Arc::new(AtomicBool::new(false));
        let waiting = Waiting {
            listener,
            ctx,
            daemon: daemon.clone(),
            empty_file,
            egress,
            started: started.clone(),
            closing: closing.clone(),
            registries,
            log,
        };
        Ok(Gateway {
            session,
            daemon,
            cleanup,
            started,
            closing,
            closer,
            waiting: Arc::new(Mutex::new(Some(waiting))),
        })
    }

    /// What starts serving with the sandbox's plan ([`ocsb_sandbox::Ahead::on_plan`]).
    pub fn judge_by(&self) -> ocsb_sandbox::launch::OnPlan {
        let waiting = self.waiting.clone();
        Box::new(move |plan| {
            let taken = waiting.lock().unwrap_or_else(|p| p.into_inner()).take();
            // One gateway serves one sandbox: a second plan is not taken for the first's.
            let Some(w) = taken else {
                return Err(ocsb_sandbox::Error::failed(
                    "the Docker gateway already serves a sandbox",
                    "report this",
                ));
            };
            serve(w, plan)
                .map_err(|e| ocsb_sandbox::Error::failed(format!("docker gateway: {e}"), "report this"))
        })
    }

    /// What stops, once the sandbox has exited, every container the session made or set
    /// running ([`ocsb_sandbox::Ahead::on_exit`]; `ending` says why).
    pub fn at_exit(&self) -> ocsb_sandbox::launch::OnExit {
        let (started, daemon, session) = (self.started.clone(), self.daemon.clone(), self.session.clone());
        Box::new(move || ending::stop_all(&started, &daemon, &session))
    }

    /// The gateway's socket on the host.
    pub fn socket(&self) -> PathBuf {
        self.closer.socket().to_path_buf()
    }
}

/// Listens on `<dir>/docker-<pid>-<random>.sock` ([`ocsb_sandbox::served::listen`]). `dir` is
/// the project's egress state directory: the only way in is the bind at `/run/docker.sock` of
/// the sandbox this gateway serves. (A directory in the temporary directory was reachable from
/// another project's sandbox with a shared `/tmp`, and would have let it act as this project.)
/// `nonce` is random text ([`Config::nonce`]).
fn listen(dir: &Path, nonce: &str) -> Result<ocsb_sandbox::served::Listening> {
    use ocsb_sandbox::Error as S;
    match ocsb_sandbox::served::listen(dir, "docker", nonce) {
        Ok(l) => Ok(l),
        Err(S::Io { action, path, source }) => Err(Error::io(action, path, source)),
        Err(other) => Err(Error::io("listen in", dir, std::io::Error::other(other.to_string()))),
    }
}

/// Serve `w`'s connections, judged by `plan`, on a thread of their own.
fn serve(w: Waiting, plan: &Plan) -> Result<()> {
    let Waiting { listener, mut ctx, daemon, empty_file, egress, started, closing, registries, log } = w;
    judge_paths(&mut ctx, plan);
    // What its containers can write: swept once they are stopped.
    started.reaches(&ctx.writable);
    let shared = Arc::new(Shared {
        ctx,
        daemon,
        empty_file,
        egress,
        ports: ports::Ports::default(),
        started,
        registries,
        log: Mutex::new(log),
    });
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("ocsb-docker".into())
        .spawn(move || {
            accept(&listener, &closing, |c| {
                if busy.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    return; // dropped: the client sees the connection close
                }
                busy.fetch_add(1, Ordering::SeqCst);
                let (shared, busy) = (shared.clone(), busy.clone());
                // A failed spawn takes the closure (and its count) with it.
                let _ = std::thread::Builder::new().name("ocsb-docker-conn".into()).spawn(move || {
                    conn::serve(c, &shared);
                    busy.fetch_sub(1, Ordering::SeqCst);
                });
            });
        })
        .map_err(|e| Error::failed(format!("cannot start the Docker gateway: {e}"), "report this"))?;
    Ok(())
}

/// Hands each connection to `serve` until `closing` is set: the gateway's drop sets it and
/// shuts the listener down, to wake the loop. The listener closes with the thread that runs this.
fn accept(listener: &UnixListener, closing: &AtomicBool, mut serve: impl FnMut(UnixStream)) {
    for c in listener.incoming() {
        if closing.load(Ordering::SeqCst) {
            break;
        }
        match c {
            Ok(c) => serve(c),
            // Out of descriptors or memory: wait a moment rather than spin.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // The accept loop, woken by the close, sees `closing` and ends (a gateway that never
        // served has no loop, and the listener closes with `waiting`).
        self.closing.store(true, Ordering::SeqCst);
        self.closer.close();
        let daemon = &self.daemon;
        let Ok((containers, networks)) = daemon.labelled(ocsb_policy::docker::SESSION_LABEL, &self.session)
        else {
            return;
        };
        if containers.is_empty() && networks.is_empty() {
            return;
        }
        let what = format!("{} container(s) and {} network(s)", containers.len(), networks.len());
        if self.cleanup {
            // Containers first: a network in use cannot go.
            containers.iter().for_each(|c| drop(daemon.remove(true, &c.id)));
            networks.iter().for_each(|n| drop(daemon.remove(false, &n.id)));
            eprintln!("ocsb: docker: removed the {what} this session made (OCSB_DOCKER_CLEANUP=1)");
        } else {
            eprintln!(
                "ocsb: docker: the {what} this session made are kept; `ocsb docker ls` lists the project's, \
                 and OCSB_DOCKER_CLEANUP=1 removes a session's when it ends"
            );
        }
    }
}

/// The containers and networks of the project `name` (labelled `dev.ocsb.project=NAME`), made
/// through the gateway, from the daemon the user's Docker client would ask (`ocsb docker ls`).
pub fn made(name: &str) -> Result<(Vec<daemon::Made>, Vec<daemon::Made>)> {
    let socket = upstream().ok_or_else(|| {
        Error::failed(
            "no Docker daemon answers on a unix socket",
            "start dockerd, or set DOCKER_HOST=unix://PATH",
        )
    })?;
    Daemon { socket }
        .labelled(ocsb_policy::docker::PROJECT_LABEL, name)
        .map_err(|e| Error::failed(format!("cannot ask the Docker daemon: {e}"), "check `docker version`"))
}

/// Stops what the Docker sessions of the project whose gateway's files are `at` left running
/// when their launchers died (`ending.rs` says why), whatever this start's Docker
/// settings are. Made before every check of the checkouts, so that no such container writes
/// the project after it.
pub fn stop_left_behind(at: &Paths) -> Result<()> {
    ending::stop_left_behind(at)
}

/// `ocsb __docker-watch PID DIR`: the watcher a launcher with a gateway starts before its
/// session's first container is set running (`watcher.rs` says why). `at` is the gateway's
/// files, as the launcher names them from `DIR` ([`Paths::dir`]).
pub fn watch(pid: u32, at: &Paths) -> Result<()> {
    watcher::main(pid, at)
}

pub use watcher::WATCH;

/// The policy's view of the project `name`, but for its paths ([`judge_paths`]).
fn project_context(name: String, ports: Vec<u16>) -> Context {
    let session = format!(
        "{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let (uid, gid, own_gids) = caller::ids();
    Context {
        network: format!("ocsb-{name}"),
        project: name,
        session,
        writable: Vec::new(),
        hidden: Vec::new(),
        read_only: Vec::new(),
        ports,
        uid,
        gid,
        own_gids,
        limits: caller::limits(),
    }
}

/// The policy's view of the sandbox's paths, from its plan: the host paths it may write (the
/// sources of its read-write binds) and what is hidden or read-only inside them.
fn judge_paths(ctx: &mut Context, plan: &Plan) {
    use ocsb_sandbox::plan::HostFs;
    // Resolved as the kernel resolves them, each directory once: the plan names every hidden
    // entry of the home, and this runs while the sandbox's start waits.
    let fs = ocsb_sandbox::plan::RealFs;
    let seen = ocsb_sandbox::remembered::Remembered::new(&fs);
    let canonical = |p: &Path| seen.canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let writable: Vec<PathBuf> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Bind { src, access: Access::Rw, dir: true, .. } => Some(canonical(src)),
            _ => None,
        })
        .collect();
    let inside = |dst: &PathBuf| writable.iter().any(|w| dst.starts_with(w) && dst != w);
    let (mut hidden, mut read_only) = (Vec::new(), Vec::new());
    for op in &plan.ops {
        match op {
            Op::Mask { dst } | Op::Tmpfs { dst, .. } if inside(dst) => hidden.push(canonical(dst)),
            // Something else shown in a path's place (a checkout's `.git` is the agent's own git
            // directory): a container bound there would get the host's, so it gets nothing.
            Op::Bind { src, dst, .. } if inside(dst) && canonical(src) != canonical(dst) => {
                hidden.push(canonical(dst))
            }
            Op::Bind { dst, access: Access::Ro, .. } if inside(dst) => read_only.push(canonical(dst)),
            _ => {}
        }
    }
    // A mask inside a protected directory is in the plan twice (made again after it).
    for v in [&mut hidden, &mut read_only] {
        v.sort();
        v.dedup();
    }
    ctx.writable = writable;
    ctx.hidden = hidden;
    ctx.read_only = read_only;
}

/// The gateway's log (`path`), opened for appending, readable by this user alone: it names what
/// the agent asked the daemon for.
fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// The empty file masks are bound from, in a directory hidden from the sandbox.
fn write_empty(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
        return Ok(());
    }
    let _ = std::fs::remove_file(path);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o444)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o444)).map_err(|e| Error::io("chmod", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dropped gateway's accept loop ends (it kept its thread and listener for as long as
    /// the launcher lived): serving until `closing`, then one connection wakes it.
    #[test]
    fn the_accept_loop_ends_once_closing_is_set_and_it_is_woken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let closing = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let looping = {
            let (closing, served) = (closing.clone(), served.clone());
            std::thread::spawn(move || {
                accept(&listener, &closing, |_| {
                    served.fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        for _ in 0..2 {
            drop(UnixStream::connect(&path).unwrap());
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while served.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(served.load(Ordering::SeqCst), 2);
        closing.store(true, Ordering::SeqCst);
        drop(UnixStream::connect(&path).unwrap());
        while !looping.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(looping.is_finished(), "the loop still runs");
        assert_eq!(served.load(Ordering::SeqCst), 2, "the waking connection is not served");
        assert!(UnixStream::connect(&path).is_err(), "the listener is closed");
    }
}
