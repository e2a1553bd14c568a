//! Which directories of the home the sandbox sees as they were at start.
//!
//! A mount hides a path only while the host keeps the directory entry it sits on. When a tool on
//! the host replaces a hidden file by rename (`docker login` rewriting `~/.docker/config.json`,
//! a shell saving its history) or removes and recreates a hidden directory, the kernel detaches
//! the mount and the sandbox sees the new secret. A hidden name that does not exist at start
//! (`~/.config/gh` before `gh auth login`) has nothing to mount on at all.
//!
//! So each directory of the home that holds a hidden name (for a missing name: the nearest
//! existing directory above it), and every directory between it and the home, is rebuilt as a
//! sealed tmpfs whose entries are the host's entries at start, bound back one by one. The masks
//! then sit on mount points that only the sandbox's namespace holds, and names the host creates
//! later are absent. Sockets and other special files directly in such a directory are not bound
//! back: a socket in the home (an ssh ControlMaster, an agent) is a channel to a host process.
//!
//! A holder outside the home (a hidden name reached through `~/.config -> /data/config`) is not
//! rebuilt: the directory above it may be one the user can rename entries in (`/var/tmp`), which
//! would move the rebuilt directory away with its entry, so it is masked in place as before.
//!
//! A directory inside a writable root is left alone (the agent must keep creating files there),
//! so a hidden name inside the project or an `OCSB_RW_HOME` entry is masked as before.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::plan::{HostFs, Kind};

/// The snapshot directories for `hidden` (any mix of existing and missing paths), given the
/// canonical `home` and the canonical writable roots.
pub fn dirs(fs: &dyn HostFs, home: &Path, hidden: &[PathBuf], writable: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    // A hidden symlink is masked at its target: hold the target's directory too, also when the
    // target does not exist yet (a dotfiles link the host fills in later).
    let existing: Vec<PathBuf> = hidden.iter().filter_map(|h| fs.canonicalize(h).ok()).collect();
    let targets: Vec<PathBuf> = hidden.iter().filter_map(|h| link_target(fs, h)).collect();
    for h in hidden.iter().chain(&existing).chain(&targets) {
        let Some(dir) = holder(fs, h) else { continue };
        if !dir.starts_with(home) || writable.iter().any(|w| dir.starts_with(w)) {
            continue;
        }
        let mut d = dir.as_path();
        loop {
            out.insert(d.to_path_buf());
            if d == home {
                break;
            }
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
    }
    // Nothing is bound back inside a hidden directory (a hidden `~/.docker` that also holds a
    // hidden `config.json` stays empty).
    out.retain(|d| !existing.iter().any(|h| d.starts_with(h)));
    out
}

/// Where the symlink `p` points (followed up to a few links), resolved against the canonical
/// directories on the way, whether or not the end exists.
fn link_target(fs: &dyn HostFs, p: &Path) -> Option<PathBuf> {
    let mut at = p.to_path_buf();
    for _ in 0..8 {
        if fs.kind(&at) != Kind::Symlink {
            return (at != p).then_some(at);
        }
        let t = fs.read_link(&at).ok()?;
        let dir = fs.canonicalize(at.parent()?).ok()?;
        at = lexical(&dir.join(t));
    }
    None
}

/// `.` and `..` removed without touching the filesystem (the directories are canonical).
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The existing directory (canonical) that holds `p`'s name, or would hold it.
pub(crate) fn holder(fs: &dyn HostFs, p: &Path) -> Option<PathBuf> {
    let mut d = p.parent()?;
    loop {
        match fs.kind(d) {
            Kind::Dir | Kind::Symlink => {
                let c = fs.canonicalize(d).ok()?;
                return (fs.kind(&c) == Kind::Dir).then_some(c);
            }
            _ => d = d.parent()?,
        }
    }
}

/// What a snapshot directory's entry becomes inside the sandbox.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Bound back read-only (a file or directory).
    Bind { dir: bool },
    /// Recreated with the same target.
    Link(PathBuf),
    /// Not shown (sockets, fifos, devices, or unreadable).
    Skip,
}

pub fn entry(fs: &dyn HostFs, p: &Path) -> Entry {
    match fs.kind(p) {
        Kind::Dir => Entry::Bind { dir: true },
        Kind::File => Entry::Bind { dir: false },
        Kind::Symlink => fs.read_link(p).map_or(Entry::Skip, Entry::Link),
        _ => Entry::Skip,
    }
}
