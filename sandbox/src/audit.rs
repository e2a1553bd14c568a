//! The launcher's net under the checkout rule: what no mount can express.
//!
//! A mount protects a name that exists. It cannot stop the agent from *creating* a new name in
//! a writable directory: a `commondir` in the main `.git`, a `.git` directory (a nested
//! repository, whose config and hooks git obeys when you run it in that directory, and which
//! the superproject's `git status` enters through a gitlink in the index), a tool file such as
//! `.envrc`. So before a sandbox starts and after it exits, the launcher looks:
//!
//! * **before**: it refuses to start while anything planted is there — found by the last
//!   check and not yet removed, found now (a `commondir` in a main `.git`, worktree pointers
//!   that do not agree), or appeared during a sandbox whose launcher died before its own check;
//! * **after**: everything watched that appeared while the sandbox ran is reported and kept as
//!   a finding, so the next start refuses until the user removes it or vouches for it
//!   (`ocsb audit --accept`).
//!
//! Nothing is ever deleted: the user decides. What host git would *execute* on its next run in
//! the project — a nested `.git`, a planted `commondir` — is moved aside at once
//! (`<path>.ocsb-planted-<time>`), so that a plain `git status` after the session is safe; the
//! message says how to move it back. Findings and the "sandbox running" markers live beside
//! the state directory (`<state>.audit/`), where no sandbox can write.
//!
//! The remaining window: host git run by the user *while* the agent works sees a plant before
//! the check does. The README says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ocsb_policy::guard::{self, Checkout, Finding, Lookup, Rule};
use serde::{Deserialize, Serialize};

use super::checkouts::{self, HostLookup};
use super::error::{Error, Result};
use super::spec::SandboxSpec;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// What a sandbox in progress recorded before it started.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Marker {
    pid: u32,
    /// Watched paths that existed, with why they are watched.
    present: BTreeMap<PathBuf, String>,
}

/// The watched paths of a sandbox's checkouts that exist now, and the nested repositories.
struct Snapshot {
    present: BTreeMap<PathBuf, String>,
    nested: Vec<PathBuf>,
}

const NESTED_WHY: &str = "a git repository inside a writable checkout: git run there (or the \
    superproject's `git status` through a gitlink) obeys its config and hooks";

/// `.<state>.audit`: beside the state directory, out of every sandbox's reach. The leading dot
/// keeps it from being any project's state directory (`OCSB_NAME` starts with a letter or digit).
pub fn dir_of(state_dir: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(state_dir.file_name().unwrap_or_default());
    name.push(".audit");
    state_dir.with_file_name(name)
}

/// The trees walked for nested `.git` entries.
fn walk_roots(spec: &SandboxSpec) -> Vec<PathBuf> {
    let mut v = vec![spec.project_dir.clone()];
    v.extend(spec.worktrees_dir.iter().cloned());
    v.extend(spec.rw.iter().cloned());
    v.into_iter().filter_map(|p| p.canonicalize().ok()).collect()
}

/// What the walk of a tree finds: `.git` entries, directories laid out as a git directory
/// (`HEAD`, `objects/`, `refs/`: git run below one takes it for a bare repository), ocsb's own
/// directories below the top, and directories it cannot read (the check must see everything:
/// an unreadable directory could hide any of the others).
#[derive(Default)]
struct Walked {
    git: Vec<PathBuf>,
    bare: Vec<PathBuf>,
    ocsb_dirs: Vec<PathBuf>,
    unreadable: Vec<PathBuf>,
}

/// Walk `root` without following links or entering a `.git`.
fn walk(root: &Path, out: &mut Walked) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            // Gone, or a file named in `OCSB_RW`: nothing to walk.
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) =>
            {
                continue;
            }
            Err(_) => {
                out.unreadable.push(dir);
                continue;
            }
        };
        let mut seen = (false, false, false);
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            match name.to_str() {
                Some("HEAD") if ft.is_file() => seen.0 = true,
                Some("objects") if ft.is_dir() => seen.1 = true,
                Some("refs") if ft.is_dir() => seen.2 = true,
                _ => {}
            }
            if name == ".git" {
                out.git.push(e.path());
            } else if ft.is_dir() {
                if (name == ".opencode-sandbox" || name == ".cc-safety-net") && dir != root {
                    out.ocsb_dirs.push(e.path());
                }
                stack.push(e.path());
            }
        }
        if seen == (true, true, true) {
            out.bare.push(dir);
        }
    }
}

/// What is planted in git's own directories now, whatever happened before: symbolic links
/// (git makes none there, and writes `COMMIT_EDITMSG`, `FETCH_HEAD`, logs and refs through
/// them, anywhere the user can write), and index entries whose path has a `.git` component
/// (git does not check paths it reads from the index: `git checkout -- .` would write them,
/// into `.git/hooks` too).
fn planted_in_git(checkouts: &[Checkout]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut dirs = BTreeSet::new();
    for c in checkouts {
        let Some(g) = &c.git else { continue };
        dirs.insert(g.gitdir.clone());
        dirs.insert(g.common.clone());
        for x in HostLookup.names(&g.common.join("worktrees")) {
            dirs.insert(g.common.join("worktrees").join(x));
        }
        if let Ok(o) = checkouts::git(&c.root)
            .args(["ls-files", "-z", "--cached"])
            .stderr(std::process::Stdio::null())
            .output()
            && o.stdout
                .split(|b| *b == 0)
                .any(|p| p.split(|b| *b == b'/').any(|c| c.eq_ignore_ascii_case(b".git") || c == b".."))
        {
            out.push(Finding {
                path: g.gitdir.join("index"),
                why: "the index names a path inside .git (or with `..`): `git checkout` or `git stash` \
                      on the host would write it, hooks included"
                    .into(),
            });
        }
    }
    for d in dirs {
        if HostLookup.entry(&d) != ocsb_policy::guard::Entry::Dir {
            continue;
        }
        let mut stack = vec![d.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                if ft.is_symlink() {
                    out.push(Finding {
                        path: p,
                        why: "a symbolic link in git's directory: git on the host would write through it"
                            .into(),
                    });
                } else if ft.is_dir()
                    && dir == d
                    && ["objects", "worktrees", "hooks", "info", "modules"]
                        .iter()
                        .any(|n| e.file_name() == *n)
                {
                    // Objects are written to fresh names; worktrees are listed on their own; the
                    // others are read-only in every sandbox (a link there is the user's own).
                } else if ft.is_dir() {
                    stack.push(p);
                }
            }
        }
    }
    out
}

/// An interactive rebase or cherry-pick the sandbox left with `exec` lines: `git rebase
/// --continue` on the host would run them.
fn pending_exec(checkouts: &[Checkout]) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in checkouts {
        let Some(g) = &c.git else { continue };
        for todo in [g.gitdir.join("rebase-merge/git-rebase-todo"), g.gitdir.join("sequencer/todo")] {
            let Some(text) = checkouts::read_small(&todo) else { continue };
            if text.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("exec ") || l.starts_with("x ")
            }) {
                out.push(Finding {
                    path: todo,
                    why: "an unfinished rebase with `exec` lines the agent left: `git rebase --continue` \
                          runs them (inspect, or `git rebase --abort`)"
                        .into(),
                });
            }
        }
    }
    out
}

fn snapshot(spec: &SandboxSpec, checkouts: &[Checkout]) -> Snapshot {
    let rule = Rule { writable: &[], rw_tool_files: &spec.rw_tool_files };
    let mut present = BTreeMap::new();
    for (p, why) in rule.watched(checkouts) {
        // The `commondir` placeholder is the launcher's own (see `guard::COMMONDIR_SELF`).
        let ours =
            p.ends_with("commondir") && checkouts::read_small(&p).is_some_and(|t| t == guard::COMMONDIR_SELF);
        if p.symlink_metadata().is_ok() && !ours {
            present.insert(p, why);
        }
    }
    let own: BTreeSet<PathBuf> = checkouts.iter().map(|c| c.root.join(".git")).collect();
    let mut found = Walked::default();
    let mut walked = BTreeSet::new();
    for r in walk_roots(spec) {
        if walked.iter().any(|w: &PathBuf| r.starts_with(w)) || !walked.insert(r.clone()) {
            continue;
        }
        walk(&r, &mut found);
    }
    let roots = walk_roots(spec);
    let checkout_roots: BTreeSet<&Path> = checkouts.iter().map(|c| c.root.as_path()).collect();
    for d in found.ocsb_dirs {
        if !d.parent().is_some_and(|p| checkout_roots.contains(p) || roots.iter().any(|r| r == p)) {
            present.insert(
                d,
                "ocsb's own settings below the top of a checkout: started there, ocsb would read them".into(),
            );
        }
    }
    for d in found.bare {
        present.insert(d, "laid out as a git directory: git run below it obeys its config and hooks".into());
    }
    for d in found.unreadable {
        present.insert(d, "a directory the check cannot read: it could hide a repository".into());
    }
    let mut nested = Vec::new();
    for g in found.git {
        let is_root_of_rw = g.parent().is_some_and(|p| roots.iter().any(|r| r == p));
        if own.contains(&g) || is_root_of_rw {
            continue;
        }
        if let Some(parent) = g.parent() {
            nested.push(parent.to_path_buf());
        }
        present.insert(g, NESTED_WHY.to_string());
    }
    Snapshot { present, nested }
}

fn read_json<T: for<'de> Deserialize<'de> + Default>(p: &Path) -> T {
    std::fs::read(p).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v).unwrap_or_default())
        .and_then(|()| std::fs::rename(&tmp, p))
        .map_err(|e| Error::io("write", p, e))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Findings still standing: kept ones whose path exists, appeared-while-dead-runs, and what is
/// planted now. Dead markers are consumed.
fn standing(spec: &SandboxSpec, checkouts: &[Checkout], now: &Snapshot) -> Result<Vec<Finding>> {
    let dir = dir_of(&spec.state_dir);
    let mut findings: Vec<Finding> = read_json(&dir.join("findings.json"));
    findings.retain(|f| f.path.symlink_metadata().is_ok());
    for name in HostLookup.names(&dir) {
        let Some(rest) = name.strip_prefix("running-") else { continue };
        let pid: u32 = rest.split(['-', '.']).next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if pid_alive(pid) {
            continue;
        }
        let p = dir.join(&name);
        let m: Marker = read_json(&p);
        for (path, why) in &now.present {
            if !m.present.contains_key(path) {
                let mut f = Finding {
                    path: path.clone(),
                    why: format!("{why} (appeared while a sandbox ran whose launcher did not finish)"),
                };
                defuse(&mut f);
                findings.push(f);
            }
        }
        let _ = std::fs::remove_file(&p);
    }
    findings.extend(guard::planted_now(checkouts, &HostLookup, &|p| checkouts::read_small(p)));
    findings.extend(planted_in_git(checkouts));
    findings.sort();
    findings.dedup_by(|a, b| a.path == b.path);
    write_json(&dir.join("findings.json"), &findings)?;
    Ok(findings)
}

fn ensure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir) {
        Ok(()) => Ok(()),
        Err(e) => Err(Error::io("create the audit directory", dir, e)),
    }
}

/// Move aside what host git would execute from (a nested `.git`, a `commondir`), so the next
/// plain `git` on the host does not; the finding then names the new place.
fn defuse(f: &mut Finding) {
    let name = f.path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    let link = f.path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
    if name != ".git" && name != "commondir" && name != "index" && !link {
        return;
    }
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut aside = name.clone();
    aside.push(format!(".ocsb-planted-{secs}"));
    let to = f.path.with_file_name(aside);
    if std::fs::rename(&f.path, &to).is_ok() {
        f.why = format!(
            "moved aside from {}: {}; to keep it, `mv {} {}` and `ocsb audit --accept`",
            f.path.display(),
            f.why,
            to.display(),
            f.path.display()
        );
        f.path = to;
    }
}

/// The message for findings: each path and why, then what to do.
pub fn render(findings: &[Finding]) -> String {
    findings.iter().map(|f| format!("\n    {}  ({})", f.path.display(), f.why)).collect()
}

pub const FIX: &str = "inspect each path (`ls -la PATH`, `cat PATH`; do not run git there); remove \
    what you did not make (`rm -r PATH`) and run `ocsb audit`; if you made it yourself, \
    `ocsb audit --accept`";

/// A sandbox's audit, from before it starts to after it exits.
pub struct Audit {
    marker: PathBuf,
    before: BTreeMap<PathBuf, String>,
    spec: SandboxSpec,
    /// Repositories nested in the checkouts: the sandbox protects their metadata too.
    pub nested: Vec<PathBuf>,
}

/// Refuse to start while anything planted is there; otherwise record what exists.
pub fn begin(spec: &SandboxSpec) -> Result<Audit> {
    let dir = dir_of(&spec.state_dir);
    ensure_dir(&dir)?;
    let checkouts = checkouts::of_spec(spec);
    let now = snapshot(spec, &checkouts);
    let findings = standing(spec, &checkouts, &now)?;
    if !findings.is_empty() {
        return Err(Error::refused(
            format!(
                "refusing to start: git or host tools would run what was planted in the project{}",
                render(&findings)
            ),
            FIX,
        ));
    }
    let marker =
        dir.join(format!("running-{}-{}.json", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst)));
    write_json(&marker, &Marker { pid: std::process::id(), present: now.present.clone() })?;
    Ok(Audit { marker, before: now.present, spec: spec.clone(), nested: now.nested })
}

impl Audit {
    /// After the sandbox exited: report and keep what appeared. Returns the new findings.
    pub fn end(self) -> Vec<Finding> {
        let checkouts = checkouts::of_spec(&self.spec);
        let now = snapshot(&self.spec, &checkouts);
        let mut new: Vec<Finding> = now
            .present
            .iter()
            .filter(|(p, _)| !self.before.contains_key(*p))
            .map(|(p, why)| Finding {
                path: p.clone(),
                why: format!("{why} (appeared while the sandbox ran)"),
            })
            .collect();
        new.extend(guard::planted_now(&checkouts, &HostLookup, &|p| checkouts::read_small(p)));
        new.extend(planted_in_git(&checkouts));
        new.extend(pending_exec(&checkouts));
        for f in &mut new {
            defuse(f);
        }
        if !new.is_empty() {
            let file = dir_of(&self.spec.state_dir).join("findings.json");
            let mut all: Vec<Finding> = read_json(&file);
            all.extend(new.iter().cloned());
            all.sort();
            all.dedup_by(|a, b| a.path == b.path);
            if let Err(e) = write_json(&file, &all) {
                eprintln!("ocsb: warning: {e}");
            }
            eprintln!(
                "ocsb: WARNING: the sandbox left what git or a host tool would run; ocsb will not \
                 start here until it is resolved:{}\n  fix: {FIX}",
                render(&new)
            );
        }
        let _ = std::fs::remove_file(&self.marker);
        new
    }
}

/// `ocsb audit`: what stands now (as a start would see it). `accept` clears what the user
/// vouches for; what is planted by definition (see `guard::planted_now`) cannot be accepted.
pub fn report(spec: &SandboxSpec, accept: bool) -> Result<Vec<Finding>> {
    let dir = dir_of(&spec.state_dir);
    ensure_dir(&dir)?;
    let checkouts = checkouts::of_spec(spec);
    let now = snapshot(spec, &checkouts);
    let mut findings = standing(spec, &checkouts, &now)?;
    if accept {
        let mut never = guard::planted_now(&checkouts, &HostLookup, &|p| checkouts::read_small(p));
        never.extend(planted_in_git(&checkouts));
        findings.retain(|f| never.iter().any(|n| n.path == f.path));
        write_json(&dir.join("findings.json"), &findings)?;
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_finds_nested_git_entries_without_following_links() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("p");
        std::fs::create_dir_all(p.join(".git/objects")).unwrap();
        std::fs::create_dir_all(p.join("src/inner/.git")).unwrap();
        std::fs::create_dir_all(p.join("vendor/x")).unwrap();
        std::fs::write(p.join("vendor/x/.git"), "gitdir: ../../.git/modules/x\n").unwrap();
        std::os::unix::fs::symlink(t.path(), p.join("loop")).unwrap();
        std::fs::create_dir_all(p.join("lib/fake/objects")).unwrap();
        std::fs::create_dir_all(p.join("lib/fake/refs")).unwrap();
        std::fs::write(p.join("lib/fake/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(p.join("deep/.opencode-sandbox")).unwrap();
        let mut out = Walked::default();
        walk(&p, &mut out);
        out.git.sort();
        assert_eq!(out.git, vec![p.join(".git"), p.join("src/inner/.git"), p.join("vendor/x/.git")]);
        assert_eq!(out.bare, vec![p.join("lib/fake")]);
        assert_eq!(out.ocsb_dirs, vec![p.join("deep/.opencode-sandbox")]);
    }

    #[test]
    fn audit_dir_sits_beside_the_state_dir() {
        assert_eq!(dir_of(Path::new("/h/.local/share/ocsb/p")), Path::new("/h/.local/share/ocsb/.p.audit"));
    }
}
