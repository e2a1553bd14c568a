//! The system-bus interface `dev.ocsb.Netlock1`: four methods, none takes an argument, so a caller
//! can only ask "do what the root-owned config says". Each is authorised by polkit with the
//! caller's unique bus name from the message header as subject (never the daemon's own pid:
//! polkit treats uid 0 as always authorised). Interaction only when the caller asked for it.
//!
//! Calls are read one at a time on the bus thread: `Status` is answered there, the others are
//! authorised there and then handed to the daemon thread, which answers them itself. So a slow
//! polkit delays only other callers, never the lock.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zbus::Message;
use zbus::blocking::{Connection, MessageIterator};
use zbus::message::{Flags, Header, Type};

use crate::daemon::{Event, Request, lock};
use crate::status::Status;

pub const BUS_NAME: &str = "dev.ocsb.Netlock1";
pub const OBJECT_PATH: &str = "/dev/ocsb/Netlock1";
const ERROR: &str = "org.freedesktop.DBus.Error.";

/// A call waiting for the daemon thread's answer.
pub struct Reply {
    conn: Connection,
    call: Message,
}

impl Reply {
    pub fn send(self, answer: Result<String, String>) {
        let _ = match answer {
            Ok(state) => self.conn.reply(&self.call.header(), &state),
            Err(e) => refuse(&self.conn, &self.call.header(), "Failed", e),
        };
    }
}

fn refuse(conn: &Connection, hdr: &Header<'_>, name: &str, text: String) -> zbus::Result<()> {
    conn.reply_error(hdr, format!("{ERROR}{name}"), &text)
}

/// Connects to the system bus, claims the name and serves calls until the bus goes away (the
/// message stream ends when the connection breaks, e.g. on a restart of dbus.service).
pub fn serve(tx: &Sender<Event>, status: &Arc<Mutex<Status>>) -> zbus::Result<()> {
    // A bus that went away must not leave a call (polkit's CheckAuthorization) waiting for ever.
    let conn =
        zbus::blocking::connection::Builder::system()?.method_timeout(Duration::from_secs(5)).build()?;
    // Listening before the name is ours, so no call that arrives at once is missed.
    let calls = MessageIterator::from(&conn);
    conn.request_name(BUS_NAME)?;
    eprintln!("ocsb-netlock-helper: serving {BUS_NAME} on the system bus");
    for msg in calls {
        let msg = msg?;
        let hdr = msg.header();
        if hdr.message_type() != Type::MethodCall {
            continue;
        }
        let ours = hdr.path().is_some_and(|p| p.as_str() == OBJECT_PATH)
            && hdr.interface().is_some_and(|i| i.as_str() == BUS_NAME);
        let (action, req) = match hdr.member().map(|m| m.as_str()) {
            Some("Status") if ours => {
                let s = lock(status);
                let _ = conn.reply(&hdr, &(s.state.clone(), serde_json::to_string(&*s).unwrap_or_default()));
                continue;
            }
            Some("Refresh") if ours => ("dev.ocsb.netlock.refresh", Request::Refresh),
            Some("Apply") if ours => ("dev.ocsb.netlock.apply", Request::Apply),
            Some("Remove") if ours => ("dev.ocsb.netlock.remove", Request::Remove),
            _ => {
                let _ = refuse(&conn, &hdr, "UnknownMethod", format!("{OBJECT_PATH} serves only {BUS_NAME}"));
                continue;
            }
        };
        match authorize(&conn, &hdr, action) {
            Ok(()) => {
                let reply = Reply { conn: conn.clone(), call: msg.clone() };
                tx.send(Event::Call(req, reply))
                    .map_err(|_| zbus::Error::Failure("daemon loop gone".into()))?;
            }
            Err((name, text)) => {
                let _ = refuse(&conn, &hdr, name, text);
            }
        }
    }
    Ok(())
}

/// polkit's `CheckAuthorization` for the caller. The subject is the caller's unique bus name from
/// the message header (`("system-bus-name", {"name": …})`), never a pid; `flags` 1 allows
/// interaction only when the caller asked for it. The answer is `(is_authorized, is_challenge,
/// details)`; the error is the D-Bus error name and its text.
fn authorize(conn: &Connection, hdr: &Header<'_>, action: &str) -> Result<(), (&'static str, String)> {
    let sender = hdr.sender().ok_or(("AccessDenied", "no sender".to_string()))?;
    let subject =
        ("system-bus-name", HashMap::from([("name", zbus::zvariant::Value::from(sender.as_str()))]));
    let flags: u32 = if hdr.primary().flags().contains(Flags::AllowInteractiveAuth) { 1 } else { 0 };
    let refused = |e: zbus::Error| ("AccessDenied", format!("polkit check failed ({e}); refusing"));
    let reply = conn
        .call_method(
            Some("org.freedesktop.PolicyKit1"),
            "/org/freedesktop/PolicyKit1/Authority",
            Some("org.freedesktop.PolicyKit1.Authority"),
            "CheckAuthorization",
            &(subject, action, HashMap::<&str, &str>::new(), flags, ""),
        )
        .map_err(refused)?;
    let (authorized, challenge, _): (bool, bool, HashMap<String, String>) =
        reply.body().deserialize().map_err(refused)?;
    match (authorized, challenge) {
        (true, _) => Ok(()),
        (false, true) => Err(("InteractiveAuthorizationRequired", format!("{action} needs authentication"))),
        (false, false) => Err(("AccessDenied", format!("not authorised for {action}"))),
    }
}
