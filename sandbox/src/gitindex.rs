//! The paths a git index names, read in-process for the audit's look at each checkout
//! ([`crate::audit`]). *Why not always `git ls-files`*: a look runs before and after every
//! sandbox, and a git process is about 1.5 ms of CPU on a start that is otherwise short of it.
//!
//! The reader takes only an index it reads exactly as git does; anything else is
//! [`Scan::AskGit`] and the caller runs `git ls-files`, as it always did. Git itself checks
//! neither the trailing checksum (only `git fsck` does) nor much else, so the reader decides by
//! the layout alone, as git reads it:
//! - object ids of SHA-1 only: a repository whose config mentions an object format at all goes
//!   to git (its ids, 32 bytes, would move every field after them);
//! - a regular file of at most [`MAX_BYTES`]; versions 2, 3 and 4; each entry inside the file;
//!   no NUL inside a name and only NULs padding it (git takes the byte after a name into it);
//! - no extension git must understand (a signature not starting with an upper-case letter:
//!   `link` for a split index, `sdir` for a sparse one, whose entries are elsewhere) and none
//!   that changes where git reads entries or extensions from (`IEOT`, `EOIE`: a crafted offset
//!   would have git read other bytes than this reader).
//!
//! Names are checked as they are read, one at a time: a version-4 index can repeat a long name
//! in every entry at a few bytes each, and keeping them all would take gigabytes.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What scanning an index gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Whether an entry's path (any stage) matched.
    Read(bool),
    /// Not an index this reader takes as git would: ask git.
    AskGit,
    /// Not one that can be checked at all, and why: not a regular file (git would hang on a
    /// FIFO), or names of more than [`MAX_NAME_BYTES`] in all.
    Unchecked(&'static str),
}

/// Larger indexes go to git (a checkout of a few hundred thousand files).
pub const MAX_BYTES: u64 = 64 << 20;
/// The most bytes of names a check reads (a version-4 index can repeat one long name in every
/// entry at a few bytes each: gigabytes of names from a small file).
pub const MAX_NAME_BYTES: u64 = 256 << 20;
/// Why an index is [`Scan::Unchecked`] for its names.
pub const TOO_MANY_NAMES: &str = "it names more bytes of paths than the check reads";

/// Whether the index at `index` names a path `matches` takes, for a repository whose common
/// git directory holds `config`. No index file is an empty index (git lists nothing either).
pub fn scan(index: &Path, config: &Path, matches: &dyn Fn(&[u8]) -> bool) -> Scan {
    // The repository's format is read from this file alone (no includes): without the word,
    // its objects are SHA-1's.
    match std::fs::read(config) {
        Ok(c) if !c.to_ascii_lowercase().windows(12).any(|w| w == b"objectformat") => {}
        _ => return Scan::AskGit,
    }
    // Opened without blocking: a FIFO in its place must not stop the look.
    let opened =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(index);
    let data = match opened {
        Ok(f) => match f.metadata() {
            Ok(m) if !m.is_file() => return Scan::Unchecked("the index is not a regular file"),
            Ok(m) if m.len() <= MAX_BYTES => {
                let mut data = Vec::with_capacity(m.len() as usize);
                match f.take(MAX_BYTES + 1).read_to_end(&mut data) {
                    Ok(_) => data,
                    Err(_) => return Scan::AskGit,
                }
            }
            _ => return Scan::AskGit,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Scan::Read(false),
        Err(_) => return Scan::AskGit,
    };
    let (mut found, mut read) = (false, 0u64);
    let walked = walk(&data, &mut |p| {
        read += p.len() as u64;
        found = found || matches(p);
        read <= MAX_NAME_BYTES
    });
    match walked {
        Some(true) => Scan::Read(found),
        Some(false) => Scan::Unchecked(TOO_MANY_NAMES),
        None => Scan::AskGit,
    }
}

const HASH: usize = 20;
/// ctime, mtime, dev, ino, mode, uid, gid, size (4 bytes each, times 8), the object id, flags.
const FIXED: usize = 40 + HASH + 2;
const NAME_MASK: usize = 0x0fff;
const EXTENDED: u16 = 0x4000;
/// The extended flags git knows (intent-to-add, skip-worktree); it refuses any other.
const KNOWN_EXTENDED: u16 = 0x2000 | 0x4000;

/// Visit every entry's path in order, while `visit` returns true: `Some(false)` when it
/// stopped, `None` when the layout is not one this reader takes.
fn walk(data: &[u8], visit: &mut dyn FnMut(&[u8]) -> bool) -> Option<bool> {
    if data.len() < 12 + HASH || &data[..4] != b"DIRC" {
        return None;
    }
    // The trailing hash, which git does not check, is not part of what it parses.
    let body = &data[..data.len() - HASH];
    // Git looks for `EOIE` in the last 32 bytes before the hash whatever precedes them, and
    // then reads extensions (and, through `IEOT`, entries) at the offsets it gives.
    if body.len() >= 12 + 32 && &body[body.len() - 32..body.len() - 28] == b"EOIE" {
        return None;
    }
    let version = be32(body, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(body, 8)?;
    let mut at = 12;
    let mut name: Vec<u8> = Vec::new();
    for _ in 0..count {
        let flags = u16::from_be_bytes(body.get(at + FIXED - 2..at + FIXED)?.try_into().ok()?);
        let mut name_at = at + FIXED;
        if flags & EXTENDED != 0 {
            let more = u16::from_be_bytes(body.get(name_at..name_at + 2)?.try_into().ok()?);
            if version < 3 || more & !KNOWN_EXTENDED != 0 {
                return None;
            }
            name_at += 2;
        }
        let len = usize::from(flags) & NAME_MASK;
        let next = if version == 4 {
            // The previous name, less `strip` bytes at its end, then this entry's suffix.
            let (strip, suffix_at) = varint(body, name_at)?;
            let kept = name.len().checked_sub(strip)?;
            let suffix_len = match len {
                NAME_MASK => nul_at(body, suffix_at)? - suffix_at,
                _ => len.checked_sub(kept)?,
            };
            let end = suffix_at.checked_add(suffix_len)?;
            let suffix = body.get(suffix_at..end)?;
            if *body.get(end)? != 0 || suffix.contains(&0) {
                return None;
            }
            name.truncate(kept);
            name.extend_from_slice(suffix);
            end + 1
        } else {
            let len = match len {
                NAME_MASK => nul_at(body, name_at)? - name_at,
                _ => len,
            };
            let end = name_at.checked_add(len)?;
            // Padded with NULs to a multiple of 8 from the entry's start, at least one.
            let next = at + ((name_at - at + len + 8) & !7);
            if body.get(name_at..end)?.contains(&0) || body.get(end..next)?.iter().any(|b| *b != 0) {
                return None;
            }
            name.clear();
            name.extend_from_slice(&body[name_at..end]);
            next
        };
        if next > body.len() {
            return None;
        }
        if !visit(&name) {
            return Some(false);
        }
        at = next;
    }
    // Extensions, while a signature and a size fit (git ignores fewer than 8 bytes left).
    while at + 8 <= body.len() {
        let sig = &body[at..at + 4];
        let size = be32(body, at + 4)? as usize;
        if !sig[0].is_ascii_uppercase() || sig == b"IEOT" || sig == b"EOIE" {
            return None;
        }
        at = at.checked_add(8 + size).filter(|end| *end <= body.len())?;
    }
    Some(true)
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn nul_at(data: &[u8], from: usize) -> Option<usize> {
    data.get(from..)?.iter().position(|b| *b == 0).map(|i| from + i)
}

/// Git's offset varint (`decode_varint`): seven bits a byte, high bit set on all but the last,
/// each continuation adding one. Returns the value and where the next field starts.
fn varint(data: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut c = *data.get(at)?;
    at += 1;
    let mut value = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        value = value.checked_add(1)?;
        if value >> (usize::BITS - 7) != 0 {
            return None;
        }
        c = *data.get(at)?;
        at += 1;
        value = (value << 7) + usize::from(c & 0x7f);
    }
    Some((value, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let st = crate::checkouts::git(dir).args(args).status().unwrap();
        assert!(st.success(), "git {args:?}");
    }

    fn ls_files(dir: &Path) -> Vec<Vec<u8>> {
        let o = crate::checkouts::git(dir).args(["ls-files", "-z", "--cached"]).output().unwrap();
        assert!(o.status.success());
        o.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()).map(<[u8]>::to_vec).collect()
    }

    /// A repository with nested paths, a long name, an intent-to-add entry (extended flags)
    /// and a conflict (three stages of one path).
    fn repo(dir: &Path) {
        git(dir, &["init", "-q", "-b", "main"]);
        git(dir, &["config", "user.email", "t@example.com"]);
        git(dir, &["config", "user.name", "t"]);
        for p in ["a", "dir/b", "dir/sub/c", "dir/sub/d", "x/y/z"] {
            let f = dir.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, p.len().to_string()).unwrap();
        }
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", "one"]);
        git(dir, &["checkout", "-qb", "side"]);
        std::fs::write(dir.join("a"), "side").unwrap();
        git(dir, &["commit", "-qam", "side"]);
        git(dir, &["checkout", "-q", "main"]);
        std::fs::write(dir.join("a"), "main").unwrap();
        git(dir, &["commit", "-qam", "main"]);
        let _ = crate::checkouts::git(dir).args(["merge", "-q", "side"]).output().unwrap();
        std::fs::write(dir.join("new"), "n").unwrap();
        git(dir, &["add", "-N", "new"]);
        // A path of more than 4095 bytes (its length field then says "look for the NUL"),
        // in the index only: no file system takes it.
        let long = vec!["l".repeat(200); 25].join("/");
        let blob = crate::checkouts::git(dir).args(["hash-object", "-w", "new"]).output().unwrap().stdout;
        let blob = String::from_utf8(blob).unwrap();
        git(dir, &["update-index", "--add", "--cacheinfo", &format!("100644,{},{long}", blob.trim())]);
    }

    /// Every path [`walk`] visits, in order.
    fn paths(data: &[u8]) -> Option<Vec<Vec<u8>>> {
        let mut v = Vec::new();
        walk(data, &mut |p| {
            v.push(p.to_vec());
            true
        })?;
        Some(v)
    }

    fn scan_of(dir: &Path) -> Scan {
        let into_git = |p: &[u8]| p.split(|b| *b == b'/').any(|c| c.eq_ignore_ascii_case(b".git"));
        scan(&dir.join(".git/index"), &dir.join(".git/config"), &into_git)
    }

    /// Each version git writes is read as `git ls-files` lists it.
    #[test]
    fn every_version_git_writes_reads_as_ls_files_lists_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        repo(dir);
        for v in ["2", "3", "4"] {
            git(dir, &["update-index", "--index-version", v]);
            let data = std::fs::read(dir.join(".git/index")).unwrap();
            // Version 2 cannot hold the intent-to-add flag: git writes 3.
            assert_eq!(be32(&data, 4), Some(v.parse::<u32>().unwrap().max(3)));
            let paths = paths(&data).unwrap_or_else(|| panic!("version {v} not read"));
            assert_eq!(paths, ls_files(dir), "version {v}");
            assert!(
                paths.iter().filter(|p| p.as_slice() == b"a").count() == 3,
                "the conflict's three stages"
            );
            assert!(paths.iter().any(|p| p.len() > 4095), "the long path");
            assert_eq!(scan_of(dir), Scan::Read(false));
        }
        std::fs::remove_file(dir.join(".git/index")).unwrap();
        assert_eq!(scan_of(dir), Scan::Read(false), "no index");
    }

    /// An entry of version 2: no times, mode 100644, a zero id, `name` with its length field
    /// `len`, then `pad` (git writes NULs to a multiple of 8).
    fn entry(name: &[u8], len: u16, pad: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 24];
        e.extend_from_slice(&0o100644u32.to_be_bytes());
        e.extend_from_slice(&[0; 12]);
        e.extend_from_slice(&[0; HASH]);
        e.extend_from_slice(&len.to_be_bytes());
        e.extend_from_slice(name);
        e.extend_from_slice(pad);
        e
    }

    fn index_of(version: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut d = b"DIRC".to_vec();
        d.extend_from_slice(&version.to_be_bytes());
        d.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        entries.iter().for_each(|e| d.extend_from_slice(e));
        d.extend_from_slice(&[0; HASH]);
        d
    }

    /// What this reader would not take as git does goes to git: a split or sparse index, an
    /// offset table (or its marker at the end, wherever it sits), an unknown version, a byte
    /// after a name that git would take into it, a repository of another object format, an
    /// index that is not a regular file.
    #[test]
    fn what_is_not_read_exactly_goes_to_git() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        repo(dir);
        let index = dir.join(".git/index");
        let good = std::fs::read(&index).unwrap();
        assert!(paths(&good).is_some());
        let mut v5 = good.clone();
        v5[7] = 5;
        assert_eq!(paths(&v5), None, "version 5");
        let mut eoie = good[..good.len() - HASH].to_vec();
        let at = eoie.len();
        eoie.extend_from_slice(b"ZZZZ");
        eoie.extend_from_slice(&32u32.to_be_bytes());
        eoie.extend_from_slice(b"EOIE");
        eoie.extend_from_slice(&[0; 28]);
        assert_eq!(eoie.len() - at, 40);
        eoie.extend_from_slice(&[0; HASH]);
        assert_eq!(paths(&eoie), None, "EOIE at the end, inside another extension");
        // `ls-files` reads a name up to its NUL: a `t` where the padding starts makes
        // `sub/.gi` (7 bytes by its length field) its `sub/.git`.
        let ok = index_of(2, &[entry(b"sub/.gi", 7, b"\0\0\0")]);
        assert_eq!(paths(&ok), Some(vec![b"sub/.gi".to_vec()]));
        assert_eq!(paths(&index_of(2, &[entry(b"sub/.gi", 7, b"t\0\0")])), None, "a byte after the name");
        git(
            dir,
            &[
                "-c",
                "index.recordOffsetTable=true",
                "-c",
                "index.recordEndOfIndexEntries=true",
                "update-index",
                "--force-write-index",
            ],
        );
        assert_eq!(scan_of(dir), Scan::AskGit, "IEOT/EOIE");
        git(dir, &["update-index", "--split-index"]);
        assert_eq!(scan_of(dir), Scan::AskGit, "split index");
        git(dir, &["update-index", "--no-split-index"]);
        assert_eq!(scan_of(dir), Scan::Read(false));
        std::fs::rename(&index, dir.join("kept")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
        assert!(matches!(scan_of(dir), Scan::Unchecked(_)), "not a regular file");
        std::fs::remove_file(&index).unwrap();
        nix::unistd::mkfifo(&index, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(scan_of(dir), Scan::Unchecked(_)), "a FIFO, without waiting for a writer");
        std::fs::remove_file(&index).unwrap();
        std::fs::rename(dir.join("kept"), &index).unwrap();
        assert_eq!(scan_of(dir), Scan::Read(false));
        // SHA-256: ids of 32 bytes move every field; git reads such an index otherwise.
        let other = t.path().join("sha256");
        std::fs::create_dir(&other).unwrap();
        git(&other, &["init", "-q", "--object-format=sha256"]);
        std::fs::write(other.join(".git/index"), &good).unwrap();
        assert_eq!(scan_of(&other), Scan::AskGit, "another object format");
    }

    /// A version-4 index can repeat a long name in every entry at a few bytes each: it is
    /// checked name by name, each as it is read.
    #[test]
    fn a_name_repeated_in_every_entry_is_checked_as_it_is_read() {
        let long = vec![b'x'; 60_000];
        let mut first = entry(b"", 0x0fff, b"");
        first.truncate(first.len());
        let mut body = first;
        body.push(0); // strip nothing
        body.extend_from_slice(&long);
        body.push(0);
        let mut entries = vec![body];
        for _ in 0..20_000 {
            let mut e = entry(b"", 0x0fff, b"");
            e.extend_from_slice(&[0, 0]); // strip nothing, no suffix
            entries.push(e);
        }
        let mut last = entry(b"", 0x0fff, b"");
        last.push(0x80 | 0x7f);
        last.push(0x7f); // strip (127 + 1) * 128 + 127 = 16,511 bytes
        last.extend_from_slice(b"/.git/x\0");
        entries.push(last);
        let data = index_of(4, &entries);
        let (mut n, mut hit) = (0, false);
        let whole = walk(&data, &mut |p| {
            n += 1;
            hit |= p.ends_with(b"/.git/x");
            true
        });
        assert_eq!(whole, Some(true));
        assert_eq!((n, hit), (20_002, true));
        // 1.2 GB of names: more than a check reads.
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("index"), &data).unwrap();
        std::fs::write(t.path().join("config"), "[core]\n").unwrap();
        let scanned = scan(&t.path().join("index"), &t.path().join("config"), &|_| false);
        assert_eq!(scanned, Scan::Unchecked(TOO_MANY_NAMES));
    }

    #[test]
    fn varints_are_gits() {
        assert_eq!(varint(&[0x05], 0), Some((5, 1)));
        // 0x80 0x00 is 128 in git's encoding (each continuation adds one).
        assert_eq!(varint(&[0x80, 0x00], 0), Some((128, 2)));
        assert_eq!(varint(&[0x81, 0x01], 0), Some((257, 2)));
        assert_eq!(varint(&[0x80], 0), None);
    }
}
