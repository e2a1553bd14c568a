//! D-Bus for the notification tests: a private session bus (`dbus-daemon --session`) and the
//! fake desktop notification daemon (`fake_notifications.py`), which prints one JSON line per
//! `Notify` call it receives.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::proc::{Proc, wait_for_path};

/// The fake notification daemon's script (Python, dbus and gi modules).
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

/// A private session bus listening on `<dir>/bus`; its address.
pub fn start_session_bus(dir: &Path) -> (Proc, String) {
    let exe = crate::host::require("dbus-daemon", "the Debian package dbus");
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

/// The running fake notification daemon and the JSON lines it prints.
pub struct FakeNotifications {
    pub proc: Proc,
    lines: std::sync::mpsc::Receiver<String>,
}

impl FakeNotifications {
    /// Starts it on the bus at `bus_address`, the script written to `dir`.
    pub fn start(dir: &Path, bus_address: &str) -> FakeNotifications {
        let script = dir.join("fake_notifications.py");
        std::fs::write(&script, FAKE_NOTIFICATIONS).unwrap();
        let mut cmd = Command::new(dbus_python());
        cmd.arg(&script).env("DBUS_SESSION_BUS_ADDRESS", bus_address);
        FakeNotifications::spawn(cmd)
    }

    /// Starts a prepared command that runs [`FAKE_NOTIFICATIONS`] (e.g. as another user);
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
