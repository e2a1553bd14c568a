//! The table of settings: names, kinds, defaults, meaning, and how each value is checked.
//!
//! The order of [`SCHEMA`] is the order of the seed's table (plus the settings added by later
//! issues at the end); `ocsb config` prints in this order.

use std::net::IpAddr;

use crate::{Error, Location, Result};

/// A single value or a bash array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Scalar,
    Array,
}

/// How a value names a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paths {
    /// Not a path.
    No,
    /// A path: `~/…` is under HOME, a relative path is relative to the project.
    Project,
    /// Paths relative to HOME (the `*_HOME` lists); kept relative in the value.
    Home,
    /// A command: a bare name is looked up in PATH by the launcher; anything with a `/` is a
    /// path resolved like [`Paths::Project`].
    Command,
}

/// Where a default comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DefaultValue {
    Str(&'static str),
    List(&'static [&'static str]),
    /// A list where each element carries the reason it is there.
    Documented(&'static [(&'static str, &'static str)]),
    /// The project directory's name, made safe for a directory and a container name.
    ProjectName,
    /// `../<project directory name>-worktrees`.
    WorktreesDir,
    /// `~/.local/share/opencode-sandbox/<OCSB_NAME>`: computed after all layers, so that
    /// setting `OCSB_NAME` in any layer moves the default state directory with it.
    StateDir,
}

/// How a value (or each element of an array) is validated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Check {
    Any,
    NonEmpty,
    Name,
    /// A port whose successor is also a port (OpenCode listens on web port + 1).
    WebPort,
    Port,
    Bool,
    OneOf(&'static [&'static str]),
    SlugRegex,
    EnvPair,
    Group,
    WtPrefix,
    GitRef,
    IpOrEmpty,
    HomeRelative,
    SkillName,
    Plugin,
    /// A name of [`crate::toolfiles::REGISTRY`].
    ToolFile,
    /// `OCSB_SPEND_LIMIT`: empty, `DAY`, `DAY/SESSION` or `/SESSION` (USD amounts).
    SpendLimit,
    Publish,
    /// A key fingerprint as `ssh-add -l` prints it (`SHA256:…`).
    SshKey,
}

/// One setting of the table.
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    /// The default as the README shows it.
    pub default_doc: &'static str,
    pub meaning: &'static str,
    pub(crate) default: DefaultValue,
    pub(crate) check: Check,
    pub(crate) paths: Paths,
}

const fn spec(
    name: &'static str,
    kind: Kind,
    default: DefaultValue,
    default_doc: &'static str,
    check: Check,
    paths: Paths,
    meaning: &'static str,
) -> Spec {
    Spec { name, kind, default_doc, meaning, default, check, paths }
}

use Check as C;
use DefaultValue as D;
use Kind::{Array, Scalar};

/// Every setting, in table order.
#[rustfmt::skip]
pub static SCHEMA: &[Spec] = &[
    spec("OCSB_NAME", Scalar, D::ProjectName, "project directory name", C::Name, Paths::No,
        "name of the state directory and the filter container"),
    spec("OCSB_WEB_PORT", Scalar, D::Str("4196"), "4196", C::WebPort, Paths::No,
        "web UI port; OpenCode itself listens on the next one"),
    spec("OCSB_EGRESS_PORT", Scalar, D::Str("3128"), "3128", C::Port, Paths::No,
        "filter port on 127.0.0.1 and the docker0 gateway"),
    spec("OCSB_OPENCODE_BIN", Scalar, D::Str("opencode"), "opencode from PATH", C::NonEmpty, Paths::Command,
        "OpenCode 2 binary"),
    spec("OCSB_ENV_FILE", Scalar, D::Str(""), "—", C::Any, Paths::Project,
        "KEY=VALUE file with tokens for MCP servers (for OpenCode, blanked in the agent's shells); ANTHROPIC_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY in it go to the key broker"),
    spec("OCSB_KUBECONFIG", Scalar, D::Str(""), "—", C::Any, Paths::Project,
        "kubeconfig for the agent (~/.kube/config stays hidden)"),
    spec("OCSB_ENV", Array, D::List(&[]), "()", C::EnvPair, Paths::No, "extra KEY=VALUE for OpenCode"),
    spec("OCSB_LOOPBACK_PORTS", Array, D::List(&[]), "()", C::Port, Paths::No,
        "host loopback TCP ports the agent may connect to (besides the filter, DNS and OpenCode)"),
    spec("OCSB_FORWARD_PORTS", Array, D::List(&[]), "()", C::Port, Paths::No,
        "the same, by its isolated-mode name: host loopback ports relayed to the same port inside"),
    spec("OCSB_PUBLISH", Scalar, D::Str("auto"), "auto", C::Publish, Paths::No,
        "isolated mode: servers the agent starts, served on the host's 127.0.0.1 at the same port while they listen; auto, 0 (none), or ports: 3000,8080"),
    spec("OCSB_NETWORK", Scalar, D::Str("isolated"), "isolated", C::OneOf(&["isolated", "netlock"]), Paths::No,
        "isolated: the sandbox's own network namespace, everything out through the filter; netlock: the host's network, locked by the netlock group"),
    spec("OCSB_RW", Array, D::List(&[]), "()", C::NonEmpty, Paths::Project, "extra writable paths"),
    spec("OCSB_HIDE", Array, D::List(&[]), "()", C::NonEmpty, Paths::Project, "extra hidden paths"),
    spec("OCSB_RW_HOME", Array, D::Documented(RW_HOME), ".cache .npm .asdf .bundle .gem …", C::HomeRelative,
        Paths::Home, "writable toolchain directories in ~ (if they exist; the default ones, with OCSB_CACHES=private, always: the project's own copies)"),
    spec("OCSB_CACHES", Scalar, D::Str("private"), "private", C::OneOf(&["private", "shared"]), Paths::No,
        "private: the default OCSB_RW_HOME caches are the project's own and .asdf, .gem read-only; shared: the agent writes to yours"),
    spec("OCSB_HIDE_HOME", Array, D::Documented(HIDE_HOME), ".gnupg .aws .kube/config .claude …",
        C::HomeRelative, Paths::Home, "hidden paths in ~"),
    spec("OCSB_SKILLS", Array, D::List(&["opencode-sandbox"]), "(opencode-sandbox)", C::SkillName, Paths::No,
        "skills mounted for the agent"),
    spec("OCSB_SKILL_DIRS", Array, D::List(&[]), "()", C::NonEmpty, Paths::Project,
        "extra directories with skills"),
    spec("OCSB_PLUGINS", Array, D::List(&["skill-compact-resurrect"]), "(skill-compact-resurrect)", C::Plugin,
        Paths::No, "plugin files from plugins/ (or absolute paths)"),
    spec("OCSB_PANEL", Scalar, D::Str("1"), "1", C::Bool, Paths::No, "\"Tokens\" panel in the web UI"),
    spec("OCSB_NOTIFICATIONS", Scalar, D::Str("1"), "1", C::Bool, Paths::No,
        "desktop notifications through a filtered D-Bus proxy"),
    spec("OCSB_TMP", Scalar, D::Str("private"), "private", C::OneOf(&["private", "shared"]), Paths::No,
        "private: the agent's own /tmp in the state directory; shared: the host's /tmp"),
    spec("OCSB_SANDBOX", Scalar, D::Str("1"), "1", C::Bool, Paths::No,
        "0 = filter and netlock only, no filesystem sandbox"),
    spec("OCSB_WORKTREES_DIR", Scalar, D::WorktreesDir, "../<project>-worktrees", C::NonEmpty, Paths::Project,
        "where worktrees go"),
    spec("OCSB_WT_PREFIX", Scalar, D::Str(""), "—", C::WtPrefix, Paths::No,
        "worktree directory = <prefix><slug>"),
    spec("OCSB_WT_BASE", Scalar, D::Str(""), "current HEAD", C::GitRef, Paths::No,
        "branch new worktrees start from"),
    spec("OCSB_WT_SLUG_REGEX", Scalar, D::Str(""), "—", C::SlugRegex, Paths::No,
        "regex with one group: slug from the branch name"),
    spec("OCSB_OPENCODE_CONFIG", Scalar, D::Str(""),
        "~/.config/opencode-sandbox/opencode.jsonc or the package's", C::Any, Paths::Project,
        "global OpenCode config"),
    spec("OCSB_STATE_DIR", Scalar, D::StateDir, "~/.local/share/opencode-sandbox/<name>", C::NonEmpty,
        Paths::Project, "state directory"),
    spec("OCSB_NETLOCK_GROUP", Scalar, D::Str("opencode-sandbox"), "opencode-sandbox", C::Group, Paths::No,
        "netlock group"),
    spec("OCSB_DOCKER_GW", Scalar, D::Str(""), "address of docker0", C::IpOrEmpty, Paths::No,
        "where containers reach the filter"),
    spec("OCSB_EGRESS_BACKEND", Scalar, D::Str("builtin"), "builtin", C::OneOf(&["builtin", "squid"]), Paths::No,
        "egress filter: builtin proxy, or squid in Docker"),
    spec("OCSB_DOCKER", Scalar, D::Str("1"), "1", C::OneOf(&["0", "1", "raw"]), Paths::No,
        "1 = Docker through the gateway (its policy: the README's Docker section); raw = the host's socket (a way out); 0 = none"),
    spec("OCSB_DOCKER_CLEANUP", Scalar, D::Str("0"), "0", C::Bool, Paths::No,
        "1 = remove the containers and networks a session made through the Docker gateway when it ends"),
    spec("OCSB_NETLOCK_ACQUIRE", Scalar, D::Str("exec"), "exec", C::OneOf(&["exec", "sg"]), Paths::No,
        "how the agent joins the netlock group: the setgid exec shim, or sg(1)"),
    spec("OCSB_RW_TOOL_FILES", Array, D::List(&[]), "()", C::ToolFile, Paths::No,
        "files that host tools act on (.envrc .vscode .idea …) the agent may write anyway"),
    spec("OCSB_PROVIDER_KEYS", Scalar, D::Str(""), "~/.config/opencode-sandbox/provider-keys if it exists", C::Any, Paths::Project,
        "model-provider keys, one `<provider> <key> [<base URL>]` per line: kept outside the sandbox, added by the broker"),
    spec("OCSB_SPEND_LIMIT", Scalar, D::Str(""), "no limit", C::SpendLimit, Paths::No,
        "USD the project may spend on model requests per day (UTC), and after a / per `ocsb run`: 5, 5/1 or /1"),
    spec("OCSB_HOME", Array, D::List(&[]), "()", C::HomeRelative, Paths::Home,
        "paths in ~ the agent may read (besides toolchains, shell startup files and ~/.ssh's public half); the rest of ~ is absent"),
    spec("OCSB_SSH_KEYS", Array, D::List(&[]), "() = all", C::SshKey, Paths::No,
        "the keys of your ssh-agent the agent may list and sign with, by fingerprint (SHA256:… as `ssh-add -l` prints it); it can never add, remove or lock"),
];

/// Default writable toolchain directories under HOME (with `OCSB_CACHES=private` mounted also
/// where the host has none, so a tool on a fresh home can write its cache).
///
/// These are download caches and package stores that builds inside the sandbox fill. A writable
/// directory that the host later *executes from* is a way to plant code outside the sandbox, so
/// binaries and toolchains the host runs on every call (`.cargo/bin`, `.rustup`, `.local/bin`)
/// are deliberately absent. The caches themselves hold code the host runs later too (a build
/// script in `.cargo/registry/src`, a hook repository in `.cache/pre-commit`, pnpm's store
/// hard-linked into every project), so with `OCSB_CACHES=private` (the default) the sandbox gets
/// the project's own copy of each ([`CacheUse`](super::CacheUse)); `.asdf` and `.gem`, in the seed's list, hold
/// installed programs and stay visible read-only.
pub static RW_HOME: &[(&str, &str)] = &[
    (".cache", "XDG cache: pip, uv, go-build, node-gyp, Playwright browsers, …"),
    (".npm", "npm's download cache"),
    (".asdf", "asdf installs runtime versions on demand (seed default; read-only unless OCSB_CACHES=shared)"),
    (".bundle", "Bundler cache and config"),
    (".gem", "RubyGems user installs (seed default; read-only unless OCSB_CACHES=shared)"),
    (".cargo/registry", "crates downloaded by cargo (not .cargo/bin or credentials)"),
    (".cargo/git", "git dependencies checked out by cargo"),
    (".m2/repository", "Maven's local repository (not settings.xml, which holds passwords)"),
    (".gradle/caches", "Gradle's dependency cache (not gradle.properties, which holds tokens)"),
    (".gradle/wrapper", "Gradle distributions downloaded by the wrapper"),
    (".local/share/pnpm", "pnpm's content-addressed store"),
    (".yarn/berry", "Yarn 2+ global cache"),
    (".bun/install/cache", "bun's package cache"),
    (".deno", "Deno's module cache"),
    ("go/pkg/mod", "Go module cache"),
    (".nuget/packages", ".NET NuGet package cache"),
    (".pub-cache", "Dart/Flutter package cache"),
    (".ivy2/cache", "Ivy/sbt dependency cache"),
    (".cabal/packages", "Haskell cabal package downloads"),
];

/// Default `OCSB_RW_HOME` entries that hold programs the host runs (runtimes, shims, gems):
/// with private caches they are read-only, so the agent can use them but change nothing.
pub const RUN_FROM: &[&str] = &[".asdf", ".gem"];

/// Default hidden paths under HOME: what an agent must not read.
///
/// Credentials that would let a mistake reach production or other accounts, keys, other agents'
/// configs and tokens, browser profiles (cookies are logins), and shell histories (pasted
/// secrets). `~/.ssh` private keys are hidden separately by the sandbox (config, known_hosts and
/// `*.pub` stay visible). Hidden wins over writable where both name a path.
pub static HIDE_HOME: &[(&str, &str)] = &[
    (".gnupg", "GnuPG private keys"),
    (".password-store", "pass(1) password store"),
    (".local/share/keyrings", "GNOME keyring (saved passwords, tokens)"),
    (".pki", "NSS certificate and key database (Chromium, curl with NSS)"),
    (".aws", "AWS credentials and SSO cache"),
    (".azure", "Azure CLI tokens"),
    (".config/gcloud", "Google Cloud credentials"),
    (".oci", "Oracle Cloud API keys"),
    (".config/doctl", "DigitalOcean token"),
    (".config/hcloud", "Hetzner Cloud token"),
    (".kube/config", "cluster credentials (give the agent one with OCSB_KUBECONFIG)"),
    (".docker/config.json", "registry logins"),
    (".dockercfg", "legacy registry logins"),
    (".netrc", "HTTP/FTP passwords used by curl, git, pip"),
    (".git-credentials", "git credential-store passwords"),
    (".config/git/credentials", "git credential-store passwords (XDG location)"),
    (".config/gh", "GitHub CLI token"),
    (".config/hub", "hub token"),
    (".config/glab-cli", "GitLab CLI token"),
    (".npmrc", "npm registry tokens"),
    (".yarnrc.yml", "Yarn registry tokens"),
    (".pypirc", "PyPI upload token"),
    (".gem/credentials", "RubyGems API key (.gem itself is writable)"),
    (".cargo/credentials.toml", "crates.io token"),
    (".cargo/credentials", "crates.io token (old name)"),
    (".m2/settings.xml", "Maven repository passwords"),
    (".m2/settings-security.xml", "Maven master password"),
    (".gradle/gradle.properties", "Gradle publishing tokens"),
    (".vault-token", "HashiCorp Vault token"),
    (".terraform.d/credentials.tfrc.json", "Terraform Cloud token"),
    (".config/rclone", "rclone remotes with credentials"),
    (".s3cfg", "s3cmd keys"),
    (".boto", "boto/gsutil keys"),
    (".config/sops/age", "age keys that decrypt sops secrets"),
    (".config/op", "1Password CLI session"),
    (".config/Bitwarden CLI", "Bitwarden CLI vault"),
    (".cache/huggingface/token", "Hugging Face token (.cache itself is writable)"),
    (".huggingface/token", "Hugging Face token (old location)"),
    (".pgpass", "PostgreSQL passwords"),
    (".my.cnf", "MySQL passwords"),
    (".claude", "Claude Code credentials and history"),
    (".claude.json", "Claude Code account and MCP tokens"),
    (".codex", "Codex CLI credentials"),
    (".gemini", "Gemini CLI credentials"),
    (".cursor", "Cursor credentials and MCP config"),
    (".aider.conf.yml", "aider API keys"),
    (".config/github-copilot", "Copilot tokens"),
    (".config/opencode", "your own OpenCode config (the sandbox uses its own)"),
    (".local/share/opencode", "your own OpenCode data: auth.json holds provider keys"),
    (".mozilla", "Firefox profiles: cookies are logins"),
    (".thunderbird", "mail profiles"),
    (".config/google-chrome", "Chrome profiles: cookies are logins"),
    (".config/chromium", "Chromium profiles"),
    (".config/BraveSoftware", "Brave profiles"),
    (".config/microsoft-edge", "Edge profiles"),
    (".config/vivaldi", "Vivaldi profiles"),
    (".Xauthority", "X11 cookie: would let programs reach your desktop"),
    (".bash_history", "shell history (pasted secrets)"),
    (".zsh_history", "shell history (pasted secrets)"),
    (".local/share/fish/fish_history", "shell history (pasted secrets)"),
    (".python_history", "REPL history"),
    (".psql_history", "SQL history"),
    (".mysql_history", "SQL history"),
];

/// The spec of a setting by name.
pub fn find(name: &str) -> Option<(usize, &'static Spec)> {
    SCHEMA.iter().enumerate().find(|(_, s)| s.name == name)
}

/// The known name closest to `name`, for "did you mean".
pub(crate) fn closest(name: &str) -> &'static str {
    SCHEMA.iter().map(|s| (distance(name, s.name), s.name)).min().map_or("OCSB_NAME", |(_, n)| n)
}

fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            row.push(sub.min(prev[j + 1] + 1).min(row[j] + 1));
        }
        prev = row;
    }
    prev[b.len()]
}

/// Checks one value (a scalar, or one array element) of setting `s`. `at` is where it was set.
pub(crate) fn check(s: &Spec, v: &str, at: &Location) -> Result<()> {
    let bad = |what: String, hint: &str| {
        Err(Error::input(at.clone(), format!("{}: {what}", s.name)).with_hint(hint))
    };
    match s.check {
        C::Any => Ok(()),
        C::NonEmpty if v.is_empty() => bad("empty value".into(), "give a path, or remove the line"),
        C::NonEmpty => Ok(()),
        C::Name => check_name(v).or_else(|why| {
            bad(
                format!("`{v}` is not a safe name: {why}"),
                "use letters, digits, `_`, `.` and `-`, starting with a letter or digit (it names a directory and a container)",
            )
        }),
        C::WebPort => match port(v) {
            Some(65535) => bad(
                "65535 leaves no port for OpenCode, which listens on the web port + 1".into(),
                "choose a port from 1 to 65534",
            ),
            Some(_) => Ok(()),
            None => bad(format!("`{v}` is not a port"), "choose a number from 1 to 65534"),
        },
        C::Port => match port(v) {
            Some(_) => Ok(()),
            None => bad(format!("`{v}` is not a port"), "choose a number from 1 to 65535"),
        },
        C::Bool if v == "0" || v == "1" => Ok(()),
        C::Bool => bad(format!("`{v}` is not 0 or 1"), "write 1 (on) or 0 (off)"),
        C::OneOf(set) if set.contains(&v) => Ok(()),
        C::OneOf(set) => bad(format!("`{v}` is not one of {}", set.join(", ")), &format!("write one of: {}", set.join(" "))),
        C::SlugRegex if v.is_empty() => Ok(()),
        C::SlugRegex => match regex::Regex::new(v) {
            Ok(r) if r.captures_len() == 2 => Ok(()),
            Ok(r) => bad(
                format!("the regex has {} capture groups; it needs exactly one (the slug)", r.captures_len() - 1),
                "e.g. 'SHOP-([0-9]+)'; use (?:…) for groups that are not the slug",
            ),
            Err(e) => bad(format!("invalid regex: {e}"), "the syntax is that of the Rust regex crate"),
        },
        C::EnvPair => match v.split_once('=') {
            Some((k, _)) if is_env_name(k) => Ok(()),
            _ => bad(format!("`{v}` is not KEY=VALUE"), "e.g. OCSB_ENV=(\"SHOP_ENV=dev\")"),
        },
        C::Group if is_group(v) => Ok(()),
        C::Group => bad(format!("`{v}` is not a valid group name"), "e.g. opencode-sandbox"),
        C::WtPrefix if v.is_empty() || (check_name(v).is_ok()) => Ok(()),
        C::WtPrefix => bad(
            format!("`{v}` is not a safe prefix for a directory name"),
            "use letters, digits, `_`, `.` and `-` and no `/` (the worktree stays in OCSB_WORKTREES_DIR)",
        ),
        C::GitRef if v.starts_with('-') => bad(
            format!("`{v}` starts with `-` and would be read by git as an option"),
            "name a branch, tag or commit",
        ),
        C::GitRef if v.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            bad(format!("`{v}` contains blanks or control characters"), "name a branch, tag or commit")
        }
        C::GitRef => Ok(()),
        C::IpOrEmpty if v.is_empty() || v.parse::<IpAddr>().is_ok() => Ok(()),
        C::IpOrEmpty => bad(format!("`{v}` is not an IP address"), "e.g. 172.17.0.1, or empty to use docker0's"),
        C::HomeRelative => check_home_relative(v).or_else(|why| {
            bad(format!("`{v}` {why}"), "name a path relative to your home directory, e.g. .cache; use OCSB_RW or OCSB_HIDE for other paths")
        }),
        C::SkillName if check_name(v).is_ok() => Ok(()),
        C::SkillName => bad(
            format!("`{v}` is not a skill name"),
            "name a directory of skills/ or of OCSB_SKILL_DIRS; add directories to OCSB_SKILL_DIRS",
        ),
        C::Plugin if v.starts_with('/') || check_name(v).is_ok() => Ok(()),
        C::Plugin => bad(format!("`{v}` is neither a plugin name nor an absolute path"), "name a file of plugins/, or give an absolute path"),
        C::ToolFile if crate::toolfiles::is_name(v) => Ok(()),
        C::ToolFile => {
            let names = crate::toolfiles::names();
            bad(format!("`{v}` is not a protected tool file"), &format!("write one of: {}", names.join(" ")))
        }
        C::Publish => match crate::publish::Publish::parse(v) {
            Ok(_) => Ok(()),
            Err(why) => bad(format!("`{v}` is not auto, 0 or a list of ports: {why}"), "write auto, 0, or ports such as 3000,8080"),
        },
        C::SshKey if crate::ssh_agent::is_fingerprint(v) => Ok(()),
        C::SshKey => bad(
            format!("`{v}` is not an ssh key fingerprint"),
            "write it as `ssh-add -l` prints it: SHA256: and 43 characters",
        ),
        C::SpendLimit => match super::SpendLimit::parse(v) {
            Ok(_) => Ok(()),
            Err(why) => bad(
                format!("`{v}` is not a spend limit: {why}"),
                "write USD per day, per day/per run, or /per run: 5, 5/1.50 or /2; empty for none",
            ),
        },
    }
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]*`, at most 64 characters, no `..`: safe as one directory name and
/// as part of a Docker container name.
pub(crate) fn check_name(v: &str) -> std::result::Result<(), &'static str> {
    let mut chars = v.chars();
    match chars.next() {
        None => return Err("it is empty"),
        Some(c) if !c.is_ascii_alphanumeric() => return Err("it must start with a letter or a digit"),
        _ => {}
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err("it may hold only letters, digits, `_`, `.` and `-`");
    }
    if v.contains("..") {
        return Err("it must not contain `..`");
    }
    if v.len() > 64 {
        return Err("it is longer than 64 characters");
    }
    Ok(())
}

/// The default name: the project directory's name with unsafe characters replaced by `-`.
pub(crate) fn sanitize_name(dir_name: &str) -> String {
    let mut s: String = dir_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '-' })
        .collect();
    while s.contains("..") {
        s = s.replace("..", ".");
    }
    let s = s.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    s.chars().take(64).collect()
}

fn port(v: &str) -> Option<u16> {
    if v.is_empty() || v.len() > 5 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u16>().ok().filter(|p| *p != 0)
}

fn is_env_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The portable user/group name set (useradd's default): `[a-z_][a-z0-9_-]*[$]?`, ≤ 32.
fn is_group(v: &str) -> bool {
    let body = v.strip_suffix('$').unwrap_or(v);
    let mut c = body.chars();
    v.len() <= 32
        && c.next().is_some_and(|f| f.is_ascii_lowercase() || f == '_')
        && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_' || x == '-')
}

fn check_home_relative(v: &str) -> std::result::Result<(), &'static str> {
    if v.is_empty() {
        return Err("is empty");
    }
    if v.starts_with('/') || v.starts_with('~') {
        return Err("is not relative to the home directory");
    }
    if v.split('/').any(|c| c == "..") {
        return Err("leaves the home directory with `..`");
    }
    if v.split('/').all(|c| c.is_empty() || c == ".") {
        return Err("names the home directory itself");
    }
    Ok(())
}

pub(crate) fn port_of(v: &str) -> Option<u16> {
    port(v)
}
