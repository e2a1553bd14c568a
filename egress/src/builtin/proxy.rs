//! The builtin HTTP/1.1 forward proxy: absolute-form requests and CONNECT tunnels.
//!
//! Every request (also each request on a keep-alive connection) is decided afresh by the policy
//! crate, with the authority parsed the way squid parses it (the URI wins over `Host`, userinfo
//! is ignored, legacy IPv4 forms are canonicalised). Denials get a 403 with
//! `X-Egress-Decision: <rule>` (`block:project:3`, as squid sends it); allowed requests go to the
//! **checked address**, never to the name (see [`super::dial`]).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method as HttpMethod, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ocsb_policy::egress::{Decision, Host, IpNet, Policy, RuleKind, Step, Target, Verdict};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::conns::{Admit, BusyGuard, Slot, Table};
use super::dial::{self, DialError};
use super::logger::Logger;
use ocsb_policy::egress::LogLine;

/// The response header that carries the deciding rule of a denial.
pub const DECISION_HEADER: &str = "x-egress-decision";
/// The response header on errors the proxy generated itself (DNS failure, upstream refused).
pub const ERROR_HEADER: &str = "x-egress-error";

/// Resource caps. *Why*: the proxy is reachable by the agent, which may misbehave; none of its
/// inputs may exhaust the host's memory or file descriptors or lock out other clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request head (request line + headers) accepted; larger heads get 431 (squid:
    /// `request_header_max_size`, 64 KB).
    pub max_header_bytes: usize,
    /// Most header fields in one request (squid has no count limit below its size limit).
    pub max_headers: usize,
    /// Open client connections; at the cap the oldest idle one is evicted (else the quietest
    /// tunnel, see `quiet_tunnel`), else the new one refused.
    pub max_connections: usize,
    /// Open connections of one client address, with the same eviction among its own.
    pub max_per_client: usize,
    /// A tunnel in which no byte moved for this long is closed (squid: `read_timeout`).
    pub tunnel_idle: Duration,
    /// How long a server may take to start its answer (squid: `read_timeout`).
    pub response_timeout: Duration,
    /// A tunnel quiet for this long may be closed to admit a new connection at a cap.
    pub quiet_tunnel: Duration,
    /// How long a connection may wait for (the rest of) a request head.
    pub idle_timeout: Duration,
    /// One DNS lookup per request, at most this long (squid: `dns_timeout`).
    pub dns_timeout: Duration,
    /// Per-address upstream connect timeout.
    pub connect_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_header_bytes: 64 * 1024,
            max_headers: 1000,
            max_connections: 1024,
            max_per_client: 768,
            tunnel_idle: Duration::from_secs(15 * 60),
            response_timeout: Duration::from_secs(15 * 60),
            quiet_tunnel: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            dns_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Connections at once from non-clients (each gets its 403 `client`, then is closed).
const OUTSIDER_SLOTS: usize = 32;

/// The policy in force, swapped whole on reload; requests already being decided keep the one
/// they started with.
#[derive(Clone)]
pub struct PolicyCell(Arc<RwLock<Arc<Policy>>>);

impl PolicyCell {
    pub fn new(p: Policy) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(p))))
    }
    pub fn get(&self) -> Arc<Policy> {
        self.0.read().map(|g| g.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }
    pub fn set(&self, p: Policy) {
        self.update(|_| p);
    }
    /// Replace the policy with `f(current)`, under the lock (a reload and a refresh of the host's
    /// addresses cannot undo each other).
    pub fn update(&self, f: impl FnOnce(&Policy) -> Policy) {
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        *g = Arc::new(f(&g));
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Incoming>;

/// Idle keep-alive connections to origin servers, keyed by the exact address dialed.
#[derive(Clone, Default)]
struct Pool(Arc<std::sync::Mutex<IdleConns>>);

type IdleConns = std::collections::HashMap<SocketAddr, Vec<(Sender, std::time::Instant)>>;

impl Pool {
    const MAX_IDLE_PER_ADDR: usize = 16;
    /// Idle server connections in all (each holds a descriptor).
    const MAX_IDLE: usize = 256;
    const IDLE: Duration = Duration::from_secs(30);

    /// A ready connection to one of `addrs` (all already checked by the caller).
    fn take(&self, addrs: &[IpAddr], port: u16) -> Option<(Sender, IpAddr)> {
        let mut m = self.0.lock().ok()?;
        for ip in addrs {
            if let Some(v) = m.get_mut(&SocketAddr::new(*ip, port)) {
                while let Some((s, since)) = v.pop() {
                    if !s.is_closed() && s.is_ready() && since.elapsed() < Self::IDLE {
                        return Some((s, *ip));
                    }
                }
            }
        }
        None
    }

    fn put(&self, addr: SocketAddr, s: Sender) {
        if s.is_closed() {
            return;
        }
        if let Ok(mut m) = self.0.lock() {
            // Closed and expired connections go from every address, not only this one, so idle
            // connections to many addresses cannot pile up.
            if m.values().map(Vec::len).sum::<usize>() >= Self::MAX_IDLE {
                m.retain(|_, v| {
                    v.retain(|(s, since)| !s.is_closed() && since.elapsed() < Self::IDLE);
                    !v.is_empty()
                });
                if m.values().map(Vec::len).sum::<usize>() >= Self::MAX_IDLE {
                    return;
                }
            }
            let v = m.entry(addr).or_default();
            v.retain(|(s, since)| !s.is_closed() && since.elapsed() < Self::IDLE);
            if v.len() < Self::MAX_IDLE_PER_ADDR {
                v.push((s, std::time::Instant::now()));
            }
        }
    }
}

struct Shared {
    /// Connections from addresses that are not clients, only to be refused (kept apart, so they
    /// never take or evict a client's slot).
    outsiders: Arc<Table>,
    resolver: dial::Resolver,
    /// Who may use the proxy ([`crate::listen::client_networks`], the same rule squid gets).
    clients: Vec<IpNet>,
    pool: Pool,
    policy: PolicyCell,
    logger: Logger,
    limits: Limits,
    conns: Arc<Table>,
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A running proxy: its bound addresses and a handle to stop it.
pub struct Running {
    pub addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    conns: Arc<Table>,
    shared: Arc<Shared>,
}

/// The connections a lent listener accepted, to end with its lease.
type Accepted = Arc<std::sync::Mutex<Vec<std::sync::Weak<super::conns::Slot>>>>;

/// Serves listeners lent while the proxy runs ([`super::lend`]), as its own listeners are
/// served: the same rules, limits and log. The client rule grows by the lent listener's own
/// network (of the interface that holds its address, [`crate::listen::interface_network`]): a
/// listener lent on a Docker network's gateway serves that network's containers, and only on
/// that listener.
#[derive(Clone)]
pub struct Lender {
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
}

impl Lender {
    /// Accepts on `listener` until `until` completes or the proxy stops; the listener is closed
    /// then, and the connections accepted on it end too when `until` completed: the lender is
    /// gone (its sandbox ended), and each of them would hold the sandbox's network namespace.
    pub fn serve(
        &self,
        listener: TcpListener,
        until: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (shared, stop) = (self.shared.clone(), self.stop.clone());
        let accepted: Accepted = Arc::default();
        let mut clients = shared.clients.clone();
        let own = listener.local_addr().ok().map(|a| a.ip()).filter(|ip| !ip.is_loopback());
        if let Some(n) = own.and_then(crate::listen::interface_network)
            && !clients.contains(&n)
        {
            clients.push(n);
        }
        let clients = Arc::new(clients);
        tokio::spawn(async move {
            tokio::select! {
                () = accept_loop(listener, shared, stop, Some(accepted.clone()), clients) => {}
                () = until => {}
            }
            let slots = std::mem::take(&mut *accepted.lock().unwrap_or_else(|p| p.into_inner()));
            for slot in slots.iter().filter_map(std::sync::Weak::upgrade) {
                slot.kill.notify_waiters();
                slot.kill.notify_one();
            }
        });
    }
}

impl Running {
    /// Stop accepting; open tunnels finish on their own.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
    /// The connection table, for live counts in `status`.
    pub fn connections(&self) -> Arc<Table> {
        self.conns.clone()
    }
    /// What serves a listener lent to the running proxy.
    pub fn lender(&self) -> Lender {
        Lender { shared: self.shared.clone(), stop: self.stop.subscribe() }
    }
}

/// Start serving on already-bound listeners (the caller binds, so that a port conflict is
/// reported before the process detaches).
pub fn start(
    listeners: Vec<TcpListener>,
    policy: PolicyCell,
    logger: Logger,
    limits: Limits,
    resolver: dial::Resolver,
) -> Running {
    let conns = Table::new(limits.max_connections, limits.max_per_client, limits.quiet_tunnel);
    let addrs: Vec<SocketAddr> = listeners.iter().filter_map(|l| l.local_addr().ok()).collect();
    let clients = crate::listen::client_networks(&addrs);
    let shared = Arc::new(Shared {
        outsiders: Table::new(OUTSIDER_SLOTS, OUTSIDER_SLOTS, limits.quiet_tunnel),
        resolver,
        clients,
        pool: Pool::default(),
        policy,
        logger,
        limits,
        conns: conns.clone(),
    });
    let (stop, stop_rx) = watch::channel(false);
    let tasks = listeners
        .into_iter()
        .map(|l| {
            let clients = Arc::new(shared.clients.clone());
            tokio::spawn(accept_loop(l, shared.clone(), stop_rx.clone(), None, clients))
        })
        .collect();
    Running { addrs, stop, tasks, conns, shared }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    track: Option<Accepted>,
    clients: Arc<Vec<IpNet>>,
) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                shared.logger.note(&format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let client = dial::canonical(peer.ip());
        let table =
            if clients.iter().any(|n| n.contains(client)) { &shared.conns } else { &shared.outsiders };
        // Every loopback address is the same host: one client, however many 127/8 addresses a
        // process binds to.
        let key = if client.is_loopback() { IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) } else { client };
        let slot = match table.admit(key) {
            Admit::Admitted(s) => s,
            Admit::AdmittedEvicting(s) => {
                shared.logger.log(&refusal(peer, 503, "-", "EVICT_IDLE"));
                s
            }
            Admit::Refused => {
                shared.logger.log(&refusal(peer, 503, "-", "CONN_LIMIT"));
                drop(stream);
                continue;
            }
        };
        if let Some(t) = &track {
            let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
            t.retain(|w| w.strong_count() > 0);
            t.push(Arc::downgrade(&slot));
        }
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, peer, shared.clone(), slot, clients.clone()));
    }
}

fn refusal(peer: SocketAddr, status: u16, rule: &str, method: &str) -> LogLine {
    LogLine {
        time: fmt_time(now_ms()),
        client: dial::canonical(peer.ip()).to_string(),
        result: "NONE_NONE".into(),
        status,
        rule: rule.into(),
        method: method.into(),
        target: "-".into(),
        peer: None,
    }
}

fn fmt_time(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// What an HTTP/2 client sends first; the filter speaks HTTP/1 only and says so, as squid does.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    clients: Arc<Vec<IpNet>>,
) {
    let mut first = [0u8; H2_PREFACE.len()];
    if let Ok(Ok(n)) = tokio::time::timeout(shared.limits.idle_timeout, stream.peek(&mut first)).await
        && n == first.len()
        && first == H2_PREFACE
    {
        use tokio::io::AsyncWriteExt;
        shared.logger.log(&refusal(peer, 400, "-", "error:invalid-request"));
        let mut stream = stream;
        let _ = stream
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    }
    let svc_shared = shared.clone();
    let svc_slot = slot.clone();
    let service = hyper::service::service_fn(move |req| {
        let guard = svc_slot.enter();
        handle(req, peer, svc_shared.clone(), guard, clients.clone())
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .header_read_timeout(shared.limits.idle_timeout)
        .max_headers(shared.limits.max_headers)
        // A client that ends its input after the request (`nc`, `printf … |`) still gets the answer.
        .half_close(true)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                let status = if e.is_parse_too_large() { 431 } else if e.is_parse() { 400 } else { 0 };
                if status != 0 {
                    shared.logger.log(&refusal(peer, status, "-", "error:invalid-request"));
                }
            }
        }
        _ = slot.kill.notified() => {}
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The fields of one transaction's log line that are known before the response is sent.
struct Txn {
    time_ms: u64,
    client: IpAddr,
    method: String,
    target: String,
    decision: Option<Decision>,
}

impl Txn {
    fn line(&self, code: &str, status: u16, _bytes: u64, server: Option<IpAddr>) -> LogLine {
        // The rule field is the policy's note (`block:project:3`), exactly what squid's
        // `annotate_transaction` records, so both backends log the same text.
        LogLine {
            time: fmt_time(self.time_ms),
            client: self.client.to_string(),
            result: code.into(),
            status,
            rule: self.decision.as_ref().map(|d| d.note()).unwrap_or_else(|| "-".into()),
            method: self.method.clone(),
            target: self.target.clone(),
            peer: server.map(|ip| ip.to_string()),
        }
    }
}

/// The target as it may be logged and printed: every byte outside printable ASCII is
/// percent-encoded (as squid logs it). *Why*: the path is the agent's; C1 controls or bidi
/// overrides in it would reach the user's terminal through `ocsb egress logs`.
pub(crate) fn log_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x21..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn host_display(h: &Host) -> String {
    match h {
        Host::Name(n) => n.clone(),
        Host::Ip(IpAddr::V4(a)) => a.to_string(),
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
    }
}

fn text_response(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n: Infallible| match n {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if status != StatusCode::FORBIDDEN {
        // Marks an answer made by the proxy itself (not by the origin), like squid's
        // X-Squid-Error: `egress verify` must not count it as a passed request.
        r.headers_mut().insert(ERROR_HEADER, HeaderValue::from_static("proxy"));
    }
    r
}

/// The filter's own refusal: 403 with the deciding rule in [`DECISION_HEADER`], in the same
/// format squid sends (`block:project:3`); the body says it in words, with `file:line`.
fn denial(d: &Decision, what: &str, advice: &str) -> Response<ProxyBody> {
    let mut r =
        text_response(StatusCode::FORBIDDEN, format!("ocsb egress: {what} denied by rule {d}\n{advice}\n"));
    if let Ok(v) = HeaderValue::from_str(&d.note()) {
        r.headers_mut().insert(DECISION_HEADER, v);
    }
    r
}

async fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    shared: Arc<Shared>,
    guard: BusyGuard,
    clients: Arc<Vec<IpNet>>,
) -> Result<Response<ProxyBody>, Infallible> {
    let is_connect = req.method() == HttpMethod::CONNECT;
    let mut txn = Txn {
        time_ms: now_ms(),
        client: dial::canonical(peer.ip()),
        method: req.method().as_str().to_string(),
        target: log_safe(&req.uri().to_string()),
        decision: None,
    };

    // 0. Only the filter's clients (loopback, the containers behind the gateway) are served.
    if let Some(d) = Decision::for_client(&clients, txn.client) {
        txn.decision = Some(d.clone());
        shared.logger.log(&txn.line("TCP_DENIED", 403, 0, None));
        return Ok(denial(&d, "this client", "the filter serves only this host and its containers"));
    }

    // The buffer limit above is not a limit on the head itself: count it, as squid does.
    let head: usize = req.method().as_str().len()
        + req.uri().to_string().len()
        + req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>();
    if head > shared.limits.max_header_bytes {
        shared.logger.log(&txn.line("NONE_NONE", 431, 0, None));
        return Ok(text_response(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "ocsb egress: the request head is larger than {} bytes\n",
                shared.limits.max_header_bytes
            ),
        ));
    }

    // 1. Parse the target the way squid does.
    let parsed = if is_connect {
        Target::from_connect(&req.uri().to_string()).map_err(|e| e.to_string())
    } else if req.uri().scheme().is_none() {
        Err("not a proxy request: the request target must be an absolute URL".to_string())
    } else {
        Target::from_absolute_uri(req.method().as_str(), &req.uri().to_string()).map_err(|e| e.to_string())
    };
    let target = match parsed {
        Ok(t) => t,
        Err(e) => {
            shared.logger.log(&txn.line("NONE_NONE", 400, 0, None));
            return Ok(text_response(StatusCode::BAD_REQUEST, format!("ocsb egress: bad request: {e}\n")));
        }
    };
    let host = host_display(&target.host);
    txn.target = if is_connect {
        format!("{host}:{}", target.port)
    } else {
        let scheme = req.uri().scheme_str().unwrap_or("http").to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "ftp" => 21,
            _ => 80,
        };
        let port = if target.port == default_port { String::new() } else { format!(":{}", target.port) };
        let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
        format!("{scheme}://{host}{port}{}", log_safe(path))
    };

    // 2. Decide; resolve only when the decision needs addresses, and only once.
    let policy = shared.policy.get();
    let (decision, addrs) = decide(&policy, &target, &shared.resolver).await;
    txn.decision = Some(decision.clone());
    if decision.verdict == Verdict::Deny {
        shared.logger.log(&txn.line("TCP_DENIED", 403, 0, None));
        return Ok(denial(
            &decision,
            &txn.target,
            "to allow it, add a rule to .opencode-sandbox/egress.conf and run `ocsb egress up`",
        ));
    }

    // 3. Dial the checked addresses.
    let permit_private = matches!(decision.rule, RuleKind::Allow | RuleKind::Connect);
    let private = policy.private_set().clone();
    // `None` when an explicit rule allowed private addresses (the seed's "allow wins").
    let refuse = (!permit_private).then_some(&private);
    let dial = || dial::dial_checked(&addrs, target.port, refuse, shared.limits.connect_timeout);
    let dial_error = |e: DialError, txn: &Txn| {
        let (status, msg) = match e {
            DialError::NoAddress => (StatusCode::SERVICE_UNAVAILABLE, format!("cannot resolve {host}")),
            DialError::PrivateRefused(ip) => {
                (StatusCode::FORBIDDEN, format!("refused to connect to private address {ip}"))
            }
            DialError::Failed(ip, e) => (StatusCode::BAD_GATEWAY, format!("cannot connect to {ip}: {e}")),
        };
        shared.logger.log(&txn.line("TCP_MISS", status.as_u16(), 0, None));
        text_response(status, format!("ocsb egress: {msg}\n"))
    };

    if is_connect {
        let (upstream, server_ip) = match dial().await {
            Ok(x) => x,
            Err(e) => return Ok(dial_error(e, &txn)),
        };
        let logger = shared.logger.clone();
        let idle = shared.limits.tunnel_idle;
        tokio::spawn(async move {
            // The tunnel keeps the connection busy: it is never evicted as idle, only as a quiet
            // tunnel (see `conns`).
            let slot = guard.slot();
            slot.set_tunnel();
            let to_client = match hyper::upgrade::on(req).await {
                Ok(up) => tokio::select! {
                    n = tunnel(up, upstream, &slot) => n,
                    _ = slot.kill.notified() => 0,
                    _ = quiet(&slot, idle) => 0,
                },
                Err(_) => 0,
            };
            drop(guard);
            logger.log(&txn.line("TCP_TUNNEL", 200, to_client, Some(server_ip)));
        });
        return Ok(Response::new(http_body_util::Empty::new().map_err(|n: Infallible| match n {}).boxed()));
    }

    // Plain HTTP: only `http://` is forwarded (no TLS origination, no FTP gateway).
    if req.uri().scheme_str().is_some_and(|s| !s.eq_ignore_ascii_case("http")) {
        shared.logger.log(&txn.line("TCP_MISS", 501, 0, None));
        return Ok(text_response(
            StatusCode::NOT_IMPLEMENTED,
            "ocsb egress: only http:// URLs are forwarded; use CONNECT (https_proxy) for TLS\n".into(),
        ));
    }
    // A kept-alive server connection is reused only if its address is one of the addresses this
    // request's decision checked (the same rule as dialing: never an address the policy did not see).
    if let Err(e) = dial::check(&addrs, refuse) {
        return Ok(dial_error(e, &txn));
    }
    let mut pooled = None;
    while let Some((mut s, ip)) = shared.pool.take(&addrs, target.port) {
        // A pooled connection the server has just closed fails here, before the request is sent.
        if s.ready().await.is_ok() {
            pooled = Some((s, ip));
            break;
        }
    }
    let (mut sender, server_ip) = match pooled {
        Some(x) => x,
        None => {
            let (upstream, ip) = match dial().await {
                Ok(x) => x,
                Err(e) => return Ok(dial_error(e, &txn)),
            };
            match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
                Ok((sender, conn)) => {
                    tokio::spawn(conn);
                    (sender, ip)
                }
                Err(e) => {
                    shared.logger.log(&txn.line("TCP_MISS", 502, 0, Some(ip)));
                    return Ok(text_response(
                        StatusCode::BAD_GATEWAY,
                        format!("ocsb egress: upstream failed: {e}\n"),
                    ));
                }
            }
        }
    };
    let slot = guard.slot();
    slot.set_waiting(true);
    let answer =
        tokio::time::timeout(shared.limits.response_timeout, forward(req, &mut sender, &target, &host)).await;
    slot.set_waiting(false);
    let Ok(answer) = answer else {
        shared.logger.log(&txn.line("TCP_MISS", 504, 0, Some(server_ip)));
        return Ok(text_response(
            StatusCode::GATEWAY_TIMEOUT,
            "ocsb egress: the server did not answer\n".into(),
        ));
    };
    match answer {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let (mut parts, body) = resp.into_parts();
            let reusable = parts.version == hyper::Version::HTTP_11
                && !parts
                    .headers
                    .get_all(hyper::header::CONNECTION)
                    .iter()
                    .any(|v| v.to_str().is_ok_and(|v| v.to_ascii_lowercase().contains("close")));
            strip_hop_by_hop(&mut parts.headers);
            // An origin cannot speak for the filter: only the filter's own answers carry these.
            parts.headers.remove(DECISION_HEADER);
            parts.headers.remove(ERROR_HEADER);
            let line = txn.line("TCP_MISS", status, 0, Some(server_ip));
            let body = LoggedBody {
                inner: body,
                line: Some(line),
                logger: shared.logger.clone(),
                back_to_pool: reusable
                    .then(|| (shared.pool.clone(), SocketAddr::new(server_ip, target.port), sender)),
                _guard: guard,
            };
            Ok(Response::from_parts(parts, body.boxed()))
        }
        Err(e) => {
            shared.logger.log(&txn.line("TCP_MISS", 502, 0, Some(server_ip)));
            Ok(text_response(StatusCode::BAD_GATEWAY, format!("ocsb egress: upstream failed: {e}\n")))
        }
    }
}

/// Relay an established tunnel with splice(2) between the raw sockets (bytes hyper had already
/// read are sent first). A half-close is passed on in each direction, so a client that ends its
/// input (as `nc` does) still gets the answer.
async fn tunnel(up: hyper::upgrade::Upgraded, mut upstream: TcpStream, slot: &Slot) -> u64 {
    use tokio::io::AsyncWriteExt;
    // The server connection is always a plain `TokioIo<TcpStream>` (see `serve_connection`).
    let Ok(parts) = up.downcast::<TokioIo<TcpStream>>() else { return 0 };
    if !parts.read_buf.is_empty() && upstream.write_all(&parts.read_buf).await.is_err() {
        return 0;
    }
    let client = parts.io.into_inner();
    super::splice::relay(&client, &upstream, &|| slot.touch()).await.map(|(_, down)| down).unwrap_or(0)
}

/// Resolves once no byte has moved in the tunnel for `limit`. *Why*: a tunnel whose client has
/// gone while the origin never closes (or the reverse) would otherwise hold its slot forever.
async fn quiet(slot: &Slot, limit: Duration) {
    loop {
        let q = slot.quiet_for();
        if q >= limit {
            return;
        }
        tokio::time::sleep(limit - q).await;
    }
}

/// The two-phase decision: most requests are decided from the name alone; the private-range
/// check resolves once and the same addresses are then dialed.
async fn decide(policy: &Policy, target: &Target, resolver: &dial::Resolver) -> (Decision, Vec<IpAddr>) {
    match policy.evaluate(target) {
        Step::Decided(d) => {
            if d.verdict == Verdict::Deny {
                return (d, Vec::new());
            }
            let addrs = match &target.host {
                Host::Ip(ip) => vec![dial::canonical(*ip)],
                Host::Name(n) => resolver.resolve(n).await,
            };
            (d, addrs)
        }
        Step::NeedsAddresses(p) => {
            let addrs = resolver.resolve(p.host()).await;
            let d = p.finish(&addrs);
            (d, addrs)
        }
    }
}

/// Send the request upstream in origin-form with `Host` taken from the URI (the URI wins).
async fn forward(
    req: Request<Incoming>,
    sender: &mut Sender,
    target: &Target,
    host: &str,
) -> Result<Response<Incoming>, hyper::Error> {
    sender.ready().await?;
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    parts.uri = path.parse().unwrap_or_else(|_| hyper::Uri::from_static("/"));
    parts.version = hyper::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    let host_value = if target.port == 80 { host.to_string() } else { format!("{host}:{}", target.port) };
    if let Ok(v) = HeaderValue::from_str(&host_value) {
        parts.headers.insert(hyper::header::HOST, v);
    }
    sender.send_request(Request::from_parts(parts, body)).await
}

/// Remove hop-by-hop headers and the proxy's own credentials ([`ocsb_policy::http::HOP_BY_HOP`]
/// says which, and why): they concern the client↔proxy hop and must not reach the origin (or
/// come back from it).
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed = h.get_all(hyper::header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    for name in ocsb_policy::http::hop_by_hop(listed) {
        h.remove(name.as_str());
    }
}

/// A response body that counts the bytes sent and writes the log line when it is finished or
/// dropped (squid logs at the end of a transaction too).
struct LoggedBody {
    inner: Incoming,
    line: Option<LogLine>,
    logger: Logger,
    /// The server connection goes back to the pool once the body was read to the end.
    back_to_pool: Option<(Pool, SocketAddr, Sender)>,
    _guard: BusyGuard,
}

impl Body for LoggedBody {
    type Data = Bytes;
    type Error = hyper::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        if let Some((pool, addr, sender)) = self.back_to_pool.take()
            && self.inner.is_end_stream()
        {
            pool.put(addr, sender);
        }
        if let Some(l) = self.line.take() {
            self.logger.log(&l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_targets_are_printable_ascii() {
        assert_eq!(log_safe("/a\u{9b}31m\u{202e}b c"), "/a%C2%9B31m%E2%80%AEb%20c");
        assert_eq!(log_safe("/plain?q=1"), "/plain?q=1");
    }

    #[test]
    fn hop_by_hop_headers_and_connection_listed_ones_are_removed() {
        use hyper::header::HeaderName;
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("proxy-authorization", "Basic Zm9v"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["accept"]);
    }
}
