//! `ocsb-egress`: the egress filter's two backends and their one lifecycle.
//!
//! * [`builtin`]: a tokio + hyper forward proxy (the default; needs nothing but the kernel).
//! * [`squid`]: squid in Docker through the Engine API.
//! * [`lifecycle`]: `up`, `down`, `status`, `logs`, `render` for either backend; [`verify`]:
//!   `egress verify`.
//!
//! What is allowed is decided by `ocsb_policy::egress` only; this crate enforces it.

pub mod builtin;
pub mod error;
pub mod lifecycle;
pub mod listen;
pub mod logline;
pub mod paths;
pub mod render;
pub mod squid;
pub mod verify;

pub use error::{Error, Result};
pub use lifecycle::{
    Backend, Instance, LogsOptions, SquidOverrides, Status, UpAction, UpReport, down, logs, render, status,
    up,
};
pub use listen::GatewaySetting;
