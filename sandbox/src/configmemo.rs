//! What `git config` said of a checkout ([`ConfigFacts`]), remembered while nothing it was
//! made from has changed. *Why*: the look at the checkouts runs before and after every
//! sandbox, and its `git config` runs were its largest part (a process of about 2 ms each,
//! per checkout); the files git read seldom change between two starts.
//!
//! An answer is taken again only when every file it depends on has the same identity and
//! change time as when it was made: the config files git read and every include target (the
//! facts list them, missing ones too, so a target that appears later is seen), the files git
//! reads on its own (system, global, the repository's `config`, `config.worktree`, `HEAD` for
//! `onbranch:`, `commondir`, the `.git` entry), the `git` that ran, and the environment git reads
//! its config from (`GIT_*`, `HOME`, `XDG_CONFIG_HOME`, `PATH`). Any change of a file sets its
//! change time (`ctime`, which no caller can set back), and a file replaced is another inode.
//! *Why a margin*: file times come from a coarse clock, so a file changed while git was reading
//! it could look unchanged to a later check; an answer is kept only when every such file last
//! changed well before git ran ([`SETTLED`]).
//!
//! Kept in the process (the look after a sandbox reuses the one before it) and, between
//! starts, in a file of the audit's directory beside the state directory, which no sandbox can
//! write ([`load`], [`save`]). A record that cannot be read is no record.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ocsb_policy::guard::GitDirs;
use serde::{Deserialize, Serialize};

use super::checkouts::ConfigFacts;

/// How long before `git config` ran every file it depends on must have last changed for its
/// answer to be kept: well over a tick of the kernel's coarse clock (10 ms at HZ=100).
pub const SETTLED: Duration = Duration::from_millis(50);

/// The most answers kept (the project's checkouts, its worktrees and nested repositories).
const MAX_ENTRIES: usize = 256;

/// The most of the record read.
const MAX_RECORD: u64 = 4 << 20;

/// A file's identity and last change, as the check compares them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    /// The path itself (a link is its own inode): dev, ino, mode, ctime in ns.
    link: Option<(u64, u64, u32, i128)>,
    /// What it leads to: dev, ino, mode, size, mtime and ctime in ns.
    target: Option<(u64, u64, u32, u64, i128, i128)>,
}

fn ns(secs: i64, nanos: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nanos)
}

fn stat(p: &Path) -> Stat {
    Stat {
        link: p.symlink_metadata().ok().map(|m| (m.dev(), m.ino(), m.mode(), ns(m.ctime(), m.ctime_nsec()))),
        target: p.metadata().ok().map(|m| {
            (
                m.dev(),
                m.ino(),
                m.mode(),
                m.size(),
                ns(m.mtime(), m.mtime_nsec()),
                ns(m.ctime(), m.ctime_nsec()),
            )
        }),
    }
}

impl Stat {
    /// The latest change time of the two, if any.
    fn changed(&self) -> Option<i128> {
        self.link.map(|l| l.3).max(self.target.map(|t| t.5))
    }
}

/// One answer and what it was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    root: PathBuf,
    home: PathBuf,
    env: Vec<(String, String)>,
    files: Vec<(PathBuf, Stat)>,
    facts: ConfigFacts,
}

/// The answers of this process, and where they are kept between starts.
#[derive(Default)]
struct Memo {
    entries: Vec<Entry>,
    record: Option<PathBuf>,
    dirty: bool,
}

static MEMO: Mutex<Memo> = Mutex::new(Memo { entries: Vec::new(), record: None, dirty: false });

/// The environment git reads its configuration from (the variables the look removes aside).
fn env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| {
            (k.starts_with("GIT_") && !super::checkouts::GIT_REPO_ENV.contains(&k.as_str()))
                || matches!(k.as_str(), "HOME" | "XDG_CONFIG_HOME" | "PATH")
        })
        .collect();
    v.sort();
    v
}

/// The `git` a look runs: the first in `PATH`, and where it leads.
fn git_program() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(git) = std::env::split_paths(&path).map(|d| d.join("git")).find(|p| p.is_file()) else {
        return Vec::new();
    };
    let mut out = vec![git.clone()];
    if let Ok(real) = git.canonicalize() {
        // Its build's system config: `<prefix>/etc/gitconfig` (a build from source) or
        // `/etc/gitconfig` (a distribution's).
        if let Some(prefix) = real.parent().and_then(Path::parent) {
            out.push(prefix.join("etc/gitconfig"));
        }
        out.push(real);
    }
    out
}

/// The files git reads for `root` whatever its config says.
fn fixed_files(root: &Path, home: &Path, git: &GitDirs) -> Vec<PathBuf> {
    let mut files = git_program();
    files.push("/etc/gitconfig".into());
    files.push(home.join(".gitconfig"));
    match std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        Some(x) => files.push(PathBuf::from(x).join("git/config")),
        None => files.push(home.join(".config/git/config")),
    }
    for var in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            files.push(PathBuf::from(p));
        }
    }
    files.push(root.join(".git"));
    for d in [&git.gitdir, &git.common] {
        for name in ["config", "config.worktree", "HEAD", "commondir"] {
            files.push(d.join(name));
        }
    }
    files
}

/// The facts for `root`, remembered or made now by `make` (and remembered when they can be).
pub fn facts(root: &Path, home: &Path, git: &GitDirs, make: impl FnOnce() -> ConfigFacts) -> ConfigFacts {
    let env = env();
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    let same = |e: &Entry| e.root == root && e.home == home && e.env == env;
    if let Some(e) = memo.entries.iter().find(|e| same(e) && e.files.iter().all(|(p, s)| stat(p) == *s)) {
        return e.facts.clone();
    }
    memo.entries.retain(|e| !same(e));
    drop(memo);
    let started = SystemTime::now();
    let facts = make();
    super::stages::mark("look: git config ran (not remembered)");
    let mut paths = fixed_files(root, home, git);
    paths.extend(facts.files.iter().cloned());
    paths.sort();
    paths.dedup();
    let files: Vec<(PathBuf, Stat)> = paths
        .into_iter()
        .map(|p| {
            let s = stat(&p);
            (p, s)
        })
        .collect();
    let before = started.checked_sub(SETTLED).and_then(|t| t.duration_since(UNIX_EPOCH).ok());
    let settled = before.is_some_and(|b| {
        let b = b.as_nanos() as i128;
        files.iter().all(|(_, s)| s.changed().is_none_or(|c| c < b))
    });
    if settled {
        let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
        memo.entries.push(Entry { root: root.into(), home: home.into(), env, files, facts: facts.clone() });
        let excess = memo.entries.len().saturating_sub(MAX_ENTRIES);
        memo.entries.drain(..excess);
        memo.dirty = true;
    }
    facts
}

/// Takes the answers kept in `record` (a file in the audit's directory) for the look that
/// begins; [`save`] writes them back when it ends.
pub fn load(record: &Path) {
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    if memo.record.as_deref() == Some(record) {
        return;
    }
    let kept: Vec<Entry> = super::checkouts::read_bytes(record, MAX_RECORD)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    *memo = Memo { entries: kept, record: Some(record.to_path_buf()), dirty: false };
}

/// Writes the answers back to the record [`load`] read, if any changed (whole or not at all).
pub fn save() {
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    let Some(record) = memo.record.clone().filter(|_| memo.dirty) else { return };
    memo.dirty = false;
    let Ok(bytes) = serde_json::to_vec(&memo.entries) else { return };
    drop(memo);
    let mut tmp = record.as_os_str().to_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
    };
    if written.and_then(|()| std::fs::rename(&tmp, &record)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_dirs(root: &Path) -> GitDirs {
        GitDirs { gitdir: root.join(".git"), common: root.join(".git") }
    }

    /// An answer is taken again while its files stand; a change of one, a new include target
    /// or a file that changed just before git ran makes it again.
    #[test]
    fn an_answer_stands_while_its_files_do() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("p");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let home = d.path().join("h");
        std::fs::create_dir_all(&home).unwrap();
        let inc = root.join("inc.cfg");
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::thread::sleep(SETTLED * 2);
        let g = git_dirs(&root);
        let made = std::cell::Cell::new(0);
        let ask = || {
            facts(&root, &home, &g, || {
                made.set(made.get() + 1);
                ConfigFacts { files: vec![root.join(".git/config"), inc.clone()], ..Default::default() }
            })
        };
        ask();
        ask();
        assert_eq!(made.get(), 1, "taken again");
        // The include target appears: made again.
        std::fs::write(&inc, "[core]\n").unwrap();
        ask();
        assert_eq!(made.get(), 2);
        // It changed just now: not kept, so made again next time too.
        ask();
        assert_eq!(made.get(), 3);
        std::thread::sleep(SETTLED * 2);
        ask();
        ask();
        assert_eq!(made.get(), 4, "kept once settled");
        // Rewritten with the same size: its change time moves.
        std::fs::write(&inc, "[user]\n").unwrap();
        ask();
        assert_eq!(made.get(), 5);
        // The global config appears.
        std::thread::sleep(SETTLED * 2);
        ask();
        std::fs::write(home.join(".gitconfig"), "").unwrap();
        ask();
        assert_eq!(made.get(), 7);
    }

    /// With the real git: a hooks path set by an include target that appears after a look is
    /// seen by the next look, and one set by a config git read is seen after it changes.
    #[test]
    fn a_hooks_path_set_after_a_look_is_seen_by_the_next() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("p");
        let home = d.path().join("h");
        std::fs::create_dir_all(&home).unwrap();
        let ok = std::process::Command::new("git")
            .args(["init", "-q"])
            .arg(&root)
            .env("HOME", &home)
            .status()
            .unwrap();
        assert!(ok.success());
        let cfg = root.join(".git/config");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str("[include]\n\tpath = ../inc.cfg\n");
        std::fs::write(&cfg, text).unwrap();
        std::thread::sleep(SETTLED * 2);
        let look = || super::super::checkouts::checkout(&root, &home, true).hooks_paths;
        assert!(look().is_empty());
        assert!(look().is_empty());
        std::fs::write(root.join("inc.cfg"), "[core]\n\thooksPath = first\n").unwrap();
        assert_eq!(look(), vec![root.join("first")]);
        std::thread::sleep(SETTLED * 2);
        assert_eq!(look(), vec![root.join("first")]);
        std::fs::write(root.join("inc.cfg"), "[core]\n\thooksPath = other\n").unwrap();
        assert_eq!(look(), vec![root.join("other")]);
    }
}
