//! Settings: the five `sandbox.conf` layers, parsed — never executed.
//!
//! # Why the files are parsed, not sourced
//!
//! `.opencode-sandbox/sandbox.conf` is committed to the project, so it is written by whoever can
//! push to the repository, and the agent can edit it wherever it has write access (a worktree, a
//! checkout under `OCSB_RW`). ocsb reads it on the host, before and outside the sandbox. If ocsb
//! ran it with bash, editing a settings file would be a way to run any code on the host, outside
//! the very sandbox that the file configures. So the files keep bash syntax (existing files still
//! load, editors highlight them, `bash -n` still checks them) but ocsb reads them with its own
//! parser that understands only assignments: `NAME=value`, `NAME+=value`, `NAME=(a b)`, `NAME+=(c)`, quotes,
//! escapes, comments, line continuations, an optional `export`, and the expansions `$VAR` /
//! `${VAR}` of `HOME`, `OCSB_PROJECT_DIR` and already-set `OCSB_` settings and a leading `~`.
//! Everything that bash would evaluate — `$(…)`, backticks, `$((…))`, `${VAR:-x}`, `if`, `for`,
//! functions, `source`, redirections, pipes, `;`, `&&` — is an error naming the file, line and
//! column. Nothing in a settings file can make ocsb start a process or read another file.
//!
//! # Layers
//!
//! Later wins ([`Layer`]): package defaults → `<user_config_dir>/sandbox.conf` →
//! `<project>/.opencode-sandbox/sandbox.conf` → `<project>/.opencode-sandbox/local/sandbox.conf`
//! → `OCSB_<NAME>` environment variables (scalars only). Missing files are skipped. Every value
//! remembers the layer, file and line that set it ([`Origin`]), for `ocsb config --origin` and
//! for error messages.
//!
//! # Values
//!
//! After all layers, each value is checked (ports, names, booleans, enums, the slug regex, …)
//! and an error names the file, line and column where the bad value was written. Path settings
//! are then made absolute: `~/…` under HOME, relative paths against the project (`..` is kept,
//! not folded, so the kernel resolves it as written). A writable path that would open `/` or the
//! whole home directory is refused.
//!
//! # Decisions on the corners of bash
//!
//! * `export NAME=value` is accepted and means `NAME=value` (old files may have it); only one
//!   assignment may follow `export` (bash expands `export A=1 B=$A` before assigning A).
//! * `NAME+=value` appends to a scalar setting, as in bash. For an array setting it is an error:
//!   bash would append to the *first element*, which nobody means; write `NAME+=(value)`.
//!   `NAME=value` for an array setting is an error for the same reason (bash would replace only
//!   the first element), and `NAME=(…)` for a scalar setting too.
//! * Several assignments on one line (`A=1 B=2`) are accepted, as bash runs them in order.
//! * `NAME=(a)x` and `NAME=(a)#x` are errors: bash reads them as the *string* `(a)x`, not as an
//!   array; a comment after an array needs a blank before the `#`.
//! * Only `OCSB_` settings may be assigned; helper variables are an error (they would be shell
//!   state that this parser does not keep). `OCSB_PROJECT_DIR` is set by ocsb and cannot be
//!   assigned. An unknown `OCSB_` name is an error naming the closest known setting.
//! * `$OCSB_X` expands to the value so far (package default or an earlier assignment in this or an
//!   earlier file layer); environment values are applied after all files. `$OCSB_STATE_DIR` can
//!   only be used after a file set it: its default depends on `OCSB_NAME`, which a later layer
//!   may still change (the same holds for `OCSB_STATE_DIR+=…`). Array settings cannot be
//!   expanded (use `NAME+=(…)`).
//! * In an array, an unquoted expansion whose value holds blanks or glob characters is an error
//!   (bash would split or glob it); quote it. An unquoted expansion to nothing is dropped, as bash
//!   drops it. Unquoted `* ? [ {` in array elements are errors; in scalar values they are literal
//!   (bash does not glob assignments).
//! * A `~` is expanded only at the start of a word (`~`, `~/…`). For path settings, a value that
//!   still starts with `~/` (because it was quoted, or came from the environment) is resolved
//!   against HOME too: a directory named `~` in the project is never what is meant.
//! * Environment: `OCSB_<NAME>` for a scalar setting overrides it; for an array setting it is an
//!   error naming the variable (arrays cannot be passed through the environment). Unknown
//!   `OCSB_*` variables are errors too (a typo must not be silently ignored), except the names
//!   ocsb itself uses that are not settings: [`ENV_NOT_SETTINGS`] and the prefixes in
//!   [`ENV_INTERNAL_PREFIXES`].

mod lexer;
mod load;
mod parser;
pub mod print;
mod schema;
#[cfg(test)]
mod tests;
mod widen;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use schema::{HIDE_HOME, Kind, RW_HOME, SCHEMA, Spec};
pub use widen::{Widening, project_file, project_widenings};

use crate::{Error, Location, Result};

/// `OCSB_*` environment variables that are not settings and are ignored by the environment layer:
/// `OCSB_PROJECT_DIR` (ocsb sets it for hooks and children), `OCSB_NETNS_TESTS` (enables the
/// namespace tests), `OCSB_LOG` (log filter), `OCSB_SANDBOX_EARLY` (what the launcher starts stage 2
/// with).
pub const ENV_NOT_SETTINGS: &[&str] = &[
    "OCSB_PROJECT_DIR",
    "OCSB_NETNS_TESTS",
    "OCSB_LOG",
    "OCSB_SANDBOX_EARLY",
    // Set by `ocsb run` for OpenCode and the agent's shells: an `ocsb` started there must not
    // stop at them before it can say where it runs.
    "OCSB_WEB_URL",
    "OCSB_BLANK_ENV",
];

/// Prefixes of internal `OCSB_*` environment variables, ignored by the environment layer. New
/// internal variables must use one of them so that a typo in a setting's name is still caught.
pub const ENV_INTERNAL_PREFIXES: &[&str] = &["OCSB_INTERNAL_", "OCSB_TEST_"];

/// The layers, in the order they apply (later wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// Built into ocsb ([`SCHEMA`]).
    Defaults,
    /// `~/.config/opencode-sandbox/sandbox.conf`: yours, for all projects.
    User,
    /// `.opencode-sandbox/sandbox.conf`: the project's, committed.
    Project,
    /// `.opencode-sandbox/local/sandbox.conf`: yours, for this project, git-ignored.
    Local,
    /// `OCSB_<NAME>` environment variables: one run, scalars only.
    Environment,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Defaults => "defaults",
            Layer::User => "user",
            Layer::Project => "project",
            Layer::Local => "local",
            Layer::Environment => "environment",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the sandbox sees one `OCSB_RW_HOME` directory ([`Settings::home_dirs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// The host's directory, writable: what the agent writes there the host later reads.
    Shared,
    /// The project's own directory in its state directory (this name under `home-caches/`),
    /// mounted in its place: warm across the project's sessions, never seen by the host.
    Private(String),
    /// The host's directory, read-only.
    ReadOnly,
}

/// A setting's value: one string, or a bash array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Scalar(String),
    Array(Vec<String>),
}

/// Which layer set a value, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub layer: Layer,
    /// `file:line:column` of the assignment; `<package defaults>` or
    /// `environment variable OCSB_X` (line 0) for the other layers.
    pub at: Location,
}

impl fmt::Display for Origin {
    /// `project .opencode-sandbox/sandbox.conf:3`, `defaults`, `environment`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.layer {
            Layer::Defaults | Layer::Environment => write!(f, "{}", self.layer),
            _ => write!(f, "{} {}:{}", self.layer, self.at.file, self.at.line),
        }
    }
}

/// The effective value of one setting and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Value,
    pub origin: Origin,
}

/// What [`Settings::load`] reads. Explicit so that tests and the CLI control every input.
#[derive(Debug, Clone)]
pub struct LoadInput {
    pub home: PathBuf,
    /// The project's root (the git top level), absolute.
    pub project_dir: PathBuf,
    /// `~/.config/opencode-sandbox` (or `$XDG_CONFIG_HOME/opencode-sandbox`).
    pub user_config_dir: PathBuf,
    /// The process environment (only `OCSB_*` variables are looked at).
    pub env: Vec<(String, String)>,
}

impl LoadInput {
    /// The input for this process: HOME and XDG_CONFIG_HOME from the environment, and its
    /// `OCSB_*` variables.
    pub fn from_process(project_dir: PathBuf) -> Result<LoadInput> {
        let env_path = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = env_path("HOME").filter(|h| h.is_absolute()).ok_or_else(|| {
            Error::input(
                Location::new("environment variable HOME", 0, 0),
                "HOME is not set to an absolute path",
            )
            .with_hint("run ocsb from a normal login session")
        })?;
        let config =
            env_path("XDG_CONFIG_HOME").filter(|p| p.is_absolute()).unwrap_or_else(|| home.join(".config"));
        let mut env = Vec::new();
        for (k, v) in std::env::vars_os() {
            let Some(k) = k.to_str().filter(|k| k.starts_with("OCSB_")) else { continue };
            let v = v.into_string().map_err(|_| {
                Error::input(
                    Location::new(format!("environment variable {k}"), 0, 0),
                    "value is not valid UTF-8",
                )
            })?;
            env.push((k.to_string(), v));
        }
        Ok(LoadInput { home, project_dir, user_config_dir: config.join("opencode-sandbox"), env })
    }
}

/// The three file layers of an input, in order: user, project, local.
pub fn layer_files(input: &LoadInput) -> [(Layer, PathBuf); 3] {
    let dot = input.project_dir.join(".opencode-sandbox");
    [
        (Layer::User, input.user_config_dir.join("sandbox.conf")),
        (Layer::Project, dot.join("sandbox.conf")),
        (Layer::Local, dot.join("local").join("sandbox.conf")),
    ]
}

/// Which egress filter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressBackend {
    Builtin,
    Squid,
}

/// `OCSB_DOCKER`: what of Docker the agent gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerMode {
    /// No Docker socket in the sandbox.
    Off,
    /// The gateway: a Docker socket that lets through only what `crate::docker` allows.
    Gateway,
    /// The host's raw `docker.sock`: root on the host, traffic outside the filter.
    Raw,
}

/// `OCSB_SPEND_LIMIT`: what the project may spend on model requests, in USD, per day (UTC) and
/// per `ocsb run`. The model-key broker enforces it; without the broker there is nothing to
/// meter, so the launcher refuses a limit when no provider key is configured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SpendLimit {
    pub day: Option<f64>,
    pub session: Option<f64>,
}

impl SpendLimit {
    /// `""` (none), `DAY`, `DAY/SESSION` or `/SESSION`; each amount a plain decimal number.
    pub fn parse(v: &str) -> std::result::Result<SpendLimit, &'static str> {
        let amount = |s: &str| -> std::result::Result<Option<f64>, &'static str> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            let plain = s.chars().all(|c| c.is_ascii_digit() || c == '.') && s.matches('.').count() <= 1;
            match s.parse::<f64>() {
                Ok(f) if plain && f.is_finite() => Ok(Some(f)),
                _ => Err("an amount must be a plain decimal number of USD, like 5 or 0.50"),
            }
        };
        let (day, session) = match v.split_once('/') {
            Some((d, s)) => (amount(d)?, amount(s)?),
            None => (amount(v)?, None),
        };
        if v.contains('/') && session.is_none() {
            return Err("nothing after the /");
        }
        Ok(SpendLimit { day, session })
    }

    pub fn is_set(&self) -> bool {
        self.day.is_some() || self.session.is_some()
    }
}

/// `OCSB_NETWORK`: where the sandbox's network comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkMode {
    /// The host's network namespace; the netlock group keeps the sandbox to loopback and DNS.
    Netlock,
    /// The default: a network namespace of the sandbox's own with only `lo`; the launcher
    /// relays the filter, DNS, the forwarded ports and every other TCP connection (through the
    /// rules), and publishes the servers the agent starts.
    Isolated,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Netlock => "netlock",
            NetworkMode::Isolated => "isolated",
        }
    }
}

/// How the agent's process joins the netlock group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetlockAcquire {
    /// The setgid `ocsb-netlock-exec` shim.
    Exec,
    /// `sg(1)`.
    Sg,
}

/// `OCSB_TMP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmpMode {
    /// The agent's own /tmp in the state directory.
    Private,
    /// The host's /tmp (its sockets lead out of the sandbox).
    Shared,
}

/// The effective settings: every setting of [`SCHEMA`] has a validated value. Path settings are
/// absolute (the `*_HOME` lists stay relative to HOME in their values; their getters join them).
#[derive(Debug, Clone)]
pub struct Settings {
    entries: Vec<Entry>,
    project_dir: PathBuf,
    home: PathBuf,
    /// `<XDG_CONFIG_HOME>/opencode-sandbox`: where the user's own files are.
    user_config_dir: PathBuf,
}

/// The key file the broker reads when `OCSB_PROVIDER_KEYS` is not set, in the user's config
/// directory: one line, one file is the whole model setup.
pub const PROVIDER_KEYS_FILE: &str = "provider-keys";

impl Settings {
    /// Reads and evaluates the layers. Nothing is half-applied: an error anywhere returns no
    /// settings.
    pub fn load(input: &LoadInput) -> Result<Settings> {
        load::load(input)
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        schema::find(name).map(|(i, _)| &self.entries[i])
    }

    /// Every setting in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Entry)> {
        SCHEMA.iter().map(|s| s.name).zip(self.entries.iter())
    }

    /// The value of a scalar setting.
    ///
    /// # Panics
    /// If `name` is not a scalar setting of [`SCHEMA`] (a bug in the caller).
    pub fn scalar(&self, name: &str) -> &str {
        match self.get(name).map(|e| &e.value) {
            Some(Value::Scalar(s)) => s,
            _ => panic!("{name} is not a scalar setting"),
        }
    }

    /// The elements of an array setting.
    ///
    /// # Panics
    /// If `name` is not an array setting of [`SCHEMA`] (a bug in the caller).
    pub fn array(&self, name: &str) -> &[String] {
        match self.get(name).map(|e| &e.value) {
            Some(Value::Array(a)) => a,
            _ => panic!("{name} is not an array setting"),
        }
    }

    pub fn project_dir(&self) -> &Path {
        &self.project_dir
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `OCSB_NAME`: safe as a directory name and inside a container name.
    pub fn name(&self) -> &str {
        self.scalar("OCSB_NAME")
    }

    pub fn web_port(&self) -> u16 {
        self.port("OCSB_WEB_PORT")
    }

    /// OpenCode's own port: the web port + 1 (checked to exist when loading).
    pub fn opencode_port(&self) -> u16 {
        self.web_port() + 1
    }

    pub fn egress_port(&self) -> u16 {
        self.port("OCSB_EGRESS_PORT")
    }

    /// The OpenCode binary: an absolute path, or a bare name (default `opencode`) to look up in
    /// PATH.
    pub fn opencode_bin(&self) -> PathBuf {
        PathBuf::from(self.scalar("OCSB_OPENCODE_BIN"))
    }

    pub fn env_file(&self) -> Option<PathBuf> {
        self.opt_path("OCSB_ENV_FILE")
    }

    /// `OCSB_PROVIDER_KEYS`: the file of model-provider keys the broker adds on the way out;
    /// unset, [`Self::default_provider_keys`] when that file exists.
    pub fn provider_keys(&self) -> Option<PathBuf> {
        self.opt_path("OCSB_PROVIDER_KEYS").or_else(|| {
            let p = self.default_provider_keys();
            std::fs::symlink_metadata(&p).is_ok().then_some(p)
        })
    }

    /// `<user config dir>/provider-keys`: the key file a user makes without any setting.
    pub fn default_provider_keys(&self) -> PathBuf {
        self.user_config_dir.join(PROVIDER_KEYS_FILE)
    }

    /// `OCSB_SPEND_LIMIT` (checked when loading).
    pub fn spend_limit(&self) -> SpendLimit {
        SpendLimit::parse(self.scalar("OCSB_SPEND_LIMIT")).unwrap_or_default()
    }

    pub fn kubeconfig(&self) -> Option<PathBuf> {
        self.opt_path("OCSB_KUBECONFIG")
    }

    /// `OCSB_ENV` split into (KEY, VALUE).
    pub fn env_vars(&self) -> Vec<(String, String)> {
        self.array("OCSB_ENV")
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// `OCSB_LOOPBACK_PORTS` and `OCSB_FORWARD_PORTS` (one set under two names): the host
    /// loopback ports the agent may reach, each once, in order.
    pub fn loopback_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = ["OCSB_LOOPBACK_PORTS", "OCSB_FORWARD_PORTS"]
            .iter()
            .flat_map(|k| self.array(k).iter().filter_map(|p| schema::port_of(p)))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// `OCSB_PUBLISH` (checked when the settings were read; `0` if it somehow is not).
    pub fn publish(&self) -> crate::publish::Publish {
        crate::publish::Publish::parse(self.scalar("OCSB_PUBLISH")).unwrap_or(crate::publish::Publish::Off)
    }

    /// `OCSB_NETWORK`.
    pub fn network(&self) -> NetworkMode {
        if self.scalar("OCSB_NETWORK") == "netlock" { NetworkMode::Netlock } else { NetworkMode::Isolated }
    }

    pub fn rw(&self) -> Vec<PathBuf> {
        self.paths("OCSB_RW")
    }

    pub fn hide(&self) -> Vec<PathBuf> {
        self.paths("OCSB_HIDE")
    }

    /// `OCSB_RW_HOME` joined to HOME (the launcher mounts only those that exist).
    pub fn rw_home(&self) -> Vec<PathBuf> {
        self.array("OCSB_RW_HOME").iter().map(|p| self.home.join(p)).collect()
    }

    /// `OCSB_RW_HOME` joined to HOME, each with what the sandbox does with it (see
    /// [`schema::RW_HOME`]): with `OCSB_CACHES=private` an entry of the package's default list
    /// is the project's own copy ([`CacheUse::Private`]) or, for installed programs, read-only;
    /// an entry a layer adds is writable through, as asked.
    pub fn home_dirs(&self) -> Vec<(PathBuf, CacheUse)> {
        let private = self.scalar("OCSB_CACHES") != "shared";
        self.array("OCSB_RW_HOME")
            .iter()
            .map(|rel| {
                let default = RW_HOME.iter().any(|(d, _)| d == rel);
                let usage = if !private || !default {
                    CacheUse::Shared
                } else if schema::RUN_FROM.contains(&rel.as_str()) {
                    CacheUse::ReadOnly
                } else {
                    CacheUse::Private(rel.replace('/', "+"))
                };
                (self.home.join(rel), usage)
            })
            .collect()
    }

    /// `OCSB_HIDE_HOME` joined to HOME.
    pub fn hide_home(&self) -> Vec<PathBuf> {
        self.array("OCSB_HIDE_HOME").iter().map(|p| self.home.join(p)).collect()
    }

    /// `OCSB_SSH_KEYS`: the keys of the user's ssh-agent the sandbox may use (empty: all).
    pub fn ssh_keys(&self) -> crate::ssh_agent::Keys {
        crate::ssh_agent::Keys::named(self.array("OCSB_SSH_KEYS"))
    }

    /// `OCSB_RW_TOOL_FILES`: names of [`crate::toolfiles::REGISTRY`] left writable.
    pub fn rw_tool_files(&self) -> &[String] {
        self.array("OCSB_RW_TOOL_FILES")
    }

    pub fn skills(&self) -> &[String] {
        self.array("OCSB_SKILLS")
    }

    pub fn skill_dirs(&self) -> Vec<PathBuf> {
        self.paths("OCSB_SKILL_DIRS")
    }

    /// Plugin names (files of the package's plugins/) or absolute paths.
    pub fn plugins(&self) -> &[String] {
        self.array("OCSB_PLUGINS")
    }

    pub fn panel(&self) -> bool {
        self.flag("OCSB_PANEL")
    }

    pub fn notifications(&self) -> bool {
        self.flag("OCSB_NOTIFICATIONS")
    }

    pub fn tmp(&self) -> TmpMode {
        if self.scalar("OCSB_TMP") == "shared" { TmpMode::Shared } else { TmpMode::Private }
    }

    pub fn tmp_private(&self) -> bool {
        self.tmp() == TmpMode::Private
    }

    /// `OCSB_SANDBOX=1`: the filesystem sandbox is required (never silently skipped).
    pub fn sandbox_enabled(&self) -> bool {
        self.flag("OCSB_SANDBOX")
    }

    pub fn worktrees_dir(&self) -> PathBuf {
        PathBuf::from(self.scalar("OCSB_WORKTREES_DIR"))
    }

    pub fn wt_prefix(&self) -> &str {
        self.scalar("OCSB_WT_PREFIX")
    }

    /// The branch new worktrees start from; `None` = the current HEAD.
    pub fn wt_base(&self) -> Option<&str> {
        Some(self.scalar("OCSB_WT_BASE")).filter(|s| !s.is_empty())
    }

    /// The slug regex (exactly one capture group, checked when loading); `None` if unset.
    #[allow(clippy::expect_used, reason = "validated when the settings were loaded")]
    pub fn wt_slug_regex(&self) -> Option<regex::Regex> {
        let r = self.scalar("OCSB_WT_SLUG_REGEX");
        (!r.is_empty()).then(|| regex::Regex::new(r).expect("checked when loading"))
    }

    /// The global OpenCode config; `None` = `~/.config/opencode-sandbox/opencode.jsonc` if it
    /// exists, else the package's (the launcher decides, this crate does not probe files).
    pub fn opencode_config(&self) -> Option<PathBuf> {
        self.opt_path("OCSB_OPENCODE_CONFIG")
    }

    pub fn state_dir(&self) -> PathBuf {
        PathBuf::from(self.scalar("OCSB_STATE_DIR"))
    }

    pub fn netlock_group(&self) -> &str {
        self.scalar("OCSB_NETLOCK_GROUP")
    }

    /// Where containers reach the filter; `None` = the address of docker0.
    #[allow(clippy::expect_used, reason = "validated when the settings were loaded")]
    pub fn docker_gw(&self) -> Option<IpAddr> {
        let v = self.scalar("OCSB_DOCKER_GW");
        (!v.is_empty()).then(|| v.parse().expect("checked when loading"))
    }

    pub fn egress_backend(&self) -> EgressBackend {
        if self.scalar("OCSB_EGRESS_BACKEND") == "squid" {
            EgressBackend::Squid
        } else {
            EgressBackend::Builtin
        }
    }

    /// `OCSB_DOCKER_CLEANUP=1`: the gateway removes what a session made when it ends.
    pub fn docker_cleanup(&self) -> bool {
        self.flag("OCSB_DOCKER_CLEANUP")
    }

    /// `OCSB_DOCKER`: `0` (none), `1` (the gateway, the default) or `raw` (the host's socket).
    pub fn docker(&self) -> DockerMode {
        match self.scalar("OCSB_DOCKER") {
            "0" => DockerMode::Off,
            "raw" => DockerMode::Raw,
            _ => DockerMode::Gateway,
        }
    }

    pub fn netlock_acquire(&self) -> NetlockAcquire {
        if self.scalar("OCSB_NETLOCK_ACQUIRE") == "sg" { NetlockAcquire::Sg } else { NetlockAcquire::Exec }
    }

    #[allow(clippy::expect_used, reason = "validated when the settings were loaded")]
    fn port(&self, name: &str) -> u16 {
        schema::port_of(self.scalar(name)).expect("checked when loading")
    }

    fn flag(&self, name: &str) -> bool {
        self.scalar(name) == "1"
    }

    fn opt_path(&self, name: &str) -> Option<PathBuf> {
        Some(self.scalar(name)).filter(|s| !s.is_empty()).map(PathBuf::from)
    }

    fn paths(&self, name: &str) -> Vec<PathBuf> {
        self.array(name).iter().map(PathBuf::from).collect()
    }
}
