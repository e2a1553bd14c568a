//! The one error type of the broker. Every variant says what went wrong and how to fix it; the
//! launcher prints it as its own (same wording, its exit codes).

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// An I/O operation on a named path failed.
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    /// Bad input or a refused setting: `what` happened, `fix` says what to do about it.
    Failed { what: String, fix: String },
    /// The state directory refused an access (a planted link, a file not the user's).
    State(ocsb_sandbox::Error),
}

impl Error {
    pub fn failed(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Failed { what: what.into(), fix: fix.into() }
    }

    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { action, path: path.into(), source }
    }
}

impl From<ocsb_sandbox::Error> for Error {
    fn from(e: ocsb_sandbox::Error) -> Self {
        Error::State(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { action, path, source } => write!(f, "cannot {action} {}: {source}", path.display()),
            Error::Failed { what, fix } => write!(f, "{what}\n  fix: {fix}"),
            Error::State(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
