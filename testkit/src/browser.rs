//! Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, for the web UI and
//! Tokens panel tests. A `--dump-dom` run never ends on a page with open server-sent event
//! streams, hence a session. Start it from a thread inside a test's namespace: Chromium alone
//! resolves names and probes public DNS servers.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::{Ws, b64_decode, http};
use crate::proc::Proc;

pub struct Browser {
    ws: Ws,
    next: u64,
    _proc: Proc,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Chromium with a fresh profile, showing `url`, its first page target attached.
    pub fn open(url: &str) -> Browser {
        let chromium = crate::host::require("chromium", "the Debian package chromium");
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
        Browser { ws, next: 1, _proc: proc, _profile: profile }
    }

    /// One DevTools call; its answer (events in between are dropped).
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next;
        self.next += 1;
        self.ws.send_text(&serde_json::json!({"id": id, "method": method, "params": params}).to_string());
        loop {
            let p = self.ws.read_message(Duration::from_secs(30)).expect("DevTools answer");
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap_or_default();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Evaluates a JavaScript expression that returns a string.
    pub fn eval(&mut self, expr: &str) -> String {
        let v = self.call("Runtime.evaluate", serde_json::json!({"expression": expr, "returnByValue": true}));
        v["result"]["result"]["value"].as_str().unwrap_or_default().to_string()
    }

    /// A PNG of the page, written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let v = self.call("Page.captureScreenshot", serde_json::json!({"format": "png"}));
        let png = b64_decode(v["result"]["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }
}
