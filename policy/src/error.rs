//! The one error type of the policy crate.
//!
//! Every error that comes from user input names the file and the line (and the column where it
//! helps), so that a user can go straight to the mistake. Nothing is half-applied: a loader that
//! returns an error has not produced a partial policy.

use std::fmt;
use std::path::PathBuf;

/// Where a piece of input came from: a display name for the file (a path, or a name such as
/// `<package defaults>` or `environment`), a 1-based line and a 1-based column (0 = unknown).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl Location {
    pub fn new(file: impl Into<String>, line: u32, column: u32) -> Self {
        Self { file: file.into(), line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (0, _) => write!(f, "{}", self.file),
            (l, 0) => write!(f, "{}:{l}", self.file),
            (l, c) => write!(f, "{}:{l}:{c}", self.file),
        }
    }
}

#[derive(Debug)]
pub enum Error {
    /// Bad input at a known place: `message` says what is wrong, `hint` how to fix it.
    Input { at: Location, message: String, hint: Option<String> },
    /// A layer file exists but cannot be read.
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    pub fn input(at: Location, message: impl Into<String>) -> Self {
        Error::Input { at, message: message.into(), hint: None }
    }

    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        match self {
            Error::Input { at, message, .. } => Error::Input { at, message, hint: Some(hint.into()) },
            other => other,
        }
    }

    /// The location of an input error, for tests and for tools that jump to it.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Input { at, .. } => Some(at),
            Error::Io { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Input { at, message, hint } => {
                write!(f, "{at}: {message}")?;
                if let Some(h) = hint {
                    write!(f, "\n  hint: {h}")?;
                }
                Ok(())
            }
            Error::Io { path, source } => write!(
                f,
                "{}: cannot read: {source} (fix the file's permissions, or remove it to use the other layers)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Input { .. } => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
