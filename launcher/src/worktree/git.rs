//! Running the real `git` binary, so worktrees follow the user's git (its config, its own hooks
//! such as `post-checkout`, LFS filters). Every call passes the repository with `-C`, puts `--`
//! or `--end-of-options` before anything that came from the user, removes git's
//! repository-locating variables from the environment (set when `ocsb` runs from a git hook or
//! alias, they would redirect every command to another repository) and turns `core.fsmonitor`
//! off: the agent can write the work trees git looks at, so ocsb's own git runs nothing it
//! did not have to (the hooks stay the user's: read-only in every sandbox).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::error::{Error, Result};

use super::names::shown;
use super::porcelain::{self, Entry};

/// A repository (or a worktree of it) that git commands run in.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git { dir: dir.into() }
    }

    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = ocsb_sandbox::checkouts::user_git(&self.dir);
        cmd.args(args);
        cmd
    }

    /// Run git, capturing its output. Fails only when git cannot be started.
    pub fn run<I, S>(&self, args: I) -> Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args).output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::failed(
                    "`git` was not found on PATH; `ocsb wt` uses your git",
                    "install git (Debian/Ubuntu: sudo apt install git)",
                )
            } else {
                Error::io("run git in", self.dir.clone(), e)
            }
        })
    }

    /// Run git and return its stdout; a non-zero exit becomes an error that quotes git's stderr
    /// and carries `fix`.
    pub fn ok<I, S>(&self, args: I, fix: &str) -> Result<Vec<u8>>
    where
        I: IntoIterator<Item = S> + Clone,
        S: AsRef<OsStr>,
    {
        let out = self.run(args.clone())?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(self.failure(args, &out, fix))
    }

    /// The error for a failed git command: the command line, git's own message, and `fix`.
    pub fn failure<I, S>(&self, args: I, out: &Output, fix: &str) -> Error
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let line: Vec<String> = args.into_iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr = stderr.trim();
        Error::failed(
            format!(
                "`git -C {} {}` failed ({}){}{}",
                self.dir.display(),
                line.join(" "),
                out.status,
                if stderr.is_empty() { "" } else { ":\n  " },
                stderr.replace('\n', "\n  ")
            ),
            fix,
        )
    }

    /// Every worktree of the repository, main first.
    pub fn worktrees(&self) -> Result<Vec<Entry>> {
        let out = self.ok(
            ["worktree", "list", "--porcelain", "-z"],
            "check that the repository is intact (`git worktree list`); git 2.36 or newer is needed",
        )?;
        porcelain::parse(&out).map_err(|e| {
            Error::failed(
                format!("cannot read the output of `git worktree list --porcelain -z`: {e}"),
                "update git to 2.36 or newer",
            )
        })
    }

    /// `git check-ref-format --branch`: git's own rules for a new branch name. The name has
    /// already passed [`super::names::check_branch`], so it cannot start with `-`.
    pub fn check_branch_name(&self, branch: &str) -> Result<()> {
        let out = self.run(["check-ref-format", "--branch", branch])?;
        if out.status.success() {
            return Ok(());
        }
        Err(Error::failed(
            format!("git does not accept {} as a branch name", shown(branch)),
            "see `git help check-ref-format` (no '~', '^', ':', '?', '*', '[', no trailing '.lock' \
             or '/'); e.g. feature/cart-42",
        ))
    }

    /// Whether `refs/heads/<branch>` exists.
    pub fn branch_exists(&self, branch: &str) -> Result<bool> {
        let refname = format!("refs/heads/{branch}");
        let out = self.run(["show-ref", "--verify", "--quiet", "--", &refname])?;
        Ok(out.status.success())
    }

    /// Resolve a revision to a full commit id. `rev` comes after `--end-of-options`, so even a
    /// value starting with `-` is read as a revision, never as an option.
    pub fn resolve_commit(&self, rev: &str, setting: &str) -> Result<String> {
        let spec = format!("{rev}^{{commit}}");
        let out = self.run(["rev-parse", "--verify", "--quiet", "--end-of-options", &spec])?;
        if !out.status.success() {
            return Err(Error::failed(
                format!("{setting}: {} is not a commit in {}", shown(rev), self.dir.display()),
                if rev == "HEAD" {
                    "make a first commit (`git commit`), or set OCSB_WT_BASE to an existing branch"
                        .to_string()
                } else {
                    format!(
                        "set OCSB_WT_BASE to an existing branch, tag or commit (`git branch -a` lists them), not {}",
                        shown(rev)
                    )
                },
            ));
        }
        trim_line(&out.stdout)
    }

    /// The porcelain status of a work tree including untracked (not ignored) files; empty when
    /// clean. Ignored files do not count: `git worktree remove` deletes them too.
    pub fn status(&self) -> Result<Vec<String>> {
        let out = self.ok(
            ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=none"],
            "check the worktree with `git status`",
        )?;
        Ok(out
            .split(|&b| b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect())
    }
}

fn trim_line(out: &[u8]) -> Result<String> {
    let s = std::str::from_utf8(out).map_err(|_| {
        Error::failed("git printed a path that is not UTF-8", "move the repository to a UTF-8 path")
    })?;
    Ok(s.trim_end_matches('\n').to_string())
}
