//! The user's ssh-agent, filtered, as a step of every start: the launcher listens on a socket
//! of its own for the sandbox's whole life, bound into the sandbox at
//! [`ocsb_sandbox::spec::SSH_AGENT_INSIDE`] with `SSH_AUTH_SOCK` naming it there, and relays
//! each request that `ocsb_policy::ssh_agent` lets through to the user's agent.
//!
//! *Why not the user's socket*: a client of the agent can add keys (they outlive the session),
//! remove the user's, or lock the agent with a password of its own. The sandbox only needs the
//! public keys and signatures. Each connection of the sandbox gets a connection of its own to
//! the user's agent (ssh binds a connection to a server with `session-bind@openssh.com`, so
//! connections are not shared), opened at its first request that passes.
//!
//! The socket lives in the project's `egress/` directory (private, 0700), which its sandboxes
//! hide and no other project's sandbox mounts: the only way in is the bind.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ocsb_policy::ssh_agent::{self as rule, Keys, Refusal, Verdict};
use ocsb_sandbox::SandboxSpec;
use ocsb_sandbox::spec::SSH_AGENT_INSIDE;

use crate::error::{Error, Result};
use crate::project::Project;
use crate::state::Layout;

/// At most this many connections of the sandbox at once; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

/// The user's agent, as this launcher was started with it: an absolute `SSH_AUTH_SOCK` that
/// exists. None: no agent, and none inside either.
pub fn user_agent() -> Option<PathBuf> {
    std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from).filter(|p| p.is_absolute() && p.exists())
}

/// The relay while it serves; dropped once the sandbox has exited.
pub struct Relay {
    closing: Arc<AtomicBool>,
    /// Stops the accept loop and removes the socket, after `closing` is set.
    closer: ocsb_sandbox::served::Closer,
}

/// Starts the relay for a sandbox of `project` when the user has an agent. Without namespaces
/// (`OCSB_SANDBOX=0`) there is no bind to put a filtered socket in the sandbox's place, and the
/// user's own socket is not passed: said once, and no agent inside.
pub fn start(project: &Project, spec: &SandboxSpec) -> Result<Option<Relay>> {
    let Some(upstream) = user_agent() else { return Ok(None) };
    if !spec.namespaces {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "ocsb: note: your ssh-agent is not passed in with OCSB_SANDBOX=0: without the \
                 filesystem sandbox it could not be filtered, and the agent could add keys to it or lock it"
            )
        });
        return Ok(None);
    }
    let dir = Layout::of(&project.settings).egress();
    let dir = std::fs::canonicalize(&dir).map_err(|e| Error::io("resolve", &dir, e))?;
    let nonce = crate::web::auth::random_secret()?;
    let ocsb_sandbox::served::Listening { listener, closer } =
        ocsb_sandbox::served::listen(&dir, "ssh-agent", &nonce)?;
    let closing = Arc::new(AtomicBool::new(false));
    let shared =
        Arc::new(Shared { upstream, keys: project.settings.ssh_keys(), said: Mutex::new(BTreeSet::new()) });
    let stop = closing.clone();
    std::thread::Builder::new()
        .name("ocsb-ssh-agent".into())
        .spawn(move || accept(&listener, &stop, &shared))
        .map_err(|e| Error::failed(format!("cannot start the ssh-agent relay: {e}"), "report this"))?;
    Ok(Some(Relay { closing, closer }))
}

/// What the relay puts into the spec: its socket, and `SSH_AUTH_SOCK` naming it where the
/// sandbox sees it.
pub fn into_spec(spec: &mut SandboxSpec, relay: &Relay) {
    spec.ssh_agent = Some(relay.closer.socket().to_path_buf());
    spec.env.retain(|(k, _)| k != "SSH_AUTH_SOCK");
    spec.env.push(("SSH_AUTH_SOCK".into(), SSH_AGENT_INSIDE.into()));
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The accept loop, woken by the close, sees `closing` and ends.
        self.closing.store(true, Ordering::SeqCst);
        self.closer.close();
    }
}

/// What every connection shares: the user's agent, the keys allowed, the kinds of refusal
/// already said.
struct Shared {
    upstream: PathBuf,
    keys: Keys,
    said: Mutex<BTreeSet<&'static str>>,
}

impl Shared {
    /// Tells the user, once per kind, on the launcher's stderr (where its other warnings go,
    /// for `exec`, `shell` and `run` alike).
    fn refused(&self, r: &Refusal) {
        if self.said.lock().unwrap_or_else(|p| p.into_inner()).insert(r.kind()) {
            eprintln!(
                "ocsb: ssh-agent: refused: the sandbox tried to {r}; only listing keys and signing reach your agent"
            );
        }
    }

    fn unreachable(&self, e: &std::io::Error) {
        if self.said.lock().unwrap_or_else(|p| p.into_inner()).insert("unreachable") {
            eprintln!(
                "ocsb: warning: ssh-agent: cannot reach your agent at {}: {e}",
                self.upstream.display()
            );
        }
    }
}

fn accept(listener: &UnixListener, closing: &AtomicBool, shared: &Arc<Shared>) {
    let busy = Arc::new(AtomicUsize::new(0));
    for c in listener.incoming() {
        if closing.load(Ordering::SeqCst) {
            break;
        }
        let Ok(c) = c else {
            // Out of descriptors or memory: wait a moment rather than spin.
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        if busy.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            continue; // dropped: the client sees the connection close
        }
        let slot = Slot::take(&busy);
        let shared = shared.clone();
        // A failed spawn (the sandbox can use up the user's processes) drops the closure, and
        // the slot with it: the count never leaks.
        let _ = std::thread::Builder::new().name("ocsb-ssh-agent-conn".into()).spawn(move || {
            serve(c, &shared);
            drop(slot);
        });
    }
}

/// One of the [`MAX_CONNECTIONS`] served at once, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(busy: &Arc<AtomicUsize>) -> Slot {
        busy.fetch_add(1, Ordering::SeqCst);
        Slot(busy.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One connection of the sandbox, request by request, until it closes or sends a malformed
/// frame.
fn serve(mut client: UnixStream, shared: &Shared) {
    let mut upstream: Option<UnixStream> = None;
    while let Some(request) = read_frame(&mut client) {
        let answer = match rule::judge(&request, &shared.keys) {
            Err(_) => return,
            Ok(Verdict::Refuse(r)) => {
                shared.refused(&r);
                vec![rule::FAILURE]
            }
            Ok(v) => match ask(&mut upstream, shared, &request) {
                Some(a) if v == Verdict::PassFiltered => match rule::filter_identities(&a, &shared.keys) {
                    Ok(a) => a,
                    Err(_) => return,
                },
                Some(a) => a,
                None => vec![rule::FAILURE],
            },
        };
        if client.write_all(&rule::frame(&answer)).is_err() {
            return;
        }
    }
}

/// The user's agent's answer to `request`, on this connection's own connection to it (opened
/// now if it is not yet). None when the agent cannot be reached or answers malformed: the
/// sandbox gets a failure, and the next request tries a fresh connection.
fn ask(upstream: &mut Option<UnixStream>, shared: &Shared, request: &[u8]) -> Option<Vec<u8>> {
    if upstream.is_none() {
        match UnixStream::connect(&shared.upstream) {
            Ok(s) => *upstream = Some(s),
            Err(e) => {
                shared.unreachable(&e);
                return None;
            }
        }
    }
    let up = upstream.as_mut()?;
    let answer = up.write_all(&rule::frame(request)).ok().and_then(|()| read_frame(up));
    if answer.is_none() {
        *upstream = None;
    }
    answer
}

/// One frame's payload; None at the end of the stream or on a malformed length.
fn read_frame(s: &mut UnixStream) -> Option<Vec<u8>> {
    let mut header = [0u8; 4];
    s.read_exact(&mut header).ok()?;
    let len = rule::frame_len(header).ok()?;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    Some(payload)
}
