//! Enforcement of a [`Plan`]: every host source is cloned (`open_tree(OPEN_TREE_CLONE)`) before
//! anything is mounted, so no later mount can change what a source path means; then a fresh
//! tmpfs root is populated with fd-relative, symlink-refusing lookups (`openat2` with
//! `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`), pivoted into, and our own tmpfs mounts are sealed
//! read-only. Privileged calls go through [`MountSys`] so the order is unit-tested with a
//! recording double.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::Mode;

use super::error::{Error, Result};
use super::plan::{Access, Op, Plan};
use super::sys;

/// The privileged operations the executor needs.
pub trait MountSys {
    type Handle;
    /// `mount(NULL, "/", MS_REC|MS_SLAVE)`: nothing we mount propagates back to the host.
    fn make_root_slave(&mut self) -> io::Result<()>;
    /// A detached recursive clone of a host path with the access flags applied.
    fn clone_tree(&mut self, src: &Path, access: Access) -> io::Result<Self::Handle>;
    fn new_tmpfs(&mut self, mode: u32, size: Option<u64>) -> io::Result<Self::Handle>;
    /// A read-only, empty regular file (mode 0444) to mount over a hidden file: reads see
    /// nothing, writes get `EROFS`.
    fn empty_file(&mut self) -> io::Result<Self::Handle>;
    fn new_proc(&mut self) -> io::Result<Self::Handle>;
    fn new_devpts(&mut self) -> io::Result<Self::Handle>;
    /// A detached bind of the file open on `fd` (the pty slave on stdin).
    fn clone_fd(&mut self, fd: i32) -> io::Result<Self::Handle>;
    /// Attach the new root somewhere so that it can be populated and pivoted into.
    fn attach_root(&mut self, root: &Self::Handle) -> io::Result<()>;
    /// Attach `h` on `dst` (inside the new root), creating the mount point if needed.
    fn attach(&mut self, h: &Self::Handle, dst: &Path, dir: bool) -> io::Result<()>;
    fn symlink(&mut self, dst: &Path, target: &Path) -> io::Result<()>;
    /// Re-bind an existing path of the new tree onto itself read-only (missing: no-op).
    fn cover_ro(&mut self, dst: &Path) -> io::Result<()>;
    fn pivot(&mut self) -> io::Result<()>;
    /// Detach the attached new root, with what is mounted in it (a tree given up).
    fn detach_root(&mut self) -> io::Result<()>;
    /// Make one mount (not its children) read-only.
    fn seal(&mut self, h: &Self::Handle) -> io::Result<()>;
}

/// procfs entries that write to the host kernel; bwrap covers the same ones.
const PROC_COVER: &[&str] = &["sys", "sysrq-trigger", "irq", "bus"];

fn step_err(what: &'static str, dst: &Path, e: io::Error) -> Error {
    let fix = match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel lacks the new mount API (open_tree, move_mount, fsopen: Linux >= 5.2; mount_setattr: Linux >= 5.12); upgrade the kernel or use OCSB_SANDBOX=0".to_string(),
        Some(libc::ELOOP) => format!("{} (or a directory above it) became a symbolic link; remove the link and start again", dst.display()),
        Some(libc::EPERM) | Some(libc::EACCES) => "the kernel refused a mount inside the user namespace: inside a container this needs user namespaces with mount rights (for example docker --privileged); check that /proc is not partly covered (hidepid, overmounts)".to_string(),
        _ => format!("check that {} exists and is readable", dst.display()),
    };
    Error::Kernel { step: what, source: io::Error::new(e.kind(), format!("{}: {e}", dst.display())), fix }
}

/// Build the whole tree and pivot into it. On return the process's root is the new tree.
pub fn apply<S: MountSys>(sys: &mut S, plan: &Plan) -> Result<()> {
    private_root(sys)?;
    let sources = sources(sys, &plan.ops, |sys, src, access| sys.clone_tree(src, access))?;
    crate::stages::mark("pid 1: sources cloned");
    let mut tree = Tree::begin(sys)?;
    tree.mount(sys, &plan.ops, sources)?;
    tree.finish(sys)
}

/// `/` of this mount namespace made a slave: nothing mounted in it propagates back to the host.
pub fn private_root<S: MountSys>(sys: &mut S) -> Result<()> {
    sys.make_root_slave().map_err(|e| {
        Error::kernel(
            "making / a slave mount",
            e,
            "the mount namespace could not be made private; inside a container run with CAP_SYS_ADMIN over its user namespace",
        )
    })
}

/// Phase A: the source of each of `ops` that has one, made before the tree exists; `bind`
/// gives a bind's (a clone of its host path). *Why first*: once the new root is attached,
/// a host path beneath where it is attached no longer means the host's.
pub fn sources<S: MountSys>(
    sys: &mut S,
    ops: &[Op],
    mut bind: impl FnMut(&mut S, &Path, Access) -> io::Result<S::Handle>,
) -> Result<Vec<Option<S::Handle>>> {
    let mut sources = Vec::with_capacity(ops.len());
    for op in ops {
        sources.push(match op {
            Op::Bind { src, access, .. } => {
                Some(bind(sys, src, *access).map_err(|e| step_err("cloning a mount", src, e))?)
            }
            Op::Mask { dst } => {
                Some(sys.empty_file().map_err(|e| step_err("creating an empty file", dst, e))?)
            }
            Op::Console { dst } => {
                Some(sys.clone_fd(0).map_err(|e| step_err("binding the terminal", dst, e))?)
            }
            _ => None,
        });
    }
    Ok(sources)
}

/// A clone of the host source of each bind among `ops`, in their order: what [`sources`]
/// takes for them in a process that cannot clone them itself (see `stage2`'s early pid 1).
pub fn bind_sources<S: MountSys>(sys: &mut S, ops: &[Op]) -> Result<Vec<S::Handle>> {
    let mut out = Vec::new();
    for op in ops {
        if let Op::Bind { src, access, .. } = op {
            out.push(sys.clone_tree(src, *access).map_err(|e| step_err("cloning a mount", src, e))?);
        }
    }
    Ok(out)
}

/// The new tree while it is built: its root attached, and the tmpfs mounts to seal once the
/// process is inside it.
pub struct Tree<H> {
    sealed: Vec<H>,
}

impl<H> Tree<H> {
    /// A fresh tmpfs root, attached where it can be populated and pivoted into.
    pub fn begin<S: MountSys<Handle = H>>(sys: &mut S) -> Result<Tree<H>> {
        let root = sys
            .new_tmpfs(0o755, Some(1 << 20))
            .map_err(|e| step_err("creating the root tmpfs", Path::new("/"), e))?;
        sys.attach_root(&root).map_err(|e| step_err("attaching the new root", Path::new("/"), e))?;
        Ok(Tree { sealed: vec![root] })
    }

    /// `ops` mounted in their order, each from its source (as [`sources`] made them).
    pub fn mount<S: MountSys<Handle = H>>(
        &mut self,
        sys: &mut S,
        ops: &[Op],
        sources: Vec<Option<H>>,
    ) -> Result<()> {
        if sources.len() != ops.len() {
            return Err(Error::failed("internal: a mount without its source", "report this"));
        }
        for (op, src) in ops.iter().zip(sources) {
            let from = |what: &'static str, dst: &Path| {
                src.ok_or_else(|| step_err(what, dst, io::Error::other("internal: no source was made")))
            };
            match op {
                Op::Bind { dst, dir, .. } => {
                    let h = from("bind mount", dst)?;
                    sys.attach(&h, dst, *dir).map_err(|e| step_err("bind mount", dst, e))?;
                }
                Op::Mask { dst } => {
                    let h = from("hiding a file", dst)?;
                    sys.attach(&h, dst, false).map_err(|e| step_err("hiding a file", dst, e))?;
                }
                Op::Console { dst } => {
                    let h = from("binding the terminal", dst)?;
                    sys.attach(&h, dst, false).map_err(|e| step_err("binding the terminal", dst, e))?;
                }
                Op::Tmpfs { dst, mode, size, seal } => {
                    let h = sys.new_tmpfs(*mode, *size).map_err(|e| step_err("tmpfs", dst, e))?;
                    sys.attach(&h, dst, true).map_err(|e| step_err("tmpfs", dst, e))?;
                    if *seal {
                        self.sealed.push(h);
                    }
                }
                Op::Symlink { dst, target } => {
                    sys.symlink(dst, target).map_err(|e| step_err("symlink", dst, e))?;
                }
                Op::Proc { dst } => {
                    let h = sys.new_proc().map_err(|e| {
                        Error::kernel(
                            "mounting a fresh /proc",
                            e,
                            "procfs cannot be mounted in the sandbox's pid namespace: inside a container /proc is usually partly covered; run the container with an unmasked /proc (e.g. --security-opt systempaths=unconfined)",
                        )
                    })?;
                    sys.attach(&h, dst, true).map_err(|e| step_err("/proc", dst, e))?;
                    for sub in PROC_COVER {
                        let p = dst.join(sub);
                        sys.cover_ro(&p).map_err(|e| step_err("covering /proc", &p, e))?;
                    }
                }
                Op::DevPts { dst } => {
                    let h = sys.new_devpts().map_err(|e| step_err("devpts", dst, e))?;
                    sys.attach(&h, dst, true).map_err(|e| step_err("devpts", dst, e))?;
                }
            }
        }
        Ok(())
    }

    /// Pivot into the tree and seal its own tmpfs mounts read-only.
    pub fn finish<S: MountSys<Handle = H>>(self, sys: &mut S) -> Result<()> {
        sys.pivot().map_err(|e| Error::kernel("pivot_root", e, "the new root could not be entered"))?;
        for h in &self.sealed {
            sys.seal(h).map_err(|e| step_err("sealing a tmpfs read-only", Path::new("/"), e))?;
        }
        Ok(())
    }

    /// The tree given up before its pivot: detached with everything mounted in it, so that
    /// another can be built where it was.
    pub fn give_up<S: MountSys<Handle = H>>(self, sys: &mut S) -> Result<()> {
        sys.detach_root().map_err(|e| step_err("detaching an unfinished root", Path::new("/"), e))
    }
}

/// The real implementation. The new root is attached on `/tmp` of the (private) mount
/// namespace; every host source was cloned before that, so nothing is shadowed.
pub struct RealMounts {
    root: Option<OwnedFd>,
    /// A small sealed tmpfs holding the empty file that masks hidden files.
    empty: Option<OwnedFd>,
}

impl RealMounts {
    pub fn new() -> Self {
        RealMounts { root: None, empty: None }
    }

    fn root(&self) -> io::Result<BorrowedFd<'_>> {
        self.root.as_ref().map(|f| f.as_fd()).ok_or_else(|| io::Error::other("new root not attached"))
    }

    fn rel(dst: &Path) -> Vec<&std::ffi::OsStr> {
        dst.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// Open (creating as needed) the mount point `dst` inside the new root, refusing symlinks
    /// on every component.
    fn mount_point(&self, dst: &Path, dir: bool) -> io::Result<OwnedFd> {
        let root = self.root()?;
        let parts = Self::rel(dst);
        if parts.is_empty() {
            return sys::openat2(Some(root), Path::new("."), libc::O_PATH, 0, MOUNT_POINT_RESOLVE);
        }
        Self::open_or_make(root, &parts, dir)
    }

    /// `parts` beneath `root`, opened whole in one walk when it exists (*why*: a plan's mount
    /// points are up to a dozen components deep, and a walk a component at a time was a fifth
    /// of pid 1's mounting); otherwise its parent opened or made the same way, then its last
    /// name made there. The same resolution either way: no link followed, nothing above `root`.
    fn open_or_make(root: BorrowedFd<'_>, parts: &[&std::ffi::OsStr], dir: bool) -> io::Result<OwnedFd> {
        let whole: PathBuf = parts.iter().collect();
        match sys::openat2(Some(root), &whole, libc::O_PATH, 0, MOUNT_POINT_RESOLVE) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            other => return other,
        }
        let Some((last, up)) = parts.split_last() else {
            return Err(io::Error::other("an empty mount point"));
        };
        let held = if up.is_empty() { None } else { Some(Self::open_or_make(root, up, true)?) };
        let parent = held.as_ref().map_or(root, |f| f.as_fd());
        let p = Path::new(last);
        if dir {
            match nix::sys::stat::mkdirat(parent, p, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            drop(sys::openat2(
                Some(parent),
                p,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
                MOUNT_POINT_RESOLVE,
            )?);
        }
        sys::openat2(Some(parent), p, libc::O_PATH, 0, MOUNT_POINT_RESOLVE)
    }
}

/// How a mount point is looked up in the new root: through no symbolic link (a mount point in a
/// writable tree, such as a checkout's `.git`, is a name the agent may have made a link in an
/// earlier session), never above the root.
const MOUNT_POINT_RESOLVE: u64 = sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_BENEATH;

impl Default for RealMounts {
    fn default() -> Self {
        Self::new()
    }
}

fn access_attrs(access: Access) -> u64 {
    match access {
        Access::Ro => sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        Access::Rw => sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        Access::Device => sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
    }
}

impl MountSys for RealMounts {
    type Handle = OwnedFd;

    fn make_root_slave(&mut self) -> io::Result<()> {
        nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
            .map_err(io::Error::from)
    }

    fn clone_tree(&mut self, src: &Path, access: Access) -> io::Result<OwnedFd> {
        let fd = sys::openat2(None, src, libc::O_PATH | libc::O_NOFOLLOW, 0, sys::RESOLVE_NO_SYMLINKS)?;
        let tree = sys::open_tree(
            Some(fd.as_fd()),
            Path::new(""),
            sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | sys::AT_RECURSIVE | sys::AT_EMPTY_PATH,
        )?;
        sys::mount_setattr(tree.as_fd(), true, access_attrs(access), 0)?;
        Ok(tree)
    }

    fn new_tmpfs(&mut self, mode: u32, size: Option<u64>) -> io::Result<OwnedFd> {
        let mode = format!("{mode:o}");
        let size = size.map(|s| s.to_string());
        let mut opts = vec![("mode", mode.as_str())];
        if let Some(s) = &size {
            opts.push(("size", s.as_str()));
        }
        sys::new_fs("tmpfs", &opts, sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV)
    }

    fn empty_file(&mut self) -> io::Result<OwnedFd> {
        if self.empty.is_none() {
            let fs = self.new_tmpfs(0o755, Some(4096))?;
            let name = Path::new("empty");
            drop(sys::openat2(
                Some(fs.as_fd()),
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o444,
                sys::RESOLVE_BENEATH,
            )?);
            sys::mount_setattr(fs.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)?;
            self.empty = Some(fs);
        }
        #[allow(clippy::expect_used, reason = "made just above when missing")]
        let fs = self.empty.as_ref().expect("just created");
        let tree = sys::open_tree(
            Some(fs.as_fd()),
            Path::new("empty"),
            sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC,
        )?;
        sys::mount_setattr(tree.as_fd(), false, access_attrs(Access::Ro), 0)?;
        Ok(tree)
    }

    fn new_proc(&mut self) -> io::Result<OwnedFd> {
        sys::new_fs("proc", &[], sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC)
    }

    fn new_devpts(&mut self) -> io::Result<OwnedFd> {
        sys::new_fs(
            "devpts",
            &[("ptmxmode", "0666"), ("mode", "0620")],
            sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
        )
    }

    fn clone_fd(&mut self, fd: i32) -> io::Result<OwnedFd> {
        // The fd belongs to a mount of the launcher's namespace, which open_tree cannot clone;
        // clone the same path in our copy of it, and check it is the same terminal.
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
        if !path.starts_with("/dev/pts") {
            return Err(io::Error::other(format!("stdin is {}, not a pty", path.display())));
        }
        let tree = self.clone_tree(&path, Access::Device)?;
        let want = sys::rdev_of(fd)?;
        let got = nix::sys::stat::fstat(tree.as_fd())?.st_rdev;
        if want != got {
            return Err(io::Error::other(format!("{} is not the terminal on stdin", path.display())));
        }
        Ok(tree)
    }

    fn attach_root(&mut self, root: &OwnedFd) -> io::Result<()> {
        sys::move_mount_to_path(root.as_fd(), Path::new("/tmp"))?;
        let fd =
            nix::fcntl::open("/tmp", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        self.root = Some(fd);
        Ok(())
    }

    fn attach(&mut self, h: &OwnedFd, dst: &Path, dir: bool) -> io::Result<()> {
        let target = self.mount_point(dst, dir)?;
        sys::move_mount_fd(h.as_fd(), target.as_fd())
    }

    fn symlink(&mut self, dst: &Path, target: &Path) -> io::Result<()> {
        let parent = dst.parent().unwrap_or(Path::new("/"));
        let name = dst.file_name().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let dir = self.mount_point(parent, true)?;
        match nix::unistd::symlinkat(target, dir.as_fd(), name) {
            Ok(()) | Err(Errno::EEXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn cover_ro(&mut self, dst: &Path) -> io::Result<()> {
        let root = self.root()?;
        let rel: PathBuf = Self::rel(dst).iter().collect();
        let resolve = sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_BENEATH;
        let fd = match sys::openat2(Some(root), &rel, libc::O_PATH | libc::O_NOFOLLOW, 0, resolve) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
        let tree = sys::open_tree(
            Some(fd.as_fd()),
            Path::new(""),
            sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | sys::AT_RECURSIVE | sys::AT_EMPTY_PATH,
        )?;
        sys::mount_setattr(tree.as_fd(), true, access_attrs(Access::Ro), 0)?;
        sys::move_mount_fd(tree.as_fd(), fd.as_fd())
    }

    fn pivot(&mut self) -> io::Result<()> {
        let root = self.root.take().ok_or_else(|| io::Error::other("new root not attached"))?;
        nix::unistd::fchdir(root.as_fd())?;
        nix::unistd::pivot_root(".", ".")?;
        // The old root is now stacked on ".": detach it (lazily, so busy host mounts go too).
        nix::mount::umount2(".", MntFlags::MNT_DETACH)?;
        nix::unistd::chdir("/")?;
        Ok(())
    }

    fn detach_root(&mut self) -> io::Result<()> {
        if self.root.take().is_some() {
            nix::mount::umount2("/tmp", MntFlags::MNT_DETACH)?;
        }
        Ok(())
    }

    fn seal(&mut self, h: &OwnedFd) -> io::Result<()> {
        sys::mount_setattr(h.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    /// Records every call; handles are indices into `made`.
    #[derive(Default)]
    struct Recorder {
        log: Vec<String>,
        made: Vec<String>,
    }

    impl MountSys for Recorder {
        type Handle = usize;
        fn make_root_slave(&mut self) -> io::Result<()> {
            self.log.push("rslave /".into());
            Ok(())
        }
        fn clone_tree(&mut self, src: &Path, access: Access) -> io::Result<usize> {
            self.made.push(format!("clone {} {access:?}", src.display()));
            self.log.push(self.made.last().unwrap().clone());
            Ok(self.made.len() - 1)
        }
        fn new_tmpfs(&mut self, mode: u32, _size: Option<u64>) -> io::Result<usize> {
            self.made.push(format!("tmpfs {mode:o}"));
            Ok(self.made.len() - 1)
        }
        fn empty_file(&mut self) -> io::Result<usize> {
            self.made.push("empty-file".into());
            self.log.push("empty-file".into());
            Ok(self.made.len() - 1)
        }
        fn new_proc(&mut self) -> io::Result<usize> {
            self.made.push("proc".into());
            Ok(self.made.len() - 1)
        }
        fn new_devpts(&mut self) -> io::Result<usize> {
            self.made.push("devpts".into());
            Ok(self.made.len() - 1)
        }
        fn clone_fd(&mut self, fd: i32) -> io::Result<usize> {
            self.made.push(format!("fd {fd}"));
            Ok(self.made.len() - 1)
        }
        fn attach_root(&mut self, root: &usize) -> io::Result<()> {
            self.log.push(format!("root {}", self.made[*root]));
            Ok(())
        }
        fn attach(&mut self, h: &usize, dst: &Path, _dir: bool) -> io::Result<()> {
            self.log.push(format!("attach {} on {}", self.made[*h], dst.display()));
            Ok(())
        }
        fn symlink(&mut self, dst: &Path, target: &Path) -> io::Result<()> {
            self.log.push(format!("symlink {} -> {}", dst.display(), target.display()));
            Ok(())
        }
        fn cover_ro(&mut self, dst: &Path) -> io::Result<()> {
            self.log.push(format!("cover {}", dst.display()));
            Ok(())
        }
        fn pivot(&mut self) -> io::Result<()> {
            self.log.push("pivot".into());
            Ok(())
        }
        fn detach_root(&mut self) -> io::Result<()> {
            self.log.push("detach root".into());
            Ok(())
        }
        fn seal(&mut self, h: &usize) -> io::Result<()> {
            self.log.push(format!("seal {}", self.made[*h]));
            Ok(())
        }
    }

    fn plan() -> Plan {
        Plan {
            ops: vec![
                Op::Bind { src: "/usr".into(), dst: "/usr".into(), access: Access::Ro, dir: true },
                Op::Tmpfs { dst: "/run".into(), mode: 0o755, size: None, seal: true },
                Op::Proc { dst: "/proc".into() },
                Op::Bind { src: "/s/tmp".into(), dst: "/tmp".into(), access: Access::Rw, dir: true },
                Op::Bind { src: "/tmp/p".into(), dst: "/tmp/p".into(), access: Access::Rw, dir: true },
                Op::Mask { dst: "/home/u/.ssh/id_rsa".into() },
                Op::Bind {
                    src: "/tmp/p/.git/hooks".into(),
                    dst: "/tmp/p/.git/hooks".into(),
                    access: Access::Ro,
                    dir: true,
                },
            ],
            ..Plan::default()
        }
    }

    #[test]
    fn sources_are_cloned_before_the_root_exists() {
        let mut r = Recorder::default();
        apply(&mut r, &plan()).unwrap();
        let root = r.log.iter().position(|l| l.starts_with("root")).unwrap();
        let clones: Vec<usize> =
            r.log.iter().enumerate().filter(|(_, l)| l.starts_with("clone")).map(|(i, _)| i).collect();
        assert_eq!(clones.len(), 4, "{:#?}", r.log);
        assert!(clones.iter().all(|&i| i < root), "{:#?}", r.log);
        assert!(r.log.iter().position(|l| l == "empty-file").unwrap() < root);
        assert_eq!(r.log[0], "rslave /");
    }

    /// A tree built in two parts (the first before the request, in another process than the
    /// one that clones the rest's sources) makes the same mounts in the same order as one
    /// built whole, and a tree given up is detached before another is begun.
    #[test]
    fn a_tree_built_in_two_parts_mounts_what_a_whole_one_does() {
        let plan = plan();
        let mut whole = Recorder::default();
        apply(&mut whole, &plan).unwrap();
        let (first, rest) = plan.ops.split_at(3);
        let mut parts = Recorder::default();
        private_root(&mut parts).unwrap();
        let made = sources(&mut parts, first, |r, src, a| r.clone_tree(src, a)).unwrap();
        let mut tree = Tree::begin(&mut parts).unwrap();
        tree.mount(&mut parts, first, made).unwrap();
        let mut elsewhere = Recorder::default();
        let cloned = bind_sources(&mut elsewhere, rest).unwrap();
        assert_eq!(cloned.len(), 3, "{:#?}", elsewhere.log);
        // The clones come from elsewhere: recorded here under the same names.
        let given: Vec<usize> = cloned
            .into_iter()
            .map(|i| {
                parts.made.push(elsewhere.made[i].clone());
                parts.made.len() - 1
            })
            .collect();
        let mut given = given.into_iter();
        let made = sources(&mut parts, rest, |_, _, _| Ok(given.next().unwrap())).unwrap();
        assert!(given.next().is_none());
        tree.mount(&mut parts, rest, made).unwrap();
        tree.finish(&mut parts).unwrap();
        let mounts = |r: &Recorder| -> Vec<String> {
            r.log.iter().filter(|l| !l.starts_with("clone") && *l != "empty-file").cloned().collect()
        };
        assert_eq!(mounts(&whole), mounts(&parts));
        assert!(mounts(&whole).iter().any(|l| l.starts_with("seal")));
        // Given up: detached, then a new root.
        let mut again = Recorder::default();
        let tree = Tree::begin(&mut again).unwrap();
        tree.give_up(&mut again).unwrap();
        let _ = Tree::begin(&mut again).unwrap();
        assert_eq!(again.log, ["root tmpfs 755", "detach root", "root tmpfs 755"]);
    }

    #[test]
    fn attach_follows_plan_order_then_pivot_then_seal() {
        let mut r = Recorder::default();
        apply(&mut r, &plan()).unwrap();
        let attaches: Vec<&String> = r.log.iter().filter(|l| l.starts_with("attach")).collect();
        assert_eq!(attaches[0], "attach clone /usr Ro on /usr");
        assert_eq!(attaches[1], "attach tmpfs 755 on /run");
        assert_eq!(attaches[2], "attach proc on /proc");
        assert_eq!(attaches[3], "attach clone /s/tmp Rw on /tmp");
        assert_eq!(attaches[4], "attach clone /tmp/p Rw on /tmp/p");
        assert_eq!(attaches[5], "attach empty-file on /home/u/.ssh/id_rsa");
        assert_eq!(attaches[6], "attach clone /tmp/p/.git/hooks Ro on /tmp/p/.git/hooks");
        let pivot = r.log.iter().position(|l| l == "pivot").unwrap();
        let seals: Vec<usize> =
            r.log.iter().enumerate().filter(|(_, l)| l.starts_with("seal")).map(|(i, _)| i).collect();
        assert_eq!(seals.len(), 2, "root and /run are sealed");
        assert!(seals.iter().all(|&i| i > pivot));
        for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
            assert!(r.log.contains(&format!("cover /proc/{sub}")));
        }
    }
}
