//! `ocsb-sandbox`: the namespace sandbox, built in-process (no bwrap binary). The launcher maps
//! its settings to a [`SandboxSpec`] and calls [`run`]; nothing here knows about the command line,
//! the settings files or OpenCode.
//!
//! Policy and enforcement are apart: [`spec`] says what the sandbox is, [`plan`] and [`env`]
//! turn that into an ordered mount plan and an environment without touching the system, and the
//! remaining modules enforce: [`launch`] (launcher side), [`stage2`] (namespaces, pid 1,
//! supervision), [`mounts`], [`caps`], [`landlock`], [`seccomp`], [`netlock`], [`pty`].
//!
//! Entry points:
//! - [`run`] with a [`SandboxSpec`] (`ocsb exec`, `ocsb shell`, `ocsb run`);
//! - [`stage2::main`] when `argv[1] == stage2::ARG` — dispatch it before parsing the command line.
//! - [`status`] for `ocsb sandbox status`.

// `unsafe` only in `sys` (thin syscall wrappers, each block with a SAFETY comment).
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod audit;
pub mod caps;
pub mod checkouts;
pub mod env;
pub mod error;
pub mod landlock;
pub mod launch;
pub mod mounts;
pub mod netlock;
pub mod plan;
pub mod pty;
pub mod seccomp;
pub mod snapshot;
pub mod spec;
pub mod stage2;
pub mod statefs;
pub mod status;
pub mod sys;
pub mod termfilter;
pub mod tmpclean;

pub use error::{Error, Result};
pub use launch::run;
pub use spec::{Acquire, Limits, Netlock, SandboxSpec, TmpMode, TtyMode};
pub use status::status;

/// The hidden `ocsb __sandbox-run SPEC.json [CMD ARGS…]`: run a command under an explicit [`SandboxSpec`]
/// (JSON), bypassing the settings. Used by the escape tests and the start-up benchmark; it grants
/// nothing the caller could not do with `ocsb exec`.
pub const RUN_SPEC_ARG: &str = "__sandbox-run";

/// If this process is stage 2 (`ocsb __sandbox-init`) or `ocsb __sandbox-run`, run it and return
/// its exit status. Call first thing in `main`, before anything starts a thread.
pub fn stage2_dispatch() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    let arg = args.next()?;
    if arg == stage2::ARG {
        return Some(stage2::main());
    }
    if arg != RUN_SPEC_ARG {
        return None;
    }
    let code = (|| -> Result<i32> {
        let path = args
            .next()
            .ok_or_else(|| Error::refused("usage: ocsb __sandbox-run SPEC.json", "pass a spec file"))?;
        let text = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
        let mut spec: SandboxSpec = serde_json::from_slice(&text).map_err(|e| {
            Error::refused(format!("{}: {e}", std::path::Path::new(&path).display()), "fix the spec")
        })?;
        let argv: Vec<String> = args
            .map(|a| {
                a.into_string()
                    .map_err(|_| Error::refused("an argument is not UTF-8", "pass UTF-8 arguments"))
            })
            .collect::<Result<_>>()?;
        if !argv.is_empty() {
            spec.argv = argv;
        }
        run(&spec)
    })();
    Some(match code {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ocsb: {e}");
            stage2::EXIT_SETUP
        }
    })
}
