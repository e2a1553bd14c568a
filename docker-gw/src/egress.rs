//! The filter, reachable from the project's containers.
//!
//! Containers join internal networks: nothing routes out of them. The one way out is the
//! filter, which the gateway makes reachable on each network a container is created on: it
//! binds a listener on the network's gateway address (its bridge's own address on the host) at
//! the filter's port and lends it to the builtin filter (by the launcher's [`Reach::Lend`]).
//! The filter serves that bridge's network as clients on that listener only, with the
//! project's rules and log, for as long as the gateway holds the lease; the container gets the
//! proxy settings at create. *Why lent, not relayed*: the filter then sees each container's own
//! address (in its log), and the connections it accepts are its own, outside the netlock group
//! the launcher may run in.
//!
//! *Why bound to the bridge device*: a socket stays bound to an address after the interface
//! that held it is gone, and Docker gives the same subnet to the next network it makes, which
//! may be another project's. Bound to this network's bridge (`br-<id>`), the listener never
//! receives from a bridge made later; a lease whose bridge is gone is dropped.
//!
//! *With the squid backend* there is nothing to lend: squid cannot take a listener. The gateway
//! accepts on the same listener itself and relays each connection to squid's loopback port, so
//! containers reach the same rules; squid's log then shows the gateway (127.0.0.1) as the
//! client, and the rule's `file:line` as always.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use super::Daemon;
use crate::config::{Lender, Reach};

/// Networks served at once; a container on one more gets no proxy (and no way out).
const MAX_LEASES: usize = 32;

/// One network served: its bridge, the listener (kept, to lend again after a filter restart,
/// or to stop the relay) and, when lent, the lease (the control connection; the filter serves
/// the listener while it is open).
struct Lease {
    bridge: String,
    ifindex: u32,
    gateway: Ipv4Addr,
    listener: TcpListener,
    control: Option<UnixStream>,
}

impl Drop for Lease {
    /// A relayed network's accept loop ends with its listener (a lent one ends with the lease).
    fn drop(&mut self) {
        if self.control.is_none() {
            let _ = nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
    }
}

/// The filter's side: how it is reached, its port, and the leases held, by network id.
pub(super) struct Egress {
    reach: Reach,
    port: u16,
    leases: Mutex<HashMap<String, Lease>>,
}

impl Egress {
    pub fn new(reach: Reach, port: u16) -> Egress {
        Egress { reach, port, leases: Mutex::new(HashMap::new()) }
    }

    /// The proxy URL for containers on `network`: the filter at the network's gateway address
    /// ([`ocsb_policy::docker::proxy::url`]), lent a listener there first when it has none (or
    /// lost it in a restart). Never docker0's or another network's: the filter serves each
    /// network on its own listener only, and refuses a client from elsewhere.
    pub fn proxy_for(&self, daemon: &Daemon, network: &str) -> Result<String, String> {
        let (id, gateway) = daemon
            .bridge_of(network)
            .map_err(|e| format!("cannot ask the daemon for network {network}: {e}"))?
            .ok_or_else(|| format!("network {network} has no IPv4 gateway"))?;
        let bridge = format!("br-{}", id.get(..12).unwrap_or(&id));
        let url = ocsb_policy::docker::proxy::url(gateway, self.port);
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        // Networks removed since (their bridge is gone, or is another one by now) let go.
        leases.retain(|_, l| ifindex(&l.bridge) == Some(l.ifindex));
        if let Some(l) = leases.get_mut(&id)
            && l.gateway == gateway
        {
            if let (Reach::Lend(to), Some(control)) = (&self.reach, &mut l.control)
                && !alive(control)
            {
                *control = lend(to, &l.listener)?;
            }
            return Ok(url);
        }
        if leases.len() >= MAX_LEASES {
            return Err(format!("{MAX_LEASES} networks are served already"));
        }
        let listener = listen(&bridge, gateway, self.port)?;
        let ifindex = ifindex(&bridge).ok_or_else(|| format!("no interface {bridge}"))?;
        let control = match &self.reach {
            Reach::Lend(to) => Some(lend(to, &listener)?),
            Reach::Relay => {
                let accepting = listener.try_clone().map_err(|e| format!("cannot relay {url}: {e}"))?;
                let squid = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
                std::thread::spawn(move || super::ports::serve(accepting, squid));
                None
            }
        };
        leases.insert(id, Lease { bridge, ifindex, gateway, listener, control });
        Ok(url)
    }
}

fn lend(to: &Lender, listener: &TcpListener) -> Result<UnixStream, String> {
    to(listener).map_err(|e| format!("the filter took no listener: {e}"))
}

/// A listening socket on `gateway:port`, bound to the device `bridge` before the address.
fn listen(bridge: &str, gateway: Ipv4Addr, port: u16) -> Result<TcpListener, String> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, bind, listen, setsockopt, socket, sockopt,
    };
    let err = |what: &str, e: nix::Error| format!("cannot {what} {gateway}:{port} on {bridge}: {e}");
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| err("open a socket for", e))?;
    setsockopt(&fd, sockopt::BindToDevice, &std::ffi::OsString::from(bridge))
        .map_err(|e| err("bind to", e))?;
    // A lease dropped a moment ago leaves its connections in TIME_WAIT on this address; the
    // network's next container must still get a listener.
    setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| err("set SO_REUSEADDR for", e))?;
    let [a, b, c, d] = gateway.octets();
    bind(fd.as_raw_fd(), &SockaddrIn::new(a, b, c, d, port)).map_err(|e| err("listen on", e))?;
    listen(&fd, Backlog::new(1024).unwrap_or(Backlog::MAXCONN)).map_err(|e| err("listen on", e))?;
    Ok(TcpListener::from(fd))
}

/// The index of the interface `name`, if it exists.
fn ifindex(name: &str) -> Option<u32> {
    nix::net::if_::if_nametoindex(name).ok()
}

/// Whether the filter still holds its end of a lease: a closed connection reads end-of-file.
fn alive(lease: &UnixStream) -> bool {
    use nix::sys::socket::{MsgFlags, recv};
    let mut b = [0u8; 1];
    matches!(
        recv(lease.as_raw_fd(), &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
        Err(nix::errno::Errno::EAGAIN)
    )
}
