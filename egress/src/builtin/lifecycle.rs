//! The builtin backend's lifecycle: a detached `serve` process, driven through its control
//! socket ([`super::control`]), with its access log in the state directory.

use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ocsb_policy::egress::Policy;

use super::control;
use super::serve::ServeArgs;
use crate::backend::{Lifecycle, Observed, Up};
use crate::error::{Error, Result};
use crate::instance::Instance;
use crate::listen::ListenPlan;
use crate::logline::{LogsOptions, emit};
use crate::paths::EgressPaths;
use crate::report::UpAction;
use crate::squid::Progress;

/// How long `up` waits for a freshly started `serve` to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `down` waits for the server to exit before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Builtin<'a> {
    inst: &'a Instance,
    paths: EgressPaths,
    /// What a status asked ahead got ([`crate::lifecycle::Asked`]), when something accepted
    /// it: `up` starts from it rather than asking again (a filter that took the question and
    /// gave no answer is restarted, as one that gives none now would be).
    answered: Option<Option<control::StatusAnswer>>,
}

impl<'a> Builtin<'a> {
    pub(crate) fn new(inst: &'a Instance) -> Self {
        Self { inst, paths: inst.paths(), answered: None }
    }

    /// [`Builtin::new`], with what a status asked ahead got.
    pub(crate) fn answered(inst: &'a Instance, answer: Option<Option<control::StatusAnswer>>) -> Self {
        Self { answered: answer, ..Self::new(inst) }
    }

    fn serve_args(&self, plan: &ListenPlan) -> ServeArgs {
        ServeArgs {
            state_dir: self.inst.state_dir.clone(),
            user_config_dir: self.inst.user_config_dir.clone(),
            project_dir: self.inst.project_dir.clone(),
            listen: plan.addrs.clone(),
            limits: Default::default(),
        }
    }

    /// A filter answers already: it must listen where the settings say, then re-read its rules.
    /// *Why `policy` is not sent over*: `serve` is another process that loads the layers itself
    /// (as on SIGHUP), and its answer says whether they compiled there; `policy` only gives the
    /// report its hash.
    fn reload(&self, running: control::StatusAnswer, policy: &Policy, plan: &ListenPlan) -> Result<Up> {
        if running.listen != plan.addrs {
            let shown =
                |v: &[std::net::SocketAddr]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ");
            return Err(Error::state(
                format!(
                    "the running filter listens on {} but the settings ask for {}",
                    shown(&running.listen),
                    shown(&plan.addrs)
                ),
                "run `ocsb egress down` and `ocsb egress up` to restart it on the new addresses",
            ));
        }
        let process = Some(format!("{}@{}", running.pid, running.started));
        // Computed once: every start asks, and the rules' text is hashed whole.
        let config_hash = policy.hash();
        if running.policy_hash == config_hash {
            // The filter reads its rule files on reload; the same rules need no round trip.
            return Ok(Up { action: UpAction::Current, listen: running.listen, config_hash, process });
        }
        let r = control::reload(&self.paths.control_socket(), Duration::from_secs(10))?;
        if !r.ok {
            let msg = r.error.unwrap_or_else(|| "unknown error".into());
            return Err(Error::state(
                format!("reload refused, the old rules stay in force: {msg}"),
                "fix the rule named above and run `ocsb egress up` again",
            ));
        }
        // The filter reads the rule files of the directories it was started with; another
        // config directory here (or a state directory shared by two projects) gives other rules.
        if let Some(running) = r.hash.as_deref() {
            same_rules(running, policy)?;
        }
        Ok(Up { action: UpAction::Reloaded, listen: running.listen, config_hash, process })
    }

    /// No filter answers: start `serve` in a session of its own and wait until it answers.
    fn start(&self, policy: &Policy, plan: &ListenPlan) -> Result<Up> {
        let paths = &self.paths;
        let Some((program, leading)) = self.inst.serve_command.split_first() else {
            return Err(Error::state(
                "no command to start the builtin filter was given",
                "the launcher must set Instance::serve_command",
            ));
        };
        let err_file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(paths.serve_err())
                .map_err(|e| Error::io("cannot create", paths.serve_err(), e))?
        };
        let mut cmd = Command::new(program);
        cmd.args(leading)
            .args(self.serve_args(plan).to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file);
        // Detach: own session, so the filter outlives the command (and the terminal) that started
        // it, and no descriptor of the caller's: a pipe it inherited (`out=$(ocsb egress up)`,
        // `ocsb exec … | tee log`) would stay open, and the reader would wait for the filter to exit.
        // SAFETY: setsid and close_range are async-signal-safe system calls that touch no memory of
        // the parent; CLOSE_RANGE_CLOEXEC only marks descriptors 3 and up close-on-exec (std's own
        // error-report pipe already is), so nothing the child still needs before exec is closed.
        #[allow(unsafe_code)]
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| Error::io("cannot start the filter process", program, e))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(st) = control::status(&paths.control_socket(), Duration::from_secs(2)) {
                // Reap the child when it eventually exits, without blocking the caller.
                if st.build != control::BUILD {
                    let _ = control::stop(&paths.control_socket(), Duration::from_secs(2));
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::state(
                        format!(
                            "the filter program {} was built from other sources than this ocsb (it is {}, \
                             ocsb is {}): it would judge requests by other code",
                            program.to_string_lossy(),
                            if st.build.is_empty() { "older" } else { &st.build },
                            control::BUILD
                        ),
                        "build both again with `make` (or `make install`), or remove the stale program",
                    ));
                }
                std::thread::spawn(move || {
                    let _ = child.wait();
                });
                same_rules(&st.policy_hash, policy)?;
                let process = Some(format!("{}@{}", st.pid, st.started));
                return Ok(Up {
                    action: UpAction::Started,
                    listen: st.listen,
                    config_hash: policy.hash(),
                    process,
                });
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

    /// The pid is our `serve` for this state directory (the pid file alone could be stale or
    /// replaced by another process).
    /// Wait until the server process is gone: "stopped" is said only when it is true. A server
    /// that did not answer `stop` gets SIGTERM first; one that outlives [`STOP_TIMEOUT`] is killed.
    fn wait_gone(&self, pid: i32, terminate: bool) -> Result<()> {
        use nix::sys::signal::{Signal, kill};
        let pid_t = nix::unistd::Pid::from_raw(pid);
        if terminate {
            let _ = kill(pid_t, Signal::SIGTERM);
        }
        for (limit, then) in [(STOP_TIMEOUT, Some(Signal::SIGKILL)), (Duration::from_secs(2), None)] {
            let deadline = Instant::now() + limit;
            while self.is_our_server(pid) {
                if Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !self.is_our_server(pid) {
                return Ok(());
            }
            if let Some(sig) = then {
                let _ = kill(pid_t, sig);
            }
        }
        Err(Error::state(
            format!("the builtin filter (pid {pid}) is still running after SIGKILL"),
            format!("check it with `ps -p {pid}`; it may be stuck in the kernel"),
        ))
    }

    fn is_our_server(&self, pid: i32) -> bool {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let state = self.inst.state_dir.to_string_lossy();
        args.iter().any(|a| *a == b"serve")
            && args.windows(2).any(|w| w[0] == b"--state-dir" && w[1] == state.as_bytes())
    }
}

impl Lifecycle for Builtin<'_> {
    fn up(&self, policy: &Policy, plan: &ListenPlan, progress: &Progress) -> Result<Up> {
        let status = match &self.answered {
            Some(asked) => asked.clone(),
            None => control::status(&self.paths.control_socket(), Duration::from_secs(3)).ok(),
        };
        match status {
            // A filter of another build (the one running before ocsb was upgraded or rebuilt)
            // would go on judging requests by its own code: it is replaced, not reloaded, and
            // `start` refuses in turn if the program on disk is stale too.
            Some(running) if running.build != control::BUILD => {
                progress(&format!(
                    "the running filter (pid {}) was built from other sources than this ocsb; restarting it",
                    running.pid
                ));
                self.down()?;
                self.start(policy, plan)
            }
            Some(running) => self.reload(running, policy, plan),
            None => self.start(policy, plan),
        }
    }

    fn down(&self) -> Result<bool> {
        let paths = &self.paths;
        let pid = std::fs::read_to_string(paths.pid_file()).ok().and_then(|s| s.trim().parse::<i32>().ok());
        let asked = control::stop(&paths.control_socket(), Duration::from_secs(3)).is_ok();
        // Signal a pid only if it really is our server (a stale pid file may name anything).
        let ours = pid.filter(|p| self.is_our_server(*p));
        if !asked && ours.is_none() {
            let _ = std::fs::remove_file(paths.pid_file());
            return Ok(false);
        }
        match ours {
            Some(pid) => self.wait_gone(pid, !asked)?,
            None => {
                let deadline = Instant::now() + STOP_TIMEOUT;
                while paths.control_socket().exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = std::fs::remove_file(paths.pid_file());
        let _ = std::fs::remove_file(paths.control_socket());
        Ok(true)
    }

    fn observe(&self) -> Result<Option<Observed>> {
        // No answer means no filter: a crashed one is as good as none for `status`.
        let Ok(st) = control::status(&self.paths.control_socket(), Duration::from_secs(3)) else {
            return Ok(None);
        };
        Ok(Some(Observed {
            running: true,
            listen: Some(st.listen),
            running_hash: Some(st.policy_hash),
            process: Some(st.pid.to_string()),
            health: None,
        }))
    }

    fn render(&self, policy: &Policy, _plan: &ListenPlan) -> Result<String> {
        Ok(crate::render::builtin(policy))
    }

    fn config_hash(&self, policy: &Policy, _plan: &ListenPlan) -> Option<String> {
        Some(policy.hash())
    }

    fn logs(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
        let werr = |e: std::io::Error| Error::net("cannot write the log", e);
        let path = self.paths.access_log();
        let mut f = std::fs::File::open(&path)
            .map_err(|e| Error::io("no access log yet (has the filter run? `ocsb egress up`)", &path, e))?;
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
            std::thread::sleep(Duration::from_millis(100));
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
                partial.push_str(&buf);
                if buf.ends_with('\n') {
                    emit(&partial, opts, out).map_err(werr)?;
                    partial.clear();
                }
                buf.clear();
            }
            out.flush().map_err(werr)?;
        }
    }
}

/// The running filter's rules must be the ones this command compiled.
fn same_rules(running: &str, policy: &Policy) -> Result<()> {
    if running == policy.hash() {
        return Ok(());
    }
    Err(Error::state(
        "the running filter loads its rules from other files than this command (another user config \
         directory, or a state directory shared with another project)",
        "restart it from here: `ocsb egress down && ocsb egress up`",
    ))
}
