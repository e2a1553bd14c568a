//! The system-bus interface `dev.ocsb.Netlock1`: three methods, none takes an argument, so a caller
//! can only ask "do what the root-owned config says". Each is authorised by polkit with the
//! caller's unique bus name from the message header as subject (never the daemon's own pid:
//! polkit treats uid 0 as always authorised). Interaction only when the caller asked for it.
//!
//! Calls are read on the bus thread, which only dispatches: `Status` is answered there; for the
//! others a thread of its own asks polkit and hands an authorised call to the daemon thread,
//! which answers it. So neither a slow polkit nor an admin typing a password holds up other
//! callers, and the lock never waits for the bus. At most one check per caller and
//! `MAX_CHECKS` in all wait for polkit; more is refused at once.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zbus::Message;
use zbus::blocking::{Connection, MessageIterator};
use zbus::message::{Flags, Header, Type};

use crate::daemon::{Event, lock};
use crate::status::Status;

pub const BUS_NAME: &str = "dev.ocsb.Netlock1";
pub const OBJECT_PATH: &str = "/dev/ocsb/Netlock1";
/// polkit checks waiting at one time (each on its own thread).
const MAX_CHECKS: usize = 32;
/// How long a polkit check may take: long enough for an admin to type a password when the
/// caller allowed interaction, short enough that a bus gone away frees the thread.
const POLKIT_TIMEOUT: Duration = Duration::from_secs(120);

/// A call waiting for the daemon thread's answer: the connection it came on, and the call.
pub struct Reply(Connection, Message);

impl Reply {
    pub fn send(self, answer: Result<String, String>) {
        let Reply(conn, call) = self;
        match answer {
            Ok(state) => drop(conn.reply(&call.header(), &state)),
            Err(e) => refuse(&conn, &call.header(), "Failed", e),
        }
    }
}

/// Answers a call with an error. A caller that went away gets none: nothing to do about it.
fn refuse(conn: &Connection, hdr: &Header<'_>, name: &str, text: String) {
    let _ = conn.reply_error(hdr, format!("org.freedesktop.DBus.Error.{name}"), &text);
}

/// Connects to the system bus, claims the name and serves calls until the bus goes away (the
/// message stream ends when the connection breaks, e.g. on a restart of dbus.service).
pub fn serve(tx: &Sender<Event>, status: &Arc<Mutex<Status>>) -> zbus::Result<()> {
    let conn = zbus::blocking::connection::Builder::system()?.method_timeout(POLKIT_TIMEOUT).build()?;
    let waiting: Arc<Mutex<HashSet<String>>> = Arc::default();
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
        let (action, enable) = match hdr.member().map(|m| m.as_str()) {
            Some("Status") if ours => {
                let s = lock(status);
                let _ = conn.reply(&hdr, &(s.state.clone(), serde_json::to_string(&*s).unwrap_or_default()));
                continue;
            }
            Some("Apply") if ours => ("dev.ocsb.netlock.apply", true),
            Some("Remove") if ours => ("dev.ocsb.netlock.remove", false),
            _ => {
                refuse(&conn, &hdr, "UnknownMethod", format!("{OBJECT_PATH} serves only {BUS_NAME}"));
                continue;
            }
        };
        let caller = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
        let mut w = lock(&waiting);
        if w.len() >= MAX_CHECKS || !w.insert(caller.clone()) {
            refuse(&conn, &hdr, "LimitsExceeded", "a call of yours is still waiting for polkit".into());
            continue;
        }
        drop(w);
        let (conn, tx, waiting) = (conn.clone(), tx.clone(), waiting.clone());
        std::thread::spawn(move || {
            let checked = authorize(&conn, &msg.header(), action);
            lock(&waiting).remove(&caller);
            match checked {
                Ok(()) => drop(tx.send(Event::Call { enable, reply: Reply(conn, msg) })),
                Err((name, text)) => refuse(&conn, &msg.header(), name, text),
            }
        });
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
