//! `ocsb run`: OpenCode in the sandbox behind the web front. Every step prints one line; a
//! failing step says which step, why, and the fix, and nothing after it starts.
//!
//! The session opened (`crate::session`: the checks, the state directory), the lock of the
//! project, the key broker bound and OpenCode's configuration written, the session prepared
//! (filter, netlock, self-tests), then OpenCode (`opencode serve` on web port + 1) started by
//! the session in its sandbox, the web front on the web port, the browser; Ctrl-C stops
//! OpenCode and the front and leaves the filter running.

mod addresses;
pub(crate) mod broker;
mod browser;
mod denials;
pub(crate) mod notify;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::project::Project;
use crate::session::{Command, Session};
use crate::{opencode, signals, state, web};

/// How long OpenCode may take to answer `/global/health` after it started.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The web UI's page of this project — its latest session, or a new one — not OpenCode's home,
/// which lists only the projects this browser opened before and shows a new user an empty
/// "Add project" view. OpenCode's routes name a project by the base64url of its directory.
fn project_page(front: SocketAddr, dir: &Path, session: Option<&str>) -> String {
    use base64::Engine;
    let dir = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(dir.as_os_str().as_encoded_bytes());
    match session {
        Some(id) => format!("http://{front}/{dir}/session/{id}"),
        None => format!("http://{front}/{dir}/session"),
    }
}

/// `GET path` from OpenCode with its secret; the body of a 200 answer. Short timeouts: a
/// request that arrives just as the port opens can hang forever.
fn opencode_get(addr: SocketAddr, authorization: &str, path: &str) -> Option<String> {
    // The request carries OpenCode's secret: only to a listener of the user's own (another user
    // may have bound the port between the launcher's check and OpenCode's start).
    crate::web::listener::check_ours(addr).ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    crate::web::listener::check_peer(s.local_addr().ok()?, addr).ok()?;
    // OpenCode's first answers after its start can take seconds on a busy machine.
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {authorization}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).ok()?;
    // Until EOF or a complete Content-Length body (the server may keep the connection open).
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 || buf.len() > 8 << 20 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len =
                head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse::<usize>().ok());
            if len.is_some_and(|len| buf.len() >= end + 4 + len) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// Whether OpenCode answers `GET /global/health` with `{"healthy":true…}`.
fn healthy(addr: SocketAddr, authorization: &str) -> bool {
    opencode_get(addr, authorization, "/global/health").is_some_and(|b| b.contains("\"healthy\":true"))
}

/// The project's most recently updated session, if it has one.
fn latest_session(addr: SocketAddr, authorization: &str) -> Option<String> {
    let body = opencode_get(addr, authorization, "/session")?;
    let list: serde_json::Value = serde_json::from_str(&body).ok()?;
    list.as_array()?
        .iter()
        .filter(|s| s["parentID"].is_null())
        .max_by_key(|s| s["time"]["updated"].as_u64().unwrap_or(0))
        .and_then(|s| s["id"].as_str())
        .filter(|id| id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
}

/// The model-key broker for this run: its ledger (the day's spend so far), its prices, and a
/// line saying what stays outside.
fn start_broker(
    project: &Project,
    sd: &ocsb_sandbox::statefs::StateDir,
    bound: ocsb_broker::Bound,
    upstreams: Vec<ocsb_broker::keys::Upstream>,
) -> Result<broker::Broker> {
    let s = &project.settings;
    let (_, started) = ocsb_broker::ledger::utc(std::time::SystemTime::now());
    let session = format!("{}-{}", started.replace([':', '-'], ""), &web::auth::random_secret()?[..6]);
    let limit = s.spend_limit();
    let files = state::broker_files();
    let ledger = ocsb_broker::ledger::Ledger::open(sd, &files, &session, limit)?;
    let sources = broker::price_sources(s, &project.user_config_dir, &project.checkout, sd);
    let prices = ocsb_broker::prices(sources, sd, &files);
    if let Err(e) = ocsb_broker::remember_prices(&prices, sd, &files) {
        eprintln!("ocsb: warning: broker: {}", Error::from(e));
    }
    let limit_set_at = s
        .get("OCSB_SPEND_LIMIT")
        .map(|e| e.origin.to_string())
        .filter(|o| o != "defaults")
        .unwrap_or_else(|| "in .opencode-sandbox/local/sandbox.conf".into());
    let ids: Vec<&str> = upstreams.iter().map(|u| u.id.as_str()).collect();
    println!(
        "broker:     keys of {} stay outside the sandbox; OpenCode asks http://{}/ (spend limit {})",
        ids.join(", "),
        bound.endpoint.addr,
        match (limit.day, limit.session) {
            (None, None) => "none: OCSB_SPEND_LIMIT".to_string(),
            (d, r) => [d.map(|d| format!("${d:.2} per day")), r.map(|r| format!("${r:.2} per run"))]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", "),
        }
    );
    if !s.sandbox_enabled() {
        eprintln!(
            "ocsb: warning: OCSB_SANDBOX=0: the agent can read the key files themselves ({}); only the environment is kept clean",
            ocsb_broker::key_files(s)
                .iter()
                .filter(|p| p.exists())
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let start = ocsb_broker::Start {
        token: bound.endpoint.token.clone(),
        upstreams,
        prices,
        ledger: std::sync::Arc::new(ledger),
        limit_set_at,
        tls: crate::tls::client_config()?,
    };
    broker::Broker::start(bound, start)
}

fn check_port_free(addr: SocketAddr, setting: &str) -> Result<()> {
    TcpListener::bind(addr).map(drop).map_err(|e| web::port_busy(addr, setting, &e))
}

/// `ocsb run [opencode args]`.
pub fn run(project: &Project, opencode_args: &[String], no_browser: bool) -> Result<()> {
    let s = &project.settings;
    // The checks `prepare` makes come first, before `run` writes anything into the state
    // directory (the OpenCode config, a kubeconfig copy): an unaccepted widening or another
    // project's state must not get even those.
    let opened = Session::new(project)?.open()?;
    let (sd, created) = (&opened.state, opened.created);
    let state = s.state_dir();
    let _lock = state::lock(sd)?;
    let web_addr = SocketAddr::from(([127, 0, 0, 1], s.web_port()));
    let oc_addr = SocketAddr::from(([127, 0, 0, 1], s.opencode_port()));
    check_port_free(web_addr, "OCSB_WEB_PORT")?;
    check_port_free(oc_addr, "OCSB_WEB_PORT (OpenCode listens on the next port)")?;

    // Bad inputs (env file, provider keys, skills, plugins) fail before anything starts.
    let keys = broker::keys(s)?;
    keys.require_meter(s)?;
    broker::check_configs(s, &project.user_config_dir, &project.checkout)?;
    let bound = if keys.upstreams.is_empty() {
        None
    } else {
        Some(ocsb_broker::bind(&keys, &web::auth::random_secret()?)?)
    };
    let setup = opencode::setup(
        s,
        &project.user_config_dir,
        sd,
        opencode_args,
        &keys.env_file,
        bound.as_ref().map(|b| &b.endpoint),
    )?;
    let prepared = opened.bring_up(false)?;
    let sd = &prepared.state;
    let broker = match bound {
        Some(bound) => Some(start_broker(project, sd, bound, keys.upstreams)?),
        None => None,
    };
    let password = state::password(sd)?;
    // OpenCode's own secret, for a user who opens its port directly (no panel). It changes every
    // run and is not the web password: the agent can read OpenCode's environment.
    // Rewritten in place, not replaced by rename: a sandbox of this project that is already
    // running masks the file's directory entry, and a rename would detach that mask.
    state::rewrite_private(
        sd,
        Path::new(state::OPENCODE_PASSWORD),
        format!("{}\n", setup.server_secret).as_bytes(),
    )?;
    let panel_log = match sd.append(Path::new(web::panel_log::PATH)) {
        Ok(f) => {
            // One start writes a few lines; a log past 1 MiB is from long ago.
            if f.metadata().is_ok_and(|m| m.len() > 1 << 20) {
                let _ = f.set_len(0);
            }
            Some(std::sync::Arc::new(web::panel_log::PanelLog::new(f)))
        }
        Err(e) => {
            eprintln!("ocsb: warning: no Tokens panel log: {e}");
            None
        }
    };

    if let Ok(inst) = crate::filter::instance(project) {
        addresses::watch(inst, prepared.policy.clone());
    }
    if let Err(w) = denials::start(project, sd) {
        eprintln!("ocsb: warning: the agent will not be told about egress denials: {w}");
    }
    signals::install();
    let mut env = setup.env.clone();
    if !env.iter().any(|(k, _)| k == "OPENCODE_DISABLE_MODELS_FETCH")
        && opencode::models_fetch_blocked(&prepared.policy)
    {
        env.push(("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()));
        println!(
            "models:     {} is blocked by the egress rules: OpenCode uses its built-in model list",
            opencode::MODELS_HOST
        );
    }
    let _bus = if s.notifications() {
        match notify::start(sd) {
            Ok(p) => {
                println!("notify:     session bus limited to org.freedesktop.Notifications");
                env.push(("DBUS_SESSION_BUS_ADDRESS".into(), p.address()));
                Some(p)
            }
            Err(warning) => {
                eprintln!("ocsb: warning: {warning}");
                None
            }
        }
    } else {
        None
    };
    let broker_port = broker.as_ref().map(|b| b.endpoint.addr.port());
    let cmd = Command::server(setup.argv.clone(), env, broker_port, oc_addr.port());
    let launch = prepared.start(&cmd, None)?;
    let published = launch.publications();
    let (tx, rx) = mpsc::channel();
    let sandbox_thread = std::thread::Builder::new()
        .name("ocsb-sandbox".into())
        .spawn(move || {
            // The Docker gateway, if one serves, is gone before `run` reports the end.
            let _ = tx.send(launch.run());
        })
        .map_err(|e| Error::io("start a thread for", "the sandbox", e))?;
    println!("opencode:   starting {} serve on {oc_addr} in the sandbox", setup.argv[0]);
    let skills: Vec<String> = setup.skill_paths.iter().map(|p| p.display().to_string()).collect();
    println!("skills:     {}", if skills.is_empty() { "none".into() } else { skills.join(" ") });
    for w in &setup.warmed {
        println!("plugins:    {} copied into OpenCode's cache from {}", w.spec, w.from.display());
    }

    let upstream_authorization = web::auth::basic_header(web::auth::USER, &setup.server_secret);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(r) = rx.try_recv() {
            let code = r?;
            return Err(Error::failed(
                format!("OpenCode exited during start-up (status {code})"),
                format!("see its output above and {}", state.join("data/opencode/log").display()),
            ));
        }
        if signals::received().is_some() {
            signals::terminate_children();
            let _ = rx.recv_timeout(Duration::from_secs(10));
            println!("stopped before OpenCode was ready");
            return Ok(());
        }
        if healthy(oc_addr, &upstream_authorization) {
            break;
        }
        if Instant::now() > deadline {
            signals::terminate_children();
            return Err(Error::failed(
                format!("OpenCode did not answer on {oc_addr} within {} s", READY_TIMEOUT.as_secs()),
                format!("see {}", state.join("data/opencode/log").display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }

    let front = web::start(web::FrontConfig {
        listen: web_addr,
        upstream: oc_addr,
        password: password.clone(),
        upstream_authorization: upstream_authorization.clone(),
        panel: s.panel(),
        cookie: web::auth::random_secret()?,
        log: panel_log,
        spend: broker.as_ref().map(|b| b.ledger.clone()),
        published,
    });
    let front = match front {
        Ok(f) => f,
        Err(e) => {
            signals::terminate_children();
            return Err(e);
        }
    };
    // The project's page, also with `--no-browser`: the user who opens it by hand (over SSH,
    // on a machine without a display) needs it most.
    let latest = latest_session(oc_addr, &upstream_authorization);
    let url = project_page(web_addr, &project.checkout, latest.as_deref());
    println!("web:        {url}");
    println!(
        "            log in as {} with the password in {} (`ocsb password` prints it)",
        web::auth::USER,
        state::password_file(&state).display()
    );
    if created {
        println!("            first start: the password is {password}");
    }
    if !s.panel() {
        println!("            Tokens panel off (OCSB_PANEL=0)");
    }
    println!(
        "            OpenCode without the panel: http://{oc_addr}/ (user {}, password in {}, new every run)",
        web::auth::USER,
        state.join(state::OPENCODE_PASSWORD).display()
    );
    if !no_browser {
        println!("browser:    {}", browser::open(&url));
    }
    println!("ready; Ctrl-C stops OpenCode (the egress filter keeps running: `ocsb egress down` stops it)");

    let outcome = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => break Some(r),
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if signals::received().is_some() {
            front.stop();
            signals::terminate_children();
            let r = rx.recv_timeout(Duration::from_secs(10)).ok();
            if r.is_some() {
                let _ = sandbox_thread.join();
            }
            println!("stopped");
            return Ok(());
        }
    };
    front.stop();
    let _ = sandbox_thread.join();
    match outcome {
        Some(Ok(0)) => Ok(()),
        Some(Ok(code)) => Err(Error::failed(
            format!("OpenCode exited with status {code}"),
            format!("see {}", state.join("data/opencode/log").display()),
        )),
        Some(Err(e)) => Err(e),
        None => Err(Error::failed("the sandbox thread ended without a status", "report this")),
    }
}
