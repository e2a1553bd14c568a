//! The global git config of the sandbox, written at each start: the user's own as the host's
//! git lists it (includes expanded), kept to what `ocsb_policy::gitconfig` allows, written to
//! the state directory, where `GIT_CONFIG_GLOBAL` points inside
//! (`ocsb_sandbox::env::GIT_CONFIG`).
//!
//! *Why generated*: the user's `~/.gitconfig` and `~/.config/git/config` hold tokens
//! (`http.extraHeader`, a `url.*.insteadOf` with one, credential helpers) and name programs;
//! the agent's git needs the identity, the aliases and how the user likes git to behave. The
//! file is the agent's to change once written (the state directory is writable inside), and
//! nothing on the host reads it back.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ocsb_policy::gitconfig;
use ocsb_sandbox::statefs::StateDir;

use crate::error::Result;
use crate::project::Project;

/// Where git is looked for: the system's directories, never the user's `PATH` (a directory the
/// agent can write may come first there).
const GIT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Writes the generated config for `project` into its state directory `sd`. Without a global
/// config of the user's, it is empty; when git cannot list it, empty too, and said.
///
/// The listing is the look's, when the look listed this checkout with this home
/// ([`ocsb_sandbox::checkouts::global_config`]: remembered while the files git read stand, so
/// no git runs at a start); otherwise git is asked here.
pub fn write(project: &Project, sd: &StateDir) -> Result<()> {
    let looked = (std::env::var_os("HOME").as_deref() == Some(project.home.as_os_str()))
        .then(|| ocsb_sandbox::checkouts::global_config(&project.checkout, &project.home))
        .flatten();
    let entries = match looked.map_or_else(|| listed(project), Ok) {
        Ok(out) => gitconfig::parse_list(&out).0,
        Err(why) => {
            eprintln!(
                "ocsb: warning: the sandbox's git gets an empty global config: `git config --list` failed: {why}"
            );
            Vec::new()
        }
    };
    let generated = gitconfig::generate(&entries);
    sd.write_if_changed(Path::new(ocsb_sandbox::env::GIT_CONFIG), generated.text.as_bytes(), 0o600)?;
    Ok(())
}

/// The files git reads as the global config, as git itself chooses them.
fn global_files(home: &Path) -> Vec<PathBuf> {
    if let Some(g) = std::env::var_os("GIT_CONFIG_GLOBAL") {
        return vec![PathBuf::from(g)];
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    vec![home.join(".gitconfig"), xdg.join("git/config")]
}

/// `git config --list --show-scope --includes --null` (the global entries are taken from it:
/// [`gitconfig::parse_list`]), run in the project (so that an `includeIf "gitdir:…"` of the
/// user's matches as it does for the user's own git there), with a fixed environment: the
/// home, where the global files are, the system's `PATH`, and no system config. Empty when
/// the user has no global config.
fn listed(project: &Project) -> std::result::Result<Vec<u8>, String> {
    if !global_files(&project.home).iter().any(|f| f.exists()) {
        return Ok(Vec::new());
    }
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", GIT_PATH)
        .env("HOME", &project.home)
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0");
    for v in ["XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"] {
        if let Some(val) = std::env::var_os(v) {
            cmd.env(v, val);
        }
    }
    cmd.arg("-C")
        .arg(&project.checkout)
        .args(["config", "--list", "--show-scope", "--includes", "--null"])
        .stdin(Stdio::null());
    let out = cmd.output().map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().next().unwrap_or("no message").to_string());
    }
    Ok(out.stdout)
}
