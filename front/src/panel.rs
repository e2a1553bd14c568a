//! The Tokens panel: its script, the tag added to OpenCode's pages, and `/__ocsb/tokens`, the
//! numbers it shows (asked of OpenCode's API with OpenCode's secret, summed by [`tokens`]).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use ocsb_policy::http::{PATH_VALUE, encode};
use serde_json::Value;

use super::config::FrontConfig;
use super::reply::{Body, BoxError, full};
use super::tokens;
use super::upstream::send;
use crate::http::query_param;

/// The panel's script, served same-origin so OpenCode's CSP (`script-src 'self'`) allows it.
const PANEL_JS: &str = include_str!("panel.js");
pub const PANEL_PATH: &str = "/__ocsb/panel.js";
pub const TOKENS_PATH: &str = "/__ocsb/tokens";
const PANEL_TAG: &str = "<script src=\"/__ocsb/panel.js\" defer></script>";

/// The panel's script itself.
pub(super) fn script(cfg: &FrontConfig) -> Response<Body> {
    cfg.log("the browser loaded the panel script");
    let mut r = full(StatusCode::OK, "text/javascript; charset=utf-8", PANEL_JS);
    r.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    r
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
        b = b.header("x-opencode-directory", encode(d, PATH_VALUE));
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
                encode(provider, PATH_VALUE),
                encode(model, PATH_VALUE)
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

/// `/__ocsb/tokens?session=…&directory=…`: the session's numbers as JSON.
pub(super) async fn tokens_endpoint(req: &Request<Incoming>, cfg: &FrontConfig) -> Response<Body> {
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
            if let Some(p) = &cfg.published {
                let now = p.lock().map(|p| p.clone()).unwrap_or_default();
                v["published"] = serde_json::to_value(now).unwrap_or_default();
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
    use super::*;

    #[test]
    fn injects_before_head_end() {
        let out =
            String::from_utf8(inject(b"<html><HEAD><title>x</title></HEAD><body></body></html>")).unwrap();
        assert_eq!(out, format!("<html><HEAD><title>x</title>{PANEL_TAG}</HEAD><body></body></html>"));
        let out = String::from_utf8(inject(b"<p>no head</p>")).unwrap();
        assert!(out.starts_with(PANEL_TAG));
    }
}
