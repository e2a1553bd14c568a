//! Desktop notifications (`OCSB_NOTIFICATIONS`): the sandbox gets a session bus socket from
//! `xdg-dbus-proxy` that may talk only to `org.freedesktop.Notifications`. The real session bus
//! would let the agent start processes outside the sandbox (`systemd-run --user`, D-Bus
//! activation), so it is never passed in; without the proxy or a bus there are no notifications
//! and one warning, never the real bus.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ocsb_sandbox::statefs::StateDir;

/// A running filtered bus proxy; stopped when dropped.
pub struct BusProxy {
    child: Child,
    socket: PathBuf,
    /// `<state>/run`, held open: the socket is removed from this directory, even if the agent
    /// renamed it or put a symlink in its place meanwhile.
    run_dir: std::os::fd::OwnedFd,
}

impl BusProxy {
    /// `DBUS_SESSION_BUS_ADDRESS` for the sandbox.
    pub fn address(&self) -> String {
        format!("unix:path={}", self.socket.display())
    }
}

impl Drop for BusProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = nix::unistd::unlinkat(&self.run_dir, "bus", nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::var("PATH").ok()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// The user's session bus address, if there is one.
fn session_bus() -> Option<String> {
    if let Some(a) = std::env::var("DBUS_SESSION_BUS_ADDRESS").ok().filter(|a| !a.is_empty()) {
        return Some(a);
    }
    let rt = std::env::var("XDG_RUNTIME_DIR").ok()?;
    let p = Path::new(&rt).join("bus");
    p.exists().then(|| format!("unix:path={}", p.display()))
}

/// Start the proxy with its socket in `<state>/run/bus` (in the sandbox's `XDG_RUNTIME_DIR`), or
/// say why not: `Err(warning)`.
pub fn start(state: &StateDir) -> Result<BusProxy, String> {
    start_with(session_bus(), find_in_path("xdg-dbus-proxy"), state)
}

/// What the bus proxy lets through: the Notifications interface on its object, and its signals.
/// Not `--talk`: that allows every method of the peer owning the name, and on some desktops that
/// peer (the shell) exports far more, up to a script evaluator.
pub const PROXY_ARGS: &[&str] = &[
    "--filter",
    "--call=org.freedesktop.Notifications=org.freedesktop.Notifications.*@/org/freedesktop/Notifications",
    "--broadcast=org.freedesktop.Notifications=org.freedesktop.Notifications.*@/org/freedesktop/Notifications",
];

/// The command line of the bus proxy: `xdg-dbus-proxy BUS SOCKET` and `PROXY_ARGS`, no
/// standard streams. `run` starts it so; the notification tests start the same command.
pub fn proxy_command(exe: &Path, bus: &str, socket: &Path) -> Command {
    let mut c = Command::new(exe);
    c.arg(bus).arg(socket).args(PROXY_ARGS).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    c
}

fn start_with(bus: Option<String>, exe: Option<PathBuf>, state: &StateDir) -> Result<BusProxy, String> {
    let Some(bus) = bus else {
        return Err("notifications: no session bus (DBUS_SESSION_BUS_ADDRESS is not set); skipped".into());
    };
    let Some(exe) = exe else {
        return Err(
            "notifications: xdg-dbus-proxy is not installed (Debian package xdg-dbus-proxy); skipped".into(),
        );
    };
    let run_dir = state.dir(Path::new("run")).map_err(|e| format!("notifications: {e}; skipped"))?;
    state.remove(Path::new("run/bus")).map_err(|e| format!("notifications: {e}; skipped"))?;
    let socket = state.path().join("run/bus");
    let child = proxy_command(&exe, &bus, &socket)
        .spawn()
        .map_err(|e| format!("notifications: cannot start xdg-dbus-proxy ({e}); skipped"))?;
    let mut proxy = BusProxy { child, socket, run_dir };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !proxy.socket.exists() {
        if let Ok(Some(st)) = proxy.child.try_wait() {
            return Err(format!("notifications: xdg-dbus-proxy exited ({st}); skipped"));
        }
        if Instant::now() > deadline {
            return Err("notifications: xdg-dbus-proxy did not create its socket within 3 s; skipped".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(proxy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_pieces_are_one_warning_each() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(d.path()).unwrap();
        let proxy = Some(PathBuf::from("/usr/bin/xdg-dbus-proxy"));
        let e = start_with(None, proxy, &state).err().unwrap();
        assert!(e.contains("no session bus") && e.ends_with("skipped"), "{e}");
        let e = start_with(Some("unix:path=/nonexistent".into()), None, &state).err().unwrap();
        assert!(e.contains("xdg-dbus-proxy is not installed (Debian package xdg-dbus-proxy)"), "{e}");
        // A proxy that dies at once (here `false`) is reported, not waited for.
        let e = start_with(Some("unix:path=/nonexistent".into()), Some("/bin/false".into()), &state)
            .err()
            .unwrap();
        assert!(e.contains("xdg-dbus-proxy exited"), "{e}");
        assert!(!d.path().join("run/bus").exists());
    }
}
