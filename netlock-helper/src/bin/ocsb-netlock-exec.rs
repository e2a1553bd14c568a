//! `ocsb-netlock-exec`: the setgid-only shim (installed `2755 root:opencode-sandbox`, never setuid,
//! no capabilities). It puts the caller's process tree into the netlock group G for good and then
//! runs `ocsb` from the same installation:
//!
//!   `<prefix>/libexec/ocsb/ocsb-netlock-exec ARGS...`  →  `execv(<prefix>/bin/ocsb, ["ocsb", ARGS...])`
//!
//! Being setgid to G grants nothing: G owns no files and only *removes* network (nftables matches
//! the fsgid a socket was created with). What the shim must guarantee is that the gid cannot be
//! shed again and that nothing from before the switch crosses over. Every step below says why.
#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::socket::{AddressFamily, SockaddrLike, SockaddrStorage, getsockname};
use nix::sys::stat::{Mode, umask};
use nix::unistd::{Gid, Group, close, execv, getresgid, setfsgid, setresgid};

/// The group the shim must be installed with; any other group (say, `shadow` after a careless
/// chgrp) is refused, so a mistake in packaging cannot turn the shim into a gid-granting tool.
const GROUP: &str = "opencode-sandbox";

fn main() -> ExitCode {
    match run() {
        Ok(never) => match never {},
        Err(msg) => {
            // Not eprintln!: stderr may be a closed socket, and the refusal must still be 126.
            let _ = writeln!(std::io::stderr(), "ocsb-netlock-exec: {msg}");
            ExitCode::from(126)
        }
    }
}

fn run() -> Result<Infallible, String> {
    // G is the group of the file the kernel actually executed (stat through /proc/self/exe, which
    // argv[0] or a symlink cannot fake).
    let me = std::fs::metadata("/proc/self/exe").map_err(|e| format!("cannot stat /proc/self/exe: {e}"))?;
    let g = Gid::from_raw(me.gid());
    let (uid, mode) = (me.uid(), me.mode() & 0o7777);
    if uid != 0 || mode & 0o2000 == 0 || mode & 0o4000 != 0 || g.as_raw() == 0 {
        let found = format!("uid {uid} gid {g} mode {mode:o}");
        return Err(format!(
            "must be installed root-owned, set-group-id, not set-user-id, with a non-root group (found {found}); fix: chown root:{GROUP} FILE && chmod 2755 FILE"
        ));
    }
    match Group::from_gid(g) {
        Ok(Some(grp)) if grp.name == GROUP => {}
        _ => return Err(format!("installed with gid {g}, which is not the group {GROUP:?}; refusing")),
    }

    // The set-gid bit must have taken effect. Under no_new_privs, on a nosuid mount or under a
    // tracer the kernel silently ignores it, and the agent would then run with its network.
    let before = getresgid().map_err(|e| format!("getresgid: {e}"))?.effective;
    if before != g {
        return Err(format!(
            "the set-group-id bit did not take effect (effective gid {before}, not {g}: no_new_privs, a nosuid mount or a tracer?); refusing to run the sandbox without the network lock"
        ));
    }

    // All three gids: with only the effective gid changed, `setegid(rgid)` would undo the lock.
    setresgid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
    let after = getresgid().map_err(|e| format!("getresgid: {e}"))?;
    // setfsgid returns the previous fsgid: the value nftables matches on (`meta skgid`).
    let fsgid = setfsgid(g);
    if (after.real, after.effective, after.saved, fsgid) != (g, g, g, g) {
        let (r, e, s) = (after.real, after.effective, after.saved);
        return Err(format!("gid switch did not stick (rgid {r} egid {e} sgid {s} fsgid {fsgid})"));
    }

    // Files the agent creates get group G, which every sandboxed user shares: group bits must
    // never grant more than other bits, and never group write.
    let old = umask(Mode::from_bits_truncate(0o077)).bits();
    let tightened = old | 0o020 | ((old & 0o007) << 3);
    umask(Mode::from_bits_truncate(tightened));

    // Sockets created before the switch keep the caller's gid and bypass the lock: nothing but
    // stdin/stdout/stderr may cross over, and those may be sockets only of the unix family (an
    // internet socket is an unlocked connection, a packet socket sends raw frames). A unix
    // socket can still carry descriptors its other end chooses to pass: that end is the caller.
    // Not a socket, or not open: nothing crosses over. A socket whose address cannot be read
    // (an XDP socket's cannot) is not a unix one.
    for fd in 0..=2 {
        let family = getsockname::<SockaddrStorage>(fd).map(|a| a.family());
        if !matches!(family, Ok(Some(AddressFamily::Unix)) | Err(Errno::ENOTSOCK | Errno::EBADF)) {
            return Err(format!(
                "descriptor {fd} is a network socket made outside the network lock; refusing (give ocsb a terminal, a pipe, a file or a unix socket as stdin, stdout and stderr)"
            ));
        }
    }
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("cannot list /proc/self/fd: {e}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds.into_iter().filter(|fd| *fd > 2) {
        let _ = close(fd); // EBADF for the directory fd that is already closed
    }

    // Nothing exec'd from here on (sg, newgrp, sudo, pkexec) may change gids back.
    prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;

    let target = stage2_path()?;
    let path = CString::new(target.clone().into_os_string().into_vec()).map_err(|_| "bad path")?;
    let mut argv = vec![CString::new("ocsb").map_err(|_| "argv")?];
    for a in std::env::args_os().skip(1) {
        argv.push(CString::new(OsString::into_vec(a)).map_err(|_| "argument contains NUL")?);
    }
    execv(&path, &argv).map_err(|e| format!("cannot execute {}: {e}", target.display()))
}

/// `<dir of this file>/../../bin/ocsb`: fixed relative to the installation (a package puts the shim
/// in /usr/libexec/ocsb and ocsb in /usr/bin; `make install PREFIX=/usr/local` keeps the pair), so
/// no caller input chooses what runs with gid G. The path comes from the kernel, not `argv[0]`.
fn stage2_path() -> Result<PathBuf, String> {
    let exe =
        std::fs::read_link("/proc/self/exe").map_err(|e| format!("cannot resolve /proc/self/exe: {e}"))?;
    let prefix = exe.parent().and_then(Path::parent).and_then(Path::parent).ok_or("shim installed at /")?;
    Ok(prefix.join("bin/ocsb"))
}
