//! The agent's own git directories: one per writable checkout that is a repository, made by the
//! launcher when a sandbox starts and shown inside as that checkout's `.git`.
//!
//! *Why*: git on the host obeys what it finds in a git directory (config, hooks, the index's
//! gitlinks, rebase lists, `commondir`, links) and git's own documentation holds that working
//! in a repository someone else wrote is not safe. So the user's git directories are never
//! writable inside. The agent commits in a repository of its own, kept out of every writable
//! root: it starts from the user's HEAD, branches, tags, remote-tracking branches, index and
//! remotes, borrows the user's objects read-only (`objects/info/alternates`, nothing copied),
//! and stores its new objects itself. Its work reaches the user's repository only through the
//! launcher's import ([`crate::gate`]), which never runs git in it.
//!
//! Layout on the host: `<parent of the state directory>/.<name>.git/<session>-<n>/` (the
//! agent's git directory), `<session>-<n>.gitfile` (the `gitdir:` file shown over a `.git` file),
//! `<session>.lock` (held while the session lives: a directory whose lock is free belonged to
//! a launcher that died, and is imported and removed by the next start). The leading dot keeps
//! it from being any project's state directory, as for the audit directory.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ocsb_policy::guard::Checkout;

use crate::error::{Error, Result};
use crate::spec::{AGENT_GIT_INSIDE, AgentGit};

/// One agent git directory of a running session.
#[derive(Debug)]
pub struct Repo {
    /// What the sandbox's plan mounts.
    pub spec: AgentGit,
    /// The checkout (work tree) on the host.
    pub root: PathBuf,
    /// The user's git directory of this checkout (its HEAD and index).
    pub user_gitdir: PathBuf,
    /// The user's common git directory (config, objects, refs).
    pub user_common: PathBuf,
    /// The agent's git directory, opened before the sandbox could touch it: the gate reads
    /// through it, beneath it and never through a link, whatever the agent renames.
    pub dir: OwnedFd,
    /// The branches and tags as the session started (the compare-and-swap's expected values).
    pub start: BTreeMap<String, String>,
    /// The object format.
    pub format: ocsb_policy::gitimport::ObjectFormat,
}

/// The directory holding a project's agent git directories.
pub fn store_of(state_dir: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(state_dir.file_name().unwrap_or_default());
    name.push(".git");
    state_dir.with_file_name(name)
}

/// The agent's git directories of a session, and the `.git` entries that are no repository.
pub struct Made {
    pub repos: Vec<Repo>,
    /// `.git` entries of checkouts that git does not take for a repository (no `HEAD`, say):
    /// nothing to commit to, so they are shown read-only as they are, and whatever the user
    /// mends them into later holds nothing of the agent's.
    pub read_only: Vec<PathBuf>,
}

/// Make the agent git directories of `checkouts` for `session`: every checkout that is a
/// repository gets one. A checkout whose `.git` is a symbolic link is refused (a mount over
/// it would cover its target, some other place).
pub fn make_all(store: &Path, session: &str, checkouts: &[Checkout], home: &Path) -> Result<Made> {
    private_dir(store)?;
    // Canonical: the plan binds from it and refuses a source that goes through a link
    // (`~ -> /data/home`).
    let store = &store.canonicalize().map_err(|e| Error::io("resolve", store, e))?;
    let mut made = Made { repos: Vec::new(), read_only: Vec::new() };
    for c in checkouts {
        let Some(g) = &c.git else { continue };
        let dot = c.root.join(".git");
        let kind = dot.symlink_metadata().map_err(|e| Error::io("look at", &dot, e))?.file_type();
        if kind.is_symlink() {
            return Err(Error::refused(
                format!(
                    "{} is a symbolic link: the sandbox shows the agent its own .git in its place",
                    dot.display()
                ),
                format!("replace the link with the directory it names (`ls -l {}`)", dot.display()),
            ));
        }
        let Ok(facts) = crate::gate::user_facts(&c.root, g, home) else {
            made.read_only.push(dot);
            continue;
        };
        let n = made.repos.len();
        made.repos.push(make(store, session, n, &c.root, &g.gitdir, &g.common, kind.is_file(), facts)?);
    }
    Ok(made)
}

/// The lock of `session` in `store`, held while the session lives, and where it is. *Why
/// locked before it is named*: a lock file another start could open before this one locks it
/// would be taken for a dead session's ([`leftovers`]); it is locked under a name that start
/// does not look at, then renamed into place. And it is there before the session's
/// directories are: they never stand without it.
pub fn lock(store: &Path, session: &str) -> Result<(nix::fcntl::Flock<std::fs::File>, PathBuf)> {
    private_dir(store)?;
    let file = store.join(format!("{session}.lock"));
    let tmp = store.join(format!("{session}.lock.tmp"));
    let f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    let held = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| Error::io("lock", &tmp, e.into()))?;
    std::fs::rename(&tmp, &file).map_err(|e| Error::io("rename", &tmp, e))?;
    Ok((held, file))
}

fn private_dir(p: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == std::io::ErrorKind::AlreadyExists
                && p.symlink_metadata().is_ok_and(|m| m.is_dir()) =>
        {
            Ok(())
        }
        Err(e) => Err(Error::io("create", p, e)),
    }
}

/// What a new file of the agent's git directory holds.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    f.write_all(bytes).map_err(|e| Error::io("write", path, e))
}

/// Copy a file of the user's git directory when it is a regular file (an index, an exclude
/// list); nothing when it is missing.
fn copy_if_file(from: &Path, to: &Path) -> Result<()> {
    match from.symlink_metadata() {
        Ok(m) if m.is_file() => {
            std::fs::copy(from, to).map_err(|e| Error::io("copy", from, e))?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Whether an exclude list holds a pattern. The one `git init` writes holds only comments,
/// and is not copied then (a file fewer at each start): git reads a missing list as an empty
/// one. As git reads the list, `#` lines and empty lines or lines of spaces hold none;
/// anything else (a tab; a list that is no UTF-8 or too large to read here) counts as one.
fn has_patterns(text: &str) -> bool {
    text.lines().any(|l| !(l.starts_with('#') || l.bytes().all(|b| b == b' ')))
}

/// The user's object directories: `objects` and, in order, those its `info/alternates` names
/// (git follows them too, so the agent's git must see them to read the user's history).
fn object_dirs(common: &Path) -> Vec<PathBuf> {
    let objects = common.join("objects");
    let mut dirs = vec![objects.clone()];
    if let Some(text) = crate::checkouts::read_small(&objects.join("info/alternates")) {
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let p = objects.join(line);
            if let Ok(c) = p.canonicalize()
                && c.is_dir()
                && !dirs.contains(&c)
            {
                dirs.push(c);
            }
        }
    }
    dirs
}

#[allow(clippy::too_many_arguments, reason = "one checkout's facts, each named")]
fn make(
    store: &Path,
    session: &str,
    n: usize,
    root: &Path,
    gitdir: &Path,
    common: &Path,
    file: bool,
    facts: crate::gate::UserFacts,
) -> Result<Repo> {
    let name = format!("{session}-{n}");
    let dir = store.join(&name);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| Error::io("create", &dir, e))?;
    let inside = Path::new(AGENT_GIT_INSIDE).join(n.to_string());
    let user_objects = object_dirs(common);
    let objects: Vec<(PathBuf, PathBuf)> = user_objects
        .iter()
        .enumerate()
        .map(|(k, d)| (d.clone(), Path::new(AGENT_GIT_INSIDE).join(format!("{n}-objects-{k}"))))
        .collect();
    // What git needs to take it for a repository (`objects`, `refs`), the alternates'
    // directory, and those tools write into without making them (`hooks`, as `cp pre-commit
    // .git/hooks/`; `info`, as `echo x >> .git/info/exclude`; `refs/heads`). Git makes the
    // two others it writes to (`objects/pack`, `refs/tags`) when it does, and the gate reads a
    // missing one as empty. *Why no more*: each directory made and removed at every start
    // costs the disk's inode allocator about a tenth of a millisecond on ext4, more the more
    // it removed in the last minutes, on the path of the start.
    for sub in ["objects", "objects/info", "refs", "refs/heads", "info", "hooks"] {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir.join(sub))
            .map_err(|e| Error::io("create", dir.join(sub), e))?;
    }
    let alternates: String = objects.iter().map(|(_, i)| format!("{}\n", i.display())).collect();
    write_new(&dir.join("objects/info/alternates"), alternates.as_bytes())?;

    write_new(&dir.join("config"), crate::gate::agent_config(&facts).as_bytes())?;
    let head = crate::checkouts::read_small(&gitdir.join("HEAD")).ok_or_else(|| {
        Error::refused(
            format!("{} cannot be read as a git HEAD", gitdir.join("HEAD").display()),
            "mend the repository (`git status` says what is wrong) and start again",
        )
    })?;
    write_new(&dir.join("HEAD"), head.as_bytes())?;
    // No peeled lines are written, so the header claims none: git peels annotated tags itself.
    let mut packed = String::from("# pack-refs with: sorted \n");
    let mut start = BTreeMap::new();
    for (oid, name) in &facts.refs {
        packed.push_str(&format!("{oid} {name}\n"));
        if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
            start.insert(name.clone(), oid.clone());
        }
    }
    write_new(&dir.join("packed-refs"), packed.as_bytes())?;
    copy_if_file(&gitdir.join("index"), &dir.join("index"))?;
    let exclude = common.join("info/exclude");
    if crate::checkouts::read_small(&exclude).is_none_or(|t| has_patterns(&t)) {
        copy_if_file(&exclude, &dir.join("info/exclude"))?;
    }
    for f in ["info/sparse-checkout", "shallow"] {
        copy_if_file(&common.join(f), &dir.join(f))?;
    }
    // Where it belongs, for the next start when this session's launcher dies (beside the
    // directory, out of the sandbox's reach).
    write_new(&store.join(format!("{name}.root")), root.as_os_str().as_encoded_bytes())?;
    let pointer = if file {
        let p = store.join(format!("{name}.gitfile"));
        write_new(&p, format!("gitdir: {}\n", inside.display()).as_bytes())?;
        Some(p)
    } else {
        None
    };
    let fd = open_dir(&dir).map_err(|e| Error::io("open", &dir, e.into()))?;
    Ok(Repo {
        spec: AgentGit { dot_git: root.join(".git"), gitdir: dir, inside, pointer, objects },
        root: root.to_path_buf(),
        user_gitdir: gitdir.to_path_buf(),
        user_common: common.to_path_buf(),
        dir: fd,
        start,
        format: facts.format,
    })
}

/// The descriptor the gate reads an agent's directory through ([`Repo::dir`]): the directory
/// itself, never a link in its place.
fn open_dir(dir: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
}

/// The agent git directories of a session whose launcher died, found by [`leftovers`]: its
/// lock, held until [`Leftover::done`].
pub struct Leftover {
    pub session: String,
    /// Those that can be imported.
    pub repos: Vec<Repo>,
    /// Some could not be opened for an import (their checkout is gone or no repository any
    /// more): they stay, and so does the lock file that names them.
    unreadable: bool,
    lock: nix::fcntl::Flock<std::fs::File>,
    lock_file: PathBuf,
}

impl Leftover {
    /// After the imports: `kept` says whether a directory stays (an import failed). The lock
    /// file is removed, while held, only when none does: it is how the next start finds them.
    pub fn done(self, kept: bool) {
        if !kept && !self.unreadable {
            let _ = std::fs::remove_file(&self.lock_file);
        }
        drop(self.lock);
    }
}

/// The agent git directories of sessions whose launcher died (their lock is free): each
/// session with its repositories, ready for a last import that holds everything, and its lock
/// held meanwhile (another start does not take them too). Every `<session>-<n>` is found,
/// whichever numbers an earlier import removed.
pub fn leftovers(store: &Path, home: &Path) -> Vec<Leftover> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(store) else { return out };
    let names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    for name in &names {
        let Some(session) = name.strip_suffix(".lock") else { continue };
        let lock_file = store.join(name);
        let lock = std::fs::OpenOptions::new().write(true).open(&lock_file);
        let Ok(held) = lock.map(|f| nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock))
        else {
            continue;
        };
        let Ok(lock) = held else { continue };
        let mut left =
            Leftover { session: session.to_string(), repos: Vec::new(), unreadable: false, lock, lock_file };
        let prefix = format!("{session}-");
        let mut numbers: Vec<usize> = names
            .iter()
            .filter_map(|n| n.strip_prefix(&prefix)?.parse().ok())
            .filter(|n: &usize| store.join(format!("{session}-{n}")).is_dir())
            .collect();
        numbers.sort_unstable();
        for n in numbers {
            match leftover_repo(store, session, n, home) {
                Some(repo) => left.repos.push(repo),
                None => left.unreadable = true,
            }
        }
        out.push(left);
    }
    out
}

/// The repository `<session>-<n>` of a dead session, opened for its import.
fn leftover_repo(store: &Path, session: &str, n: usize, home: &Path) -> Option<Repo> {
    let dir = store.join(format!("{session}-{n}"));
    let root = std::fs::read(store.join(format!("{session}-{n}.root")))
        .ok()
        .map(|b| PathBuf::from(std::ffi::OsString::from_vec(b)))?;
    let g = crate::checkouts::git_dirs(&root)?;
    let facts = crate::gate::user_facts(&root, &g, home).ok()?;
    let fd = open_dir(&dir).ok()?;
    let objects = object_dirs(&g.common).into_iter().map(|d| (d.clone(), d)).collect();
    let spec = AgentGit {
        dot_git: root.join(".git"),
        gitdir: dir.clone(),
        inside: dir,
        pointer: Some(store.join(format!("{session}-{n}.gitfile"))),
        objects,
    };
    Some(Repo {
        spec,
        root,
        user_gitdir: g.gitdir,
        user_common: g.common,
        dir: fd,
        start: BTreeMap::new(),
        format: facts.format,
    })
}

impl Repo {
    /// Remove the agent's git directory once its work was imported. Never follows a link the
    /// agent left in it (`remove_dir_all` removes links as entries).
    pub fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.spec.gitdir);
        if let Some(p) = &self.spec.pointer {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(self.spec.gitdir.with_extension("root"));
    }
}

#[cfg(test)]
mod tests {
    use super::has_patterns;

    #[test]
    fn only_a_list_of_comments_and_blank_lines_holds_no_pattern() {
        let template = "# git ls-files --others --exclude-from=.git/info/exclude\n\
                        # Lines that start with '#' are comments.\n\
                        # For a project mostly in C, the following would be a good set of\n\
                        # exclude patterns (uncomment them if you want to use them):\n\
                        # *.[oa]\n# *~\n";
        assert!(!has_patterns(template));
        assert!(!has_patterns(""));
        assert!(!has_patterns("\n   \n# x\n"));
        for with in ["*.o\n", "# c\nbuild/\n", "\\#literal\n", "\t\n", " x\n", "x\r\n"] {
            assert!(has_patterns(with), "{with:?}");
        }
    }
}
