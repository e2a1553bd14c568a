//! The web password and HTTP Basic authentication of the front.
//!
//! Two different secrets exist on purpose. The password the user types (user `opencode`) is
//! checked by the front, outside the sandbox, and is stored in `<state>/password` (0600, made
//! before any sandbox starts and read without following links, by the launcher),
//! which the sandbox hides. OpenCode itself is started with a second, per-run secret that the front adds to
//! every upstream request: the agent's shell inherits OpenCode's environment, so whatever OpenCode
//! holds the agent can read, and it must not be the password of the user's browser session.

use std::io::Read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::{Error, Result};

/// The user name of the web UI (OpenCode's default, so the login prompt looks the same).
pub const USER: &str = "opencode";

/// A random secret: 24 bytes from the kernel, URL-safe base64 (32 characters).
pub fn random_secret() -> Result<String> {
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io("read random bytes from", "/dev/urandom", e))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// `Basic base64(user:password)`, the value of an `Authorization` header.
pub fn basic_header(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

/// Compare without an early exit, so the time taken does not tell how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Compare two secrets in constant time.
pub fn credentials_eq(a: &str, b: &str) -> bool {
    constant_time_eq(a.as_bytes(), b.as_bytes())
}

/// Whether base64 `user:password` credentials (from a Basic header or `?auth_token=`) match.
pub fn credentials_match(b64: &str, password: &str) -> bool {
    let Ok(raw) = STANDARD.decode(b64.trim()) else { return false };
    let want = format!("{USER}:{password}");
    constant_time_eq(&raw, want.as_bytes())
}

/// Whether an `Authorization` header value carries the right Basic credentials.
pub fn header_matches(value: &str, password: &str) -> bool {
    let mut it = value.trim().splitn(2, ' ');
    match (it.next(), it.next()) {
        (Some(scheme), Some(b64)) if scheme.eq_ignore_ascii_case("basic") => credentials_match(b64, password),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials() {
        let h = basic_header(USER, "s3cret");
        assert!(header_matches(&h, "s3cret"));
        assert!(header_matches(&h.replace("Basic", "basic"), "s3cret"));
        assert!(!header_matches(&h, "s3cret2"));
        assert!(!header_matches(&basic_header("root", "s3cret"), "s3cret"));
        assert!(!header_matches("Bearer abc", "s3cret"));
        assert!(!header_matches("Basic !!!", "s3cret"));
    }
}
