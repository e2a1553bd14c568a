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
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    timeout: Duration,
) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
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
    // Until EOF, or until a Content-Length body is complete: OpenCode (Bun) keeps the connection
    // open after some answers despite `Connection: close` (`POST /session/{id}/summarize`).
    let mut chunk = [0u8; 65536];
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 {
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
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer to {method} {path}: {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut body = buf[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Resp { status, head, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Read from a streaming response until `needle` appears (or the timeout passes).
pub fn stream_until(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    needle: &str,
    timeout: Duration,
) -> String {
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
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x81];
        if p.len() < 126 {
            f.push(0x80 | p.len() as u8);
        } else {
            assert!(p.len() < 65536);
            f.push(0x80 | 126);
            f.extend_from_slice(&(p.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(p.iter().enumerate().map(|(i, c)| c ^ mask[i % 4]));
        self.s.write_all(&f).unwrap();
    }

    /// One whole frame: (opcode, payload). Server frames are not masked.
    pub fn read_frame(&mut self, timeout: Duration) -> Option<(u8, Vec<u8>)> {
        self.s.set_read_timeout(Some(timeout)).unwrap();
        let mut h = [0u8; 2];
        self.s.read_exact(&mut h).ok()?;
        let len = match h[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.s.read_exact(&mut b).ok()?;
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                self.s.read_exact(&mut b).ok()?;
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut p = vec![0u8; len];
        self.s.read_exact(&mut p).ok()?;
        Some((h[0] & 0x0f, p))
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
        // SIGTERM first (a clean stop), unless it already exited.
        if let Ok(None) = self.0.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
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
    let mut child =
        Command::new("python3").arg(&script).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
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

pub fn b64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let v: Vec<u8> = s.bytes().filter_map(val).collect();
    let mut out = Vec::new();
    for c in v.chunks(4) {
        let n = c.iter().enumerate().fold(0u32, |a, (i, &x)| a | (x as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..c.len()]);
    }
    out
}

/// Headless Chromium driven over the DevTools protocol (a `--dump-dom` run never ends on a
/// page with open server-sent event streams).
pub struct Browser {
    _proc: Proc,
    _profile: tempfile::TempDir,
    ws: Ws,
    next: u64,
}

impl Browser {
    pub fn open(url: &str) -> Browser {
        let chromium = require("chromium", "the Debian package chromium");
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
                "--disable-breakpad",
                "--disable-crash-reporter",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let proc = Proc(child);
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port: u16 = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.parse().ok()))
            {
                break p;
            }
            assert!(Instant::now() < deadline, "chromium did not start its DevTools endpoint");
            std::thread::sleep(Duration::from_millis(100));
        };
        let dt = SocketAddr::from(([127, 0, 0, 1], port));
        let page = loop {
            let list = http(dt, "GET", "/json/list", &[], None, Duration::from_secs(5)).json();
            if let Some(p) = list.as_array().into_iter().flatten().find(|t| t["type"] == "page") {
                break p["webSocketDebuggerUrl"].as_str().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "no page target");
            std::thread::sleep(Duration::from_millis(100));
        };
        let path = &page[page.find("/devtools/").unwrap()..];
        let ws = Ws::connect(dt, path, &[]);
        assert!(ws.head.starts_with("HTTP/1.1 101"), "{}", ws.head);
        Browser { _proc: proc, _profile: profile, ws, next: 1 }
    }

    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next;
        self.next += 1;
        self.ws.send_text(&serde_json::json!({"id": id, "method": method, "params": params}).to_string());
        loop {
            let (_, p) = self.ws.read_frame(Duration::from_secs(30)).expect("DevTools answer");
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap_or_default();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Evaluate a JavaScript expression that returns a string.
    pub fn eval(&mut self, expr: &str) -> String {
        let v = self.call("Runtime.evaluate", serde_json::json!({"expression": expr, "returnByValue": true}));
        v["result"]["result"]["value"].as_str().unwrap_or_default().to_string()
    }

    pub fn screenshot(&mut self, path: &Path) {
        let v = self.call("Page.captureScreenshot", serde_json::json!({"format": "png"}));
        let png = b64_decode(v["result"]["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }
}

pub const FAKE_NOTIFICATIONS: &str = include_str!("fake_notifications.py");

/// A Python that can import dbus and gi (Debian's /usr/bin/python3 with python3-dbus and
/// python3-gi; a `python3` first on PATH, e.g. pyenv's, usually cannot).
pub fn dbus_python() -> PathBuf {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py)
            .args(["-c", "import dbus, dbus.service, dbus.mainloop.glib; from gi.repository import GLib"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(py);
        }
    }
    panic!("no python3 with the dbus and gi modules: install the Debian packages python3-dbus python3-gi");
}

/// Wait until `path` exists (a socket a daemon creates).
pub fn wait_for_path(path: &Path, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} did not create {} within {within:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A private session bus (`dbus-daemon --session`) listening on `<dir>/bus`; its address.
pub fn start_session_bus(dir: &Path) -> (Proc, String) {
    let exe = require("dbus-daemon", "dbus");
    let socket = dir.join("bus");
    let child = Command::new(exe)
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address=unix:path={}", socket.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null()) // "Failed to set fd limit" noise when not root
        .spawn()
        .unwrap();
    let proc = Proc(child);
    wait_for_path(&socket, "dbus-daemon", Duration::from_secs(5));
    (proc, format!("unix:path={}", socket.display()))
}

/// The fake notification daemon (`fake_notifications.py`) and the JSON lines it prints, one
/// per `Notify` call.
pub struct FakeNotifications {
    pub proc: Proc,
    lines: std::sync::mpsc::Receiver<String>,
}

impl FakeNotifications {
    /// Start it on the bus at `bus_address`, the script written to `dir`.
    pub fn start(dir: &Path, bus_address: &str) -> FakeNotifications {
        let script = dir.join("fake_notifications.py");
        std::fs::write(&script, FAKE_NOTIFICATIONS).unwrap();
        let mut cmd = Command::new(dbus_python());
        cmd.arg(&script).env("DBUS_SESSION_BUS_ADDRESS", bus_address);
        FakeNotifications::spawn(cmd)
    }

    /// Start a prepared command that runs `fake_notifications.py` (e.g. as another user);
    /// returns once it printed READY.
    pub fn spawn(mut cmd: Command) -> FakeNotifications {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let fake = FakeNotifications { proc: Proc(child), lines: rx };
        match fake.lines.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l == "READY" => fake,
            other => panic!("fake notification daemon did not start: {other:?}"),
        }
    }

    /// The next Notify call it received, if one arrives within `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<serde_json::Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }
}

/// The tool parts of a session's messages (`GET /session/{id}/message`), in order.
pub fn tool_parts(messages: &serde_json::Value) -> Vec<serde_json::Value> {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool")
        .collect()
}

/// POST `body` to `/session/{session}/{endpoint}` and return the newest tool part that ran `cmd`.
fn tool_call(
    addr: SocketAddr,
    auth: &str,
    session: &str,
    endpoint: &str,
    body: &str,
    cmd: &str,
) -> serde_json::Value {
    let r = http(
        addr,
        "POST",
        &format!("/session/{session}/{endpoint}"),
        &[("Authorization", auth)],
        Some(body),
        Duration::from_secs(120),
    );
    assert_eq!(r.status, 200, "{cmd}: {r:?}");
    let msgs = http(
        addr,
        "GET",
        &format!("/session/{session}/message"),
        &[("Authorization", auth)],
        None,
        Duration::from_secs(30),
    )
    .json();
    tool_parts(&msgs)
        .into_iter()
        .rev()
        .find(|p| p["state"]["input"]["command"] == cmd)
        .unwrap_or_else(|| panic!("no bash call for {cmd:?} in {msgs:#}"))
}

/// Send "RUN: cmd" as the user (the scripted provider answers with a `bash` tool call) through
/// the server at `addr` and return the tool part of the agent's bash call.
pub fn agent_runs(addr: SocketAddr, auth: &str, session: &str, cmd: &str) -> serde_json::Value {
    let body = serde_json::json!({"parts": [{"type": "text", "text": format!("RUN: {cmd}")}],
        "model": {"providerID": "fake", "modelID": "m1"}});
    tool_call(addr, auth, session, "message", &body.to_string(), cmd)
}

/// Run `cmd` through OpenCode's `/session/{id}/shell` (the agent's own bash, no model turn) and
/// return its output.
pub fn shell_runs(addr: SocketAddr, auth: &str, session: &str, cmd: &str) -> String {
    let body = serde_json::json!({"agent": "build", "command": cmd});
    let p = tool_call(addr, auth, session, "shell", &body.to_string(), cmd);
    p["state"]["output"].as_str().unwrap_or_default().to_string()
}

/// The web UI's page of one session, logged in with `?auth_token=` (what a bookmark holds).
pub fn session_url(front: SocketAddr, project: &str, session: &str, password: &str) -> String {
    format!(
        "http://{front}/{}/session/{session}?auth_token={}",
        b64url(project),
        b64(&format!("opencode:{password}"))
    )
}

/// The Tokens panel's fields as the page shows them (`data-field` → text), once `until` holds;
/// fails after 45 s with the last values.
pub fn read_panel(b: &mut Browser, until: &dyn Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    const READ: &str = "(() => { const p = document.getElementById('ocsb-tokens-panel'); \
        if (!p || !p.getAttribute('data-updated')) return ''; const o = {}; \
        p.querySelectorAll('[data-field]').forEach(e => o[e.dataset.field] = e.textContent); \
        return JSON.stringify(o); })()";
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let v: serde_json::Value = serde_json::from_str(&b.eval(READ)).unwrap_or(serde_json::Value::Null);
        if !v.is_null() && until(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "the panel did not show the expected values: {v}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// For an `opencode serve` started in the machine's own network namespace (the tests that need
/// only loopback): every HTTP(S) request OpenCode makes on its own (the background npm install of
/// its plugin package, a ripgrep download) goes to a proxy on loopback that refuses at once with
/// 403, so nothing leaves the machine (not even a DNS query) and nothing waits on npm's retries,
/// as it would against a closed port. The scripted provider on 127.0.0.1 is exempt.
pub fn loopback_only_env() -> Vec<(String, String)> {
    // One refusing proxy per call: it must listen in the caller's network namespace.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ =
                    c.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        port
    };
    let proxy = format!("http://127.0.0.1:{port}");
    let mut env: Vec<(String, String)> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .iter()
        .map(|k| (k.to_string(), proxy.clone()))
        .collect();
    env.extend(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), "127.0.0.1,localhost".to_string())));
    env
}

/// Run a shell command; fail the test if it fails.
pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "`{cmd}` failed");
}

/// A named network namespace with only `lo` up, deleted on drop (the processes in it keep it
/// alive until they end). Creating one needs root.
pub struct Netns(pub String);

impl Netns {
    pub fn named(name: &str) -> Netns {
        // A leftover of an earlier run with the same pid, if any.
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
        sh(&format!("ip netns add {name}"));
        let ns = Netns(name.to_string());
        ns.exec("ip link set lo up");
        ns
    }

    pub fn exec(&self, cmd: &str) {
        sh(&format!("ip netns exec {} sh -c '{}'", self.0, cmd.replace('\'', r"'\''")));
    }

    /// `ip netns exec NAME …`: the rest of the command line runs in the namespace.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]);
        c
    }

    /// Move the calling thread (only) into the namespace; what it starts afterwards runs there.
    pub fn enter(&self) {
        use std::os::fd::AsFd;
        let f = std::fs::File::open(format!("/var/run/netns/{}", self.0)).unwrap();
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns (needs root)");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Move the calling test thread into a namespace of its own with only loopback, so that
/// OpenCode, the provider and Chromium started from it can send nothing off the machine (the
/// network rule of these tests: Chromium alone resolves names and probes Google's DNS servers).
pub fn loopback_only_netns(tag: &str) -> Netns {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let ns = Netns::named(&format!("ocsb-{tag}-{}-{n}", std::process::id()));
    ns.enter();
    ns
}

/// `opencode serve` on 127.0.0.1:`port` for `project`, with a clean environment: its own `XDG_*`
/// directories and `HOME` under `root`, the given config content and server password, no model
/// list fetch and no update check, and [`loopback_only_env`]. The caller adds more and spawns.
pub fn opencode_serve(root: &Path, project: &Path, port: u16, content: &str, secret: &str) -> Command {
    let x = |d: &str| root.join(d).display().to_string();
    let mut c = Command::new(opencode_bin());
    c.args(["serve", "--hostname", "127.0.0.1", "--port", &port.to_string()])
        .current_dir(project)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", x("home"))
        .env("XDG_CONFIG_HOME", x("config"))
        .env("XDG_DATA_HOME", x("data"))
        .env("XDG_CACHE_HOME", x("cache"))
        .env("XDG_STATE_HOME", x("state"))
        .env("OPENCODE_CONFIG_CONTENT", content)
        .env("OPENCODE_SERVER_PASSWORD", secret)
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .envs(loopback_only_env());
    c
}
