//! `ocsb sandbox status`: what this host can enforce, checked live where it is cheap.

use std::fmt;

use nix::sched::CloneFlags;

use super::landlock::kernel_abi;

pub struct Status {
    /// `Ok` when a child could create user, mount, pid, ipc, uts and cgroup namespaces.
    pub namespaces: Result<(), String>,
    pub landlock_abi: i64,
    /// `Seccomp:` line present in /proc/self/status (CONFIG_SECCOMP) and filters allowed.
    pub seccomp: bool,
    /// Relevant sysctls that exist on this kernel.
    pub sysctls: Vec<(&'static str, String)>,
}

const SYSCTLS: &[&str] = &[
    "kernel/unprivileged_userns_clone",
    "user/max_user_namespaces",
    "kernel/apparmor_restrict_unprivileged_userns",
    "dev/tty/legacy_tiocsti",
];

fn try_namespaces() -> Result<(), String> {
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    super::sys::try_unshare(flags).map_err(|e| format!("unshare: {e}"))
}

pub fn status() -> Status {
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    let sysctls = SYSCTLS
        .iter()
        .filter_map(|k| {
            std::fs::read_to_string(format!("/proc/sys/{k}")).ok().map(|v| (*k, v.trim().to_string()))
        })
        .collect();
    Status { namespaces: try_namespaces(), landlock_abi: kernel_abi(), seccomp, sysctls }
}

impl Status {
    /// True when everything the sandbox requires is present.
    pub fn ok(&self) -> bool {
        self.namespaces.is_ok() && self.landlock_abi >= 6 && self.seccomp
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespaces {
            Ok(()) => writeln!(f, "namespaces: user mount pid ipc uts cgroup: ok")?,
            Err(e) => writeln!(f, "namespaces: NOT available ({e}); {}", super::error::USERNS_FIX)?,
        }
        let ll = match self.landlock_abi {
            n if n < 6 => format!(
                "{}; fix: {}",
                if n <= 0 {
                    "NOT available (landlock disabled or kernel too old)".to_string()
                } else {
                    format!(
                        "ABI {n}: too old for the netlock mode (it needs >= 6 for abstract-socket and signal scopes)"
                    )
                },
                super::landlock::floor_fix(n, false)
            ),
            n => format!(
                "ABI {n}: ok (hard floor: filesystem rights ABI 5, scopes ABI 6; newer rights best effort)"
            ),
        };
        writeln!(f, "landlock: {ll}")?;
        let tcp = if self.landlock_abi >= 4 {
            "ok: the sandbox connects on loopback only to the filter, DNS, OpenCode, OCSB_LOOPBACK_PORTS and the ephemeral range (its own port-0 listeners)"
        } else {
            "NOT available (landlock ABI < 4): every TCP service on the host's loopback is reachable"
        };
        writeln!(f, "loopback: {tcp}")?;
        let iso = match super::landlock::missing_rights(self.landlock_abi) {
            _ if self.landlock_abi == 0 => "NOT available (needs landlock)".to_string(),
            m if m.is_empty() => "ok (landlock ABI >= 1 suffices; every right enforced)".to_string(),
            m => format!("ok, without: {}", m.join("; ")),
        };
        writeln!(f, "isolated network (OCSB_NETWORK=isolated): {iso}")?;
        writeln!(f, "seccomp: {}", if self.seccomp { "ok" } else { "NOT available" })?;
        for (k, v) in &self.sysctls {
            writeln!(f, "sysctl {}: {v}", k.replace('/', "."))?;
        }
        write!(f, "netlock: probed by `ocsb netlock verify` and before every sandbox start")
    }
}
