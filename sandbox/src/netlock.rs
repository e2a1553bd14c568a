//! The netlock gid: the sandbox's processes run with real, effective and saved gid G, which the
//! nftables table `inet ocsb_netlock` limits to loopback and DNS. The launcher never trusts the
//! table's presence: before the command starts and every few seconds while it runs, it checks
//! that a UDP datagram sent as gid G to a documentation address is rejected with `EPERM`. The
//! probe socket is bound to `lo` (`SO_BINDTODEVICE`), so even with the lock missing the datagram
//! cannot leave the machine.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType, SockaddrIn, sockopt};
use nix::unistd::{Gid, getresgid};

use super::error::{Error, Result};
use super::spec::Acquire;

/// RFC 5737 TEST-NET-1, discard port.
pub const PROBE_TARGET: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `sendto` failed with `EPERM`: the lock rejected it.
    Locked,
    /// `sendto` succeeded: nothing stopped it.
    Open,
}

/// Send one datagram from a socket bound to `lo` and report whether the lock rejected it.
pub fn probe() -> Result<Probe> {
    Prober::new(0)?.probe()
}

/// Fail unless the lock rejected the probe.
pub fn require_locked(gid: u32) -> Result<()> {
    Prober::new(gid)?.require_locked()
}

/// A probe socket, made once and sent from again. *Why*: a socket stays in the network
/// namespace it was made in, so one made before stage 2 enters an isolated sandbox's namespace
/// keeps probing the host's lock from inside it; a socket made there would be rejected by the
/// namespace's own table whatever the host's lock does.
pub struct Prober {
    fd: std::os::fd::OwnedFd,
    gid: u32,
}

impl Prober {
    /// A probe socket of this network namespace, bound to its `lo`, for the group `gid`.
    pub fn new(gid: u32) -> Result<Prober> {
        let fd = socket::socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| Error::netlock(format!("probe socket: {e}"), "check that IPv4 is available"))?;
        socket::setsockopt(&fd, sockopt::BindToDevice, &OsString::from("lo"))
            .map_err(|e| Error::netlock(format!("probe SO_BINDTODEVICE lo: {e}"), "needs Linux >= 5.7"))?;
        Ok(Prober { fd, gid })
    }

    pub fn probe(&self) -> Result<Probe> {
        let addr = SockaddrIn::from(PROBE_TARGET);
        match socket::sendto(std::os::fd::AsRawFd::as_raw_fd(&self.fd), b"x", &addr, MsgFlags::empty()) {
            Err(Errno::EPERM) => Ok(Probe::Locked),
            Ok(_) => Ok(Probe::Open),
            Err(e) => Err(Error::netlock(
                format!(
                    "the probe datagram to {PROBE_TARGET} failed with {e} instead of EPERM: cannot tell whether the lock works"
                ),
                "run `ocsb netlock verify`; check `ip link show lo` is up",
            )),
        }
    }

    /// Fail unless the lock rejected the probe.
    pub fn require_locked(&self) -> Result<()> {
        match self.probe()? {
            Probe::Locked => Ok(()),
            Probe::Open => Err(Error::netlock(
                format!(
                    "NOT working: a datagram sent as gid {} to {PROBE_TARGET} was not rejected",
                    self.gid
                ),
                "start the lock: `ocsb netlock setup` (or `systemctl start ocsb-netlock`), then `ocsb netlock verify`",
            )),
        }
    }
}

/// Fail unless real, effective and saved gid are all `gid` (`setegid` alone can be undone).
pub fn require_gid(gid: u32) -> Result<()> {
    let r = getresgid().map_err(|e| Error::netlock(format!("getresgid: {e}"), "report this"))?;
    let g = Gid::from_raw(gid);
    if (r.real, r.effective, r.saved) != (g, g, g) {
        return Err(Error::netlock(
            format!(
                "the sandbox runs with gids {}/{}/{} (real/effective/saved), not the netlock group {gid}",
                r.real, r.effective, r.saved
            ),
            "install ocsb-netlock-exec set-group-id (`chown root:opencode-sandbox FILE && chmod 2755 FILE`), or set OCSB_NETLOCK_ACQUIRE=sg and join the group",
        ));
    }
    Ok(())
}

/// The command that starts stage 2 with gid G: through the shim, `sg`, or directly.
pub fn stage2_command(acquire: Option<&Acquire>, self_exe: &Path, stage2_arg: &str) -> Command {
    match acquire {
        Some(Acquire::Shim { path }) => {
            let mut c = Command::new(path);
            c.arg(stage2_arg);
            c
        }
        Some(Acquire::Sg { group }) => {
            let mut c = Command::new("sg");
            c.arg(group)
                .arg("-c")
                .arg(format!("exec {} {stage2_arg}", shell_quote(&self_exe.to_string_lossy())));
            c
        }
        Some(Acquire::Inherited) | None => {
            let mut c = Command::new(self_exe);
            c.arg(stage2_arg);
            c
        }
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sg_command_quotes_the_path() {
        let c = stage2_command(Some(&Acquire::Sg { group: "g".into() }), Path::new("/opt/o'b/ocsb"), "__x");
        let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, vec!["g", "-c", r"exec '/opt/o'\''b/ocsb' __x"]);
    }
}
