//! One plan build's view of the host filesystem: each question about a path answered once.
//!
//! *Why*: a build resolves the same directories hundreds of times (every hidden name under the
//! home, every allowed entry), and each `canonicalize` costs a `readlink` per component; a
//! start builds the plan more than once. Nothing is remembered beyond the builds of one moment
//! (a start's two, before it makes any placeholder): the plan is enforced by mounts that open
//! every path again without following links.
//!
//! Paths are remembered by their exact bytes, not as `Path`s: `Path` equality ignores a
//! trailing `/`, and the kernel does not (`lstat("file/")` fails, `lstat("link-to-dir/")`
//! follows the link).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::plan::{HostFs, Kind};

/// `fs`, with `kind` and `canonicalize` remembered per path.
pub struct Remembered<'a> {
    fs: &'a dyn HostFs,
    kinds: RefCell<HashMap<OsString, Kind>>,
    /// A failure is kept as its `errno`.
    canonical: RefCell<HashMap<OsString, Result<PathBuf, i32>>>,
}

impl<'a> Remembered<'a> {
    pub fn new(fs: &'a dyn HostFs) -> Remembered<'a> {
        Remembered { fs, kinds: RefCell::default(), canonical: RefCell::default() }
    }

    /// A plain absolute path (no `.`, `..`, repeated or trailing `/`: its bytes are its
    /// components joined) resolves as its parent's resolution joined with its last name, when
    /// that name is not a symbolic link: the parent's is remembered, so a directory's
    /// components are read once for all its entries. Anything else, and a link, is resolved by
    /// `fs`. A missing last name is `ENOENT` (the kernel may have said `ENOTDIR` or `EACCES`:
    /// every caller treats them alike).
    fn resolve(&self, p: &Path) -> io::Result<PathBuf> {
        let plain = p.is_absolute()
            && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
            && p.components().collect::<PathBuf>().as_os_str() == p.as_os_str();
        match (plain, p.parent(), p.file_name()) {
            (true, Some(parent), Some(name)) => {
                // The root is its own resolution.
                let dir =
                    if parent == Path::new("/") { parent.to_path_buf() } else { self.canonicalize(parent)? };
                let at = dir.join(name);
                match self.kind(&at) {
                    Kind::Symlink => self.fs.canonicalize(&at),
                    Kind::Missing => Err(io::Error::from_raw_os_error(libc::ENOENT)),
                    _ => Ok(at),
                }
            }
            _ => self.fs.canonicalize(p),
        }
    }
}

impl HostFs for Remembered<'_> {
    fn kind(&self, p: &Path) -> Kind {
        if let Some(k) = self.kinds.borrow().get(p.as_os_str()) {
            return *k;
        }
        let k = self.fs.kind(p);
        self.kinds.borrow_mut().insert(p.as_os_str().to_owned(), k);
        k
    }

    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        if let Some(r) = self.canonical.borrow().get(p.as_os_str()) {
            return r.clone().map_err(io::Error::from_raw_os_error);
        }
        let r = self.resolve(p);
        let kept = match &r {
            Ok(c) => Ok(c.clone()),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        self.canonical.borrow_mut().insert(p.as_os_str().to_owned(), kept);
        r
    }

    fn read_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        self.fs.read_dir(p)
    }

    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        self.fs.read_link(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RealFs;
    use std::os::unix::fs::symlink;

    /// Remembered or not, every path resolves to what the kernel says, or fails as it does, and
    /// is of the kind `lstat` says: through absolute and relative links, chains of them,
    /// dangling ones, a file taken for a directory, names that are missing behind a link, and
    /// a trailing `/` (asked in both orders: `x/` is not `x`).
    #[test]
    fn resolves_as_the_kernel_does() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("real/sub/deep")).unwrap();
        std::fs::write(r.join("real/file"), "").unwrap();
        symlink(r.join("real"), r.join("abs")).unwrap();
        symlink("real/sub", r.join("rel")).unwrap();
        symlink("abs", r.join("chain")).unwrap();
        symlink("nowhere", r.join("dangling")).unwrap();
        symlink("../file", r.join("real/sub/up")).unwrap();
        std::fs::write(r.join("real/other"), "").unwrap();
        symlink("real/sub", r.join("later")).unwrap();
        let fs = Remembered::new(&RealFs);
        let names = [
            "real",
            "real/sub/deep",
            "real/file",
            "abs",
            "abs/sub",
            "abs/sub/deep",
            "rel",
            "rel/deep",
            "chain/sub",
            "dangling",
            "dangling/x",
            "real/file/x",
            "abs/missing",
            "abs/missing/x",
            "real/sub/up",
            "rel/up",
            "chain/sub/up",
            "real/sub/../file",
            "rel/../file",
            "./real",
            // The same names with a trailing `/`, after and before the plain ones.
            "real/file/",
            "abs/",
            "rel/deep/",
            "dangling/",
            "abs/other/",
            "abs/other",
            "real/other/",
            "real/other",
            "later/",
            "later",
            "real//sub",
            "real/./sub",
        ];
        // Twice: what was remembered answers the same.
        for _ in 0..2 {
            for n in names {
                let p = r.join(n);
                let (want, got) = (std::fs::canonicalize(&p), fs.canonicalize(&p));
                match (&want, &got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, g, "{n}"),
                    (Err(_), Err(_)) => {}
                    _ => panic!("{n}: the kernel says {want:?}, remembered {got:?}"),
                }
                assert_eq!(fs.kind(&p), RealFs.kind(&p), "{n}");
            }
        }
    }
}
