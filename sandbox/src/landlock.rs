//! Landlock: the second wall behind the mount tree. The hard floor (an error when the kernel
//! lacks it) is the filesystem rights of ABI 5 matching the mount policy (read and execute
//! everywhere, write only beneath the writable mounts, ioctl only on the terminal devices) and the
//! ABI 6 scopes: abstract UNIX sockets (reachable otherwise, because the sandbox shares the host
//! network namespace: X11, D-Bus and any `@name` listener) and signals to processes outside.
//! Newer rights are added best-effort. An isolated sandbox (`OCSB_NETWORK=isolated`) has its
//! own network namespace, which closes abstract sockets and the network by itself: there the
//! floor is ABI 1 and the rest best effort ([`missing_rights`] names what a kernel lacks).

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
use super::spec::TcpPorts;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LandlockPolicy {
    pub writable: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
    pub sockets: Vec<PathBuf>,
    pub tcp: Option<TcpPorts>,
    /// The sandbox has a network namespace of its own (`OCSB_NETWORK=isolated`): abstract UNIX
    /// sockets and the network are the namespace's, so the ABI 6 scopes and the ABI 5 floor
    /// are not needed for them; the floor drops to ABI 1 and the rest is best effort.
    #[serde(default)]
    pub isolated: bool,
}

/// What got enforced, for `ocsb sandbox status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    /// The hard floor is enforced; some best-effort rights of newer ABIs are not.
    Partial,
}

/// The Landlock ABI of the running kernel (0 when absent or disabled).
pub fn kernel_abi() -> i64 {
    super::sys::landlock_abi()
}

fn ll_err(e: impl std::fmt::Display) -> Error {
    let abi = kernel_abi();
    Error::kernel(
        "landlock",
        std::io::Error::other(format!("{e} (kernel landlock ABI {abi})")),
        "the sandbox needs landlock ABI >= 6 (Linux >= 6.12) with landlock enabled: add `landlock` to the `lsm=` kernel command line (check /sys/kernel/security/lsm) or upgrade the kernel; OCSB_SANDBOX=0 runs without the sandbox",
    )
}

fn path_fd(p: &Path) -> Result<PathFd> {
    PathFd::new(p).map_err(|e| {
        Error::refused(
            format!("landlock rule for {}: {e}", p.display()),
            "check that the path exists inside the sandbox",
        )
    })
}

/// The rights a kernel of landlock ABI `abi` cannot enforce, as `ocsb doctor` and `ocsb
/// sandbox status` list them (only an isolated sandbox runs on such a kernel).
pub fn missing_rights(abi: i64) -> Vec<&'static str> {
    [
        (2, "refer (linking or renaming a file into another directory)"),
        (3, "truncate"),
        (4, "TCP port rules (not used in isolated mode)"),
        (5, "ioctl on devices"),
        (6, "abstract UNIX socket and signal scopes (the namespaces isolate both in isolated mode)"),
    ]
    .into_iter()
    .filter(|(min, _)| abi < *min)
    .map(|(_, what)| what)
    .collect()
}

/// The part of a sandbox's ruleset that is known before its mount plan: what the ruleset
/// handles (which depends on the network mode) and its TCP port rules. *Why apart*: the port
/// rules are most of the ruleset's cost (the ephemeral range is one rule per port, since
/// landlock has no ranges), and stage 2 adds them while the launcher is still checking the
/// project ([`crate::launch::Early`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetPart {
    pub isolated: bool,
    pub tcp: Option<TcpPorts>,
}

impl LandlockPolicy {
    /// What [`prebuild`] needs of this policy.
    pub fn net_part(&self) -> NetPart {
        NetPart { isolated: self.isolated, tcp: self.tcp.clone().filter(|_| !self.isolated) }
    }
}

/// A ruleset with everything of [`NetPart`] in it and no filesystem rule yet. One ruleset, not
/// a layer of its own for the ports: a second layer's domain copies the first one's rules
/// again, so stage 2 applying the ports as a layer saved nothing (measured).
pub struct Prebuilt {
    ruleset: RulesetCreated,
    part: NetPart,
}

/// Create the ruleset that [`apply`] completes: the filesystem rights and scopes it handles and,
/// on the host's network, the TCP connect rule with every port it allows.
pub fn prebuild(part: &NetPart) -> Result<Prebuilt> {
    let floor = if part.isolated { ABI::V1 } else { ABI::V5 };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(floor))
        .map_err(ll_err)?;
    if part.isolated {
        ruleset = ruleset
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI::V5))
            .map_err(ll_err)?
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(ll_err)?;
    } else {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(ll_err)?;
    }
    if part.tcp.is_some() {
        // ABI 4; the floor above is ABI 5, so a kernel that runs the sandbox has it.
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(ll_err)?;
    }
    // Best effort: rights of newer ABIs (pathname UNIX socket resolution in ABI 9).
    ruleset = ruleset.set_compatibility(CompatLevel::BestEffort).handle_access(newer()).map_err(ll_err)?;
    let mut created = ruleset.create().map_err(ll_err)?;
    if let Some(tcp) = &part.tcp {
        for port in tcp.ports() {
            created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp)).map_err(ll_err)?;
        }
    }
    Ok(Prebuilt { ruleset: created, part: part.clone() })
}

/// Rights of ABIs newer than the floor, handled best effort.
fn newer() -> BitFlags<AccessFs> {
    AccessFs::from_all(ABI::V10) & !AccessFs::from_all(ABI::V5)
}

/// Restrict the calling thread (and what it later executes), completing `pre` when it was built
/// for this policy's [`NetPart`]; otherwise (none, or built for another) from the start.
pub fn apply(policy: &LandlockPolicy, pre: Option<Prebuilt>) -> Result<Enforcement> {
    let part = policy.net_part();
    let mut created = match pre {
        Some(p) if p.part == part => p.ruleset,
        _ => prebuild(&part)?.ruleset,
    };
    let read = AccessFs::from_read(ABI::V5);
    let write_all = AccessFs::from_all(ABI::V5) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let dev = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::Truncate;
    let newer = newer();
    created = created.add_rule(PathBeneath::new(path_fd(Path::new("/"))?, read)).map_err(ll_err)?;
    for w in &policy.writable {
        created = created.add_rule(PathBeneath::new(path_fd(w)?, write_all | newer)).map_err(ll_err)?;
    }
    for d in &policy.devices {
        let mut access = dev;
        if d.is_dir() {
            access |= AccessFs::ReadDir;
        }
        created = created.add_rule(PathBeneath::new(path_fd(d)?, access)).map_err(ll_err)?;
    }
    for s in &policy.sockets {
        created = created
            .add_rule(PathBeneath::new(path_fd(s)?, BitFlags::from(AccessFs::ReadFile) | newer))
            .map_err(ll_err)?;
    }
    let status = created.restrict_self().map_err(ll_err)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(Enforcement::Full),
        RulesetStatus::PartiallyEnforced => Ok(Enforcement::Partial),
        RulesetStatus::NotEnforced => Err(ll_err("the ruleset was not enforced")),
    }
}
