//! The xtask's one error type: a message that says what failed and what to do.

use std::fmt;

#[derive(Debug)]
pub struct Error(pub String);

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Shorthand for an error from an I/O step on a path.
pub fn io(what: &str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error(format!("{what} {}: {e}", path.display()))
}
