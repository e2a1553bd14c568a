//! The desktop notification plugin (`opencode/plugins/ocsb-notify.js`) against a real bus: a
//! private `dbus-daemon --session`, the fake notification daemon (`fake_notifications.py`) and
//! `xdg-dbus-proxy` started by the launcher's own `notify_proxy_command`. The plugin runs in Node.js with a
//! fake OpenCode `client`, its bus address pointing at the proxy socket, as in the sandbox.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::dbus::{FakeNotifications, start_session_bus};
use testkit::host::require;
use testkit::proc::{Proc, wait_for_path};

const PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../opencode/plugins/ocsb-notify.js");

/// Imports the plugin, calls its factory with a fake client, runs the steps in `STEPS` and prints
/// one JSON line: the client calls, each step's outcome, unhandled rejections, the default export.
const DRIVER: &str = r#"
const plugin = await import(process.env.PLUGIN_URL);
const sessions = JSON.parse(process.env.SESSIONS);
const steps = JSON.parse(process.env.STEPS);
const logs = [], gets = [], results = [], unhandled = [];
process.on("unhandledRejection", (e) => unhandled.push(String(e && e.message || e)));
const client = {
  session: {
    get: async ({ path: { id } }) => {
      gets.push(id);
      // The SDK does not throw by default: an unknown session is { error }.
      return id in sessions ? { data: { id, ...sessions[id] } } : { error: { name: "NotFoundError" } };
    },
  },
  app: { log: async (o) => { logs.push(o); return { data: true }; } },
};
const hooks = await plugin.OcsbNotify({ client, directory: process.env.PROJECT_DIR });
for (const s of steps) {
  try {
    if (s.event) {
      await hooks.event({ event: s.event });
      results.push({ ok: true });
    } else {
      results.push({ id: await plugin.notify(s.notify.address, s.notify.summary, s.notify.body) });
    }
  } catch (e) {
    results.push({ threw: String(e && e.message || e) });
  }
}
await new Promise((r) => setTimeout(r, 50));
console.log(JSON.stringify({
  logs, gets, results, unhandled, uid: process.getuid(),
  default_id: plugin.default && plugin.default.id,
  default_server_is_factory: !!plugin.default && plugin.default.server === plugin.OcsbNotify,
}));
"#;

struct World {
    dir: tempfile::TempDir,
    bus: String,
    proxy: String,
    fake: FakeNotifications,
    _proxy_proc: Proc,
    _bus_proc: Proc,
}

impl World {
    fn new() -> World {
        require("node", "nodejs");
        let xdp = require("xdg-dbus-proxy", "xdg-dbus-proxy");
        let dir = tempfile::tempdir().unwrap();
        let (bus_proc, bus) = start_session_bus(dir.path());
        let fake = FakeNotifications::start(dir.path(), &bus);
        // The command `run` starts (launcher/src/run/notify.rs), its errors shown here.
        let socket = dir.path().join("proxy");
        let child = ocsb::notify_proxy_command(&xdp, &bus, &socket).stderr(Stdio::inherit()).spawn().unwrap();
        let proxy_proc = Proc(child);
        wait_for_path(&socket, "xdg-dbus-proxy", Duration::from_secs(5));
        let proxy = format!("unix:path={}", socket.display());
        World { dir, bus, proxy, fake, _proxy_proc: proxy_proc, _bus_proc: bus_proc }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Run the driver with `DBUS_SESSION_BUS_ADDRESS` = `address` (unset if None).
    fn node(&self, address: Option<&str>, sessions: Value, steps: Value) -> Value {
        self.node_in(&[], address, sessions, steps)
    }

    /// The same, node started by the command `wrap` (e.g. unshare).
    fn node_in(&self, wrap: &[&str], address: Option<&str>, sessions: Value, steps: Value) -> Value {
        let driver = self.path().join("driver.mjs");
        std::fs::write(&driver, DRIVER).unwrap();
        let plugin = PathBuf::from(PLUGIN).canonicalize().unwrap();
        let argv: Vec<&str> = wrap.iter().copied().chain(["node"]).collect();
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..])
            .arg(&driver)
            .env("PLUGIN_URL", format!("file://{}", plugin.display()))
            .env("SESSIONS", sessions.to_string())
            .env("STEPS", steps.to_string())
            .env("PROJECT_DIR", "/work/shop")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(a) = address {
            cmd.env("DBUS_SESSION_BUS_ADDRESS", a);
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("node driver did not exit within 15 s (a socket left open?)");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "node failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("driver output is not JSON ({e}): {stdout}"));
        assert_eq!(v["unhandled"], json!([]), "unhandled rejections: {v}");
        v
    }

    fn next(&self) -> Value {
        self.fake.next(Duration::from_secs(5)).expect("a Notify call on the fake notification daemon")
    }

    fn assert_quiet(&self) {
        if let Some(n) = self.fake.next(Duration::from_millis(300)) {
            panic!("unexpected notification: {n}");
        }
    }
}

fn idle(id: &str) -> Value {
    json!({"event": {"id": "evt", "type": "session.idle", "properties": {"sessionID": id}}})
}

fn error(id: &str, name: &str) -> Value {
    json!({"event": {"id": "evt", "type": "session.error",
        "properties": {"sessionID": id, "error": {"name": name, "data": {"message": "boom"}}}}})
}

#[test]
fn idle_session_notifies_through_the_proxy() {
    let w = World::new();
    let out =
        w.node(Some(&w.proxy), json!({"ses_main": {"title": "Fix the build"}}), json!([idle("ses_main")]));
    assert_eq!(out["results"], json!([{"ok": true}]), "{out}");
    assert_eq!(out["logs"], json!([]), "{out}");
    assert_eq!(out["gets"], json!(["ses_main"]), "{out}");
    assert_eq!(out["default_id"], "ocsb-notify", "{out}");
    assert_eq!(out["default_server_is_factory"], true, "{out}");
    let n = w.next();
    assert_eq!(n["app_name"], "OpenCode", "{n}");
    assert_eq!(n["summary"], "OpenCode: shop", "{n}");
    assert_eq!(n["body"], "Fix the build: done", "{n}");
    assert_eq!(n["actions"], json!([]), "{n}");
    assert_eq!(n["hints"], json!({}), "{n}");
    assert_eq!(n["expire_timeout"], -1, "{n}");
    assert_eq!(n["replaces_id"], 0, "{n}");
    assert_eq!(n["app_icon"], "", "{n}");
    w.assert_quiet();
}

#[test]
fn subagents_aborts_and_the_idle_after_an_error_are_quiet() {
    let w = World::new();
    let sessions = json!({
        "ses_main": {"title": "Fix the build"},
        "ses_child": {"title": "Explore", "parentID": "ses_main"},
        "ses_other": {"title": "Second"},
    });
    let steps = json!([
        idle("ses_child"),                        // subagent: nothing
        error("ses_main", "MessageAbortedError"), // the user pressed Esc: nothing
        idle("ses_other"),                        // -> "Second: done"
        error("ses_main", "APIError"),            // -> "Fix the build: error"
        idle("ses_main"),                         // follows the error: nothing
        idle("ses_gone"),                         // title unreadable -> "Session: done"
        error("ses_child", "APIError"),           // subagent: nothing
    ]);
    let out = w.node(Some(&w.proxy), sessions, steps);
    assert!(out["results"].as_array().unwrap().iter().all(|r| r["ok"] == true), "{out}");
    assert_eq!(out["logs"], json!([]), "{out}");
    let bodies: Vec<String> = (0..3).map(|_| w.next()["body"].as_str().unwrap().to_string()).collect();
    assert_eq!(bodies, ["Second: done", "Fix the build: error", "Session: done"]);
    w.assert_quiet();
}

#[test]
fn unreachable_bus_warns_once_and_no_bus_does_nothing() {
    let w = World::new();
    let missing = format!("unix:path={}", w.path().join("missing").display());
    let sessions = json!({"ses_main": {"title": "Fix the build"}});
    let out =
        w.node(Some(&missing), sessions.clone(), json!([idle("ses_main"), error("ses_main", "APIError")]));
    assert_eq!(out["results"], json!([{"ok": true}, {"ok": true}]), "{out}");
    let logs = out["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "one warning for two failures: {out}");
    assert_eq!(logs[0]["body"]["service"], "ocsb-notify", "{out}");
    assert_eq!(logs[0]["body"]["level"], "warn", "{out}");
    let msg = logs[0]["body"]["message"].as_str().unwrap();
    assert!(msg.contains("missing"), "the warning names the socket: {msg}");

    // An address that is not a unix socket: the same single warning.
    let out = w.node(
        Some("tcp:host=127.0.0.1,port=1"),
        sessions.clone(),
        json!([idle("ses_main"), idle("ses_main")]),
    );
    assert_eq!(out["logs"].as_array().unwrap().len(), 1, "{out}");

    // No DBUS_SESSION_BUS_ADDRESS: the plugin does nothing at all.
    let out = w.node(None, sessions, json!([idle("ses_main"), error("ses_main", "APIError")]));
    assert_eq!(out["results"], json!([{"ok": true}, {"ok": true}]), "{out}");
    assert_eq!(out["logs"], json!([]), "{out}");
    assert_eq!(out["gets"], json!([]), "{out}");
    w.assert_quiet();
}

#[test]
fn notify_returns_the_id_the_server_assigned() {
    let w = World::new();
    // Bodies of 0..8 bytes move the empty arrays across the 4/8 alignment boundaries. The last
    // call goes straight to the bus, with the extra keys a real address has.
    let direct = format!("{},guid=0123456789abcdef0123456789abcdef", w.bus);
    let mut bodies: Vec<String> = (0..8).map(|n| "abcdefgh"[..n].to_string()).collect();
    bodies.push("ünïcode ✓".into());
    let steps: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let address = if i == bodies.len() - 1 { &direct } else { &w.proxy };
            json!({"notify": {"address": address, "summary": "Direct", "body": b}})
        })
        .collect();
    let out = w.node(Some(&w.proxy), json!({}), Value::Array(steps));
    let ids: Vec<u64> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap_or_else(|| panic!("no id: {out}")))
        .collect();
    assert_eq!(ids.len(), bodies.len(), "{out}");
    assert!(ids[0] > 0, "{out}");
    for (id, body) in ids.iter().zip(&bodies) {
        let n = w.next();
        assert_eq!(n["id"].as_u64(), Some(*id), "{n}");
        assert_eq!(n["body"].as_str(), Some(body.as_str()), "{n}");
        assert_eq!(n["summary"], "Direct", "{n}");
    }
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "ids are the server's, one per call: {ids:?}");
    w.assert_quiet();
}

#[test]
fn a_uid_the_bus_does_not_see_falls_back_to_the_socket_credentials() {
    // In a user namespace the plugin's uid (1234) is not the one the bus sees through
    // SO_PEERCRED (ours): `AUTH EXTERNAL <hex uid>` is REJECTED, by the bus directly and through
    // xdg-dbus-proxy (0.1.4 passes the line on unchanged). The retry without a uid succeeds.
    let w = World::new();
    require("unshare", "util-linux");
    let wrap = ["unshare", "--user", "--map-user=1234", "--map-group=1234"];
    let steps = json!([
        {"notify": {"address": w.proxy, "summary": "userns", "body": "via proxy"}},
        {"notify": {"address": w.bus, "summary": "userns", "body": "direct"}},
    ]);
    let out = w.node_in(&wrap, Some(&w.proxy), json!({}), steps);
    assert_eq!(out["uid"], 1234, "{out}");
    assert!(out["results"].as_array().unwrap().iter().all(|r| r["id"].as_u64().is_some()), "{out}");
    for body in ["via proxy", "direct"] {
        let n = w.next();
        assert_eq!(n["body"], body, "{n}");
        assert!(out["results"].as_array().unwrap().iter().any(|r| r["id"] == n["id"]), "{out} {n}");
    }
    w.assert_quiet();
}

/// The proxy passes the Notifications interface and nothing else of the peer that owns the name:
/// another interface on the same object (KDE's script evaluator) is refused through the proxy,
/// while the direct bus shows that the method exists.
#[test]
fn the_proxy_passes_only_the_notifications_interface() {
    let w = World::new();
    let send = |address: &str, method: &str, arg: Option<&str>| {
        let mut cmd = Command::new("dbus-send");
        cmd.args([
            &format!("--bus={address}"),
            "--print-reply",
            "--dest=org.freedesktop.Notifications",
            "/org/freedesktop/Notifications",
            method,
        ]);
        if let Some(a) = arg {
            cmd.arg(a);
        }
        let o = cmd.output().expect("dbus-send (Debian package dbus)");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let (ok, out) = send(&w.bus, "org.kde.PlasmaShell.evaluateScript", Some("string:x"));
    assert!(ok && out.contains("EVALUATED x"), "control: the method exists on the real bus: {out}");
    let (ok, out) = send(&w.proxy, "org.freedesktop.Notifications.GetServerInformation", None);
    assert!(ok && out.contains("ocsb-fake-notifications"), "the Notifications interface passes: {out}");
    let (ok, out) = send(&w.proxy, "org.kde.PlasmaShell.evaluateScript", Some("string:x"));
    assert!(!ok && !out.contains("EVALUATED"), "another interface of the same peer is refused: {out}");
}

/// A fake Secret Service (what gnome-keyring and KeePassXC serve): owns `org.freedesktop.secrets`
/// and answers `SearchItems` with a secret.
const FAKE_SECRETS: &str = r#"
import dbus, dbus.service, dbus.mainloop.glib
from gi.repository import GLib
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SessionBus()
name = dbus.service.BusName("org.freedesktop.secrets", bus)
class S(dbus.service.Object):
    @dbus.service.method("org.freedesktop.Secret.Service", in_signature="a{ss}", out_signature="s")
    def SearchItems(self, attrs):
        return "KEYRING-SECRET"
s = S(bus, "/org/freedesktop/secrets")
print("READY", flush=True)
GLib.MainLoop().run()
"#;

/// The user's Secret Service (the keyring's passwords) cannot be reached through the sandbox's
/// bus: the proxy passes the Notifications interface only. The control: the same call on the
/// real bus returns the secret.
#[test]
fn the_secret_service_is_not_reachable_through_the_proxy() {
    let w = World::new();
    let script = w.path().join("fake_secrets.py");
    std::fs::write(&script, FAKE_SECRETS).unwrap();
    let mut cmd = Command::new(testkit::dbus::dbus_python());
    cmd.arg(&script).env("DBUS_SESSION_BUS_ADDRESS", &w.bus);
    let _secrets = FakeNotifications::spawn(cmd);
    let search = |address: &str| {
        let o = Command::new("dbus-send")
            .args([
                &format!("--bus={address}"),
                "--print-reply",
                "--dest=org.freedesktop.secrets",
                "/org/freedesktop/secrets",
                "org.freedesktop.Secret.Service.SearchItems",
                "dict:string:string:",
            ])
            .output()
            .expect("dbus-send (Debian package dbus)");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let (ok, out) = search(&w.bus);
    assert!(ok && out.contains("KEYRING-SECRET"), "control: the real bus answers: {out}");
    let (ok, out) = search(&w.proxy);
    assert!(!ok && !out.contains("KEYRING-SECRET"), "the Secret Service through the proxy: {out}");
    let names = Command::new("dbus-send")
        .args([
            &format!("--bus={}", w.proxy),
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.ListNames",
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&names.stdout);
    assert!(!listed.contains("org.freedesktop.secrets"), "the name is not even listed: {listed}");
}
