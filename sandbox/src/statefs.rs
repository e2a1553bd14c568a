//! Writing into the state directory, which the sandbox can write too.
//!
//! The agent owns everything under `<state>/` that is not hidden from it (its `XDG_*`
//! directories, `package/`, `docker/`, `kube/`, `run/`), so between two runs it can replace any
//! of those entries with a symlink. The launcher runs outside the sandbox with the user's full
//! rights: a plain `std::fs::write("<state>/config/opencode/opencode.jsonc")` would follow a
//! planted `config -> ~` and overwrite a file of the agent's choosing, an escape that outlives
//! the sandbox. So every launcher write below the state directory goes through [`StateDir`]: paths
//! are walked from a descriptor of the state directory one component at a time with
//! `O_NOFOLLOW`; an intermediate entry that is not a real directory (a symlink, a file) is
//! removed as an entry and replaced by a directory; files are written to a fresh temporary name
//! and renamed over the old entry, which replaces a symlink instead of following it.
//!
//! The state directory itself is trusted: its parent (`~/.local/share/opencode-sandbox/`) is
//! read-only inside the sandbox.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::error::{Error, Result};

/// An open state directory.
pub struct StateDir {
    root: OwnedFd,
    path: PathBuf,
}

fn io(action: &'static str, path: &Path, e: Errno) -> Error {
    Error::io(action, path, std::io::Error::from(e))
}

/// The components of `rel`, which must be a plain relative path (no `..`, no root).
fn components(rel: &Path) -> Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Error::failed(
                format!("internal: {} is not a plain relative path in the state directory", rel.display()),
                "report this",
            )),
        })
        .collect()
}

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY.union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

impl StateDir {
    /// Create (0700) and open the state directory.
    pub fn open(path: &Path) -> Result<StateDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| Error::io("create the state directory", path, e))?;
        // The state directory itself may be a symlink the user made: it is trusted (above).
        let root =
            nix::fcntl::open(path, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY, Mode::empty())
                .map_err(|e| io("open the state directory", path, e))?;
        Ok(StateDir { root, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `rel`, created (0700) where missing. An entry on the way that is not a
    /// directory (a symlink planted by the agent, a file) is removed and replaced.
    pub fn dir(&self, rel: &Path) -> Result<OwnedFd> {
        self.walk(rel, true)
    }

    /// Walk to the directory `rel`; `create`: make missing directories and replace non-directories.
    fn walk(&self, rel: &Path, create: bool) -> Result<OwnedFd> {
        let mut fd = self.root.try_clone().map_err(|e| Error::io("duplicate", &self.path, e))?;
        let mut at = self.path.clone();
        for name in components(rel)? {
            at.push(name);
            fd = match openat(&fd, name, DIR_FLAGS | OFlag::O_RDONLY, Mode::empty()) {
                Ok(next) => next,
                Err(e) if !create => return Err(io("open", &at, e)),
                Err(Errno::ENOENT) => {
                    mkdirat(&fd, name, Mode::from_bits_truncate(0o700))
                        .or_else(|e| if e == Errno::EEXIST { Ok(()) } else { Err(e) })
                        .map_err(|e| io("create", &at, e))?;
                    openat(&fd, name, DIR_FLAGS | OFlag::O_RDONLY, Mode::empty())
                        .map_err(|e| io("open", &at, e))?
                }
                // ELOOP: a symlink; ENOTDIR: a file. Remove the entry itself, never its target.
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    unlinkat(&fd, name, UnlinkatFlags::NoRemoveDir).map_err(|e| io("remove", &at, e))?;
                    eprintln!(
                        "ocsb: warning: {} was not a directory (replaced inside the sandbox?); made it one again",
                        at.display()
                    );
                    mkdirat(&fd, name, Mode::from_bits_truncate(0o700)).map_err(|e| io("create", &at, e))?;
                    openat(&fd, name, DIR_FLAGS | OFlag::O_RDONLY, Mode::empty())
                        .map_err(|e| io("open", &at, e))?
                }
                Err(e) => return Err(io("open", &at, e)),
            };
        }
        Ok(fd)
    }

    /// The directory holding `rel` and `rel`'s last component.
    fn parent<'a>(&self, rel: &'a Path) -> Result<(OwnedFd, &'a OsStr)> {
        self.parent_of(rel, true)
    }

    fn parent_of<'a>(&self, rel: &'a Path, create: bool) -> Result<(OwnedFd, &'a OsStr)> {
        let parts = components(rel)?;
        let Some((name, dirs)) = parts.split_last() else {
            return Err(Error::failed(
                format!("internal: empty state path {}", rel.display()),
                "report this",
            ));
        };
        let dir: PathBuf = dirs.iter().collect();
        Ok((self.walk(&dir, create)?, name))
    }

    /// Replace `rel` with a file holding `data` (mode `mode`), atomically: readers see the old
    /// or the new content, and a symlink at `rel` is replaced, not followed.
    pub fn write(&self, rel: &Path, data: &[u8], mode: u32) -> Result<()> {
        let (dir, name) = self.parent(rel)?;
        let full = self.path.join(rel);
        let mut tmp_name = b".ocsb-tmp-".to_vec();
        tmp_name.extend_from_slice(name.as_bytes());
        tmp_name.extend_from_slice(format!(".{}", std::process::id()).as_bytes());
        let tmp = OsStr::from_bytes(&tmp_name);
        let _ = unlinkat(&dir, tmp, UnlinkatFlags::NoRemoveDir);
        let fd = openat(
            &dir,
            tmp,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| io("create", &full, e))?;
        fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(|e| io("chmod", &full, e))?;
        let mut f = File::from(fd);
        let written = f.write_all(data).and_then(|()| f.sync_data());
        drop(f);
        if let Err(e) = written {
            let _ = unlinkat(&dir, tmp, UnlinkatFlags::NoRemoveDir);
            return Err(Error::io("write", full, e));
        }
        renameat(&dir, tmp, &dir, name).map_err(|e| {
            let _ = unlinkat(&dir, tmp, UnlinkatFlags::NoRemoveDir);
            io("replace", &full, e)
        })
    }

    /// The content of the regular file `rel`, or `None` when it is missing, a symlink or
    /// unreadable (the agent may have put anything there; callers treat it as untrusted input).
    /// Creates nothing.
    pub fn read(&self, rel: &Path) -> Option<Vec<u8>> {
        self.read_with_mode(rel).map(|(buf, _)| buf)
    }

    /// [`StateDir::read`], with the file's permission bits.
    fn read_with_mode(&self, rel: &Path) -> Option<(Vec<u8>, u32)> {
        let (dir, name) = self.parent_of(rel, false).ok()?;
        let fd = openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let f = File::from(fd);
        let meta = f.metadata().ok()?;
        if !meta.is_file() {
            return None;
        }
        let mut buf = Vec::new();
        f.take(16 << 20).read_to_end(&mut buf).ok()?;
        Some((buf, std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777))
    }

    /// [`StateDir::write`], unless `rel` is already a regular file of mode `mode` holding
    /// `data`. *Why*: `write` syncs to disk, a cost on every start for files that rarely change.
    pub fn write_if_changed(&self, rel: &Path, data: &[u8], mode: u32) -> Result<()> {
        match self.read_with_mode(rel) {
            Some((held, m)) if held == data && m == mode => Ok(()),
            _ => self.write(rel, data, mode),
        }
    }

    /// Make sure the launcher's private file `rel` exists: created exclusively (0600) with
    /// `init()` when missing, otherwise checked by `check_private`. Returns whether it
    /// was created now. Called before any sandbox starts, so the sandbox (which cannot see these
    /// files once they exist) never gets to create one first.
    /// `init` may fail with the caller's error type.
    pub fn private_file<E: From<Error>>(
        &self,
        rel: &Path,
        init: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<bool, E> {
        let (dir, name) = self.parent(rel)?;
        let full = self.path.join(rel);
        match openat(
            &dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => {
                let mut f = File::from(fd);
                f.write_all(&init()?)
                    .and_then(|()| f.sync_data())
                    .map_err(|e| Error::io("write", &full, e))?;
                Ok(true)
            }
            Err(Errno::EEXIST) => Ok(self.check_private(&dir, name, &full).map(|_| false)?),
            Err(e) => Err(io("create", &full, e).into()),
        }
    }

    /// An existing private file must be a regular file of ours, readable by nobody else: a
    /// symlink (the agent's way to redirect a launcher write), another owner or a loose mode is
    /// an error that names it, never followed or silently replaced.
    fn check_private(&self, dir: &OwnedFd, name: &OsStr, full: &Path) -> Result<File> {
        let fd = openat(
            dir,
            name,
            OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => Error::failed(
                format!(
                    "{} is a symbolic link; ocsb's own files in the state directory never are",
                    full.display()
                ),
                format!(
                    "inspect it (`ls -l {0}`), remove it (`rm {0}`); ocsb makes a new one",
                    full.display()
                ),
            ),
            e => io("open", full, e),
        })?;
        let f = File::from(fd);
        let m = f.metadata().map_err(|e| Error::io("stat", full, e))?;
        use std::os::unix::fs::MetadataExt;
        let why = if !m.is_file() {
            Some("is not a regular file".to_string())
        } else if m.uid() != nix::unistd::geteuid().as_raw() {
            Some(format!("belongs to uid {}, not to you", m.uid()))
        } else if m.mode() & 0o077 != 0 {
            Some(format!("is readable by other users (mode {:o})", m.mode() & 0o777))
        } else {
            None
        };
        match why {
            None => Ok(f),
            Some(why) => Err(Error::failed(
                format!("{} {why}", full.display()),
                format!(
                    "inspect it (`ls -l {0}`), remove it (`rm {0}`); ocsb makes a new one",
                    full.display()
                ),
            )),
        }
    }

    /// The content of the launcher's private file `rel` (see [`Self::private_file`]).
    pub fn read_private(&self, rel: &Path) -> Result<Vec<u8>> {
        let (dir, name) = self.parent(rel)?;
        let mut f = self.check_private(&dir, name, &self.path.join(rel))?;
        let mut buf = Vec::new();
        (&mut f)
            .take(1 << 20)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("read", self.path.join(rel), e))?;
        Ok(buf)
    }

    /// The launcher's private file `rel` opened read-write (created 0600 when missing), checked
    /// like [`Self::private_file`]: the instance lock.
    pub fn open_private(&self, rel: &Path) -> Result<File> {
        self.private_file(rel, || Ok(Vec::new()))?;
        let (dir, name) = self.parent(rel)?;
        self.check_private(&dir, name, &self.path.join(rel))
    }

    /// Replaces the contents of the private file `rel` in place (opened as
    /// [`Self::open_private`]): in place, not by rename, so that a sandbox already running,
    /// which masks the file's directory entry, keeps masking it.
    pub fn rewrite_private(&self, rel: &Path, data: &[u8]) -> Result<()> {
        let mut f = self.open_private(rel)?;
        f.set_len(0).and_then(|()| f.write_all(data)).map_err(|e| Error::io("write", self.path.join(rel), e))
    }

    /// `rel` opened for appending (created 0600): a log the launcher keeps open for the run.
    ///
    /// *Why the checks*: the agent can put anything at `rel` between two runs. `O_NOFOLLOW`
    /// refuses a symlink; `O_NONBLOCK` makes a planted FIFO fail the open (no reader) instead of
    /// blocking the launcher. A hard link to one of the user's files (same owner, same
    /// filesystem) would be opened like any file, and the launcher would append to that file:
    /// an entry that is not a regular file with one link, owned by this user, is removed and the
    /// log created anew with `O_EXCL`.
    pub fn append(&self, rel: &Path) -> Result<File> {
        let (dir, name) = self.parent(rel)?;
        let full = self.path.join(rel);
        let flags =
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let mode = Mode::from_bits_truncate(0o600);
        let open = |extra: OFlag| openat(&dir, name, flags | extra, mode).map(File::from);
        if let Ok(f) = open(OFlag::O_CREAT) {
            let ours = f.metadata().is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.is_file() && m.nlink() == 1 && m.uid() == nix::unistd::geteuid().as_raw()
            });
            if ours {
                return Ok(f);
            }
        }
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io("remove", &full, e)),
        }
        open(OFlag::O_CREAT | OFlag::O_EXCL).map_err(|e| io("create", &full, e))
    }

    /// Remove the entry `rel` (not a directory) if it exists.
    pub fn remove(&self, rel: &Path) -> Result<()> {
        let (dir, name) = self.parent(rel)?;
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io("remove", &self.path.join(rel), e)),
        }
    }

    /// Copy the directory tree `src` (outside the state directory, trusted) to `rel`. Symlinks
    /// in `src` are skipped: a package tree needs none, and a link could point anywhere.
    pub fn copy_tree(&self, src: &Path, rel: &Path) -> Result<()> {
        self.dir(rel)?;
        for entry in std::fs::read_dir(src).map_err(|e| Error::io("read", src, e))? {
            let entry = entry.map_err(|e| Error::io("read", src, e))?;
            let ty = entry.file_type().map_err(|e| Error::io("stat", entry.path(), e))?;
            let to = rel.join(entry.file_name());
            if ty.is_dir() {
                self.copy_tree(&entry.path(), &to)?;
            } else if ty.is_file() {
                use std::os::unix::fs::PermissionsExt;
                let p = entry.path();
                let data = std::fs::read(&p).map_err(|e| Error::io("read", &p, e))?;
                let mode = entry.metadata().map(|m| m.permissions().mode() & 0o755).unwrap_or(0o644);
                self.write(&to, &data, mode)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn writes_replace_planted_symlinks_instead_of_following_them() {
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("opencode.jsonc");
        std::fs::write(&victim, "precious").unwrap();
        // The agent replaced a directory with a link out of the state directory...
        symlink(outside.path(), state.path().join("config")).unwrap();
        // ...and a file with a link to a file of the user's.
        std::fs::create_dir(state.path().join("docker")).unwrap();
        symlink(&victim, state.path().join("docker/config.json")).unwrap();

        let s = StateDir::open(state.path()).unwrap();
        s.write(Path::new("config/opencode.jsonc"), b"new", 0o644).unwrap();
        assert!(s.read(Path::new("docker/config.json")).is_none(), "a symlink is not read");
        s.write(Path::new("docker/config.json"), b"{}", 0o600).unwrap();

        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(state.path().join("config")).unwrap().is_dir());
        assert_eq!(std::fs::read_to_string(state.path().join("config/opencode.jsonc")).unwrap(), "new");
        let m = std::fs::symlink_metadata(state.path().join("docker/config.json")).unwrap();
        assert!(m.is_file() && m.permissions().mode() & 0o777 == 0o600);
        assert_eq!(s.read(Path::new("docker/config.json")).unwrap(), b"{}");
    }

    /// A file that already holds the content, as a regular file of the mode, is left as it is
    /// (no rewrite, no sync); another content, another mode or a link at the name is replaced.
    #[test]
    fn write_if_changed_leaves_only_the_same_file_alone() {
        use std::os::unix::fs::MetadataExt;
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let s = StateDir::open(state.path()).unwrap();
        let rel = Path::new("docker/config.json");
        let path = state.path().join(rel);
        let ino = || std::fs::symlink_metadata(&path).unwrap().ino();
        s.write_if_changed(rel, b"{}", 0o600).unwrap();
        let first = ino();
        s.write_if_changed(rel, b"{}", 0o600).unwrap();
        assert_eq!(ino(), first, "the same file is not rewritten");
        s.write_if_changed(rel, b"{\"a\":1}", 0o600).unwrap();
        assert_ne!(ino(), first, "another content is written");
        let second = ino();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        s.write_if_changed(rel, b"{\"a\":1}", 0o600).unwrap();
        assert_ne!(ino(), second, "another mode is written");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"{\"a\":1}").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&path).unwrap();
        symlink(&victim, &path).unwrap();
        s.write_if_changed(rel, b"{\"a\":1}", 0o600).unwrap();
        assert!(
            std::fs::symlink_metadata(&path).unwrap().is_file(),
            "a link with the same content is replaced"
        );
    }

    #[test]
    fn append_and_remove_do_not_follow_links() {
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("bashrc");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::create_dir_all(state.path().join("data/log")).unwrap();
        symlink(&victim, state.path().join("data/log/panel.log")).unwrap();
        symlink(outside.path(), state.path().join("run")).unwrap();
        let s = StateDir::open(state.path()).unwrap();
        // The link is replaced by a new log; what it pointed to is not written.
        let mut f = s.append(Path::new("data/log/panel.log")).unwrap();
        writeln!(f, "first").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(state.path().join("data/log/panel.log")).unwrap().is_file());
        s.remove(Path::new("run/bashrc")).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(state.path().join("run")).unwrap().is_dir());
        s.remove(Path::new("data/log/panel.log")).unwrap();
        let mut f = s.append(Path::new("data/log/panel.log")).unwrap();
        writeln!(f, "line").unwrap();
        assert_eq!(std::fs::read_to_string(state.path().join("data/log/panel.log")).unwrap(), "line\n");
        assert!(s.write(Path::new("../escape"), b"x", 0o600).is_err());
    }

    /// A hard link to one of the user's files, or a FIFO, at a log's name: the launcher neither
    /// appends to the user's file nor blocks.
    #[test]
    fn append_replaces_a_hard_link_or_a_fifo() {
        let state = tempfile::tempdir().unwrap();
        let victim = state.path().join("bashrc");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::create_dir_all(state.path().join("run")).unwrap();
        std::fs::hard_link(&victim, state.path().join("run/log")).unwrap();
        nix::unistd::mkfifo(&state.path().join("run/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let s = StateDir::open(state.path()).unwrap();
        for name in ["run/log", "run/fifo"] {
            let mut f = s.append(Path::new(name)).unwrap();
            writeln!(f, "record").unwrap();
            assert_eq!(std::fs::read_to_string(state.path().join(name)).unwrap(), "record\n", "{name}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn copy_tree_skips_symlinks() {
        let state = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("pkg/dist")).unwrap();
        std::fs::write(src.path().join("pkg/package.json"), "{}").unwrap();
        std::fs::write(src.path().join("pkg/dist/index.js"), "x").unwrap();
        symlink("/etc/passwd", src.path().join("pkg/link")).unwrap();
        let s = StateDir::open(state.path()).unwrap();
        s.copy_tree(&src.path().join("pkg"), Path::new("cache/p")).unwrap();
        assert_eq!(std::fs::read_to_string(state.path().join("cache/p/dist/index.js")).unwrap(), "x");
        assert!(!state.path().join("cache/p/link").exists());
    }
}
