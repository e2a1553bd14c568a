//! One lifecycle for both backends: `up`, `down`, `status`, `logs`, `render` (and `verify` in
//! [`crate::verify`]). Synchronous API for the launcher; the squid backend runs its Docker calls
//! on a private runtime.
//!
//! [`Filter`] is the facade: it picks the backend once, from [`Instance::backend`], and each of
//! its methods does what is common to both (the listen plan, the state directory, the report
//! shapes) around one call into that backend. The free functions are shorthands for a
//! `Filter` used once.

use std::io::Write;
use std::sync::Arc;

use ocsb_policy::egress::Policy;

use crate::backend::Lifecycle;
use crate::builtin::lifecycle::Builtin;
use crate::error::{Error, Result};
use crate::instance::{Backend, Instance};
use crate::logline::LogsOptions;
use crate::report::{Status, UpReport, freshness};
use crate::squid::Progress;
use crate::squid::lifecycle::Squid;

/// One project's egress filter, whichever backend enforces it.
pub struct Filter<'a> {
    inst: &'a Instance,
    inner: Box<dyn Lifecycle + 'a>,
}

impl<'a> Filter<'a> {
    pub fn new(inst: &'a Instance) -> Self {
        let inner: Box<dyn Lifecycle + 'a> = match inst.backend {
            Backend::Builtin => Box::new(Builtin::new(inst)),
            Backend::Squid => Box::new(Squid::new(inst)),
        };
        Self { inst, inner }
    }

    /// `egress up`: start the filter with `policy`, or reload it without a restart. The caller
    /// compiles the rules ([`Instance::load_policy`]), so invalid rules fail before anything is
    /// touched and a running filter keeps its old ones.
    pub fn up(&self, policy: &Policy, progress: Progress) -> Result<UpReport> {
        let plan = self.inst.listen_plan();
        let paths = self.inst.paths();
        paths.create_private().map_err(|e| Error::io("cannot create", &paths.dir, e))?;
        let up = self.inner.up(policy, &plan, &progress)?;
        Ok(UpReport {
            action: up.action,
            backend: self.inst.backend,
            listen: up.listen.iter().map(|a| a.to_string()).collect(),
            listen_note: plan.note(),
            config_hash: up.config_hash,
            process: up.process,
        })
    }

    /// `egress down`. Returns whether something was running.
    pub fn down(&self) -> Result<bool> {
        self.inner.down()
    }

    /// `egress status`. Compiles the rules itself: a status must also report rules that no
    /// longer compile (the running filter keeps its old ones).
    pub fn status(&self) -> Result<Status> {
        let plan = self.inst.listen_plan();
        let policy = self.inst.load_policy();
        let rules_error = policy.as_ref().err().map(|e| e.to_string());
        let wanted_hash = policy.as_ref().ok().and_then(|p| self.inner.config_hash(p, &plan));
        let found = self.inner.observe()?;
        let mut st = Status {
            running: false,
            backend: self.inst.backend,
            listen: plan.addrs.iter().map(|a| a.to_string()).collect(),
            listen_note: plan.note(),
            config: String::new(),
            running_hash: None,
            wanted_hash,
            process: None,
            health: None,
            rules_error,
        };
        if let Some(o) = found {
            st.running = o.running;
            if let Some(listen) = o.listen {
                st.listen = listen.iter().map(|a| a.to_string()).collect();
            }
            st.running_hash = o.running_hash;
            st.process = o.process;
            st.health = o.health;
        }
        st.config = freshness(st.running, st.running_hash.as_deref(), st.wanted_hash.as_deref());
        Ok(st)
    }

    /// `egress logs`: every request and refusal, denials highlighted, or JSON lines.
    pub fn logs(&self, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
        self.inner.logs(opts, out)
    }

    /// `egress render`: squid.conf for squid, the normalised policy for builtin.
    pub fn render(&self, policy: &Policy) -> Result<String> {
        self.inner.render(policy, &self.inst.listen_plan())
    }
}

/// [`Filter::up`] once.
pub fn up(inst: &Instance, policy: &Policy, progress: Progress) -> Result<UpReport> {
    Filter::new(inst).up(policy, progress)
}

/// The running builtin filter's status, asked on a thread ahead of [`up_after`]: the round trip
/// to it (a wake-up of another process) overlaps what the caller does meanwhile. It only asks:
/// nothing is started, reloaded or written, so it may be asked before the caller's checks.
/// *Why through the directory*: `<state>/egress` is opened first, without following a link,
/// and the socket reached through that descriptor, as `up` reaches it once the caller has made
/// sure the directory is one; anything else (no directory yet, a link, squid) asks nothing,
/// and `up_after` asks as `up` does. The answer is as old as the caller's checks: a filter
/// another launcher restarts meanwhile is taken for the one that answered, which leaves the
/// sandbox without a filter (it fails closed) until the next start, as a restart between
/// `up`'s question and the sandbox's start always could. Dropped unanswered (a start the checks
/// refused), its thread is left to end by itself: it only asks, and the refusal need not wait.
pub struct Asked(Option<std::thread::JoinHandle<Option<Option<crate::builtin::control::StatusAnswer>>>>);

impl Asked {
    /// Ask the filter of `inst` now, on a thread.
    pub fn now(inst: &Instance) -> Asked {
        use nix::fcntl::{OFlag, open, openat};
        use nix::sys::stat::Mode;
        if inst.backend != Backend::Builtin {
            return Asked(None);
        }
        // The state directory itself is the user's to place (it may be a link they made).
        let dir = open(&inst.state_dir, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .and_then(|state| {
                openat(
                    &state,
                    crate::paths::DIR,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
            });
        let Ok(dir) = dir else { return Asked(None) };
        let thread = std::thread::Builder::new().name("ocsb-filter-ask".into()).spawn(move || {
            use std::os::fd::AsFd;
            crate::builtin::control::status_in(dir.as_fd(), std::time::Duration::from_secs(3)).map(|r| r.ok())
        });
        Asked(thread.ok())
    }

    /// `None`: nothing accepted the question (asked again by `up`); `Some(None)`: something did
    /// and gave no answer within the time `up` gives one.
    fn answer(mut self) -> Option<Option<crate::builtin::control::StatusAnswer>> {
        self.0.take()?.join().ok().flatten()
    }
}

/// [`up`], starting from what the status `asked` ahead got (otherwise as `up` does: where
/// nothing accepted the question then, it is asked again, and the filter started if nothing
/// answers).
pub fn up_after(inst: &Instance, policy: &Policy, progress: Progress, asked: Asked) -> Result<UpReport> {
    match (inst.backend, asked.answer()) {
        (Backend::Builtin, Some(answer)) => {
            let filter = Filter { inst, inner: Box::new(Builtin::answered(inst, Some(answer))) };
            filter.up(policy, progress)
        }
        _ => up(inst, policy, progress),
    }
}

/// [`Filter::down`] once.
pub fn down(inst: &Instance) -> Result<bool> {
    Filter::new(inst).down()
}

/// [`Filter::status`] once.
pub fn status(inst: &Instance) -> Result<Status> {
    Filter::new(inst).status()
}

/// [`Filter::logs`] once.
pub fn logs(inst: &Instance, opts: &LogsOptions, out: &mut dyn Write) -> Result<()> {
    Filter::new(inst).logs(opts, out)
}

/// `egress render` for this project's rules as they are on disk now.
pub fn render(inst: &Instance) -> Result<String> {
    Filter::new(inst).render(&inst.load_policy()?)
}

/// Print progress messages on stderr (the launcher's default).
pub fn stderr_progress() -> Progress {
    Arc::new(|m: &str| eprintln!("egress: {m}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::control::StatusAnswer;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::path::Path;

    fn instance(state_dir: &Path) -> Instance {
        Instance {
            name: "t".into(),
            backend: Backend::Builtin,
            state_dir: state_dir.to_path_buf(),
            user_config_dir: state_dir.join("cfg"),
            project_dir: state_dir.join("proj"),
            port: 3128,
            docker_gw: crate::listen::GatewaySetting::Detect,
            serve_command: vec![],
            image_source: crate::squid::ImageSource::Auto,
            squid_overrides: Default::default(),
        }
    }

    /// A control socket in `dir` that answers one `status` with `answer` if asked within
    /// `wait`; the thread returns whether it was asked.
    fn answering(dir: &Path, answer: &StatusAnswer, wait: u64) -> std::thread::JoinHandle<bool> {
        let listener = UnixListener::bind(dir.join(crate::paths::CONTROL_SOCKET)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let line = format!("{}\n", serde_json::to_string(answer).unwrap());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait);
            while std::time::Instant::now() < deadline {
                if let Ok((mut c, _)) = listener.accept() {
                    c.set_nonblocking(false).unwrap();
                    let mut req = String::new();
                    BufReader::new(&c).read_line(&mut req).unwrap();
                    assert_eq!(req, "status\n");
                    c.write_all(line.as_bytes()).unwrap();
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            false
        })
    }

    #[test]
    fn a_status_is_asked_ahead_through_the_filters_directory_and_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join("state");
        std::fs::create_dir_all(state.join(crate::paths::DIR)).unwrap();
        let answer = StatusAnswer {
            ok: true,
            backend: "builtin".into(),
            pid: 42,
            listen: vec!["127.0.0.1:3128".parse().unwrap()],
            policy_hash: "h".into(),
            started: 7,
            open_connections: 0,
            build: crate::builtin::control::BUILD.into(),
        };
        let server = answering(&state.join(crate::paths::DIR), &answer, 10_000);
        assert_eq!(Asked::now(&instance(&state)).answer(), Some(Some(answer.clone())));
        assert!(server.join().unwrap());

        // `egress` a link to a directory whose socket answers: nothing is asked there.
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::remove_dir_all(state.join(crate::paths::DIR)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join(crate::paths::DIR)).unwrap();
        let planted = answering(&elsewhere, &answer, 300);
        // No thread is even started: the directory is refused before anything is asked.
        let asked = Asked::now(&instance(&state));
        assert!(asked.0.is_none());
        assert_eq!(asked.answer(), None);
        assert!(!planted.join().unwrap(), "the planted socket was asked");

        // No state directory yet, or squid: nothing asked, and `up_after` asks as `up` does.
        assert_eq!(Asked::now(&instance(&t.path().join("none"))).answer(), None);
        let squid = Instance { backend: Backend::Squid, ..instance(&state) };
        assert!(Asked::now(&squid).0.is_none());
    }
}
