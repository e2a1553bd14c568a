//! The launcher's net under the checkout rule: what no mount can express.
//!
//! Inside the sandbox each checkout's `.git` is the agent's own repository, and the user's git
//! directories are never writable, so nothing here looks into them. What a mount cannot stop
//! is the *creation* of a new name in a writable tree: a `.git` entry or a directory laid out
//! as a git directory below a checkout's top (a nested repository, whose config and hooks the
//! user's git obeys when run in that directory, and which the superproject's `git status`
//! enters through a gitlink), ocsb's own settings below a checkout's top, a tool file such as
//! `.envrc`. The live watch (`watch`) moves such a layout aside within a second while the
//! session runs; this look is the net before a sandbox starts and after it exits:
//!
//! * **before**: it refuses to start while anything planted is there: found by the last
//!   check and not yet removed, found now (a checkout's `.git` that is a link, that it cannot
//!   read as git does, or that names git data the sandbox can write and no checkout owns), or
//!   appeared during a sandbox whose launcher died before its own check;
//! * **after**: everything watched that appeared while the sandbox ran is reported and kept as
//!   a finding, so the next start refuses until the user removes it or vouches for it
//!   (`ocsb audit --accept`).
//!
//! Nothing is ever deleted: the user decides. What host git would *execute* on its next run in
//! the project, a nested `.git`, is moved aside at once (`<path>.ocsb-planted-<time>`), so that
//! a plain `git status` after the session is safe; the message says how to move it back.
//! Findings and the "sandbox running" markers live beside the state directory
//! (`<state>.audit/`), where no sandbox can write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use ocsb_policy::guard::{self, Checkout, Finding, Lookup, Rule};
use serde::{Deserialize, Serialize};

use super::checkouts::{self, HostLookup};
use super::configmemo;
use super::error::{Error, Result};
use super::spec::SandboxSpec;
use super::toolfiles::{self, ToolFiles};
use super::watch::Layout;
use super::watch::aside::move_aside;

/// Numbers this process's markers and changes of the records.
static SEQ: AtomicUsize = AtomicUsize::new(0);

/// What a sandbox in progress recorded before it started.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Marker {
    pid: u32,
    /// Watched paths that existed, with why they are watched.
    present: BTreeMap<PathBuf, String>,
    /// The nested repositories the sandbox protected: the launcher's placeholders at their tops
    /// appear while it runs ([`launchers_placeholder`]). Absent from the markers of older
    /// builds: then every such placeholder is reported, as it was.
    #[serde(default)]
    nested: Vec<PathBuf>,
}

/// An empty `.opencode-sandbox` or `.cc-safety-net` directory (not a link) at the top of a
/// repository in `nested`, which a sandbox protected: the launcher made it there, as the
/// checkout rule's placeholder. One with anything in it was not made by the launcher.
fn launchers_placeholder(p: &Path, nested: &[PathBuf]) -> bool {
    let named = p.file_name().is_some_and(|n| n == ".opencode-sandbox" || n == ".cc-safety-net");
    named
        && p.parent().is_some_and(|top| nested.iter().any(|n| n == top))
        && p.symlink_metadata().is_ok_and(|m| m.is_dir())
        && std::fs::read_dir(p).is_ok_and(|mut e| e.next().is_none())
}

/// The watched paths of a sandbox's checkouts that exist now, and the nested repositories.
struct Snapshot {
    present: BTreeMap<PathBuf, String>,
    nested: Vec<PathBuf>,
    /// Of `present`, what is moved aside when it appeared: a tool file that a tool acts on when
    /// the user enters the directory (and what an `.envrc` loads), besides what [`defuse`]
    /// moves by its kind.
    aside: BTreeSet<PathBuf>,
}

const ROOT_WHY: &str = "a git repository at the top of a writable root: git run there (a shell \
    prompt, `git status`) obeys its config and hooks";

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
/// (git run below one takes it for a bare repository, or one with `core.worktree`), ocsb's own
/// directories below the top, symbolic links (the walk does not follow them), and directories
/// it cannot read (the check must see everything: an unreadable directory could hide any of
/// the others).
///
/// Each entry is also shown to the tool files' collector ([`toolfiles::Collect`]): the walk is
/// the one look at every entry a start makes, so the tool files at any depth cost it one
/// look-up in the registry per entry, and a read of each `.envrc` there is.
#[derive(Default)]
struct Walked {
    git: Vec<PathBuf>,
    bare: Vec<PathBuf>,
    ocsb_dirs: Vec<PathBuf>,
    links: Vec<PathBuf>,
    unreadable: Vec<PathBuf>,
    tools: toolfiles::Collect,
    /// What `tools` found, once the walk is done ([`toolfiles::Collect::finish`]).
    tool_files: ToolFiles,
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
        let mut layout = Layout::default();
        let parent = dir.file_name().map(|n| n.to_os_string());
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            layout.see(&name);
            if name != ".git" {
                out.tools.see(root, &dir, parent.as_deref(), &name, &ft);
            }
            if name == ".git" {
                out.git.push(e.path());
            } else if ft.is_dir() {
                if (name == ".opencode-sandbox" || name == ".cc-safety-net") && dir != root {
                    out.ocsb_dirs.push(e.path());
                }
                stack.push(e.path());
            } else if ft.is_symlink() {
                out.links.push(e.path());
            }
        }
        if layout.is_git_dir() {
            out.bare.push(dir);
        }
    }
}

/// What one look at the project sees: the checkouts (git's config) and the walk of the roots.
struct Seen {
    checkouts: Vec<Checkout>,
    walked: Walked,
}

/// Look at `spec`'s project: `git config` (in discovery) on one side, the walk of the roots on
/// the other, in parallel, since neither needs the other's answer.
fn look(spec: &SandboxSpec) -> Seen {
    let _budget = checkouts::begin_look();
    configmemo::load(&dir_of(&spec.state_dir).join(CONFIG_MEMO));
    let seen = look_now(spec);
    configmemo::save();
    seen
}

/// Where the answers of the look's `git config` runs are kept between starts
/// ([`configmemo`]): in the audit's directory, which no sandbox can write.
const CONFIG_MEMO: &str = "git-config.json";

fn look_now(spec: &SandboxSpec) -> Seen {
    let roots = checkouts::roots_of_spec(spec);
    std::thread::scope(|s| {
        let other = s.spawn(|| walk_all(spec));
        let checkouts = checkouts::of_roots(&roots, &spec.home);
        match other.join() {
            Ok(walked) => Seen { checkouts, walked },
            // Never "nothing found" for a look that did not finish.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Every root of `spec`, each tree once (a root inside another is walked with it).
fn walk_all(spec: &SandboxSpec) -> Walked {
    let dotenv = toolfiles::direnv_loads_dotenv(&spec.home);
    let mut found =
        Walked { tools: toolfiles::Collect::new(spec.rw_tool_files.clone(), dotenv), ..Walked::default() };
    let mut walked = BTreeSet::new();
    let roots = walk_roots(spec);
    for r in &roots {
        if walked.iter().any(|w: &PathBuf| r.starts_with(w)) || !walked.insert(r.clone()) {
            continue;
        }
        walk(r, &mut found);
    }
    found.tool_files = std::mem::take(&mut found.tools).finish(&roots);
    found
}

/// `nested`: the repositories nested in the checkouts that the sandbox protected as checkouts
/// of its own. Its plan puts read-only placeholders for ocsb's own settings at their top: an
/// empty directory there is the launcher's, not settings planted below a checkout's top (one
/// with anything in it was not made by the launcher, and is reported).
fn snapshot(spec: &SandboxSpec, checkouts: &[Checkout], found: &Walked, nested: &[PathBuf]) -> Snapshot {
    let rule = Rule { writable: &[], rw_tool_files: &spec.rw_tool_files };
    let mut present = BTreeMap::new();
    for (p, why) in rule.watched(checkouts) {
        if p.symlink_metadata().is_ok() {
            present.insert(p, why);
        }
    }
    let mut aside = BTreeSet::new();
    for h in found.tool_files.held.iter().filter(|h| h.exists) {
        present.insert(h.path.clone(), h.why.clone());
        if h.aside {
            aside.insert(h.path.clone());
        }
    }
    let own: BTreeSet<PathBuf> = checkouts.iter().map(|c| c.root.join(".git")).collect();
    let roots = walk_roots(spec);
    let checkout_roots: BTreeSet<&Path> = checkouts.iter().map(|c| c.root.as_path()).collect();
    for d in &found.ocsb_dirs {
        let top = |p: &Path| checkout_roots.contains(p) || roots.iter().any(|r| r == p);
        if !d.parent().is_some_and(top) && !launchers_placeholder(d, nested) {
            present.insert(
                d.clone(),
                "ocsb's own settings below the top of a checkout: started there, ocsb would read them".into(),
            );
        }
    }
    for d in &found.bare {
        present.insert(
            d.clone(),
            "laid out as a git directory: git run below it obeys its config and hooks".into(),
        );
    }
    for d in &found.unreadable {
        present.insert(d.clone(), UNREADABLE_WHY.into());
    }
    let may_write = sandbox_writes(spec);
    for l in &found.links {
        if let Some(to) = leads_out(l, &roots, &may_write) {
            present.insert(
                l.clone(),
                format!(
                    "a link to {}, which the sandbox can write and this check does not walk: git run \
                     through the link obeys the repository there",
                    to.display()
                ),
            );
        }
    }
    let mut nested = Vec::new();
    for g in &found.git {
        let is_root_of_rw = g.parent().is_some_and(|p| roots.iter().any(|r| r == p));
        if own.contains(g) || is_root_of_rw {
            // The repository at the top of a root is the user's checkout: recorded, so that one
            // made while a sandbox ran (`git init` in a project that was none, with an
            // fsmonitor in its config) is reported. Below the worktrees directory only a
            // repository of its own counts: a worktree's `.git` is a file, made by `ocsb wt
            // add` while another session of the project may run.
            if is_root_of_rw || g.is_dir() {
                present.insert(g.clone(), ROOT_WHY.to_string());
            }
            continue;
        }
        if let Some(parent) = g.parent() {
            nested.push(parent.to_path_buf());
        }
        present.insert(g.clone(), NESTED_WHY.to_string());
    }
    Snapshot { present, nested, aside }
}

/// Why a directory the walk could not read is a finding. One that appeared while the sandbox
/// ran is moved aside whole: what it hides (a `.git` the superproject's `git status` enters
/// through a gitlink) cannot be told apart.
const UNREADABLE_WHY: &str = "a directory the check cannot read: it could hide a repository";

/// Where the link `l` leads, when that is a directory the sandbox can write and the walk does
/// not cover (its own `/tmp` in the state directory, a shared `/tmp`, the inside of a `.git`):
/// git run through the link works in the directory it leads to, a repository the agent made
/// there. A link whose text stays in the walked roots, outside any `.git`, is not resolved (the
/// links on its way are walked themselves): a tree of packages holds thousands of them.
fn leads_out(l: &Path, roots: &[PathBuf], may_write: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let text = std::fs::read_link(l).ok()?;
    let lexical = checkouts::lexical(&l.parent()?.join(text));
    if roots.iter().any(|r| lexical.starts_with(r)) && !in_git(&lexical) {
        return None;
    }
    let real = std::fs::canonicalize(l).ok()?;
    let walked = roots.iter().any(|r| real.starts_with(r)) && !in_git(&real);
    (!walked && real.is_dir() && may_write(&real)).then_some(real)
}

/// Whether `p` lies inside a `.git` directory, which the walk does not enter.
fn in_git(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str() == ".git")
}

/// The kept findings: none when the file is missing; an error when it cannot be read, so that
/// a damaged record refuses a start instead of passing for "nothing found".
fn read_findings(dir: &Path) -> Result<Vec<Finding>> {
    let p = dir.join(FINDINGS);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            Error::refused(
                format!("the audit's record {} cannot be read: {e}", p.display()),
                "look over the project as `ocsb audit` would (nested .git, links in .git), then remove the file",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io("read", &p, e)),
    }
}

/// The pid in a marker's name, `running-<pid>-<n>.json`; `None` for any other name.
fn marker_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("running-")?.strip_suffix(".json")?.split_once('-')?;
    n.parse::<usize>().ok()?;
    pid.parse().ok()
}

/// The pid in the name of a temporary file of [`write_json`], `<name>.<pid>-<n>.tmp`.
fn temporary_pid(name: &str) -> Option<u32> {
    let (_, pid_n) = name.strip_suffix(".tmp")?.rsplit_once('.')?;
    pid_n.split_once('-')?.0.parse().ok()
}

/// Written whole or not at all, through a name of this process's own: two launchers of one
/// project (two `ocsb exec`) write the same files, and a shared temporary name would let one
/// rename the other's away (what they read, change and write back is under [`lock`]).
fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    static TMP: AtomicUsize = AtomicUsize::new(0);
    let mut name = p.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}-{}.tmp", std::process::id(), TMP.fetch_add(1, Ordering::SeqCst)));
    let tmp = p.with_file_name(name);
    std::fs::write(&tmp, serde_json::to_vec_pretty(v).unwrap_or_default())
        .and_then(|()| std::fs::rename(&tmp, p))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io("write", p, e)
        })
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Findings still standing: kept ones whose path exists, appeared-while-dead-runs, and what is
/// planted now. Dead markers are consumed once what they say is recorded.
fn standing(
    spec: &SandboxSpec,
    checkouts: &[Checkout],
    now: &Snapshot,
    tools: &ToolFiles,
) -> Result<Vec<Finding>> {
    let dir = dir_of(&spec.state_dir);
    let planted = guard::planted_now(checkouts, &HostLookup, &sandbox_writes(spec));
    let _lock = lock(&dir)?;
    let kept = read_findings(&dir)?;
    let mut findings = kept.clone();
    findings.retain(|f| f.path.symlink_metadata().is_ok());
    let mut consumed = Vec::new();
    for name in HostLookup.names(&dir) {
        if temporary_pid(&name).is_some_and(|pid| !pid_alive(pid)) {
            // Left by a launcher that died between writing and renaming: not a record.
            let _ = std::fs::remove_file(dir.join(&name));
            continue;
        }
        let Some(pid) = marker_pid(&name) else { continue };
        if pid_alive(pid) {
            continue;
        }
        let p = dir.join(&name);
        let Some(m) = std::fs::read(&p).ok().and_then(|b| serde_json::from_slice::<Marker>(&b).ok()) else {
            // What existed before that sandbox started is unknown: flagging everything would
            // move the user's own repositories aside. The record itself stands until removed.
            findings.push(Finding {
                path: p,
                why: "the record of a sandbox whose launcher did not finish cannot be read, so what \
                      appeared while it ran is unknown: look over the checkouts, then remove the record"
                    .into(),
            });
            continue;
        };
        for (path, why) in &now.present {
            if !m.present.contains_key(path) && !launchers_placeholder(path, &m.nested) {
                let mut f = Finding {
                    path: path.clone(),
                    why: format!("{why} (appeared while a sandbox ran whose launcher did not finish)"),
                };
                defuse(&mut f, now.aside.contains(path));
                findings.push(f);
            }
        }
        consumed.push(p);
    }
    findings.extend(planted);
    findings.sort();
    findings.dedup_by(|a, b| a.path == b.path);
    if !consumed.is_empty() || findings != kept {
        write_json(&dir.join(FINDINGS), &findings)?;
        changed(&dir)?;
    }
    // Only now: had the record failed, the next check would read these markers again.
    for p in consumed {
        let _ = std::fs::remove_file(p);
    }
    // Found again by every check while it holds, never recorded: mending the repository is
    // what clears it, and nothing else can.
    findings.extend(checkouts.iter().filter_map(config_unread));
    findings.extend(tools.unholdable.iter().cloned());
    Ok(findings)
}

/// The findings kept between starts, in the audit directory.
const FINDINGS: &str = "findings.json";

/// The file, in the audit directory, rewritten with a name of its own whenever the records
/// change: a start, findings recorded, a dead run's marker consumed. A check that saw one
/// name stands for the next start only while the name is the same ([`Checked::begin`]).
const CHANGED: &str = "changed";

/// Say that the records changed (see [`CHANGED`]). A pid and a count can come again; with the
/// time the name is this change's alone.
fn changed(dir: &Path) -> Result<()> {
    let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let name = format!("{}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst), at.as_nanos());
    write_json(&dir.join(CHANGED), &name)
}

/// The records are read, changed and written back by every launcher of the project: one at a
/// time (`flock` on `lock` in the audit directory), so that no finding another launcher just
/// recorded is written over.
fn lock(dir: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&p)
        .map_err(|e| Error::io("open", &p, e))?;
    f.lock().map_err(|e| Error::io("lock", &p, e))?;
    Ok(f)
}

fn ensure_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).recursive(true).create(dir) {
        Ok(()) => Ok(()),
        Err(e) => Err(Error::io("create the audit directory", dir, e)),
    }
}

/// Move aside what host git would act on (a nested `.git`, a link, a directory the check could
/// not read, the `HEAD` of a directory laid out as a git directory), and, when `aside`, the
/// finding's path itself (a tool file a prompt acts on when the user enters its directory), so
/// the next plain `git` or `cd` on the host does not; the finding then
/// names the new place, or says that it could not be moved. Returns the move (from, to) when
/// it made one.
fn defuse(f: &mut Finding, aside: bool) -> Option<(PathBuf, PathBuf)> {
    let name = f.path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    let meta = f.path.symlink_metadata();
    let link = meta.as_ref().is_ok_and(|m| m.file_type().is_symlink());
    // A directory laid out as a git directory stops being one without its `HEAD`; the
    // directory itself (it may be a source directory of the user's) stays where it is.
    let hidden = f.why.starts_with(UNREADABLE_WHY);
    let from = if name == ".git" || hidden || link || aside {
        f.path.clone()
    } else if meta.is_ok_and(|m| m.is_dir()) && f.path.join("HEAD").symlink_metadata().is_ok() {
        f.path.join("HEAD")
    } else {
        return None;
    };
    match move_aside(&from) {
        Ok(to) => {
            f.why = format!(
                "moved aside from {}: {}; to keep it, `mv {} {}` and `ocsb audit --accept`",
                from.display(),
                f.why,
                to.display(),
                from.display()
            );
            f.path = to.clone();
            Some((from, to))
        }
        Err(e) => {
            f.why = format!(
                "NOT moved aside ({e}): do not run git in or above {} until it is gone; {}",
                from.parent().unwrap_or(&from).display(),
                f.why
            );
            None
        }
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
    /// The checkouts as the look before the start saw them (the nested ones aside): the
    /// sandbox's checkout rule is made from them ([`checkouts::of_spec_known`]).
    pub checkouts: Vec<Checkout>,
    /// The tool files in the writable trees, at any depth, as the look before the start saw
    /// them: held read-only and watched ([`SandboxSpec::tool_files`]).
    pub tool_files: ToolFiles,
}

/// Refuse to start while anything planted is there; otherwise record what exists.
pub fn begin(spec: &SandboxSpec) -> Result<Audit> {
    check(spec)?.begin(spec)
}

/// What a check of the checkouts saw: the findings that stand, and the watched paths that
/// exist. A start right after the check ([`Checked::begin`]) uses it instead of looking again.
pub struct Checked {
    /// Findings that stand now: a sandbox start refuses while there is one.
    pub findings: Vec<Finding>,
    present: BTreeMap<PathBuf, String>,
    nested: Vec<PathBuf>,
    checkouts: Vec<Checkout>,
    tool_files: ToolFiles,
    /// What the check looked at: a spec that would look elsewhere is checked again.
    looked_at: Looked,
    /// The records' last change when the check began ([`CHANGED`]): a sandbox begun since,
    /// by any process (a self-test, another `ocsb exec`), may have planted something, and one
    /// that ended may have recorded a finding; either way the check no longer stands.
    changed: Option<Vec<u8>>,
    made: std::time::Instant,
}

/// How long a check stands for the start after it: a sandbox that was already running can
/// plant in the gap, and only a look right before the start would refuse over that.
pub const STANDS_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The parts of a spec that decide what the audit looks at.
#[derive(PartialEq, Eq)]
struct Looked {
    roots: Vec<PathBuf>,
    state_dir: PathBuf,
    home: PathBuf,
    rw_tool_files: Vec<String>,
    nested_repos: Vec<PathBuf>,
}

impl Looked {
    fn of(spec: &SandboxSpec) -> Looked {
        Looked {
            roots: walk_roots(spec),
            state_dir: spec.state_dir.clone(),
            home: spec.home.clone(),
            rw_tool_files: spec.rw_tool_files.clone(),
            nested_repos: spec.nested_repos.clone(),
        }
    }
}

/// Look at the checkouts as a start would: what stands (kept findings, plants of dead runs,
/// what is planted now) and what exists. Records the standing findings; starts nothing.
pub fn check(spec: &SandboxSpec) -> Result<Checked> {
    let dir = dir_of(&spec.state_dir);
    ensure_dir(&dir)?;
    let made = std::time::Instant::now();
    let changed = std::fs::read(dir.join(CHANGED)).ok();
    let Seen { checkouts, walked } = look(spec);
    let now = snapshot(spec, &checkouts, &walked, &spec.nested_repos);
    let findings = standing(spec, &checkouts, &now, &walked.tool_files)?;
    let looked_at = Looked::of(spec);
    Ok(Checked {
        findings,
        present: now.present,
        nested: now.nested,
        checkouts,
        tool_files: walked.tool_files,
        looked_at,
        changed,
        made,
    })
}

impl Checked {
    /// `spec` as a start from this check sees it: with the nested repositories and the tool
    /// files this check found ([`Checked::begin`] puts those of the check it uses in the
    /// sandbox's spec).
    pub(crate) fn for_start(&self, spec: &SandboxSpec) -> SandboxSpec {
        let mut spec = spec.clone();
        spec.nested_repos = self.nested.clone();
        spec.tool_files = self.tool_files.clone();
        spec
    }

    /// The checkouts this check looked at.
    pub(crate) fn checkouts(&self) -> &[Checkout] {
        &self.checkouts
    }

    /// Start the audit of a sandbox of `spec`: refused while a finding stands; otherwise what
    /// exists is recorded for the check after it exits. The check is made again unless it was
    /// made less than [`STANDS_FOR`] ago, for a spec of the same roots and settings, with the
    /// records unchanged since (no sandbox begun, no finding recorded): then the two would look
    /// at the same tree moments apart. What a sandbox already running plants in that gap is reported when this
    /// one exits, as what it plants after the start always is.
    pub fn begin(self, spec: &SandboxSpec) -> Result<Audit> {
        let dir = dir_of(&spec.state_dir);
        let changed_now = std::fs::read(dir.join(CHANGED)).ok();
        let fresh = self.made.elapsed() < STANDS_FOR
            && self.changed == changed_now
            && self.looked_at == Looked::of(spec);
        let checked = if fresh { self } else { check(spec)? };
        if !checked.findings.is_empty() {
            return Err(Error::refused(
                format!(
                    "refusing to start: git or host tools would run what was planted in the project{}",
                    render(&checked.findings)
                ),
                FIX,
            ));
        }
        // Said first: a marker left by a start that then failed would be taken for a dead run's.
        changed(&dir)?;
        let marker =
            dir.join(format!("running-{}-{}.json", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst)));
        let record = Marker {
            pid: std::process::id(),
            present: checked.present.clone(),
            nested: checked.nested.clone(),
        };
        write_json(&marker, &record)?;
        Ok(Audit {
            marker,
            before: checked.present,
            spec: spec.clone(),
            nested: checked.nested,
            checkouts: checked.checkouts,
            tool_files: checked.tool_files,
        })
    }
}

impl Audit {
    /// After the sandbox exited: report and keep what appeared. Returns the new findings.
    pub fn end(self) -> Vec<Finding> {
        let Seen { checkouts, walked } = look(&self.spec);
        let now = snapshot(&self.spec, &checkouts, &walked, &self.nested);
        let mut new: Vec<Finding> = now
            .present
            .iter()
            .filter(|(p, _)| !self.before.contains_key(*p))
            .map(|(p, why)| Finding {
                path: p.clone(),
                why: format!("{why} (appeared while the sandbox ran)"),
            })
            .collect();
        new.extend(guard::planted_now(&checkouts, &HostLookup, &sandbox_writes(&self.spec)));
        let mut moved: Vec<(PathBuf, PathBuf)> = Vec::new();
        for f in &mut new {
            // Inside what an earlier finding moved aside: named where it is now.
            if let Some((from, to)) = moved.iter().find(|(from, _)| f.path.starts_with(from))
                && let Ok(rest) = f.path.strip_prefix(from)
            {
                f.path = to.join(rest);
                continue;
            }
            moved.extend(defuse(f, now.aside.contains(&f.path)));
        }
        // Not recorded: the next check finds it again for as long as it holds, and no longer.
        let mut unread: Vec<Finding> = checkouts.iter().filter_map(config_unread).collect();
        unread.extend(walked.tool_files.unholdable.into_iter().filter(|f| f.path.symlink_metadata().is_ok()));
        let mut keep_marker = false;
        if !new.is_empty() {
            let dir = dir_of(&self.spec.state_dir);
            let record = || -> Result<()> {
                let _lock = lock(&dir)?;
                let mut all = read_findings(&dir)?;
                all.extend(new.iter().cloned());
                all.sort();
                all.dedup_by(|a, b| a.path == b.path);
                write_json(&dir.join(FINDINGS), &all)?;
                changed(&dir)
            };
            if let Err(e) = record() {
                // The marker stays: the next start takes this run for one whose launcher did
                // not finish and finds again what appeared under a watched name (what was
                // moved aside is named in the warning below).
                eprintln!("ocsb: warning: {e}");
                let _ = changed(&dir);
                keep_marker = true;
            }
        }
        new.extend(unread);
        if !new.is_empty() {
            eprintln!(
                "ocsb: WARNING: the sandbox left what git or a host tool would run; ocsb will not \
                 start here until it is resolved:{}\n  fix: {FIX}",
                render(&new)
            );
        }
        if !keep_marker {
            let _ = std::fs::remove_file(&self.marker);
        }
        new
    }
}

/// A repository whose own config git did not read: git takes the directory for no repository
/// now (a `HEAD` the agent broke, `objects` moved away), so the look got only the user's global
/// config, and the hooks path and includes the rule must hold for the session that mends it
/// again were lost. Not a plant to move aside: the user's repository, to mend. A condition, not
/// a record: every check (a start, the end of a run, `ocsb audit`) asks it again, so it refuses
/// starts for as long as it holds, however it came about (another project's sandbox that could
/// write the repository, a run whose end was not recorded), and `--accept` cannot clear it.
fn config_unread(c: &Checkout) -> Option<Finding> {
    use std::os::unix::fs::MetadataExt;
    let g = c.git.as_ref()?;
    let own = g.common.join("config");
    let m = own.symlink_metadata().ok().filter(|m| m.is_file())?;
    // Git read it or not, a file of section headers and comments sets nothing (one too large
    // to read whole counts as setting something).
    if m.len() <= MAX_CONFIG
        && checkouts::read_limited(&own, MAX_CONFIG).is_some_and(|text| sets_nothing(&text))
    {
        return None;
    }
    let read =
        c.config_files.iter().any(|f| f.metadata().is_ok_and(|r| (r.dev(), r.ino()) == (m.dev(), m.ino())));
    (!read).then(|| Finding {
        path: g.gitdir.join("HEAD"),
        why: "git does not take this for a repository now (its HEAD or objects are broken), so the \
              check cannot read the config git would obey once it is mended: mend it, then run `ocsb audit`"
            .to_string(),
    })
}

/// The largest repository config [`config_unread`] reads to see whether it sets anything.
const MAX_CONFIG: u64 = 1 << 20;

/// Whether a git config file sets no variable: each line (split at LF or CR) is blank, a
/// comment, or a plain section header (`[core]`, `[a.b]`, `[remote "origin"]`: a name of
/// letters, digits, `.` and `-`). Anything else counts as setting one (a header with a variable
/// after it, an escape in a subsection name), so a form this does not know is never taken for
/// an empty file.
fn sets_nothing(text: &str) -> bool {
    let name =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let header = |l: &str| {
        let Some(inner) = l.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else { return false };
        match inner.split_once(' ') {
            None => name(inner),
            Some((section, sub)) => {
                name(section)
                    && sub.len() >= 2
                    && sub.starts_with('"')
                    && sub.ends_with('"')
                    && !sub[1..sub.len() - 1].contains(['"', '\\', '\n', '\r'])
            }
        }
    };
    text.split(['\n', '\r']).all(|l| {
        let l = l.trim_matches([' ', '\t']);
        l.is_empty() || l.starts_with(['#', ';']) || header(l)
    })
}

/// Whether a sandbox of `spec` can write `p` (it lies under one of its writable binds). The
/// binds are worked out on the first question only: it is asked of a link that leads out of
/// the walked trees and of a linked worktree whose git data is no checkout's `.git`, which a
/// user's trees seldom have. When they cannot
/// be worked out, every path counts as writable: the check must not pass for want of an answer.
fn sandbox_writes(spec: &SandboxSpec) -> impl Fn(&Path) -> bool + '_ {
    let writable: std::cell::OnceCell<Option<Vec<PathBuf>>> = std::cell::OnceCell::new();
    move |p: &Path| {
        let binds = writable.get_or_init(|| {
            let fs = super::plan::RealFs;
            let binds = super::plan::writable_of(spec, &super::remembered::Remembered::new(&fs)).ok()?;
            Some(binds.into_iter().map(|w| w.canonicalize().unwrap_or(w)).collect())
        });
        binds.as_ref().is_none_or(|binds| binds.iter().any(|w| p.starts_with(w)))
    }
}

/// `ocsb audit`: what stands now (as a start would see it). `accept` clears what the user
/// vouches for; what is planted by definition ([`guard::planted_now`]) and a repository git
/// cannot read (its config unread) cannot be accepted: they are found again while they hold.
pub fn report(spec: &SandboxSpec, accept: bool) -> Result<Vec<Finding>> {
    let mut findings = check(spec)?.findings;
    if accept {
        let Seen { checkouts, walked } = look(spec);
        let mut never = guard::planted_now(&checkouts, &HostLookup, &sandbox_writes(spec));
        never.extend(checkouts.iter().filter_map(config_unread));
        never.extend(walked.tool_files.unholdable);
        let (keep, accepted): (Vec<Finding>, Vec<Finding>) =
            findings.into_iter().partition(|f| never.iter().any(|n| n.path == f.path));
        findings = keep;
        // Read again under the lock: what another launcher recorded since is not accepted unseen.
        let dir = dir_of(&spec.state_dir);
        let _lock = lock(&dir)?;
        let mut all = read_findings(&dir)?;
        all.retain(|f| !accepted.iter().any(|a| a.path == f.path));
        write_json(&dir.join(FINDINGS), &all)?;
        changed(&dir)?;
    }
    Ok(findings)
}

/// Keeps `found` among the findings, for what no check of the checkouts looks for again: the
/// strays a session's containers left ([`super::strays`]). `ocsb audit` lists them, and a start
/// refuses while one stands (its path exists), as for anything planted: what was moved aside
/// stays in the project, where a later sandbox could move it back into other users' reach.
pub fn record(state_dir: &Path, found: &[Finding]) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let dir = dir_of(state_dir);
    ensure_dir(&dir)?;
    let _lock = lock(&dir)?;
    let mut all = read_findings(&dir)?;
    all.extend(found.iter().cloned());
    all.sort();
    all.dedup_by(|a, b| a.path == b.path);
    write_json(&dir.join(FINDINGS), &all)?;
    changed(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only headers and comments set nothing; any other line, or a header this does not read
    /// plainly, counts as setting something (so a broken repository with it is reported).
    #[test]
    fn a_config_of_headers_and_comments_sets_nothing() {
        for empty in ["", "\n", "[core]\n", "# c\n; c\n\t[core]\r\n\n[remote \"origin\"]\n"] {
            assert!(sets_nothing(empty), "{empty:?}");
        }
        for sets in [
            "[core]\n\thooksPath = x\n",
            "[core] hooksPath = x\n",
            "[core] # note\n",
            "[remote \"a\\\"b\"]\n",
            "[include]\npath\n",
            "[a\"b]\n",
            "[x \"y\"\n",
            "[core]hooksPath=.husky/_;]\n",
            "[core]\rhooksPath=x]\n",
            "\u{feff}[core]\n",
        ] {
            assert!(!sets_nothing(sets), "{sets:?}");
        }
    }

    /// The sandbox's placeholders for ocsb's settings at the top of a nested repository it
    /// protected are the launcher's while empty; with anything in them, or at the top of a
    /// repository it did not protect, they are reported.
    #[test]
    fn ocsb_settings_at_a_nested_repositorys_top_are_the_launchers_only_while_empty() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("p");
        let lib = p.join("vendor/lib");
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::create_dir_all(lib.join(".git")).unwrap();
        std::fs::create_dir_all(lib.join(".opencode-sandbox")).unwrap();
        let spec = crate::spec::minimal(p.clone(), t.path().join("state/p"), t.path().to_path_buf());
        let checkouts = checkouts::of_spec(&spec);
        let settings = lib.canonicalize().unwrap().join(".opencode-sandbox");
        let protected = [lib.canonicalize().unwrap()];
        assert!(!snapshot(&spec, &checkouts, &walk_all(&spec), &protected).present.contains_key(&settings));
        assert!(
            snapshot(&spec, &checkouts, &walk_all(&spec), &[]).present.contains_key(&settings),
            "not protected"
        );
        std::fs::write(settings.join("sandbox.conf"), "OCSB_RW=(/)\n").unwrap();
        assert!(
            snapshot(&spec, &checkouts, &walk_all(&spec), &protected).present.contains_key(&settings),
            "not empty"
        );
    }

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

    /// A project without git at `root/p`, its state at `root/state/p`.
    fn spec_in(root: &Path) -> SandboxSpec {
        std::fs::create_dir_all(root.join("p")).unwrap();
        std::fs::create_dir_all(root.join("state/p")).unwrap();
        crate::spec::minimal(root.join("p"), root.join("state/p"), root.to_path_buf())
    }

    /// The checkout rule of the start is made from the checkouts its check saw (git is not
    /// asked again); a checkout the check did not see (a nested repository) is looked at then.
    #[test]
    fn the_start_takes_the_checkouts_its_check_saw() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let git = |args: &[&str]| {
            let st = checkouts::git(&spec.project_dir).args(args).status().unwrap();
            assert!(st.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["config", "core.hooksPath", "seen"]);
        let checked = check(&spec).unwrap();
        let seen = spec.project_dir.canonicalize().unwrap().join("seen");
        assert_eq!(checked.checkouts[0].hooks_paths, std::slice::from_ref(&seen));
        git(&["config", "core.hooksPath", "later"]);
        let known = checkouts::of_spec_known(&spec, &checked.checkouts);
        assert_eq!(known[0].hooks_paths, std::slice::from_ref(&seen), "git was asked again");
        assert_ne!(checkouts::of_spec(&spec)[0].hooks_paths, known[0].hooks_paths);
        let mut nested = spec.clone();
        let lib = spec.project_dir.canonicalize().unwrap().join("lib");
        std::fs::create_dir_all(lib.join(".git")).unwrap();
        nested.nested_repos = vec![lib.clone()];
        let both = checkouts::of_spec_known(&nested, &checked.checkouts);
        assert_eq!(both.iter().map(|c| c.root.clone()).collect::<Vec<_>>(), [known[0].root.clone(), lib]);
        let audit = checked.begin(&spec).unwrap();
        assert_eq!(audit.checkouts, known);
        audit.end();
    }

    #[test]
    fn the_start_right_after_a_check_begins_from_it_and_still_reports_a_plant_in_between() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let checked = check(&spec).unwrap();
        assert!(checked.findings.is_empty());
        // Planted after the check: the start does not look again, so it does not see it...
        std::fs::create_dir_all(spec.project_dir.join("sub/.git")).unwrap();
        let audit = checked.begin(&spec).unwrap();
        assert!(audit.nested.is_empty(), "the start looked again: {:?}", audit.nested);
        // ...and the check after the sandbox reports it, moved aside, as appeared meanwhile.
        let found = audit.end();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].why.contains("appeared while the sandbox ran"), "{found:?}");
        assert!(!spec.project_dir.join("sub/.git").exists());
    }

    /// A repository made at the top of the project while a sandbox ran (it was none before) is
    /// reported and moved aside; the user's own, there before, is not; nor is a worktree made
    /// meanwhile in the worktrees directory (`ocsb wt add` beside a running session), whose
    /// `.git` is a file, while a repository of its own there is.
    #[test]
    fn a_repository_made_at_the_top_of_a_root_while_a_sandbox_ran_is_reported() {
        let git = |dir: &Path, args: &[&str]| {
            let st = checkouts::git(dir).args(args).status().unwrap();
            assert!(st.success(), "git {args:?}");
        };
        // Each case in a project of its own (a finding stands until it is resolved).
        let project = || {
            let t = tempfile::tempdir().unwrap();
            let mut spec = spec_in(t.path());
            let w = t.path().join("p-worktrees");
            std::fs::create_dir_all(&w).unwrap();
            spec.worktrees_dir = Some(w.clone());
            (t, spec, w)
        };
        let (_t, spec, _) = project();
        let audit = begin(&spec).unwrap();
        git(&spec.project_dir, &["init", "-q"]);
        git(&spec.project_dir, &["config", "core.fsmonitor", "touch /tmp/pwned"]);
        let found = audit.end();
        assert!(found.iter().any(|f| f.why.contains("at the top of a writable root")), "{found:?}");
        assert!(!spec.project_dir.join(".git").exists(), "moved aside");
        // The user's own repository, there before, and a worktree made meanwhile: nothing.
        let (_t, spec, w) = project();
        git(&spec.project_dir, &["init", "-q"]);
        let audit = begin(&spec).unwrap();
        let c = [
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "1",
        ];
        git(&spec.project_dir, &c);
        git(&spec.project_dir, &["worktree", "add", "-q", w.join("feature").to_str().unwrap()]);
        let found = audit.end();
        assert!(found.is_empty(), "{found:?}");
        // A repository of its own in the worktrees directory.
        let (_t, spec, w) = project();
        let audit = begin(&spec).unwrap();
        git(&w, &["init", "-q", "evil"]);
        let found = audit.end();
        assert!(found.iter().any(|f| f.why.contains("at the top of a writable root")), "{found:?}");
    }

    /// The look holds tool files at any depth for the start; one made while the sandbox ran
    /// (the live watch missed it) is found after it: moved aside where a prompt runs it on
    /// `cd`, reported where an editor acts, each with its tool. A link where a tool reads
    /// refuses the start, and `--accept` cannot clear it.
    #[test]
    fn tool_files_at_any_depth_are_held_and_new_ones_found_after_the_sandbox() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let p = spec.project_dir.canonicalize().unwrap();
        std::fs::create_dir_all(p.join("a/b/c/.vscode")).unwrap();
        std::fs::write(p.join("a/b/c/.envrc"), "dotenv\n").unwrap();
        let audit = begin(&spec).unwrap();
        let held: Vec<&Path> = audit.tool_files.held.iter().map(|h| h.path.as_path()).collect();
        for h in ["a/b/c/.vscode", "a/b/c/.envrc", "a/b/c/.env"] {
            assert!(held.contains(&p.join(h).as_path()), "{h}: {held:?}");
        }
        std::fs::create_dir_all(p.join("x/y/z/.idea")).unwrap();
        std::fs::write(p.join("x/y/z/rust-toolchain.toml"), "[toolchain]\npath = \"/x\"\n").unwrap();
        std::fs::write(p.join("a/b/c/.env"), "A=1\n").unwrap();
        let found = audit.end();
        assert_eq!(found.len(), 3, "{found:#?}");
        for (gone, tool) in [("x/y/z/rust-toolchain.toml", "rustup"), ("a/b/c/.env", "direnv")] {
            let f = found.iter().find(|f| f.why.contains(&p.join(gone).display().to_string())).unwrap();
            assert!(f.why.contains("moved aside") && f.why.contains(tool), "{f:?}");
            assert!(!p.join(gone).exists(), "{gone}");
        }
        let idea = found.iter().find(|f| f.path == p.join("x/y/z/.idea")).unwrap();
        assert!(idea.why.contains("JetBrains") && p.join("x/y/z/.idea").is_dir(), "{idea:?}");
        // A link where direnv reads: named, never accepted, until it is gone.
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        std::fs::create_dir_all(spec.project_dir.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", spec.project_dir.join("d/.envrc")).unwrap();
        let err = begin(&spec).err().expect("a linked .envrc must refuse").to_string();
        assert!(err.contains("d/.envrc") && err.contains("symbolic link"), "{err}");
        assert_eq!(report(&spec, true).unwrap().len(), 1);
        std::fs::remove_file(spec.project_dir.join("d/.envrc")).unwrap();
        begin(&spec).unwrap().end();
    }

    #[test]
    fn a_sandbox_begun_after_a_check_makes_the_next_start_look_again() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let checked = check(&spec).unwrap();
        // Another sandbox of the project (a self-test, another `ocsb exec`) runs and plants.
        let other = check(&spec).unwrap().begin(&spec).unwrap();
        std::fs::create_dir_all(spec.project_dir.join("sub/.git")).unwrap();
        assert_eq!(other.end().len(), 1);
        // The earlier check no longer stands: the start looks again and refuses.
        let err = checked.begin(&spec).err().expect("the start must refuse").to_string();
        assert!(err.contains("refusing to start") && err.contains("ocsb-planted"), "{err}");
    }

    #[test]
    fn a_sandbox_that_ends_with_a_finding_after_a_check_makes_the_next_start_look_again() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        // A sandbox already running when the check is made plants, and ends after the check.
        let running = check(&spec).unwrap().begin(&spec).unwrap();
        let checked = check(&spec).unwrap();
        std::fs::create_dir_all(spec.project_dir.join("sub/.git")).unwrap();
        assert_eq!(running.end().len(), 1);
        let err = checked.begin(&spec).err().expect("the start must refuse").to_string();
        assert!(err.contains("refusing to start") && err.contains("ocsb-planted"), "{err}");
    }

    #[test]
    fn a_check_stands_only_for_a_start_right_after_it() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let checked = check(&spec).unwrap();
        std::thread::sleep(STANDS_FOR);
        std::fs::create_dir_all(spec.project_dir.join("sub/.git")).unwrap();
        let audit = checked.begin(&spec).unwrap();
        assert_eq!(audit.nested, vec![spec.project_dir.join("sub").canonicalize().unwrap()]);
        let found = audit.end();
        assert!(found.is_empty(), "{found:?}");
    }

    /// The pid of a process that has exited.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    /// A sandbox whose launcher died left its placeholders at the top of a nested repository
    /// it protected (the checkout rule's): the next check does not take them for ocsb's
    /// settings planted below a checkout's top, while they are empty. One with anything in
    /// it, or a marker that does not name the repository, is reported as before.
    #[test]
    fn a_dead_runs_placeholders_at_a_nested_repositorys_top_are_not_reported() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let dir = dir_of(&spec.state_dir);
        let lib = spec.project_dir.canonicalize().unwrap().join("vendor/lib");
        std::fs::create_dir_all(lib.join(".git")).unwrap();
        let checked = check(&spec).unwrap();
        assert!(checked.findings.is_empty(), "{:?}", checked.findings);
        assert_eq!(checked.nested, std::slice::from_ref(&lib));
        let pid = dead_pid();
        let dead = |n: usize, nested: Vec<PathBuf>| {
            let m = Marker { pid, present: checked.present.clone(), nested };
            write_json(&dir.join(format!("running-{pid}-{n}.json")), &m).unwrap();
        };
        let placeholders = [lib.join(".opencode-sandbox"), lib.join(".cc-safety-net")];
        placeholders.iter().for_each(|p| std::fs::create_dir_all(p).unwrap());
        dead(0, vec![lib.clone()]);
        let found = check(&spec).unwrap().findings;
        assert!(found.is_empty(), "{found:?}");
        assert!(placeholders.iter().all(|p| p.is_dir()), "a placeholder was moved aside");
        // Without the repository in the marker (an older build's), they are reported.
        dead(1, Vec::new());
        assert_eq!(check(&spec).unwrap().findings.len(), 2);
        // With something in one, it is reported whatever the marker says.
        std::fs::write(dir.join(FINDINGS), "[]").unwrap();
        placeholders.iter().for_each(|p| std::fs::create_dir_all(p).unwrap());
        std::fs::write(placeholders[0].join("sandbox.conf"), "OCSB_RW=(/)\n").unwrap();
        dead(2, vec![lib.clone()]);
        let found = check(&spec).unwrap().findings;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].why.contains("did not finish"), "{found:?}");
    }

    #[test]
    fn a_dead_run_is_checked_for_it_and_its_damaged_record_moves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let dir = dir_of(&spec.state_dir);
        check(&spec).unwrap();
        let pid = dead_pid();
        // A run whose launcher died: what appeared since its marker is found and moved aside.
        write_json(&dir.join(format!("running-{pid}-0.json")), &Marker { pid, ..Marker::default() }).unwrap();
        std::fs::create_dir_all(spec.project_dir.join("a/.git")).unwrap();
        let found = check(&spec).unwrap().findings;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].why.contains("did not finish") && !spec.project_dir.join("a/.git").exists());
        assert!(!dir.join(format!("running-{pid}-0.json")).exists(), "the marker is consumed");
        // A damaged marker is one finding of its own; the user's repository stays where it is.
        std::fs::remove_dir_all(&found[0].path).unwrap();
        std::fs::write(dir.join("findings.json"), "[]").unwrap();
        std::fs::create_dir_all(spec.project_dir.join("b/.git")).unwrap();
        std::fs::write(dir.join(format!("running-{pid}-1.json")), "{\"pid\": ").unwrap();
        let found = check(&spec).unwrap().findings;
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, dir.join(format!("running-{pid}-1.json")));
        assert!(spec.project_dir.join("b/.git").exists());
        // A temporary file a dead launcher left is removed, not read as a marker.
        std::fs::remove_file(dir.join(format!("running-{pid}-1.json"))).unwrap();
        let tmp = dir.join(format!("running-{pid}-2.json.{pid}-0.tmp"));
        std::fs::write(&tmp, "{").unwrap();
        assert!(check(&spec).unwrap().findings.is_empty());
        assert!(!tmp.exists());
    }

    #[test]
    fn markers_stay_while_what_they_show_cannot_be_recorded() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let dir = dir_of(&spec.state_dir);
        // A run whose findings cannot be recorded (the record is unwritable here) keeps its
        // marker, for the next start to find them again.
        let audit = check(&spec).unwrap().begin(&spec).unwrap();
        let marker = audit.marker.clone();
        std::fs::create_dir_all(spec.project_dir.join("sub/.git")).unwrap();
        std::fs::remove_file(dir.join("findings.json")).ok();
        std::fs::create_dir(dir.join("findings.json")).unwrap();
        assert_eq!(audit.end().len(), 1);
        assert!(marker.exists(), "the marker of an unrecorded run must stay");
        // A dead run's marker is not consumed while the record cannot be read or written.
        let pid = dead_pid();
        let dead = dir.join(format!("running-{pid}-0.json"));
        write_json(&dead, &Marker { pid, ..Marker::default() }).unwrap();
        assert!(check(&spec).is_err());
        assert!(dead.exists(), "a dead run's marker must outlive a failed record");
    }

    #[test]
    fn a_damaged_findings_record_refuses_instead_of_passing_for_none() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        check(&spec).unwrap();
        std::fs::write(dir_of(&spec.state_dir).join("findings.json"), "[{\"path\":").unwrap();
        let err = check(&spec).err().expect("a damaged record must refuse").to_string();
        assert!(err.contains("cannot be read"), "{err}");
    }

    #[test]
    fn a_check_of_other_checkouts_is_made_again() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        let checked = check(&spec).unwrap();
        let mut wider = spec.clone();
        std::fs::create_dir_all(t.path().join("extra/vendor/x/.git")).unwrap();
        wider.rw.push(t.path().join("extra"));
        let audit = checked.begin(&wider).unwrap();
        assert_eq!(audit.nested, vec![t.path().join("extra/vendor/x").canonicalize().unwrap()]);
        audit.end();
    }

    #[test]
    fn concurrent_starts_of_one_project_do_not_fail_each_other() {
        let t = tempfile::tempdir().unwrap();
        let spec = spec_in(t.path());
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..50).map(|_| check(&spec)?.begin(&spec).map(Audit::end)).collect()))
                .collect();
            for r in runs {
                let r: Result<Vec<_>> = r.join().unwrap();
                assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
            }
        });
    }

    #[test]
    fn audit_dir_sits_beside_the_state_dir() {
        assert_eq!(dir_of(Path::new("/h/.local/share/ocsb/p")), Path::new("/h/.local/share/ocsb/.p.audit"));
    }
}
