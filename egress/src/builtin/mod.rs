//! The builtin backend: a tokio + hyper forward proxy that needs nothing but the kernel.

pub mod conns;
pub mod control;
pub mod dial;
pub mod lend;
pub(crate) mod lifecycle;
pub mod logger;
pub mod proxy;
pub mod serve;
pub mod splice;

pub use logger::Logger;
pub use proxy::{DECISION_HEADER, Limits, PolicyCell, Running, start};
