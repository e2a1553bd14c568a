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

impl EgressPaths {
    pub fn new(state_dir: &Path) -> Self {
        Self { dir: state_dir.join("egress") }
    }
    /// Pid file of the builtin `serve` process.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("serve.pid")
    }
    /// Control socket of the builtin `serve` process (`status`, `reload`, `stop`).
    pub fn control_socket(&self) -> PathBuf {
        self.dir.join("control.sock")
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
}

/// Write `contents` to `path` atomically (tmp file + rename in the same directory).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
