//! What `doctor` saw on the machine, as plain data. [`super::observe`] fills it in (the only part
//! that touches the system); [`super::judge`] turns it into checks without touching anything, so
//! every verdict and message can be tested from a hand-written `Facts`.

use std::path::PathBuf;

use ocsb_policy::settings::{DockerMode, NetlockAcquire};

#[derive(Debug, Clone)]
pub struct Facts {
    pub project: ProjectFacts,
    /// `OCSB_SANDBOX=1`: the kernel features are required, not just nice.
    pub sandbox_enabled: bool,
    pub kernel: KernelFacts,
    pub netlock: NetlockFacts,
    pub egress: EgressFacts,
    /// `OCSB_LOOPBACK_PORTS` and `OCSB_FORWARD_PORTS`.
    pub loopback_ports: Vec<u16>,
    /// `OCSB_NETWORK`.
    pub network: ocsb_policy::settings::NetworkMode,
    /// Whether an isolated sandbox's network can be built here (tried only when `network` is
    /// isolated), or what failed and its fix.
    pub isolated_net: Result<(), (String, String)>,
    /// `OCSB_DOCKER`: none, the gateway, or the raw socket.
    pub docker: DockerMode,
    /// With `OCSB_DOCKER=1`: the daemon the gateway would forward to, pinged as the user.
    pub docker_daemon: DockerDaemonFacts,
    /// With `OCSB_DOCKER=1` and a daemon that answers: whether it keeps containers in.
    pub docker_firewall: Option<ocsb_policy::docker::firewall::DaemonNet>,
    pub opencode: OpencodeFacts,
    pub ports: Vec<PortFacts>,
    /// `OCSB_NOTIFICATIONS=1`.
    pub notifications: bool,
    pub dbus_proxy: Option<PathBuf>,
    /// `git --version`, or why it could not run.
    pub git: Result<String, String>,
    /// Host tools the sandbox and the self-tests run, looked up in PATH.
    pub curl: Option<PathBuf>,
    pub ncat: Option<PathBuf>,
    pub rg: Option<PathBuf>,
    pub sg: Option<PathBuf>,
    /// What the sandbox's home holds from the host now: (name in `~`, access, the rule's source).
    pub home: Vec<(String, &'static str, &'static str)>,
}

#[derive(Debug, Clone)]
pub enum ProjectFacts {
    /// A directory with `.opencode-sandbox/`; `rules` is the result of compiling its egress
    /// rule layers (the error names file and line).
    Inside { dir: PathBuf, rules: Result<usize, String> },
    /// No `.opencode-sandbox/` here or above: host checks only, settings from the user layer,
    /// the environment and the defaults.
    Outside { dir: PathBuf },
    /// A settings layer has a bad line; the checks below use the defaults.
    BadSettings { error: String },
}

#[derive(Debug, Clone)]
pub struct KernelFacts {
    /// A child could create user, mount, pid, ipc, uts and cgroup namespaces.
    pub userns: Result<(), String>,
    /// doctor runs as root, whom the userns sysctls do not restrict: the live test proves less.
    pub as_root: bool,
    /// `kernel.unprivileged_userns_clone` (Debian/Ubuntu patch; absent elsewhere).
    pub userns_clone: Option<String>,
    /// `user.max_user_namespaces`.
    pub max_user_namespaces: Option<String>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu >= 23.10).
    pub apparmor_restrict: Option<String>,
    /// 0 when landlock is absent or disabled.
    pub landlock_abi: i64,
    pub seccomp: bool,
}

#[derive(Debug, Clone)]
pub struct NetlockFacts {
    /// `OCSB_NETLOCK_GROUP`.
    pub group: String,
    pub gid: Option<u32>,
    /// The current user's name, and whether it is in the group (primary, listed, or root).
    pub user: String,
    pub member: bool,
    pub acquire: NetlockAcquire,
    pub shim: ShimFacts,
    pub helper: HelperFacts,
    pub probe: ProbeFacts,
    /// Entries of the system trees ([`super::observe::GROUP_SCAN`]) whose group is the netlock
    /// group, the shim excepted (at most a few); `None` when the group does not exist, `Err`
    /// when the walk stopped at its limit before it was through.
    pub group_files: Option<Result<Vec<PathBuf>, String>>,
}

#[derive(Debug, Clone)]
pub struct ShimFacts {
    /// `<prefix>/libexec/ocsb/ocsb-netlock-exec` beside this `ocsb`.
    pub path: PathBuf,
    /// uid, gid, mode (`& 0o7777`) when the file exists.
    pub meta: Option<(u32, u32, u32)>,
    /// The name of the shim's group, if it has one.
    pub group_name: Option<String>,
    /// `<prefix>/libexec/ocsb/ocsb-netlock-helper` exists (the helper is installed).
    pub helper_installed: bool,
    /// The systemd unit `ocsb-netlock.service` is installed.
    pub unit_installed: bool,
    /// The installation prefix, for the fix commands.
    pub prefix: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelperFacts {
    /// No `/run/ocsb-netlock/status.json`.
    NoStatusFile,
    Unreadable(String),
    Status {
        state: String,
        pid: Option<u32>,
        /// `/proc/<pid>/comm` is the helper's.
        alive: bool,
        gid: Option<u32>,
        error: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeFacts {
    /// The datagram sent as gid `gid` was rejected with EPERM.
    Locked { gid: u32 },
    /// It was not rejected.
    Open { gid: u32 },
    /// Not run, because the group or the shim it needs is missing (reported above).
    NotRun,
    /// The probe could not run or could not decide: what happened and what fixes it.
    Error { what: String, fix: String },
}

#[derive(Debug, Clone)]
pub enum EgressFacts {
    Builtin,
    Squid {
        /// Where Docker was looked for (`DOCKER_HOST` or the default socket).
        endpoint: String,
        /// The engine's version, or why it did not answer.
        docker: Result<String, String>,
        /// `opencode-sandbox-egress:latest` exists (`None` when Docker did not answer).
        image: Option<bool>,
    },
    /// `DOCKER_HOST` is not a unix socket (tcp://, ssh://): doctor does not speak to it.
    SquidUnchecked {
        endpoint: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerDaemonFacts {
    /// `OCSB_DOCKER` is not 1: nothing to forward to.
    NotAsked,
    /// No daemon on a unix socket: `DOCKER_HOST` names another kind of endpoint (`Some`), or
    /// no default socket exists (`None`).
    NoSocket { docker_host: Option<String> },
    /// The daemon at this socket answered a ping.
    Answered { socket: PathBuf },
    /// The user cannot reach it, and why.
    Unreachable(ocsb_docker_gw::reach::Unreachable),
}

#[derive(Debug, Clone)]
pub struct OpencodeFacts {
    /// `OCSB_OPENCODE_BIN` as set.
    pub setting: String,
    /// Where it was found (the path, or the PATH lookup of a bare name).
    pub found: Option<PathBuf>,
    /// `--version` output, or why it failed (only when found).
    pub version: Result<String, String>,
}

#[derive(Debug, Clone)]
pub struct PortFacts {
    pub id: &'static str,
    /// The setting the port comes from, as the user would change it.
    pub setting: &'static str,
    pub port: u16,
    /// Binding 127.0.0.1:port worked, or the error.
    pub free: Result<(), String>,
}
