//! The per-project state directory (`OCSB_STATE_DIR`, default
//! `~/.local/share/opencode-sandbox/<name>/`): its layout, named here and nowhere else, its
//! opening (no link followed), the launcher's private files in it and the single-instance lock.
//!
//! Layout: `config/ data/ cache/ state/` are OpenCode's own `XDG_*` directories (its sessions
//! database is `data/opencode/opencode.db`, so sessions survive restarts), `tmp/` the private
//! `/tmp`, `docker/config.json` the Docker client's proxy settings, `package/` the skills and
//! plugins copied from the package on every start, `home-caches/` the project's own toolchain
//! caches, `egress/` the filter's files and the Docker gateway's (its sessions' journals in
//! `docker-sessions/`, its pulls' blobs in `docker-pulls/`, its log and its sockets), `spend/`
//! the model-key broker's ledger, `password` the web password (0600), `opencode-password`
//! OpenCode's own per-run secret (0600) and `run.lock` the lock of a running `ocsb run`.
//! Launcher writes below the state directory go through [`StateDir`]: the sandbox can write
//! there too. Paths of the sandbox's own files (OpenCode's config, the panel log) are named by
//! the modules that write them, relative to the directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use ocsb_sandbox::statefs::StateDir;

/// The web password, relative to the state directory.
pub const PASSWORD: &str = "password";
/// OpenCode's per-run server password, relative to the state directory.
pub const OPENCODE_PASSWORD: &str = "opencode-password";
/// The lock of a running `ocsb run`.
pub const RUN_LOCK: &str = "run.lock";
/// The filter's directory, named by the filter (`ocsb egress serve --state-dir` finds it there),
/// which the Docker gateway shares: both hold what no sandbox of the project may reach.
pub const EGRESS: &str = ocsb_egress::paths::DIR;
/// The model-key broker's directory, hidden from the sandbox: what the cap counts must not be
/// the agent's to rewrite.
pub const SPEND: &str = "spend";
/// The ledger, one JSON line per model request.
pub const LEDGER: &str = "spend/ledger.jsonl";
/// The id of the `ocsb run` that runs now (or ran last).
pub const SPEND_SESSION: &str = "spend/session";
/// The highest price seen for each model.
pub const PRICES: &str = "spend/prices.json";
/// The project's own toolchain caches (`OCSB_CACHES=private`), relative to the state directory.
pub const CACHES: &str = "home-caches";
/// The Docker client's config (its proxy settings), the agent's to change.
pub const DOCKER_CONFIG: &str = "docker/config.json";
/// The Docker gateway's files in [`EGRESS`]: its sessions' journals, its pulls' blobs, its log
/// and the empty file it binds over what a container must not see.
const DOCKER_SESSIONS: &str = "docker-sessions";
const DOCKER_PULLS: &str = "docker-pulls";
const DOCKER_LOG: &str = "docker.log";
const DOCKER_EMPTY: &str = "docker-empty";

/// One project's state directory as paths, for the launcher's files that are not opened
/// through [`StateDir`] (the filter's and the gateway's directory, the files read before the
/// directory is opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The project's state directory, from `OCSB_STATE_DIR` or `OCSB_NAME`.
    pub fn of(settings: &ocsb_policy::settings::Settings) -> Layout {
        Layout::new(settings.state_dir())
    }

    /// The layout whose [`Layout::egress`] is `dir` (the Docker watcher is handed that
    /// directory).
    pub fn of_egress(dir: &Path) -> Layout {
        Layout::new(dir.parent().unwrap_or(dir))
    }

    /// Opens the directory, made when missing, without following a link ([`StateDir::open`]).
    pub fn open(&self) -> Result<StateDir> {
        Ok(StateDir::open(&self.root)?)
    }

    pub fn password(&self) -> PathBuf {
        self.root.join(PASSWORD)
    }

    pub fn opencode_password(&self) -> PathBuf {
        self.root.join(OPENCODE_PASSWORD)
    }

    pub fn run_lock(&self) -> PathBuf {
        self.root.join(RUN_LOCK)
    }

    pub fn egress(&self) -> PathBuf {
        self.root.join(EGRESS)
    }

    pub fn ledger(&self) -> PathBuf {
        self.root.join(LEDGER)
    }

    pub fn spend_session(&self) -> PathBuf {
        self.root.join(SPEND_SESSION)
    }

    /// The project's own copy of the cache `name` (`OCSB_CACHES=private`).
    pub fn home_cache(&self, name: &str) -> PathBuf {
        self.root.join(CACHES).join(name)
    }

    /// The Docker gateway's files: in the filter's directory, which the project's sandboxes
    /// hide and no other project's sandbox mounts.
    pub fn docker(&self) -> ocsb_docker_gw::Paths {
        let dir = self.egress();
        ocsb_docker_gw::Paths {
            state_dir: self.root.clone(),
            sessions: dir.join(DOCKER_SESSIONS),
            pulls: dir.join(DOCKER_PULLS),
            log: dir.join(DOCKER_LOG),
            empty: dir.join(DOCKER_EMPTY),
            dir,
        }
    }
}

/// The model-key broker's files, relative to the state directory.
pub fn broker_files() -> ocsb_broker::Files {
    ocsb_broker::Files {
        dir: SPEND.into(),
        ledger: LEDGER.into(),
        session: SPEND_SESSION.into(),
        prices: PRICES.into(),
    }
}

pub fn password_file(state: &Path) -> PathBuf {
    Layout::new(state).password()
}

pub fn lock_file(state: &Path) -> PathBuf {
    Layout::new(state).run_lock()
}

/// Paths in the (writable) state directory the sandbox must not see: the user's web password,
/// the copy of OpenCode's secret, the filter's control socket and pid file, the lock, and the
/// model-key broker's ledger (what the cap counts must not be the agent's to rewrite).
pub fn hidden_from_sandbox(state: &Path) -> Vec<PathBuf> {
    let l = Layout::new(state);
    vec![l.password(), l.opencode_password(), l.egress(), l.run_lock(), state.join(SPEND)]
}

/// The launcher's private files in the state directory, made before any sandbox starts: they
/// are hidden from the sandbox only once they exist, so a sandbox that ran first could have
/// planted them (a `run.lock` link that the lock's write follows, a `password` of the agent's
/// choosing). Returns whether the web password was created now (`run` prints it once).
pub fn ensure_private(sd: &StateDir) -> Result<bool> {
    sd.dir(Path::new(EGRESS))?;
    sd.dir(Path::new(SPEND))?;
    sd.private_file(Path::new(OPENCODE_PASSWORD), || Ok::<_, Error>(Vec::new()))?;
    sd.private_file(Path::new(RUN_LOCK), || Ok::<_, Error>(Vec::new()))?;
    sd.private_file(Path::new(PASSWORD), || {
        Ok(format!("{}\n", crate::web::auth::random_secret()?).into_bytes())
    })
}

/// The project's own copy of each default cache, made (or, where a sandbox left a link or a
/// file in its place, remade) without following links, so the mount that puts it over
/// `~/.cache` can only ever be this directory. Also for a cache the host does not have (no
/// `~/.npm` on a fresh home): the sandbox mounts it all the same, so the tool inside can write.
pub fn ensure_caches(sd: &StateDir, settings: &ocsb_policy::settings::Settings) -> Result<()> {
    for (_, usage) in settings.home_dirs() {
        if let ocsb_policy::settings::CacheUse::Private(name) = usage {
            sd.dir(&Path::new(CACHES).join(name))?;
        }
    }
    Ok(())
}

/// Replace the contents of the private file `rel` in place (see [`ensure_private`]).
pub fn rewrite_private(sd: &StateDir, rel: &Path, data: &[u8]) -> Result<()> {
    Ok(sd.rewrite_private(rel, data)?)
}

/// The web password, read without following links (see [`ensure_private`]).
pub fn password(sd: &StateDir) -> Result<String> {
    let text = sd.read_private(Path::new(PASSWORD))?;
    let pw = String::from_utf8_lossy(&text).trim().to_string();
    if pw.is_empty() {
        let path = password_file(sd.path());
        return Err(Error::failed(
            format!("{} is empty", path.display()),
            format!("delete {} and a new password is generated on the next start", path.display()),
        ));
    }
    Ok(pw)
}

/// `.<name>.owner` beside the state directory: the project that uses it (out of every
/// sandbox's reach, like the trust record).
fn owner_file(state: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(state.file_name().unwrap_or_default());
    name.push(".owner");
    state.with_file_name(name)
}

/// Two projects never share a state directory (its sessions database, its `/tmp`, its web
/// password) unless your own layer says so: the first project to use one owns it; another is
/// refused — a committed `OCSB_NAME=<other project>` would otherwise hand this agent that
/// project's state, and two repositories with the same directory name would share one silently.
/// `OCSB_NAME` or `OCSB_STATE_DIR` set in your own layers (user, local, environment) is a choice
/// you made, and allowed.
pub fn claim(project: &crate::project::Project) -> Result<()> {
    use ocsb_policy::settings::Layer;
    let s = &project.settings;
    let state = s.state_dir();
    let record = owner_file(&state);
    let me = project.dir.display().to_string();
    match std::fs::read_to_string(&record) {
        Ok(owner) if Path::new(owner.trim_end_matches('\n')) == project.dir => Ok(()),
        Ok(owner) => {
            let yours = ["OCSB_NAME", "OCSB_STATE_DIR"].iter().any(|n| {
                s.get(n).is_some_and(|e| {
                    matches!(e.origin.layer, Layer::User | Layer::Local | Layer::Environment)
                })
            });
            if yours {
                return Ok(());
            }
            Err(Error::failed(
                format!(
                    "the state directory {} belongs to the project {}, not to {me}",
                    state.display(),
                    owner.trim_end_matches('\n')
                ),
                "give this project its own name: OCSB_NAME=<name> in .opencode-sandbox/local/sandbox.conf \
                 (only a name set in your own layers may share another project's state)",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = record.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
            }
            std::fs::write(&record, format!("{me}\n")).map_err(|e| Error::io("write", &record, e))
        }
        Err(e) => Err(Error::io("read", &record, e)),
    }
}

/// Held while `ocsb run` runs; released by the kernel when the process ends, however it ends.
pub struct InstanceLock {
    _file: std::fs::File,
}

/// Take the project's lock, or say that another `ocsb run` (with its pid) has it.
pub fn lock(sd: &StateDir) -> Result<InstanceLock> {
    let state = sd.path();
    let path = lock_file(state);
    let mut f = sd.open_private(Path::new(RUN_LOCK))?;
    // flock(2), exclusive and non-blocking.
    if let Err(e) = f.try_lock() {
        if let std::fs::TryLockError::WouldBlock = e {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(Error::failed(
                format!(
                    "ocsb run is already running for this project (pid {}, state {})",
                    pid.trim(),
                    state.display()
                ),
                "use the running instance (its web UI), or stop it with Ctrl-C in its terminal; to run a second copy of the project, give it another OCSB_NAME and ports",
            ));
        }
        return Err(Error::io("lock", &path, e.into()));
    }
    f.set_len(0).map_err(|e| Error::io("write", &path, e))?;
    writeln!(f, "{}", std::process::id()).map_err(|e| Error::io("write", &path, e))?;
    Ok(InstanceLock { _file: f })
}

/// The Docker client config's proxy settings, which the Docker CLI hands every container and
/// build it makes. With the raw socket (`OCSB_DOCKER=raw`) containers join docker0, and reach
/// the filter at docker0's address (they cannot reach the host's 127.0.0.1). With the gateway
/// there are none: the gateway sets every container's and build's proxy to the filter on the
/// container's own network, and docker0's address would only name a listener that refuses a
/// container of another network.
/// The file is the agent's to change (Docker writes it too), so it is read as untrusted JSON
/// and written through [`StateDir`].
pub fn write_docker_config(
    state: &StateDir,
    docker: ocsb_policy::settings::DockerMode,
    docker0: Option<std::net::IpAddr>,
    port: u16,
) -> Result<()> {
    let path = Path::new(DOCKER_CONFIG);
    let mut v: serde_json::Value = state
        .read(path)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(serde_json::Value::is_object)
        .unwrap_or(serde_json::json!({}));
    match docker0.filter(|_| docker == ocsb_policy::settings::DockerMode::Raw) {
        Some(gw) => {
            let url = format!("http://{gw}:{port}");
            v["proxies"] = serde_json::json!({"default": {"httpProxy": url, "httpsProxy": url, "noProxy": "localhost,127.0.0.1"}});
        }
        None => {
            if let Some(o) = v.as_object_mut() {
                o.remove("proxies");
            }
        }
    }
    Ok(state.write_if_changed(path, &serde_json::to_vec_pretty(&v).unwrap_or_default(), 0o600)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_with_the_pid() {
        let d = tempfile::tempdir().unwrap();
        let sd = StateDir::open(d.path()).unwrap();
        let a = lock(&sd).unwrap();
        // flock locks belong to the open file description: a second open conflicts.
        let e = lock(&sd).err().expect("second lock must fail").to_string();
        assert!(e.contains("already running") && e.contains(&std::process::id().to_string()), "{e}");
        drop(a);
        lock(&sd).unwrap();
    }

    #[test]
    fn planted_private_files_are_refused_and_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let state = d.path().join("state");
        let sd = StateDir::open(&state).unwrap();
        std::os::unix::fs::symlink(&victim, state.join("run.lock")).unwrap();
        let e = lock(&sd).err().expect("a linked lock must fail").to_string();
        assert!(e.contains("run.lock is a symbolic link") && e.contains("rm "), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::remove_file(state.join("run.lock")).unwrap();

        // A password the sandbox left with a loose mode is refused; a fresh one is made exclusively.
        std::fs::write(state.join("password"), "agentpw\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(state.join("password"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(password(&sd).unwrap_err().to_string().contains("readable by other users"));
        std::fs::remove_file(state.join("password")).unwrap();
        assert!(ensure_private(&sd).unwrap(), "created now");
        assert!(!ensure_private(&sd).unwrap(), "kept");
        let pw = password(&sd).unwrap();
        assert_eq!(pw.len(), 32);
        assert_eq!(std::fs::metadata(state.join("password")).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn docker_config_keeps_other_keys() {
        use ocsb_policy::settings::DockerMode;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("docker")).unwrap();
        std::fs::write(d.path().join("docker/config.json"), r#"{"auths":{"x":{}}}"#).unwrap();
        let state = StateDir::open(d.path()).unwrap();
        let docker0 = Some("172.17.0.1".parse().unwrap());
        write_docker_config(&state, DockerMode::Raw, docker0, 3128).unwrap();
        let read = || -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.path().join("docker/config.json")).unwrap()).unwrap()
        };
        assert_eq!(read()["proxies"]["default"]["httpsProxy"], "http://172.17.0.1:3128");
        assert!(read()["auths"]["x"].is_object());
        // With the gateway (and with no Docker) the client names no proxy: the gateway sets it.
        for mode in [DockerMode::Gateway, DockerMode::Off] {
            write_docker_config(&state, mode, docker0, 3128).unwrap();
            assert!(read().get("proxies").is_none(), "{mode:?}");
            assert!(read()["auths"]["x"].is_object());
        }
    }
}
