//! A session's git, from start to end: the agent's git directories made
//! ([`crate::agentgit`]), their refs watched and imported while the sandbox runs
//! ([`crate::gatewatch`]), and once it has exited, a last import and the directories removed.
//! What was held back is said on the terminal and listed by `ocsb audit` ([`held`]).

use std::path::{Path, PathBuf};

use ocsb_policy::gitimport::Session;
use ocsb_policy::guard::Checkout;

use crate::error::{Error, Result};
use crate::gate::{Gate, Imported};
use crate::spec::SandboxSpec;

mod ahead;
pub use ahead::Begun;

/// The gates of a running session.
pub struct SessionGit {
    running: Option<crate::gatewatch::Running>,
    /// The live watch of the writable trees ([`crate::watch`]). Its first walk ends before the
    /// sandbox starts: what that walk meets is the session's starting point, and a walk still
    /// going while the agent runs would take the agent's plants for it.
    trees: Option<crate::watch::Watch>,
    /// What the watch moved aside, recorded for `ocsb audit` when the session ends.
    planted: std::sync::Arc<std::sync::Mutex<Vec<ocsb_policy::guard::Finding>>>,
    staging: PathBuf,
    state_dir: PathBuf,
    /// Held while the session lives (see [`crate::agentgit`]).
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
    /// Where the lock is.
    lock_file: PathBuf,
}

/// Say what an import did that the user must know: what was held back (and record why, for
/// `ocsb audit`), and what failed.
fn report(state_dir: &Path, root: &Path, done: &Imported) {
    for (held, why) in &done.held {
        record_reason(state_dir, root, held, why);
        eprintln!("ocsb: held back in {}: {held}: {why}; see `ocsb audit`", root.display());
    }
    if let Some(e) = &done.failed {
        eprintln!("ocsb: the sandbox's commits in {} were not imported: {e}", root.display());
    }
}

/// The session's name: when it started, which launcher, and which of its sessions, unique on
/// this machine. *Why the count*: one launcher begins several sessions within a second (the
/// self-tests' sandboxes, then its own), and one begun ahead ([`Begun`]) may be ended while
/// another is begun.
fn session_name() -> Result<Session> {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Session::parse(&format!("{secs}-{}-{n}", std::process::id()))
        .map_err(|e| Error::refused(format!("session name: {e}"), "report this"))
}

/// Make the agent's git directories of `checkouts`, put them in `spec`, and start the gates.
pub fn begin(spec: &mut SandboxSpec, checkouts: &[Checkout]) -> Result<SessionGit> {
    let session = session_name()?;
    let store = crate::agentgit::store_of(&spec.state_dir);
    import_leftovers(&spec.state_dir, &store, &spec.home);
    crate::stages::mark("git: leftovers looked for");
    let (lock, lock_file) = crate::agentgit::lock(&store, session.as_str())?;
    let made = crate::agentgit::make_all(&store, session.as_str(), checkouts, &spec.home)?;
    crate::stages::mark("launcher: agent git directories made");
    let repos = made.repos;
    let staging = crate::audit::dir_of(&spec.state_dir).join("gate").join(session.as_str());
    spec.agent_git = repos.iter().map(|r| r.spec.clone()).collect();
    spec.git_read_only = made.read_only;
    let mut read_only = crate::launch::read_only_in_trees(spec, checkouts)?;
    // The registry's names the gate holds by name, at any depth ([`crate::gate::ToolNames`]);
    // what an `.envrc` loads, by path, whether it exists yet or not.
    let by_name: std::collections::HashSet<&Path> =
        spec.tool_files.held.iter().filter(|h| !h.load).map(|h| h.path.as_path()).collect();
    read_only.retain(|p| !by_name.contains(p.as_path()));
    read_only.extend(spec.tool_files.loads().filter(|h| !h.exists).map(|h| h.path.clone()));
    let tools = crate::gate::ToolNames { rw: spec.rw_tool_files.clone(), dotenv: spec.tool_files.dotenv };
    let mut gates = Vec::new();
    for (n, repo) in repos.into_iter().enumerate() {
        let held = read_only.iter().filter(|p| p.starts_with(&repo.root)).cloned().collect();
        gates.push(Gate::new(repo, staging.join(n.to_string()), session.clone(), held, tools.clone())?);
    }
    let state_dir = spec.state_dir.clone();
    let said = state_dir.clone();
    crate::stages::mark("git: gates made");
    let running = crate::gatewatch::start(gates, Box::new(move |root, done| report(&said, root, done)))?;
    crate::stages::mark("git: gate watch started");
    let planted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let trees = watch_trees(spec, checkouts, planted.clone());
    Ok(SessionGit {
        running: Some(running),
        trees,
        planted,
        staging,
        state_dir,
        _lock: Some(lock),
        lock_file,
    })
}

/// The repositories of sessions whose launcher died before their last import: imported now,
/// everything held (their starting values are not known, so no branch of the user's moves),
/// then removed.
fn import_leftovers(state_dir: &Path, store: &Path, home: &Path) {
    for mut left in crate::agentgit::leftovers(store, home) {
        let Ok(session) = Session::parse(&left.session) else {
            left.done(true);
            continue;
        };
        let mut kept = false;
        let staging =
            crate::audit::dir_of(state_dir).join("gate").join(format!("{}-leftover", session.as_str()));
        for repo in std::mem::take(&mut left.repos) {
            match Gate::for_leftover(repo, staging.clone(), session.clone()) {
                Ok(mut g) => {
                    let done = g.import();
                    report(state_dir, &g.repo().root.clone(), &done);
                    // Kept for the next start when it could not be imported: nothing is lost.
                    if done.failed.is_none() {
                        g.remove();
                    } else {
                        kept = true;
                    }
                }
                Err(e) => {
                    kept = true;
                    eprintln!("ocsb: the repository of an earlier session could not be imported: {e}");
                }
            }
            let _ = std::fs::remove_dir_all(&staging);
        }
        left.done(kept);
    }
}

/// Start watching the writable trees for planted `.git` entries and git directory layouts, and
/// for new tool files ([`crate::watch::Tools`]: moved aside at once or reported, as the tool
/// acts on them; said on the terminal with the tool, and recorded for `ocsb audit`). Not
/// watched: each checkout's own `.git` (the mount point of the agent's), and the state
/// directory.
fn watch_trees(
    spec: &SandboxSpec,
    checkouts: &[Checkout],
    planted: std::sync::Arc<std::sync::Mutex<Vec<ocsb_policy::guard::Finding>>>,
) -> Option<crate::watch::Watch> {
    let roots: Vec<PathBuf> = std::iter::once(&spec.project_dir)
        .chain(&spec.worktrees_dir)
        .chain(&spec.rw)
        .filter_map(|p| p.canonicalize().ok())
        .filter(|p| p.is_dir())
        .collect();
    let mut skip: Vec<PathBuf> = checkouts.iter().map(|c| c.root.join(".git")).collect();
    skip.extend(spec.state_dir.canonicalize().ok());
    let matchers: Vec<Box<dyn crate::watch::Matcher>> =
        vec![Box::new(crate::watch::Git), Box::new(spec.tool_files.matcher(&spec.rw_tool_files))];
    {
        let sink = Box::new(move |found: crate::watch::Found| match found {
            crate::watch::Found::Plant { path, why, outcome, .. } => {
                let said = match &outcome {
                    crate::watch::Outcome::Moved(to) => format!("moved aside to {}", to.display()),
                    crate::watch::Outcome::Reported => {
                        "left in place; ocsb will not start here until you look at it (`ocsb audit`)"
                            .to_string()
                    }
                    crate::watch::Outcome::NotMoved(e) => {
                        format!(
                            "NOT moved aside ({e}): do not run git or enter the directory until it is gone"
                        )
                    }
                };
                eprintln!("ocsb: {} appeared while the sandbox ran ({why}): {said}", path.display());
                let at = match outcome {
                    crate::watch::Outcome::Moved(to) => to,
                    _ => path,
                };
                if let Ok(mut v) = planted.lock() {
                    v.push(ocsb_policy::guard::Finding {
                        path: at,
                        why: format!("{why} (appeared while the sandbox ran)"),
                    });
                }
            }
            crate::watch::Found::Blind { dir, why } => {
                eprintln!(
                    "ocsb: warning: {} is not watched ({why}): a .git or tool file made there is found only when the session ends",
                    dir.display()
                );
            }
        });
        match crate::watch::Watch::start(roots, skip, Box::new(matchers), sink) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!(
                    "ocsb: warning: the project is not watched for planted repositories and tool files ({e}); they are found when the session ends"
                );
                None
            }
        }
    }
}

impl SessionGit {
    /// After the sandbox exited: the last import, then the agent's directories removed on a
    /// thread of their own while the caller looks at the checkouts ([`Ended::finish`] waits
    /// for it). The session's lock is held until they are gone: a start meanwhile takes them
    /// for a live session's, never for a dead one's to import.
    pub fn end(mut self) -> Ended {
        let mut late = Vec::new();
        if let Some(t) = self.trees.take() {
            late.extend(t.stop());
        }
        if let Ok(found) = self.planted.lock()
            && let Err(e) = crate::audit::record(&self.state_dir, &found)
        {
            eprintln!("ocsb: could not record what was moved aside: {e}");
        }
        let (gates, ino) = self.running.take().map(crate::gatewatch::Running::finish).unwrap_or_default();
        late.extend(ino);
        crate::stages::mark("launcher: watches stopped");
        let mut imported = Vec::new();
        let mut kept = false;
        for mut g in gates {
            let done = g.import();
            crate::stages::mark("launcher: the last import");
            report(&self.state_dir, &g.repo().root.clone(), &done);
            // Kept when the last import failed: the next start imports it, all held.
            if done.failed.is_none() {
                imported.push(g);
            } else {
                kept = true;
            }
        }
        let staging = std::mem::take(&mut self.staging);
        let lock = self._lock.take();
        let lock_file = self.lock_file.clone();
        let remove = move || {
            for g in imported {
                g.remove();
            }
            let _ = std::fs::remove_dir_all(&staging);
            // The lock names the session for the next start's look for dead sessions: kept
            // while a directory is, removed (while held) with the last one.
            if !kept {
                let _ = std::fs::remove_file(&lock_file);
            }
            drop(lock);
        };
        let removing = crate::background::Background::start("ocsb-git-remove", Box::new(remove));
        Ended { late, removing }
    }
}

/// A session's git after its last import ([`SessionGit::end`]).
pub struct Ended {
    late: Vec<std::os::fd::OwnedFd>,
    removing: crate::background::Background,
}

impl Ended {
    /// Waits until the agent's directories are gone; gives back the watches' inotify
    /// instances, for the caller to close where nobody waits for it
    /// ([`crate::watch::Watch::stop`] says why).
    pub fn finish(self) -> Vec<std::os::fd::OwnedFd> {
        let Ended { late, removing } = self;
        removing.wait();
        crate::stages::mark("launcher: the agent's git directories removed");
        late
    }
}

/// A commit the gate held back, as `ocsb audit` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRef {
    /// The checkout whose repository holds it.
    pub root: PathBuf,
    /// `refs/ocsb/held/<session>/heads/<branch>` (or `tags/<tag>`).
    pub name: String,
    pub oid: String,
    pub subject: String,
    /// Why, as the gate said it when it held the ref (when its record is still there).
    pub why: Option<String>,
}

/// Where the gate records why it held each ref (the audit directory, out of every sandbox's
/// reach: a reason the agent could write would be no reason).
fn reasons_file(state_dir: &Path) -> PathBuf {
    crate::audit::dir_of(state_dir).join("held.json")
}

type Reasons = std::collections::BTreeMap<String, String>;

fn reason_key(root: &Path, name: &str) -> String {
    format!("{}\t{name}", root.display())
}

/// Record why `name` was held in the checkout at `root`.
pub fn record_reason(state_dir: &Path, root: &Path, name: &str, why: &str) {
    let p = reasons_file(state_dir);
    let mut all: Reasons =
        std::fs::read(&p).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    all.insert(reason_key(root, name), why.to_string());
    if let Ok(text) = serde_json::to_vec_pretty(&all) {
        let tmp = p.with_extension("json.tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
}

/// The repositories of a spec's checkouts that can hold held refs: the project, its worktrees,
/// the `OCSB_RW` repositories.
fn repositories(spec: &SandboxSpec) -> Vec<PathBuf> {
    crate::checkouts::roots_of_spec(spec)
        .into_iter()
        .map(|(r, _)| r)
        .filter(|r| crate::checkouts::git_dirs(r).is_some())
        .collect()
}

/// What the gate holds back in the checkouts of `spec`.
pub fn held(spec: &SandboxSpec) -> Vec<HeldRef> {
    let reasons: Reasons = std::fs::read(reasons_file(&spec.state_dir))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut out = Vec::new();
    for root in repositories(spec) {
        let mut cmd = crate::checkouts::git(&root);
        cmd.args(["for-each-ref", "--format=%(objectname) %(refname) %(subject)", "refs/ocsb/held/"]);
        let Ok(o) = cmd.output() else { continue };
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let mut parts = line.splitn(3, ' ');
            let (Some(oid), Some(name)) = (parts.next(), parts.next()) else { continue };
            out.push(HeldRef {
                root: root.clone(),
                name: name.to_string(),
                oid: oid.to_string(),
                subject: parts.next().unwrap_or_default().to_string(),
                why: reasons.get(&reason_key(&root, name)).cloned(),
            });
        }
    }
    out
}

/// `ocsb audit --accept` for held refs: each is taken as the policy says
/// (`ocsb_policy::gitimport::accept`): a branch the user does not have is made, one the held
/// commit descends from is fast-forwarded (compare-and-swap), and otherwise the commit is
/// put on a branch of its own beside the user's (`ocsb/<session>/<branch>`) for the user to
/// merge. Never a forced move. Returns one line per ref, saying what was done.
pub fn accept(spec: &SandboxSpec) -> Result<Vec<String>> {
    use ocsb_policy::gitimport::{self as gi, Accept};
    let mut said = Vec::new();
    for h in held(spec) {
        let Some((session, name)) = gi::held_of(&h.name) else { continue };
        let git = |args: &[&str]| {
            let mut cmd = crate::checkouts::git(&h.root);
            cmd.args(args);
            cmd.output()
        };
        let user = git(&["rev-parse", "--verify", "--quiet", &format!("{}^{{}}", name.as_str())])
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let descends = match &user {
            Some(u) => git(&["merge-base", "--is-ancestor", u, &h.oid]).is_ok_and(|o| o.status.success()),
            None => false,
        };
        let format = if h.oid.len() == 64 { gi::ObjectFormat::Sha256 } else { gi::ObjectFormat::Sha1 };
        let Some(held_oid) = gi::Oid::parse(format, h.oid.as_bytes()) else { continue };
        let user_oid = user.as_deref().and_then(|u| gi::Oid::parse(format, u.as_bytes()));
        let (target, old) = match gi::accept(&session, &name, &held_oid, user_oid.as_ref(), descends) {
            Accept::Create => (name.as_str().to_string(), zero_of(&h.oid)),
            Accept::FastForward => {
                (name.as_str().to_string(), user.clone().unwrap_or_else(|| zero_of(&h.oid)))
            }
            Accept::Aside(aside) => (aside.as_str().to_string(), zero_of(&h.oid)),
            Accept::Already => {
                let _ = git(&["update-ref", "-d", &h.name]);
                continue;
            }
            Accept::NotImportable => {
                said.push(format!("{}: not a branch or tag; left as {}", h.root.display(), h.name));
                continue;
            }
        };
        let o = git(&["update-ref", "-m", "ocsb audit --accept", &target, &h.oid, &old])
            .map_err(|e| Error::io("run", "git update-ref", e))?;
        if !o.status.success() {
            said.push(format!(
                "{}: {} not taken: {}",
                h.root.display(),
                h.name,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            continue;
        }
        let _ = git(&["update-ref", "-d", &h.name, &h.oid]);
        said.push(format!("{}: {} is now {target}", h.root.display(), h.name));
    }
    Ok(said)
}

fn zero_of(oid: &str) -> String {
    "0".repeat(oid.len())
}
