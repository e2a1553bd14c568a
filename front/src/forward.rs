//! The reverse proxy itself (hyper): each request is let in by [`login`], then served by the
//! [`panel`] or forwarded to OpenCode. Each upstream request gets its own loopback connection, so
//! a streaming response (server-sent events) or an upgraded WebSocket never blocks another
//! request.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use super::config::FrontConfig;
use super::login::{self, Access};
use super::panel;
use super::reply::{Body, BoxError, full};
use super::upstream::send;
use crate::http::is_upgrade;

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

async fn handle(req: Request<Incoming>, cfg: Arc<FrontConfig>) -> Result<Response<Body>, Infallible> {
    if let Err(why) = login::same_front(req.headers(), cfg.listen.port()) {
        cfg.log(format!("refused: {why}"));
        return Ok(full(
            StatusCode::FORBIDDEN,
            "text/plain; charset=utf-8",
            format!("403 Forbidden: {why}\n"),
        ));
    }
    let name = login::cookie_name(cfg.listen);
    let (access, set_cookie) = login::access(&req, &cfg.password, &name, &cfg.cookie);
    if access == Access::Denied {
        return Ok(login::unauthorized());
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
    if cfg.panel && path == panel::PANEL_PATH {
        return panel::script(cfg);
    }
    if cfg.panel && path == panel::TOKENS_PATH && access == Access::User {
        return panel::tokens_endpoint(&req, cfg).await;
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
    crate::http::strip_hop_by_hop(&mut parts.headers);
    if let (true, Some(v)) = (upgrade, upgrade_value) {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, v);
    }
    // Uncompressed answers, so the HTML can be edited (OpenCode does not compress anyway).
    parts.headers.remove(header::ACCEPT_ENCODING);
    parts.headers.remove(header::AUTHORIZATION);
    login::strip_cookie(&mut parts.headers);
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
    crate::http::strip_hop_by_hop(&mut parts.headers);
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
        let page = panel::inject(&bytes);
        if with_credentials {
            cfg.log(format_args!("{path}: panel script added to the page"));
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        return Ok(Response::from_parts(parts, Full::new(Bytes::from(page)).map_err(|e| match e {}).boxed()));
    }
    Ok(Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_token_is_removed() {
        let u: Uri = "/a/b?x=1&auth_token=abc&y=%2Fhome%2Fu".parse().unwrap();
        assert_eq!(without_auth_token(&u), "/a/b?x=1&y=%2Fhome%2Fu");
        let u: Uri = "/a?auth_token=abc".parse().unwrap();
        assert_eq!(without_auth_token(&u), "/a");
    }
}
