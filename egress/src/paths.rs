//! Files the filter keeps in the state directory. All paths come from the caller (settings'
//! `OCSB_STATE_DIR`), so tests use temporary directories.
//!
//! Everything lives in `<state>/egress/`. The launcher must mount this directory read-only (or
//! hide it) inside the sandbox: it holds the control socket and the pid file, which the agent
//! must not be able to replace.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct EgressPaths {
    pub dir: PathBuf,
}

/// The filter's directory in the project's state directory.
pub const DIR: &str = "egress";

/// The builtin filter's control socket, in [`DIR`].
pub const CONTROL_SOCKET: &str = "control.sock";

impl EgressPaths {
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join(DIR) }
    }
    /// Pid file of the builtin `serve` process.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("serve.pid")
    }
    /// Control socket of the builtin `serve` process (`status`, `reload`, `stop`).
    pub fn control_socket(&self) -> PathBuf {
        self.dir.join(CONTROL_SOCKET)
    }
    /// The access log of the builtin backend (squid's goes to the container log).
    pub fn access_log(&self) -> PathBuf {
        self.dir.join("access.log")
    }
    /// stderr of the builtin `serve` process: startup failures land here.
    pub fn serve_err(&self) -> PathBuf {
        self.dir.join("serve.err")
    }
    /// Directory bind-mounted into the squid container (the directory, never a single file, so
    /// an atomic rename is seen by the container).
    pub fn squid_dir(&self) -> PathBuf {
        self.dir.join("squid")
    }
    pub fn squid_conf(&self) -> PathBuf {
        self.squid_dir().join("squid.conf")
    }
    /// Create `<state>/egress/` for this user alone (0700, also when it exists with a looser
    /// mode): the access log names every host the agent asked for.
    pub fn create_private(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
    }
    /// The access log opened for appending, readable by this user alone (0600).
    pub fn open_access_log(&self) -> std::io::Result<std::fs::File> {
        self.open_log("access.log")
    }
    /// A log of this directory (`name`), opened for appending, readable by this user alone.
    pub fn open_log(&self, name: &str) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let f =
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(self.dir.join(name))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(f)
    }
}

/// Write `contents` to `path` atomically (tmp file + rename in the same directory).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_egress_directory_and_log_are_private_even_when_they_existed() {
        let t = tempfile::tempdir().unwrap();
        let p = EgressPaths::new(t.path());
        std::fs::create_dir_all(&p.dir).unwrap();
        std::fs::set_permissions(&p.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(p.access_log(), "old\n").unwrap();
        std::fs::set_permissions(p.access_log(), std::fs::Permissions::from_mode(0o644)).unwrap();
        p.create_private().unwrap();
        drop(p.open_access_log().unwrap());
        let mode = |q: &Path| std::fs::metadata(q).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p.dir), 0o700);
        assert_eq!(mode(&p.access_log()), 0o600);
    }
}
