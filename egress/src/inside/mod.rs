//! The filter, inside the isolated network (`OCSB_NETWORK=isolated`). The sandbox's network
//! namespace holds only `lo`; stage 2 made listening sockets there and the launcher serves them
//! with this module, outside, as the user:
//!
//! - **forwards**: `127.0.0.1:P` inside is relayed to `127.0.0.1:P` on the host, for the filter's
//!   port (so the proxy variables work unchanged) and `OCSB_FORWARD_PORTS`;
//! - **transparent**: every other TCP connection arrives here (the namespace's table redirects
//!   it). Its host name comes from the TLS server name, the HTTP `Host` header, or the name the
//!   DNS stub answered with for its address, and it goes to the filter as `CONNECT name:port`:
//!   the same rules, the same decision, the same log line with `file:line` as a proxied request.
//!   A refused one is reset at once;
//! - **DNS**: the stub in `dns.rs`, over UDP and TCP;
//! - **exposed ports**: a host listener whose connections go *into* the sandbox (OpenCode's port,
//!   for the web front), through a socket the sandbox's namespace made.

mod dns;
pub mod peek;

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ocsb_policy::egress::{Decision, LogLine, Policy, RuleKind, Step, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::builtin::dial::Resolver;

/// How long a redirected connection to port 80 or 443 has to send its first bytes (the request
/// head, the ClientHello) before it is judged by its address alone. On other ports nothing is
/// awaited: only `connect` rules allow them, which name the host the DNS stub answered for (and
/// a protocol where the server speaks first, SSH, would wait for nothing).
const FIRST_BYTES: Duration = Duration::from_millis(300);
/// Addresses the stub answered with, remembered for mapping connections back to names.
const NAMES_KEPT: usize = 4096;
/// The filter's answer to a CONNECT must come within this (it resolves and dials first).
const FILTER_ANSWER: Duration = Duration::from_secs(30);
/// Connections served at once over all listeners, at most; more wait in the kernel's backlog.
/// *Why*: each holds two descriptors of the launcher (which serves the web front too), and the
/// sandbox must not be able to use them all up: the cap also stays well under the soft limit.
const MAX_CONNECTIONS: usize = 4096;
/// Descriptors kept free of connections (the web front, the runtime, files).
const SPARE_FDS: u64 = 256;

/// What the served network needs besides its sockets.
pub struct Config {
    /// The filter's listener on the host's loopback (`127.0.0.1:OCSB_EGRESS_PORT`).
    pub filter: SocketAddr,
    /// The rules, for the DNS stub (connections are judged by the filter itself).
    pub policy: Policy,
    /// The access log, where the stub's refusals go beside the filter's own lines.
    pub log: Option<std::fs::File>,
}

/// The sockets made inside the sandbox's namespace (and the host listeners that lead in).
#[derive(Default)]
pub struct Sockets {
    /// Inside `127.0.0.1:port`, relayed to the host's `127.0.0.1:port`.
    pub forward: Vec<(u16, std::net::TcpListener)>,
    /// A forward whose listener was lent to the filter ([`crate::builtin::lend`]): the filter
    /// accepts on it while the lease (the control connection) is open; once the filter closes
    /// it (stopped, restarted), the listener is relayed as a forward.
    pub lent: Vec<(u16, std::net::TcpListener, std::os::unix::net::UnixStream)>,
    pub transparent: Vec<std::net::TcpListener>,
    pub dns: Vec<std::net::UdpSocket>,
    /// The stub over TCP, for answers too large for a datagram.
    pub dns_tcp: Vec<std::net::TcpListener>,
    /// A host listener and the port inside its connections go to (through `dial_in`).
    pub expose: Vec<(std::net::TcpListener, u16)>,
}

/// Connects to an address inside the sandbox's namespace (`127.0.0.1:port`, `[::1]:port`).
pub type DialIn = Arc<dyn Fn(SocketAddr) -> std::io::Result<std::net::TcpStream> + Send + Sync>;

struct State {
    filter: SocketAddr,
    policy: Policy,
    resolver: Resolver,
    log: Mutex<Option<std::fs::File>>,
    names: Mutex<HashMap<IpAddr, String>>,
    /// The DNS stub's lookups in flight (UDP and TCP share the cap).
    lookups: Arc<tokio::sync::Semaphore>,
}

impl State {
    fn remember(&self, ip: IpAddr, name: &str) {
        let mut m = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= NAMES_KEPT {
            m.clear();
        }
        m.insert(ip, name.to_string());
    }

    fn name_of(&self, ip: IpAddr) -> Option<String> {
        self.names.lock().unwrap_or_else(|p| p.into_inner()).get(&ip).cloned()
    }

    /// One access-log line for a name the stub refused: method `DNS`, the deciding rule.
    fn log_refused_name(&self, name: &str, d: &Decision) {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let line = LogLine {
            time: format!("{}.{:03}", t.as_secs(), t.subsec_millis()),
            client: "127.0.0.1".into(),
            result: "DNS_DENIED".into(),
            status: 0,
            rule: d.note(),
            method: "DNS".into(),
            target: crate::builtin::proxy::log_safe(name),
            peer: None,
        };
        if let Some(f) = self.log.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Serves the sockets until dropped.
pub struct Served {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    runtime: tokio::runtime::Handle,
    slots: Arc<tokio::sync::Semaphore>,
    dial_in: Option<DialIn>,
}

/// A host listener leading into the sandbox, added while it runs ([`Served::expose`]); it
/// stops accepting when dropped (connections already relayed go on until either end closes).
pub struct Exposed(tokio::task::AbortHandle);

impl Drop for Exposed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Served {
    /// Relays every connection `l` accepts to `to` inside the sandbox (a published server).
    /// The listener is closed when the returned value is dropped.
    pub fn expose(&self, l: std::net::TcpListener, to: SocketAddr) -> std::io::Result<Exposed> {
        let Some(dial) = self.dial_in.clone() else {
            return Err(std::io::Error::other("no way into the sandbox's namespace"));
        };
        l.set_nonblocking(true)?;
        let _guard = self.runtime.enter();
        let l = TcpListener::from_std(l)?;
        let task = self
            .runtime
            .spawn(accept_loop(l, self.slots.clone(), move |c| dial_into(c, Some(dial.clone()), to)));
        Ok(Exposed(task.abort_handle()))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts serving on a runtime of its own (two threads).
pub fn serve(cfg: Config, sockets: Sockets, dial_in: Option<DialIn>) -> Result<Served, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ocsb-inside")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the isolated network's runtime: {e}"))?;
    let resolver = rt.block_on(async { Resolver::from_system(Duration::from_secs(5)) })?;
    let st = Arc::new(State {
        filter: cfg.filter,
        policy: cfg.policy,
        resolver,
        log: Mutex::new(cfg.log),
        names: Mutex::default(),
        lookups: dns::lookups(),
    });
    crate::builtin::serve::raise_nofile();
    let soft =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |l| l.0);
    let cap = (soft.saturating_sub(SPARE_FDS) / 2).clamp(64, MAX_CONNECTIONS as u64) as usize;
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let tasks = rt.block_on(async {
        let mut tasks = Vec::new();
        let tcp = |l: std::net::TcpListener| {
            l.set_nonblocking(true)?;
            TcpListener::from_std(l)
        };
        for (port, l) in sockets.forward {
            let (l, to) = (tcp(l)?, SocketAddr::from(([127, 0, 0, 1], port)));
            tasks.push(tokio::spawn(accept_loop(l, slots.clone(), move |c| relay_to(c, to))));
        }
        for (port, l, lease) in sockets.lent {
            let (l, to) = (tcp(l)?, SocketAddr::from(([127, 0, 0, 1], port)));
            lease.set_nonblocking(true)?;
            let lease = tokio::net::UnixStream::from_std(lease)?;
            let slots = slots.clone();
            tasks.push(tokio::spawn(async move {
                let (mut lease, mut sink) = (lease, [0u8; 64]);
                while matches!(lease.read(&mut sink).await, Ok(n) if n > 0) {}
                accept_loop(l, slots, move |c| relay_to(c, to)).await;
            }));
        }
        for l in sockets.transparent {
            let (l, st) = (tcp(l)?, st.clone());
            tasks.push(tokio::spawn(accept_loop(l, slots.clone(), move |c| transparent(c, st.clone()))));
        }
        for u in sockets.dns {
            u.set_nonblocking(true)?;
            tasks.push(tokio::spawn(dns::serve(UdpSocket::from_std(u)?, st.clone())));
        }
        // Slots of their own: idle DNS connections must not take the relays' and the web front's.
        let dns_slots = Arc::new(tokio::sync::Semaphore::new(dns::TCP_CONNECTIONS));
        for l in sockets.dns_tcp {
            let (l, st) = (tcp(l)?, st.clone());
            tasks.push(tokio::spawn(accept_loop(l, dns_slots.clone(), move |c| {
                dns::serve_tcp(c, st.clone())
            })));
        }
        for (l, port) in sockets.expose {
            let (l, dial, to) = (tcp(l)?, dial_in.clone(), SocketAddr::from(([127, 0, 0, 1], port)));
            tasks.push(tokio::spawn(accept_loop(l, slots.clone(), move |c| dial_into(c, dial.clone(), to))));
        }
        Ok::<_, std::io::Error>(tasks)
    });
    let tasks = tasks.map_err(|e| format!("cannot serve the isolated network: {e}"))?;
    let runtime = rt.handle().clone();
    let thread = std::thread::Builder::new()
        .name("ocsb-inside".into())
        .spawn(move || {
            rt.block_on(async {
                let _ = stopped.await;
            });
            tasks.iter().for_each(|t| t.abort());
            rt.shutdown_timeout(Duration::from_millis(200));
        })
        .map_err(|e| format!("cannot start the isolated network's thread: {e}"))?;
    Ok(Served { stop: Some(stop), thread: Some(thread), runtime, slots, dial_in })
}

async fn accept_loop<F, Fut>(l: TcpListener, slots: Arc<tokio::sync::Semaphore>, handle: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        match l.accept().await {
            Ok((c, _)) => {
                let work = handle(c);
                tokio::spawn(async move {
                    work.await;
                    drop(slot);
                });
            }
            // Out of descriptors, or the like: wait instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Both directions, zero-copy (splice), each half-close passed on.
async fn splice_both(a: &TcpStream, b: &TcpStream) {
    let _ = crate::builtin::splice::relay(a, b, &|| {}).await;
}

async fn relay_to(client: TcpStream, to: SocketAddr) {
    if let Ok(up) = TcpStream::connect(to).await {
        splice_both(&client, &up).await;
    }
}

async fn dial_into(client: TcpStream, dial: Option<DialIn>, to: SocketAddr) {
    let Some(dial) = dial else { return };
    let Ok(Ok(std)) = tokio::task::spawn_blocking(move || dial(to)).await else { return };
    if std.set_nonblocking(true).is_ok()
        && let Ok(inside) = TcpStream::from_std(std)
    {
        splice_both(&client, &inside).await;
    }
}

/// A redirected connection: its name, the filter's verdict through a CONNECT, then the bytes.
async fn transparent(mut client: TcpStream, st: Arc<State>) {
    let Some(orig) = original_destination(&client) else { return };
    let mut first = Vec::with_capacity(2048);
    let wait = if matches!(orig.port(), 80 | 443) { FIRST_BYTES } else { Duration::ZERO };
    let _ = tokio::time::timeout(wait, async {
        let mut buf = [0u8; 4096];
        while !peek::complete(&first) {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => first.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let by_address = match orig {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    };
    // A `connect` rule for the very address dialled wins over the name the client sent
    // (kubectl with `tls-server-name` dials 10.0.0.5:6443 and names another host).
    let address_rule = Target::from_connect(&by_address)
        .is_ok_and(|t| matches!(st.policy.evaluate(&t), Step::Decided(d) if d.rule == RuleKind::Connect));
    let name = peek::host_name(&first).or_else(|| st.name_of(orig.ip())).filter(|_| !address_rule);
    let authority = match name {
        Some(n) => format!("{n}:{}", orig.port()),
        None => by_address,
    };
    match connect_through_filter(st.filter, &authority).await {
        Some(mut up) => {
            if up.write_all(&first).await.is_ok() {
                splice_both(&client, &up).await;
            }
        }
        // Refused (the filter logged why) or unreachable: reset, so the client fails at once.
        None => {
            let _ = client.set_zero_linger();
        }
    }
}

/// `CONNECT authority` through the filter; the stream once it answered 200.
async fn connect_through_filter(filter: SocketAddr, authority: &str) -> Option<TcpStream> {
    let mut up = TcpStream::connect(filter).await.ok()?;
    let req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    up.write_all(req.as_bytes()).await.ok()?;
    let mut head = Vec::with_capacity(256);
    let read_head = async {
        let mut b = [0u8; 1];
        // Byte by byte up to the blank line: nothing after it may be taken from the tunnel.
        while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
            if up.read(&mut b).await.ok()? == 0 {
                return None;
            }
            head.push(b[0]);
        }
        Some(())
    };
    tokio::time::timeout(FILTER_ANSWER, read_head).await.ok()??;
    let status = head.split(|&b| b == b' ').nth(1)?;
    (status == b"200").then_some(up)
}

/// Where the client meant to connect (`SO_ORIGINAL_DST`), before the namespace's table
/// redirected it; `None` for a connection made to the listener itself.
fn original_destination(s: &TcpStream) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    let addr = match s.local_addr().ok()? {
        SocketAddr::V4(_) => {
            let a = getsockopt(s, sockopt::OriginalDst).ok()?;
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            SocketAddr::from((ip, u16::from_be(a.sin_port)))
        }
        SocketAddr::V6(_) => {
            let a = getsockopt(s, sockopt::Ip6tOriginalDst).ok()?;
            SocketAddr::from((std::net::Ipv6Addr::from(a.sin6_addr.s6_addr), u16::from_be(a.sin6_port)))
        }
    };
    (addr.port() != s.local_addr().ok()?.port() || !addr.ip().is_loopback()).then_some(addr)
}
