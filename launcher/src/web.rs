//! The web front (the `ocsb-front` crate) in the launcher: its port bound before anything else
//! starts, served on a thread of its own ([`crate::served`]), and `ocsb __web-front`, the front
//! alone. The parts of the crate the launcher uses are re-exported here.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use crate::error::{Error, Result};
pub use ocsb_front::{FrontConfig, auth, listener, panel_log};

/// The running front (stopped by `stop`, or when dropped).
pub use crate::served::Served as Front;

/// The message for a port that is taken, with the seed's fix.
pub fn port_busy(addr: SocketAddr, setting: &str, e: &std::io::Error) -> Error {
    Error::failed(
        format!("port {} is busy ({e}): another project or an old instance uses it", addr.port()),
        format!(
            "stop the other instance, or set another {setting} (e.g. in .opencode-sandbox/local/sandbox.conf)"
        ),
    )
}

/// Bind the port now (so a busy port is reported before anything else starts) and serve on a
/// thread of its own.
pub fn start(cfg: FrontConfig) -> Result<Front> {
    let listener = TcpListener::bind(cfg.listen).map_err(|e| port_busy(cfg.listen, "OCSB_WEB_PORT", &e))?;
    cfg.log(format_args!(
        "front on http://{}/ for OpenCode on {}; Tokens panel {}",
        cfg.listen,
        cfg.upstream,
        if cfg.panel { "on" } else { "off (OCSB_PANEL=0)" }
    ));
    let cfg = std::sync::Arc::new(cfg);
    Front::spawn("the web front", "ocsb-web", listener, move |l, stop| ocsb_front::serve(l, cfg, stop))
}

/// The hidden subcommand of [`serve_alone`].
pub const FRONT_ALONE: &str = "__web-front";

/// `ocsb __web-front`: the front alone on `listen`, in front of an OpenCode on `upstream`
/// started by someone else (tests, debugging), with the passwords in the files named. Runs
/// until SIGINT/SIGTERM.
pub fn serve_alone(
    listen: SocketAddr,
    upstream: SocketAddr,
    password_file: &Path,
    upstream_password_file: &Path,
    panel: bool,
) -> Result<()> {
    let read = |p: &Path| -> Result<String> {
        Ok(std::fs::read_to_string(p).map_err(|e| Error::io("read", p, e))?.trim().to_string())
    };
    let cfg = FrontConfig {
        listen,
        upstream,
        password: read(password_file)?,
        upstream_authorization: auth::basic_header(auth::USER, &read(upstream_password_file)?),
        panel,
        cookie: auth::random_secret()?,
        log: None,
        spend: None,
        published: None,
    };
    crate::signals::install();
    let front = start(cfg)?;
    println!("listening");
    while crate::signals::received().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    front.stop();
    Ok(())
}
