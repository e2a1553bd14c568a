//! The integration tests of the netlock helper and its shim, one test binary.
//!
//! Modules marked `host` need root, the test user and network namespaces (every table they
//! install is in a namespace the test made); they are built only with `--features host-tests`
//! (as `make test` does). Without it, `cargo test` as an ordinary user runs the rest.
// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "host-tests")]
mod support {
    // The lock side and the world, two namespaces joined by a veth, and the helper run there.
    pub mod world;
    // A private system bus and a real polkitd on it.
    pub mod bus;
}

mod suite {
    // The privileged crate's code lines stay under the budget.
    mod size;

    // host: the daemon: owner/persist, survival of flush, delete and signals, adoption, SIGHUP.
    #[cfg(feature = "host-tests")]
    mod daemon;
    // host: D-Bus and polkit for real: the helper's interface on a private system bus.
    #[cfg(feature = "host-tests")]
    mod dbus;
    // host: `ocsb netlock verify|status|setup|teardown` end to end as ocsb-test.
    #[cfg(feature = "host-tests")]
    mod launcher;
    // host: the lock matrix (who is locked, what passes) through the real shim and helper.
    #[cfg(feature = "host-tests")]
    mod lock;
    // host: the unit, sysusers and polkit files, checked with systemd's and polkit's tools.
    #[cfg(feature = "host-tests")]
    mod packaging;
    // host: the table itself: golden diff against netlock.nft, idempotence, remove, verify.
    #[cfg(feature = "host-tests")]
    mod table;
}
