//! `ocsb-sandbox`: the namespace sandbox, built in-process (no bwrap binary). The launcher maps
//! its settings to a [`SandboxSpec`] and calls [`run`]; nothing here knows about the command line,
//! the settings files or OpenCode.
//!
//! Policy and enforcement are apart: [`spec`] says what the sandbox is, [`plan`] and [`env`](mod@env)
//! turn that into an ordered mount plan and an environment without touching the system, and the
//! remaining modules enforce: [`launch`] (launcher side), [`stage2`] (namespaces, pid 1,
//! supervision), [`mounts`], [`caps`], [`landlock`], [`seccomp`], [`netlock`], [`pty`].
//!
//! Entry points:
//! - [`run`] with a [`SandboxSpec`] (`ocsb exec`, `ocsb shell`, `ocsb run`);
//! - [`stage2_dispatch`] first thing in `main`: stage 2 runs in a fresh exec of the same binary.
//! - [`status()`] for `ocsb sandbox status`.

// `unsafe` only in `sys` (thin syscall wrappers, each block with a SAFETY comment).
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod agentgit;
pub mod audit;
pub mod background;
pub mod caps;
pub mod checkouts;
pub mod configmemo;
pub mod env;
pub mod error;
pub mod gate;
pub mod gatewatch;
pub mod handover;
pub mod landlock;
pub mod launch;
pub mod listeners;
pub mod mounts;
pub mod netlink;
pub mod netlock;
pub mod netns;
pub mod plan;
pub mod pty;
pub mod remembered;
pub mod seccomp;
pub mod served;
pub mod session_git;
pub mod spec;
pub mod stage2;
pub mod stages;
pub mod statefs;
pub mod status;
pub mod strays;
pub mod sys;
pub mod termfilter;
pub mod tmpclean;
pub mod toolfiles;
pub mod watch;

pub use error::{Error, Result};
pub use launch::{Ahead, Early, Serve, run, run_served};
pub use spec::{Acquire, Limits, Netlock, Network, SandboxSpec, TmpMode, TtyMode};
pub use status::status;

/// If this process is stage 2 of a sandbox (`argv[1] == stage2::ARG`), run it and return its
/// exit status. Call first thing in `main`, before anything starts a thread or parses the
/// command line: stage 2 forks, which is sound only while it has one thread.
pub fn stage2_dispatch() -> Option<i32> {
    (std::env::args_os().nth(1)? == stage2::ARG).then(stage2::main)
}
