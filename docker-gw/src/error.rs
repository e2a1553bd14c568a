//! The one error type of the gateway crate: what failed, and how to fix it.
//!
//! A refusal of one Docker call is not an error of this type: it is answered to the agent's
//! client (`ocsb_policy::docker::Refusal`). These are the gateway's own failures to start, to
//! keep its journals or to stop what a session left running, which the launcher prints to the
//! user. `Display` renders them as the launcher renders its own, so a message reads the same
//! whichever crate made it.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// An I/O operation on a named path failed.
    Io { path: PathBuf, action: &'static str, source: std::io::Error },
    /// Anything else that failed: `what` happened, `fix` says what to do about it.
    Failed { what: String, fix: String },
}

impl Error {
    pub fn failed(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Failed { what: what.into(), fix: fix.into() }
    }

    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), action, source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, action, source } => {
                write!(f, "cannot {action} {}: {source}", path.display())?;
                match source.kind() {
                    std::io::ErrorKind::PermissionDenied => {
                        write!(f, "\n  hint: check the owner and mode of that path")
                    }
                    std::io::ErrorKind::NotFound => write!(f, "\n  hint: check that the path exists"),
                    _ => Ok(()),
                }
            }
            Error::Failed { what, fix } => write!(f, "{what}\n  fix: {fix}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Failed { .. } => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_and_how_to_fix_it() {
        let e = Error::failed("no Docker daemon answers", "start dockerd");
        assert_eq!(e.to_string(), "no Docker daemon answers\n  fix: start dockerd");
        let e = Error::io("create", "/x/docker-empty", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(e.to_string().starts_with("cannot create /x/docker-empty: "), "{e}");
        assert!(e.to_string().ends_with("hint: check that the path exists"), "{e}");
    }
}
