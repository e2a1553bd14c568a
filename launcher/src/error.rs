//! The one error type of the launcher. Every variant renders as a message that says what went
//! wrong and how to fix it; `exit_code` maps it to the documented exit status.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// Bad input in a settings or rules file (names file and line).
    Policy(ocsb_policy::Error),
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

    /// The documented exit status (see `cli::EXIT_CODES`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Policy(_) => 3,
            Error::Io { .. } | Error::Failed { .. } => 1,
        }
    }
}

impl From<ocsb_policy::Error> for Error {
    fn from(e: ocsb_policy::Error) -> Self {
        Error::Policy(e)
    }
}

/// The sandbox's errors keep their wording; the launcher's exit codes apply.
impl From<ocsb_sandbox::Error> for Error {
    fn from(e: ocsb_sandbox::Error) -> Self {
        use ocsb_sandbox::Error as S;
        match e {
            S::Io { action, path, source } => Error::io(action, path, source),
            S::Kernel { step, source, fix } => {
                Error::failed(format!("sandbox: {step} failed: {source}"), fix)
            }
            S::Refused { what, fix } => Error::failed(format!("sandbox: {what}"), fix),
            S::Netlock { what, fix } => Error::failed(format!("netlock: {what}"), fix),
            S::Failed { what, fix } => Error::failed(what, fix),
        }
    }
}

/// Rule errors keep their file and line (exit code 3); every other egress error becomes
/// `Failed`, its fix carried over as it is.
impl From<ocsb_egress::Error> for Error {
    fn from(e: ocsb_egress::Error) -> Self {
        match e {
            ocsb_egress::Error::Policy(p) => Error::Policy(p),
            other => Error::Failed {
                what: other.what(),
                fix: other.fix().unwrap_or("see the message above").to_string(),
            },
        }
    }
}

/// The gateway's errors are the launcher's own two kinds, worded as they are.
impl From<ocsb_docker_gw::Error> for Error {
    fn from(e: ocsb_docker_gw::Error) -> Self {
        match e {
            ocsb_docker_gw::Error::Io { path, action, source } => Error::Io { path, action, source },
            ocsb_docker_gw::Error::Failed { what, fix } => Error::Failed { what, fix },
        }
    }
}

/// The broker's errors keep their wording: its refusals of bad input say what and how to fix.
impl From<ocsb_broker::Error> for Error {
    fn from(e: ocsb_broker::Error) -> Self {
        match e {
            ocsb_broker::Error::Io { action, path, source } => Error::io(action, path, source),
            ocsb_broker::Error::Failed { what, fix } => Error::failed(what, fix),
            ocsb_broker::Error::State(e) => Error::from(e),
        }
    }
}

/// The front's errors keep their wording.
impl From<ocsb_front::Error> for Error {
    fn from(e: ocsb_front::Error) -> Self {
        match e {
            ocsb_front::Error::Io { action, path, source } => Error::io(action, path, source),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Policy(e) => write!(f, "{e}"),
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

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_errors_keep_what_and_fix_apart() {
        let e = Error::from(ocsb_egress::Error::state("the filter is gone", "run `ocsb egress up`"));
        assert_eq!(e.to_string(), "the filter is gone\n  fix: run `ocsb egress up`");
        let e = Error::from(ocsb_egress::Error::Verify { failures: vec!["expect-pass x".into()] });
        assert!(matches!(&e, Error::Failed { fix, .. } if fix.contains("expect-* line")), "{e}");
        let input = ocsb_policy::Error::input(ocsb_policy::Location::new("egress.conf", 3, 0), "bad rule");
        assert_eq!(Error::from(ocsb_egress::Error::Policy(input)).exit_code(), 3);
    }
}
