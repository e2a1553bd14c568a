//! The paths a git index names, read in-process for the audit's look at each checkout
//! ([`crate::audit`]). *Why not always `git ls-files`*: a look runs before and after every
//! sandbox, and a git process is about 1.5 ms of CPU on a start that is otherwise short of it.
//!
//! The reader takes only an index it reads exactly as git does; anything else is
//! [`Index::AskGit`] and the caller runs `git ls-files`, as it always did:
//! - the trailing SHA-1 of the whole file must match (git checks it too, unless
//!   `index.skipHash`; a SHA-256 repository's index never matches, so it goes to git);
//! - versions 2, 3 and 4 only, each entry inside the file, no NUL inside a path;
//! - no extension git must understand (lower-case signature: `link` for a split index, `sdir`
//!   for a sparse one, whose entries are elsewhere) and none that changes where git reads
//!   entries or extensions from (`IEOT`, `EOIE`: a crafted offset would have git read other
//!   bytes than this reader).

use std::path::Path;

use sha1::{Digest, Sha1};

/// What the index of a checkout names.
#[derive(Debug, PartialEq, Eq)]
pub enum Index {
    /// Every entry's path, in the index's order (all stages).
    Paths(Vec<Vec<u8>>),
    /// Not one this reader takes as git would: ask git.
    AskGit,
}

/// The index at `path`; no file is an empty index (git lists nothing either).
pub fn read(path: &Path) -> Index {
    match std::fs::read(path) {
        Ok(data) => parse(&data).map_or(Index::AskGit, Index::Paths),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::Paths(Vec::new()),
        Err(_) => Index::AskGit,
    }
}

const HASH: usize = 20;
/// ctime, mtime, dev, ino, mode, uid, gid, size (4 bytes each, times 8), the object id, flags.
const FIXED: usize = 40 + HASH + 2;
const NAME_MASK: usize = 0x0fff;
const EXTENDED: u16 = 0x4000;
/// The extended flags git knows (intent-to-add, skip-worktree); it refuses any other.
const KNOWN_EXTENDED: u16 = 0x2000 | 0x4000;

fn parse(data: &[u8]) -> Option<Vec<Vec<u8>>> {
    if data.len() < 12 + HASH || &data[..4] != b"DIRC" {
        return None;
    }
    let (body, sum) = data.split_at(data.len() - HASH);
    if Sha1::digest(body).as_slice() != sum {
        return None;
    }
    let version = be32(body, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    // Git looks for `EOIE` in the last 32 bytes before the checksum whatever precedes them, and
    // then reads extensions (and, through `IEOT`, entries) at the offsets it gives.
    if body.len() >= 12 + 32 && &body[body.len() - 32..body.len() - 28] == b"EOIE" {
        return None;
    }
    let count = be32(body, 8)? as usize;
    let mut at = 12;
    let mut paths: Vec<Vec<u8>> = Vec::with_capacity(count.min(body.len() / FIXED));
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
        let (path, next) = if version == 4 {
            let previous = paths.last().map_or(&[][..], |p| p.as_slice());
            let (strip, suffix_at) = varint(body, name_at)?;
            let kept = previous.len().checked_sub(strip)?;
            let suffix_len = match len {
                NAME_MASK => nul_at(body, suffix_at)? - suffix_at,
                _ => len.checked_sub(kept)?,
            };
            let end = suffix_at.checked_add(suffix_len)?;
            let suffix = body.get(suffix_at..end)?;
            if *body.get(end)? != 0 || suffix.contains(&0) {
                return None;
            }
            ([&previous[..kept], suffix].concat(), end + 1)
        } else {
            let len = match len {
                NAME_MASK => nul_at(body, name_at)? - name_at,
                _ => len,
            };
            let name = body.get(name_at..name_at.checked_add(len)?)?;
            if name.contains(&0) {
                return None;
            }
            // Padded with NULs to a multiple of 8 from the entry's start, at least one.
            (name.to_vec(), at + ((name_at - at + len + 8) & !7))
        };
        if next > body.len() {
            return None;
        }
        paths.push(path);
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
    Some(paths)
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
            let Index::Paths(paths) = read(&dir.join(".git/index")) else { panic!("version {v} not read") };
            assert_eq!(paths, ls_files(dir), "version {v}");
            assert!(
                paths.iter().filter(|p| p.as_slice() == b"a").count() == 3,
                "the conflict's three stages"
            );
            assert!(paths.iter().any(|p| p.len() > 4095), "the long path");
        }
        assert_eq!(read(&dir.join("missing")), Index::Paths(Vec::new()));
    }

    /// What this reader would not take as git does goes to git: a split or sparse index, an
    /// offset table (or its marker at the end, wherever it sits), a changed byte (the checksum),
    /// an unknown version.
    #[test]
    fn what_is_not_read_exactly_goes_to_git() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        repo(dir);
        let index = dir.join(".git/index");
        let good = std::fs::read(&index).unwrap();
        assert!(parse(&good).is_some());
        let mut flipped = good.clone();
        flipped[70] ^= 1;
        assert_eq!(parse(&flipped), None, "a changed byte");
        let mut v5 = good[..good.len() - HASH].to_vec();
        v5[7] = 5;
        let sum = Sha1::digest(&v5);
        v5.extend_from_slice(&sum);
        assert_eq!(parse(&v5), None, "version 5");
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
        assert_eq!(read(&index), Index::AskGit, "IEOT/EOIE");
        git(dir, &["update-index", "--split-index"]);
        assert_eq!(read(&index), Index::AskGit, "split index");
        git(dir, &["update-index", "--no-split-index"]);
        assert!(matches!(read(&index), Index::Paths(_)));
        let mut eoie = good[..good.len() - HASH].to_vec();
        let at = eoie.len();
        eoie.extend_from_slice(b"ZZZZ");
        eoie.extend_from_slice(&32u32.to_be_bytes());
        eoie.extend_from_slice(b"EOIE");
        eoie.extend_from_slice(&[0; 28]);
        assert_eq!(eoie.len() - at, 40);
        let sum = Sha1::digest(&eoie);
        eoie.extend_from_slice(&sum);
        assert_eq!(parse(&eoie), None, "EOIE at the end, inside another extension");
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
