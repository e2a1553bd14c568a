//! The system-bus client of `dev.ocsb.Netlock1` (served by ocsb-netlock-helper). The methods take
//! no arguments; polkit decides. Calls that change something allow interactive authentication, and
//! on a terminal without a desktop agent `pkttyagent` asks for the password.

use std::process::{Child, Command, Stdio};

use zbus::blocking::{Connection, Proxy};
use zbus::proxy::MethodFlags;

use crate::error::{Error, Result};

const BUS_NAME: &str = "dev.ocsb.Netlock1";
const PATH: &str = "/dev/ocsb/Netlock1";
const STATUS_FILE: &str = "/run/ocsb-netlock/status.json";

pub enum Helper {
    Present(Connection),
    Absent(String),
}

impl Helper {
    pub fn why(&self) -> String {
        match self {
            Helper::Present(_) => "running".into(),
            Helper::Absent(why) => why.clone(),
        }
    }
}

/// Connects to the system bus and checks that the helper's name can be reached (it may also be
/// activatable through systemd).
pub fn connect() -> Helper {
    let conn = match Connection::system() {
        Ok(c) => c,
        Err(e) => return Helper::Absent(format!("no system bus ({e})")),
    };
    let dbus = match zbus::blocking::fdo::DBusProxy::new(&conn) {
        Ok(p) => p,
        Err(e) => return Helper::Absent(format!("system bus unusable ({e})")),
    };
    #[allow(clippy::expect_used, reason = "a constant that is a valid bus name")]
    let name = zbus::names::BusName::try_from(BUS_NAME).expect("static bus name");
    let owned = dbus.name_has_owner(name.clone()).unwrap_or(false);
    let activatable =
        dbus.list_activatable_names().map(|n| n.iter().any(|x| x.as_str() == BUS_NAME)).unwrap_or(false);
    if owned || activatable {
        Helper::Present(conn)
    } else {
        Helper::Absent(format!("the helper daemon ({BUS_NAME}) is not running on the system bus"))
    }
}

fn proxy(conn: &Connection) -> Result<Proxy<'static>> {
    Proxy::new(conn, BUS_NAME, PATH, BUS_NAME)
        .map_err(|e| Error::failed(format!("D-Bus: {e}"), "check the system bus"))
}

pub fn status(conn: &Connection) -> Result<(String, String)> {
    proxy(conn)?.call("Status", &()).map_err(|e| {
        Error::failed(format!("helper Status failed: {e}"), "systemctl status ocsb-netlock.service")
    })
}

/// The daemon's status file, readable without the bus.
pub fn status_file() -> Option<(String, String)> {
    let text = std::fs::read_to_string(STATUS_FILE).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((v.get("state")?.as_str()?.to_string(), text))
}

/// Calls `Apply` or `Remove` with interactive authorisation allowed.
pub fn call(conn: &Connection, method: &str) -> Result<String> {
    let _agent = TtyAgent::start();
    let reply: Option<String> = proxy(conn)?
        .call_with_flags(method, MethodFlags::AllowInteractiveAuth.into(), &())
        .map_err(|e| explain(method, e))?;
    Ok(reply.unwrap_or_default())
}

fn explain(method: &str, e: zbus::Error) -> Error {
    let text = e.to_string();
    if text.contains("AccessDenied") || text.contains("InteractiveAuthorizationRequired") {
        Error::failed(
            format!("the helper refused {method}: {text}"),
            "an administrator must authorise it (polkit action dev.ocsb.netlock.*); run from a desktop session \
             or a terminal where pkttyagent can ask for the password, or ask the admin",
        )
    } else {
        Error::failed(format!("helper {method} failed: {text}"), "see `journalctl -u ocsb-netlock.service`")
    }
}

/// `pkttyagent` for this process while a call runs, when stdin is a terminal (a desktop session
/// has its own agent; pkttyagent then simply fails to register and exits).
struct TtyAgent(Option<Child>);

impl TtyAgent {
    fn start() -> TtyAgent {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return TtyAgent(None);
        }
        let child = Command::new("pkttyagent")
            .args(["--process", &std::process::id().to_string(), "--fallback"])
            .stdout(Stdio::null())
            .spawn()
            .ok();
        // Give it a moment to register before the call needs it.
        std::thread::sleep(std::time::Duration::from_millis(200));
        TtyAgent(child)
    }
}

impl Drop for TtyAgent {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
