//! `ocsb wt add | rm | list`: one session, one worktree.
//!
//! * [`names`] (pure): branch-name and slug rules, the slug derivation, the worktree's path.
//! * [`porcelain`] (pure): parsing `git worktree list --porcelain -z`.
//! * [`git`]: running the user's real `git`.
//! * [`hooks`]: the project's `wt-post-add` / `wt-pre-rm` hooks (and why running them is safe).
//!
//! All three commands act on the **main checkout**: run from inside a worktree, they use the main
//! checkout's settings and hooks, so that worktrees of worktrees do not appear and the default
//! `../<project>-worktrees` does not move with the current directory.
//!
//! `wt add` leaves nothing half-made: if `git worktree add` or the post-add hook fails, the new
//! worktree is removed, the new branch deleted and a worktrees directory that `wt add` created is
//! removed again. Ctrl-C during `git worktree add` or the hook stops them but not `ocsb`, which
//! then rolls back ([`hooks::InterruptGuard`]). Only a SIGKILL or SIGTERM sent to `ocsb` itself
//! can leave a worktree behind; `ocsb wt rm <slug> --force` and `git branch -D <branch>` clean up.

pub mod git;
pub mod hooks;
pub mod names;
pub mod porcelain;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::project::Project;

use self::git::Git;
use self::hooks::{Hook, HookEnv};
use self::names::{Query, SlugRule, shown};
use self::porcelain::Entry;

/// The settings `ocsb wt` reads, checked.
struct WtSettings {
    /// `OCSB_WORKTREES_DIR`, absolute (not necessarily existing yet).
    dir: PathBuf,
    prefix: String,
    /// `OCSB_WT_BASE`; empty = the current HEAD.
    base: String,
    slug_rule: SlugRule,
}

impl WtSettings {
    /// The settings layer checks these values already (naming file and line); the checks here
    /// repeat the ones that keep paths and git command lines safe, so this module does not
    /// depend on another crate for its own safety.
    fn read(project: &Project) -> Result<WtSettings> {
        let s = &project.settings;
        let dir = s.worktrees_dir();
        if dir.as_os_str().is_empty() {
            return Err(Error::failed(
                "OCSB_WORKTREES_DIR is empty",
                "set OCSB_WORKTREES_DIR to a directory (default: ../<project>-worktrees)",
            ));
        }
        let prefix = s.wt_prefix().to_string();
        names::check_prefix(&prefix)?;
        let base = s.wt_base().unwrap_or_default().to_string();
        names::check_base(&base)?;
        let slug_rule = SlugRule::new(s.scalar("OCSB_WT_SLUG_REGEX"))?;
        Ok(WtSettings { dir: project.dir.join(dir), prefix, base, slug_rule })
    }
}

/// The repository as `ocsb wt` sees it.
struct Context {
    /// The project (in the main checkout) whose settings and hooks apply.
    project: Project,
    settings: WtSettings,
    /// The checkout `ocsb` was started in; its HEAD is the default base.
    here: Git,
    /// The main checkout's root (`MAIN_ROOT`).
    main_root: PathBuf,
    /// git, run in the main checkout.
    main: Git,
}

fn canonical(p: &Path) -> Result<PathBuf> {
    p.canonicalize().map_err(|e| Error::io("resolve", p, e))
}

impl Context {
    fn load(explicit: Option<&Path>) -> Result<Context> {
        // `Project::load` resolves a linked worktree to its main checkout from the pointer files
        // (never from `git worktree list`, whose first line the main `.git`'s `commondir` decides).
        let project = Project::load(explicit)?;
        let here = Git::new(canonical(&project.checkout)?);
        let main_root = canonical(&crate::project::git_toplevel(&project.dir).ok_or_else(|| {
            Error::failed(
                format!("{} is not inside a git work tree; `ocsb wt` needs one", project.dir.display()),
                "run it in a git repository (or create one with `git init` and a first commit)",
            )
        })?)?;
        if !main_root.join(".git").is_dir() {
            return Err(Error::failed(
                format!(
                    "{} has no .git directory of its own (a submodule or a bare layout)",
                    main_root.display()
                ),
                "run `ocsb wt` in a repository with a main checkout",
            ));
        }
        // A sandbox must not have planted anything git would obey here.
        crate::session::Session::new(&project)?.refuse_planted("run git here")?;
        let settings = WtSettings::read(&project)?;
        let main = Git::new(&main_root);
        Ok(Context { project, settings, here, main_root, main })
    }

    /// The worktrees directory, resolved through symlinks; `None` if it does not exist.
    fn worktrees_dir(&self) -> Result<Option<PathBuf>> {
        match self.settings.dir.canonicalize() {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("resolve the worktrees directory", self.settings.dir.clone(), e)),
        }
    }

    /// The linked worktrees that live directly in the worktrees directory.
    fn managed(&self) -> Result<Vec<Entry>> {
        let Some(dir) = self.worktrees_dir()? else { return Ok(Vec::new()) };
        let entries = self.main.worktrees()?;
        // Compared through symlinks: a worktree added by hand via another spelling of the path counts.
        let in_dir =
            |e: &Entry| e.path.parent().is_some_and(|p| p == dir || p.canonicalize().is_ok_and(|c| c == dir));
        Ok(entries.into_iter().skip(1).filter(in_dir).collect())
    }
}

/// Add an explanation to an error without losing its fix.
fn with_note(e: Error, note: &str) -> Error {
    match e {
        Error::Failed { what, fix } => Error::Failed { what: format!("{what}\n  {note}"), fix },
        other => Error::failed(format!("{other}\n  {note}"), "see the message above"),
    }
}

/// What `wt add` has made so far, so that a failure can take it back.
struct Made<'a> {
    git: &'a Git,
    branch: &'a str,
    branch_created: bool,
    target: &'a Path,
    worktree_created: bool,
    /// The worktrees directory, if `wt add` created it.
    dir_created: Option<&'a Path>,
}

impl Made<'_> {
    /// Remove everything made, in reverse order. Returns a note for the error message.
    fn roll_back(&self) -> String {
        let mut done = Vec::new();
        let mut left = Vec::new();
        if self.worktree_created || self.target.symlink_metadata().is_ok() {
            let args = ["worktree", "remove", "--force", "--force", "--"];
            let ok = self
                .git
                .run(args.iter().map(OsStr::new).chain([self.target.as_os_str()]))
                .is_ok_and(|o| o.status.success());
            // Also forget a registration whose directory is already gone.
            let _ = self.git.run(["worktree", "prune"]);
            if ok || self.target.symlink_metadata().is_err() {
                done.push(format!("removed {}", self.target.display()));
            } else {
                left.push(format!("git worktree remove --force --force {}", self.target.display()));
            }
        }
        if self.branch_created {
            let ok = self.git.run(["branch", "-D", "--", self.branch]).is_ok_and(|o| o.status.success());
            if ok {
                done.push(format!("deleted branch {}", self.branch));
            } else {
                left.push(format!("git branch -D {}", self.branch));
            }
        }
        if let Some(dir) = self.dir_created {
            // Only if empty: other worktrees may have appeared meanwhile.
            let _ = std::fs::remove_dir(dir);
        }
        let mut note = String::from("rolled back");
        if !done.is_empty() {
            note.push_str(&format!(": {}", done.join(", ")));
        }
        if !left.is_empty() {
            note.push_str(&format!("; could NOT clean up, run by hand: {}", left.join(" && ")));
        }
        note
    }
}

/// `ocsb wt add <branch> [args…]`. Prints the new worktree's path on stdout (so
/// `cd "$(ocsb wt add x)"` works); everything else goes to stderr.
pub fn add(explicit: Option<&Path>, branch: &str, args: &[String]) -> Result<()> {
    names::check_branch(branch)?;
    let cx = Context::load(explicit)?;
    let git = &cx.main;
    git.check_branch_name(branch)?;
    if git.branch_exists(branch)? {
        return Err(Error::failed(
            format!("branch {} already exists", shown(branch)),
            "`ocsb wt add` starts a new branch: choose another name (or check the existing one out \
             yourself with `git worktree add <path> <branch>`)",
        ));
    }
    let slug = cx.settings.slug_rule.derive(branch)?;
    let (base_name, base_setting) = match cx.settings.base.as_str() {
        "" => ("HEAD", "the current HEAD"),
        b => (b, "OCSB_WT_BASE"),
    };
    let commit = cx.here.resolve_commit(base_name, base_setting)?;
    // Checked before anything is created: a broken hook must not leave a worktree behind.
    let hook = hooks::find(Hook::PostAdd, &cx.project.dir)?;
    if cx.settings.slug_rule.has_regex() && !slug.from_regex {
        eprintln!(
            "ocsb: branch {} does not match OCSB_WT_SLUG_REGEX; using slug {}",
            shown(branch),
            shown(&slug.slug)
        );
    }

    let dir_existed = cx.settings.dir.exists();
    std::fs::create_dir_all(&cx.settings.dir)
        .map_err(|e| Error::io("create the worktrees directory", cx.settings.dir.clone(), e))?;
    let wt_dir = canonical(&cx.settings.dir)?;
    let dir_created = (!dir_existed).then_some(wt_dir.as_path());
    let remove_dir_created = || {
        if let Some(d) = dir_created {
            let _ = std::fs::remove_dir(d);
        }
    };
    let target =
        names::target_path(&wt_dir, &cx.settings.prefix, &slug.slug).inspect_err(|_| remove_dir_created())?;
    if target.symlink_metadata().is_ok() {
        return Err(Error::failed(
            format!("{} already exists", target.display()),
            format!("remove it (`ocsb wt rm {}`) or choose a branch name with another slug", slug.slug),
        ));
    }
    let mut made =
        Made { git, branch, branch_created: false, target: &target, worktree_created: false, dir_created };

    let args_add = ["worktree", "add", "--quiet", "-b", branch, "--"];
    let cmd: Vec<&OsStr> =
        args_add.iter().map(OsStr::new).chain([target.as_os_str(), OsStr::new(&commit)]).collect();
    // From here until the end, Ctrl-C stops git or the hook but not the rollback.
    let _interrupts = hooks::InterruptGuard::install();
    let out = match git.run(&cmd) {
        Ok(out) => out,
        Err(e) => return Err(with_note(e, &made.roll_back())),
    };
    // The branch did not exist before (checked above), so deleting it in a rollback is safe even
    // when git cannot be asked.
    made.branch_created = git.branch_exists(branch).unwrap_or(true);
    made.worktree_created = target.exists();
    if !out.status.success() {
        let e = git.failure(&cmd, &out, "see git's message above");
        return Err(with_note(e, &made.roll_back()));
    }

    if let Some(hook_path) = hook {
        let env = HookEnv { wt_dir: &target, branch, slug: &slug.slug, main_root: &cx.main_root };
        eprintln!("ocsb: running {} in {}", hook_path.display(), target.display());
        if let Err(e) = hooks::run(Hook::PostAdd, &hook_path, &env, args) {
            return Err(with_note(e, &made.roll_back()));
        }
    }
    eprintln!(
        "ocsb: created worktree {} on new branch {} from {} ({})",
        target.display(),
        branch,
        base_name,
        &commit[..commit.len().min(12)]
    );
    println!("{}", target.display());
    Ok(())
}

/// Find the worktree `arg` names: a path (anything with a `/`), else a slug or a directory name
/// under the worktrees directory. The main checkout is never a match.
#[allow(clippy::expect_used, reason = "the match was made among these entries")]
fn find(cx: &Context, arg: &str) -> Result<Entry> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("read the current directory", ".", e))?;
    let not_found = |what: String| {
        Error::failed(
            what,
            "`ocsb wt list` shows the worktrees and their slugs; `git worktree list` shows all",
        )
    };
    match Query::parse(arg, &cwd) {
        Query::Path(p) => {
            // A worktree whose directory is gone is still found by its lexical path.
            let want = p.canonicalize().unwrap_or(p.clone());
            let entries = cx.main.worktrees()?;
            let pos =
                entries.iter().position(|e| e.path == want || e.path.canonicalize().is_ok_and(|c| c == want));
            match pos {
                Some(0) => Err(Error::failed(
                    format!("{} is the main checkout, not a worktree", want.display()),
                    "name a worktree made by `ocsb wt add` (`ocsb wt list`)",
                )),
                Some(i) => Ok(entries[i].clone()),
                None => {
                    Err(not_found(format!("{} is not a worktree of {}", p.display(), cx.main_root.display())))
                }
            }
        }
        Query::Name(name) => {
            let managed = cx.managed()?;
            let paths: Vec<&Path> = managed.iter().map(|e| e.path.as_path()).collect();
            match names::match_name(&paths, &cx.settings.prefix, &name)? {
                Some(p) => Ok(managed.iter().find(|e| e.path == p).cloned().expect("p comes from managed")),
                None => {
                    Err(not_found(format!("no worktree {} in {}", shown(&name), cx.settings.dir.display())))
                }
            }
        }
    }
}

/// `ocsb wt rm <slug|name|path> [--force]`: run `wt-pre-rm`, refuse uncommitted changes
/// (including untracked files) unless `force`, remove the worktree, keep its branch.
pub fn rm(explicit: Option<&Path>, arg: &str, force: bool) -> Result<()> {
    let cx = Context::load(explicit)?;
    let entry = find(&cx, arg)?;
    let path = entry.path.clone();
    let branch = entry.branch.clone().unwrap_or_default();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let slug = names::slug_of(&cx.settings.prefix, name).to_string();

    if entry.locked {
        return Err(Error::failed(
            format!("worktree {} is locked", path.display()),
            format!("unlock it first: git worktree unlock {}", path.display()),
        ));
    }
    if !path.is_dir() {
        // Nothing to run a hook in, nothing to lose: only git's record is left.
        let out = cx.main.run(["worktree", "prune"])?;
        if !out.status.success() {
            return Err(cx.main.failure(["worktree", "prune"], &out, "run `git worktree prune` by hand"));
        }
        eprintln!("ocsb: {} was already gone; removed git's record of it", path.display());
        return Ok(());
    }

    let changes = Git::new(&path).status()?;
    if !changes.is_empty() {
        let listed: Vec<&str> = changes.iter().take(10).map(String::as_str).collect();
        let more =
            if changes.len() > 10 { format!(" and {} more", changes.len() - 10) } else { String::new() };
        if !force {
            return Err(Error::failed(
                format!("worktree {} has uncommitted changes: {}{more}", path.display(), listed.join(", ")),
                format!("commit or stash them, or discard them with `ocsb wt rm {arg} --force`"),
            ));
        }
        eprintln!("ocsb: --force: discarding {} uncommitted change(s) in {}", changes.len(), path.display());
    }

    if let Some(hook_path) = hooks::find(Hook::PreRm, &cx.project.dir)? {
        let env = HookEnv { wt_dir: &path, branch: &branch, slug: &slug, main_root: &cx.main_root };
        eprintln!("ocsb: running {} in {}", hook_path.display(), path.display());
        hooks::run(Hook::PreRm, &hook_path, &env, &[]).map_err(|e| with_note(e, "nothing was removed"))?;
    }

    let mut cmd: Vec<&OsStr> = vec![OsStr::new("worktree"), OsStr::new("remove")];
    if force {
        cmd.push(OsStr::new("--force"));
    }
    cmd.push(OsStr::new("--"));
    cmd.push(path.as_os_str());
    let out = cx.main.run(&cmd)?;
    if !out.status.success() {
        return Err(cx.main.failure(
            &cmd,
            &out,
            &format!("commit, stash or discard the changes (`ocsb wt rm {arg} --force`), then run it again"),
        ));
    }
    if branch.is_empty() {
        eprintln!("ocsb: removed worktree {}", path.display());
    } else {
        eprintln!(
            "ocsb: removed worktree {}; branch {branch} is kept (delete it with `git branch -d {branch}`)",
            path.display()
        );
    }
    Ok(())
}

/// One row of `wt list`.
struct Row {
    slug: String,
    branch: String,
    state: String,
    path: PathBuf,
}

/// `ocsb wt list`: the worktrees in the worktrees directory, one per line: slug, branch,
/// state (`clean`, `dirty`, `missing`, with `,locked`), path. A header line comes first.
pub fn list(explicit: Option<&Path>) -> Result<()> {
    let cx = Context::load(explicit)?;
    let managed = cx.managed()?;
    if managed.is_empty() {
        eprintln!("ocsb: no worktrees in {}", cx.settings.dir.display());
        return Ok(());
    }
    let mut rows = Vec::new();
    for e in &managed {
        let name = e.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut state = if !e.path.is_dir() {
            "missing".to_string()
        } else if Git::new(&e.path).status()?.is_empty() {
            "clean".to_string()
        } else {
            "dirty".to_string()
        };
        if e.locked {
            state.push_str(",locked");
        }
        rows.push(Row {
            slug: names::slug_of(&cx.settings.prefix, &name).to_string(),
            branch: e.branch.clone().unwrap_or_else(|| "(detached)".to_string()),
            state,
            path: e.path.clone(),
        });
    }
    print!("{}", render(&rows));
    Ok(())
}

fn render(rows: &[Row]) -> String {
    let w_slug = rows.iter().map(|r| r.slug.len()).max().unwrap_or(0).max(4);
    let w_branch = rows.iter().map(|r| r.branch.len()).max().unwrap_or(0).max(6);
    let w_state = rows.iter().map(|r| r.state.len()).max().unwrap_or(0).max(5);
    let mut out = format!("{:w_slug$}  {:w_branch$}  {:w_state$}  PATH\n", "SLUG", "BRANCH", "STATE");
    for r in rows {
        out.push_str(&format!(
            "{:w_slug$}  {:w_branch$}  {:w_state$}  {}\n",
            r.slug,
            r.branch,
            r.state,
            r.path.display()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_aligns_columns() {
        let rows = [
            Row {
                slug: "42".into(),
                branch: "feature-SHOP-42".into(),
                state: "clean".into(),
                path: "/w/s-42".into(),
            },
            Row { slug: "7".into(), branch: "x".into(), state: "dirty".into(), path: "/w/s-7".into() },
        ];
        assert_eq!(
            render(&rows),
            "SLUG  BRANCH           STATE  PATH\n\
             42    feature-SHOP-42  clean  /w/s-42\n\
             7     x                dirty  /w/s-7\n"
        );
    }
}
