//! The squid backend: squid in Docker (host network), driven through the Engine API.

pub mod container;
pub mod image;
pub(crate) mod lifecycle;

pub use container::{connect, container_name};
pub use image::{ImageSource, Progress};
