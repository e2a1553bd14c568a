//! The one error type of the egress crate. Every error says what failed; most also say how to
//! fix it, in a field of its own ([`Error::fix`]).
//!
//! *Why the fix is not part of the message*: the launcher prints `what` and `fix` on lines of
//! its own (`  fix: …`) and must not have to take [`Display`](fmt::Display) apart to find them.
//! `Display` joins the two as `what\n  hint: fix`, which is what the `serve` process writes to
//! its stderr.

use std::fmt;
use std::path::PathBuf;

/// The fix for a squid.conf that squid refuses: the rule named in squid's output is the cause.
const SQUID_CONFIG_FIX: &str = "fix the rule named above, then run `ocsb egress up` again";
const VERIFY_FIX: &str = "each failure names its expect-* line and the rule that decided: change that rule \
     (or the expect-* line) and run it again; a failed direct-blocked check means the netlock does not \
     hold for the sandbox: `ocsb netlock verify`";

#[derive(Debug)]
pub enum Error {
    /// The rules (or settings) are invalid; the policy error names file and line.
    Policy(ocsb_policy::Error),
    /// A file or socket operation on a known path failed.
    Io { what: String, path: PathBuf, source: std::io::Error },
    /// A network operation (bind, connect) failed.
    Net { what: String, source: std::io::Error },
    /// The Docker engine is absent or refused a call.
    Docker { what: String, fix: String },
    /// squid refused the rendered configuration (`squid -k parse` printed ERROR/WARNING or failed).
    SquidConfig { output: String },
    /// The filter process or container is not in the state the command needs.
    State { what: String, fix: String },
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
    pub fn state(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::State { what: what.into(), fix: fix.into() }
    }
    pub fn docker(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Error::Docker { what: what.into(), fix: fix.into() }
    }

    /// True when the error comes from the user's rule files (exit code 3 in the CLI).
    pub fn is_input(&self) -> bool {
        matches!(self, Error::Policy(ocsb_policy::Error::Input { .. }))
    }

    /// What failed, without the fix.
    pub fn what(&self) -> String {
        match self {
            Error::Policy(e) => e.to_string(),
            Error::Io { what, path, source } => format!("{what} {}: {source}", path.display()),
            Error::Net { what, source } => format!("{what}: {source}"),
            Error::Docker { what, .. } | Error::State { what, .. } => what.clone(),
            Error::SquidConfig { output } => {
                format!(
                    "squid refused the rendered configuration; the running filter keeps its old rules:\n{output}"
                )
            }
            Error::Verify { failures } => {
                let mut text = format!("egress verify: {} expectation(s) failed:", failures.len());
                for x in failures {
                    text.push_str("\n  ");
                    text.push_str(x);
                }
                text
            }
        }
    }

    /// How to fix it, when this crate knows. `None` for policy errors (they carry their own
    /// hint) and for I/O errors (the path and the OS error say it).
    pub fn fix(&self) -> Option<&str> {
        match self {
            Error::Docker { fix, .. } | Error::State { fix, .. } => Some(fix),
            Error::SquidConfig { .. } => Some(SQUID_CONFIG_FIX),
            Error::Verify { .. } => Some(VERIFY_FIX),
            Error::Policy(_) | Error::Io { .. } | Error::Net { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what())?;
        match self.fix() {
            Some(fix) => write!(f, "\n  hint: {fix}"),
            None => Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_what_then_the_fix_as_a_hint() {
        let e = Error::state("the filter is gone", "run `ocsb egress up`");
        assert_eq!(e.what(), "the filter is gone");
        assert_eq!(e.fix(), Some("run `ocsb egress up`"));
        assert_eq!(e.to_string(), "the filter is gone\n  hint: run `ocsb egress up`");
        let e = Error::SquidConfig { output: "squid -k parse (exit 1):\nFATAL: x".into() };
        assert_eq!(
            e.to_string(),
            "squid refused the rendered configuration; the running filter keeps its old rules:\n\
             squid -k parse (exit 1):\nFATAL: x\n  hint: fix the rule named above, then run `ocsb egress up` again"
        );
        let e = Error::Verify { failures: vec!["a".into(), "b".into()] };
        assert_eq!(e.fix(), Some(VERIFY_FIX));
        assert!(e.to_string().starts_with("egress verify: 2 expectation(s) failed:\n  a\n  b\n  hint: "));
        let e = Error::io("cannot read", "/x", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(
            e.to_string(),
            format!("cannot read /x: {}", std::io::Error::from(std::io::ErrorKind::NotFound))
        );
    }
}
