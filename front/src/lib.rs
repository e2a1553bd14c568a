//! The web front on `OCSB_WEB_PORT`: the only door from the user's browser to OpenCode.
//!
//! It runs in the launcher, outside the sandbox, and forwards to OpenCode on `OCSB_WEB_PORT + 1`
//! (HTTP, server-sent events and WebSocket upgrades for the terminal). It checks the user's
//! password ([`auth`], `login`) and replaces it upstream with OpenCode's own per-run secret.
//! When the panel is on, HTML pages get one same-origin `<script src>` tag (OpenCode's CSP allows
//! `'self'` scripts, not inline ones) and `/__ocsb/*` serves the Tokens panel and its numbers
//! (`panel`, [`tokens`]). `forward` is the proxy that puts these together, [`http`] its
//! helpers on hyper's types.
//!
//! The launcher binds the port and runs [`serve`] on a thread of its own; it hands over the
//! passwords, the panel's log and the broker's ledger in [`FrontConfig`].

pub mod auth;
mod config;
pub mod error;
mod forward;
pub mod http;
pub mod listener;
mod login;
mod panel;
pub mod panel_log;
mod reply;
pub mod tokens;
mod upstream;

pub use config::FrontConfig;
pub use error::{Error, Result};

/// Serves the front on `listener` until `stop` fires, then closes the open connections.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: std::sync::Arc<FrontConfig>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    forward::serve(listener, cfg, stop).await
}
