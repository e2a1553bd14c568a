//! The checkout rule: what in a writable checkout the agent must not create or change, because
//! a program on the host later reads it as configuration or runs it.
//!
//! The agent may write the project (that is the point), and the user runs the project's own
//! code knowingly (`make`, `npm test`). What the user does *not* choose to run is what git and
//! other host tools pick up on their own from the work tree: `git commit` runs the hooks of a
//! `core.hooksPath` that lies in the tree (husky), git reads an `include.path` target or runs a
//! program a config value names by a path in the tree, `cd` runs `.envrc` under direnv, an IDE
//! runs a project's tasks and dev-container commands. Every one of those is named here, per
//! checkout, as one list of [`Protection`]s, so the sandbox can mount them read-only.
//!
//! The user's git directories are not in this rule: inside the sandbox each checkout's `.git`
//! is the agent's own repository, and the user's are never writable (what the agent commits
//! reaches them only through the launcher's import gate). So nothing the agent writes under a
//! `.git` is read by the user's git.
//!
//! This module is pure: the launcher discovers the facts ([`Checkout`]) and enforces the result.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::toolfiles;

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
    /// Bound onto itself, writable as it was: a mount point cannot be renamed (see
    /// [`Rule::protections`]).
    Writable,
}

/// One path of the rule, with the reason it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    pub path: PathBuf,
    pub access: Access,
    pub dir: bool,
    /// Create it (empty) on the host when it is missing, so that it can be mounted and the agent
    /// cannot create it: ocsb's own directories, a `core.hooksPath` directory and an include
    /// target in the tree, whose empty form means "nothing" to git and ocsb.
    pub placeholder: bool,
    /// Symbolic links from here down to `path` are refused (binding through one would protect
    /// some other place and leave this one open).
    pub anchor: PathBuf,
    pub why: String,
}

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
    /// The project itself: already a mount of its own, so it needs no bind onto itself.
    pub project: bool,
    /// `core.hooksPath`, absolute: every value the config gives, not only the one git obeys
    /// now, and the value of each conditional include whose condition does not hold now (a
    /// branch the agent can switch to makes it hold, or stop holding).
    pub hooks_paths: Vec<PathBuf>,
    /// Every file git reads as config for this checkout, every `include.path` /
    /// `includeIf.*.path` target, and every program a config value has git run by a path
    /// (`core.fsmonitor = tools/fsmonitor`, a `filter.*.clean` script), absolute (any may be
    /// missing).
    pub config_files: Vec<PathBuf>,
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
    fn inside(&self, p: &Path) -> bool {
        self.writable.iter().any(|w| p.starts_with(w))
    }

    /// The protections for `checkouts`, shallowest first (a deeper mount must come after the
    /// one it sits in). Only paths that would otherwise be writable are listed.
    pub fn protections(&self, checkouts: &[Checkout], fs: &dyn Lookup) -> Vec<Protection> {
        let mut out: Vec<Protection> = Vec::new();
        // No git directory of the user's is ever writable: each checkout's `.git` is the
        // agent's own inside (the sandbox's `agent_git`), so what git reads there needs no
        // protection of its own. What stays is what the user's git reads from the work tree.
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
                anchor: anchor.to_path_buf(),
                why: why.to_string(),
            });
        };
        for c in checkouts {
            if !self.inside(&c.root) {
                continue;
            }
            for (n, why) in OCSB_DIRS {
                ro(&mut out, c.root.join(n), &c.root, true, true, why);
            }
            // The tool files at the checkout's top (the registry's entries, by the names the
            // directory holds: an entry may be a pattern, and a case-folding directory answers
            // `.ENVRC` for `.envrc`). Those deeper are the enforcement's walk's.
            let top = c.root.file_name();
            for n in fs.names(&c.root) {
                let Some(t) = toolfiles::lookup(top, OsStr::new(&n), self.rw_tool_files) else {
                    continue;
                };
                let p = c.root.join(&n);
                let kind = fs.entry(&p);
                if kind != Entry::Missing {
                    ro(&mut out, p, &c.root, kind == Entry::Dir, false, t.why);
                }
            }
            // Every checkout but the project (already a mount of its own) is bound onto itself:
            // a mount point cannot be renamed, so the agent cannot move a worktree aside and put
            // a repository of its own in its place.
            if !c.project && fs.entry(&c.root) == Entry::Dir {
                out.push(Protection {
                    path: c.root.clone(),
                    access: Access::Writable,
                    dir: true,
                    placeholder: false,
                    anchor: c.root.clone(),
                    why: "a mount point, so the checkout cannot be renamed away and replaced".into(),
                });
            }
            let Some(g) = &c.git else { continue };
            for h in c.hooks_paths.iter().filter(|h| self.inside(h)) {
                let anchor = anchor_for(h, &c.root, &g.common);
                out.push(Protection {
                    path: h.clone(),
                    access: Access::ReadOnly,
                    dir: true,
                    placeholder: true,
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
                        anchor,
                        why: "the hook scripts the core.hooksPath dispatcher (husky) runs".into(),
                    });
                }
            }
            for t in &c.hook_targets {
                if self.inside(t) && fs.entry(t) == Entry::File {
                    out.push(Protection {
                        path: t.clone(),
                        access: Access::ReadOnly,
                        dir: false,
                        placeholder: false,
                        anchor: anchor_for(t, &c.root, &g.common),
                        why: "a git hook (the hooks directory links to it)".into(),
                    });
                }
            }
            // A missing target is held by a placeholder, and so are the directories on the way
            // to it: the agent could otherwise make `cfg/` and then `cfg/extra`.
            for f in &c.config_files {
                if self.inside(f) {
                    out.push(Protection {
                        path: f.clone(),
                        access: Access::ReadOnly,
                        dir: false,
                        placeholder: fs.entry(f) == Entry::Missing,
                            anchor: anchor_for(f, &c.root, &g.common),
                        why: "a file git reads as config (include.path / includeIf) or runs (a program a config value names)"
                            .into(),
                    });
                }
            }
        }
        let pins = self.pins(&out, fs);
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
    /// `core.hooksPath` is `tools/hooks`) and create a
    /// new one in its place: the mount moves with the old directory, and host git, reading by
    /// path, would run what the agent wrote. Containers the Docker gateway starts bind the same
    /// paths by name, so they rely on the same stability. A directory inside something
    /// read-only is never made writable by this.
    fn pins(&self, out: &[Protection], fs: &dyn Lookup) -> Vec<Protection> {
        let read_only: Vec<&Path> =
            out.iter().filter(|p| p.access == Access::ReadOnly).map(|p| p.path.as_path()).collect();
        let mut pins: Vec<Protection> = Vec::new();
        for p in out.iter().filter(|p| p.access == Access::ReadOnly) {
            let roots = self
                .writable
                .iter()
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
    /// mount could stop it: the tool files at each checkout's top that have one exact name (a
    /// pattern such as `mise.*.toml`, and an entry deeper down, is the live watch's, which
    /// matches every new entry against the registry). The launcher adds the nested `.git`
    /// entries and git directory layouts it finds by walking the tree.
    pub fn watched(&self, checkouts: &[Checkout]) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        for c in checkouts {
            let top = c.root.file_name();
            for t in toolfiles::REGISTRY.iter().filter(|t| !t.entry.contains('*')) {
                let name = OsStr::new(t.entry);
                // Through `lookup`, so that an entry the user left writable under any of its
                // names is not watched, and one whose parent is not this directory is skipped.
                if toolfiles::lookup(top, name, self.rw_tool_files).is_some_and(|m| m.name == t.name) {
                    out.push((c.root.join(name), t.why.to_string()));
                }
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

/// A checkout's `.git` that is planted now, whatever happened before:
/// * a symbolic link (git follows it to whatever it names), or an entry discovery could not
///   read as git does (a `gitdir:` file of bytes git takes and this check cannot): either would
///   have the user's git obey a repository the checkout rule never saw;
/// * a `.git` file naming git data the sandbox may have written (`may_write`) that is no
///   checkout's own `.git`: a worktree laid out by the agent in the worktrees directory (git
///   data without a `HEAD`, so no repository to the walk) or in the sandbox's own `/tmp`. Git
///   run in that directory obeys its config and hooks. A checkout's own `.git` is the user's
///   (the agent's is another directory, mounted over it inside) or one the walk reports.
pub fn planted_now(
    checkouts: &[Checkout],
    fs: &dyn Lookup,
    may_write: &dyn Fn(&Path) -> bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in checkouts {
        let dot = c.root.join(".git");
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
        if g.gitdir == dot {
            continue;
        }
        // The project's own git data is the user's: the session in a linked worktree started
        // from it (its pointers checked then), and no sandbox can write it.
        let of_checkout = |d: &Path| {
            checkouts.iter().any(|o| {
                d.starts_with(o.root.join(".git"))
                    || (o.project && o.git.as_ref().is_some_and(|og| d.starts_with(&og.common)))
            })
        };
        if let Some(d) = [&g.gitdir, &g.common].into_iter().find(|d| !of_checkout(d) && may_write(d)) {
            out.push(Finding {
                path: dot,
                why: format!(
                    "this worktree's git data is in {}, which the sandbox can write and which is no \
                     checkout's .git: git here would obey its config and hooks",
                    d.display()
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
            project: true,
            hooks_paths: vec![],
            config_files: vec![],
            hook_targets: vec![],
        }
    }

    fn worktree() -> Checkout {
        Checkout {
            root: "/w/feat".into(),
            git: Some(GitDirs { gitdir: "/p/.git/worktrees/feat".into(), common: "/p/.git".into() }),
            project: false,
            hooks_paths: vec![],
            config_files: vec![],
            hook_targets: vec![],
        }
    }

    fn find<'a>(v: &'a [Protection], p: &str) -> &'a Protection {
        v.iter().find(|x| x.path == Path::new(p)).unwrap_or_else(|| panic!("{p} not protected: {v:#?}"))
    }

    #[test]
    fn ocsb_dirs_and_tool_files_are_read_only_and_no_git_directory_is_in_the_rule() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let v = rule.protections(&[main_checkout()], &repo());
        for (p, placeholder) in
            [("/p/.opencode-sandbox", true), ("/p/.cc-safety-net", true), ("/p/.vscode", false)]
        {
            let x = find(&v, p);
            assert_eq!(x.access, Access::ReadOnly, "{p}");
            assert_eq!(x.placeholder, placeholder, "{p}");
        }
        assert!(!v.iter().any(|x| x.path.starts_with("/p/.git")), "the agent's own .git inside: {v:#?}");
        let w = rule.watched(&[main_checkout()]);
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/.envrc")));
        assert!(!w.iter().any(|(p, _)| p.starts_with("/p/.git")), "{w:?}");
    }

    #[test]
    fn the_way_to_each_protected_path_is_pinned_and_nothing_read_only_becomes_writable() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let fs = repo()
            .with("/p/tools", Entry::Dir)
            .with("/p/tools/git", Entry::Dir)
            .with("/p/tools/git/hooks", Entry::Dir);
        let c = Checkout { hooks_paths: vec!["/p/tools/git/hooks".into()], ..main_checkout() };
        let v = rule.protections(&[c], &fs);
        for p in ["/p/tools", "/p/tools/git"] {
            let x = find(&v, p);
            assert_eq!(x.access, Access::Writable, "{p}: bound onto itself");
            assert!(x.why.contains("cannot be renamed"), "{p}: {}", x.why);
        }
        assert_eq!(find(&v, "/p/tools/git/hooks").access, Access::ReadOnly);
        // A pin comes before what it holds (the sandbox mounts in this order).
        let at = |p: &str| v.iter().position(|x| x.path == Path::new(p)).unwrap();
        assert!(at("/p/tools") < at("/p/tools/git") && at("/p/tools/git") < at("/p/tools/git/hooks"));
        // Nothing at or under a read-only protection is made writable.
        for w in v.iter().filter(|x| x.access == Access::Writable) {
            let under =
                v.iter().filter(|r| r.access == Access::ReadOnly).find(|r| w.path.starts_with(&r.path));
            assert!(
                under.is_none(),
                "{} is writable inside read-only {:?}",
                w.path.display(),
                under.map(|r| &r.path)
            );
        }
    }

    #[test]
    fn a_checkout_other_than_the_project_is_bound_onto_itself() {
        let writable = vec![PathBuf::from("/w")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let v = rule.protections(&[worktree()], &repo());
        assert!(!v.iter().any(|x| x.path.starts_with("/p")), "the main checkout is no root: {v:#?}");
        assert_eq!(find(&v, "/w/feat").access, Access::Writable, "bound onto itself: cannot be renamed");
        assert!(find(&v, "/w/feat/.opencode-sandbox").placeholder);
    }

    #[test]
    fn hooks_path_and_includes_inside_the_tree_are_protected_husky_parent_too() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let mut c = main_checkout();
        c.hooks_paths = vec!["/p/.husky/_".into()];
        c.hook_targets = vec!["/p/scripts/pre-commit".into()];
        c.config_files = vec!["/p/tools/git.inc".into(), "/home/u/.gitconfig".into()];
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
    fn tool_files_at_the_top_are_the_registrys_patterns_and_names_in_any_case() {
        let writable = vec![PathBuf::from("/p")];
        let rule = Rule { writable: &writable, rw_tool_files: &[] };
        let fs = repo()
            .with("/p/mise.dev.toml", Entry::File)
            .with("/p/.ENVRC", Entry::File)
            .with("/p/app.code-workspace", Entry::File)
            .with("/p/.helix", Entry::Dir)
            .with("/p/src", Entry::Dir)
            .with("/p/config.toml", Entry::File);
        let v = rule.protections(&[main_checkout()], &fs);
        for p in ["/p/mise.dev.toml", "/p/.ENVRC", "/p/app.code-workspace", "/p/.helix"] {
            let x = find(&v, p);
            assert!(x.access == Access::ReadOnly && !x.placeholder, "{p}: {x:?}");
        }
        assert!(find(&v, "/p/.helix").dir);
        assert!(find(&v, "/p/.ENVRC").why.contains("bash script"), "the registry's reason");
        for p in ["/p/src", "/p/config.toml"] {
            assert!(!v.iter().any(|x| x.path == Path::new(p)), "{p} is the project's: {v:#?}");
        }
        // The look after the sandbox knows exact names only; the live watch matches the rest.
        let w = rule.watched(&[main_checkout()]);
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/rust-toolchain.toml")));
        assert!(w.iter().any(|(p, _)| p == Path::new("/p/.mise")));
        assert!(!w.iter().any(|(p, _)| p.to_string_lossy().contains('*')), "{w:?}");
        assert!(!w.iter().any(|(p, _)| p == Path::new("/p/config.toml")), "only in .cargo or mise: {w:?}");
        // A pattern's name in OCSB_RW_TOOL_FILES leaves what it matches writable.
        let rw = vec!["mise.*.toml".to_string(), ".envrc".to_string()];
        let rule = Rule { writable: &writable, rw_tool_files: &rw };
        let v = rule.protections(&[main_checkout()], &fs);
        assert!(
            !v.iter().any(|x| x.path == Path::new("/p/mise.dev.toml") || x.path == Path::new("/p/.ENVRC"))
        );
        assert!(!rule.watched(&[main_checkout()]).iter().any(|(p, _)| p == Path::new("/p/.envrc")));
    }

    #[test]
    fn a_linked_or_unreadable_dot_git_at_a_checkout_is_planted() {
        let no_write = |_: &Path| false;
        let mut c = worktree();
        c.root = "/w/r".into();
        // `.git` a link (to a gitfile, as git follows it): whatever discovery made of it.
        let fs = repo().with("/w/r", Entry::Dir).with("/w/r/.git", Entry::Symlink);
        let f = planted_now(&[c.clone()], &fs, &no_write);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].path == Path::new("/w/r/.git") && f[0].why.contains("symbolic link"));
        // A `.git` file discovery could not read (git reads it as bytes).
        c.git = None;
        let fs = repo().with("/w/r", Entry::Dir).with("/w/r/.git", Entry::File);
        let f = planted_now(&[c.clone()], &fs, &no_write);
        assert!(f.len() == 1 && f[0].why.contains("cannot read as git does"), "{f:?}");
        // No `.git` at all: not a repository, nothing planted; a plain repository neither.
        let fs = repo().with("/w/r", Entry::Dir);
        assert!(planted_now(&[c], &fs, &no_write).is_empty());
        assert!(planted_now(&[main_checkout(), worktree()], &repo(), &no_write).is_empty());
    }

    #[test]
    fn a_worktrees_git_data_the_sandbox_may_have_made_is_a_checkouts_git_or_planted() {
        let under = |roots: &'static [&'static str]| move |p: &Path| roots.iter().any(|r| p.starts_with(r));
        // In the main checkout's `.git` (the user's; the agent's is mounted over it inside).
        let both = [main_checkout(), worktree()];
        assert!(planted_now(&both, &repo(), &under(&["/p", "/w"])).is_empty());
        // Git data the agent laid out in the worktrees directory (no `HEAD`, so no repository
        // to the walk).
        let mut evil = worktree();
        evil.root = "/w/evil".into();
        evil.git = Some(GitDirs { gitdir: "/w/ag/worktrees/y".into(), common: "/w/ag".into() });
        let f = planted_now(&[main_checkout(), evil.clone()], &repo(), &under(&["/p", "/w"]));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].path, Path::new("/w/evil/.git"));
        assert!(f[0].why.contains("/w/ag") && f[0].why.contains("no checkout's .git"), "{}", f[0].why);
        // Named `.git` but in the sandbox's `/tmp`, where no checkout is.
        evil.git =
            Some(GitDirs { gitdir: "/s/tmp/x/.git/worktrees/y".into(), common: "/s/tmp/x/.git".into() });
        let f = planted_now(&[main_checkout(), evil.clone()], &repo(), &under(&["/p", "/w", "/s"]));
        assert_eq!(f.len(), 1, "{f:?}");
        // A session started in a linked worktree: the main checkout is no root of the sandbox;
        // its `.git`, where the project's and its sibling worktrees' git data is, is the user's.
        let project = Checkout { project: true, ..worktree() };
        let sibling = Checkout {
            root: "/w/other".into(),
            git: Some(GitDirs { gitdir: "/p/.git/worktrees/other".into(), common: "/p/.git".into() }),
            ..worktree()
        };
        assert!(planted_now(&[project, sibling.clone()], &repo(), &under(&["/w", "/p"])).is_empty());
        assert_eq!(planted_now(&[sibling], &repo(), &under(&["/w", "/p"])).len(), 1, "not the project's");
        // The same outside everything the sandbox can write: the user's own (a bare repository).
        assert!(planted_now(&[main_checkout(), evil], &repo(), &under(&["/p", "/w"])).is_empty());
    }

    #[test]
    fn appeared_lists_only_new_paths() {
        let a: BTreeSet<PathBuf> = ["/p/x".into()].into();
        let b: BTreeSet<PathBuf> = ["/p/x".into(), "/p/y".into()].into();
        assert_eq!(appeared(&a, &b), vec![PathBuf::from("/p/y")]);
        assert!(appeared(&b, &a).is_empty());
    }
}
