//! The reverse proxy itself (hyper). Each upstream request gets its own loopback connection, so a
//! streaming response (server-sent events) or an upgraded WebSocket never blocks another request.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::FrontConfig;
use super::auth;
use super::tokens;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// The panel's script, served same-origin so OpenCode's CSP (`script-src 'self'`) allows it.
const PANEL_JS: &str = include_str!("panel.js");
pub const PANEL_PATH: &str = "/__ocsb/panel.js";
pub const TOKENS_PATH: &str = "/__ocsb/tokens";
const PANEL_TAG: &str = "<script src=\"/__ocsb/panel.js\" defer></script>";

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus `proxy-*`.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: Arc<FrontConfig>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                let _ = stream.set_nodelay(true);
                let cfg = cfg.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(req, cfg.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

#[allow(clippy::expect_used, reason = "static content types")]
fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).expect("static content type"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn unauthorized() -> Response<Body> {
    let mut r = full(
        StatusCode::UNAUTHORIZED,
        "text/plain; charset=utf-8",
        "401 Unauthorized: log in as `opencode` with the password from the state directory\n",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"ocsb\", charset=\"UTF-8\""),
    );
    r
}

/// The value of query parameter `name`, percent-decoded.
fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// The request URI without `auth_token` (the front consumed it; OpenCode gets its own secret).
fn without_auth_token(uri: &Uri) -> String {
    let path = uri.path();
    match uri.query() {
        None => path.to_string(),
        Some(q) => {
            let kept: Vec<&str> =
                q.split('&').filter(|kv| !kv.starts_with("auth_token=") && *kv != "auth_token").collect();
            if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) }
        }
    }
}

fn is_upgrade(h: &HeaderMap) -> bool {
    h.get(header::UPGRADE).is_some()
        && h.get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

#[derive(PartialEq)]
enum Access {
    /// The user's credentials: forward with OpenCode's secret.
    User,
    /// A WebSocket upgrade with OpenCode's own short-lived `ticket` and no credentials: forward
    /// without credentials, OpenCode checks the ticket (browsers do not always send Basic
    /// credentials on WebSocket handshakes).
    Ticket,
    Denied,
}

/// The prefix of every front's login cookie; the name is `ocsb_auth_<port>`. Browsers keep cookies
/// per host, not per port, so two projects' fronts on 127.0.0.1 would otherwise overwrite each
/// other's login.
pub const COOKIE: &str = "ocsb_auth";

/// This front's cookie name.
pub fn cookie_name(listen: SocketAddr) -> String {
    format!("{COOKIE}_{}", listen.port())
}

fn cookie_ok(h: &HeaderMap, name: &str, value: &str) -> bool {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .any(|c| c.trim().split_once('=').is_some_and(|(k, v)| k == name && auth::credentials_eq(v, value)))
}

/// Remove every front's login cookie before a request goes to OpenCode: it is not OpenCode's,
/// and another project's cookie (sent along, since cookies ignore ports) must never reach this
/// project's sandbox, which could log in to that project's front with it.
fn strip_cookie(h: &mut HeaderMap) {
    let kept: Vec<String> = h
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.starts_with(COOKIE))
        .map(String::from)
        .collect();
    h.remove(header::COOKIE);
    if !kept.is_empty()
        && let Ok(v) = HeaderValue::from_str(&kept.join("; "))
    {
        h.insert(header::COOKIE, v);
    }
}

fn access(req: &Request<Incoming>, password: &str, name: &str, cookie: &str) -> (Access, bool) {
    if cookie_ok(req.headers(), name, cookie) {
        return (Access::User, false);
    }
    let header_ok = req
        .headers()
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| auth::header_matches(v, password));
    let token_ok =
        query_param(req.uri(), "auth_token").is_some_and(|t| auth::credentials_match(&t, password));
    if header_ok || token_ok {
        (Access::User, true)
    } else if is_upgrade(req.headers()) && query_param(req.uri(), "ticket").is_some_and(|t| !t.is_empty()) {
        (Access::Ticket, false)
    } else {
        (Access::Denied, false)
    }
}

/// Whether a request may reach this front at all, before any credential is looked at.
///
/// `Host` must name this front on loopback (`127.0.0.1`, `localhost` or `[::1]` with its port):
/// a page on another site that rebinds its own name to 127.0.0.1 sends its own name. `Origin`,
/// where a browser sends it (cross-origin fetches, every request that changes state, every
/// WebSocket handshake), must be this front too; requests without one (curl, scripts) are not
/// from a page.
pub fn same_front(headers: &HeaderMap, port: u16) -> Result<(), String> {
    let ours = |authority: &str| {
        ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .any(|h| authority.eq_ignore_ascii_case(&format!("{h}:{port}")))
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ours(host) {
        return Err(format!("Host {host:?} is not this front (open http://127.0.0.1:{port}/)"));
    }
    // Any Origin a browser sends must be this front. A page on another port of 127.0.0.1 is the
    // same *site* (cookies do not tell ports apart), so `Sec-Fetch-Site` must say same-origin,
    // or none, except for a top-level navigation (a link the user follows).
    if let Some(origin) = headers.get(header::ORIGIN) {
        let o = origin.to_str().unwrap_or("");
        if !o.strip_prefix("http://").is_some_and(ours) {
            return Err(format!("Origin {o:?} is not this front: a request from another site"));
        }
    }
    let fetch = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    let site = fetch("sec-fetch-site");
    if (site == "same-site" || site == "cross-site") && fetch("sec-fetch-mode") != "navigate" {
        return Err(format!("a {site} request from another page (Sec-Fetch-Site)"));
    }
    Ok(())
}

async fn handle(req: Request<Incoming>, cfg: Arc<FrontConfig>) -> Result<Response<Body>, Infallible> {
    if let Err(why) = same_front(req.headers(), cfg.listen.port()) {
        cfg.log(format!("refused: {why}"));
        return Ok(full(
            StatusCode::FORBIDDEN,
            "text/plain; charset=utf-8",
            format!("403 Forbidden: {why}\n"),
        ));
    }
    let name = cookie_name(cfg.listen);
    let (access, set_cookie) = access(&req, &cfg.password, &name, &cfg.cookie);
    if access == Access::Denied {
        return Ok(unauthorized());
    }
    let mut resp = route(req, &cfg, access).await;
    // Never inside another page's frame (clickjacking of the UI's own buttons).
    let h = resp.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.append(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    if set_cookie {
        let c = format!("{name}={}; Path=/; HttpOnly; SameSite=Strict", cfg.cookie);
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    Ok(resp)
}

async fn route(req: Request<Incoming>, cfg: &FrontConfig, access: Access) -> Response<Body> {
    let path = req.uri().path();
    if cfg.panel && path == PANEL_PATH {
        cfg.log("the browser loaded the panel script");
        let mut r = full(StatusCode::OK, "text/javascript; charset=utf-8", PANEL_JS);
        r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        return r;
    }
    if cfg.panel && path == TOKENS_PATH && access == Access::User {
        return tokens_endpoint(&req, cfg).await;
    }
    if path.starts_with("/__ocsb/") {
        return full(StatusCode::NOT_FOUND, "text/plain", "not found\n");
    }
    match forward(req, cfg, access == Access::User).await {
        Ok(r) => r,
        Err(e) => full(
            StatusCode::BAD_GATEWAY,
            "text/plain; charset=utf-8",
            format!("502 Bad Gateway: OpenCode on {} did not answer: {e}\n", cfg.upstream),
        ),
    }
}

/// Send one request to OpenCode on a fresh connection; the connection task lives as long as the
/// response body (and any upgrade) needs it.
async fn send<B>(cfg: &FrontConfig, req: Request<B>) -> Result<Response<Incoming>, BoxError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    // The request carries OpenCode's secret: only to a listener of the user's own.
    super::listener::check_ours(cfg.upstream)?;
    let stream = tokio::net::TcpStream::connect(cfg.upstream).await?;
    let (local, peer) = (stream.local_addr()?, stream.peer_addr()?);
    tokio::task::spawn_blocking(move || super::listener::check_peer(local, peer)).await??;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(sender.send_request(req).await?)
}

async fn forward(
    mut req: Request<Incoming>,
    cfg: &FrontConfig,
    with_credentials: bool,
) -> Result<Response<Body>, BoxError> {
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    parts.uri = without_auth_token(&parts.uri).parse()?;
    let upgrade_value = parts.headers.get(header::UPGRADE).cloned();
    for h in HOP_BY_HOP {
        parts.headers.remove(*h);
    }
    if let (true, Some(v)) = (upgrade, upgrade_value) {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, v);
    }
    // Uncompressed answers, so the HTML can be edited (OpenCode does not compress anyway).
    parts.headers.remove(header::ACCEPT_ENCODING);
    parts.headers.remove(header::AUTHORIZATION);
    strip_cookie(&mut parts.headers);
    if with_credentials {
        parts.headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&cfg.upstream_authorization)?);
    }
    parts.headers.insert(header::HOST, HeaderValue::from_str(&cfg.upstream.to_string())?);
    let mut resp = send(cfg, Request::from_parts(parts, body)).await?;

    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        if let Some(client_upgrade) = client_upgrade {
            tokio::spawn(async move {
                if let (Ok(a), Ok(b)) = (client_upgrade.await, upstream_upgrade.await) {
                    let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(a), &mut TokioIo::new(b)).await;
                }
            });
        }
        let (parts, _) = resp.into_parts();
        return Ok(Response::from_parts(parts, Empty::new().map_err(|e| match e {}).boxed()));
    }

    let (mut parts, body) = resp.into_parts();
    for h in HOP_BY_HOP {
        parts.headers.remove(*h);
    }
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/html"));
    let encoded = parts.headers.get(header::CONTENT_ENCODING).filter(|v| *v != "identity");
    // Only pages the user asked for are logged: anyone on the machine can send requests here.
    if cfg.panel && html && encoded.is_some() && with_credentials {
        cfg.log(format_args!(
            "{path}: the page is compressed ({}), the panel script was not added",
            encoded.and_then(|v| v.to_str().ok()).unwrap_or("?")
        ));
    }
    if cfg.panel && html && encoded.is_none() {
        let bytes = body.collect().await?.to_bytes();
        let page = inject(&bytes);
        if with_credentials {
            cfg.log(format_args!("{path}: panel script added to the page"));
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        return Ok(Response::from_parts(parts, Full::new(Bytes::from(page)).map_err(|e| match e {}).boxed()));
    }
    Ok(Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed()))
}

/// Insert the panel's script tag before `</head>` (or at the start when there is none).
pub fn inject(html: &[u8]) -> Vec<u8> {
    let lower = html.to_ascii_lowercase();
    let at = lower.windows(7).position(|w| w == b"</head>").unwrap_or(0);
    let mut out = Vec::with_capacity(html.len() + PANEL_TAG.len());
    out.extend_from_slice(&html[..at]);
    out.extend_from_slice(PANEL_TAG.as_bytes());
    out.extend_from_slice(&html[at..]);
    out
}

async fn get_json(
    cfg: &FrontConfig,
    path_and_query: &str,
    directory: Option<&str>,
) -> Result<Value, BoxError> {
    let mut b = Request::get(path_and_query)
        .header(header::HOST, cfg.upstream.to_string())
        .header(header::AUTHORIZATION, &cfg.upstream_authorization)
        .header(header::ACCEPT, "application/json");
    if let Some(d) = directory {
        b = b.header("x-opencode-directory", percent_encode(d));
    }
    let resp = send(cfg, b.body(Empty::<Bytes>::new())?).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        return Err(format!("GET {path_and_query}: HTTP {status}").into());
    }
    Ok(serde_json::from_slice(&bytes)?)
}

/// Tool-definition sizes per `provider/model`: they change only with the config, which OpenCode
/// does not hot-reload.
fn tools_cache() -> &'static Mutex<HashMap<String, u64>> {
    static CACHE: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

async fn summary(
    cfg: &FrontConfig,
    session: &str,
    directory: Option<&str>,
) -> Result<tokens::Summary, BoxError> {
    let s = get_json(cfg, &format!("/session/{session}"), directory).await?;
    let m = get_json(cfg, &format!("/session/{session}/message"), directory).await?;
    let p = get_json(cfg, "/config/providers", directory).await.unwrap_or(Value::Null);
    let first = tokens::summarize(&s, &m, &p, 0);
    let Some((provider, model)) = first.model.split_once('/').filter(|(a, b)| !a.is_empty() && !b.is_empty())
    else {
        return Ok(first);
    };
    let key = first.model.clone();
    let cached = tools_cache().lock().map(|c| c.get(&key).copied()).unwrap_or(None);
    let tools = match cached {
        Some(t) => t,
        None => {
            let q = format!(
                "/experimental/tool?provider={}&model={}",
                percent_encode(provider),
                percent_encode(model)
            );
            let t = get_json(cfg, &q, directory).await.map(|v| tokens::tools_tokens(&v)).unwrap_or(0);
            if let Ok(mut c) = tools_cache().lock() {
                c.insert(key, t);
            }
            t
        }
    };
    Ok(tokens::summarize(&s, &m, &p, tools))
}

async fn tokens_endpoint(req: &Request<Incoming>, cfg: &FrontConfig) -> Response<Body> {
    let Some(session) = query_param(req.uri(), "session").filter(|s| {
        s.starts_with("ses") && s.len() < 100 && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
    }) else {
        return full(StatusCode::BAD_REQUEST, "application/json", r#"{"error":"pass ?session=ses_..."}"#);
    };
    let directory = query_param(req.uri(), "directory").filter(|d| d.starts_with('/'));
    match summary(cfg, &session, directory.as_deref()).await {
        Ok(s) => {
            let mut v = serde_json::to_value(&s).unwrap_or_default();
            // What the broker measured on the wire (OpenCode's own `cost` is the agent's to
            // change), against the limit.
            if let Some(l) = &cfg.spend {
                v["spend"] = serde_json::to_value(l.view()).unwrap_or_default();
            }
            full(StatusCode::OK, "application/json", serde_json::to_vec(&v).unwrap_or_default())
        }
        Err(e) => {
            cfg.log(format_args!("tokens for {session}: OpenCode's API failed: {e}"));
            full(
                StatusCode::BAD_GATEWAY,
                "application/json",
                serde_json::json!({ "error": e.to_string() }).to_string(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_fronts_cookie_is_stripped_and_only_this_ones_logs_in() {
        let addr: SocketAddr = "127.0.0.1:4196".parse().unwrap();
        let name = cookie_name(addr);
        assert_eq!(name, "ocsb_auth_4196");
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; ocsb_auth_4196=s1; ocsb_auth_4198=s2"),
        );
        assert!(cookie_ok(&h, &name, "s1"));
        assert!(!cookie_ok(&h, &name, "s2"), "another project's cookie is not a login here");
        strip_cookie(&mut h);
        assert_eq!(h.get(header::COOKIE).unwrap(), "theme=dark", "no front's cookie reaches OpenCode");
    }

    use super::*;

    #[test]
    fn only_this_fronts_host_and_origin_pass() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        for host in ["127.0.0.1:4196", "localhost:4196", "[::1]:4196", "LOCALHOST:4196"] {
            assert!(same_front(&h(&[("host", host)]), 4196).is_ok(), "{host}");
        }
        for host in ["attacker.example:4196", "127.0.0.1:80", "127.0.0.1", ""] {
            assert!(same_front(&h(&[("host", host)]), 4196).is_err(), "{host}");
        }
        let ok = h(&[("host", "127.0.0.1:4196"), ("origin", "http://localhost:4196")]);
        assert!(same_front(&ok, 4196).is_ok());
        let evil = h(&[("host", "127.0.0.1:4196"), ("origin", "http://attacker.example")]);
        assert!(same_front(&evil, 4196).is_err());
        let sibling =
            h(&[("host", "127.0.0.1:4196"), ("sec-fetch-site", "same-site"), ("sec-fetch-mode", "cors")]);
        assert!(same_front(&sibling, 4196).is_err(), "a page on another port of 127.0.0.1");
        let link = h(&[
            ("host", "127.0.0.1:4196"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ]);
        assert!(same_front(&link, 4196).is_ok(), "following a link");
        let ws = h(&[
            ("host", "127.0.0.1:4196"),
            ("origin", "http://attacker.example"),
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert!(same_front(&ws, 4196).is_err(), "a WebSocket from another site");
        assert!(same_front(&h(&[("host", "127.0.0.1:4196")]), 4196).is_ok(), "no Origin: not a page");
    }

    #[test]
    fn injects_before_head_end() {
        let out =
            String::from_utf8(inject(b"<html><HEAD><title>x</title></HEAD><body></body></html>")).unwrap();
        assert_eq!(out, format!("<html><HEAD><title>x</title>{PANEL_TAG}</HEAD><body></body></html>"));
        let out = String::from_utf8(inject(b"<p>no head</p>")).unwrap();
        assert!(out.starts_with(PANEL_TAG));
    }

    #[test]
    fn auth_token_is_removed_and_query_decoded() {
        let u: Uri = "/a/b?x=1&auth_token=abc&y=%2Fhome%2Fu".parse().unwrap();
        assert_eq!(without_auth_token(&u), "/a/b?x=1&y=%2Fhome%2Fu");
        assert_eq!(query_param(&u, "y").unwrap(), "/home/u");
        let u: Uri = "/a?auth_token=abc".parse().unwrap();
        assert_eq!(without_auth_token(&u), "/a");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_encode("/tmp/a b"), "/tmp/a%20b");
    }
}
