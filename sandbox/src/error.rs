//! The sandbox's error type. Every message says what failed and what to do about it; kernel
//! feature failures name the feature or sysctl.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// A kernel feature the sandbox requires is missing or refused.
    Kernel { step: &'static str, source: io::Error, fix: String },
    /// A file operation on a named path failed.
    Io { action: &'static str, path: PathBuf, source: io::Error },
    /// The policy refuses to build this sandbox (symlinked mount target, bad spec…).
    Refused { what: String, fix: String },
    /// The netlock is missing or the gid could not be obtained.
    Netlock { what: String, fix: String },
    /// Anything else, said as it is (the state directory's refusals).
    Failed { what: String, fix: String },
}

impl Error {
    pub fn kernel(step: &'static str, source: io::Error, fix: impl Into<String>) -> Self {
        Error::Kernel { step, source, fix: fix.into() }
    }
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io { action, path: path.into(), source }
    }
    pub fn refused(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Refused { what: what.into(), fix: fix.into() }
    }
    pub fn netlock(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Netlock { what: what.into(), fix: fix.into() }
    }
    pub fn failed(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Failed { what: what.into(), fix: fix.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Kernel { step, source, fix } => {
                write!(f, "sandbox: {step} failed: {source}\n  fix: {fix}")
            }
            Error::Io { action, path, source } => {
                write!(f, "sandbox: cannot {action} {}: {source}", path.display())
            }
            Error::Refused { what, fix } => write!(f, "sandbox: {what}\n  fix: {fix}"),
            Error::Netlock { what, fix } => write!(f, "netlock: {what}\n  fix: {fix}"),
            Error::Failed { what, fix } => write!(f, "{what}\n  fix: {fix}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The hint for a failed `unshare`/id-map step: the usual host restrictions.
pub const USERNS_FIX: &str = "unprivileged user namespaces are disabled or restricted: check \
    `sysctl kernel.unprivileged_userns_clone` (must be 1 where it exists), \
    `sysctl user.max_user_namespaces` (must be > 0) and \
    `sysctl kernel.apparmor_restrict_unprivileged_userns` (Ubuntu >= 23.10: 1 there needs ocsb's \
    AppArmor profile loaded: `sudo apparmor_parser -r /etc/apparmor.d/ocsb` (ocsb-usr-local for \
    `make install` under /usr/local), or reinstall ocsb if the file is missing); \
    inside a container, run it with user namespaces allowed (e.g. --privileged or a seccomp profile that permits unshare)";
