//! Thin wrappers around the syscalls `nix` does not cover (the new mount API, `openat2`,
//! `close_range`, `keyctl`, capabilities, Landlock's ABI query) and around the calls whose
//! soundness needs an argument (`fork`, signal handlers). Each wrapper only converts arguments
//! and errors; the decisions live in the callers. This is the crate's only file with `unsafe`:
//! every block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sched::CloneFlags;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::ForkResult;

// Constants from <linux/mount.h>, <linux/openat2.h>, <linux/fcntl.h>. Defined here because
// libc does not export all of them on every target.
pub const OPEN_TREE_CLONE: u32 = 1;
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
pub const AT_RECURSIVE: u32 = 0x8000;
pub const AT_EMPTY_PATH: u32 = libc::AT_EMPTY_PATH as u32;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const FSOPEN_CLOEXEC: u32 = 0x1;
pub const FSMOUNT_CLOEXEC: u32 = 0x1;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;
pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn fd_result(ret: libc::c_long) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

fn unit_result(ret: libc::c_long) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn raw(dirfd: Option<BorrowedFd<'_>>) -> RawFd {
    dirfd.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd())
}

/// `openat2(dirfd, path, {flags, resolve})`: path resolution that refuses symlinks (and, with
/// `RESOLVE_BENEATH`, `..` escapes), so a mount target or source cannot be redirected.
pub fn openat2(
    dirfd: Option<BorrowedFd<'_>>,
    path: &Path,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let p = cpath(path)?;
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: u64::from(mode), resolve };
    // SAFETY: `p` is a valid C string and `how` a properly sized open_how that outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            raw(dirfd),
            p.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    fd_result(ret)
}

/// `open_tree(dirfd, path, flags)`: with `OPEN_TREE_CLONE` a detached copy of a mount tree.
pub fn open_tree(dirfd: Option<BorrowedFd<'_>>, path: &Path, flags: u32) -> io::Result<OwnedFd> {
    let p = cpath(path)?;
    // SAFETY: `p` is a valid C string for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, raw(dirfd), p.as_ptr(), flags) };
    fd_result(ret)
}

/// `move_mount(from, "", to, "", F_EMPTY_PATH|T_EMPTY_PATH)`: attach a detached tree onto the
/// exact object `to` refers to.
pub fn move_mount_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
    let empty = cstr("")?;
    // SAFETY: both fds are live; the paths are valid empty C strings.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            to.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    unit_result(ret)
}

/// `move_mount(from, "", AT_FDCWD, path, F_EMPTY_PATH)`.
pub fn move_mount_to_path(from: BorrowedFd<'_>, to: &Path) -> io::Result<()> {
    let empty = cstr("")?;
    let p = cpath(to)?;
    // SAFETY: the fd is live; both strings are valid C strings.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            p.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    unit_result(ret)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], {set, clr})`.
pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, set: u64, clr: u64) -> io::Result<()> {
    let empty = cstr("")?;
    let attr = MountAttr { attr_set: set, attr_clr: clr, propagation: 0, userns_fd: 0 };
    let flags = AT_EMPTY_PATH | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a properly sized mount_attr that outlives the call; the fd is live.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            empty.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    unit_result(ret)
}

/// `fsopen(fstype)`, `fsconfig(key=value)…`, `fsconfig(CMD_CREATE)`, `fsmount(attrs)`: a new,
/// detached superblock such as a tmpfs, procfs or devpts instance.
pub fn new_fs(fstype: &str, options: &[(&str, &str)], attrs: u64) -> io::Result<OwnedFd> {
    let t = cstr(fstype)?;
    // SAFETY: `t` is a valid C string.
    let ctx = fd_result(unsafe { libc::syscall(libc::SYS_fsopen, t.as_ptr(), FSOPEN_CLOEXEC) })?;
    for (k, v) in options {
        let (k, v) = (cstr(k)?, cstr(v)?);
        // SAFETY: `ctx` is a live fs context; key and value are valid C strings.
        unit_result(unsafe {
            libc::syscall(libc::SYS_fsconfig, ctx.as_raw_fd(), FSCONFIG_SET_STRING, k.as_ptr(), v.as_ptr(), 0)
        })?;
    }
    // SAFETY: `ctx` is a live fs context; no pointers are passed.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            ctx.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })?;
    // SAFETY: `ctx` is a configured fs context.
    fd_result(unsafe { libc::syscall(libc::SYS_fsmount, ctx.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
}

/// `close_range(first, ~0, flags)`.
pub fn close_range(first: u32, flags: u32) -> io::Result<()> {
    // SAFETY: no pointers; closing descriptors we do not use is the point.
    unit_result(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) })
}

/// `keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`: subscribe to a new anonymous session keyring.
pub fn join_new_session_keyring() -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: a NULL name asks for a fresh anonymous keyring; no other pointers.
    let ret = unsafe {
        libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, std::ptr::null::<libc::c_char>())
    };
    unit_result(ret)
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capget` for the calling thread (two 32-bit words).
pub fn capget() -> io::Result<[CapData; 2]> {
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as _LINUX_CAPABILITY_VERSION_3 requires.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) };
    unit_result(ret)?;
    Ok(data)
}

/// `capset` for the calling thread.
pub fn capset(data: [CapData; 2]) -> io::Result<()> {
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: header and a two-element data array, as _LINUX_CAPABILITY_VERSION_3 requires.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    unit_result(ret)
}

/// Takes ownership of a descriptor that arrived with `SCM_RIGHTS`.
pub fn adopt_received_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel installed `fd` in this process while receiving the message just now;
    // nothing else holds or will close it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `prctl(option, arg2, 0, 0, 0)` for the integer-only options nix does not wrap.
pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> io::Result<libc::c_int> {
    prctl3(option, arg2, 0)
}

/// `prctl(option, arg2, arg3, 0, 0)` (e.g. `PR_CAP_AMBIENT`, which takes the capability third).
pub fn prctl3(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: integer-only prctl options; no pointers.
    let ret = unsafe { libc::prctl(option, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// `ioctl(fd, TIOCSCTTY, 0)`: make the terminal on `fd` our controlling terminal.
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0 as libc::c_int) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Set the window size of the terminal on `fd`.
pub fn set_winsize(fd: RawFd, ws: &libc::winsize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one winsize struct, which outlives the call.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, ws as *const libc::winsize) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Read the window size of the terminal on `fd`.
pub fn get_winsize(fd: RawFd) -> io::Result<libc::winsize> {
    let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize struct into `ws`.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws as *mut libc::winsize) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ws) }
}

/// The Landlock ABI of the running kernel (0 when absent or disabled).
pub fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attr and size 0, this flag only queries the ABI version.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    }
    .max(0)
}

/// `fork()` for a process with one thread (stage 2 and pid 1 of the sandbox: a fresh exec that
/// starts none). After a fork of a multi-threaded process the child may only call
/// async-signal-safe functions, because another thread may have held a lock (the allocator's)
/// at that moment; with one thread there is no such lock, so the child may run any code. The
/// count is read from `/proc/self/task`; more than one thread, or no count, is an error.
pub fn fork_single_threaded() -> io::Result<ForkResult> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!("refusing to fork a process with {threads} threads")));
    }
    // SAFETY: one thread (checked above, and only this thread could start another).
    Ok(unsafe { nix::unistd::fork() }?)
}

/// Whether `unshare(flags)` succeeds here, tried in a child that exits at once, so the caller
/// (which may have threads) is left as it was.
pub fn try_unshare(flags: CloneFlags) -> io::Result<()> {
    // SAFETY: the child calls only unshare(2) and _exit(2), both async-signal-safe, so forking
    // a multi-threaded process is sound.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => {
            let code = match nix::sched::unshare(flags) {
                Ok(()) => 0,
                Err(e) => e as i32,
            };
            // SAFETY: _exit is async-signal-safe and runs no atexit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None)? {
            WaitStatus::Exited(_, 0) => Ok(()),
            WaitStatus::Exited(_, errno) => Err(io::Error::from_raw_os_error(errno)),
            other => Err(io::Error::other(format!("probe child: {other:?}"))),
        },
    }
}

/// `sigtimedwait(mask, wait)`: the next of the blocked signals in `mask`, or `None` after
/// `wait` (or on EINTR).
pub fn sigtimedwait(mask: &SigSet, wait: Duration) -> Option<Signal> {
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `mask` is a valid sigset; info may be NULL; `ts` outlives the call.
    let r = unsafe { libc::sigtimedwait(mask.as_ref(), std::ptr::null_mut(), &ts) };
    if r > 0 { Signal::try_from(r).ok() } else { None }
}

static WINCH: AtomicBool = AtomicBool::new(false);

extern "C" fn on_winch(_: libc::c_int) {
    WINCH.store(true, Ordering::Relaxed);
}

/// Notes SIGWINCH (the host terminal was resized) for [`winch_pending`].
pub fn watch_winch() -> io::Result<()> {
    let handler = SigAction::new(SigHandler::Handler(on_winch), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { sigaction(Signal::SIGWINCH, &handler) }?;
    Ok(())
}

/// Whether SIGWINCH arrived since the last call.
pub fn winch_pending() -> bool {
    WINCH.swap(false, Ordering::Relaxed)
}

/// `st_rdev` of the open descriptor `fd`, which the caller holds (a descriptor that is not open
/// is `EBADF`, never another file's).
/// `getsockopt(fd, SOL_SOCKET, opt)` for an option whose value is an `int` (`SO_DOMAIN`,
/// `SO_PROTOCOL`, which `nix` does not name).
pub fn socket_int_option(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, an int that outlives the call;
    // the descriptor is borrowed, so it stays open meanwhile.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, opt, (&raw mut v).cast(), &mut len) };
    if r == 0 { Ok(v) } else { Err(io::Error::last_os_error()) }
}

/// The network namespace a socket belongs to (`SIOCGSKNS`), as a descriptor of it. Needs
/// `CAP_NET_ADMIN` over the namespace's user namespace (its creator's user has it from outside).
pub fn socket_netns(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    const SIOCGSKNS: libc::c_ulong = 0x894C;
    // SAFETY: SIOCGSKNS reads no argument; it returns a new descriptor or -1.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGSKNS as _) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just opened `r` for this process; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

pub fn rdev_of(fd: RawFd) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one stat struct into `st` and reads nothing else.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it initialised `st`.
    Ok(unsafe { st.assume_init() }.st_rdev)
}

/// Whether the entry `name` of the directory `dir` carries the extended attribute `attr`,
/// asked without following `name` if it is a link (`lgetxattr` through the directory's
/// descriptor in `/proc/self/fd`, so no path is resolved again). An entry on a filesystem
/// without extended attributes carries none.
pub fn has_xattr_at(dir: BorrowedFd<'_>, name: &std::ffi::CStr, attr: &std::ffi::CStr) -> io::Result<bool> {
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name.to_bytes());
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated and live across the call; a null buffer of size
    // 0 only asks for the value's size, so nothing is written.
    let ret = unsafe { libc::lgetxattr(path.as_ptr(), attr.as_ptr(), std::ptr::null_mut(), 0) };
    if ret >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}
