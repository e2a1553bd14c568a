//! Where this `ocsb` is installed: `<prefix>/bin/ocsb`, with the netlock shim, the netlock
//! helper and the builtin filter in `<prefix>/libexec/ocsb/`. The shim execs exactly this
//! `ocsb` and the launcher starts the filter from there, so both directories are trusted as
//! `ocsb` itself is: the sandbox must never be able to write them
//! ([`crate::project::Project::check_writable_roots`]).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct Installation {
    /// This program (`/proc/self/exe`, so no symlink is left in it).
    pub exe: PathBuf,
}

impl Installation {
    pub fn current() -> Result<Installation> {
        let exe = std::env::current_exe().map_err(|e| Error::io("find the path of", "ocsb", e))?;
        Ok(Installation { exe })
    }

    /// `<prefix>/bin`.
    pub fn bin(&self) -> &Path {
        self.exe.parent().unwrap_or(Path::new("/"))
    }

    /// The directory above `bin` (`/` for an `ocsb` at the root, which nothing installs).
    pub fn prefix(&self) -> &Path {
        self.bin().parent().unwrap_or(Path::new("/"))
    }

    /// `<prefix>/libexec/ocsb`.
    pub fn libexec(&self) -> PathBuf {
        self.prefix().join("libexec/ocsb")
    }

    /// The setgid shim that gives the sandbox the netlock group.
    pub fn shim(&self) -> PathBuf {
        self.libexec().join("ocsb-netlock-exec")
    }

    /// The root daemon that keeps the netlock table in place.
    pub fn helper(&self) -> PathBuf {
        self.libexec().join("ocsb-netlock-helper")
    }

    /// The builtin filter program as `make install` puts it.
    pub fn filter(&self) -> PathBuf {
        self.libexec().join("ocsb-egress")
    }

    /// The directories whose programs run outside the sandbox with the user's rights (or the
    /// netlock group's): a sandbox that could write one could replace what runs next on the host.
    pub fn program_dirs(&self) -> [PathBuf; 2] {
        [self.bin().to_path_buf(), self.libexec()]
    }
}
