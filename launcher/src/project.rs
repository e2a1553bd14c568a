//! Where the project is, and the inputs every command reads from it: the settings layers and the
//! egress rule layers, loaded exactly as `run` loads them.

use std::path::{Path, PathBuf};

use ocsb_policy::egress::{self, Policy};
use ocsb_policy::settings::{LoadInput, Settings};

use crate::error::{Error, Result};

/// The per-project directory inside a repository.
pub const PROJECT_CONF_DIR: &str = ".opencode-sandbox";

/// The user's home, from `$HOME` (the launcher never runs as another user, so no passwd lookup).
pub fn home_dir() -> Result<PathBuf> {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() && Path::new(&h).is_absolute() => Ok(PathBuf::from(h)),
        _ => Err(Error::failed(
            "HOME is not set to an absolute path",
            "run ocsb from a normal login session, or export HOME=/home/<you>",
        )),
    }
}

/// `~/.config/opencode-sandbox`, honouring `XDG_CONFIG_HOME` when it is absolute.
pub fn user_config_dir(home: &Path) -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    base.join("opencode-sandbox")
}

/// The git work tree that contains `dir`, found by walking up to a `.git` entry (a directory, or
/// a file as in worktrees and submodules). No `git` process is run.
pub fn git_toplevel(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.join(".git").exists()).map(Path::to_path_buf)
}

/// The project directory for commands that work on a project: `-C DIR` if given, else the
/// nearest ancestor holding `.opencode-sandbox/`, else the enclosing git work tree, else the
/// current directory.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("read the current directory", ".", e))?;
    let start = match explicit {
        Some(p) => {
            let p = cwd.join(p);
            return p.canonicalize().map_err(|e| Error::io("open the project directory", p, e));
        }
        None => cwd,
    };
    if let Some(d) = start.ancestors().find(|d| d.join(PROJECT_CONF_DIR).is_dir()) {
        return Ok(d.to_path_buf());
    }
    Ok(git_toplevel(&start).unwrap_or(start))
}

/// The process environment as UTF-8 pairs. Variables outside the settings namespace that are
/// not UTF-8 are skipped (they cannot be settings); an `OCSB_*` one is an error, because
/// dropping it would silently ignore what the user asked for.
fn environment() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (k, v) in std::env::vars_os() {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => out.push((k, v)),
            (Ok(k), Err(_)) if k.starts_with("OCSB_") => {
                return Err(Error::failed(
                    format!("environment variable {k} is not valid UTF-8"),
                    format!("unset {k} or give it a UTF-8 value"),
                ));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Everything a command needs to know about the project it runs in.
pub struct Project {
    pub dir: PathBuf,
    pub home: PathBuf,
    pub user_config_dir: PathBuf,
    pub settings: Settings,
}

impl Project {
    /// Locate the project and load its five settings layers.
    pub fn load(explicit: Option<&Path>) -> Result<Project> {
        let dir = locate(explicit)?;
        let home = home_dir()?;
        let user_config_dir = user_config_dir(&home);
        let input = LoadInput {
            home: home.clone(),
            project_dir: dir.clone(),
            user_config_dir: user_config_dir.clone(),
            env: environment()?,
        };
        let settings = Settings::load(&input)?;
        Ok(Project { dir, home, user_config_dir, settings })
    }

    /// The four egress rule layers, compiled. Fails on the first bad line, naming it.
    pub fn egress_policy(&self) -> Result<Policy> {
        let layers = egress::load_layers(&self.user_config_dir, &self.dir)?;
        Ok(Policy::compile(&layers)?)
    }
}
