//! HTTP, server-sent events and WebSocket clients for the tests, on `ureq` and `tungstenite`.
//! Every request is one connection (`Connection: close`, no pool), follows no redirect and
//! returns any status as an answer (a 401 is something to assert, not an error). Custom
//! `Host` and `Origin` headers are sent as given: the front's rebinding checks are tested so.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

/// Standard base64 of a string.
pub fn b64(s: &str) -> String {
    STANDARD.encode(s)
}

/// URL-safe base64 without padding (how OpenCode's web UI names a project directory).
pub fn b64url(s: &str) -> String {
    URL_SAFE_NO_PAD.encode(s)
}

/// Decodes standard base64; fails the test on anything else.
pub fn b64_decode(s: &str) -> Vec<u8> {
    STANDARD.decode(s).unwrap_or_else(|e| panic!("not base64 ({e})"))
}

/// The `Authorization` value of HTTP Basic authentication.
pub fn basic(user: &str, pw: &str) -> String {
    format!("Basic {}", b64(&format!("{user}:{pw}")))
}

/// An answer: the status, the head as text (status line and headers) and the body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Resp {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// The body as JSON; fails the test with the whole answer if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout(timeout)
        .redirects(0)
        .max_idle_connections(0)
        .build()
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> ureq::Request {
    let mut req = agent(timeout).request(method, &format!("http://{addr}{path}")).set("Connection", "close");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    req
}

fn head_of(r: &ureq::Response) -> String {
    let mut head = format!("{} {} {}", r.http_version(), r.status(), r.status_text());
    for name in r.headers_names() {
        for v in r.all(&name) {
            head.push_str(&format!("\r\n{name}: {v}"));
        }
    }
    head
}

fn answer(result: Result<ureq::Response, ureq::Error>) -> Result<ureq::Response, String> {
    match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => Ok(r),
        Err(e) => Err(e.to_string()),
    }
}

/// One request; the whole answer. A `body` is sent as `application/json`.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    timeout: Duration,
) -> Resp {
    try_http(addr, method, path, headers, body, timeout)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`http`], with a failure to connect or to read the answer returned instead of failing the test.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    timeout: Duration,
) -> Result<Resp, String> {
    let req = request(addr, method, path, headers, timeout);
    let result = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    let r = answer(result)?;
    let (status, head) = (r.status(), head_of(&r));
    let body = r.into_string().map_err(|e| format!("reading the body: {e}"))?;
    Ok(Resp { status, head, body })
}

/// A streaming GET (server-sent events): the head and what the body brought until `needle`
/// appeared or `timeout` passed.
pub fn stream_until(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    needle: &str,
    timeout: Duration,
) -> String {
    let deadline = Instant::now() + timeout;
    let req = request(addr, "GET", path, headers, timeout).set("Accept", "text/event-stream");
    let r = answer(req.call()).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"));
    let mut got = format!("{}\r\n\r\n", head_of(&r));
    let mut body = r.into_reader();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && !got.contains(needle) {
        match body.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    got
}

/// A WebSocket session. `head` is the handshake's answer as text ("HTTP/1.1 101 …", or the
/// refusal's status line); after a refusal there is no socket.
pub struct Ws {
    pub head: String,
    socket: Option<tungstenite::WebSocket<TcpStream>>,
}

impl Ws {
    /// Opens `ws://addr/path` with extra handshake headers.
    pub fn connect(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Ws {
        use tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{addr}{path}").into_client_request().expect("WebSocket URL");
        for (k, v) in headers {
            req.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(k.as_bytes()).expect("header name"),
                v.parse().expect("header value"),
            );
        }
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let status_line = |s: tungstenite::http::StatusCode| {
            format!("HTTP/1.1 {} {}", s.as_u16(), s.canonical_reason().unwrap_or_default())
        };
        match tungstenite::client(req, stream) {
            Ok((socket, resp)) => Ws { head: status_line(resp.status()), socket: Some(socket) },
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                Ws { head: status_line(resp.status()), socket: None }
            }
            Err(e) => panic!("WebSocket handshake with {addr}{path}: {e}"),
        }
    }

    fn socket(&mut self) -> &mut tungstenite::WebSocket<TcpStream> {
        let head = &self.head;
        self.socket.as_mut().unwrap_or_else(|| panic!("the handshake was refused: {head}"))
    }

    pub fn send_text(&mut self, text: &str) {
        self.socket().send(tungstenite::Message::text(text)).expect("WebSocket send");
    }

    /// The payload of the next text or binary message within `timeout`.
    pub fn read_message(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let ws = self.socket();
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            ws.get_ref().set_read_timeout(Some(left.max(Duration::from_millis(1)))).ok()?;
            match ws.read() {
                Ok(tungstenite::Message::Text(t)) => return Some(t.as_bytes().to_vec()),
                Ok(tungstenite::Message::Binary(b)) => return Some(b.to_vec()),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return None,
            }
        }
    }

    /// Reads messages until their concatenated payloads contain `needle` (or `timeout` passes).
    pub fn read_until(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut got = String::new();
        while !got.contains(needle) {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            match self.read_message(left) {
                Some(p) => got.push_str(&String::from_utf8_lossy(&p)),
                None => break,
            }
        }
        got
    }
}
