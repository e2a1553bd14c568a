//! What the sandbox's home holds: an allowlist.
//!
//! Inside the sandbox `~` is a fresh directory. Only the entries this module names are bound
//! into it from the host; everything else in the host's home is absent, whatever its name and
//! whenever it appears. *Why an allowlist*: credentials, tokens and histories live under
//! hundreds of names that change with every tool (`~/.config/containers/auth.json`,
//! `~/.histfile`, an AI tool's key file); a list of what to hide always misses some, while the
//! few things a build needs from the home (the toolchains it runs, the shell's startup files,
//! ssh's public half) are a short, stable list.
//!
//! The entries, in order (a later source never narrows an earlier one; `OCSB_HIDE_HOME` removes
//! from all of them, hide wins):
//! * [`DEFAULT`]: toolchains and programs the user runs, and the shell's startup files,
//!   read-only, where they exist;
//! * [`ssh_visible`]: `~/.ssh/config`, `known_hosts` and the public keys, read-only;
//! * `OCSB_HOME`: paths the user allows, read-only;
//! * `OCSB_RW_HOME`: writable directories, or with `OCSB_CACHES=private` the project's own
//!   copy of the default caches (see [`crate::settings::CacheUse`]).
//!
//! A pattern may end in a component with one `*` (`.local/lib/python3*`): it names every
//! entry of that directory that matches.

use std::path::{Path, PathBuf};

use crate::guard::{Entry as Kind, Lookup};
use crate::settings::{CacheUse, Settings};

/// Read-only by default, where they exist: what a build or the shell needs from the home.
///
/// Each is a directory of programs or runtimes, or a startup file; never a directory that also
/// holds credentials (so `.cargo/bin`, not `.cargo`, which holds `credentials.toml`; `go/bin`,
/// not `go`; the shell's startup files, not `.config/fish`, whose `fish_variables` keeps
/// universal variables).
pub static DEFAULT: &[(&str, &str)] = &[
    (".local/bin", "programs you installed for yourself (pipx, installers)"),
    (".local/lib/python3*", "Python packages of `pip install --user`"),
    (".local/share/pipx", "pipx's virtual environments, where ~/.local/bin's links point"),
    (".local/pipx", "pipx's virtual environments (older layout)"),
    (".local/lib/node_modules", "npm's global packages with the prefix ~/.local"),
    (".npm-global", "npm's global packages with the prefix ~/.npm-global (its bin and lib)"),
    (".cargo/bin", "programs of `cargo install` and rustup's proxies (not .cargo: credentials.toml)"),
    (".rustup", "Rust toolchains"),
    (".nvm", "Node versions of nvm"),
    (".local/share/fnm", "Node versions of fnm"),
    (".volta", "Volta's Node toolchains and shims"),
    (".bun/bin", "bun and the programs of `bun add -g`"),
    (".bun/install/global", "the packages of `bun add -g`, where ~/.bun/bin's links point"),
    (".deno/bin", "programs of `deno install`"),
    (".pyenv", "Python versions of pyenv"),
    (".rbenv", "Ruby versions of rbenv"),
    (".sdkman", "Java, Kotlin, Gradle … of SDKMAN!"),
    ("go/bin", "programs of `go install` (not go/: its module cache is the project's own)"),
    (".juliaup", "Julia versions of juliaup"),
    (".ghcup/bin", "GHC, cabal and stack of ghcup"),
    (".ghcup/ghc", "the GHC versions ~/.ghcup/bin's links point to"),
    (".cabal/bin", "programs of `cabal install`"),
    (".elan", "Lean toolchains of elan"),
    (".local/share/mise/installs", "runtimes of mise"),
    (".local/share/mise/shims", "mise's shims"),
    (".nix-profile", "the programs of your Nix profile"),
    (".dotnet/tools", ".NET global tools"),
    ("miniconda3", "a conda installation (its environments and programs)"),
    ("miniforge3", "a conda installation (its environments and programs)"),
    ("anaconda3", "a conda installation (its environments and programs)"),
    (".profile", "login shell startup"),
    (".bashrc", "bash startup"),
    (".bashrc.d", "bash startup fragments (sourced by ~/.bashrc on some systems)"),
    (".bash_profile", "bash login startup"),
    (".bash_login", "bash login startup"),
    (".bash_logout", "bash logout"),
    (".zshenv", "zsh startup"),
    (".zshrc", "zsh startup"),
    (".zprofile", "zsh login startup"),
    (".zlogin", "zsh login startup"),
    (".inputrc", "readline's key bindings"),
    (".config/fish/config.fish", "fish startup"),
    (".config/fish/conf.d", "fish startup fragments"),
    (".config/fish/functions", "fish functions"),
];

/// Credential files that a [`DEFAULT`] entry can hold, per entry: `(entry, name, why)`, the name
/// relative to the home, a `*` standing for one whole component or part of one
/// (`.nvm/versions/node/*/etc/npmrc`). Each existing match is masked (an empty read-only file)
/// wherever the sandbox sees it, as a hidden name is.
///
/// *Why a denylist here*: the entries are allowed because they hold programs, and each tool
/// keeps its configuration somewhere else, except for these few names where the tool reads a
/// configuration from inside its own installation (npm's global `etc/npmrc` under the Node
/// prefix, pip's `pip.conf` in a Python prefix, conda's `.condarc` and the variables of
/// `conda env config vars`, pipx's record of the pip arguments, Maven's `conf/settings.xml`).
/// That is a closed set per tool: the places its documented lookup reads from its prefix.
pub static SECRETS: &[(&str, &str, &str)] = &[
    (".nvm", ".nvm/versions/node/*/etc/npmrc", "npm's global config of a Node version (_authToken)"),
    (".nvm", ".nvm/versions/io.js/*/etc/npmrc", "npm's global config of an io.js version"),
    (".npm-global", ".npm-global/etc/npmrc", "npm's global config with this prefix (_authToken)"),
    (".local/lib/node_modules", ".local/etc/npmrc", "npm's global config with the prefix ~/.local"),
    (
        ".local/share/fnm",
        ".local/share/fnm/node-versions/*/installation/etc/npmrc",
        "npm's global config of an fnm Node version",
    ),
    (".volta", ".volta/tools/image/node/*/etc/npmrc", "npm's global config of a Volta Node version"),
    (
        ".local/share/mise/installs",
        ".local/share/mise/installs/node/*/etc/npmrc",
        "npm's global config of a mise Node version",
    ),
    (
        ".local/share/mise/installs",
        ".local/share/mise/installs/python/*/pip.conf",
        "pip's config of a mise Python (index URLs with tokens)",
    ),
    (".pyenv", ".pyenv/versions/*/pip.conf", "pip's config of a pyenv Python (index URLs with tokens)"),
    (".pyenv", ".pyenv/versions/*/envs/*/pip.conf", "pip's config of a pyenv virtualenv"),
    (".rbenv", ".rbenv/versions/*/etc/gemrc", "gem's system config of an rbenv Ruby (sources with tokens)"),
    (
        ".local/share/pipx",
        ".local/share/pipx/venvs/*/pipx_metadata.json",
        "pipx's record of the pip arguments (index URLs with tokens)",
    ),
    (".local/share/pipx", ".local/share/pipx/venvs/*/pip.conf", "pip's config of a pipx environment"),
    (".local/pipx", ".local/pipx/venvs/*/pipx_metadata.json", "pipx's record of the pip arguments"),
    (".local/pipx", ".local/pipx/venvs/*/pip.conf", "pip's config of a pipx environment"),
    (".sdkman", ".sdkman/candidates/maven/*/conf/settings.xml", "Maven's global settings (server passwords)"),
    (".sdkman", ".sdkman/candidates/maven/*/conf/settings-security.xml", "Maven's master password"),
    ("miniconda3", "miniconda3/pip.conf", "pip's config of the base environment"),
    ("miniconda3", "miniconda3/.condarc", "conda's config of the installation (channel tokens)"),
    ("miniconda3", "miniconda3/conda-meta/state", "variables of `conda env config vars` (base)"),
    ("miniconda3", "miniconda3/envs/*/pip.conf", "pip's config of an environment"),
    ("miniconda3", "miniconda3/envs/*/.condarc", "conda's config of an environment"),
    ("miniconda3", "miniconda3/envs/*/conda-meta/state", "variables of `conda env config vars`"),
    ("miniforge3", "miniforge3/pip.conf", "pip's config of the base environment"),
    ("miniforge3", "miniforge3/.condarc", "conda's config of the installation (channel tokens)"),
    ("miniforge3", "miniforge3/conda-meta/state", "variables of `conda env config vars` (base)"),
    ("miniforge3", "miniforge3/envs/*/pip.conf", "pip's config of an environment"),
    ("miniforge3", "miniforge3/envs/*/.condarc", "conda's config of an environment"),
    ("miniforge3", "miniforge3/envs/*/conda-meta/state", "variables of `conda env config vars`"),
    ("anaconda3", "anaconda3/pip.conf", "pip's config of the base environment"),
    ("anaconda3", "anaconda3/.condarc", "conda's config of the installation (channel tokens)"),
    ("anaconda3", "anaconda3/conda-meta/state", "variables of `conda env config vars` (base)"),
    ("anaconda3", "anaconda3/envs/*/pip.conf", "pip's config of an environment"),
    ("anaconda3", "anaconda3/envs/*/.condarc", "conda's config of an environment"),
    ("anaconda3", "anaconda3/envs/*/conda-meta/state", "variables of `conda env config vars`"),
];

/// At most this many directories are listed to expand one pattern of [`SECRETS`]: a bound on
/// the work at each start whatever the home holds.
pub const SECRET_LISTINGS: usize = 256;

/// Every existing file of the home that a [`SECRETS`] name matches (absolute, named under
/// `home`, not resolved). `Err(dir)`: expanding a name would list more than
/// [`SECRET_LISTINGS`] directories (the caller refuses rather than start with a file unmasked).
pub fn secret_files(home: &Path, fs: &dyn Lookup) -> Result<Vec<PathBuf>, PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for (_, name, _) in SECRETS {
        let mut listed = 0usize;
        let mut at: Vec<PathBuf> = vec![home.to_path_buf()];
        for part in Path::new(name).components() {
            let part = part.as_os_str().to_string_lossy();
            let mut next = Vec::new();
            for dir in at {
                match part.split_once('*') {
                    None => next.push(dir.join(&*part)),
                    Some((pre, post)) => {
                        listed += 1;
                        if listed > SECRET_LISTINGS {
                            return Err(dir);
                        }
                        next.extend(
                            fs.names(&dir)
                                .into_iter()
                                .filter(|n| n.len() >= pre.len() + post.len())
                                .filter(|n| n.starts_with(pre) && n.ends_with(post))
                                .map(|n| dir.join(n)),
                        );
                    }
                }
            }
            at = next;
        }
        for p in at {
            if fs.entry(&p) != Kind::Missing && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Entries of `~/.ssh` that stay visible: what ssh needs to connect (through the filter) and
/// to check host keys, never a private key or a ControlMaster socket.
pub fn ssh_visible(name: &str) -> bool {
    name == "config" || name == "known_hosts" || name.ends_with(".pub")
}

/// The patterns of [`ssh_visible`], as the home's listing shows them.
const SSH: &[&str] = &[".ssh/config", ".ssh/known_hosts", ".ssh/*.pub"];

/// Sockets of host programs under a directory of the home that the sandbox may see (a shared
/// `~/.cache`): always absent, whatever makes the directory visible.
///
/// *Why a denylist here*: what decides the home is the allowlist; this is the closed set of
/// channels to a host process that live *inside* an allowed directory by design. git's
/// credential cache daemon is the one such program of the toolchains the sandbox runs (it
/// keeps its socket under `$XDG_CACHE_HOME/git/credential`, and answers anyone who connects
/// with the cached passwords). The other agents (gpg-agent, ssh-agent, password managers, the
/// keyring) keep theirs in `~/.gnupg`, `~/.1password`, `/run/user/<uid>` …, none of which is
/// allowed.
pub static CACHE_SOCKETS: &[(&str, &str)] = &[(
    ".cache/git/credential",
    "git's credential cache daemon: its socket answers with the cached passwords",
)];

/// How an entry is seen inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    ReadOnly,
    /// The host's directory, writable.
    Writable,
    /// The project's own copy, writable (`OCSB_CACHES=private`).
    Private,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadOnly => "ro",
            Access::Writable => "rw",
            Access::Private => "own",
        }
    }
}

/// Which rule allowed an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// [`DEFAULT`] or [`ssh_visible`].
    Default,
    /// `OCSB_HOME`.
    Home,
    /// `OCSB_RW_HOME`.
    RwHome,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Home => "OCSB_HOME",
            Source::RwHome => "OCSB_RW_HOME",
        }
    }
}

/// One rule of the home: a home-relative pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub pattern: String,
    pub access: Access,
    pub source: Source,
    pub why: String,
}

/// One entry present on the host that a rule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Present {
    /// Absolute: the home joined with the entry's name (not resolved).
    pub path: PathBuf,
    /// Relative to the home.
    pub rel: PathBuf,
    pub access: Access,
    pub source: Source,
    pub why: String,
}

/// Every rule of the home for these settings, hidden ones removed.
pub fn rules(s: &Settings) -> Vec<Rule> {
    let mut out: Vec<Rule> = Vec::new();
    let ro = |pattern: &str, source, why: &str| Rule {
        pattern: pattern.to_string(),
        access: Access::ReadOnly,
        source,
        why: why.to_string(),
    };
    out.extend(DEFAULT.iter().map(|(p, why)| ro(p, Source::Default, why)));
    out.extend(SSH.iter().map(|p| ro(p, Source::Default, "ssh: configuration, host keys, public keys")));
    out.extend(s.array("OCSB_HOME").iter().map(|p| ro(p, Source::Home, "allowed in your settings")));
    for (dir, usage) in s.home_dirs() {
        let Ok(rel) = dir.strip_prefix(s.home()) else { continue };
        let pattern = rel.to_string_lossy().into_owned();
        let (access, why) = match usage {
            CacheUse::Shared => (Access::Writable, "writable"),
            CacheUse::Private(_) => (Access::Private, "the project's own copy (OCSB_CACHES=private)"),
            CacheUse::ReadOnly => {
                (Access::ReadOnly, "programs the host runs: read-only (OCSB_CACHES=private)")
            }
        };
        out.push(Rule { pattern, access, source: Source::RwHome, why: why.to_string() });
    }
    // A set, asked for each ancestor of a pattern (`Path` compares and hashes by component, as
    // `starts_with` does): the rules and the hidden names are each a hundred or more.
    let hidden: std::collections::HashSet<&Path> = s.array("OCSB_HIDE_HOME").iter().map(Path::new).collect();
    out.retain(|r| !Path::new(&r.pattern).ancestors().any(|a| hidden.contains(a)));
    out
}

/// The entries of `home` that `rules` allow, as the host has them now (a pattern expanded,
/// a missing name left out). A private cache is listed whether or not the host has it: the
/// project's own copy is mounted all the same.
pub fn present(rules: &[Rule], home: &Path, fs: &dyn Lookup) -> Vec<Present> {
    let mut out: Vec<Present> = Vec::new();
    for r in rules {
        for rel in expand(&r.pattern, home, fs) {
            let path = home.join(&rel);
            if r.access != Access::Private && fs.entry(&path) == Kind::Missing {
                continue;
            }
            if out.iter().any(|p| p.rel == rel) {
                continue;
            }
            out.push(Present { path, rel, access: r.access, source: r.source, why: r.why.clone() });
        }
    }
    out
}

/// The names a pattern stands for: itself, or with a `*` in its last component, the matching
/// entries of its directory.
fn expand(pattern: &str, home: &Path, fs: &dyn Lookup) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let last = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some((pre, post)) = last.split_once('*') else { return vec![p.to_path_buf()] };
    let dir = p.parent().unwrap_or(Path::new(""));
    fs.names(&home.join(dir))
        .into_iter()
        .filter(|n| n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post))
        .map(|n| dir.join(n))
        .collect()
}

/// What the home of these settings holds now: [`rules`] expanded by [`present`], and an entry a
/// pattern found inside an `OCSB_HIDE_HOME` path left out too (hide wins).
pub fn entries(s: &Settings, fs: &dyn Lookup) -> Vec<Present> {
    let hidden = s.array("OCSB_HIDE_HOME");
    let mut out = present(&rules(s), s.home(), fs);
    out.retain(|e| !hidden.iter().any(|h| e.rel.starts_with(h)));
    out
}

/// `ocsb config` and `ocsb doctor`: one line per entry, `ro  .cargo/bin  default: why`.
pub fn render(entries: &[Present]) -> Vec<String> {
    let width = entries.iter().map(|e| e.rel.as_os_str().len()).max().unwrap_or(0);
    entries
        .iter()
        .map(|e| {
            format!(
                "{:<3} ~/{:<width$}  {}: {}",
                e.access.as_str(),
                e.rel.display(),
                e.source.as_str(),
                e.why,
                width = width
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::LoadInput;
    use std::collections::BTreeMap;

    struct Fs(BTreeMap<PathBuf, Kind>);
    impl Lookup for Fs {
        fn entry(&self, p: &Path) -> Kind {
            self.0.get(p).copied().unwrap_or(Kind::Missing)
        }
        fn names(&self, dir: &Path) -> Vec<String> {
            self.0
                .keys()
                .filter(|k| k.parent() == Some(dir))
                .map(|k| k.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        }
    }

    /// Settings for the home `/h` from one user layer holding `text` (the layer file lives in
    /// a temporary directory; `/h` itself is never read).
    fn settings(text: &str) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sandbox.conf"), text).unwrap();
        let input = LoadInput {
            home: "/h".into(),
            project_dir: "/h/p".into(),
            user_config_dir: dir.path().to_path_buf(),
            env: Vec::new(),
        };
        Settings::load(&input).unwrap()
    }

    #[test]
    fn no_default_entry_holds_credentials_or_histories() {
        // Directories known to hold secrets: no default is one of them or above one.
        let secret = [
            ".cargo/credentials.toml",
            ".config/fish/fish_variables",
            ".npmrc",
            ".gnupg",
            ".ssh/id_ed25519",
            ".config/gh/hosts.yml",
            ".docker/config.json",
            ".local/share/keyrings",
            ".bash_history",
            ".local/share/fish/fish_history",
            ".config/git/config",
            ".gitconfig",
        ];
        for (d, why) in DEFAULT {
            assert!(!why.is_empty());
            for s in secret {
                assert!(!Path::new(s).starts_with(d), "{d} would show {s}");
            }
        }
        assert!(ssh_visible("config") && ssh_visible("id_ed25519.pub") && ssh_visible("known_hosts"));
        assert!(!ssh_visible("id_ed25519") && !ssh_visible("ctl-socket") && !ssh_visible("authorized_keys"));
    }

    #[test]
    fn every_secret_name_belongs_to_a_default_entry_and_is_expanded_bounded() {
        for (entry, name, why) in SECRETS {
            assert!(DEFAULT.iter().any(|(d, _)| d == entry), "{entry} is not a default entry");
            assert!(!why.is_empty());
            // In the entry, or (npm's prefix ~/.local) beside it under the same prefix.
            let top = Path::new(entry).components().next().unwrap();
            assert!(Path::new(name).starts_with(top), "{name} is not under {entry}'s top");
        }
        let fs = Fs([
            ("/h/.nvm/versions/node/v20.1.0/etc/npmrc", Kind::File),
            ("/h/.nvm/versions/node/v22.0.0/etc/npmrc", Kind::Symlink),
            ("/h/.nvm/versions/node/v18.0.0/bin", Kind::Dir),
            ("/h/.npm-global/etc/npmrc", Kind::File),
            ("/h/.pyenv/versions/3.12.1/pip.conf", Kind::File),
            ("/h/miniconda3/.condarc", Kind::File),
            ("/h/miniconda3/pip.conf", Kind::File),
            ("/h/miniconda3/envs/ml/conda-meta/state", Kind::File),
            ("/h/.local/share/pipx/venvs/black/pipx_metadata.json", Kind::File),
            ("/h/.sdkman/candidates/maven/3.9.6/conf/settings.xml", Kind::File),
            ("/h/.nvm/versions/node/v20.1.0/etc/other", Kind::File),
        ]
        .into_iter()
        .map(|(p, k)| (PathBuf::from(p), k))
        .collect::<BTreeMap<_, _>>());
        let mut fs = fs;
        for p in fs.0.keys().cloned().collect::<Vec<_>>() {
            for a in p.ancestors().skip(1).filter(|a| a.starts_with("/h/")) {
                fs.0.entry(a.to_path_buf()).or_insert(Kind::Dir);
            }
        }
        let got = secret_files(Path::new("/h"), &fs).unwrap();
        let want: Vec<PathBuf> = [
            "/h/.nvm/versions/node/v20.1.0/etc/npmrc",
            "/h/.nvm/versions/node/v22.0.0/etc/npmrc",
            "/h/.npm-global/etc/npmrc",
            "/h/.pyenv/versions/3.12.1/pip.conf",
            "/h/miniconda3/.condarc",
            "/h/miniconda3/pip.conf",
            "/h/miniconda3/envs/ml/conda-meta/state",
            "/h/.local/share/pipx/venvs/black/pipx_metadata.json",
            "/h/.sdkman/candidates/maven/3.9.6/conf/settings.xml",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        for w in &want {
            assert!(got.contains(w), "{} not in {got:?}", w.display());
        }
        assert_eq!(got.len(), want.len(), "{got:?}");
        // Too many directories to list: refused, not cut short.
        let mut many = BTreeMap::new();
        for i in 0..=SECRET_LISTINGS {
            many.insert(PathBuf::from(format!("/h/.pyenv/versions/v{i}/envs/e")), Kind::Dir);
        }
        for i in 0..=SECRET_LISTINGS {
            many.insert(PathBuf::from(format!("/h/.pyenv/versions/v{i}")), Kind::Dir);
        }
        assert!(secret_files(Path::new("/h"), &Fs(many)).is_err());
    }

    #[test]
    fn rules_take_defaults_ocsb_home_and_rw_home_and_hide_wins() {
        let s = settings(
            "OCSB_HOME=(.config/nvim .local/bin/extra)\nOCSB_HIDE_HOME=(.local/bin .gnupg)\nOCSB_RW_HOME=(.cache .asdf work)\n",
        );
        let r = rules(&s);
        let find = |p: &str| r.iter().find(|x| x.pattern == p);
        assert_eq!(
            find(".config/nvim").map(|x| (x.access, x.source)),
            Some((Access::ReadOnly, Source::Home))
        );
        assert_eq!(find(".cargo/bin").map(|x| x.source), Some(Source::Default));
        assert!(find(".local/bin").is_none() && find(".local/bin/extra").is_none(), "hide wins");
        assert_eq!(find(".cache").map(|x| x.access), Some(Access::Private));
        assert_eq!(find(".asdf").map(|x| x.access), Some(Access::ReadOnly));
        assert_eq!(find("work").map(|x| (x.access, x.source)), Some((Access::Writable, Source::RwHome)));
        // Compared by component, as `Path::starts_with` compares: a trailing slash is the same name.
        let slash = rules(&settings("OCSB_HOME=(.config/nvim/lua)\nOCSB_HIDE_HOME=(.config/nvim/)\n"));
        assert!(!slash.iter().any(|x| x.pattern.starts_with(".config/nvim")), "hide wins");
        let shared = rules(&settings("OCSB_CACHES=shared\n"));
        assert!(shared.iter().any(|x| x.pattern == ".cache" && x.access == Access::Writable));
    }

    #[test]
    fn present_expands_patterns_and_leaves_out_missing_names() {
        let fs = Fs([
            ("/h/.local/lib/python3.11", Kind::Dir),
            ("/h/.local/lib/python3.12", Kind::Dir),
            ("/h/.local/lib/perl5", Kind::Dir),
            ("/h/.cargo/bin", Kind::Dir),
            ("/h/.ssh/config", Kind::File),
            ("/h/.ssh/id_ed25519", Kind::File),
            ("/h/.ssh/id_ed25519.pub", Kind::File),
            ("/h/.bashrc", Kind::Symlink),
        ]
        .into_iter()
        .map(|(p, k)| (PathBuf::from(p), k))
        .collect());
        let s = settings("");
        let got = present(&rules(&s), Path::new("/h"), &fs);
        let rels: Vec<String> = got.iter().map(|p| p.rel.display().to_string()).collect();
        for want in [
            ".local/lib/python3.11",
            ".local/lib/python3.12",
            ".cargo/bin",
            ".bashrc",
            ".ssh/config",
            ".ssh/id_ed25519.pub",
            ".cache",
        ] {
            assert!(rels.contains(&want.to_string()), "{want} in {rels:?}");
        }
        for absent in [".local/lib/perl5", ".ssh/id_ed25519", ".rustup", ".local/bin"] {
            assert!(!rels.contains(&absent.to_string()), "{absent} in {rels:?}");
        }
        let hid = settings("OCSB_HIDE_HOME+=(.local/lib/python3.12)\n");
        let rels: Vec<PathBuf> = entries(&hid, &fs).into_iter().map(|e| e.rel).collect();
        assert!(rels.contains(&PathBuf::from(".local/lib/python3.11")));
        assert!(!rels.contains(&PathBuf::from(".local/lib/python3.12")), "a hidden match is left out");
        let lines = render(&got);
        assert!(
            lines.iter().any(|l| l.starts_with("ro  ~/.cargo/bin") && l.contains("default:")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("own ~/.cache") && l.contains("OCSB_RW_HOME")),
            "{lines:?}"
        );
    }
}
