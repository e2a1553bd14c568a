//! Published ports (`OCSB_PUBLISH`, isolated mode): a server the agent starts inside (`npm run
//! dev` on 3000) is served on the host's loopback at the same port while it listens, so the
//! user's browser reaches it. Which ports, and where on the host, is
//! [`ocsb_policy::publish`]'s rule; this module enforces it.
//!
//! The launcher watches the namespace's listeners through the kernel (`sock_diag`, every
//! [`LOOK_EVERY`]; see [`ocsb_sandbox::listeners`]), never through anything the agent says.
//! A publication binds `127.0.0.1:P` (and `[::1]:P` where the host has IPv6, so `localhost`
//! reaches the same server whichever address a browser tries) and relays each connection into
//! the namespace through a socket the namespace made. Binding is the test of "in use": a port
//! a host program holds is never taken, and the next free one is offered instead.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ocsb_egress::inside::{Exposed, Served};
use ocsb_policy::publish::{self, Publication, Publications, Publish, Reserved, Skip};
use ocsb_sandbox::listeners::{Listeners, Listening};

/// How often the listeners inside are looked at: a dev server is reachable within this of its
/// start, and a look is one netlink round trip.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The watcher: publishes and withdraws until dropped. *Why a channel*: the watcher waits
/// between looks on it, so dropping the sender wakes it at once; a sandbox's exit does not wait
/// out a look's interval.
pub struct Publisher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts watching `listeners` and publishing through `served`. `own`: the inodes of the
/// listeners stage 2 made for the launcher (the filter's port, the transparent and DNS ports),
/// which are never the agent's.
pub fn start(
    listeners: Listeners,
    served: Arc<Served>,
    mode: Publish,
    reserved: Reserved,
    own: Vec<u64>,
    shown: Publications,
) -> std::io::Result<Publisher> {
    let (stop, stopped) = mpsc::channel::<()>();
    let own = own.into_iter().collect();
    // The namespace, so the program shown as a server's is looked for among its processes only.
    let namespace = listeners.namespace().ok();
    let mut watch = Watch {
        listeners,
        served,
        mode,
        reserved,
        shown,
        own,
        namespace,
        live: BTreeMap::new(),
        seen: BTreeSet::new(),
        told: BTreeMap::new(),
        full: false,
    };
    let thread = std::thread::Builder::new().name("ocsb-publish".into()).spawn(move || {
        loop {
            if let Err(e) = watch.look() {
                eprintln!("ocsb: warning: published ports: cannot list the sandbox's listeners ({e}); nothing more is published");
                break;
            }
            if stopped.recv_timeout(LOOK_EVERY) != Err(mpsc::RecvTimeoutError::Timeout) {
                break;
            }
        }
        watch.live.clear();
        watch.show();
    })?;
    Ok(Publisher { stop: Some(stop), thread: Some(thread) })
}

struct Live {
    publication: Publication,
    /// The host's listeners; dropping them closes the host's ports.
    _exposed: Vec<Exposed>,
}

struct Watch {
    listeners: Listeners,
    served: Arc<Served>,
    mode: Publish,
    reserved: Reserved,
    own: BTreeSet<u64>,
    shown: Publications,
    namespace: Option<u64>,
    /// Port inside → its publication.
    live: BTreeMap<u16, Live>,
    /// Ports that listened at the last look: a port is published once it listens at two looks
    /// in a row, so a listener opened and closed at once costs the host nothing.
    seen: BTreeSet<u16>,
    /// Ports inside reported as not published, and when they last listened: said once while
    /// they listen, and again only after [`FORGET_AFTER`] without (a port opened and closed in
    /// a loop does not fill the user's terminal).
    told: BTreeMap<u16, Instant>,
    /// The cap was reached and said.
    full: bool,
}

/// How long a port refused for publishing stays refused without a word after it stops
/// listening.
const FORGET_AFTER: Duration = Duration::from_secs(10);

impl Watch {
    fn look(&mut self) -> std::io::Result<()> {
        let mut now = self.listeners.list()?;
        now.retain(|l| !self.own.contains(&l.inode));
        let addrs: Vec<SocketAddr> = now.iter().map(|l: &Listening| l.addr).collect();
        let ports: BTreeSet<u16> = addrs.iter().map(|a| a.port()).collect();
        let gone: Vec<u16> = self.live.keys().filter(|p| !ports.contains(p)).copied().collect();
        for port in gone {
            if let Some(l) = self.live.remove(&port) {
                eprintln!("ocsb: unpublished: {} (the server stopped listening)", l.publication.url());
            }
        }
        let at = Instant::now();
        for p in &ports {
            if let Some(t) = self.told.get_mut(p) {
                *t = at;
            }
        }
        self.told.retain(|_, t| at.duration_since(*t) < FORGET_AFTER);
        let steady: Vec<u16> = ports.intersection(&self.seen).copied().collect();
        self.seen = ports;
        let (mut changed, mut new) = (false, 0);
        for port in steady {
            if self.live.contains_key(&port) || self.told.contains_key(&port) {
                continue;
            }
            if new == publish::NEW_PER_LOOK {
                break;
            }
            new += 1;
            let result = publish::wanted(&self.mode, &self.reserved, port).and_then(|()| {
                if self.live.len() >= publish::MAX_PUBLISHED {
                    Err(Skip::TooMany)
                } else {
                    self.publish(port, &now, &addrs)
                }
            });
            match result {
                Ok(p) => {
                    eprintln!("ocsb: published: {}", p.describe());
                    changed = true;
                }
                Err(Skip::Off) => {
                    self.told.insert(port, at);
                }
                // Said once while the cap holds, not once per port.
                Err(Skip::TooMany) if self.full => {
                    self.told.insert(port, at);
                }
                Err(Skip::TooMany) => {
                    eprintln!(
                        "ocsb: not published: port {port} inside, and no more while {} are ({})",
                        publish::MAX_PUBLISHED,
                        Skip::TooMany.why(port)
                    );
                    self.full = true;
                    self.told.insert(port, at);
                }
                Err(skip) => {
                    eprintln!("ocsb: not published: port {port} inside ({})", skip.why(port));
                    self.told.insert(port, at);
                }
            }
        }
        if self.live.len() < publish::MAX_PUBLISHED {
            self.full = false;
        }
        if changed || self.shown_len() != self.live.len() {
            self.show();
        }
        Ok(())
    }

    fn publish(&mut self, port: u16, now: &[Listening], addrs: &[SocketAddr]) -> Result<Publication, Skip> {
        publish::wanted(&self.mode, &self.reserved, port)?;
        let to = publish::dial_address(port, addrs).ok_or(Skip::NotLoopback)?;
        let mut bound = Vec::new();
        let host = publish::host_port(port, &self.mode, &self.reserved, |p| match bind_loopback(p) {
            Some(l) => {
                bound = l;
                true
            }
            None => false,
        })?;
        let mut exposed = Vec::new();
        for l in bound {
            match self.served.expose(l, to) {
                Ok(e) => exposed.push(e),
                Err(e) => eprintln!("ocsb: warning: cannot serve 127.0.0.1:{host} for the sandbox: {e}"),
            }
        }
        if exposed.is_empty() {
            return Err(Skip::NoFreePort);
        }
        let inode = now.iter().find(|l| l.addr.port() == port).map(|l| l.inode);
        let by = inode.zip(self.namespace).and_then(|(inode, ns)| owner(inode, ns));
        let publication = Publication { inside: port, host, by };
        self.live.insert(port, Live { publication: publication.clone(), _exposed: exposed });
        Ok(publication)
    }

    fn shown_len(&self) -> usize {
        self.shown.lock().map_or(0, |s| s.len())
    }

    fn show(&self) {
        if let Ok(mut s) = self.shown.lock() {
            *s = self.live.values().map(|l| l.publication.clone()).collect();
        }
    }
}

/// `127.0.0.1:port`, and `[::1]:port` where the host has IPv6; `None` when either is in use
/// (a host program listening on one of them would get the other's clients otherwise).
fn bind_loopback(port: u16) -> Option<Vec<TcpListener>> {
    let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok()?;
    match TcpListener::bind((Ipv6Addr::LOCALHOST, port)) {
        Ok(v6) => Some(vec![v4, v6]),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        // No IPv6 on the host: nobody can be listening there either.
        Err(_) => Some(vec![v4]),
    }
}

/// The program holding the socket `inode`, and its pid, among the processes of the network
/// namespace `ns` (the sandbox's: a host process is never named for the agent's server), at
/// most [`OWNER_LOOKS`] of them.
fn owner(inode: u64, ns: u64) -> Option<(String, i32)> {
    let want = format!("socket:[{inode}]");
    let in_ns = format!("net:[{ns}]");
    let procs = std::fs::read_dir("/proc").ok()?.flatten().take(OWNER_LOOKS);
    for entry in procs {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read_link(entry.path().join("ns/net")).map_or(true, |l| l.as_os_str() != in_ns.as_str()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
        {
            // The name is the agent's to choose (`prctl(PR_SET_NAME)`): only printable ASCII
            // reaches the user's terminal and the panel, never an escape sequence.
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            return Some((printable(&comm), pid));
        }
    }
    None
}

/// The processes looked at for a server's program, at most.
const OWNER_LOOKS: usize = 8192;

/// `comm` as shown: printable ASCII only, the rest as `?`. *Why*: the name is the agent's to
/// choose (`prctl(PR_SET_NAME)`), and it reaches the user's terminal: never an escape sequence.
fn printable(comm: &str) -> String {
    comm.trim_end_matches('\n').chars().map(|c| if c.is_ascii_graphic() { c } else { '?' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_held_on_either_loopback_is_in_use() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        assert!(bind_loopback(port).is_none());
        drop(held);
        if let Ok(v6) = TcpListener::bind("[::1]:0") {
            assert!(bind_loopback(v6.local_addr().unwrap().port()).is_none());
        }
        let free = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(bind_loopback(free).is_some_and(|l| !l.is_empty()));
    }

    #[test]
    fn a_program_name_cannot_carry_an_escape_sequence() {
        assert_eq!(printable("\x1b]0;owned\x07node\n"), "?]0;owned?node");
        assert_eq!(printable("python3\n"), "python3");
    }

    #[test]
    fn the_owner_of_a_socket_is_found_by_its_inode() {
        use std::os::fd::AsRawFd;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", l.as_raw_fd())).unwrap();
        let inode: u64 =
            link.to_str().unwrap().trim_start_matches("socket:[").trim_end_matches(']').parse().unwrap();
        let ns = std::fs::read_link("/proc/self/ns/net").unwrap();
        let ns: u64 = ns.to_str().unwrap().trim_start_matches("net:[").trim_end_matches(']').parse().unwrap();
        let (_, pid) = owner(inode, ns).unwrap();
        assert_eq!(owner(inode, ns + 1), None, "found outside the namespace");
        assert_eq!(pid as u32, std::process::id());
    }
}
