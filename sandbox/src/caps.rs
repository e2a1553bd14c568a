//! Capability drop. After `unshare(CLONE_NEWUSER)` the setup process holds every capability
//! over the sandbox's namespaces; the command must hold none. We clear the bounding set and the
//! ambient set, lock the securebits so no exec can regain capabilities, zero the effective,
//! permitted and inheritable sets, and then read everything back: a drop that did not take is
//! an error, never a warning.

use std::io;

use super::error::{Error, Result};
use super::sys;

// <linux/securebits.h>
const SECBIT_NOROOT: u64 = 1 << 0;
const SECBIT_NOROOT_LOCKED: u64 = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: u64 = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: u64 = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: u64 = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: u64 = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: u64 = 1 << 7;

fn last_cap() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

fn fail(what: &str, e: io::Error) -> Error {
    Error::kernel(
        "dropping capabilities",
        io::Error::new(e.kind(), format!("{what}: {e}")),
        "report this: the kernel refused a capability drop inside the user namespace",
    )
}

/// Drop every capability of the calling thread and verify.
pub fn drop_all() -> Result<()> {
    let last = last_cap();
    for cap in 0..=last {
        match sys::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(fail("PR_CAPBSET_DROP", e)),
        }
    }
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    sys::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong).map_err(|e| fail("PR_SET_SECUREBITS", e))?;
    // SAFETY-free path: PR_CAP_AMBIENT takes the sub-command as arg2.
    sys::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong)
        .map_err(|e| fail("PR_CAP_AMBIENT_CLEAR_ALL", e))?;
    sys::capset([sys::CapData::default(); 2]).map_err(|e| fail("capset", e))?;
    verify(last)
}

/// Read back every set; any remaining bit is an error.
pub fn verify(last: u64) -> Result<()> {
    let data = sys::capget().map_err(|e| fail("capget", e))?;
    if data.iter().any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0) {
        return Err(Error::refused("capabilities remain after the drop", "report this as a bug"));
    }
    for cap in 0..=last {
        if sys::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong).unwrap_or(0) != 0 {
            return Err(Error::refused(
                format!("capability {cap} remains in the bounding set"),
                "report this as a bug",
            ));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| fail("/proc/self/status", e))?;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("CapAmb:")
            && !v.trim().trim_start_matches('0').is_empty()
        {
            return Err(Error::refused("ambient capabilities remain after the drop", "report this as a bug"));
        }
    }
    Ok(())
}
