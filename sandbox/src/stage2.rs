//! Stage 2: the freshly executed, single-threaded `ocsb __sandbox-init` (through the netlock
//! shim or `sg` when it needs the gid). It is started with what it needs to begin before the
//! request exists ([`Early`], in its environment): the landlock port rules, and an isolated
//! sandbox's namespaces. Then it reads the request and the command's stdin from fd 0
//! ([`super::handover`]), builds the namespaces not built yet, forks pid 1 and supervises: it relays
//! signals and re-runs the netlock probe (a failed probe kills the sandbox), and reports the
//! command's exit status on fd 0's socket before it exits.
//!
//! An isolated sandbox's launcher may send, before the request, the mounts the plan will
//! begin with ([`handover::send_prefix`]); stage 2 then forks pid 1 at once, which makes them
//! in a mount namespace of its own while the launcher is still checking (`Ahead`). At the
//! request stage 2 keeps them only when the plan begins with exactly those mounts, clones the
//! host sources of the rest, and passes them with the request; otherwise pid 1 gives its tree
//! up and builds the whole plan.
//!
//! ```text
//! launcher (any threads; owns the pty master)
//!  └─ stage 2 helper: close fds, PDEATHSIG, while the launcher checks: the landlock port
//!     │               rules, or (isolated) gid + probe, unshare(USER|NET), id maps, lo,
//!     │               routes and the nftables table, unshare(NS|IPC|UTS|PID|CGROUP), and,
//!     │               given the mounts ahead, fork pid 1 (below); the request and stdin over
//!     │               fd 0; on the host's network gid + probe, unshare(USER), id maps (user
//!     │               and gid mapped to themselves), unshare(NS|IPC|UTS|PID|CGROUP);
//!     │               isolated, the network's sockets handed to the launcher; the request
//!     │               and the rest's sources to a pid 1 forked ahead, or fork pid 1; then
//!     │               supervise, report
//!     └─ pid 1: PDEATHSIG, non-dumpable, (ahead: unshare(NS), the plan's first mounts, then
//!        │      the request) mount tree + pivot_root, drop caps, setsid + pty, rlimits,
//!        │      fresh keyring, no_new_privs, landlock (completing the ruleset stage 2 began),
//!        │      seccomp  (same domains as the command, so the command cannot ptrace or
//!        │      signal its way out through pid 1)
//!        └─ the command (execve)
//! ```

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{ForkResult, Pid, getegid, geteuid};
use serde::{Deserialize, Serialize};

use super::error::{Error, Result, USERNS_FIX};
use super::landlock::{self, LandlockPolicy};
use super::mounts::{self, MountSys, RealMounts};
use super::plan::{Op, Plan};
use super::spec::Limits;
use super::{caps, handover, netlock, netns, seccomp, sys};

/// The hidden argument that selects stage 2.
pub const ARG: &str = "__sandbox-init";
/// The environment variable that carries the [`Early`] part of the request (JSON); the rest
/// comes over fd 0 ([`super::handover`]).
pub const ENV: &str = "OCSB_SANDBOX_EARLY";
/// Exit status when the sandbox could not be built (the message is on stderr).
pub const EXIT_SETUP: i32 = 125;
/// Exit status when the command could not be executed.
pub const EXIT_EXEC: i32 = 127;

/// What stage 2 is started with, before the launcher has built the rest of the [`Request`]:
/// enough to check that it runs for its launcher and to build the landlock port rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Early {
    pub launcher_pid: i32,
    pub netlock_gid: Option<u32>,
    /// The sandbox will have namespaces, so landlock applies (`OCSB_SANDBOX=1`).
    pub namespaces: bool,
    pub net: landlock::NetPart,
}

impl Request {
    /// The [`Early`] part this request needs: a stage 2 started with another refuses it.
    pub fn early(&self) -> Early {
        Early {
            launcher_pid: self.launcher_pid,
            netlock_gid: self.netlock_gid,
            namespaces: self.plan.is_some(),
            net: self.landlock.net_part(),
        }
    }
}

/// Everything stage 2 needs; built by `launch` from a [`super::SandboxSpec`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub launcher_pid: i32,
    /// `None`: `OCSB_SANDBOX=0`, no namespaces (the netlock still applies).
    pub plan: Option<Plan>,
    pub landlock: LandlockPolicy,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub netlock_gid: Option<u32>,
    pub probe_interval: Duration,
    pub limits: Limits,
    /// fd 0 is a pty slave that becomes the controlling terminal.
    pub tty: bool,
    /// The isolated network to build (`None`: the host's).
    #[serde(default)]
    pub network: Option<netns::NetRequest>,
}

const FORWARDED: &[Signal] =
    &[Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGUSR1, Signal::SIGUSR2];

fn handled_set() -> SigSet {
    let mut s = SigSet::empty();
    s.add(Signal::SIGCHLD);
    for sig in FORWARDED {
        s.add(*sig);
    }
    s
}

/// Entry point of `ocsb __sandbox-init`; returns the exit status.
pub fn main() -> i32 {
    match helper() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ocsb: {e}");
            EXIT_SETUP
        }
    }
}

fn close_extra_fds() -> Result<()> {
    sys::close_range(3, 0)
        .map_err(|e| Error::kernel("close_range", e, "Linux >= 5.9 is required (close_range)"))
}

fn helper() -> Result<i32> {
    // No descriptor of the launcher may reach the sandbox (runc CVE-2024-21626 class).
    close_extra_fds()?;
    // The sandbox dies with the launcher. PDEATHSIG is cleared across a set-gid exec, so it is
    // set here, after the shim; then check the launcher did not die before it took effect.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Error::kernel("PR_SET_PDEATHSIG", e.into(), "report this"))?;
    let early = read_early()?;
    crate::stages::mark("stage 2: exec'd, early part read");
    if nix::unistd::getppid().as_raw() != early.launcher_pid {
        return Ok(EXIT_SETUP); // the launcher is gone
    }
    // The port rules, while the launcher may still be checking the project. A failure is not
    // reported here: pid 1 then builds the whole ruleset and fails, if it does, at the usual
    // point and with the usual message.
    let mut prebuilt = if early.namespaces { landlock::prebuild(&early.net).ok() } else { None };
    crate::stages::mark("stage 2: port rules built");
    // An isolated sandbox's network namespace is built while the launcher is still checking.
    // The netlock is probed on the host's network, so before that namespace exists; on the
    // host's network, after the request, as close to the start as it can be. Failures are
    // reported once the request is in, where they always were.
    // The probe socket is made on the host's network too, and probes it from there while the
    // sandbox runs ([`netlock::Prober`]).
    let (mut prober, entered) = match early.namespaces && early.net.isolated {
        false => (None, None),
        true => match check_netlock(early.netlock_gid) {
            Ok(p) => (
                p,
                Some(
                    enter_user_namespace(true)
                        .and_then(|()| netns::configure())
                        .and_then(|()| unshare_rest()),
                ),
            ),
            Err(e) => (None, Some(Err(e))),
        },
    };
    crate::stages::mark("stage 2: netlock probed, network namespace built");
    // fd 0 is the hand-over until the request is in; then it is the command's stdin.
    let fd0 = std::io::stdin().as_fd().try_clone_to_owned();
    let mut chan =
        std::os::unix::net::UnixStream::from(fd0.map_err(|e| Error::kernel("dup", e, "report this"))?);
    let mask = handled_set();
    let (death_r, death_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::kernel("pipe", e.into(), "report this"))?;
    let mut death_r = Some(death_r);
    let mut ahead: Option<Ahead> = None;
    let (stdin, raw) = loop {
        match handover::receive(&mut chan)? {
            None => return Ok(EXIT_SETUP), // the launcher did not start the sandbox after all
            Some(handover::Message::Request(stdin, raw)) => break (stdin, raw),
            // The mounts the plan will begin with: made by pid 1 while the launcher checks, in
            // the namespaces already made. Anything else (no namespaces yet, mounts that do
            // not parse, a second prefix) leaves pid 1 to be forked after the request.
            Some(handover::Message::Prefix(bytes)) => {
                let prefix = match (&ahead, &entered, serde_json::from_slice::<Vec<Op>>(&bytes)) {
                    (None, Some(Ok(())), Ok(p)) => p,
                    _ => continue,
                };
                let (link, theirs) = std::os::unix::net::UnixStream::pair()
                    .map_err(|e| Error::kernel("socketpair", e, "report this"))?;
                // Stage 2 is a fresh exec that starts no thread, so the child may run any code.
                match sys::fork_single_threaded()
                    .map_err(|e| Error::kernel("fork", e, "check RLIMIT_NPROC"))?
                {
                    ForkResult::Child => {
                        // The signals pid 1 forwards, blocked as stage 2 blocks them at the
                        // request; stage 2 itself keeps the default until then (a Ctrl-C
                        // during the checks ends it, and pid 1 with it).
                        let _ = signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None);
                        drop(chan);
                        drop(prober);
                        drop(death_w);
                        drop(link);
                        let death = death_r.take();
                        let code = match init_ahead(&prefix, theirs, death, prebuilt.take()) {
                            Ok(never) => match never {},
                            Err(e) => {
                                eprintln!("ocsb: {e}");
                                EXIT_SETUP
                            }
                        };
                        std::process::exit(code);
                    }
                    ForkResult::Parent { child } => {
                        drop(theirs);
                        death_r = None;
                        ahead = Some(Ahead { child, link, prefix, ns: None, handed: false });
                    }
                }
            }
        }
    };
    crate::stages::mark("stage 2: request received");
    // Kept for the command's exit status (`handover::report`); never in pid 1.
    let mut report = chan;
    nix::unistd::dup2_stdin(&stdin).map_err(|e| Error::kernel("dup2 stdin", e.into(), "report this"))?;
    let req: Request = serde_json::from_slice(&raw)
        .map_err(|e| Error::refused(format!("bad sandbox request: {e}"), "report this"))?;
    if req.early() != early {
        return Err(Error::refused(
            "the sandbox request does not match what stage 2 was started for",
            "report this",
        ));
    }
    if entered.is_none() {
        prober = check_netlock(req.netlock_gid)?;
    }
    signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .map_err(|e| Error::kernel("sigprocmask", e.into(), "report this"))?;

    // The network is built by this process, which holds every capability over the new
    // namespaces; the channel stays here (the socket factory), never in pid 1 or the command.
    let chan = match (&req.plan, &req.network) {
        (Some(_), net) => enter_namespaces(net.as_ref(), entered)?,
        (None, None) => None,
        (None, Some(_)) => {
            return Err(Error::refused(
                "OCSB_NETWORK=isolated needs the sandbox's namespaces, and OCSB_SANDBOX=0 builds none",
                "set OCSB_SANDBOX=1, or OCSB_NETWORK=netlock",
            ));
        }
    };
    crate::stages::mark("stage 2: namespaces entered, forks pid 1");
    let child = match (ahead.as_mut(), death_r) {
        (Some(ahead), _) => ahead.hand(&req, raw, stdin)?,
        (None, Some(death_r)) => {
            drop(stdin);
            // Stage 2 is a fresh exec that starts no thread, so the child may run any code.
            match sys::fork_single_threaded().map_err(|e| Error::kernel("fork", e, "check RLIMIT_NPROC"))? {
                ForkResult::Child => {
                    drop(chan);
                    drop(report);
                    drop(prober);
                    drop(death_w);
                    let code = match init(&req, death_r, prebuilt) {
                        Ok(never) => match never {},
                        Err(e) => {
                            eprintln!("ocsb: {e}");
                            EXIT_SETUP
                        }
                    };
                    std::process::exit(code);
                }
                ForkResult::Parent { child } => child,
            }
        }
        (None, None) => {
            return Err(Error::failed("internal: no pid 1 and no way to start one", "report this"));
        }
    };
    let code = supervise(child, &mask, chan.as_ref(), prober.as_ref(), req.probe_interval);
    crate::stages::mark("stage 2: pid 1 exited");
    // The socket factory is served no more: closed, so that a request the launcher
    // still makes fails at once rather than waits.
    drop(chan);
    // Nothing is written to the command's output after this, nor read from its input;
    // let go of them, so that a launcher relaying them sees their end now, not once the
    // namespaces are torn down.
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
    handover::report(&mut report, code);
    crate::stages::mark("stage 2: exit status reported");
    let_go(&report, child, prebuilt);
    drop(death_w);
    drop(ahead);
    Ok(code)
}

/// A pid 1 forked before the request, making the mounts the plan was to begin with
/// ([`init_ahead`]). *Why*: its mounts were a third of the time from the request to the
/// command, and most of them (the home, the system's directories, the writable and hidden
/// paths) need nothing the launcher is still checking.
struct Ahead {
    child: Pid,
    /// The socket pair to pid 1: its word that the mounts are made, then the request.
    link: std::os::unix::net::UnixStream,
    /// The mounts it was given to make.
    prefix: Vec<Op>,
    /// Its mount namespace, held until stage 2 exits ([`handover::say_made`]).
    ns: Option<OwnedFd>,
    /// Handed the request ([`Ahead::hand`]): from then on [`supervise`] waits for it.
    handed: bool,
}

/// A pid 1 forked ahead and never handed its request (stage 2 returns an error before) is
/// killed and reaped here, before anything is said of the start: it waits for a request
/// that will not come, and nothing may be reported while it lives.
impl Drop for Ahead {
    fn drop(&mut self) {
        if !self.handed {
            let _ = signal::kill(self.child, Signal::SIGKILL);
            let _ = waitpid(self.child, None);
        }
    }
}

impl Ahead {
    /// Pass pid 1 the request, and the host sources of the mounts it has still to make:
    /// those after the ones it made ahead, when the plan begins with exactly those, or else
    /// all of them (pid 1 then gives up what it made). The sources are cloned here, where
    /// the host's paths still mean the host's: pid 1's tree is attached in a mount namespace
    /// of its own. Returns pid 1. On a failure it is killed and reaped as `self` is dropped.
    fn hand(&mut self, req: &Request, raw: Vec<u8>, stdin: OwnedFd) -> Result<Pid> {
        self.give(req, raw, stdin)?;
        self.handed = true;
        Ok(self.child)
    }

    fn give(&mut self, req: &Request, raw: Vec<u8>, stdin: OwnedFd) -> Result<()> {
        let (made, ns) = handover::heard_made(&mut self.link);
        self.ns = ns;
        let plan = req.plan.as_ref().ok_or_else(|| {
            Error::refused("a request without namespaces for a sandbox that has them", "report this")
        })?;
        let kept = if made && plan.ops.starts_with(&self.prefix) { self.prefix.len() } else { 0 };
        crate::stages::mark(if kept > 0 {
            "stage 2: pid 1's mounts kept"
        } else {
            "stage 2: pid 1's mounts given up"
        });
        raise_nofile()?;
        let sources = mounts::bind_sources(&mut RealMounts::new(), &plan.ops[kept..])?;
        let passed = handover::Passed { stdin, kept, request: raw, sources };
        handover::pass(&mut self.link, &passed)
            .map_err(|e| Error::kernel("passing the request to pid 1", e, "report this"))
    }
}

/// After the report: what is left of the sandbox goes once the launcher has let go of the
/// hand-over (it is then done with its look at the project), or after [`LET_GO_WITHIN`].
/// *Why wait*: freeing the port rules (pid 1's domain, which its unreaped zombie holds, and
/// this copy of the ruleset: milliseconds each for the ephemeral range) and tearing the
/// namespaces down took the CPU the launcher's look after the sandbox needs on a small
/// machine. Nothing of the sandbox runs by now: pid 1 has exited, and the kernel killed the
/// rest of its pid namespace before that.
fn let_go(report: &std::os::unix::net::UnixStream, pid1: Pid, prebuilt: Option<landlock::Prebuilt>) {
    handover::await_let_go(report, LET_GO_WITHIN);
    let _ = waitpid(pid1, None);
    drop(prebuilt);
}

/// How long stage 2 waits for the launcher to let go (see [`let_go`]).
const LET_GO_WITHIN: Duration = Duration::from_secs(10);

/// The process is in the netlock's group `gid` (all three ids), and the lock holds for it.
/// Returns the probe socket, to probe again with while the sandbox runs.
fn check_netlock(gid: Option<u32>) -> Result<Option<netlock::Prober>> {
    let Some(gid) = gid else { return Ok(None) };
    netlock::require_gid(gid)?;
    let prober = netlock::Prober::new(gid)?;
    prober.require_locked()?;
    Ok(Some(prober))
}

fn read_early() -> Result<Early> {
    let Some(raw) = std::env::var_os(ENV) else {
        return Err(Error::refused(
            format!("{ARG} is internal: started without {ENV}"),
            "run `ocsb exec` instead",
        ));
    };
    serde_json::from_slice(raw.as_bytes())
        .map_err(|e| Error::refused(format!("bad sandbox request: {e}"), "report this"))
}

/// `unshare` the user namespace, with a network namespace of its own when `net`, and map the
/// user and group to themselves.
fn enter_user_namespace(net: bool) -> Result<()> {
    let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
    let inotify = INOTIFY_LIMITS.map(|f| (f, read_limit(f)));
    let first = if net { CloneFlags::CLONE_NEWNET } else { CloneFlags::empty() };
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER | first)
        .map_err(|e| Error::kernel("unshare(user, network namespaces)", e.into(), USERNS_FIX))?;
    // After a set-gid exec the process may be non-dumpable, which makes /proc/self/*_map
    // root-owned; the maps must be written by us.
    let _ = sys::prctl(libc::PR_SET_DUMPABLE, 1);
    let write = |file: &str, text: String| {
        std::fs::write(file, text.as_bytes()).map_err(|e| {
            Error::kernel(
                "writing the user namespace id maps",
                std::io::Error::new(e.kind(), format!("{file}: {e}")),
                USERNS_FIX,
            )
        })
    };
    // setgroups must be denied before an unprivileged gid_map (CVE-2014-8989).
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    // Half of the user's inotify watches and instances at most for the whole sandbox: the
    // count is the user's, shared by every namespace of theirs, and the launcher's watch of the
    // writable trees (and the user's editors) must not be starved by an agent that takes them
    // all. The kernel checks the limit of each user namespace on the way up, and the sandbox
    // cannot raise its own once its capabilities are gone.
    for (file, limit) in inotify {
        if let Some(limit) = limit {
            write(file, format!("{}\n", (limit / 2).max(1)))?;
        }
    }
    Ok(())
}

/// The per-user inotify limits, limited in each sandbox's user namespace.
const INOTIFY_LIMITS: [&str; 2] =
    ["/proc/sys/user/max_inotify_watches", "/proc/sys/user/max_inotify_instances"];

/// A limit as the user's namespace has it; `None` where the kernel has no such file.
fn read_limit(file: &str) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The namespaces of the sandbox. With `net`, all of them were made before the request came,
/// while the launcher was still checking (`entered`: done, or why they could not be): the
/// user and network namespaces, the network configured ([`netns::configure`]), then the
/// others ([`unshare_rest`]); the network's sockets are handed out ([`netns::hand_out`]) now.
/// Without it, the user namespace and the others are made now, after the netlock's probe on
/// the host's network. Returns the network's channel (the socket factory).
fn enter_namespaces(
    net: Option<&netns::NetRequest>,
    entered: Option<Result<()>>,
) -> Result<Option<std::os::unix::net::UnixStream>> {
    match (net, entered) {
        (Some(_), Some(entered)) => entered?,
        (None, None) => enter_user_namespace(false).and_then(|()| unshare_rest())?,
        // The early part says whether the network is isolated, and the request agrees with it.
        _ => {
            return Err(Error::refused(
                "the sandbox request does not match what stage 2 was started for",
                "report this",
            ));
        }
    }
    net.map(netns::hand_out).transpose()
}

/// The mount, IPC, UTS, pid and cgroup namespaces, in the user namespace entered before. For
/// an isolated sandbox they are made before the request, while the launcher checks: the mount
/// namespace is a copy of every mount of the host, which took half a millisecond of the
/// start's path. The copy is as old as stage 2 (a mount the system adds meanwhile under a
/// private mount is not in it; the launcher makes files, never mounts). Nothing is mounted in
/// it: pid 1 mounts in a namespace of its own, made from this one (ahead of the request, with
/// the plan's first mounts, or after it), and stage 2 starts no process before pid 1 (the
/// first child after `CLONE_NEWPID` is the namespace's init).
fn unshare_rest() -> Result<()> {
    let rest = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWCGROUP;
    nix::sched::unshare(rest)
        .map_err(|e| Error::kernel("unshare(mount, ipc, uts, pid, cgroup namespaces)", e.into(), USERNS_FIX))
}

fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, c) => Some(c),
        WaitStatus::Signaled(_, s, _) => Some(128 + s as i32),
        _ => None,
    }
}

/// Wait for pid 1, forward signals, repeat the netlock probe, serve the socket factory. Returns
/// once pid 1 has exited (with a pid namespace, everything in it has then been killed and
/// reaped by the kernel); pid 1 itself is left unreaped for [`let_go`].
fn supervise(
    child: Pid,
    mask: &SigSet,
    chan: Option<&std::os::unix::net::UnixStream>,
    prober: Option<&netlock::Prober>,
    probe_interval: Duration,
) -> i32 {
    let mut chan = chan;
    let sigfd = chan.and_then(|_| SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC).ok());
    let interval = probe_interval.max(Duration::from_millis(100));
    let mut next_probe = std::time::Instant::now() + interval;
    loop {
        // Not reaped (`WNOWAIT`): see `let_go`.
        match waitid(Id::Pid(child), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(st) => {
                if let Some(c) = exit_code(st) {
                    return c;
                }
            }
            Err(_) => {
                // Never returned while pid 1 may live: the status is the launcher's cue that
                // nothing of the sandbox runs any more.
                let _ = signal::kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                return EXIT_SETUP;
            }
        }
        if let Some(prober) = prober
            && std::time::Instant::now() >= next_probe
        {
            next_probe = std::time::Instant::now() + interval;
            if let Err(e) = prober.require_locked() {
                let _ = signal::kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                eprintln!("ocsb: {e}\nocsb: the sandbox was stopped");
                return EXIT_SETUP;
            }
        }
        let wait =
            next_probe.saturating_duration_since(std::time::Instant::now()).min(Duration::from_millis(500));
        // With the factory, wait on the channel and on the signals together (a signalfd of
        // the blocked set): a request is answered at once, a signal forwarded at once.
        let wait = match chan {
            Some(c) => {
                let mut pfd = vec![PollFd::new(c.as_fd(), PollFlags::POLLIN)];
                if let Some(sfd) = &sigfd {
                    pfd.push(PollFd::new(sfd.as_fd(), PollFlags::POLLIN));
                }
                // Without a signalfd, signals are looked at every 20 ms instead.
                let wait = if sigfd.is_some() { wait } else { wait.min(Duration::from_millis(20)) };
                let _ = poll(&mut pfd, PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX));
                if pfd[0].any().unwrap_or(false) && !netns::serve_factory(c) {
                    chan = None; // the launcher closed it
                }
                Duration::ZERO
            }
            None => wait,
        };
        if let Some(sig) = sys::sigtimedwait(mask, wait)
            && sig != Signal::SIGCHLD
        {
            let _ = signal::kill(child, sig);
        }
    }
}

/// pid 1 of the sandbox (or, without namespaces, the confined parent of the command).
fn init(
    req: &Request,
    death: OwnedFd,
    prebuilt: Option<landlock::Prebuilt>,
) -> Result<std::convert::Infallible> {
    watch_stage2(death)?;
    crate::stages::mark("pid 1: started");
    if let Some(plan) = &req.plan {
        // Nothing in the sandbox may ptrace pid 1 or read its memory.
        sys::prctl(libc::PR_SET_DUMPABLE, 0)
            .map_err(|e| Error::kernel("PR_SET_DUMPABLE", e, "report this"))?;
        let soft = raise_nofile()?;
        if cfg!(ocsb_stage_marks) {
            let binds = plan.ops.iter().filter(|o| matches!(o, crate::plan::Op::Bind { .. })).count();
            crate::stages::mark(&format!("pid 1: mounting ({} steps, {binds} binds)", plan.ops.len()));
        }
        mounts::apply(&mut RealMounts::new(), plan)?;
        crate::stages::mark("pid 1: mounted, root pivoted");
        lower_nofile(soft)?;
    }
    confine_and_run(req, prebuilt)
}

/// The sandbox dies with stage 2: `PDEATHSIG`, and a check that stage 2 did not die before
/// it took effect (its end of `death` is then closed).
fn watch_stage2(death: OwnedFd) -> Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| Error::kernel("PR_SET_PDEATHSIG", e.into(), "report this"))?;
    let mut pfd = [PollFd::new(death.as_fd(), PollFlags::POLLIN)];
    if poll(&mut pfd, PollTimeout::ZERO).unwrap_or(0) > 0 {
        std::process::exit(EXIT_SETUP);
    }
    Ok(())
}

/// Every source is cloned before anything is mounted, one descriptor each: many hidden paths
/// and protections can pass the usual soft limit of 1024. The soft limit goes up to the hard
/// one for the build ([`lower_nofile`] puts it back for the command); returns it.
fn raise_nofile() -> Result<nix::libc::rlim_t> {
    let err = |e: Errno| Error::kernel("setrlimit(RLIMIT_NOFILE)", e.into(), "report this");
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(err)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(err)?;
    Ok(soft)
}

fn lower_nofile(soft: nix::libc::rlim_t) -> Result<()> {
    let err = |e: Errno| Error::kernel("setrlimit(RLIMIT_NOFILE)", e.into(), "report this");
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(err)?;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(err)
}

/// pid 1 forked before the request ([`Ahead`]): it makes `prefix` in a mount namespace of its
/// own, says whether it could on `link`, then takes the request and the sources of the rest
/// from stage 2 and goes on as [`init`] does. *Why a mount namespace of its own*: the new
/// root is attached on `/tmp` while the launcher checks, and stage 2 clones the rest of the
/// sources afterwards in its own namespace, where `/tmp` is still the host's.
fn init_ahead(
    prefix: &[Op],
    mut link: std::os::unix::net::UnixStream,
    death: Option<OwnedFd>,
    prebuilt: Option<landlock::Prebuilt>,
) -> Result<std::convert::Infallible> {
    let death =
        death.ok_or_else(|| Error::failed("internal: pid 1 without its watch on stage 2", "report this"))?;
    watch_stage2(death)?;
    // fd 0 was the hand-over to the launcher, which pid 1 never holds; the command's stdin
    // comes with the request.
    let null = std::fs::File::open("/dev/null").map_err(|e| Error::io("open", "/dev/null", e))?;
    nix::unistd::dup2_stdin(&null).map_err(|e| Error::kernel("dup2 stdin", e.into(), "report this"))?;
    drop(null);
    crate::stages::mark("pid 1: started ahead");
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| Error::kernel("PR_SET_DUMPABLE", e, "report this"))?;
    let soft = raise_nofile()?;
    let mut sys = RealMounts::new();
    // A failure here is not reported: the mounts are made again after the request, from the
    // whole plan, and fail there, if they do, with the usual message.
    let (ns, made) = mount_ahead(&mut sys, prefix);
    crate::stages::mark("pid 1: mounts made ahead");
    handover::say_made(&mut link, made.is_ok(), ns.as_ref().map(|f| f.as_fd()))
        .map_err(|e| Error::kernel("telling stage 2 the mounts ahead are made", e, "report this"))?;
    drop(ns);
    let Some(passed) = handover::take(&mut link)? else {
        std::process::exit(EXIT_SETUP); // the launcher did not start the sandbox after all
    };
    drop(link);
    nix::unistd::dup2_stdin(&passed.stdin)
        .map_err(|e| Error::kernel("dup2 stdin", e.into(), "report this"))?;
    drop(passed.stdin);
    let req: Request = serde_json::from_slice(&passed.request)
        .map_err(|e| Error::refused(format!("bad sandbox request: {e}"), "report this"))?;
    let plan = req.plan.as_ref().ok_or_else(|| {
        Error::refused("a request without namespaces for a sandbox that has them", "report this")
    })?;
    let mut tree = match (passed.kept, made) {
        (0, made) => {
            if let Ok(given_up) = made {
                given_up.give_up(&mut sys)?;
            }
            mounts::private_root(&mut sys)?;
            mounts::Tree::begin(&mut sys)?
        }
        (kept, Ok(tree)) if kept == prefix.len() && plan.ops.starts_with(prefix) => tree,
        _ => {
            return Err(Error::refused("stage 2 kept mounts that pid 1 did not make ahead", "report this"));
        }
    };
    let rest = &plan.ops[passed.kept..];
    let mut given = passed.sources.into_iter();
    let sources = mounts::sources(&mut sys, rest, |_, _, _| {
        given.next().ok_or_else(|| std::io::Error::other("stage 2 passed too few mount sources"))
    })?;
    if given.next().is_some() {
        return Err(Error::refused("stage 2 passed more mount sources than binds", "report this"));
    }
    tree.mount(&mut sys, rest, sources)?;
    tree.finish(&mut sys)?;
    crate::stages::mark("pid 1: mounted, root pivoted");
    lower_nofile(soft)?;
    confine_and_run(&req, prebuilt)
}

/// [`init_ahead`]'s mounts: a mount namespace of its own (returned open, when made), the
/// sources cloned, the new root attached and `prefix` mounted in it. A tree that fails
/// half-way is given up.
fn mount_ahead(sys: &mut RealMounts, prefix: &[Op]) -> (Option<OwnedFd>, Result<mounts::Tree<OwnedFd>>) {
    if let Err(e) = nix::sched::unshare(CloneFlags::CLONE_NEWNS) {
        return (None, Err(Error::kernel("unshare(mount namespace)", e.into(), USERNS_FIX)));
    }
    let ns = std::fs::File::open("/proc/self/ns/mnt").ok().map(OwnedFd::from);
    (ns, build_ahead(sys, prefix))
}

fn build_ahead(sys: &mut RealMounts, prefix: &[Op]) -> Result<mounts::Tree<OwnedFd>> {
    mounts::private_root(sys)?;
    let sources = mounts::sources(sys, prefix, |sys, src, access| sys.clone_tree(src, access))?;
    let mut tree = mounts::Tree::begin(sys)?;
    if let Err(e) = tree.mount(sys, prefix, sources) {
        let _ = tree.give_up(sys);
        return Err(e);
    }
    Ok(tree)
}

/// pid 1 in its tree: the working directory, the capabilities dropped, its own session and
/// terminal, limits, keyring, `no_new_privs`, landlock and seccomp; then the command.
fn confine_and_run(req: &Request, prebuilt: Option<landlock::Prebuilt>) -> Result<std::convert::Infallible> {
    enter_cwd(&req.cwd)?;
    if req.plan.is_some() {
        caps::drop_all()?;
    }
    nix::unistd::setsid().map_err(|e| Error::kernel("setsid", e.into(), "report this"))?;
    if req.tty {
        sys::set_controlling_tty(0)
            .map_err(|e| Error::kernel("TIOCSCTTY on the sandbox pty", e, "report this"))?;
    }
    limits(&req.limits)?;
    sys::join_new_session_keyring()
        .map_err(|e| Error::kernel("keyctl(JOIN_SESSION_KEYRING)", e, "the kernel needs CONFIG_KEYS"))?;
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| Error::kernel("PR_SET_NO_NEW_PRIVS", e.into(), "report this"))?;
    if req.plan.is_some() {
        landlock::apply(&req.landlock, prebuilt)?;
        crate::stages::mark("pid 1: landlock applied");
        seccomp::apply()?;
        crate::stages::mark("pid 1: seccomp applied");
    }
    let program = resolve_program(req)?;
    let argv: Vec<CString> = req.argv.iter().map(|a| cstring(a.as_bytes())).collect::<Result<_>>()?;
    let env: Vec<CString> = req
        .env
        .iter()
        .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<Result<_>>()?;
    crate::stages::mark("pid 1: forks the command");
    // pid 1 starts no thread either; the child only resets signals and execs.
    match sys::fork_single_threaded().map_err(|e| Error::kernel("fork", e, "check RLIMIT_NPROC"))? {
        ForkResult::Child => {
            let _ = signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
            let e = nix::unistd::execve(&program, &argv, &env).unwrap_err();
            eprintln!("ocsb: cannot execute {}: {e}", program.to_string_lossy());
            std::process::exit(EXIT_EXEC);
        }
        ForkResult::Parent { child } => reap(child),
    }
}

fn cstring(b: &[u8]) -> Result<CString> {
    CString::new(b).map_err(|_| Error::refused("an argument or variable contains a NUL byte", "remove it"))
}

fn enter_cwd(cwd: &Path) -> Result<()> {
    nix::unistd::chdir(cwd).map_err(|e| Error::io("enter the working directory", cwd, e.into()))?;
    let now = nix::unistd::getcwd().map_err(|e| Error::io("read the working directory", cwd, e.into()))?;
    if now != cwd {
        return Err(Error::refused(
            format!("working directory resolved to {} instead of {}", now.display(), cwd.display()),
            "a directory on the way is a symbolic link; start from the real path",
        ));
    }
    Ok(())
}

fn limits(l: &Limits) -> Result<()> {
    let err = |e: Errno| Error::kernel("setrlimit", e.into(), "report this");
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(err)?;
    setrlimit(Resource::RLIMIT_NPROC, l.nproc, l.nproc).map_err(err)?;
    Ok(())
}

/// `argv[0]` looked up in the sandbox's own `PATH` (not the launcher's).
fn resolve_program(req: &Request) -> Result<CString> {
    let arg0 = req.argv.first().ok_or_else(|| Error::refused("no command given", "pass a command"))?;
    if arg0.as_bytes().contains(&b'/') {
        return cstring(arg0.as_bytes());
    }
    let path = req.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_default();
    for dir in std::env::split_paths(OsStr::new(&path)) {
        let cand = dir.join(arg0);
        if nix::unistd::access(&cand, nix::unistd::AccessFlags::X_OK).is_ok() && !cand.is_dir() {
            return cstring(cand.as_os_str().as_bytes());
        }
    }
    eprintln!("ocsb: {arg0}: command not found in the sandbox's PATH");
    std::process::exit(EXIT_EXEC);
}

/// pid 1's loop: reap every orphan, forward signals to the command, exit with its status (the
/// kernel then kills whatever is left in the pid namespace).
fn reap(child: Pid) -> ! {
    let mask = handled_set();
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(st) => {
                    if st.pid() == Some(child)
                        && let Some(c) = exit_code(st)
                    {
                        crate::stages::mark("pid 1: the command exited");
                        std::process::exit(c);
                    }
                }
            }
        }
        if let Some(sig) = sys::sigtimedwait(&mask, Duration::from_secs(1))
            && sig != Signal::SIGCHLD
        {
            let _ = signal::kill(child, sig);
        }
    }
}
