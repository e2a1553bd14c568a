//! The system-bus interface `dev.ocsb.Netlock1`: four methods, none takes an argument, so a caller
//! can only ask "do what the root-owned config says". Each is authorised by polkit with the
//! caller's unique bus name from the message header as subject (never the daemon's own pid:
//! polkit treats uid 0 as always authorised). Interaction only when the caller asked for it.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use zbus::message::{Flags, Header};
use zbus::{Connection, fdo, interface};

use crate::daemon::{Call, Request, lock, reply_pair};
use crate::status::Status;

pub const BUS_NAME: &str = "dev.ocsb.Netlock1";
pub const OBJECT_PATH: &str = "/dev/ocsb/Netlock1";

/// The D-Bus side's view of the daemon: a request channel, a wake-up socket, the last status.
pub struct Handle {
    tx: Mutex<Sender<Call>>,
    wake: Mutex<UnixStream>,
    status: Arc<Mutex<Status>>,
}

impl Handle {
    pub fn new(tx: Sender<Call>, wake: UnixStream, status: Arc<Mutex<Status>>) -> Handle {
        Handle { tx: Mutex::new(tx), wake: Mutex::new(wake), status }
    }

    /// Hands the request to the daemon thread and awaits its answer (milliseconds) without
    /// blocking the executor that serves the other calls.
    async fn call(&self, req: Request) -> fdo::Result<String> {
        let (reply, answer) = reply_pair();
        lock(&self.tx).send((req, reply)).map_err(|_| fdo::Error::Failed("daemon loop gone".into()))?;
        let _ = lock(&self.wake).write(&[1]);
        answer.await.map_err(fdo::Error::Failed)
    }
}

struct Netlock {
    h: Handle,
}

#[interface(name = "dev.ocsb.Netlock1")]
impl Netlock {
    /// `(state, details-json)`; open to everyone (read-only, same as the status file).
    async fn status(&self) -> (String, String) {
        let s = lock(&self.h.status);
        (s.state.clone(), serde_json::to_string(&*s).unwrap_or_default())
    }

    /// Re-read resolv.conf and the config now (rate-limited).
    async fn refresh(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> fdo::Result<String> {
        authorize(conn, &hdr, "dev.ocsb.netlock.refresh").await?;
        self.h.call(Request::Refresh).await
    }

    /// Install (or re-enable) the lock.
    async fn apply(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> fdo::Result<String> {
        authorize(conn, &hdr, "dev.ocsb.netlock.apply").await?;
        self.h.call(Request::Apply).await
    }

    /// Take the lock away until the next `Apply` or daemon start.
    async fn remove(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> fdo::Result<String> {
        authorize(conn, &hdr, "dev.ocsb.netlock.remove").await?;
        self.h.call(Request::Remove).await
    }
}

/// polkit's `CheckAuthorization` for the caller. The subject is the caller's unique bus name from
/// the message header (`("system-bus-name", {"name": …})`), never a pid; `flags` 1 allows
/// interaction only when the caller asked for it. The answer is `(is_authorized, is_challenge,
/// details)`.
async fn authorize(conn: &Connection, hdr: &Header<'_>, action: &str) -> fdo::Result<()> {
    let sender = hdr.sender().ok_or_else(|| fdo::Error::AccessDenied("no sender".into()))?;
    let name = zbus::zvariant::Value::from(sender.as_str());
    let subject = ("system-bus-name", HashMap::from([("name", name)]));
    let flags: u32 = if hdr.primary().flags().contains(Flags::AllowInteractiveAuth) { 1 } else { 0 };
    let refused = |e: zbus::Error| fdo::Error::AccessDenied(format!("polkit check failed ({e}); refusing"));
    let reply = conn
        .call_method(
            Some("org.freedesktop.PolicyKit1"),
            "/org/freedesktop/PolicyKit1/Authority",
            Some("org.freedesktop.PolicyKit1.Authority"),
            "CheckAuthorization",
            &(subject, action, HashMap::<&str, &str>::new(), flags, ""),
        )
        .await
        .map_err(refused)?;
    let (authorized, challenge, _): (bool, bool, HashMap<String, String>) =
        reply.body().deserialize().map_err(refused)?;
    if authorized {
        Ok(())
    } else if challenge {
        Err(fdo::Error::InteractiveAuthorizationRequired(format!("{action} needs authentication")))
    } else {
        Err(fdo::Error::AccessDenied(format!("not authorised for {action}")))
    }
}

/// Whether the bus still answers (`GetId` of the bus itself, which every bus policy allows;
/// `Peer.Ping` is refused by the system bus's): after the bus daemon exits every call fails.
pub fn alive(conn: &zbus::blocking::Connection) -> bool {
    conn.call_method(
        Some("org.freedesktop.DBus"),
        "/org/freedesktop/DBus",
        Some("org.freedesktop.DBus"),
        "GetId",
        &(),
    )
    .is_ok()
}

/// Claims the bus name and serves the interface on zbus's own thread.
pub fn serve(h: Handle) -> zbus::Result<zbus::blocking::Connection> {
    zbus::blocking::connection::Builder::system()?
        // A bus that went away must not leave a call (our own liveness check, polkit's
        // CheckAuthorization) waiting for ever.
        .method_timeout(std::time::Duration::from_secs(5))
        .name(BUS_NAME)?
        .serve_at(OBJECT_PATH, Netlock { h })?
        .build()
}
