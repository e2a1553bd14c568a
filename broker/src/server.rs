//! The broker's HTTP server on the host's loopback: OpenCode's provider `baseURL` is
//! `http://127.0.0.1:<port>/<provider>`. Each request is checked (placeholder, call, cap,
//! price), sent upstream with the real key, and its reply streamed back unchanged while the
//! usage in it is counted.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::keys::{Auth, Upstream};
use super::ledger::{self, Entry, Ledger};
use super::prices::Prices;
use super::route::{self, Call};
use super::upstream;
use super::usage::{Meter, Usage};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// A request body larger than this is refused (a long conversation with images is far smaller).
const MAX_REQUEST: usize = 16 << 20;
/// How long a client may take to send a request's body.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Calls under way at once, from the body's first byte to the reply's last; more wait for a
/// slot (OpenCode makes a few at a time). Bounds the memory the bodies take.
const MAX_IN_FLIGHT: usize = 8;
/// A reply is read to its end for its usage even after OpenCode went away, for at most this long.
const MAX_REPLY: Duration = Duration::from_secs(30 * 60);
/// How long OpenCode may leave a chunk of a reply unread before the broker stops passing it on
/// (and goes on reading the reply for its usage).
const CLIENT_STALL: Duration = Duration::from_secs(120);
/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The request headers that reach the provider: what the providers' SDKs need to describe the
/// call. Anything else (credentials, `OpenAI-Organization`/`-Project`, which move billing to
/// another project, hop-by-hop and `Expect` headers) stays behind.
const FORWARDED: &[&str] = &[
    "content-type",
    "accept",
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
    "http-referer",
    "x-title",
];

/// The Anthropic betas forwarded (by prefix): those OpenCode's SDK sends, which change how a
/// reply streams, not what the call may do. Any other (the MCP connector, files, code
/// execution, web fetch, long-context pricing) is refused by name.
const ALLOWED_BETAS: &[&str] = &[
    "claude-code-",
    "interleaved-thinking-",
    "fine-grained-tool-streaming-",
    "prompt-caching-",
    "token-efficient-tools-",
    "output-128k-",
];

/// Everything the server needs.
pub struct Config {
    pub upstreams: Vec<Upstream>,
    /// The placeholder OpenCode holds instead of a key.
    pub token: String,
    pub prices: Prices,
    pub ledger: Arc<Ledger>,
    /// Where OCSB_SPEND_LIMIT is set (named in the refusal).
    pub limit_set_at: String,
    pub tls: Arc<rustls::ClientConfig>,
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: Arc<Config>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            acc = listener.accept() => {
                let stream = match acc {
                    Ok((stream, _)) => stream,
                    // Out of descriptors: wait rather than spin.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (cfg, slots) = (cfg.clone(), slots.clone());
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (cfg, slots) = (cfg.clone(), slots.clone());
                        async move { Ok::<_, std::convert::Infallible>(handle(req, &cfg, &slots).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(HEAD_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

/// An error in the provider's own shape, so OpenCode shows its message.
fn refuse(status: StatusCode, auth: Option<Auth>, kind: &str, message: &str) -> Response<Body> {
    let body = match auth {
        Some(Auth::XApiKey) => {
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        _ => serde_json::json!({"error": {"message": message, "type": kind, "code": kind}}),
    };
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Whether the request carries the placeholder (as a bearer token or an `x-api-key`).
/// Compared in constant time: the port is open to every local process.
fn authorized(h: &HeaderMap, token: &str) -> bool {
    let given = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    given.is_some_and(|g| {
        g.len() == token.len() && g.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    })
}

/// The headers for the provider: [`FORWARDED`] from the client, then the broker's own.
fn upstream_headers(from: &HeaderMap, up: &Upstream, body_len: usize) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::new();
    for name in FORWARDED {
        for v in from.get_all(*name) {
            h.append(HeaderName::from_static(name), v.clone());
        }
    }
    // Every `anthropic-beta` header, each a comma-separated list.
    let betas = h.get_all("anthropic-beta").iter().filter_map(|v| v.to_str().ok()).flat_map(|b| b.split(','));
    if let Some(bad) =
        betas.map(str::trim).find(|f| !f.is_empty() && !ALLOWED_BETAS.iter().any(|p| f.starts_with(p)))
    {
        return Err(format!("the Anthropic beta `{}` is not forwarded", bad.escape_debug()));
    }
    // A header value that is not text cannot be judged: refused.
    if h.get_all("anthropic-beta").iter().any(|v| v.to_str().is_err()) {
        return Err("an `anthropic-beta` header that is not text".into());
    }
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set(header::HOST, &up.base.authority());
    // The broker reads the reply for its usage: uncompressed.
    set(header::ACCEPT_ENCODING, "identity");
    set(header::CONTENT_LENGTH, &body_len.to_string());
    match up.auth {
        Auth::Bearer => set(header::AUTHORIZATION, &format!("Bearer {}", up.key.expose())),
        Auth::XApiKey => set(HeaderName::from_static("x-api-key"), up.key.expose()),
    }
    Ok(h)
}

async fn handle(req: Request<Incoming>, cfg: &Config, slots: &Arc<tokio::sync::Semaphore>) -> Response<Body> {
    let started = Instant::now();
    let path = req.uri().path().to_string();
    let Some((id, rest)) = route::split(&path) else {
        return refuse(StatusCode::NOT_FOUND, None, "ocsb_broker", "ocsb broker: the path names no provider");
    };
    let Some(up) = cfg.upstreams.iter().find(|u| u.id == id) else {
        let msg = format!(
            "ocsb broker: no key for provider `{}`; add `<provider> <key> [<base URL>]` to the OCSB_PROVIDER_KEYS file",
            id.escape_debug()
        );
        return refuse(StatusCode::NOT_FOUND, None, "ocsb_broker", &msg);
    };
    let auth = Some(up.auth);
    if !authorized(req.headers(), &cfg.token) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            auth,
            "authentication_error",
            "ocsb broker: this is not the key of this run",
        );
    }
    let call = match route::call(req.method().as_str(), rest) {
        Ok(c) => c,
        Err(why) => {
            let msg =
                format!("ocsb broker: {}; only model calls are forwarded with your key", why.escape_debug());
            return refuse(StatusCode::FORBIDDEN, auth, "permission_error", &msg);
        }
    };
    // A slot first: the body is read only by calls that may run now. The slot is held until
    // the reply has been read to its end.
    let Ok(slot) = slots.clone().acquire_owned().await else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, auth, "api_error", "ocsb broker: stopping");
    };
    let (parts, body) = req.into_parts();
    let body = match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_REQUEST).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                auth,
                "invalid_request_error",
                &format!("ocsb broker: {e}"),
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                auth,
                "invalid_request_error",
                "ocsb broker: the body came too slowly",
            );
        }
    };
    let mut headers = match upstream_headers(&parts.headers, up, body.len()) {
        Ok(h) => h,
        Err(why) => {
            return refuse(StatusCode::FORBIDDEN, auth, "permission_error", &format!("ocsb broker: {why}"));
        }
    };
    let entry = |model: String| Entry {
        time: ledger::utc(SystemTime::now()).1,
        session: cfg.ledger.session().to_string(),
        provider: up.id.clone(),
        model,
        usage: Usage::default(),
        cost: None,
        duration_ms: 0,
        status: 0,
    };
    // Every body is judged (token counting too: a URL in it would be fetched all the same).
    let prepared = if parts.method == hyper::Method::POST {
        match route::prepare(rest, &body) {
            Ok(p) => Some(p),
            Err(why) => {
                let msg = format!("ocsb broker: {why}; such calls are not forwarded with your key");
                return refuse(StatusCode::FORBIDDEN, auth, "permission_error", &msg);
            }
        }
    } else {
        None
    };
    let mut meter = None;
    if let (Call::Generate, Some(prepared)) = (call, &prepared) {
        let limited = cfg.ledger.limit().is_set();
        let price = if limited {
            cfg.prices.by_user(&up.id, &prepared.model)
        } else {
            cfg.prices.get(&up.id, &prepared.model)
        }
        .filter(|p| !p.is_zero());
        if price.is_none() && limited {
            let why = if cfg.prices.get(&up.id, &prepared.model).is_some_and(|p| !p.is_zero()) {
                "only files the agent can write (the project's config, OpenCode's model cache) price it"
            } else {
                "no price is known for it"
            };
            let msg = format!(
                "ocsb broker: OCSB_SPEND_LIMIT is set and {why}, so the cost of {}/{} cannot be counted; \
                 give the model a `cost` in your global OpenCode config (~/.config/opencode-sandbox/opencode.jsonc)",
                up.id, prepared.model
            );
            return refuse(StatusCode::FORBIDDEN, auth, "permission_error", &msg);
        }
        // The most this call can cost: every byte of its body an input token, and every output
        // token it may ask for.
        let reserve = price.map_or(0.0, |p| {
            p.cost(&Usage { input: body.len() as u64, output: prepared.max_output, ..Usage::default() })
        });
        let ticket = match cfg.ledger.admit(entry(prepared.model.clone()), reserve) {
            Ok(t) => t,
            Err(r) => {
                let msg = r.message(&cfg.limit_set_at);
                eprintln!("ocsb: broker: refused a call to {}/{}: {msg}", up.id, prepared.model);
                return refuse(StatusCode::PAYMENT_REQUIRED, auth, "spend_limit", &msg);
            }
        };
        meter = Some(Metered { ticket, price, reserve });
    }
    let body = prepared.map(|p| Bytes::from(p.bytes)).unwrap_or(body);
    let mut guard = Settle { ledger: cfg.ledger.clone(), meter, started, done: false, _slot: slot };
    // The length of the body as it is sent (the broker writes it again).
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));

    let query = parts.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let Ok(uri) = format!("{}/{rest}{query}", up.base.path).parse::<hyper::Uri>() else {
        guard.settle((None, false), 0);
        return refuse(StatusCode::BAD_REQUEST, auth, "invalid_request_error", "ocsb broker: a bad path");
    };
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let reply = match send(up, &cfg.tls, req).await {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("ocsb broker: {}:{} did not answer: {e}", up.base.host, up.base.port);
            eprintln!("ocsb: broker: {msg}");
            guard.settle((None, false), 502);
            return refuse(StatusCode::BAD_GATEWAY, auth, "api_error", &msg);
        }
    };
    let (mut parts, body) = reply.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let event_stream = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let status = parts.status.as_u16();
    let (tx, rx) = http_body_util::channel::Channel::<Bytes, BoxError>::new(8);
    tokio::spawn(relay(body, tx, Meter::new(event_stream), guard, status));
    Response::from_parts(parts, rx.boxed())
}

/// Removes the headers of one hop from a reply (the fixed list and what its `Connection`
/// names, as [`ocsb_policy::http::hop_by_hop`] says): they concern the provider↔broker hop.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed = h.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    for name in ocsb_policy::http::hop_by_hop(listed) {
        h.remove(name.as_str());
    }
}

async fn send(
    up: &Upstream,
    tls: &Arc<rustls::ClientConfig>,
    req: Request<Full<Bytes>>,
) -> Result<upstream::Reply, BoxError> {
    let mut sender = upstream::connect(&up.base, tls).await?;
    Ok(sender.send_request(req).await?)
}

/// A metered call under way.
struct Metered {
    ticket: u64,
    price: Option<super::prices::Price>,
    /// Charged when a successful reply reports no usage: the provider billed something the
    /// broker could not read.
    reserve: f64,
}

/// Writes the call's line when it ends. A call whose task is dropped before (the run stopping)
/// is written by [`Ledger::close`], at its reservation.
struct Settle {
    ledger: Arc<Ledger>,
    meter: Option<Metered>,
    started: Instant,
    done: bool,
    /// The call's slot, free again when the call is settled.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Settle {
    /// `usage` and whether the reply's end was seen. A successful reply without usage, or one
    /// cut short, is charged at least its reservation: the provider billed what it generated,
    /// and the usage of a cut reply is only what was reported before the cut.
    fn settle(&mut self, (usage, complete): (Option<Usage>, bool), status: u16) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let Some(m) = &self.meter else { return };
        let ok = (200..300).contains(&status);
        let cost = match (usage, m.price) {
            (Some(u), Some(p)) if complete => Some(p.cost(&u)),
            (u, Some(p)) if ok => Some(p.cost(&u.unwrap_or_default()).max(m.reserve)),
            (Some(u), Some(p)) => Some(p.cost(&u)),
            (None, Some(_)) => Some(0.0),
            (_, None) => None,
        };
        let ms = self.started.elapsed().as_millis() as u64;
        self.ledger.finish(m.ticket, usage.unwrap_or_default(), cost, status, ms);
    }
}

/// Copies the reply to OpenCode frame by frame and counts its usage. When OpenCode goes away
/// or stops reading, the reply is still read to its end: the provider charges for it, so the
/// cap counts it.
async fn relay(
    mut body: Incoming,
    tx: http_body_util::channel::Sender<Bytes, BoxError>,
    mut meter: Meter,
    mut settle: Settle,
    status: u16,
) {
    let mut client = Some(tx);
    let deadline = tokio::time::Instant::now() + MAX_REPLY;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(e))) => {
                // A reply cut short upstream is cut short for OpenCode too, not ended cleanly.
                // Once its last event has passed, a transport error is only how the provider
                // hung up (a close-delimited body over TLS without close_notify): the reply
                // is whole, and ends as such.
                if let Some(tx) = client.take().filter(|_| !meter.complete()) {
                    tx.abort(e.into());
                }
                break;
            }
            Ok(None) | Err(_) => break,
        };
        if let Some(data) = frame.data_ref() {
            meter.feed(data);
        }
        if let Some(tx) = client.as_mut() {
            match tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => client = None,
            }
        }
    }
    // Written before OpenCode sees the reply end: whatever it asks next is judged with this
    // call's cost counted.
    settle.settle(meter.finish(), status);
    drop(client);
}
