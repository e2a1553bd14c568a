//! The audit's check of git's indexes: every index git keeps for the checkouts' repositories,
//! for entries git would write into `.git` or out of the checkout (`git checkout -- .` and
//! `git stash` write what the index names without checking the path, hooks included).
//!
//! *Every* index: a checkout's own, and through its common directory the main checkout's and
//! every linked worktree's (`.git/worktrees/<name>/index`): the agent can write those too,
//! and the user runs git there later. Each is read in-process where [`gitindex`] reads it as
//! git does, and listed by `git ls-files` otherwise.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ocsb_policy::guard::{self, Finding, Lookup};

use super::checkouts::{self, HostLookup};
use super::gitindex::{self, MAX_NAME_BYTES, Scan, TOO_MANY_NAMES};

/// More linked worktrees than this in one repository are not checked one by one: a finding.
const MAX_WORKTREES: usize = 256;

/// One index, and how its repository's object format is known.
struct Target {
    index: PathBuf,
    /// The git directory it belongs to, for `git --git-dir`.
    gitdir: PathBuf,
    /// The config that decides its object format, when its layout is plain enough to read here
    /// (a main `.git` directory, a worktree's whose `commondir` is `../..`); else git is asked.
    config: Option<PathBuf>,
}

/// Findings for every index of the repositories of `roots` (the audit's checkout roots).
pub fn findings(roots: &[(PathBuf, bool)]) -> Vec<Finding> {
    let (targets, mut out) = targets(roots);
    out.extend(targets.iter().filter_map(check));
    out
}

fn targets(roots: &[(PathBuf, bool)]) -> (Vec<Target>, Vec<Finding>) {
    let (mut out, mut findings) = (Vec::new(), Vec::new());
    let mut commons = BTreeSet::new();
    for (root, _) in roots {
        let Some(g) = checkouts::git_dirs(root) else { continue };
        // A main `.git` directory is its own common directory (its `commondir`, if there is
        // one, the launcher's `.`). Anywhere else git is asked where the common directory is,
        // and the checkout's own index is listed by git as it finds it.
        let own_common = g.gitdir == g.common && commondir_is(&g.gitdir, guard::COMMONDIR_SELF);
        let common = if own_common {
            g.common.clone()
        } else {
            out.push(Target { index: g.gitdir.join("index"), gitdir: g.gitdir.clone(), config: None });
            match common_dir(root) {
                Some(c) => c,
                None => continue,
            }
        };
        if !commons.insert(common.clone()) {
            continue;
        }
        let config = own_common.then(|| common.join("config"));
        out.push(Target { index: common.join("index"), gitdir: common.clone(), config: config.clone() });
        let worktrees = common.join("worktrees");
        let names = HostLookup.names(&worktrees);
        if names.len() > MAX_WORKTREES {
            findings.push(Finding {
                path: worktrees.clone(),
                why: format!(
                    "more than {MAX_WORKTREES} linked worktrees: their indexes are not checked one by one \
                     (`git worktree prune`, or remove the ones you do not use)"
                ),
            });
            continue;
        }
        for n in names {
            let gitdir = worktrees.join(n);
            if !gitdir.is_dir() {
                continue;
            }
            let plain =
                config.is_some() && (commondir_is(&gitdir, "../..\n") || commondir_is(&gitdir, "../.."));
            out.push(Target {
                index: gitdir.join("index"),
                config: plain.then(|| config.clone()).flatten(),
                gitdir,
            });
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|t| seen.insert(t.index.clone()));
    (out, findings)
}

/// `dir/commondir` holds exactly `text`; a missing one counts as the main directory's own
/// (`.`).
fn commondir_is(dir: &Path, text: &str) -> bool {
    match checkouts::read_small(&dir.join("commondir")) {
        Some(t) => t == text,
        None => text == guard::COMMONDIR_SELF && !dir.join("commondir").exists(),
    }
}

/// The common directory git itself finds for `root`.
fn common_dir(root: &Path) -> Option<PathBuf> {
    let mut cmd = checkouts::git(root);
    cmd.args(["rev-parse", "--path-format=absolute", "--git-common-dir"]).stderr(Stdio::null());
    let (status, out) = checkouts::output_within(cmd, 64 * 1024)?;
    let text = String::from_utf8(out).ok()?;
    (status.success() && !text.trim().is_empty()).then(|| PathBuf::from(text.trim_end_matches('\n')))
}

fn into_git(p: &[u8]) -> bool {
    p.split(|b| *b == b'/').any(|c| c.eq_ignore_ascii_case(b".git") || c == b"..")
}

fn check(t: &Target) -> Option<Finding> {
    let scanned = match (&t.config, std::fs::metadata(&t.index)) {
        (_, Err(_)) => return None,
        // Git would hang on a FIFO: nothing is opened that is not a regular file.
        (_, Ok(m)) if !m.is_file() => Scan::Unchecked("the index is not a regular file"),
        (Some(config), Ok(_)) => gitindex::scan(&t.index, config, &into_git),
        (None, Ok(_)) => Scan::AskGit,
    };
    let scanned = match scanned {
        Scan::AskGit if blocks_git(&t.gitdir) => {
            Scan::Unchecked("a file git reads first is not a regular file")
        }
        Scan::AskGit => ls_files(&t.gitdir),
        s => s,
    };
    let unchecked = |why: &str| {
        format!("the index cannot be checked ({why}): git on the host could write anything it names")
    };
    let why = match scanned {
        Scan::Read(false) => return None,
        Scan::Read(true) => "the index names a path inside .git (or with `..`): `git checkout` or \
                             `git stash` on the host would write it, hooks included"
            .to_string(),
        Scan::Unchecked(why) => unchecked(why),
        // `ls_files` could not start git: as before this reader, nothing is known.
        Scan::AskGit => return None,
    };
    Some(Finding { path: t.index.clone(), why })
}

/// How long `git ls-files` may take to list an index.
/// Whether a file git reads before the index (`HEAD`, `commondir`, the config) is something
/// other than a regular file, a link or missing: a FIFO there holds git until it is killed,
/// and many of them would hold the look for as many times its limit.
fn blocks_git(gitdir: &Path) -> bool {
    ["HEAD", "commondir", "config"].iter().any(|n| {
        gitdir
            .join(n)
            .symlink_metadata()
            .is_ok_and(|m| !m.is_file() && !m.is_dir() && !m.file_type().is_symlink())
    })
}

/// `git ls-files` of `gitdir`, read as it comes (no listing is kept whole).
fn ls_files(gitdir: &Path) -> Scan {
    ls_files_within(gitdir, checkouts::GIT_TIMEOUT)
}

/// [`ls_files`], killed after `limit`. *Why a limit*: the index is checked to be a regular file
/// before git opens it, but another session of the project, still running, could put a FIFO in
/// its place meanwhile, and git would wait on it for ever, with the look that ends this run.
fn ls_files_within(gitdir: &Path, limit: Duration) -> Scan {
    let Some(limit) = checkouts::time_left(limit) else { return Scan::Unchecked(SLOW_GIT) };
    let spawned = checkouts::git(gitdir)
        .arg("--git-dir")
        .arg(gitdir)
        .args(["ls-files", "-z", "--cached"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = spawned else { return Scan::AskGit };
    let Some(stdout) = child.stdout.take() else { return Scan::AskGit };
    let child = Arc::new(Mutex::new(child));
    let watch = checkouts::Watchdog::start(child.clone(), limit);
    let mut reader = BufReader::new(stdout);
    let (mut found, mut read, mut path) = (false, 0u64, Vec::new());
    let over = loop {
        path.clear();
        let budget = MAX_NAME_BYTES.saturating_sub(read) + 1;
        match reader.by_ref().take(budget).read_until(0, &mut path) {
            Ok(0) => break false,
            Ok(n) => {
                read += n as u64;
                if read > MAX_NAME_BYTES {
                    break true;
                }
                found = found || into_git(path.strip_suffix(b"\0").unwrap_or(&path));
            }
            Err(_) => break false,
        }
    };
    let late = watch.finish();
    let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
    if over {
        let _ = child.kill();
    }
    let _ = child.wait();
    if late {
        return Scan::Unchecked(SLOW_GIT);
    }
    if over {
        return Scan::Unchecked(TOO_MANY_NAMES);
    }
    // An index git cannot list is not a finding of its own: git on the host fails on it too,
    // and what makes it fail (a `commondir` planted to point elsewhere) is reported as itself.
    Scan::Read(found)
}

/// Why an index is unchecked when git did not list it within [`checkouts::GIT_TIMEOUT`].
const SLOW_GIT: &str = "git did not list it in time: it may have been replaced by a FIFO";

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let o = checkouts::git(dir).args(args).output().unwrap();
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    /// Git refuses such a path from the command line; an agent writes the index itself: an
    /// entry added as `spelled` is renamed `planted` (of the same length) in place.
    fn plant(dir: &Path, index: &Path, spelled: &str, planted: &str) {
        let blob = git(dir, &["hash-object", "-w", "--stdin"]);
        let idx = std::ffi::OsString::from(index);
        let o = checkouts::git(dir)
            .env("GIT_INDEX_FILE", &idx)
            .args(["update-index", "--add", "--cacheinfo", &format!("100755,{},{spelled}", blob.trim())])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut data = std::fs::read(index).unwrap();
        let at = data.windows(spelled.len()).position(|w| w == spelled.as_bytes()).unwrap();
        data[at..at + planted.len()].copy_from_slice(planted.as_bytes());
        std::fs::write(index, data).unwrap();
    }

    /// A main checkout `p` with a linked worktree `other` beside it.
    fn repo(t: &Path) -> (PathBuf, PathBuf) {
        let (p, other) = (t.join("p"), t.join("other"));
        std::fs::create_dir_all(&p).unwrap();
        git(&p, &["init", "-q"]);
        std::fs::write(p.join("f"), "x").unwrap();
        git(&p, &["add", "f"]);
        git(&p, &["-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "one"]);
        git(&p, &["worktree", "add", "-q", other.to_str().unwrap()]);
        (p.canonicalize().unwrap(), other.canonicalize().unwrap())
    }

    /// The index of another worktree, written through the common directory from a session in
    /// the main checkout, and the main checkout's, from a session in a linked worktree: both
    /// are found, as is the session's own.
    #[test]
    fn every_index_of_the_repository_is_checked_from_any_checkout() {
        let t = tempfile::tempdir().unwrap();
        let (p, other) = repo(t.path());
        let from_main = [(p.clone(), true)];
        let from_other = [(other.clone(), true)];
        assert!(findings(&from_main).is_empty());
        assert!(findings(&from_other).is_empty());
        let theirs = p.join(".git/worktrees/other/index");
        plant(&p, &theirs, "zz/p/.gia/hooks/x", "../p/.git/hooks/x");
        let f = findings(&from_main);
        assert_eq!(
            f.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
            std::slice::from_ref(&theirs),
            "{f:?}"
        );
        assert_eq!(findings(&from_other).len(), 1, "the session's own index, listed by git");
        std::fs::remove_file(&theirs).unwrap();
        git(&other, &["reset", "-q"]);
        let main = p.join(".git/index");
        plant(&p, &main, "sub/.gia/config", "sub/.git/config");
        assert_eq!(findings(&from_other).iter().map(|f| f.path.clone()).collect::<Vec<_>>(), [main]);
    }

    /// An index git would hang on is a finding, not a pass, and nothing waits for it.
    #[test]
    fn an_index_that_cannot_be_checked_is_a_finding() {
        let t = tempfile::tempdir().unwrap();
        let (p, _) = repo(t.path());
        let main = p.join(".git/index");
        std::fs::remove_file(&main).unwrap();
        nix::unistd::mkfifo(&main, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let f = findings(&[(p.clone(), true)]);
        assert!(f.len() == 1 && f[0].why.contains("not a regular file"), "{f:?}");
        std::fs::remove_file(&main).unwrap();
        assert!(findings(&[(p, true)]).is_empty(), "no index: nothing to check");
    }

    /// A FIFO put in the index's place after the check that it is a regular file: git hangs on
    /// it, and is killed after the limit; the index is a finding.
    #[test]
    fn git_that_hangs_on_the_index_is_stopped_and_the_index_is_a_finding() {
        let t = tempfile::tempdir().unwrap();
        let (p, _) = repo(t.path());
        let git_dir = p.join(".git");
        assert_eq!(ls_files_within(&git_dir, Duration::from_secs(5)), Scan::Read(false), "a plain index");
        std::fs::remove_file(git_dir.join("index")).unwrap();
        nix::unistd::mkfifo(&git_dir.join("index"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(ls_files_within(&git_dir, Duration::from_millis(500)), Scan::Unchecked(SLOW_GIT));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
}
