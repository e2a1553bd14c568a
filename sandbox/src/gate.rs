//! The import gate: how the agent's commits reach the user's repository.
//!
//! The agent commits in a git directory of its own ([`crate::agentgit`]). Within a second of
//! each change of its refs (watched: [`crate::gatewatch`]) and when the session ends, the launcher brings
//! its branches and tags into the user's repository, and the user's HEAD and index follow the
//! agent's checked-out branch, so `git log`, `git status` and editors on the host see the
//! agent's commits as they are made.
//!
//! *Why this shape*: everything in the agent's git directory was written by the agent, and the
//! launcher runs with all the user's rights. So the gate never runs git there, nor reads it by
//! path: the refs are read and parsed here (`ocsb_policy::gitimport`), through a descriptor of
//! the directory opened before the sandbox started, beneath it and never through a link
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`: a planted `objects/pack ->
//! ~/other-repo/.git/objects/pack` would otherwise hand the agent objects of another
//! repository). The new object files are copied the same way into a staging repository of the
//! launcher's own, out of the sandbox's reach. Git then runs only in repositories whose config
//! the launcher or the user wrote: it fetches the wanted commits from the staging repository
//! into the user's with every object checked (`fetch.fsckObjects`), lists what each new commit
//! changes, and, as the policy judges, moves a branch by compare-and-swap or keeps the commit
//! under `refs/ocsb/held/<session>/…` for `ocsb audit`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ocsb_policy::gitimport::{
    self, Change, CommitChanges, ObjectFormat, Oid, RefName, RefUpdate, RefValue, Session, Verdict,
};

use ocsb_policy::guard::GitDirs;

use crate::agentgit::Repo;
use crate::error::{Error, Result};
use crate::sys;

/// How the gate opens what the agent wrote: beneath the directory, through no link of any
/// kind, on no other filesystem.
const BENEATH: u64 =
    sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_NO_MAGICLINKS | sys::RESOLVE_NO_XDEV;

/// A ref file or `HEAD` is a line; `packed-refs` one line a ref.
const REF_FILE_MAX: usize = 4096;
const PACKED_MAX: usize = 64 << 20;
/// At most this many loose refs are read (a branch is a file: the agent can make millions).
const LOOSE_MAX: usize = 100_000;
/// The object files copied by one import, in bytes: what an agent's session makes is far
/// below; a repository's worth of history is refused rather than copied.
const STAGE_MAX: u64 = 8 << 30;

/// The user's repository as the agent's starts from it.
pub struct UserFacts {
    /// `(object id, name)` of every branch, tag and remote-tracking branch.
    pub refs: Vec<(String, String)>,
    /// The repository config as git lists it (scope local and worktree).
    pub config: Vec<u8>,
    pub format: ObjectFormat,
}

/// A git command in the user's own repository at `root` that can run nothing of the
/// repository's but what the user configured for it, and no hook (the gate's updates are not
/// the user's commits): [`crate::checkouts::git`], which also refuses every transport.
fn user_git(root: &Path) -> Command {
    crate::checkouts::git(root)
}

fn output(mut cmd: Command, what: &str) -> Result<Vec<u8>> {
    let out = cmd.stderr(Stdio::piped()).output().map_err(|e| Error::io("run", "git", e))?;
    if !out.status.success() {
        return Err(Error::failed(
            format!("git {what} failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            "run `git status` in the project to see what is wrong with the repository",
        ));
    }
    Ok(out.stdout)
}

/// What the agent's repository starts from: the user's refs, config and object format. The
/// config listing is the look's ([`crate::configmemo`]: no git run while the files git read
/// stand), the refs are read from the files where they are files.
pub fn user_facts(root: &Path, git: &GitDirs, home: &Path) -> Result<UserFacts> {
    if !is_git_directory(git) {
        return Err(Error::refused(
            format!("{} is not a git directory git would take", git.gitdir.display()),
            "mend the repository (`git status` says what is wrong)",
        ));
    }
    let mut config =
        crate::configmemo::facts(root, home, git, || crate::checkouts::config_facts(root, home)).repository;
    if config.is_empty() {
        let mut cmd = user_git(root);
        cmd.args(["config", "--list", "--show-scope", "--null"]);
        config = output(cmd, "config --list").unwrap_or_default();
    }
    let common = &git.common;
    let has = |entry: &[u8]| config.split(|b| *b == 0).any(|e| e.eq_ignore_ascii_case(entry));
    // The format from the listing (one git run fewer at every start): git writes
    // `extensions.objectformat` for every repository that is not SHA-1.
    let format =
        if has(b"extensions.objectformat\nsha256") { ObjectFormat::Sha256 } else { ObjectFormat::Sha1 };
    // Read by the launcher itself where the refs are files (one git run fewer again); git
    // lists them where they are not (`extensions.refstorage = reftable`), or where the files
    // hold what the launcher's strict reading does not take.
    let files =
        !config.split(|b| *b == 0).any(|e| e.to_ascii_lowercase().starts_with(b"extensions.refstorage\n"));
    let read = files.then(|| user_refs_from_files(common, format)).and_then(|r| r.ok());
    let refs = match read {
        Some(refs) => refs,
        None => {
            let mut cmd = user_git(root);
            cmd.args([
                "for-each-ref",
                "--format=%(objectname) %(refname)",
                "refs/heads",
                "refs/tags",
                "refs/remotes",
            ]);
            String::from_utf8_lossy(&output(cmd, "for-each-ref")?)
                .lines()
                .filter_map(|l| l.split_once(' ').map(|(o, n)| (o.to_string(), n.to_string())))
                .collect()
        }
    };
    Ok(UserFacts { refs, config, format })
}

/// Whether git takes `git` for a repository, as its own check does (`is_git_directory`): a
/// `HEAD` that is a symbolic ref under `refs/` or an object id, and `objects` and `refs` in the
/// common directory. *Why here*: the refs are read from the files, so no git run says it.
fn is_git_directory(git: &GitDirs) -> bool {
    let head = crate::checkouts::read_small(&git.gitdir.join("HEAD")).unwrap_or_default();
    let head = head.trim_end();
    let valid = head.strip_prefix("ref:").is_some_and(|r| r.trim_start().starts_with("refs/"))
        || (matches!(head.len(), 40 | 64) && head.bytes().all(|b| b.is_ascii_hexdigit()));
    valid && git.common.join("objects").is_dir() && git.common.join("refs").is_dir()
}

/// The user's branches, tags and remote-tracking branches, read from `packed-refs` and the
/// loose ref files as git would list them: a loose ref over a packed one, a symbolic ref
/// (`refs/remotes/origin/HEAD`) as the ref it names. Sorted by name, as git sorts them.
fn user_refs_from_files(
    common: &Path,
    format: ObjectFormat,
) -> std::result::Result<Vec<(String, String)>, String> {
    let dir =
        sys::openat2(None, common, libc::O_PATH | libc::O_DIRECTORY, 0, 0).map_err(|e| e.to_string())?;
    let read = read_refs(dir.as_fd(), format, &["refs/heads", "refs/tags", "refs/remotes"])?;
    let mut out = Vec::new();
    for (name, value) in &read {
        let oid = match value {
            RefValue::Oid(oid) => oid,
            RefValue::Symbolic(target) => match read.get(target.as_str()) {
                Some(RefValue::Oid(oid)) => oid,
                // A dangling one, or one to another symbolic ref: git lists neither usefully.
                _ => continue,
            },
        };
        out.push((oid.as_str().to_string(), name.clone()));
    }
    Ok(out)
}

/// The agent repository's config: what of the user's repository config carries neither a
/// program nor a credential (`ocsb_policy::gitconfig::repository`).
pub fn agent_config(facts: &UserFacts) -> String {
    let (entries, _) = ocsb_policy::gitconfig::parse_repo_list(&facts.config);
    ocsb_policy::gitconfig::generate_repo(&entries).text
}

/// Read a file of the agent's directory, beneath it and through no link.
fn read_beneath(dir: BorrowedFd<'_>, rel: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    let fd = sys::openat2(Some(dir), rel, libc::O_RDONLY | libc::O_NONBLOCK, 0, BENEATH)?;
    let mut f = std::fs::File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut b = Vec::new();
    (&mut f).take(limit as u64 + 1).read_to_end(&mut b)?;
    if b.len() > limit {
        return Err(std::io::Error::other("larger than a git file of its kind"));
    }
    Ok(b)
}

/// The names in a directory of the agent's, beneath its git directory and through no link;
/// empty when it is missing.
fn names_beneath(dir: BorrowedFd<'_>, rel: &Path) -> std::io::Result<Vec<(std::ffi::OsString, bool)>> {
    let fd = match sys::openat2(Some(dir), rel, libc::O_RDONLY | libc::O_DIRECTORY, 0, BENEATH) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut d = nix::dir::Dir::from_fd(fd).map_err(std::io::Error::from)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(std::io::Error::from)?;
        let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
        if name == "." || name == ".." {
            continue;
        }
        let is_dir = matches!(e.file_type(), Some(nix::dir::Type::Directory));
        out.push((name, is_dir));
    }
    Ok(out)
}

/// The agent's refs now: `HEAD`, and its branches and tags (loose refs over packed ones).
pub struct AgentRefs {
    pub head: RefValue,
    pub refs: BTreeMap<String, Oid>,
}

fn agent_refs(dir: BorrowedFd<'_>, format: ObjectFormat) -> std::result::Result<AgentRefs, String> {
    let head = read_beneath(dir, Path::new("HEAD"), REF_FILE_MAX).map_err(|e| format!("HEAD: {e}"))?;
    let head = gitimport::parse_ref_file("HEAD", &head, format, REF_FILE_MAX).map_err(|e| e.to_string())?;
    let refs = read_refs(dir, format, &["refs/heads", "refs/tags"])?
        .into_iter()
        .filter_map(|(name, value)| match value {
            RefValue::Oid(oid) => Some((name, oid)),
            // A branch that is a symbolic ref is not a commit to import.
            RefValue::Symbolic(_) => None,
        })
        .collect();
    Ok(AgentRefs { head, refs })
}

/// The refs below `under` of the git directory `dir`: `packed-refs`, then the loose ref files
/// over them, read beneath `dir` and through no link, each bounded in size and number.
fn read_refs(
    dir: BorrowedFd<'_>,
    format: ObjectFormat,
    under: &[&str],
) -> std::result::Result<BTreeMap<String, RefValue>, String> {
    let wanted = |name: &str| under.iter().any(|u| name.strip_prefix(u).is_some_and(|r| r.starts_with('/')));
    let mut refs = BTreeMap::new();
    match read_beneath(dir, Path::new("packed-refs"), PACKED_MAX) {
        Ok(b) => {
            for (name, oid) in gitimport::parse_packed_refs("packed-refs", &b, format, PACKED_MAX)
                .map_err(|e| e.to_string())?
            {
                if wanted(name.as_str()) {
                    refs.insert(name.as_str().to_string(), RefValue::Oid(oid));
                }
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => return Err(format!("packed-refs: {e}")),
    }
    let mut todo: Vec<PathBuf> = under.iter().map(PathBuf::from).collect();
    let mut seen = 0usize;
    while let Some(rel) = todo.pop() {
        for (name, is_dir) in names_beneath(dir, &rel).map_err(|e| format!("{}: {e}", rel.display()))? {
            seen += 1;
            if seen > LOOSE_MAX {
                return Err(format!("more than {LOOSE_MAX} loose refs"));
            }
            let p = rel.join(&name);
            if is_dir {
                todo.push(p);
                continue;
            }
            // A lock or a half-written ref: git's own, renamed into place in a moment.
            if name.as_bytes().ends_with(b".lock") {
                continue;
            }
            let bytes = match read_beneath(dir, &p, REF_FILE_MAX) {
                Ok(b) => b,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(format!("{}: {e}", p.display())),
            };
            let refname = p.to_str().ok_or_else(|| format!("{}: not UTF-8", p.display()))?;
            let name = RefName::parse(refname.as_bytes()).map_err(|e| format!("{refname}: {e}"))?;
            let value = gitimport::parse_ref_file(refname, &bytes, format, REF_FILE_MAX)
                .map_err(|e| e.to_string())?;
            refs.insert(name.as_str().to_string(), value);
        }
    }
    Ok(refs)
}

/// A launcher-private bare repository the agent's object files are copied into; its
/// alternates name the user's object directories, so it holds only what is new.
struct Staging {
    dir: PathBuf,
    /// The object files copied so far, by name and size (a pack that changed is copied again).
    copied: BTreeSet<(PathBuf, u64)>,
}

impl Staging {
    fn make(dir: PathBuf, repo: &Repo) -> Result<Staging> {
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["objects/info", "objects/pack", "refs"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| Error::io("create", dir.join(sub), e))?;
        }
        let format = if repo.format == ObjectFormat::Sha256 {
            "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
        } else {
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
        };
        let config = format!("{format}[uploadpack]\n\tallowAnySHA1InWant = true\n");
        std::fs::write(dir.join("config"), config).map_err(|e| Error::io("write", dir.join("config"), e))?;
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n")
            .map_err(|e| Error::io("write", dir.join("HEAD"), e))?;
        let alternates: String =
            repo.spec.objects.iter().map(|(host, _)| format!("{}\n", host.display())).collect();
        std::fs::write(dir.join("objects/info/alternates"), alternates)
            .map_err(|e| Error::io("write", dir.join("objects/info/alternates"), e))?;
        Ok(Staging { dir, copied: BTreeSet::new() })
    }

    /// Copy the agent's object files that are new since the last call: loose objects, and packs
    /// (each indexed again by git here: the agent's `.idx` is not taken).
    fn copy_new(&mut self, agent: BorrowedFd<'_>) -> std::result::Result<(), String> {
        let mut budget = STAGE_MAX;
        let objects = Path::new("objects");
        for (fan, is_dir) in names_beneath(agent, objects).map_err(|e| format!("objects: {e}"))? {
            let fan_s = fan.to_string_lossy();
            if !is_dir || fan_s.len() != 2 || !fan_s.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let rel = objects.join(&fan);
            for (name, is_dir) in names_beneath(agent, &rel).map_err(|e| format!("{}: {e}", rel.display()))? {
                if is_dir || !name.as_bytes().iter().all(u8::is_ascii_hexdigit) {
                    continue;
                }
                self.copy_one(agent, &rel.join(&name), &mut budget)?;
            }
        }
        let pack = objects.join("pack");
        for (name, is_dir) in names_beneath(agent, &pack).map_err(|e| format!("objects/pack: {e}"))? {
            let n = name.to_string_lossy();
            if is_dir || !n.starts_with("pack-") || !n.ends_with(".pack") {
                continue;
            }
            let rel = pack.join(&name);
            if self.copy_one(agent, &rel, &mut budget)? {
                let mut cmd = Command::new("git");
                cmd.env("GIT_DIR", &self.dir)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null");
                cmd.args(["index-pack", "--strict"]).arg(self.dir.join(&rel)).stdin(Stdio::null());
                output(cmd, "index-pack").map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Copy one file beneath the agent's directory into the same place here; `true` when it
    /// was new.
    fn copy_one(
        &mut self,
        agent: BorrowedFd<'_>,
        rel: &Path,
        budget: &mut u64,
    ) -> std::result::Result<bool, String> {
        let fd = match sys::openat2(Some(agent), rel, libc::O_RDONLY | libc::O_NONBLOCK, 0, BENEATH) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
            Err(e) => return Err(format!("{}: {e}", rel.display())),
        };
        let mut f = std::fs::File::from(fd);
        let meta = f.metadata().map_err(|e| format!("{}: {e}", rel.display()))?;
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", rel.display()));
        }
        let key = (rel.to_path_buf(), meta.len());
        if self.copied.contains(&key) {
            return Ok(false);
        }
        if meta.len() > *budget {
            return Err(format!("the agent's objects are larger than {} GiB", STAGE_MAX >> 30));
        }
        *budget -= meta.len();
        let to = self.dir.join(rel);
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        let tmp = to.with_extension("ocsb-tmp");
        let mut out = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::io::copy(&mut (&mut f).take(meta.len()), &mut out)
            .map_err(|e| format!("{}: {e}", rel.display()))?;
        std::fs::rename(&tmp, &to).map_err(|e| format!("{}: {e}", to.display()))?;
        self.copied.insert(key);
        Ok(true)
    }
}

/// At most this many changed refs are judged one by one in an import; the rest is held in one
/// transaction. *Why*: each judged ref is a few git runs, and an agent can make thousands of
/// refs in a second to keep the session from ending.
const REFS_PER_IMPORT: usize = 200;

/// Why everything of a dead session's repository is held.
const LEFTOVER: &str = "its session ended without ocsb (the launcher was killed), so where it started is not known: nothing of it is put on your branches";

/// The tool files' names the gate holds a commit for, at any depth
/// (`ocsb_policy::toolfiles::in_registry`).
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    /// `OCSB_RW_TOOL_FILES`: names the user lets the agent write, so commits may bring them.
    pub rw: Vec<String>,
    /// direnv's config loads a `.env` in every directory: a `.env` anywhere is one.
    pub dotenv: bool,
}

impl ToolNames {
    /// Whether `path` (relative to the checkout, as git lists it) is or lies in a tool file.
    fn hold(&self, path: &[u8]) -> bool {
        ocsb_policy::toolfiles::in_registry(path, &self.rw).is_some()
            || (self.dotenv && path.split(|&b| b == b'/').any(|c| c.eq_ignore_ascii_case(b".env")))
    }
}

/// One checkout's gate: its agent repository, staging and what it imported so far.
pub struct Gate {
    repo: Repo,
    /// Made by the first import that brings objects: a session that commits nothing costs
    /// no staging repository.
    staging: Option<Staging>,
    staging_dir: PathBuf,
    session: Session,
    /// The agent's refs as last imported (an unchanged ref is not judged again).
    last: BTreeMap<String, Oid>,
    /// What each of the user's refs should be for the next import to move it: its value at the
    /// session's start, then what the gate last set it to (the compare-and-swap's old value).
    expected: BTreeMap<String, Oid>,
    last_head: Option<RefValue>,
    /// Paths of the tree the sandbox holds read-only besides the fixed ones (the hooks path,
    /// files the user's config names): a commit that changes one is held.
    held_extra: Vec<PathBuf>,
    /// The tool files' names, held at any depth.
    tools: ToolNames,
    /// Everything is held: the repository of a session whose launcher died, whose starting
    /// values (the compare-and-swap's) are not known.
    hold_all: bool,
}

/// What one import did, for the session's messages and `ocsb audit`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Branches and tags moved or made in the user's repository.
    pub updated: Vec<String>,
    /// Held: the ref under `refs/ocsb/held/…`, and why.
    pub held: Vec<(String, String)>,
    /// The user's HEAD was moved to this branch.
    pub switched: Option<String>,
    /// What could not be done (the agent's repository unreadable, git failing).
    pub failed: Option<String>,
}

impl Imported {
    pub fn is_empty(&self) -> bool {
        *self == Imported::default()
    }
}

impl Gate {
    /// The gate of `repo`, staging in `staging_dir` (launcher-private).
    pub fn new(
        repo: Repo,
        staging_dir: PathBuf,
        session: Session,
        held_extra: Vec<PathBuf>,
        tools: ToolNames,
    ) -> Result<Gate> {
        let last: BTreeMap<String, Oid> = repo
            .start
            .iter()
            .filter_map(|(n, o)| Oid::parse(repo.format, o.as_bytes()).map(|o| (n.clone(), o)))
            .collect();
        let expected = last.clone();
        // The HEAD the agent's repository was made with: a session that changes nothing costs
        // its end no git run at all.
        let last_head = agent_refs(repo.dir.as_fd(), repo.format).ok().map(|a| a.head);
        Ok(Gate {
            repo,
            staging: None,
            staging_dir,
            session,
            last,
            expected,
            last_head,
            held_extra,
            tools,
            hold_all: false,
        })
    }

    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// Remove the agent's git directory (after the last import).
    pub fn remove(self) {
        self.repo.remove();
    }

    /// The gate of a dead session's repository: everything it brings is held, nothing is
    /// followed.
    pub fn for_leftover(repo: Repo, staging_dir: PathBuf, session: Session) -> Result<Gate> {
        let mut g = Gate::new(repo, staging_dir, session, Vec::new(), ToolNames::default())?;
        g.hold_all = true;
        g.last.clear();
        g.expected.clear();
        g.last_head = None;
        Ok(g)
    }

    /// The agent's git directory (watched for changes of its refs).
    pub fn agent_dir(&self) -> &Path {
        &self.repo.spec.gitdir
    }

    /// Bring what changed in the agent's repository since the last call into the user's.
    pub fn import(&mut self) -> Imported {
        let mut done = Imported::default();
        if let Err(e) = self.import_into(&mut done) {
            done.failed = Some(e);
        }
        done
    }

    fn import_into(&mut self, done: &mut Imported) -> std::result::Result<(), String> {
        let agent = agent_refs(self.repo.dir.as_fd(), self.repo.format)?;
        let changed: Vec<String> =
            agent.refs.iter().filter(|(n, o)| self.last.get(*n) != Some(o)).map(|(n, _)| n.clone()).collect();
        if changed.is_empty() && self.last_head.as_ref() == Some(&agent.head) {
            return Ok(());
        }
        let user = self.user_refs()?;
        let before = self.user_head();
        let wanted: Vec<&Oid> = changed.iter().filter_map(|n| agent.refs.get(n)).collect();
        if !wanted.is_empty() {
            if self.staging.is_none() {
                self.staging =
                    Some(Staging::make(self.staging_dir.clone(), &self.repo).map_err(|e| e.to_string())?);
            }
            if let Some(staging) = self.staging.as_mut() {
                staging.copy_new(self.repo.dir.as_fd())?;
            }
            self.fetch(&wanted)?;
        }
        let kinds = self.peeled_kinds(&wanted)?;
        let mut holds: Vec<(RefName, Oid, String)> = Vec::new();
        for (i, name) in changed.iter().enumerate() {
            // Each ref judged costs git runs; past the bound the rest is held in one go.
            if i >= REFS_PER_IMPORT {
                if let (Ok(refname), Some(oid)) = (RefName::parse(name.as_bytes()), agent.refs.get(name)) {
                    holds.push((
                        refname,
                        oid.clone(),
                        format!("more than {REFS_PER_IMPORT} refs changed at once"),
                    ));
                    self.last.insert(name.clone(), oid.clone());
                }
                continue;
            }
            if let Some(oid) = agent.refs.get(name)
                && let Some(kind) = kinds.get(oid.as_str()).filter(|k| k.as_str() != "commit")
                && let Ok(refname) = RefName::parse(name.as_bytes())
            {
                holds.push((
                    refname,
                    oid.clone(),
                    format!("it points at a {kind}, not a commit: only commits are judged"),
                ));
                self.last.insert(name.clone(), oid.clone());
                continue;
            }
            let Ok(refname) = RefName::parse(name.as_bytes()) else { continue };
            let new = agent.refs.get(name).cloned();
            let start = self.expected.get(name).cloned();
            let update =
                RefUpdate { name: refname.clone(), start, agent: new.clone(), user: user.get(name).cloned() };
            let commits = match &new {
                Some(oid) => self.changes(oid)?,
                None => Vec::new(),
            };
            let held_paths = |p: &[u8]| self.held_path(p);
            match gitimport::judge(&update, &commits, &held_paths) {
                Verdict::Skip(_) => {}
                Verdict::Import if self.hold_all => {
                    let Some(oid) = &new else { continue };
                    holds.push((refname.clone(), oid.clone(), LEFTOVER.to_string()));
                }
                Verdict::Import => {
                    let Some(oid) = &new else { continue };
                    let old = user
                        .get(name)
                        .map(|o| o.as_str().to_string())
                        .unwrap_or_else(|| zero(self.repo.format));
                    match self.update_ref(name, oid.as_str(), &old) {
                        Ok(()) => {
                            self.expected.insert(name.clone(), oid.clone());
                            done.updated.push(name.clone())
                        }
                        Err(e) => holds.push((
                            refname.clone(),
                            oid.clone(),
                            format!("the user's branch moved as it was imported ({e})"),
                        )),
                    }
                }
                Verdict::Hold(reasons) => {
                    let Some(oid) = &new else { continue };
                    let mut why: Vec<String> = Vec::new();
                    if self.hold_all {
                        why.push(LEFTOVER.to_string());
                    }
                    why.extend(
                        reasons
                            .iter()
                            .filter(|r| !(self.hold_all && matches!(r, gitimport::Reason::UserMoved { .. })))
                            .map(ToString::to_string),
                    );
                    holds.push((refname.clone(), oid.clone(), why.join("; ")));
                }
            }
            if let Some(o) = new {
                self.last.insert(name.clone(), o);
            }
        }
        self.hold(done, &holds)?;
        if !self.hold_all {
            self.follow_head(&agent, before.as_deref(), done)?;
        }
        self.last_head = Some(agent.head);
        Ok(())
    }

    /// The commit the user's HEAD names now (`None` on an unborn branch).
    fn user_head(&self) -> Option<String> {
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]);
        let out = output(cmd, "rev-parse").ok()?;
        Some(String::from_utf8_lossy(&out).trim().to_string()).filter(|s| !s.is_empty())
    }

    /// The user's branches and tags now.
    fn user_refs(&self) -> std::result::Result<BTreeMap<String, Oid>, String> {
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags"]);
        let out = output(cmd, "for-each-ref").map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(o, n)| Oid::parse(self.repo.format, o.as_bytes()).map(|o| (n.to_string(), o)))
            .collect())
    }

    /// Fetch `wanted` from the staging repository into the user's, every object checked. Git
    /// runs `git-upload-pack` in the staging repository (the launcher's config) and index-pack
    /// in the user's; the local transport is the only one allowed.
    fn fetch(&self, wanted: &[&Oid]) -> std::result::Result<(), String> {
        let mut cmd = user_git(&self.repo.root);
        cmd.env("GIT_ALLOW_PROTOCOL", "file");
        cmd.args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "fetch.fsckObjects=true",
            "-c",
            "transfer.fsckObjects=true",
            "-c",
            "maintenance.auto=false",
            "-c",
            "gc.auto=0",
            "-c",
            "fetch.writeCommitGraph=false",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            "--no-auto-gc",
            "--no-auto-maintenance",
        ]);
        cmd.arg(format!("file://{}", self.staging_dir.display()));
        cmd.args(wanted.iter().map(|o| o.as_str()));
        output(cmd, "fetch from the agent's repository").map(|_| ()).map_err(|e| e.to_string())
    }

    /// What each commit `oid` brings that the user's branches and tags do not reach changes.
    fn changes(&self, oid: &Oid) -> std::result::Result<Vec<CommitChanges>, String> {
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["rev-list", oid.as_str(), "--not", "--branches", "--tags"]);
        let list = output(cmd, "rev-list").map_err(|e| e.to_string())?;
        if list.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["diff-tree", "--stdin", "-r", "-m", "--root", "--no-renames", "--raw", "-z"]);
        let out = run_with_input(cmd, &list, "diff-tree")?;
        parse_diff_tree(&out, self.repo.format)
    }

    /// A path the sandbox holds read-only in this checkout's tree: a commit that changes it
    /// is held (the user's tree must not receive through the import what the agent could not
    /// write there).
    fn held_path(&self, path: &[u8]) -> bool {
        if gitimport::always_held(path) || self.tools.hold(path) {
            return true;
        }
        let full = self.repo.root.join(std::ffi::OsStr::from_bytes(path));
        // Under a held path, or on the way to one: a link or a file that takes the place of a
        // directory on the way (`tools -> x` with the hooks in `tools/hooks`) moves the held path
        // somewhere else the commit writes freely.
        self.held_in_tree().iter().any(|h| full.starts_with(h) || h.starts_with(&full))
    }

    fn held_in_tree(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> =
            ocsb_policy::guard::OCSB_DIRS.iter().map(|(n, _)| self.repo.root.join(n)).collect();
        v.extend(self.held_extra.iter().cloned());
        v
    }

    fn update_ref(&self, name: &str, new: &str, old: &str) -> std::result::Result<(), String> {
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["update-ref", "-m", "ocsb: imported from the sandbox", name, new, old]);
        output(cmd, "update-ref").map(|_| ()).map_err(|e| e.to_string())
    }

    /// Keep each of `holds` under `refs/ocsb/held/<session>/…` in the user's repository, all in
    /// one transaction (one git run however many).
    fn hold(&self, done: &mut Imported, holds: &[(RefName, Oid, String)]) -> std::result::Result<(), String> {
        if holds.is_empty() {
            return Ok(());
        }
        let mut input = Vec::new();
        for (name, oid, _) in holds {
            input.extend_from_slice(
                format!("update {} {}\n", gitimport::held_ref(&self.session, name), oid.as_str()).as_bytes(),
            );
        }
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["update-ref", "-m", "ocsb: held back from the sandbox", "--stdin"]);
        run_with_input(cmd, &input, "update-ref")?;
        for (name, _, why) in holds {
            done.held.push((gitimport::held_ref(&self.session, name), why.clone()));
        }
        Ok(())
    }

    /// The type of each object `wanted` names once tags are peeled (`commit`, `tree`, `blob`),
    /// by object id as given: one git run.
    fn peeled_kinds(&self, wanted: &[&Oid]) -> std::result::Result<BTreeMap<String, String>, String> {
        if wanted.is_empty() {
            return Ok(BTreeMap::new());
        }
        let input: String = wanted.iter().map(|o| format!("{}^{{}}\n", o.as_str())).collect();
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["cat-file", "--batch-check=%(objecttype)"]);
        let out = run_with_input(cmd, input.as_bytes(), "cat-file")?;
        Ok(wanted
            .iter()
            .zip(String::from_utf8_lossy(&out).lines())
            .map(|(o, t)| (o.as_str().to_string(), t.trim().to_string()))
            .collect())
    }

    /// The user's HEAD and index follow the agent's checked-out branch once that branch is
    /// the user's too (imported, or never changed): a switch inside switches the host's HEAD,
    /// a commit inside leaves the host's `git status` clean. A detached HEAD inside (in the
    /// middle of a rebase) is not followed; the end of the rebase is. The index is replaced
    /// only when it held what the user's HEAD held before (`before`): changes the user staged
    /// meanwhile are left as they are.
    fn follow_head(
        &mut self,
        agent: &AgentRefs,
        before: Option<&str>,
        done: &mut Imported,
    ) -> std::result::Result<(), String> {
        let RefValue::Symbolic(branch) = &agent.head else { return Ok(()) };
        let name = branch.as_str();
        // Only onto a branch: a HEAD on a tag would make the user's next commit move the tag.
        if branch.kind() != gitimport::RefKind::Branch {
            return Ok(());
        }
        let Some(want) = agent.refs.get(name) else { return Ok(()) };
        let user = self.user_refs()?;
        if user.get(name) != Some(want) {
            return Ok(());
        }
        let head_file = self.repo.user_gitdir.join("HEAD");
        let user_head = crate::checkouts::read_small(&head_file).unwrap_or_default();
        let target = format!("ref: {name}\n");
        let moved = self.last_head.as_ref() != Some(&agent.head) || done.updated.iter().any(|u| u == name);
        if user_head != target {
            let mut cmd = user_git(&self.repo.root);
            cmd.args(["symbolic-ref", "-m", "ocsb: the sandbox switched branch", "HEAD", name]);
            output(cmd, "symbolic-ref").map_err(|e| e.to_string())?;
            done.switched = Some(name.to_string());
        } else if !moved {
            return Ok(());
        }
        let staged_nothing = before.is_some_and(|b| {
            let mut cmd = user_git(&self.repo.root);
            cmd.args(["diff-index", "--cached", "--quiet", b, "--"]);
            cmd.status().is_ok_and(|s| s.success())
        });
        if !staged_nothing {
            return Ok(());
        }
        let mut cmd = user_git(&self.repo.root);
        cmd.args(["reset", "--quiet", "--mixed"]);
        output(cmd, "reset").map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Run `cmd` with `input` on its stdin (fed from a thread: git may answer before it read all).
fn run_with_input(mut cmd: Command, input: &[u8], what: &str) -> std::result::Result<Vec<u8>, String> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or_else(|| format!("{what}: no stdin"))?;
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    let _ = feeder.join();
    if !out.status.success() {
        return Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(out.stdout)
}

fn zero(format: ObjectFormat) -> String {
    "0".repeat(format.hex_len())
}

/// `git diff-tree --stdin -r -m --root --raw -z` output: a commit id line (`<oid>\0`, once a
/// parent for a merge), then entries `:<mode> <mode> <oid> <oid> <status>\0<path>\0`.
fn parse_diff_tree(out: &[u8], format: ObjectFormat) -> std::result::Result<Vec<CommitChanges>, String> {
    let mut commits: Vec<CommitChanges> = Vec::new();
    let mut fields = out.split(|b| *b == 0).peekable();
    while let Some(f) = fields.next() {
        if f.is_empty() {
            continue;
        }
        if let Some(meta) = f.strip_prefix(b":") {
            let path = fields.next().ok_or("diff-tree: an entry without a path")?.to_vec();
            let meta = std::str::from_utf8(meta).map_err(|_| "diff-tree: not text")?;
            let mut parts = meta.split(' ');
            let old_mode =
                u32::from_str_radix(parts.next().unwrap_or(""), 8).map_err(|_| "diff-tree: a mode")?;
            let new_mode =
                u32::from_str_radix(parts.next().unwrap_or(""), 8).map_err(|_| "diff-tree: a mode")?;
            let c = commits.last_mut().ok_or("diff-tree: an entry before its commit")?;
            c.changes.push(Change { path, old_mode, new_mode });
        } else {
            let id = std::str::from_utf8(f).map_err(|_| "diff-tree: not text")?.trim();
            let oid = Oid::parse(format, id.as_bytes())
                .ok_or_else(|| format!("diff-tree: {id} is no object id"))?;
            if commits.last().is_none_or(|c| c.commit != oid) {
                commits.push(CommitChanges { commit: oid, changes: Vec::new() });
            }
        }
    }
    Ok(commits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate holds a commit touching a tool file at any depth, or anything inside one, in
    /// any ASCII case; not a look-alike, nor a name the user lets the agent write; `.env`
    /// everywhere only when direnv's config loads it.
    #[test]
    fn tool_files_are_held_at_any_depth_but_the_names_left_writable() {
        let names = ToolNames::default();
        for held in [
            ".envrc",
            "a/b/c/.envrc",
            "a/b/c/rust-toolchain.toml",
            "x/.VSCODE/tasks.json",
            "node_modules/p/.idea/workspace.xml",
            "a/.config/mise.toml",
            "deep/er/.gitmodules",
        ] {
            assert!(names.hold(held.as_bytes()), "{held}");
        }
        for free in ["src/main.rs", "a/b/c/envrc", "a/.envrc.example", "mise.toml.d/x", "a/.env", "vscode/x"]
        {
            assert!(!names.hold(free.as_bytes()), "{free}");
        }
        let rw = ToolNames { rw: vec![".envrc".into()], dotenv: false };
        assert!(!rw.hold(b"a/b/c/.envrc") && rw.hold(b"a/b/c/rust-toolchain"));
        let dotenv = ToolNames { rw: vec![], dotenv: true };
        assert!(dotenv.hold(b"a/b/.env") && dotenv.hold(b".ENV") && !dotenv.hold(b"a/.env.example"));
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let o = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn dirs(d: &Path) -> GitDirs {
        GitDirs { gitdir: d.join(".git"), common: d.join(".git") }
    }

    #[test]
    fn the_object_format_is_read_from_the_config_listing() {
        let t = tempfile::tempdir().unwrap();
        for (fmt, want) in [("sha1", ObjectFormat::Sha1), ("sha256", ObjectFormat::Sha256)] {
            let d = t.path().join(fmt);
            std::fs::create_dir(&d).unwrap();
            git(&d, &["init", "-q", &format!("--object-format={fmt}")]);
            git(&d, &["commit", "-q", "--allow-empty", "-m", "x"]);
            let facts = user_facts(&d, &dirs(&d), t.path()).unwrap();
            assert_eq!(facts.format, want);
            assert!(facts.refs.iter().any(|(o, n)| n == "refs/heads/main" && o.len() == want.hex_len()));
        }
    }

    /// The user's refs as the launcher reads them from the files are what `git for-each-ref`
    /// lists: packed and loose (a loose one over its packed value), nested names, an annotated
    /// tag (its own id, not the commit's), a symbolic `origin/HEAD` as the ref it names; and a
    /// layout the strict reading does not take (a ref that is a link) is listed by git instead.
    #[test]
    fn the_users_refs_read_from_the_files_are_what_git_lists() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("r");
        std::fs::create_dir(&d).unwrap();
        git(&d, &["init", "-q", "-b", "main"]);
        git(&d, &["commit", "-q", "--allow-empty", "-m", "one"]);
        git(&d, &["tag", "-a", "-m", "annotated", "v1"]);
        git(&d, &["tag", "light"]);
        git(&d, &["branch", "feature/deep/x"]);
        git(&d, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
        git(&d, &["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]);
        git(&d, &["pack-refs", "--all"]);
        git(&d, &["commit", "-q", "--allow-empty", "-m", "two"]);
        git(&d, &["branch", "loose-only"]);
        git(&d, &["update-ref", "refs/notes/commits", "HEAD"]);
        let listed = |d: &Path| -> Vec<(String, String)> {
            git(
                d,
                &[
                    "for-each-ref",
                    "--format=%(objectname) %(refname)",
                    "refs/heads",
                    "refs/tags",
                    "refs/remotes",
                ],
            )
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(o, n)| (o.to_string(), n.to_string())))
            .collect()
        };
        let want = listed(&d);
        assert_eq!(want.len(), 7, "{want:?}");
        let read = user_refs_from_files(&d.join(".git"), ObjectFormat::Sha1).unwrap();
        assert_eq!(read, want);
        assert_eq!(user_facts(&d, &dirs(&d), t.path()).unwrap().refs, want);

        std::fs::rename(d.join(".git/refs/heads/loose-only"), d.join(".git/loose-only")).unwrap();
        std::os::unix::fs::symlink("../../loose-only", d.join(".git/refs/heads/loose-only")).unwrap();
        assert!(user_refs_from_files(&d.join(".git"), ObjectFormat::Sha1).is_err());
        assert_eq!(user_facts(&d, &dirs(&d), t.path()).unwrap().refs, listed(&d), "git lists them instead");
    }

    /// The agent's refs are read beneath its directory and through no link: a `refs/heads`
    /// swapped for a link to another repository's refs, or a branch that is a link, is an error
    /// (nothing is imported), never a read of the other place.
    #[test]
    fn the_agents_refs_are_read_through_no_link() {
        let t = tempfile::tempdir().unwrap();
        let agent = t.path().join("agent");
        let other = t.path().join("other");
        std::fs::create_dir_all(agent.join("refs/heads")).unwrap();
        std::fs::create_dir_all(other.join("refs/heads")).unwrap();
        std::fs::write(agent.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let oid = "a".repeat(40);
        std::fs::write(other.join("refs/heads/secret"), format!("{oid}\n")).unwrap();
        std::fs::write(agent.join("refs/heads/main"), format!("{oid}\n")).unwrap();
        let open = |p: &Path| {
            nix::fcntl::open(
                p,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap()
        };
        let fd = open(&agent);
        let refs = agent_refs(fd.as_fd(), ObjectFormat::Sha1).unwrap();
        assert_eq!(refs.refs.keys().collect::<Vec<_>>(), ["refs/heads/main"]);
        std::os::unix::fs::symlink(other.join("refs/heads/secret"), agent.join("refs/heads/link")).unwrap();
        assert!(agent_refs(fd.as_fd(), ObjectFormat::Sha1).is_err(), "a branch that is a link");
        std::fs::remove_file(agent.join("refs/heads/link")).unwrap();
        std::fs::rename(agent.join("refs/heads"), agent.join("refs/h2")).unwrap();
        std::os::unix::fs::symlink(other.join("refs/heads"), agent.join("refs/heads")).unwrap();
        assert!(agent_refs(fd.as_fd(), ObjectFormat::Sha1).is_err(), "refs/heads that is a link");
    }

    /// Object files are copied only when they are regular files beneath the agent's directory:
    /// a pack that is a link to another repository's pack is refused, not copied.
    #[test]
    fn a_linked_pack_is_not_staged() {
        let t = tempfile::tempdir().unwrap();
        let agent = t.path().join("agent");
        std::fs::create_dir_all(agent.join("objects/pack")).unwrap();
        std::fs::create_dir_all(agent.join("objects/ab")).unwrap();
        std::fs::write(agent.join("objects/ab/cdef"), b"loose").unwrap();
        std::fs::write(t.path().join("secret.pack"), b"PACK").unwrap();
        std::os::unix::fs::symlink(t.path().join("secret.pack"), agent.join("objects/pack/pack-1.pack"))
            .unwrap();
        let fd = nix::fcntl::open(
            &agent,
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap();
        let mut st = Staging { dir: t.path().join("staging"), copied: BTreeSet::new() };
        let e = st.copy_new(fd.as_fd()).unwrap_err();
        assert!(e.contains("pack-1.pack"), "{e}");
        assert_eq!(std::fs::read(t.path().join("staging/objects/ab/cdef")).unwrap(), b"loose");
        assert!(!t.path().join("staging/objects/pack/pack-1.pack").exists());
    }

    #[test]
    fn diff_tree_output_is_read_per_commit() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let z = "0".repeat(40);
        let out = format!(
            "{a}\0:000000 100755 {z} {b} A\0.husky/pre-commit\0:000000 160000 {z} {b} A\0sub\0{b}\0:100644 100644 {a} {b} M\0x\0"
        );
        let c = parse_diff_tree(out.as_bytes(), ObjectFormat::Sha1).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].changes[0].path, b".husky/pre-commit");
        assert_eq!(c[0].changes[1].new_mode, 0o160000);
        assert_eq!(c[1].changes[0].path, b"x");
        assert!(parse_diff_tree(b":100644 100644 x", ObjectFormat::Sha1).is_err());
    }
}
