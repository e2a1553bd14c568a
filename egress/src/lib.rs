//! `ocsb-egress`: the egress filter's two backends and their one lifecycle.
//!
//! * [`Filter`] ([`lifecycle`]): `up`, `down`, `status`, `logs`, `render` for either backend,
//!   chosen once from [`Instance::backend`]; [`verify`]: `egress verify`.
//! * [`builtin`]: a tokio + hyper forward proxy (the default; needs nothing but the kernel),
//!   run as a detached process and driven through its typed [`builtin::control`] socket.
//! * [`squid`]: squid in Docker through the Engine API.
//! * [`instance`] says what one project's filter is, [`render`](mod@render) what each backend is given,
//!   [`report`] what the lifecycle answers, [`error`] what went wrong and how to fix it.
//!
//! What is allowed is decided by `ocsb_policy::egress` only; this crate enforces it. The caller
//! compiles the rules ([`Instance::load_policy`]) and hands the result to [`up`].
// `unsafe` only where the standard library has no safe form: `splice(2)`, owning the
// descriptors received over a socket (`builtin::lend`) and the filter process's `setsid`
// before exec; each block says why it is sound.
#![deny(unsafe_code)]

mod backend;
pub mod builtin;
pub mod error;
pub mod inside;
pub mod instance;
pub mod lifecycle;
pub mod listen;
pub mod logline;
pub mod nss;
pub mod paths;
pub mod render;
pub mod report;
pub mod squid;
pub mod verify;

pub use error::{Error, Result};
pub use instance::{Backend, Instance, SquidOverrides};
pub use lifecycle::{Filter, down, logs, render, status, up};
pub use listen::{GatewaySetting, client_networks, host_addresses, host_addresses_checked};
pub use logline::LogsOptions;
pub use report::{Status, UpAction, UpReport};
