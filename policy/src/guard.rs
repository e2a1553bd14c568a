//! The checkout rule: what in a writable checkout the agent must not create or change, because
//! a program on the host later reads it as configuration or runs it.
//!
//! The agent may write the project (that is the point), and the user runs the project's own
//! code knowingly (`make`, `npm test`). What the user does *not* choose to run is what git and
//! other host tools pick up on their own: `git status` runs `core.fsmonitor` from the repository
//! config, `git commit` runs hooks, `cd` runs `.envrc` under direnv, an IDE runs a project's
//! tasks and dev-container commands. Every one of those is named here, per checkout, as one
//! list of [`Protection`]s, so the sandbox can mount them read-only and the launcher can check
//! what no mount can express (a name that must never be created in a writable directory).
//!
//! Git reads configuration from more places than `.git/config`:
//! * a main `.git` directory may contain `commondir`, which moves the whole "common" part of the
//!   repository (config, hooks, refs) to another directory: git never writes one there, so one
//!   that exists was planted ([`NEVER_IN_MAIN`]);
//! * each linked worktree has a `.git` *file* pointing at `<common>/worktrees/<name>`, whose own
//!   `commondir`, `gitdir` and `config.worktree` git follows;
//! * `<common>/modules/**` holds full git directories of submodules;
//! * `core.hooksPath` may point into the work tree (husky), and `include.path` /
//!   `includeIf.*.path` may include a file from it;
//! * a nested `.git` (a repository, or a gitlink in the index that makes git enter one) carries
//!   its own config and hooks: the launcher finds those by walking the tree.
//!
//! This module is pure: the launcher discovers the facts ([`Checkout`]) and enforces the result.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What an entry on the host is (from `lstat`: links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Missing,
    Dir,
    File,
    Symlink,
    /// Sockets, fifos, devices.
    Special,
}

/// The host filesystem, as far as the rule needs it.
pub trait Lookup {
    fn entry(&self, p: &Path) -> Entry;
    /// The names in a directory (sorted); empty when it cannot be read.
    fn names(&self, dir: &Path) -> Vec<String>;
}

/// How a protected path is mounted in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Access {
    ReadOnly,
    /// A git directory outside the writable set that the session commits to (the main
    /// checkout's `.git` when the session runs in a linked worktree).
    Writable,
}

/// One path of the rule, with the reason it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    pub path: PathBuf,
    pub access: Access,
    pub dir: bool,
    /// Create it (empty) on the host when it is missing, so that it can be mounted and the agent
    /// cannot create it. Only for names whose empty form means "nothing" to git and the tools.
    pub placeholder: bool,
    /// What a file placeholder contains (empty for all but `commondir`).
    #[serde(default)]
    pub fill: String,
    /// Symbolic links from here down to `path` are refused (binding through one would protect
    /// some other place and leave this one open).
    pub anchor: PathBuf,
    pub why: String,
}

/// How a name in a git directory is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Created empty when missing (an empty file or directory means "nothing" to git).
    Placeholder,
    /// Protected when present; its creation is caught by the launcher's check.
    Watch,
}

struct Name {
    name: &'static str,
    missing: Missing,
    why: &'static str,
}

const fn name(name: &'static str, missing: Missing, why: &'static str) -> Name {
    Name { name, missing, why }
}

/// In the common git directory (the main checkout's `.git`).
const COMMON: &[Name] = &[
    name("config", Missing::Placeholder, "repository config: core.fsmonitor, aliases, filters, editors"),
    name(
        "config.worktree",
        Missing::Placeholder,
        "worktree config, read once extensions.worktreeConfig is on",
    ),
    name("hooks", Missing::Placeholder, "hooks git runs on commit, checkout, merge and push"),
    name("info", Missing::Placeholder, "attributes, excludes and grafts git honours"),
    name("modules", Missing::Placeholder, "submodules' git directories, each with config and hooks"),
    name("worktrees", Missing::Placeholder, "linked worktrees' git directories"),
    name("remotes", Missing::Watch, "legacy remote definitions git reads for fetch and push"),
    name("branches", Missing::Watch, "legacy remote definitions git reads for fetch and push"),
    name("refs/replace", Missing::Watch, "replacement objects: what git shows is not what it pushes"),
    name("rr-cache", Missing::Watch, "recorded conflict resolutions git reapplies silently"),
];

/// Names git honours in a main `.git` directory but never writes there: one that exists was
/// planted. `commondir` makes git take config and hooks from the directory it names.
pub const NEVER_IN_MAIN: &[(&str, &str)] =
    &[("commondir", "makes git take the config and hooks of the directory it names")];

/// The `commondir` placeholder in a main `.git`: `.` names the directory itself, so git's
/// answer does not change, and the name exists to be mounted read-only. An empty file (or a
/// directory) would make git fail. Git ignores `core.bare` and `core.worktree` from the config
/// of a git directory that has a `commondir`, so a repository that sets either gets no
/// placeholder and relies on the launcher's check ([`planted_now`] tells this one apart).
pub const COMMONDIR_SELF: &str = ".\n";

/// Files at the root of a checkout that host tools act on without being asked. Read-only for
/// the agent unless `OCSB_RW_TOOL_FILES` names them.
pub const TOOL_FILES: &[(&str, &str)] = &[
    (".envrc", "direnv runs it when you cd into the directory"),
    (".vscode", "VS Code tasks, launch configurations and interpreter settings"),
    (".idea", "JetBrains run configurations and settings"),
    (".devcontainer", "dev container config: initializeCommand runs on the host"),
    (".devcontainer.json", "dev container config: initializeCommand runs on the host"),
    (".gitmodules", "submodule URLs and paths that `git submodule update` and clones follow"),
    (".pre-commit-config.yaml", "commands the pre-commit hook runs on `git commit`"),
    ("lefthook.yml", "commands the lefthook hooks run on `git commit`"),
    (".lefthook.yml", "commands the lefthook hooks run on `git commit`"),
    ("lefthook.yaml", "commands the lefthook hooks run on `git commit`"),
    ("lefthook-local.yml", "commands the lefthook hooks run on `git commit` (usually git-ignored)"),
    (".lefthook-local.yml", "commands the lefthook hooks run on `git commit` (usually git-ignored)"),
];

/// Directories at the root of every checkout that configure ocsb itself: the agent must not
/// widen its own sandbox (or another project's, through a worktree or an `OCSB_RW` repository).
pub const OCSB_DIRS: &[(&str, &str)] = &[
    (".opencode-sandbox", "ocsb's own settings, rules and hooks"),
    (".cc-safety-net", "the guard plugin's exceptions"),
];

/// The git directories of a checkout, as discovery resolved them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirs {
    /// The checkout's own git directory: `<root>/.git`, or what its `.git` file points at.
    pub gitdir: PathBuf,
    /// The common directory (config, hooks, objects, refs): `gitdir` itself for a main checkout.
    pub common: PathBuf,
}

/// One writable checkout: the project, a worktree in the worktrees directory, an `OCSB_RW`
/// repository, or a repository nested in one of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub root: PathBuf,
    /// `None` when the directory is not (yet) a repository.
    pub git: Option<GitDirs>,
    /// The session commits here: its common directory is made writable (with the rule inside)
    /// even when it lies outside the writable set.
    pub commits: bool,
    /// `core.hooksPath`, absolute: every value the config gives, not only the one git obeys
    /// now, and the value of each conditional include whose condition does not hold now (a
    /// branch the agent can switch to makes it hold, or stop holding).
    pub hooks_paths: Vec<PathBuf>,
    /// Every file git reads as config for this checkout, every `include.path` /
    /// `includeIf.*.path` target, and every program a config value has git run by a path
    /// (`core.fsmonitor = tools/fsmonitor`, a `filter.*.clean` script), absolute (any may be
    /// missing).
    pub config_files: Vec<PathBuf>,
    /// The repository config sets `core.bare` or `core.worktree` (see [`COMMONDIR_SELF`]).
    pub sets_worktree: bool,
    /// Where the hooks that are symbolic links point (`.git/hooks/pre-commit ->
    /// ../../scripts/pre-commit`), resolved: a target in a writable tree is a hook the agent
    /// could rewrite.
    pub hook_targets: Vec<PathBuf>,
}

/// The rule applied to a set of checkouts.
pub struct Rule<'a> {
    /// The sandbox's writable trees (project, worktrees directory, state, `OCSB_RW`, …).
    pub writable: &'a [PathBuf],
    /// `OCSB_RW_TOOL_FILES`: tool files the user lets the agent write.
    pub rw_tool_files: &'a [String],
}

impl Rule<'_> {
    fn inside(&self, p: &Path, granted: &[PathBuf]) -> bool {
        self.writable.iter().chain(granted).any(|w| p.starts_with(w))
    }

    /// The protections for `checkouts`, shallowest first (a deeper mount must come after the
    /// one it sits in). Only paths that would otherwise be writable are listed.
    pub fn protections(&self, checkouts: &[Checkout], fs: &dyn Lookup) -> Vec<Protection> {
        let mut out: Vec<Protection> = Vec::new();
        // No git directory of the user's is ever writable: each checkout's `.git` is the
        // agent's own inside (the sandbox's `agent_git`), so what git reads there needs no
        // protection of its own. What stays is what the user's git reads from the work tree.
        let granted: Vec<PathBuf> = Vec::new();
        let ro = |out: &mut Vec<Protection>,
                  path: PathBuf,
                  anchor: &Path,
                  dir: bool,
                  placeholder: bool,
                  why: &str| {
            out.push(Protection {
                path,
                access: Access::ReadOnly,
                dir,
                placeholder,
                fill: String::new(),
                anchor: anchor.to_path_buf(),
                why: why.to_string(),
            });
        };
        for c in checkouts {
            if !self.inside(&c.root, &granted) {
                continue;
            }
            for (n, why) in OCSB_DIRS {
                ro(&mut out, c.root.join(n), &c.root, true, true, why);
            }
            for (n, why) in TOOL_FILES {
                let p = c.root.join(n);
                let kind = fs.entry(&p);
                if kind != Entry::Missing && !self.rw_tool_files.iter().any(|r| r == n) {
                    ro(&mut out, p, &c.root, kind == Entry::Dir, false, why);
                }
            }
            // Every checkout but the project (already a mount of its own) is bound onto itself:
            // a mount point cannot be renamed, so the agent cannot move a worktree aside and put
            // a repository of its own in its place.
            if !c.commits && fs.entry(&c.root) == Entry::Dir {
                out.push(Protection {
                    path: c.root.clone(),
                    access: Access::Writable,
                    dir: true,
                    placeholder: false,
                    fill: String::new(),
                    anchor: c.root.clone(),
                    why: "a mount point, so the checkout cannot be renamed away and replaced".into(),
                });
            }
            let Some(g) = &c.git else { continue };
            for h in c.hooks_paths.iter().filter(|h| self.inside(h, &granted)) {
                let anchor = anchor_for(h, &c.root, &g.common);
                out.push(Protection {
                    path: h.clone(),
                    access: Access::ReadOnly,
                    dir: true,
                    placeholder: true,
                    fill: String::new(),
                    anchor: anchor.clone(),
                    why: "core.hooksPath: the hooks git runs".into(),
                });
                // husky 9 points core.hooksPath at `.husky/_`, whose scripts run `.husky/<hook>`.
                if h.file_name().is_some_and(|n| n == "_")
                    && let Some(parent) = h.parent()
                    && parent != anchor
                {
                    out.push(Protection {
                        path: parent.to_path_buf(),
                        access: Access::ReadOnly,
                        dir: true,
                        placeholder: true,
                        fill: String::new(),
                        anchor,
                        why: "the hook scripts the core.hooksPath dispatcher (husky) runs".into(),
                    });
                }
            }
            for t in &c.hook_targets {
                if self.inside(t, &granted) && fs.entry(t) == Entry::File {
                    out.push(Protection {
                        path: t.clone(),
                        access: Access::ReadOnly,
                        dir: false,
                        placeholder: false,
                        fill: String::new(),
                        anchor: anchor_for(t, &c.root, &g.common),
                        why: "a git hook (the hooks directory links to it)".into(),
                    });
                }
            }
            // A missing target is held by a placeholder, and so are the directories on the way
            // to it: the agent could otherwise make `cfg/` and then `cfg/extra`.
            for f in &c.config_files {
                if self.inside(f, &granted) {
                    out.push(Protection {
                        path: f.clone(),
                        access: Access::ReadOnly,
                        dir: false,
                        placeholder: fs.entry(f) == Entry::Missing,
                        fill: String::new(),
                        anchor: anchor_for(f, &c.root, &g.common),
                        why: "a file git reads as config (include.path / includeIf) or runs (a program a config value names)"
                            .into(),
                    });
                }
            }
        }
        let pins = self.pins(&out, &granted, fs);
        out.extend(pins);
        let mut seen = BTreeSet::new();
        out.retain(|p| seen.insert((p.path.clone(), p.access)));
        // Shallowest first; at equal depth a writable grant before what is protected in it.
        out.sort_by_key(|p| (p.path.components().count(), p.access == Access::ReadOnly));
        out
    }

    /// Every directory on the way from the writable root that holds a read-only protection
    /// down to it, bound onto itself (writable, as it was). *Why*: a mount point cannot be
    /// renamed. Without it the agent could move an ancestor aside (`mv tools t` when
    /// `core.hooksPath` is `tools/hooks`, `mv .git/refs r` around `refs/replace`) and create a
    /// new one in its place: the mount moves with the old directory, and host git, reading by
    /// path, would run what the agent wrote. Containers the Docker gateway starts bind the same
    /// paths by name, so they rely on the same stability. A directory inside something
    /// read-only is never made writable by this.
    fn pins(&self, out: &[Protection], granted: &[PathBuf], fs: &dyn Lookup) -> Vec<Protection> {
        let read_only: Vec<&Path> =
            out.iter().filter(|p| p.access == Access::ReadOnly).map(|p| p.path.as_path()).collect();
        let mut pins: Vec<Protection> = Vec::new();
        for p in out.iter().filter(|p| p.access == Access::ReadOnly) {
            let roots = self
                .writable
                .iter()
                .chain(granted)
                .chain(out.iter().filter(|o| o.access == Access::Writable).map(|o| &o.path));
            let Some(root) = roots.filter(|w| p.path.starts_with(w)).max_by_key(|w| w.components().count())
            else {
                continue;
            };
            let Ok(rel) = p.path.strip_prefix(root) else { continue };
            let mut cur = root.clone();
            let parts: Vec<_> = rel.components().collect();
            for part in parts.iter().take(parts.len().saturating_sub(1)) {
                cur.push(part);
                if fs.entry(&cur) != Entry::Dir || read_only.iter().any(|r| cur.starts_with(r)) {
                    break;
                }
                if !pins.iter().any(|q| q.path == cur) {
                    pins.push(Protection {
                        path: cur.clone(),
                        access: Access::Writable,
                        dir: true,
                        placeholder: false,
                        fill: String::new(),
                        anchor: root.clone(),
                        why: format!(
                            "a mount point, so the way to {} cannot be renamed and replaced",
                            p.path.display()
                        ),
                    });
                }
            }
        }
        pins
    }

    /// Paths whose *appearance* during a sandbox's life means something was planted where no
    /// mount could stop it: names that may not be created ahead (see `Missing::Watch`), the
    /// tool files, and `commondir` in a main git directory. The launcher adds the nested `.git`
    /// entries it finds by walking the tree.
    pub fn watched(&self, checkouts: &[Checkout]) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        for c in checkouts {
            for (n, why) in TOOL_FILES {
                if !self.rw_tool_files.iter().any(|r| r == n) {
                    out.push((c.root.join(n), why.to_string()));
                }
            }
            let Some(g) = &c.git else { continue };
            for n in COMMON.iter().filter(|n| n.missing == Missing::Watch) {
                out.push((g.common.join(n.name), n.why.to_string()));
            }
            for (n, why) in NEVER_IN_MAIN {
                out.push((g.common.join(n), why.to_string()));
            }
        }
        out
    }
}

/// The no-symlink walk for a path starts at the checkout or the git directory it lies in.
fn anchor_for(p: &Path, root: &Path, common: &Path) -> PathBuf {
    if p.starts_with(common) { common.to_path_buf() } else { root.to_path_buf() }
}

/// Something planted: the path, and why host git or a host tool would act on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Finding {
    pub path: PathBuf,
    pub why: String,
}

/// What is planted now, whatever happened before: a `commondir` in a main git directory, and a
/// linked worktree whose pointers do not agree (its `.git` file and the `gitdir` file of the
/// git directory it names must point at each other, and that directory must lie in the
/// common directory's `worktrees/`), or whose common directory the sandbox may have made
/// (`may_write`) and is no checkout's `.git`.
pub fn planted_now(
    checkouts: &[Checkout],
    fs: &dyn Lookup,
    read: &dyn Fn(&Path) -> Option<String>,
    may_write: &dyn Fn(&Path) -> bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in checkouts {
        let dot = c.root.join(".git");
        // Git follows a link (to a git directory, or to a `gitdir:` file), and reads a pointer
        // this check could not: either would have git obey what the rule never saw.
        let why = match (fs.entry(&dot), &c.git) {
            (Entry::Symlink, _) => {
                Some("a .git that is a symbolic link: git follows it to whatever it names")
            }
            (Entry::Missing, None) => None,
            (_, None) => Some("a .git this check cannot read as git does: git may obey what it names"),
            _ => None,
        };
        if let Some(why) = why {
            out.push(Finding { path: dot, why: why.to_string() });
            continue;
        }
        let Some(g) = &c.git else { continue };
        if g.common.file_name().is_some_and(|n| n == ".git") {
            for (n, why) in NEVER_IN_MAIN {
                let p = g.common.join(n);
                let ours = *n == "commondir" && read(&p).is_some_and(|t| t == COMMONDIR_SELF);
                if fs.entry(&p) != Entry::Missing && !ours && !out.iter().any(|f: &Finding| f.path == p) {
                    out.push(Finding {
                        path: p,
                        why: format!("{why}; git never writes it into a main .git"),
                    });
                }
            }
        }
        let main_git = c.root.join(".git");
        if g.gitdir == main_git {
            continue;
        }
        let consistent = g.gitdir.parent() == Some(&g.common.join("worktrees"))
            && read(&g.gitdir.join("gitdir"))
                .is_some_and(|t| Path::new(t.trim_end_matches('\n')) == main_git);
        if !consistent {
            out.push(Finding {
                path: main_git,
                why: format!(
                    "this worktree's .git names {}, which does not name it back as a worktree of {}",
                    g.gitdir.display(),
                    g.common.display()
                ),
            });
            continue;
        }
        // Git takes this worktree's config and hooks from its common directory. One the sandbox
        // may have made is trusted only as a checkout's own `.git` (whose appearance the
        // launcher's look reports) or the common directory of the checkout the session commits
        // in (checked when it started); the rule holds the names in both. Laid out anywhere
        // else — without the `HEAD` that would show it as a repository, or in the sandbox's own
        // `/tmp` — the user's git in this worktree would obey it.
        let of_checkout = checkouts.iter().any(|o| {
            let own_git = g.common.file_name().is_some_and(|n| n == ".git")
                && Some(o.root.as_path()) == g.common.parent();
            let committed_in = o.commits && o.git.as_ref().is_some_and(|og| og.common == g.common);
            own_git || committed_in
        });
        if !of_checkout && may_write(&g.common) {
            out.push(Finding {
                path: main_git,
                why: format!(
                    "this worktree's git data is in {}, which the sandbox can write and which is no \
                     checkout's .git: git here would obey its config and hooks",
                    g.common.display()
                ),
            });
        }
    }
    out
}

/// What appeared between two snapshots of the watched paths.
pub fn appeared(before: &BTreeSet<PathBuf>, after: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    after.difference(before).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fake(BTreeMap<PathBuf, Entry>);

    impl Fake {
        fn with(mut self, p: &str, e: Entry) -> Self {
            self.0.insert(p.into(), e);
            self
        }
    }

    impl Lookup for Fake {
        fn entry(&self, p: &Path) -> Entry {
            self.0.get(p).copied().unwrap_or(Entry::Missing)
        }
        fn names(&self, dir: &Path) -> Vec<String> {
            self.0
                .keys()
                .filter(|k| k.parent() == Some(dir))
                .map(|k| k.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        }
    }

    fn repo() -> Fake {
        Fake::default()
            .with("/p", Entry::Dir)
            .with("/p/.git", Entry::Dir)
            .with("/p/.git/config", Entry::File)
            .with("/p/.git/hooks", Entry::Dir)
            .with("/p/.git/worktrees", Entry::Dir)
            .with("/p/.git/worktrees/feat", Entry::Dir)
            .with("/p/.git/worktrees/feat/commondir", Entry::File)
            .with("/p/.git/worktrees/feat/gitdir", Entry::File)
            .with("/w", Entry::Dir)
            .with("/w/feat", Entry::Dir)
            .with("/w/feat/.git", Entry::File)
            .with("/p/.vscode", Entry::Dir)
    }

    fn main_checkout() -> Checkout {
        Checkout {
            root: "/p".into(),
            git: Some(GitDirs { gitdir: "/p/.git".into(), common: "/p/.git".into() }),
            commits: true,
            hooks_paths: vec![],
            config_files: vec![],
            sets_worktree: false,
            hook_targets: vec![],
        }
    }

    fn worktree(commits: bool) -> Checkout {
        Checkout {
            root: "/w/feat".into(),
            git: Some(GitDirs { gitdir: "/p/.git/worktrees/feat".into(), common: "/p/.git".into() }),
            commits,
            hooks_paths: vec![],
            config_files: vec![],
            sets_worktree: false,
            hook_targets: vec![],
        }
    }

    fn find<'a>(v: &'a [Protection], p: &str) -> &'a Protection {
        v.iter().find(|x| x.path == Path::new(p)).unwrap_or_else(|| panic!("{p} not protected: {v:#?}"))
    }

    #[test]
    fn every_config_name_of_a_main_git_dir_is_read_only_and_missing_ones_get_placeholders() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let v = rule.protections(&[main_checkout()], &repo());
        for (p, placeholder) in [
            ("/p/.git/config", false),
            ("/p/.git/hooks", false),
            ("/p/.git/config.worktree", true),
            ("/p/.git/commondir", true),
            ("/p/.git/info", true),
            ("/p/.git/modules", true),
            ("/p/.git/worktrees", false),
            ("/p/.opencode-sandbox", true),
            ("/p/.cc-safety-net", true),
            ("/p/.vscode", false),
        ] {
            let x = find(&v, p);
            assert_eq!(x.access, Access::ReadOnly, "{p}");
            assert_eq!(x.placeholder, placeholder, "{p}");
        }
        // remotes/branches: watched, not created ahead
        assert!(!v.iter().any(|x| x.path == Path::new("/p/.git/remotes")));
        let w = rule.watched(&[main_checkout()]);
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/.git/remotes")));
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/.git/commondir")));
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/.envrc")));
        // a linked worktree's admin dir is writable, its pointers are not
        assert_eq!(find(&v, "/p/.git/worktrees/feat").access, Access::Writable);
        assert_eq!(find(&v, "/p/.git/worktrees/feat/commondir").access, Access::ReadOnly);
        assert_eq!(find(&v, "/p/.git/worktrees/feat/gitdir").access, Access::ReadOnly);
        assert!(find(&v, "/p/.git/worktrees/feat/config.worktree").placeholder);
        // order: the worktrees dir before the admin dir before its files
        let at = |p: &str| v.iter().position(|x| x.path == Path::new(p)).unwrap();
        assert!(at("/p/.git/worktrees") < at("/p/.git/worktrees/feat"));
        assert!(at("/p/.git/worktrees/feat") < at("/p/.git/worktrees/feat/gitdir"));
    }

    #[test]
    fn a_session_in_a_worktree_gets_the_common_dir_writable_with_the_rule_inside() {
        let writable = vec![PathBuf::from("/w")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let v = rule.protections(&[worktree(true)], &repo());
        assert_eq!(find(&v, "/p/.git").access, Access::Writable);
        assert_eq!(find(&v, "/p/.git/config").access, Access::ReadOnly);
        assert_eq!(find(&v, "/p/.git/hooks").access, Access::ReadOnly);
        assert_eq!(find(&v, "/w/feat/.git").access, Access::ReadOnly, "the pointer file");
        assert!(find(&v, "/w/feat/.opencode-sandbox").placeholder);
        assert_eq!(v[0].path, Path::new("/p/.git"), "the grant comes first");
        // The main checkout's work tree stays out of the writable set.
        assert!(!v.iter().any(|x| x.path == Path::new("/p/.vscode")));
    }

    #[test]
    fn the_way_to_each_protected_path_is_pinned_and_nothing_read_only_becomes_writable() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let fs = repo()
            .with("/p/tools", Entry::Dir)
            .with("/p/tools/git", Entry::Dir)
            .with("/p/tools/git/hooks", Entry::Dir)
            .with("/p/.git/refs", Entry::Dir)
            .with("/p/.git/refs/replace", Entry::Dir);
        let c = Checkout { hooks_paths: vec!["/p/tools/git/hooks".into()], ..main_checkout() };
        let v = rule.protections(&[c], &fs);
        for p in ["/p/tools", "/p/tools/git", "/p/.git/refs"] {
            let x = find(&v, p);
            assert_eq!(x.access, Access::Writable, "{p}: bound onto itself");
            assert!(x.why.contains("cannot be renamed"), "{p}: {}", x.why);
        }
        assert_eq!(find(&v, "/p/tools/git/hooks").access, Access::ReadOnly);
        assert_eq!(find(&v, "/p/.git/refs/replace").access, Access::ReadOnly);
        // A pin comes before what it holds (the sandbox mounts in this order).
        let at = |p: &str| v.iter().position(|x| x.path == Path::new(p)).unwrap();
        assert!(at("/p/tools") < at("/p/tools/git") && at("/p/tools/git") < at("/p/tools/git/hooks"));
        // Nothing at or under a read-only protection is made writable.
        for w in v.iter().filter(|x| x.access == Access::Writable) {
            let under =
                v.iter().filter(|r| r.access == Access::ReadOnly).find(|r| w.path.starts_with(&r.path));
            assert!(
                under.is_none() || w.path == Path::new("/p/.git/worktrees/feat"),
                "{} is writable inside read-only {:?}",
                w.path.display(),
                under.map(|r| &r.path)
            );
        }
    }

    #[test]
    fn a_repository_that_does_not_commit_gets_no_grant() {
        let writable = vec![PathBuf::from("/w")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let v = rule.protections(&[worktree(false)], &repo());
        assert!(!v.iter().any(|x| x.path.starts_with("/p/.git")), "no grant of the main .git: {v:#?}");
        assert_eq!(find(&v, "/w/feat").access, Access::Writable, "bound onto itself: cannot be renamed");
        assert_eq!(find(&v, "/w/feat/.git").access, Access::ReadOnly);
    }

    #[test]
    fn hooks_path_and_includes_inside_the_tree_are_protected_husky_parent_too() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let mut c = main_checkout();
        c.hooks_paths = vec!["/p/.husky/_".into()];
        c.hook_targets = vec!["/p/scripts/pre-commit".into()];
        c.config_files =
            vec!["/p/.git/config".into(), "/p/tools/git.inc".into(), "/home/u/.gitconfig".into()];
        let fs = repo().with("/p/tools", Entry::Dir).with("/p/scripts/pre-commit", Entry::File);
        let v = rule.protections(&[c], &fs);
        assert_eq!(find(&v, "/p/scripts/pre-commit").access, Access::ReadOnly, "a linked hook's target");
        assert!(find(&v, "/p/.husky/_").placeholder);
        assert_eq!(find(&v, "/p/.husky").access, Access::ReadOnly);
        let inc = find(&v, "/p/tools/git.inc");
        assert!(inc.placeholder && !inc.dir);
        assert!(!v.iter().any(|x| x.path.starts_with("/home")), "outside the writable set: nothing to do");
    }

    #[test]
    fn rw_tool_files_leave_chosen_names_writable() {
        let writable = vec![PathBuf::from("/p")];
        let rw = vec![".vscode".to_string()];
        let rule = Rule { writable: &writable, rw_tool_files: &rw };
        let v = rule.protections(&[main_checkout()], &repo());
        assert!(!v.iter().any(|x| x.path == Path::new("/p/.vscode")));
        assert!(!rule.watched(&[main_checkout()]).iter().any(|(p, _)| p == Path::new("/p/.vscode")));
    }

    #[test]
    fn commondir_in_a_main_git_dir_and_inconsistent_worktree_pointers_are_planted() {
        let fs = repo().with("/p/.git/commondir", Entry::File);
        let none = |_: &Path| None;
        let no_write = |_: &Path| false;
        let f = planted_now(&[main_checkout()], &fs, &none, &no_write);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].path, Path::new("/p/.git/commondir"));
        let ours = |p: &Path| (p == Path::new("/p/.git/commondir")).then(|| COMMONDIR_SELF.to_string());
        assert!(
            planted_now(&[main_checkout()], &fs, &ours, &no_write).is_empty(),
            "the placeholder is not a plant"
        );
        assert!(planted_now(&[main_checkout()], &repo(), &none, &no_write).is_empty());

        let back = |p: &Path| {
            (p == Path::new("/p/.git/worktrees/feat/gitdir")).then(|| "/w/feat/.git\n".to_string())
        };
        assert!(planted_now(&[worktree(true)], &repo(), &back, &no_write).is_empty());
        let f = planted_now(&[worktree(true)], &repo(), &none, &no_write);
        assert_eq!(f[0].path, Path::new("/w/feat/.git"), "no back-pointer");
        let mut evil = worktree(true);
        evil.git = Some(GitDirs { gitdir: "/w/feat/.evil".into(), common: "/w/feat/.evil".into() });
        assert_eq!(planted_now(&[evil], &repo(), &back, &no_write).len(), 1, "points outside worktrees/");
    }

    #[test]
    fn a_linked_or_unreadable_dot_git_at_a_checkout_is_planted() {
        let none = |_: &Path| None;
        let no_write = |_: &Path| false;
        let mut c = worktree(false);
        c.root = "/w/r".into();
        // `.git` a link (to a gitfile, as git follows it): whatever discovery made of it.
        let fs = repo().with("/w/r", Entry::Dir).with("/w/r/.git", Entry::Symlink);
        let f = planted_now(&[c.clone()], &fs, &none, &no_write);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].path == Path::new("/w/r/.git") && f[0].why.contains("symbolic link"));
        // A `.git` file discovery could not read (git reads it as bytes).
        c.git = None;
        let fs = repo().with("/w/r", Entry::Dir).with("/w/r/.git", Entry::File);
        let f = planted_now(&[c.clone()], &fs, &none, &no_write);
        assert!(f.len() == 1 && f[0].why.contains("cannot read as git does"), "{f:?}");
        // No `.git` at all: not a repository, nothing planted.
        let fs = repo().with("/w/r", Entry::Dir);
        assert!(planted_now(&[c], &fs, &none, &no_write).is_empty());
    }

    #[test]
    fn a_worktrees_common_directory_the_sandbox_may_have_made_is_a_checkouts_git_or_planted() {
        let back = |p: &Path| {
            let back = [
                ("/p/.git/worktrees/feat/gitdir", "/w/feat/.git\n"),
                ("/w/ag/worktrees/y/gitdir", "/w/evil/.git\n"),
            ];
            back.iter().find(|(f, _)| p == Path::new(f)).map(|(_, t)| t.to_string())
        };
        let under = |roots: &'static [&'static str]| move |p: &Path| roots.iter().any(|r| p.starts_with(r));
        // The main checkout's `.git`, writable or not: the rule's own.
        let both = [main_checkout(), worktree(true)];
        assert!(planted_now(&both, &repo(), &back, &under(&["/p", "/w"])).is_empty());
        // Git data the agent laid out in the worktrees directory (no `HEAD`, so no repository to
        // the walk), with pointers that agree.
        let mut evil = worktree(false);
        evil.root = "/w/evil".into();
        evil.git = Some(GitDirs { gitdir: "/w/ag/worktrees/y".into(), common: "/w/ag".into() });
        let f = planted_now(&[main_checkout(), evil.clone()], &repo(), &back, &under(&["/p", "/w"]));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].path, Path::new("/w/evil/.git"));
        assert!(f[0].why.contains("/w/ag") && f[0].why.contains("no checkout's .git"), "{}", f[0].why);
        // Named `.git` but in the sandbox's `/tmp`, where no checkout is.
        evil.git =
            Some(GitDirs { gitdir: "/s/tmp/x/.git/worktrees/y".into(), common: "/s/tmp/x/.git".into() });
        let back_tmp = |p: &Path| {
            (p == Path::new("/s/tmp/x/.git/worktrees/y/gitdir")).then(|| "/w/evil/.git\n".to_string())
        };
        let f =
            planted_now(&[main_checkout(), evil.clone()], &repo(), &back_tmp, &under(&["/p", "/w", "/s"]));
        assert_eq!(f.len(), 1, "{f:?}");
        // The common directory of the checkout the session commits in (a session started in a
        // linked worktree, whose main checkout is no root of the sandbox).
        let mut session = worktree(true);
        session.root = "/w/feat".into();
        let sibling = Checkout { root: "/w/other".into(), commits: false, ..worktree(false) };
        let back_both = |p: &Path| {
            (p == Path::new("/p/.git/worktrees/feat/gitdir")).then(|| "/w/feat/.git\n".to_string())
        };
        let f = planted_now(&[session, sibling], &repo(), &back_both, &under(&["/p/.git", "/w"]));
        assert!(f.iter().all(|f| !f.why.contains("no checkout's .git")), "{f:?}");
        // The same outside everything the sandbox can write: the user's own (a bare repository).
        assert!(planted_now(&[main_checkout(), evil], &repo(), &back_tmp, &under(&["/p", "/w"])).is_empty());
    }

    #[test]
    fn appeared_lists_only_new_paths() {
        let a: BTreeSet<PathBuf> = ["/p/x".into()].into();
        let b: BTreeSet<PathBuf> = ["/p/x".into(), "/p/y".into()].into();
        assert_eq!(appeared(&a, &b), vec![PathBuf::from("/p/y")]);
        assert!(appeared(&b, &a).is_empty());
    }
}
