//! The integration tests of the policy crate, one test binary.
//!
//! Modules marked `host` run the real squid (Debian's `squid`), some in a network namespace
//! (root); they are built only with `--features host-tests` (as `make test` does). Without it,
//! `cargo test` as an ordinary user runs the rest.
// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The seed's rule set; squid -k parse for the host suites.
mod support;

mod suite {
    // Decisions, normalisation, layers and the rendered config (golden file).
    mod egress_decide;
    // Generated regexes mean the same to glibc's POSIX ERE (squid) and to the regex crate.
    mod egress_regex_glibc;

    // host: the real squid running the rendered config against `Policy::decide`, in a namespace.
    #[cfg(feature = "host-tests")]
    mod egress_differential;
    // host: rendered configs pass the real `squid -k parse` silently.
    #[cfg(feature = "host-tests")]
    mod egress_squid_parse;
}
