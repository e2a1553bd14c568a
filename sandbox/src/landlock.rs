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

/// A landlock failure of a sandbox in the netlock mode (`isolated` false) or the isolated one.
fn ll_err<E: std::fmt::Display>(isolated: bool) -> impl Fn(E) -> Error {
    move |e| {
        let abi = kernel_abi();
        Error::kernel(
            "landlock",
            std::io::Error::other(format!("{e} (kernel landlock ABI {abi})")),
            floor_fix(abi, isolated),
        )
    }
}

/// What fixes a landlock failure on a kernel of landlock ABI `abi`. The netlock mode's floor is
/// ABI 6 (it shares the host's network, so the abstract-socket scope must close it); the isolated
/// mode's is ABI 1 (its namespaces close abstract sockets and the network). So between the two,
/// switching to `OCSB_NETWORK=isolated` is the fix that needs no new kernel, and it comes first;
/// running without the sandbox is never offered.
pub fn floor_fix(abi: i64, isolated: bool) -> String {
    const ISOLATED: &str = "set OCSB_NETWORK=isolated (the line `OCSB_NETWORK=isolated` in \
        ~/.config/opencode-sandbox/sandbox.conf, or in the project's \
        .opencode-sandbox/local/sandbox.conf): its own network namespace needs only landlock ABI 1";
    match abi {
        n if n <= 0 => format!(
            "landlock is disabled or missing in this kernel: add `landlock` to the `lsm=` kernel command line \
             (keep the modules listed in /sys/kernel/security/lsm; Linux >= 5.13), reboot, then {}",
            if isolated {
                "run it again".to_string()
            } else {
                format!("with ABI 1 to 5 {ISOLATED}; ABI 6 (Linux >= 6.12) runs the netlock mode as well")
            }
        ),
        n if !isolated && n < 6 => format!(
            "the netlock mode needs landlock ABI 6 and this kernel has ABI {n}: {ISOLATED}; \
             or, to keep the netlock mode, boot Linux >= 6.12"
        ),
        n => format!(
            "landlock ABI {n} meets this mode's floor, so the kernel refused a rule: \
             run `ocsb sandbox status` and report the error with its output"
        ),
    }
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
        .map_err(ll_err(part.isolated))?;
    if part.isolated {
        ruleset = ruleset
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI::V5))
            .map_err(ll_err(part.isolated))?
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(ll_err(part.isolated))?;
    } else {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(ll_err(part.isolated))?;
    }
    if part.tcp.is_some() {
        // ABI 4; the floor above is ABI 5, so a kernel that runs the sandbox has it.
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(ll_err(part.isolated))?;
    }
    // Best effort: rights of newer ABIs (pathname UNIX socket resolution in ABI 9).
    ruleset = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(newer())
        .map_err(ll_err(part.isolated))?;
    let mut created = ruleset.create().map_err(ll_err(part.isolated))?;
    if let Some(tcp) = &part.tcp {
        for port in tcp.ports() {
            created =
                created.add_rule(NetPort::new(port, AccessNet::ConnectTcp)).map_err(ll_err(part.isolated))?;
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
    created = created
        .add_rule(PathBeneath::new(path_fd(Path::new("/"))?, read))
        .map_err(ll_err(policy.isolated))?;
    for w in &policy.writable {
        created = created
            .add_rule(PathBeneath::new(path_fd(w)?, write_all | newer))
            .map_err(ll_err(policy.isolated))?;
    }
    for d in &policy.devices {
        let mut access = dev;
        if d.is_dir() {
            access |= AccessFs::ReadDir;
        }
        created = created.add_rule(PathBeneath::new(path_fd(d)?, access)).map_err(ll_err(policy.isolated))?;
    }
    for s in &policy.sockets {
        created = created
            .add_rule(PathBeneath::new(path_fd(s)?, BitFlags::from(AccessFs::ReadFile) | newer))
            .map_err(ll_err(policy.isolated))?;
    }
    let status = created.restrict_self().map_err(ll_err(policy.isolated))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(Enforcement::Full),
        RulesetStatus::PartiallyEnforced => Ok(Enforcement::Partial),
        RulesetStatus::NotEnforced => Err(ll_err(policy.isolated)("the ruleset was not enforced")),
    }
}

#[cfg(test)]
mod tests {
    use super::floor_fix;

    #[test]
    fn an_old_abi_in_the_netlock_mode_names_the_isolated_mode_before_a_kernel() {
        for abi in 1..6 {
            let fix = floor_fix(abi, false);
            let isolated = fix.find("OCSB_NETWORK=isolated").expect("names the isolated mode");
            let kernel = fix.find("Linux >= 6.12").expect("names the kernel that keeps the netlock mode");
            assert!(isolated < kernel, "{fix}");
            assert!(fix.contains(&format!("ABI {abi}")), "{fix}");
            assert!(fix.contains("~/.config/opencode-sandbox/sandbox.conf"), "{fix}");
            assert!(fix.contains(".opencode-sandbox/local/sandbox.conf"), "{fix}");
        }
    }

    #[test]
    fn landlock_off_is_enabled_first_then_the_mode_its_abi_allows() {
        let fix = floor_fix(0, false);
        assert!(fix.starts_with("landlock is disabled or missing"), "{fix}");
        assert!(fix.contains("lsm="), "{fix}");
        assert!(fix.find("lsm=").unwrap() < fix.find("OCSB_NETWORK=isolated").unwrap(), "{fix}");
        // The isolated mode itself needs ABI 1: enabling landlock is all it takes.
        let fix = floor_fix(0, true);
        assert!(fix.contains("lsm=") && !fix.contains("OCSB_NETWORK=isolated"), "{fix}");
    }

    #[test]
    fn no_fix_offers_running_without_the_sandbox_or_a_false_abi_claim() {
        for abi in 0..12 {
            for isolated in [false, true] {
                let fix = floor_fix(abi, isolated);
                assert!(!fix.contains("OCSB_SANDBOX"), "{fix}");
                // The isolated mode is offered only where it would run: ABI >= 1, or after
                // landlock is enabled; never when the failure is not the ABI's.
                if abi >= 6 || (isolated && abi >= 1) {
                    assert!(
                        !fix.contains("OCSB_NETWORK=isolated") && fix.contains("refused a rule"),
                        "{fix}"
                    );
                }
            }
        }
    }
}
