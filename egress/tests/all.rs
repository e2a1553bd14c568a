//! The integration tests of the egress filter, one test binary.
//!
//! Every suite here needs root and network namespaces (the lab), or a Docker engine; they are
//! built only with `--features host-tests` (as `make test` does). Without it this binary is
//! empty and `cargo test` runs the unit tests only.
// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "host-tests")]
mod support;

#[cfg(feature = "host-tests")]
mod suite {
    // host: the builtin backend's lifecycle: reloads under load, bad rules, tunnels, status, logs.
    mod builtin_lifecycle;
    // host: the same raw requests through builtin, squid and `Policy::decide`: same verdicts.
    mod differential;
    // host: names in /etc/hosts reach its addresses at once, never asked of the name server.
    mod hosts_file;
    // host: half-closing clients get their answer; quiet tunnels end and make room at the cap.
    mod limits;
    // host: the squid backend on a real Docker engine: image, container, reload, logs, down.
    mod squid_docker;
    // host: the statically linked filter `make` ships makes no NSS lookup (strace).
    mod static_filter;
    // host: `egress verify` catches a broken rule and a bypassable filter.
    mod verify;
}
