//! The one error type of the front. It says what failed and on which path; the launcher prints
//! it as its own (same wording, its exit codes).

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// An I/O operation on a named path failed (the kernel's random bytes).
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
}

impl Error {
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { action, path: path.into(), source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { action, path, source } => write!(f, "cannot {action} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
