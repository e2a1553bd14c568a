//! What the sandbox should look like: a plain value the launcher fills from the settings. Nothing
//! here touches the system; `plan` turns it into mounts and `launch` enforces it.

use std::path::PathBuf;
use std::time::Duration;

use ocsb_policy::guard::Protection;
use serde::{Deserialize, Serialize};

/// The whole sandbox policy for one command. Paths are absolute (the caller resolves `~/` and
/// project-relative entries); the plan canonicalises them and refuses symlinked mount targets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Writable: the project (git work tree or directory with `.opencode-sandbox/`).
    pub project_dir: PathBuf,
    /// Writable: `~/.local/share/opencode-sandbox/<name>`; also holds the private `/tmp`.
    pub state_dir: PathBuf,
    /// The user's home directory. Inside it is a fresh directory holding only [`Self::home_ro`],
    /// `~/.ssh`'s public half and the writable roots and caches that lie in it (see `plan`).
    pub home: PathBuf,
    /// The read-only entries of the home shown inside (absolute, named under [`Self::home`]):
    /// the toolchains and startup files of `ocsb_policy::home`, `OCSB_HOME`, and the skills,
    /// plugins and OpenCode binary that live in the home. Missing ones are skipped; an entry
    /// outside the home is ignored (the root's read-only binds show it).
    #[serde(default)]
    pub home_ro: Vec<PathBuf>,
    /// Writable when it exists: `OCSB_WORKTREES_DIR`.
    pub worktrees_dir: Option<PathBuf>,
    /// `OCSB_RW`: extra writable paths (missing ones are skipped with a warning).
    pub rw: Vec<PathBuf>,
    /// `OCSB_RW_HOME`, already joined to `home`: writable when they exist.
    pub rw_home: Vec<PathBuf>,
    /// The project's own caches: (host directory, its private replacement in the state
    /// directory). Mounted in place of the host directory when that exists.
    #[serde(default)]
    pub caches: Vec<(PathBuf, PathBuf)>,
    /// `OCSB_HIDE`: hidden paths (empty directory or empty file in their place).
    pub hide: Vec<PathBuf>,
    /// `OCSB_HIDE_HOME`, already joined to `home`.
    pub hide_home: Vec<PathBuf>,
    /// `OCSB_TMP`.
    pub tmp: TmpMode,
    /// The Docker socket to expose (`OCSB_DOCKER=1`); `None` hides every known Docker socket.
    pub docker_socket: Option<PathBuf>,
    /// The Docker gateway's socket on the host (`OCSB_DOCKER=1`), bound at
    /// [`DOCKER_GATEWAY_INSIDE`] with `DOCKER_HOST` pointing there.
    #[serde(default)]
    pub docker_gateway: Option<PathBuf>,
    /// The launcher's filtering ssh-agent socket on the host, bound at [`SSH_AGENT_INSIDE`]
    /// (`SSH_AUTH_SOCK` names it there): the user's agent lists and signs, nothing more. Never
    /// the user's own agent socket, which would let the agent add keys or lock it.
    pub ssh_agent: Option<PathBuf>,
    /// The complete environment of the command (see `env::build`); nothing else is inherited.
    /// UTF-8 only (JSON-friendly); the CLI refuses non-UTF-8 arguments with a clear message.
    pub env: Vec<(String, String)>,
    /// The command and its arguments; `argv[0]` is looked up in the sandbox's `PATH`.
    pub argv: Vec<String>,
    /// Working directory inside; defaults to the project.
    pub cwd: Option<PathBuf>,
    /// `OCSB_SANDBOX`: false keeps the netlock gid and probes but builds no namespaces.
    pub namespaces: bool,
    /// How the process tree gets the netlock group, and how it is checked.
    pub netlock: Netlock,
    /// Landlock TCP ports (`None`: TCP is not restricted by landlock; the netlock still is).
    pub tcp: Option<TcpPorts>,
    /// Resource limits.
    pub limits: Limits,
    /// Whether to give the command a pty the launcher owns (auto: when stdin is a terminal).
    pub tty: TtyMode,
    /// `OCSB_RW_TOOL_FILES`: names of the tool files' registry (`ocsb_policy::toolfiles`) left
    /// writable: neither held, nor moved aside, nor reported, nor held back by the import gate.
    #[serde(default)]
    pub rw_tool_files: Vec<String>,
    /// Repositories nested in the writable checkouts, found by the launcher's walk
    /// ([`super::audit`]): checkouts of their own, each with an agent git directory and the
    /// checkout rule like the project's.
    #[serde(default)]
    pub nested_repos: Vec<PathBuf>,
    /// The tool files in the writable trees at any depth (`ocsb_policy::toolfiles`), found by
    /// the launcher's walk ([`super::audit`]) before the start: held read-only by the checkout
    /// rule's binds, and watched while the session runs. Whatever a spec file says here is
    /// replaced by the walk's.
    #[serde(default)]
    pub tool_files: crate::toolfiles::ToolFiles,
    /// Where the network comes from (`OCSB_NETWORK`).
    #[serde(default)]
    pub network: Network,
    /// The agent's own git directories, one per writable checkout that is a repository
    /// ([`crate::agentgit`]): inside, each checkout's `.git` is one of these, and no git
    /// directory of the user's is writable.
    #[serde(default)]
    pub agent_git: Vec<AgentGit>,
    /// The `.git` entries of writable checkouts that are no repository to git: read-only as
    /// they are ([`crate::agentgit::Made::read_only`]).
    #[serde(default)]
    pub git_read_only: Vec<PathBuf>,
    /// The checkout rule applied to this sandbox's checkouts (filled by `launch::prepare` from
    /// what it discovers; whatever a spec file says here is replaced).
    #[serde(default)]
    pub protect: Vec<Protection>,
    /// The directories holding the programs the user runs next on the host (ocsb's `bin`,
    /// `libexec/ocsb`, every `PATH` directory with an `ocsb`): no writable bind may hold one or
    /// be one of their entries (see [`crate::plan::exposes_program`]).
    #[serde(default)]
    pub programs: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TmpMode {
    /// `<state>/tmp` mounted on `/tmp`; files older than 7 days are removed on start.
    Private,
    /// The host's `/tmp` (and the sockets in it) is visible and writable.
    Shared,
}

/// `OCSB_TMP` says the same thing in the settings.
impl From<ocsb_policy::settings::TmpMode> for TmpMode {
    fn from(t: ocsb_policy::settings::TmpMode) -> Self {
        match t {
            ocsb_policy::settings::TmpMode::Private => TmpMode::Private,
            ocsb_policy::settings::TmpMode::Shared => TmpMode::Shared,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TtyMode {
    /// A launcher-owned pty when stdin is a terminal (`exec`, `shell`).
    Auto,
    /// No pty; if stdin is a terminal the command gets `/dev/null` instead (`run`: OpenCode
    /// serves the web UI and must not read the user's keyboard).
    Never,
}

/// Where the sandbox's network comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Network {
    /// The host's network namespace: the netlock keeps the sandbox to loopback and DNS, and
    /// landlock to the declared loopback ports.
    #[default]
    Host,
    /// A namespace of its own ([`crate::netns`]), served by the launcher; `forward`: the host
    /// loopback ports relayed to the same port inside (the filter's first).
    Isolated { forward: Vec<u16> },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Netlock {
    /// No netlock gid. Only for diagnostics and tests that build their own network namespace;
    /// the run/exec commands never choose this.
    Off,
    /// The command runs with real, effective and saved gid `gid`; the lock is probed before the
    /// command starts and every `probe_interval` while it runs; a failed probe kills it.
    Required { gid: u32, acquire: Acquire, probe_interval: Duration },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Acquire {
    /// The setgid shim `ocsb-netlock-exec` (mode 2755 root:G), called as `SHIM __sandbox-init`;
    /// it sets all three gids to G, closes fds above 2, sets no_new_privs and execs the `ocsb`
    /// of its own installation (`<prefix>/bin/ocsb`) with the same arguments and environment.
    Shim { path: PathBuf },
    /// `sg <group> -c 'exec <ocsb> __sandbox-init'` (needs group membership).
    Sg { group: String },
    /// The launcher already runs with gid G as real, effective and saved gid (tests, `sg` from
    /// the caller).
    Inherited,
}

/// The TCP ports the sandbox may connect to (landlock; binding stays free). The netlock keeps
/// every remote address out; these rules narrow what is left, the host's loopback, where
/// databases, sshd (with the user's ssh-agent in the sandbox, a shell on the host) and other
/// users' dev servers listen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpPorts {
    /// Single ports: the filter, DNS, OpenCode's own port, `OCSB_LOOPBACK_PORTS`.
    pub connect: Vec<u16>,
    /// Inclusive ranges: the kernel's ephemeral range, where a listener of the sandbox's own
    /// that asked for port 0 ends up (test servers, language tools), so it stays reachable.
    pub connect_ranges: Vec<(u16, u16)>,
}

/// The start of Linux's default ephemeral range (`ip_local_port_range` 32768–60999).
pub const EPHEMERAL_FLOOR: u16 = 32768;

impl TcpPorts {
    /// The rule: the filter, DNS, OpenCode, the ports the user declared, and the ephemeral range.
    pub fn for_sandbox(
        filter: u16,
        opencode: u16,
        declared: &[u16],
        ephemeral: Option<(u16, u16)>,
    ) -> TcpPorts {
        let mut connect = vec![filter, 53, opencode];
        connect.extend_from_slice(declared);
        connect.sort_unstable();
        connect.dedup();
        // A range an admin widened (`1024 65535`) would open nearly every loopback port: the rule
        // never reaches below the kernel's default start.
        let ranges = ephemeral.map(|(lo, hi)| (lo.max(EPHEMERAL_FLOOR), hi)).filter(|(lo, hi)| lo <= hi);
        TcpPorts { connect, connect_ranges: ranges.into_iter().collect() }
    }

    /// Every port the rule names, once.
    pub fn ports(&self) -> Vec<u16> {
        let mut all: Vec<u16> = self.connect.clone();
        for (lo, hi) in &self.connect_ranges {
            all.extend(*lo..=*hi);
        }
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// `/proc/sys/net/ipv4/ip_local_port_range` ("32768\t60999"), which IPv6 shares.
pub fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(|w| w.parse::<u16>().ok());
    match (it.next()??, it.next()??) {
        (lo, hi) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

/// A spec with nothing beyond the project, its state and the home: what unit tests start from.
#[cfg(test)]
pub(crate) fn minimal(project_dir: PathBuf, state_dir: PathBuf, home: PathBuf) -> SandboxSpec {
    SandboxSpec {
        project_dir,
        state_dir,
        home,
        home_ro: vec![],
        worktrees_dir: None,
        rw: vec![],
        rw_home: vec![],
        caches: vec![],
        hide: vec![],
        hide_home: vec![],
        tmp: TmpMode::Private,
        docker_socket: None,
        docker_gateway: None,
        ssh_agent: None,
        env: vec![],
        argv: vec!["true".into()],
        cwd: None,
        namespaces: true,
        netlock: Netlock::Off,
        network: Default::default(),
        tcp: None,
        limits: Limits::default(),
        tty: TtyMode::Never,
        rw_tool_files: vec![],
        nested_repos: vec![],
        tool_files: Default::default(),
        agent_git: vec![],
        git_read_only: vec![],
        protect: vec![],
        programs: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_rule_names_the_fixed_ports_and_the_ephemeral_range() {
        let t = TcpPorts::for_sandbox(3128, 4197, &[5432, 53], parse_port_range("32768\t60999\n"));
        assert_eq!(t.connect, [53, 3128, 4197, 5432]);
        assert_eq!(t.connect_ranges, [(32768, 60999)]);
        let ports = t.ports();
        assert_eq!(ports.len(), 4 + (60999 - 32768 + 1));
        assert!(!ports.contains(&22) && !ports.contains(&6379) && !ports.contains(&32767));
        let wide = TcpPorts::for_sandbox(3128, 4197, &[], parse_port_range("1024 65535"));
        assert_eq!(wide.connect_ranges, [(32768, 65535)], "never below the default start");
        assert_eq!(parse_port_range("9 8"), None);
        assert_eq!(parse_port_range("junk"), None);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    /// `RLIMIT_NPROC` (processes of this user in the sandbox's user namespace).
    pub nproc: u64,
    /// Size of the tmpfs mounts the sandbox creates (`/dev/shm`), in bytes.
    pub shm_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { nproc: 8192, shm_bytes: 1 << 30 }
    }
}

/// Host programs that must not run inside (the seed disables `xdg-open`).
pub const DISABLED_PROGRAMS: &[&str] = &["/usr/bin/xdg-open", "/bin/xdg-open"];

/// Where the Docker gateway's socket is inside the sandbox: where tools look first.
pub const DOCKER_GATEWAY_INSIDE: &str = "/run/docker.sock";

/// Where the launcher's filtering ssh-agent socket is inside the sandbox. A fixed path in the
/// sandbox's own `/run`: nothing of the user's agent (its socket's path) is named inside.
pub const SSH_AGENT_INSIDE: &str = "/run/ocsb/ssh-agent.sock";

/// Where the agent's git directories are inside (`<this>/<n>`), and the user's object
/// directories they borrow from, read-only (`<this>/objects/<k>`): the sandbox's own `/run`,
/// a path that exists nowhere on the host.
pub const AGENT_GIT_INSIDE: &str = "/run/ocsb/git";

/// One checkout's `.git` as the sandbox shows it: the agent's own git directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentGit {
    /// The checkout's `.git` on the host (a directory, or a `gitdir:` file of a linked
    /// worktree or submodule): covered inside.
    pub dot_git: PathBuf,
    /// The agent's git directory on the host (out of every writable root).
    pub gitdir: PathBuf,
    /// Where it is inside ([`AGENT_GIT_INSIDE`]`/<n>`).
    pub inside: PathBuf,
    /// For a `.git` file: the file bound read-only over it, saying `gitdir: <inside>`.
    pub pointer: Option<PathBuf>,
    /// The user's object directories, each with where it is bound read-only inside (the
    /// agent's `objects/info/alternates` names those paths).
    pub objects: Vec<(PathBuf, PathBuf)>,
}

/// Docker sockets hidden unless `docker_socket` is set.
pub const DOCKER_SOCKETS: &[&str] = &["/run/docker.sock", "/var/run/docker.sock"];

/// Entries of `~/.ssh` that stay visible; everything else there is absent.
pub fn ssh_entry_visible(name: &str) -> bool {
    ocsb_policy::home::ssh_visible(name)
}
