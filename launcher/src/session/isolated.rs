//! `OCSB_NETWORK=isolated`, the launcher's part: every sandbox this launcher starts goes through
//! [`run`], which serves the sockets of an isolated sandbox's namespace while it runs (the
//! relays and the DNS stub of `ocsb_egress::inside`) with the [`Server`] the start made for it.
//! A sandbox on the host's network runs as it always did.

use std::any::Any;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;

use ocsb_egress::builtin::lend::lend;
use ocsb_egress::inside::{self, DialIn, Sockets};
use ocsb_policy::egress::Policy;
use ocsb_policy::publish::{Publish, Reserved};
use ocsb_sandbox::listeners::Listeners;
use ocsb_sandbox::netns::{Inside, Role};
use ocsb_sandbox::{Ahead, Network, SandboxSpec};

use super::publish;
use crate::error::Result;
use crate::project::Project;
use ocsb_policy::publish::Publications;

/// How long the filter may take to take a lent listener.
const LEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What serving a sandbox's namespace needs: where the filter listens, the rules (for the DNS
/// stub), the access log, and the host ports that lead into the sandbox.
#[derive(Clone)]
pub struct Server {
    filter: SocketAddr,
    policy: Policy,
    paths: ocsb_egress::paths::EgressPaths,
    /// Host `127.0.0.1:P` relayed to `127.0.0.1:P` inside (OpenCode's port, for `run`).
    expose: Vec<u16>,
    /// The builtin filter's control socket: the inside proxy listener is lent to the filter
    /// there, so tunnels take no extra hop (squid cannot take one: its port is relayed).
    lend_to: Option<std::path::PathBuf>,
    /// `OCSB_PUBLISH`, and the ports of the launcher's own that are never published (the
    /// front's and OpenCode's; the relayed ones are added when the sockets arrive).
    publish: Publish,
    own_ports: Vec<u16>,
    /// What is published, as it stands.
    publications: Publications,
}

impl Server {
    pub fn new(project: &Project, policy: &Policy) -> Result<Server> {
        let inst = crate::filter::instance(project)?;
        let builtin = inst.backend == ocsb_egress::instance::Backend::Builtin;
        Ok(Server {
            filter: SocketAddr::from(([127, 0, 0, 1], project.settings.egress_port())),
            policy: policy.clone(),
            lend_to: builtin.then(|| inst.paths().control_socket()),
            paths: inst.paths(),
            expose: Vec::new(),
            publish: project.settings.publish(),
            own_ports: vec![
                project.settings.egress_port(),
                project.settings.web_port(),
                project.settings.opencode_port(),
            ],
            publications: Publications::default(),
        })
    }

    /// The servers of the sandbox published on the host, kept current while it runs.
    pub fn publications(&self) -> Publications {
        self.publications.clone()
    }

    /// Also relay the host's `127.0.0.1:port` into the sandbox for each of `ports` (where the
    /// command listens).
    pub fn expose(mut self, ports: &[u16]) -> Server {
        self.expose.extend_from_slice(ports);
        self
    }

    pub fn serve(&self, inside: Inside) -> ocsb_sandbox::Result<Box<dyn Any + Send>> {
        let fail = |what: String| {
            ocsb_sandbox::Error::failed(format!("isolated network: {what}"), "see `ocsb doctor`")
        };
        let mut sockets = Sockets::default();
        let mut listeners = None;
        let mut reserved = self.own_ports.clone();
        reserved.extend(&self.expose);
        // The listeners stage 2 made for this launcher are in the namespace's list too: they
        // are ocsb's, not the agent's servers, and never considered for publishing.
        let own: Vec<u64> = inside.sockets.iter().filter_map(|(_, fd)| inode(fd)).collect();
        for (role, fd) in inside.sockets {
            match role {
                Role::Diag => {
                    listeners = Some(Listeners::from_handed(fd).map_err(|e| fail(format!("sock_diag: {e}")))?)
                }
                Role::Forward(port) => {
                    reserved.push(port);
                    let l = TcpListener::from(fd);
                    // The filter's port is lent to the builtin filter; relayed when there is
                    // none to take it (squid, a filter not running or started by an older
                    // ocsb): the same filter either way, one hop further.
                    let sock = self.lend_to.as_deref().filter(|_| port == self.filter.port());
                    match sock.map(|sock| lend(sock, &l, LEND_TIMEOUT)) {
                        Some(Ok(lease)) => sockets.lent.push((port, l, lease)),
                        Some(Err(e)) => {
                            eprintln!("ocsb: note: the proxy port is relayed: {e}");
                            sockets.forward.push((port, l));
                        }
                        None => sockets.forward.push((port, l)),
                    }
                }
                Role::Transparent => sockets.transparent.push(TcpListener::from(fd)),
                Role::Dns => sockets.dns.push(UdpSocket::from(fd)),
                Role::DnsTcp => sockets.dns_tcp.push(TcpListener::from(fd)),
            }
        }
        for &port in &self.expose {
            let l = TcpListener::bind(("127.0.0.1", port))
                .map_err(|e| fail(format!("cannot listen on 127.0.0.1:{port} for the sandbox: {e}")))?;
            sockets.expose.push((l, port));
        }
        let factory = Arc::new(inside.factory);
        let dial: DialIn = Arc::new(move |to| factory.connect_to(to));
        // The stub's refusals go beside the filter's own lines; without the log they would go
        // nowhere, so say so rather than drop them quietly.
        let log = match self.paths.open_access_log() {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!(
                    "ocsb: warning: {}: {e}; names the DNS stub refuses are not logged",
                    self.paths.access_log().display()
                );
                None
            }
        };
        let cfg = inside::Config { filter: self.filter, policy: self.policy.clone(), log };
        // The leases end with the sandbox (or with the launcher): the filter then lets go.
        let served = Arc::new(inside::serve(cfg, sockets, Some(dial)).map_err(fail)?);
        let publisher = match listeners {
            Some(l) if self.publish != Publish::Off => Some(
                publish::start(
                    l,
                    served.clone(),
                    self.publish.clone(),
                    Reserved::new(reserved, ephemeral_range()),
                    own,
                    self.publications(),
                )
                .map_err(|e| fail(format!("cannot watch the sandbox's listeners: {e}")))?,
            ),
            _ => None,
        };
        // Dropped in this order: the publisher (its host ports close) before the network.
        Ok(Box::new((publisher, served)))
    }
}

/// The host's ephemeral port range (this launcher's network namespace is the host's).
fn ephemeral_range() -> std::ops::RangeInclusive<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    ocsb_policy::publish::ephemeral_range(&text)
}

/// The inode of a socket (what the kernel's list of listeners names it by).
fn inode(fd: &std::os::fd::OwnedFd) -> Option<u64> {
    nix::sys::stat::fstat(fd).ok().map(|st| st.st_ino)
}

/// The server a sandbox of `spec` needs, made by `make`: one for an isolated network, none for
/// the host's.
pub fn server_for(spec: &SandboxSpec, make: impl FnOnce() -> Result<Server>) -> Result<Option<Server>> {
    match spec.network {
        Network::Host => Ok(None),
        Network::Isolated { .. } => make().map(Some),
    }
}

/// Runs the sandbox; an isolated one is served by `server` while it runs (and refused
/// without one, by `run_served`). `ahead`: what the caller made before (the check of the
/// checkouts, stage 2 started early).
pub fn run(spec: &SandboxSpec, server: Option<&Server>, ahead: Ahead) -> Result<i32> {
    let serve = |inside: Inside| match server {
        Some(s) => s.serve(inside),
        None => Err(ocsb_sandbox::Error::failed("no server for the isolated network", "report this")),
    };
    let serve: ocsb_sandbox::Serve<'_> = &serve;
    Ok(ocsb_sandbox::run_served(spec, server.is_some().then_some(serve), ahead)?)
}
