//! The launcher side: start stage 2 with the netlock gid (early, [`Early`]), prepare the host
//! (state directories, `/tmp` cleanup, placeholders for protected paths), build the plan, hand
//! stage 2 its request, relay the pty, and return the command's exit status.
//!
//! Call [`run`] (and [`Early::start`]) from the main thread or from a thread that outlives the
//! sandbox: the kernel's parent-death signal follows the thread that forked stage 2.

use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ocsb_policy::guard::{Checkout, Protection};

use super::error::{Error, Result};
use super::landlock::LandlockPolicy;
use super::plan::{self, Plan, RealFs};
use super::remembered::Remembered;
use super::spec::{Netlock, Network, SandboxSpec, TmpMode, TtyMode};
use super::stage2::{self, Request};
use super::{audit, checkouts, handover, netlock, netns, pty, termfilter, tmpclean};

/// Create what the sandbox needs on the host and build the plan. Idempotent. `known`: the
/// checkouts as a look moments before saw them ([`checkouts::of_spec_known`]).
pub fn prepare(spec: &SandboxSpec, known: &[Checkout]) -> Result<Option<Plan>> {
    // The state directory is the agent's to write: its subdirectories are made through
    // descriptors that never follow a symlink it may have left (see `statefs`).
    let state_err = |e: Error| Error::refused(e.to_string(), "fix the state directory named above");
    let state = crate::statefs::StateDir::open(&spec.state_dir).map_err(state_err)?;
    let mut tmp_fd = None;
    for d in super::env::STATE_SUBDIRS {
        let fd = state.dir(Path::new(d)).map_err(state_err)?;
        if *d == "tmp" {
            tmp_fd = Some(fd);
        }
    }
    if !spec.namespaces {
        return Ok(None);
    }
    let tmp = spec.state_dir.join("tmp");
    if let Some(fd) = &tmp_fd {
        nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(0o700))
            .map_err(|e| Error::io("chmod", &tmp, e.into()))?;
    }
    if spec.tmp == TmpMode::Private {
        tmpclean::clean(&tmp, tmpclean::MAX_AGE, SystemTime::now());
    }
    crate::stages::mark("plan: state directories made, tmp cleaned");
    // The two builds ask the host the same questions, one right after the other.
    let seen = Remembered::new(&RealFs);
    let spec = &with_checkout_rule(spec, known, &seen)?;
    crate::stages::mark("plan: checkout rule");
    let first = plan::build_remembered(spec, &seen)?;
    if first.placeholders.is_empty() {
        return Ok(Some(first));
    }
    for p in &first.placeholders {
        create_placeholder(p).map_err(|e| Error::io("create the read-only placeholder", &p.path, e))?;
    }
    Ok(Some(plan::build(spec, &RealFs)?))
}

/// Create one placeholder beneath its anchor, never following a link on the way: the parent is
/// opened with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`, the entry made with `mkdirat` or an
/// exclusive `O_NOFOLLOW` create. An entry that exists already is fine.
fn create_placeholder(p: &plan::Placeholder) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let rel = p.path.strip_prefix(&p.anchor).map_err(|_| std::io::Error::other("not beneath its anchor"))?;
    let name = rel.file_name().ok_or_else(|| std::io::Error::other("no name"))?;
    let anchor = nix::fcntl::open(
        &p.anchor,
        nix::fcntl::OFlag::O_PATH
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let parent_rel = rel.parent().filter(|r| !r.as_os_str().is_empty());
    let parent = match parent_rel {
        Some(r) => super::sys::openat2(
            Some(anchor.as_fd()),
            r,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            super::sys::RESOLVE_NO_SYMLINKS | super::sys::RESOLVE_BENEATH,
        )?,
        None => anchor,
    };
    let r = if p.dir {
        let mode = if p.private { 0o700 } else { 0o755 };
        nix::sys::stat::mkdirat(&parent, name, nix::sys::stat::Mode::from_bits_truncate(mode))
            .map_err(std::io::Error::from)
    } else {
        nix::fcntl::openat(
            &parent,
            name,
            nix::fcntl::OFlag::O_WRONLY
                | nix::fcntl::OFlag::O_CREAT
                | nix::fcntl::OFlag::O_EXCL
                | nix::fcntl::OFlag::O_NOFOLLOW
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .map(drop)
        .map_err(std::io::Error::from)
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// The spec with the checkout rule (`ocsb_policy::guard`) applied to every writable checkout it
/// names (those in `known` as they were seen there), and the tool files the walk found at any
/// depth ([`SandboxSpec::tool_files`]) held read-only; what the spec said about protections
/// before is replaced.
fn with_checkout_rule(spec: &SandboxSpec, known: &[Checkout], fs: &Remembered<'_>) -> Result<SandboxSpec> {
    let mut spec = spec.clone();
    spec.protect.clear();
    let writable = plan::writable_of(&spec, fs)?;
    let rule = ocsb_policy::guard::Rule { writable: &writable, rw_tool_files: &spec.rw_tool_files };
    let mut protect = rule.protections(&checkouts::of_spec_known(&spec, known), &checkouts::HostLookup);
    add_tool_files(&mut protect, spec.tool_files.protections());
    spec.protect = protect;
    Ok(spec)
}

/// Adds the tool files' protections to the checkout rule's: each path once (the rule's own
/// stands), none inside what is read-only already, shallowest first (a deeper mount after the
/// one it sits in). *Not pinned* like the rule's paths at a checkout's top: a directory above
/// a deep tool file may be renamed (a dependency tree is rebuilt all the time), and a new
/// entry at the old path is a new tool file, which the live watch catches by its name.
fn add_tool_files(protect: &mut Vec<Protection>, tools: Vec<Protection>) {
    use ocsb_policy::guard::Access;
    let mut all: std::collections::BTreeSet<PathBuf> = protect.iter().map(|p| p.path.clone()).collect();
    let mut read_only: std::collections::BTreeSet<PathBuf> =
        protect.iter().filter(|p| p.access == Access::ReadOnly).map(|p| p.path.clone()).collect();
    // Shallowest first, so that what lies inside another tool file is seen to.
    let mut tools = tools;
    tools.sort_by_key(|t| t.path.components().count());
    for t in tools {
        let inside = t.path.ancestors().skip(1).any(|a| read_only.contains(a));
        if !inside && all.insert(t.path.clone()) {
            read_only.insert(t.path.clone());
            protect.push(t);
        }
    }
    protect.sort_by_key(|p| (p.path.components().count(), p.access == Access::ReadOnly));
}

/// The paths in the writable trees that the checkout rule holds read-only for `spec` (the
/// hooks path, includes and programs the user's config names, tool files, ocsb's settings):
/// what the import gate holds back a commit for changing.
pub fn read_only_in_trees(spec: &SandboxSpec, known: &[Checkout]) -> Result<Vec<PathBuf>> {
    let seen = Remembered::new(&RealFs);
    Ok(with_checkout_rule(spec, known, &seen)?
        .protect
        .into_iter()
        .filter(|p| p.access == ocsb_policy::guard::Access::ReadOnly)
        .map(|p| p.path)
        .collect())
}

/// Build the stage-2 request from the spec and plan.
pub fn request(spec: &SandboxSpec, plan: Option<Plan>) -> Request {
    let landlock = match &plan {
        Some(p) => LandlockPolicy {
            writable: p.writable.clone(),
            devices: p.devices.clone(),
            sockets: spec
                .docker_socket
                .iter()
                .filter_map(|s| std::fs::canonicalize(s).ok())
                .chain(spec.docker_gateway.iter().map(|_| PathBuf::from(crate::spec::DOCKER_GATEWAY_INSIDE)))
                .chain(spec.ssh_agent.iter().map(|_| PathBuf::from(crate::spec::SSH_AGENT_INSIDE)))
                .collect(),
            tcp: spec.tcp.clone(),
            isolated: spec.network != Network::Host,
        },
        None => LandlockPolicy::default(),
    };
    let cwd = plan
        .as_ref()
        .map(|p| p.cwd.clone())
        .or_else(|| spec.cwd.clone())
        .unwrap_or_else(|| spec.project_dir.clone());
    let (gid, interval) = match &spec.netlock {
        Netlock::Off => (None, Duration::from_secs(5)),
        Netlock::Required { gid, probe_interval, .. } => (Some(*gid), *probe_interval),
    };
    Request {
        launcher_pid: std::process::id() as i32,
        plan,
        landlock,
        argv: spec.argv.clone(),
        env: spec.env.clone(),
        cwd,
        netlock_gid: gid,
        probe_interval: interval,
        limits: spec.limits.clone(),
        tty: false,
        network: None,
    }
}

/// Serves an isolated network ([`crate::netns`]) while its sandbox runs: given the sockets
/// made inside, it starts serving them and returns what keeps them served (dropped on a thread
/// of its own once the sandbox has exited, and waited for before the start returns).
pub type Serve<'a> = &'a (dyn Fn(netns::Inside) -> Result<Box<dyn std::any::Any + Send>> + Sync);

/// Run the command in the sandbox; returns its exit status (128 + signal when killed,
/// 125 when the sandbox could not be built, 127 when the command could not be executed).
///
/// The launcher's check of the checkouts ([`audit`]) brackets every sandbox: it refuses to
/// start while something planted is there, and reports what appeared once the sandbox exits.
pub fn run(spec: &SandboxSpec) -> Result<i32> {
    run_served(spec, None, Ahead::default())
}

/// What a caller made ahead of a sandbox's start, for the start to use rather than make again.
#[derive(Default)]
pub struct Ahead {
    /// The check of the checkouts made just before ([`audit::Checked::begin`] says when it is
    /// used rather than made again).
    pub checked: Option<audit::Checked>,
    /// Stage 2, started while the caller was still checking; used when it was started for
    /// this spec ([`Early::fits`]), stopped otherwise.
    pub stage2: Option<Early>,
    /// Given the mount plan the sandbox is made from, before anything runs in it, for what
    /// judges paths by that plan (the Docker gateway keeps containers' binds to it). *Why the
    /// plan itself*: a plan built apart, from an earlier look at the checkouts, could protect
    /// other git files than the sandbox does. An error stops the start.
    pub on_plan: Option<OnPlan>,
    /// Called once the sandbox has exited, before the look at the checkouts that ends the run,
    /// for what the sandbox started outside itself that can still write its paths (the Docker
    /// gateway stops such containers). *Why before the look*: a writer still running after it
    /// could plant what the look is there to find, and nothing would look again.
    pub on_exit: Option<OnExit>,
    /// The session's git, begun while the caller was still checking
    /// ([`crate::session_git::Begun`]); taken when it was begun for this start.
    pub git: Option<crate::session_git::Begun>,
}

/// See [`Ahead::on_plan`]. `Send`: a caller may start the sandbox on a thread of its own
/// (`ocsb run` does).
pub type OnPlan = Box<dyn FnOnce(&Plan) -> Result<()> + Send>;

/// See [`Ahead::on_exit`].
pub type OnExit = Box<dyn FnOnce() + Send>;

/// [`run`], with `serve` for a spec whose network is isolated (refused without it: nothing
/// would reach the sandbox's namespace), and what the caller made `ahead`.
pub fn run_served(spec: &SandboxSpec, serve: Option<Serve<'_>>, ahead: Ahead) -> Result<i32> {
    let audit = match ahead.checked {
        Some(c) => c.begin(spec)?,
        None => audit::begin(spec)?,
    };
    let mut spec = spec.clone();
    spec.nested_repos = audit.nested.clone();
    spec.tool_files = audit.tool_files.clone();
    let checkouts = checkouts::of_spec_known(&spec, &audit.checkouts);
    crate::stages::mark("launcher: start recorded");
    let gates = if spec.namespaces {
        let begun = ahead.git.and_then(|b| b.take(&mut spec, &checkouts)).transpose()?;
        Some(match begun {
            Some(git) => git,
            None => crate::session_git::begin(&mut spec, &checkouts)?,
        })
    } else {
        None
    };
    crate::stages::mark("launcher: the gates and the tree watch started");
    let run = run_checked(&spec, serve, ahead.stage2, ahead.on_plan, &checkouts);
    if let Some(quiet) = ahead.on_exit {
        quiet();
    }
    crate::stages::mark("launcher: Docker gateway told of the exit");
    // The agent's directories are removed while the checkouts are looked at.
    let ended = gates.map(crate::session_git::SessionGit::end);
    crate::stages::mark("launcher: the last import");
    audit.end();
    crate::stages::mark("launcher: checkouts looked at (after)");
    let late = ended.map(crate::session_git::Ended::finish).unwrap_or_default();
    // Only now, after the look, may stage 2 free the port rules and tear the namespaces down;
    // it closes the watches' inotify instances as it exits.
    run.map(|(code, mut ending)| {
        ending.late = late;
        code
    })
}

/// Stage 2, started before its request exists. *Why*: its landlock port rules (the ephemeral
/// range is one rule per port: landlock has no ranges) took a third of a start, and an
/// isolated sandbox's network (`ip` and `nft` runs) a quarter; started first, stage 2 builds
/// them while the launcher is still checking the settings, the checkouts, the filter and the
/// netlock, and then waits on fd 0 for the request ([`handover`]). Before the request there is
/// a ruleset and, isolated, a user and network namespace holding only `lo`, and, given the
/// mounts ahead ([`Early::premount`]), a pid 1 making them in a mount namespace of its own:
/// nothing runs there, and nothing there can reach anything. A stage 2 dropped without a
/// request is stopped, and pid 1 with it.
pub struct Early {
    child: Option<Child>,
    chan: UnixStream,
    early: stage2::Early,
    /// The pty the command gets, when stdin is a terminal and the spec asks for one.
    pty: Option<pty::Pty>,
    /// The command's stdin, handed over with the request.
    stdin: OwnedFd,
    /// The thread sending the mounts ahead ([`Early::premount`]), joined before the request.
    prefix: Option<std::thread::JoinHandle<()>>,
}

impl Early {
    /// Start stage 2 for a sandbox of `spec`: through the netlock's shim (or `sg`) as the spec
    /// says, with fd 0 the hand-over and fds 1 and 2 what the command writes to.
    pub fn start(spec: &SandboxSpec) -> Result<Early> {
        let early = early_of(spec);
        let json = serde_json::to_string(&early)
            .map_err(|e| Error::refused(format!("serialising the request: {e}"), "report this"))?;
        let exe =
            std::fs::read_link("/proc/self/exe").map_err(|e| Error::io("resolve", "/proc/self/exe", e))?;
        let acquire = match &spec.netlock {
            Netlock::Off => None,
            Netlock::Required { acquire, .. } => Some(acquire),
        };
        let mut cmd: Command = netlock::stage2_command(acquire, &exe, stage2::ARG);
        cmd.env_clear().env(stage2::ENV, json);
        if matches!(acquire, Some(super::spec::Acquire::Sg { .. })) {
            cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        }
        let (chan, theirs) =
            UnixStream::pair().map_err(|e| Error::io("create", "the hand-over socket", e))?;
        cmd.stdin(Stdio::from(OwnedFd::from(theirs)));
        let pty = if wants_pty(spec) { Some(pty::open()?) } else { None };
        let stdin: OwnedFd = match &pty {
            Some(p) => p.slave.try_clone().map_err(|e| Error::io("duplicate", "the pty", e))?,
            // Without a pty of its own the command never reads the user's terminal.
            None if std::io::stdin().is_terminal() => {
                std::fs::File::open("/dev/null").map_err(|e| Error::io("open", "/dev/null", e))?.into()
            }
            None => std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Error::io("duplicate", "stdin", e))?,
        };
        // Nor does it hold the terminal for output (it could change the terminal's modes): a
        // pipe the launcher relays, through the escape-sequence filter, takes its place.
        if pty.is_none() && std::io::stdout().is_terminal() {
            cmd.stdout(Stdio::piped());
        }
        if pty.is_none() && std::io::stderr().is_terminal() {
            cmd.stderr(Stdio::piped());
        }
        if let Some(p) = &pty {
            let dup =
                |what| p.slave.try_clone().map(Stdio::from).map_err(|e| Error::io("duplicate", what, e));
            cmd.stdout(dup("the pty")?).stderr(dup("the pty")?);
        }
        let child = cmd.spawn().map_err(|e| Error::io("start", Path::new(cmd.get_program()), e))?;
        Ok(Early { child: Some(child), chan, early, pty, stdin, prefix: None })
    }

    /// The mounts the plan of `spec` will begin with ([`plan::build_prefix`]), built on a
    /// thread and sent to stage 2, whose pid 1 makes them while the launcher is still checking:
    /// for an isolated sandbox only (the netlock's makes its namespaces after the request, on
    /// the host's network). A build that fails, or whose mounts would make anything on the
    /// host, sends nothing; stage 2 keeps what pid 1 made only where the plan of the request
    /// begins with the same mounts. A start refused meanwhile does not wait for the thread.
    pub fn premount(mut self, spec: &SandboxSpec) -> Early {
        if !spec.namespaces || spec.network == Network::Host {
            return self;
        }
        let Ok(mut chan) = self.chan.try_clone() else { return self };
        let spec = spec.clone();
        let send = move || {
            if let Ok(Some(ops)) = plan::build_prefix(&spec)
                && let Ok(json) = serde_json::to_vec(&ops)
            {
                let _ = handover::send_prefix(&mut chan, &json);
            }
        };
        self.prefix = std::thread::Builder::new().name("ocsb-premount".into()).spawn(send).ok();
        self
    }

    /// Started for a sandbox of `spec`: the same launcher, netlock, namespaces, landlock port
    /// rules and terminal.
    pub fn fits(&self, spec: &SandboxSpec) -> bool {
        self.early == early_of(spec) && self.pty.is_some() == wants_pty(spec)
    }

    /// Send the request. A stage 2 that exited before taking it is returned all the same: it
    /// said why on stderr, and its exit status says it too. One still running that could not
    /// be sent it is stopped (dropped), and the error returned.
    fn hand_over(mut self, request: &[u8]) -> Result<(Stage2, Option<pty::Pty>)> {
        // One writer at a time on the channel: the mounts ahead are sent whole, or not at all.
        if let Some(sending) = self.prefix.take() {
            let _ = sending.join();
        }
        if let Err(e) = handover::send(&mut self.chan, self.stdin.as_fd(), request)
            && self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        {
            return Err(Error::io("send the request to", "the sandbox", e));
        }
        let chan = self.chan.try_clone().map_err(|e| Error::io("duplicate", "the hand-over socket", e))?;
        #[allow(clippy::expect_used, reason = "taken only here, and `self` is consumed")]
        let child = self.child.take().expect("a started stage 2");
        Ok((Stage2 { child, chan }, self.pty.take()))
    }
}

/// Stage 2 after the hand-over: the sandbox runs.
struct Stage2 {
    child: Child,
    /// Where stage 2 reports the command's status ([`handover::report`]).
    chan: UnixStream,
}

impl Stage2 {
    /// The command's exit status: as stage 2 reports it once pid 1 has exited, or, when it
    /// exited without reporting one, its own. Stage 2 may still be exiting: it is reaped when
    /// the returned [`Ending`] is dropped.
    fn status(mut self) -> std::io::Result<(i32, Ending)> {
        use std::os::unix::process::ExitStatusExt;
        let code = match handover::reported(&mut self.chan) {
            Some(code) => code,
            None => {
                let st = self.child.wait()?;
                st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
            }
        };
        Ok((code, Ending { child: Some(self.child), chan: self.chan, late: Vec::new(), stopping: None }))
    }
}

/// A stage 2 that has reported the command's status. It frees the port rules and tears the
/// namespaces down once this is dropped (the hand-over closed): after the launcher's look at
/// the project, which would otherwise share the CPU with that work. *Not reaped here*:
/// nothing of the sandbox runs any more (its pid namespace is gone), and waiting would put
/// that work back before the launcher's exit; a launcher that lives on reaps it in a thread.
struct Ending {
    child: Option<Child>,
    chan: UnixStream,
    /// Descriptors whose last close is slow and that nothing needs any more (the watches'
    /// inotify instances): sent to stage 2, which closes them as it exits
    /// ([`handover::leave`]).
    late: Vec<OwnedFd>,
    /// The isolated network's server being stopped ([`crate::background`]): waited for when
    /// this is dropped.
    stopping: Option<crate::background::Background>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        handover::leave(&self.chan, std::mem::take(&mut self.late));
        let _ = self.chan.shutdown(std::net::Shutdown::Both);
        if let Some(mut child) = self.child.take() {
            let _ = std::thread::Builder::new().name("ocsb-stage2-reap".into()).spawn(move || child.wait());
        }
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What stage 2 of `spec` is started with ([`stage2::Early`]); [`request`] must give the same.
fn early_of(spec: &SandboxSpec) -> stage2::Early {
    let net = if spec.namespaces {
        LandlockPolicy {
            tcp: spec.tcp.clone(),
            isolated: spec.network != Network::Host,
            ..Default::default()
        }
        .net_part()
    } else {
        LandlockPolicy::default().net_part()
    };
    stage2::Early {
        launcher_pid: std::process::id() as i32,
        netlock_gid: match &spec.netlock {
            Netlock::Off => None,
            Netlock::Required { gid, .. } => Some(*gid),
        },
        namespaces: spec.namespaces,
        net,
    }
}

/// A launcher-owned pty for the command: asked for, and stdin is a terminal.
fn wants_pty(spec: &SandboxSpec) -> bool {
    spec.tty == TtyMode::Auto && std::io::stdin().is_terminal()
}

fn run_checked(
    spec: &SandboxSpec,
    serve: Option<Serve<'_>>,
    early: Option<Early>,
    on_plan: Option<OnPlan>,
    checkouts: &[Checkout],
) -> Result<(i32, Ending)> {
    // Stage 2 first, so that its landlock rules are built while the plan is.
    let early = match early {
        Some(e) if e.fits(spec) => e,
        other => {
            drop(other);
            Early::start(spec)?
        }
    };
    let channel = match (&spec.network, serve) {
        (Network::Host, _) => None,
        (Network::Isolated { forward }, Some(serve)) => {
            Some((netns::Channel::bind(forward)?, forward, serve))
        }
        (Network::Isolated { .. }, None) => {
            return Err(Error::refused(
                "this command cannot serve an isolated network (OCSB_NETWORK=isolated)",
                "run it through `ocsb exec`, or set OCSB_NETWORK=netlock",
            ));
        }
    };
    let plan = prepare(spec, checkouts)?;
    crate::stages::mark("launcher: mount plan built");
    if let (Some(judge), Some(p)) = (on_plan, &plan) {
        judge(p)?;
    }
    if let Some(p) = &plan {
        for w in &p.warnings {
            eprintln!("ocsb: warning: {w}");
        }
    }
    let use_pty = early.pty.is_some();
    let mut plan = plan;
    if use_pty && let Some(p) = plan.as_mut() {
        p.add_console();
    }
    let mut req = request(spec, plan);
    req.tty = use_pty;
    if let Some((chan, forward, _)) = &channel {
        req.network = Some(netns::NetRequest { channel: chan.path(), forward: forward.to_vec() });
    }
    let json = serde_json::to_vec(&req)
        .map_err(|e| Error::refused(format!("serialising the request: {e}"), "report this"))?;
    let (mut stage2, pty) = early.hand_over(&json)?;
    crate::stages::mark("launcher: plan judged, request handed over");
    // The isolated network's sockets, served from here until the sandbox exits.
    let served = match channel {
        Some((mut chan, _, serve)) => {
            let child = &mut stage2.child;
            let pid = child.id();
            let inside = chan.receive(pid, &mut || matches!(child.try_wait(), Ok(None)));
            match inside.and_then(|i| i.map(serve).transpose()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
        None => None,
    };
    crate::stages::mark("launcher: isolated network sockets received");
    let status = match pty {
        Some(p) => {
            drop(p.slave);
            let raw = pty::RawMode::enter();
            let done = AtomicBool::new(false);
            let status = std::thread::scope(|s| {
                s.spawn(|| pty::relay(&p.master, &done));
                let st = stage2.status();
                done.store(true, Ordering::Relaxed);
                st
            });
            drop(raw);
            status
        }
        None => {
            let (out, err) = (stage2.child.stdout.take(), stage2.child.stderr.take());
            let filter = std::sync::Mutex::new(termfilter::Filter::default());
            std::thread::scope(|s| {
                if let Some(o) = out {
                    s.spawn(|| termfilter::relay(o, std::io::stdout(), &filter));
                }
                if let Some(e) = err {
                    s.spawn(|| termfilter::relay(e, std::io::stderr(), &filter));
                }
                stage2.status()
            })
        }
    };
    crate::stages::mark("launcher: exit status received");
    // What serves the network is stopped beside the launcher's end (its relays' threads
    // joined): nothing of the sandbox runs any more to use it.
    let stopping =
        served.map(|s| crate::background::Background::start("ocsb-net-stop", Box::new(move || drop(s))));
    status.map_err(|e| Error::io("wait for", "the sandbox", e)).map(|(code, mut ending)| {
        ending.stopping = stopping;
        (code, ending)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Acquire, TcpPorts};

    /// A stage 2 refuses a request whose early part is not the one it was started with; the
    /// two are made apart ([`early_of`] before the plan, [`request`] after it), so they must
    /// agree for every kind of sandbox, or every start would be refused.
    #[test]
    fn the_early_part_is_the_requests_own_in_every_mode() {
        let mut spec = crate::spec::minimal("/p".into(), "/s".into(), "/h".into());
        let tcp = Some(TcpPorts::for_sandbox(3128, 4097, &[5432], Some((32768, 60999))));
        let lock = Netlock::Required {
            gid: 995,
            acquire: Acquire::Inherited,
            probe_interval: Duration::from_secs(5),
        };
        for (namespaces, network, netlock) in [
            (true, Network::Host, lock.clone()),
            (true, Network::Isolated { forward: vec![3128] }, lock.clone()),
            (true, Network::Host, Netlock::Off),
            (false, Network::Host, lock),
        ] {
            spec.namespaces = namespaces;
            spec.network = network;
            spec.netlock = netlock;
            spec.tcp = tcp.clone();
            let plan = namespaces.then(Plan::default);
            assert_eq!(request(&spec, plan).early(), early_of(&spec), "{spec:?}");
        }
        // An isolated sandbox has no port rules (its namespace decides); without namespaces,
        // no landlock at all.
        spec.namespaces = true;
        spec.network = Network::Isolated { forward: vec![] };
        assert_eq!(early_of(&spec).net.tcp, None);
        spec.namespaces = false;
        spec.network = Network::Host;
        assert_eq!(early_of(&spec).net, crate::landlock::NetPart { isolated: false, tcp: None });
    }
}
