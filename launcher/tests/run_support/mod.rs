//! Shared harness of the `run_*` tests: a real `opencode serve` (npm `opencode-ai`) on loopback
//! with private XDG directories, the scripted model provider (`fake_provider.py`), raw HTTP and
//! WebSocket clients. Missing tools fail the test with the package to install.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const FAKE_PROVIDER: &str = include_str!("fake_provider.py");

pub fn require(tool: &str, package: &str) -> PathBuf {
    let out = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().expect("sh");
    assert!(out.status.success(), "`{tool}` is missing: install {package}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub fn opencode_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("OCSB_OPENCODE_BIN") {
        return PathBuf::from(p);
    }
    require("opencode", "the npm package opencode-ai (`npm i -g opencode-ai`)")
}

pub fn free_port() -> u16 {
    // Two consecutive free ports (the front uses N, OpenCode N+1).
    for _ in 0..50 {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 65000 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two free consecutive ports");
}

pub fn b64(s: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn b64url(s: &str) -> String {
    b64(s).replace('+', "-").replace('/', "_").trim_end_matches('=').to_string()
}

pub fn basic(user: &str, pw: &str) -> String {
    format!("Basic {}", b64(&format!("{user}:{pw}")))
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

fn dechunk(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(nl) = b[i..].windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[i..i + nl]).trim(), 16).unwrap_or(0);
        i += nl + 2;
        if size == 0 || i + size > b.len() {
            break;
        }
        out.extend_from_slice(&b[i..i + size]);
        i += size + 2;
    }
    out
}

/// One HTTP/1.1 request with `Connection: close`; the whole answer.
pub fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>, timeout: Duration) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", b.len()));
    } else {
        req.push_str("\r\n");
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer to {method} {path}: {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut body = buf[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Resp { status, head, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Read from a streaming response until `needle` appears (or the timeout passes).
pub fn stream_until(addr: SocketAddr, path: &str, headers: &[(&str, &str)], needle: &str, timeout: Duration) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if String::from_utf8_lossy(&got).contains(needle) {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A WebSocket session over a raw socket: the handshake, masked text frames out, payloads in.
pub struct Ws {
    pub s: TcpStream,
    pub head: String,
}

impl Ws {
    pub fn connect(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Ws {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).unwrap_or(0) == 0 {
                break;
            }
            head.push(b[0]);
        }
        Ws { s, head: String::from_utf8_lossy(&head).into_owned() }
    }

    pub fn send_text(&mut self, text: &str) {
        let p = text.as_bytes();
        assert!(p.len() < 126);
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x81, 0x80 | p.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(p.iter().enumerate().map(|(i, c)| c ^ mask[i % 4]));
        self.s.write_all(&f).unwrap();
    }

    /// Read frames until the concatenated payloads contain `needle`.
    pub fn read_until(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        self.s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(n) = self.s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
            }
            // Payloads of server frames are unmasked; a lossy view of the raw bytes is enough to
            // find text in them.
            if String::from_utf8_lossy(&raw).contains(needle) {
                break;
            }
        }
        String::from_utf8_lossy(&raw).into_owned()
    }
}

/// A child killed (SIGTERM, then SIGKILL) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_fake_provider(dir: &Path) -> (Proc, u16) {
    require("python3", "python3");
    let script = dir.join("fake_provider.py");
    std::fs::write(&script, FAKE_PROVIDER).unwrap();
    let mut child = Command::new("python3").arg(&script).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let port = String::from_utf8_lossy(&line).trim().parse().expect("fake provider port");
    (Proc(child), port)
}

/// The project config that points OpenCode at the fake provider.
pub fn provider_config(port: u16) -> String {
    serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
            "options": {"baseURL": format!("http://127.0.0.1:{port}/v1"), "apiKey": "fake-key"},
            "models": {"m1": {"name": "M1", "tool_call": true, "limit": {"context": 100000, "output": 4096},
                              "cost": {"input": 1000, "output": 2000, "cache_read": 100, "cache_write": 1000}}}}},
        "model": "fake/m1",
        "small_model": "fake/m1",
        "enabled_providers": ["fake"]
    })
    .to_string()
}

/// Wait until `GET /global/health` answers 200 (short timeouts, retries: research §2.4).
pub fn wait_healthy(addr: SocketAddr, auth: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let _ = s.write_all(format!("GET /global/health HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n").as_bytes());
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            if String::from_utf8_lossy(&buf).contains("\"healthy\":true") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("OpenCode on {addr} did not become healthy within {within:?}");
}
