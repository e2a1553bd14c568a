//! The test kit of ocsb: what the integration suites of the workspace share, written once.
//!
//! - [`netns`]: network namespaces the tests create (the network rule: no test packet leaves a
//!   namespace that a test made, except on loopback), and veth links between them.
//! - [`host`]: root, tools, the ordinary test user `ocsb-test` and the netlock group.
//! - [`proc`]: child processes stopped on drop, and waiting for what they create.
//! - [`http`]: HTTP (ureq), server-sent events and WebSocket (tungstenite) clients, Basic auth.
//! - [`browser`]: headless Chromium over the DevTools protocol.
//! - [`dbus`]: a private session bus and the fake desktop notification daemon.
//! - [`opencode`]: a real `opencode serve`, the scripted model provider, agent turns.
//!
//! Every helper fails the test (never skips it) with the package or setup step that is missing.
// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod dbus;
pub mod host;
pub mod http;
pub mod netns;
pub mod opencode;
pub mod proc;

pub use netns::Netns;
pub use proc::Proc;
