//! Who may use the front: the request must come from this front's own page ([`same_front`]),
//! then carry the user's password, the login cookie it earns, or (a WebSocket handshake only)
//! OpenCode's own ticket ([`access`]). The front's cookies never reach OpenCode
//! ([`strip_cookie`]).

use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::auth;
use super::reply::{Body, full};
use crate::http::{is_upgrade, query_param};

#[derive(PartialEq)]
pub(super) enum Access {
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

pub(super) fn unauthorized() -> Response<Body> {
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
pub(super) fn strip_cookie(h: &mut HeaderMap) {
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

/// What the request may do, and whether it logged in now (then the answer sets the cookie).
pub(super) fn access(req: &Request<Incoming>, password: &str, name: &str, cookie: &str) -> (Access, bool) {
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
}
