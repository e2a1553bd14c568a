//! The one error type of the egress crate. Every variant says what failed and how to fix it.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Error {
    /// The rules (or settings) are invalid; the policy error names file and line.
    Policy(ocsb_policy::Error),
    /// A file or socket operation on a known path failed.
    Io { what: String, path: PathBuf, source: std::io::Error },
    /// A network operation (bind, connect) failed.
    Net { what: String, source: std::io::Error },
    /// The Docker engine is absent or refused a call.
    Docker { what: String, hint: String },
    /// squid refused the rendered configuration (`squid -k parse` printed ERROR/WARNING or failed).
    SquidConfig { output: String },
    /// The filter process or container is not in the state the command needs.
    State { message: String, hint: String },
    /// `egress verify` found expectations that did not hold.
    Verify { failures: Vec<String> },
}

impl Error {
    pub fn io(what: impl Into<String>, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), path: path.into(), source }
    }
    pub fn net(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Net { what: what.into(), source }
    }
    pub fn state(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::State { message: message.into(), hint: hint.into() }
    }
    pub fn docker(what: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::Docker { what: what.into(), hint: hint.into() }
    }
    /// True when the error comes from the user's rule files (exit code 3 in the CLI).
    pub fn is_input(&self) -> bool {
        matches!(self, Error::Policy(ocsb_policy::Error::Input { .. }))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Policy(e) => write!(f, "{e}"),
            Error::Io { what, path, source } => write!(f, "{what} {}: {source}", path.display()),
            Error::Net { what, source } => write!(f, "{what}: {source}"),
            Error::Docker { what, hint } => write!(f, "{what}\n  hint: {hint}"),
            Error::SquidConfig { output } => write!(
                f,
                "squid refused the rendered configuration; the running filter keeps its old rules:\n{output}\n  hint: fix the rule named above, then run `ocsb egress up` again"
            ),
            Error::State { message, hint } => write!(f, "{message}\n  hint: {hint}"),
            Error::Verify { failures } => {
                write!(f, "egress verify: {} expectation(s) failed:", failures.len())?;
                for x in failures {
                    write!(f, "\n  {x}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Policy(e) => Some(e),
            Error::Io { source, .. } | Error::Net { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ocsb_policy::Error> for Error {
    fn from(e: ocsb_policy::Error) -> Self {
        Error::Policy(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
