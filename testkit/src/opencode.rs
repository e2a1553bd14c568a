//! A real `opencode serve` (npm `opencode-ai`) for the tests, with private XDG directories and no
//! way off the machine; the scripted model provider (`fake_provider.py`: "RUN: cmd" is answered
//! with a `bash` tool call, usage numbers fixed); agent turns and shell runs through OpenCode's
//! API; the web UI's session page and its Tokens panel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::browser::Browser;
use crate::http::{b64, b64url, http, try_http};
use crate::netns::Netns;
use crate::proc::Proc;

/// The scripted model provider (Python, standard library only).
pub const FAKE_PROVIDER: &str = include_str!("fake_provider.py");

/// `$OCSB_OPENCODE_BIN`, else `opencode` on PATH.
pub fn opencode_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("OCSB_OPENCODE_BIN") {
        return PathBuf::from(p);
    }
    crate::host::require("opencode", "the npm package opencode-ai (`npm i -g opencode-ai`)")
}

/// Two consecutive free ports on 127.0.0.1 (the front uses N, OpenCode N+1); N.
pub fn free_port() -> u16 {
    for _ in 0..50 {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 65000 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two free consecutive ports");
}

/// Starts the scripted provider from `cmd` (`python3` or a wrapper, the script path appended)
/// and returns it with the port it printed.
pub fn spawn_fake_provider(mut cmd: Command, dir: &Path) -> (Proc, u16) {
    crate::host::require("python3", "the Debian package python3");
    let script = dir.join("fake_provider.py");
    std::fs::write(&script, FAKE_PROVIDER).unwrap();
    let mut child = cmd.arg(&script).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let proc = Proc(child);
    let port = line.trim().parse().unwrap_or_else(|_| panic!("fake provider port, got {line:?}"));
    (proc, port)
}

/// The scripted provider on 127.0.0.1 of the caller's namespace, its script written to `dir`.
pub fn start_fake_provider(dir: &Path) -> (Proc, u16) {
    spawn_fake_provider(Command::new("python3"), dir)
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

/// Waits until `GET /global/health` says healthy (short timeouts, retries).
pub fn wait_healthy(addr: SocketAddr, auth: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let r =
            try_http(addr, "GET", "/global/health", &[("Authorization", auth)], None, Duration::from_secs(1));
        if r.is_ok_and(|r| r.body.contains("\"healthy\":true")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("OpenCode on {addr} did not become healthy within {within:?}");
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

/// POSTs `body` to `/session/{session}/{endpoint}`; the newest tool part that ran `cmd`.
fn tool_call(
    addr: SocketAddr,
    auth: &str,
    session: &str,
    endpoint: &str,
    body: &str,
    cmd: &str,
) -> serde_json::Value {
    let headers = [("Authorization", auth)];
    let path = format!("/session/{session}/{endpoint}");
    let r = http(addr, "POST", &path, &headers, Some(body), Duration::from_secs(120));
    assert_eq!(r.status, 200, "{cmd}: {r:?}");
    let msgs =
        http(addr, "GET", &format!("/session/{session}/message"), &headers, None, Duration::from_secs(30))
            .json();
    tool_parts(&msgs)
        .into_iter()
        .rev()
        .find(|p| p["state"]["input"]["command"] == cmd)
        .unwrap_or_else(|| panic!("no bash call for {cmd:?} in {msgs:#}"))
}

/// Sends "RUN: cmd" as the user (the scripted provider answers with a `bash` tool call) through
/// the server at `addr`; the tool part of the agent's bash call.
pub fn agent_runs(addr: SocketAddr, auth: &str, session: &str, cmd: &str) -> serde_json::Value {
    let body = serde_json::json!({"parts": [{"type": "text", "text": format!("RUN: {cmd}")}],
        "model": {"providerID": "fake", "modelID": "m1"}});
    tool_call(addr, auth, session, "message", &body.to_string(), cmd)
}

/// Runs `cmd` through OpenCode's `/session/{id}/shell` (the agent's own bash, no model turn);
/// its output.
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

/// For an `opencode serve` in a loopback-only namespace: every HTTP(S) request OpenCode makes on
/// its own (the background npm install of its plugin package, a ripgrep download) goes to a proxy
/// on loopback that refuses at once with 403, so nothing waits on npm's retries, as it would
/// against a closed port. The scripted provider on 127.0.0.1 is exempt.
pub fn loopback_only_env() -> Vec<(String, String)> {
    // One refusing proxy per call: it must listen in the caller's network namespace.
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
            let _ = c.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    let proxy = format!("http://127.0.0.1:{port}");
    let mut env: Vec<(String, String)> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .iter()
        .map(|k| (k.to_string(), proxy.clone()))
        .collect();
    env.extend(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), "127.0.0.1,localhost".to_string())));
    env
}

/// Moves the calling test thread into a namespace of its own with only loopback, so that
/// OpenCode, the provider and Chromium started from it can send nothing off the machine.
/// Keep the namespace until the processes in it were stopped (its drop kills the rest).
pub fn loopback_only_netns(tag: &str) -> Netns {
    let ns = Netns::new(tag);
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
