//! The command line: every clap definition of `ocsb`, and nothing else. Each subcommand has one
//! thin handler in `commands/`, which calls the module that does the work.
//!
//! The hidden subcommands (`__…`) are entry points for the launcher itself and for tests; they
//! grant nothing that `exec` or `run` do not. Only `__sandbox-init` (stage 2 of the sandbox) is
//! not here: it is dispatched before the command line is parsed (see `lib.rs`).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Exit codes, documented in `--help` and the README.
pub const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  the command failed (the message says why and how to fix it)
  2  bad command line
  3  bad input in a settings or rules file (the message names file and line)";

#[derive(Debug, Parser)]
#[command(
    name = "ocsb",
    version,
    about = "Let OpenCode work on your project with full permissions while its mistakes stay inside a sandbox",
    long_about = "Let OpenCode work on your project with full permissions (no \"allow this path?\" \
                  prompts) while its mistakes stay inside a sandbox: namespaces, landlock and seccomp \
                  for the filesystem, an egress filter for HTTP(S), and an nftables netlock that \
                  rejects everything the agent's processes send around the filter (with \
                  OCSB_DOCKER=1, not what Docker containers send).",
    after_help = EXIT_CODES,
    propagate_version = true
)]
pub struct Cli {
    /// The project directory (default: the git work tree containing the current directory, else
    /// the nearest ancestor with `.opencode-sandbox/`, else the current directory).
    #[arg(short = 'C', long = "project", global = true, value_name = "DIR")]
    pub project: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add `.opencode-sandbox/` and `.cc-safety-net/policy.json` to the current repository.
    ///
    /// Idempotent: files that exist are left as they are.
    #[command(after_help = EXIT_CODES)]
    Init,

    /// Print the effective settings (all five layers applied).
    #[command(after_help = EXIT_CODES)]
    Config(ConfigArgs),

    /// The egress filter: rules, rendering and decisions.
    #[command(subcommand)]
    Egress(EgressCommand),

    /// Worktrees: one session, one worktree, with the project's hooks.
    #[command(subcommand)]
    Wt(WtCommand),

    /// The network lock (nftables table `inet ocsb_netlock`, owned by ocsb-netlock-helper).
    #[command(subcommand)]
    Netlock(NetlockCommand),

    /// Check dependencies and host setup: one line per check (ok, warn, fail), each failure with
    /// the command that fixes it.
    ///
    /// Outside a project only the host is checked. Exit status 0 when no check failed, 1 otherwise.
    #[command(after_help = EXIT_CODES)]
    Doctor(DoctorArgs),

    /// Filter, netlock and self-tests, then OpenCode in the sandbox with the web UI on
    /// OCSB_WEB_PORT (4196): log in as `opencode` with the password from the state directory.
    ///
    /// Ctrl-C stops OpenCode and the web front; the egress filter keeps running.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),

    /// The web UI's login for this project: user, password and the file that keeps it
    /// (`<state>/password`, made at the first start).
    #[command(after_help = EXIT_CODES)]
    Password,

    /// Egress filter up, netlock verified, self-tests: what `run` does before OpenCode.
    ///
    /// The self-tests are not repeated while the rules, the filter, the netlock and ocsb are
    /// those they last passed with; `--retest` runs them anyway.
    #[command(after_help = EXIT_CODES)]
    Prepare(PrepareArgs),

    /// Run a command in the project's sandbox: the same policy as `run`, the filter started and
    /// the netlock checked first. The exit status is the command's.
    #[command(after_help = EXIT_CODES)]
    Exec(ExecArgs),

    /// An interactive shell (`$SHELL`) in the project's sandbox.
    #[command(after_help = EXIT_CODES)]
    Shell,

    /// The sandbox itself.
    #[command(subcommand)]
    Sandbox(SandboxCommand),

    /// Docker through the gateway (`OCSB_DOCKER=1`): what the project's sessions made.
    #[command(subcommand)]
    Docker(DockerCommand),

    /// What the project's model requests cost through the key broker: today (UTC) and in this
    /// (or the last) `ocsb run`, against `OCSB_SPEND_LIMIT`.
    #[command(after_help = EXIT_CODES)]
    Spend(JsonArg),

    /// List what a sandbox planted that host git or host tools would run (a nested repository,
    /// a new `.envrc`, …), and the agent's commits the import gate held back
    /// (`refs/ocsb/held/…`, each with why).
    ///
    /// Every sandbox start refuses while something planted stands; this command shows the same
    /// list. Held commits do not stop a start. Exit status 0 when nothing planted stands, 1
    /// otherwise.
    #[command(after_help = EXIT_CODES)]
    Audit(AuditArgs),

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// (internal) Run a command under an explicit sandbox spec (JSON), bypassing the settings:
    /// how `run` wraps the commands OpenCode starts, and what the escape tests and the start-up
    /// benchmark use.
    #[command(name = crate::session::replay::SANDBOX_RUN, hide = true)]
    SandboxRun {
        spec: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },

    /// (internal) The netlock probe, run as the locked group through the shim: prints
    /// `gids R E S locked|open|error MESSAGE`.
    #[command(name = crate::netlock::probe::NETLOCK_PROBE, hide = true)]
    NetlockProbe,

    /// (internal) Build an isolated sandbox's network in a namespace of its own, as stage 2
    /// would, and exit: 0, or 1 with the reason on stderr (`ocsb doctor`).
    #[command(name = crate::doctor::observe::ISOLATED_PROBE, hide = true)]
    IsolatedProbe,

    /// (internal) The Docker watcher a launcher with a gateway starts: waits until launcher
    /// PID is gone, then stops what its sessions left running (their journals in DIR).
    #[command(name = ocsb_docker_gw::WATCH, hide = true)]
    DockerWatch { pid: u32, dir: PathBuf },

    /// (internal) Write the guard plugin into DIR and print the `OPENCODE_CONFIG_CONTENT` that
    /// `run` would use (no skills), so tests start a real OpenCode with the launcher's permissions.
    #[command(name = crate::opencode::CONFIG_FOR_TESTS, hide = true)]
    OpencodeConfig { dir: PathBuf },

    /// (internal) The web front alone, in front of an OpenCode started by someone else (tests,
    /// debugging). Runs until SIGINT/SIGTERM.
    #[command(name = crate::web::FRONT_ALONE, hide = true)]
    WebFront(WebFrontArgs),
}

#[derive(Debug, Args)]
pub struct WebFrontArgs {
    #[arg(long)]
    pub listen: SocketAddr,
    /// OpenCode's address.
    #[arg(long)]
    pub upstream: SocketAddr,
    /// The front's login password.
    #[arg(long)]
    pub password_file: PathBuf,
    /// OpenCode's own password.
    #[arg(long)]
    pub upstream_password_file: PathBuf,
    /// Serve without the Tokens panel.
    #[arg(long)]
    pub no_panel: bool,
}

#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// Run the self-tests even when they passed before with the same inputs.
    #[arg(long)]
    pub retest: bool,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// What this host can enforce: namespaces, landlock ABI, seccomp, relevant sysctls.
    #[command(after_help = EXIT_CODES)]
    Status,
}

#[derive(Debug, Subcommand)]
pub enum DockerCommand {
    /// The project's containers and networks (labelled `dev.ocsb.project=NAME`), with the
    /// session that made each.
    #[command(after_help = EXIT_CODES)]
    Ls(JsonArg),
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// You made what is listed yourself: keep it and let sandboxes start again. Held commits are
    /// taken: a branch you do not have is made, one they descend from is fast-forwarded, and
    /// otherwise they go on a branch beside yours (`ocsb/<session>/<branch>`) for you to merge;
    /// nothing of yours is ever forced. (A checkout's `.git` that is a link cannot be accepted:
    /// it is found again while it holds.)
    #[arg(long)]
    pub accept: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print an array of `{"id", "status", "message", "fix"}` instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// Also say which layer (file and line) set each value.
    #[arg(long)]
    pub origin: bool,

    /// Accept the ways the committed `.opencode-sandbox/sandbox.conf` widens the sandbox (listed
    /// by `ocsb config`), so that `run` and `prepare` start with them. Asked again whenever they
    /// change.
    #[arg(long, conflicts_with = "origin")]
    pub trust: bool,
}

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Print what the filter is given: the squid.conf for the squid backend, the normalised
    /// rules for the builtin one (`--format` picks either).
    #[command(after_help = EXIT_CODES)]
    Render(RenderArgs),

    /// Say whether a request would pass the filter, and which rule decides it.
    ///
    /// The first word printed is `allow` or `deny`. The project's rule layers are read exactly as
    /// `run` reads them. No DNS lookup is made: pass `--resolve` with the addresses the name
    /// resolves to when the private-network rule matters.
    #[command(after_help = EXIT_CODES)]
    Explain(ExplainArgs),

    /// Propose rule lines for what the filter denied, from its access log.
    ///
    /// One `allow host` or `connect host:port` per denied request, with how often it was denied
    /// and the rule that denied it. Nothing is written: paste the lines you want into
    /// `.opencode-sandbox/local/egress.conf` (yours) or `.opencode-sandbox/egress.conf` (the
    /// project's), then run `ocsb egress up`.
    #[command(after_help = EXIT_CODES)]
    Suggest(JsonArg),

    #[command(flatten)]
    Lifecycle(LifecycleCommand),
}

/// The lifecycle subcommands of `ocsb egress` (flattened into the lead's `EgressCommand`).
#[derive(Debug, Subcommand)]
pub enum LifecycleCommand {
    /// Start the filter (builtin proxy or squid container), or reload its rules without a restart.
    ///
    /// Invalid rules are refused with file and line; a running filter keeps its old rules.
    #[command(after_help = EXIT_CODES)]
    Up,
    /// Stop and remove the filter.
    #[command(after_help = EXIT_CODES)]
    Down,
    /// Running or not, backend, listen addresses, and whether the rules are current or stale.
    #[command(after_help = EXIT_CODES)]
    Status(JsonArg),
    /// Follow every request and refusal; denials are highlighted.
    #[command(after_help = EXIT_CODES)]
    Logs(LogsArgs),
    /// Run every expect-pass / expect-block through the filter as the sandbox would, plus a
    /// check that a direct connection bypassing the filter is blocked.
    #[command(after_help = EXIT_CODES)]
    Verify(VerifyArgs),
    /// (internal) The builtin filter process that `egress up` starts.
    #[command(hide = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// One JSON object per request.
    #[arg(long)]
    pub json: bool,
    /// Print what is there and exit instead of following.
    #[arg(long)]
    pub no_follow: bool,
    /// Start with the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Skip the direct-connection (bypass) check.
    #[arg(long)]
    pub no_direct: bool,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// `squid`: the squid.conf; `rules`: the normalised rules the builtin proxy runs. Default:
    /// what the configured backend (OCSB_EGRESS_BACKEND) gets.
    #[arg(long, value_enum)]
    pub format: Option<RenderFormat>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum RenderFormat {
    Squid,
    Rules,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// An absolute URL (`https://host/path`), or with `--connect` a `host:port` authority.
    pub target: String,

    /// Treat TARGET as the authority of a CONNECT tunnel (`host:port`), as `git` over SSH or a
    /// Kubernetes client would send it through the proxy.
    #[arg(long)]
    pub connect: bool,

    /// An address the host name resolves to (repeatable). Without it a name that reaches the
    /// private-network check is treated as unresolved.
    #[arg(long = "resolve", value_name = "IP")]
    pub resolve: Vec<std::net::IpAddr>,

    /// Print `{"verdict", "rule", "source"}` as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WtCommand {
    /// Create `<OCSB_WORKTREES_DIR>/<OCSB_WT_PREFIX><slug>` on a new branch, then run
    /// `.opencode-sandbox/hooks/wt-post-add` in it.
    ///
    /// The branch starts from OCSB_WT_BASE (default: the current HEAD). The slug is the one
    /// capture group of OCSB_WT_SLUG_REGEX, or the branch name made path-safe. If the hook fails,
    /// the worktree and the branch are removed again. Prints the new worktree's path.
    #[command(after_help = EXIT_CODES)]
    Add {
        /// The new branch (refused: spaces, `..`, a leading `-`, control characters, `@{`).
        #[arg(allow_hyphen_values = true)]
        branch: String,
        /// Arguments for the wt-post-add hook.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },

    /// Run `.opencode-sandbox/hooks/wt-pre-rm` and remove a worktree; its branch is kept.
    ///
    /// Refuses if the worktree has uncommitted changes (untracked files count).
    #[command(after_help = EXIT_CODES)]
    Rm {
        /// The worktree: its slug (`42`), its directory name, or its path.
        name: String,
        /// Discard uncommitted changes.
        #[arg(long)]
        force: bool,
    },

    /// List the worktrees in OCSB_WORKTREES_DIR: slug, branch, clean/dirty, path.
    #[command(after_help = EXIT_CODES)]
    List,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Do not open the browser.
    #[arg(long)]
    pub no_browser: bool,
    /// Extra arguments for `opencode serve`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "OPENCODE ARGS")]
    pub opencode_args: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum NetlockCommand {
    /// Install the lock: ask the helper daemon to apply it (polkit may ask for an admin
    /// password), then verify it.
    Setup,
    /// Remove the lock (admin authentication); sandboxes refuse to start until `setup`.
    Teardown,
    /// The helper's status (table, gid, DNS servers) and the probe result.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check that the lock works: a datagram sent as the netlock group must be rejected with
    /// EPERM. Exit status 0 when it works, 1 when it does not.
    Verify {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}
