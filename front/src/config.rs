//! What one front is given: its port, OpenCode's, the passwords, and where it logs.

use std::net::SocketAddr;

use super::panel_log;

/// What the front needs to know.
#[derive(Debug, Clone)]
pub struct FrontConfig {
    /// `127.0.0.1:<OCSB_WEB_PORT>`.
    pub listen: SocketAddr,
    /// OpenCode: `127.0.0.1:<OCSB_WEB_PORT + 1>`.
    pub upstream: SocketAddr,
    /// The password the user types (user [`super::auth::USER`]).
    pub password: String,
    /// The `Authorization` value OpenCode expects (its own per-run secret).
    pub upstream_authorization: String,
    /// `OCSB_PANEL`.
    pub panel: bool,
    /// The value of the login cookie this front hands out after a successful login (random per
    /// start). Browsers do not send Basic credentials on every request kind (WebSocket
    /// handshakes, `?auth_token=` logins); a same-site, HttpOnly cookie covers those.
    pub cookie: String,
    /// `context-panel.log` in the state directory (none for the hidden `__web-front`).
    pub log: Option<std::sync::Arc<panel_log::PanelLog>>,
    /// The model-key broker's ledger: the panel shows the spend it measured against the limit.
    pub spend: Option<std::sync::Arc<ocsb_broker::ledger::Ledger>>,
    /// The servers of the sandbox published on the host (isolated mode): the panel lists them.
    pub published: Option<ocsb_policy::publish::Publications>,
}

impl FrontConfig {
    /// A line in the panel log, when there is one.
    pub fn log(&self, msg: impl std::fmt::Display) {
        if let Some(l) = &self.log {
            l.line(msg);
        }
    }
}
