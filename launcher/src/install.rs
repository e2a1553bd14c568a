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
    /// Besides this installation's, every directory of `PATH` that holds an `ocsb`: that is the
    /// one the user types, and `bin` above is where its symlinks end (`~/.local/bin/ocsb` →
    /// a build tree), not where they start.
    pub fn program_dirs(&self) -> Vec<PathBuf> {
        self.program_dirs_on(&std::env::var_os("PATH").unwrap_or_default())
    }

    fn program_dirs_on(&self, path: &std::ffi::OsStr) -> Vec<PathBuf> {
        let mut dirs = vec![self.bin().to_path_buf(), self.libexec()];
        for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
            if dir.join("ocsb").symlink_metadata().is_ok() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `~/.local/bin/ocsb` as a symlink into a build tree: the directory the user's `ocsb` is
    /// found in counts, not only the one its link ends in.
    #[test]
    fn the_directories_of_path_that_hold_an_ocsb_are_program_directories() {
        let t = tempfile::tempdir().unwrap();
        let (bin, build, other) =
            (t.path().join("bin"), t.path().join("build/release"), t.path().join("other"));
        for d in [&bin, &build, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(build.join("ocsb"), bin.join("ocsb")).unwrap();
        let install = Installation { exe: build.join("ocsb") };
        let path = std::env::join_paths([&other, &bin, Path::new("relative")]).unwrap();
        let dirs = install.program_dirs_on(&path);
        assert_eq!(dirs, [build.clone(), t.path().join("build/libexec/ocsb"), bin]);
    }
}
