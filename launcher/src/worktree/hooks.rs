//! The project's worktree hooks, `.opencode-sandbox/hooks/wt-post-add` and `wt-pre-rm`.
//!
//! Trust: a hook is code from the repository, committed by the project like a Makefile target,
//! and `ocsb wt` runs it **on the host, outside the sandbox**, as the user, with the user's
//! environment (PATH, HOME, SSH_AUTH_SOCK, DOCKER_HOST … — hooks copy `.env` files, pick ports
//! and start stacks, which needs them). Only git's repository-locating variables are removed, so
//! git commands in a hook act on the worktree they run in. This is safe to do because the agent
//! cannot plant or change a hook: `.opencode-sandbox/` is mounted read-only inside the sandbox,
//! and hooks are always read from the main checkout's project directory, never from a worktree
//! (a worktree is writable by the agent, and its copy could have been edited there).
#![allow(unsafe_code)]

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use crate::project::PROJECT_CONF_DIR;

use ocsb_sandbox::checkouts::GIT_REPO_ENV as REPO_ENV;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    PostAdd,
    PreRm,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::PostAdd => "wt-post-add",
            Hook::PreRm => "wt-pre-rm",
        }
    }

    /// `<project>/.opencode-sandbox/hooks/<name>`.
    pub fn path(self, project_dir: &Path) -> PathBuf {
        project_dir.join(PROJECT_CONF_DIR).join("hooks").join(self.name())
    }
}

/// What a hook is told about the worktree.
#[derive(Debug)]
pub struct HookEnv<'a> {
    pub wt_dir: &'a Path,
    pub branch: &'a str,
    pub slug: &'a str,
    pub main_root: &'a Path,
}

/// The hook's path if it exists. A hook that exists but is not an executable regular file is an
/// error rather than skipped: the project asked for it to run, and silently not running it would
/// leave a worktree without its `.env` or its stack.
pub fn find(hook: Hook, project_dir: &Path) -> Result<Option<PathBuf>> {
    let path = hook.path(project_dir);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // A dangling symlink is a broken hook, not a missing one.
            if path.symlink_metadata().is_ok() {
                return Err(Error::failed(
                    format!("hook {} is a symbolic link to nothing", path.display()),
                    format!("fix the link or remove it: rm {}", path.display()),
                ));
            }
            return Ok(None);
        }
        Err(e) => return Err(Error::io("read hook", path, e)),
    };
    if !meta.is_file() {
        return Err(Error::failed(
            format!("hook {} is not a regular file", path.display()),
            format!("make it an executable script, or remove it: rm -r {}", path.display()),
        ));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::failed(
            format!("hook {} exists but is not executable", path.display()),
            format!(
                "chmod +x {} (and commit the mode change), or remove it to skip the hook",
                path.display()
            ),
        ));
    }
    Ok(Some(path))
}

/// Run `hook` in `env.wt_dir` with `args`, the `WT_*` variables and `MAIN_ROOT`. Its stdout goes
/// to our stderr, so that the stdout of `ocsb wt add` is only the new worktree's path. A
/// non-zero exit (or death by a signal) is an error.
pub fn run(hook: Hook, path: &Path, env: &HookEnv<'_>, args: &[String]) -> Result<()> {
    let mut cmd = Command::new(path);
    cmd.args(args)
        .current_dir(env.wt_dir)
        .env("WT_DIR", env.wt_dir)
        .env("WT_BRANCH", env.branch)
        .env("WT_SLUG", env.slug)
        .env("MAIN_ROOT", env.main_root)
        .stdout(std::io::stderr());
    for v in REPO_ENV {
        cmd.env_remove(v);
    }
    let status = cmd.status().map_err(|e| match e.raw_os_error() {
        Some(8) /* ENOEXEC */ => Error::failed(
            format!("cannot run hook {}: it is not a program the kernel can start", path.display()),
            format!("start {} with a `#!/bin/sh` (or other interpreter) line", path.display()),
        ),
        _ => Error::io("run hook", path, e),
    })?;
    if status.success() {
        return Ok(());
    }
    Err(Error::failed(
        format!("hook {} failed ({status})", hook.name()),
        format!("fix {} (its output is above) and run the command again", path.display()),
    ))
}

/// While alive, Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT) from the terminal do not kill `ocsb`.
///
/// Why: the terminal sends them to the whole foreground process group, the hook and `ocsb`
/// alike. The hook should stop, but `ocsb` must live on to roll back the worktree and branch it
/// made; otherwise an interrupted `wt add` leaves exactly the half-made state it promises not to.
/// A handler (not `SIG_IGN`) is installed because handlers are reset to the default by `execve`,
/// so the hook itself still gets the usual behaviour; an ignored disposition would be inherited.
pub struct InterruptGuard {
    old: Vec<(nix::sys::signal::Signal, nix::sys::signal::SigAction)>,
}

extern "C" fn on_interrupt(_: nix::libc::c_int) {
    // Nothing to do: the hook gets the same signal and exits, and `ocsb` sees its status.
}

impl InterruptGuard {
    pub fn install() -> InterruptGuard {
        use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
        let action = SigAction::new(SigHandler::Handler(on_interrupt), SaFlags::SA_RESTART, SigSet::empty());
        let mut old = Vec::new();
        for sig in [Signal::SIGINT, Signal::SIGQUIT] {
            // SAFETY: sigaction(2) with a handler that does nothing, which is async-signal-safe;
            // the previous action is kept and restored by `Drop`.
            if let Ok(prev) = unsafe { sigaction(sig, &action) } {
                old.push((sig, prev));
            }
        }
        InterruptGuard { old }
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        for (sig, prev) in self.old.drain(..) {
            // SAFETY: sigaction(2) restoring the action that was in place before `install`.
            let _ = unsafe { nix::sys::signal::sigaction(sig, &prev) };
        }
    }
}
