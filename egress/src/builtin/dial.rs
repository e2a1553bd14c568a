//! Resolving and dialing: the only place the builtin proxy opens upstream sockets.
//!
//! *Why this module exists*: the decision is only as good as the address it was made about. The
//! name is resolved **once**; the decision function sees every address; the connector dials
//! exactly those addresses and re-checks the private set itself, so no code path can connect to
//! an address the policy did not see (a DNS-rebinding server gets no second lookup to answer
//! differently).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ocsb_policy::egress::PrivateSet;
use tokio::net::TcpStream;

use crate::nss::{Hosts, Order, Source, Status};

/// The proxy's DNS client: asynchronous, so a slow or silent name server holds no thread (with
/// `getaddrinfo` on tokio's blocking pool, hundreds of hanging lookups starved every other
/// request), with the answers cached for their TTL.
///
/// Names are looked up as the system looks them up ([`crate::nss`]): in the order of
/// `/etc/nsswitch.conf`'s `hosts:` line (`files dns` unless it says otherwise), a name the hosts
/// file lists answered from it alone, in both families, and never asked of a name server. The
/// name servers are asked the name as given, fully qualified (no search domains, as squid's
/// `dns_defnames off`), A and AAAA together.
pub struct Resolver {
    inner: hickory_resolver::TokioResolver,
    timeout: Duration,
    order: Order,
    /// Why `order` is `files dns` although `/etc/nsswitch.conf` has a `hosts:` line.
    order_note: Option<String>,
    hosts: HostsFile,
    /// Answers with at least one address, until the smallest TTL among them runs out. *Why our
    /// own*: hickory keeps an answer per query type, and a name without AAAA records (no SOA
    /// in the reply) sent an AAAA query with every request. A TTL of 0 is never kept, so a
    /// rebinding name is asked again each time, and the addresses kept are the ones checked and
    /// dialled.
    cache: std::sync::Mutex<std::collections::HashMap<String, (Vec<IpAddr>, std::time::Instant)>>,
}

const RESOLV_CONF: &str = "/etc/resolv.conf";
const NSSWITCH_CONF: &str = "/etc/nsswitch.conf";
const HOSTS: &str = "/etc/hosts";

/// The hosts file as last read, read again when it changes: VPN clients and developers edit it
/// while the filter runs. A `stat` per lookup is the whole cost of noticing.
struct HostsFile {
    path: std::path::PathBuf,
    read: std::sync::Mutex<(Option<Stamp>, Arc<Option<Hosts>>)>,
}

/// What tells one version of the file from the next: which file (a rename puts another in
/// place), its size and its time of change to the nanosecond.
type Stamp = (u64, u64, u64, i64, i64);

impl HostsFile {
    fn new(path: impl Into<std::path::PathBuf>) -> Self {
        let f = Self { path: path.into(), read: std::sync::Mutex::new((None, Arc::new(None))) };
        f.reread(&mut f.read.lock().unwrap_or_else(|p| p.into_inner()), f.stamp());
        f
    }

    fn stamp(&self) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.path).ok()?;
        Some((m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
    }

    /// Records the stamp before reading: a change made while reading is seen by the next
    /// lookup. `None` in the file's place: there is no hosts file.
    fn reread(&self, slot: &mut (Option<Stamp>, Arc<Option<Hosts>>), stamp: Option<Stamp>) {
        let text = stamp.and_then(|_| std::fs::read_to_string(&self.path).ok());
        *slot = (stamp, Arc::new(text.map(|t| Hosts::parse(&t))));
    }

    fn current(&self) -> Arc<Option<Hosts>> {
        let stamp = self.stamp();
        let mut slot = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if slot.0 != stamp {
            self.reread(&mut slot, stamp);
        }
        slot.1.clone()
    }
}

/// Whether glibc would use the local machine's name server: no file, or no `nameserver` line.
fn local_default_applies(resolv_conf: Option<&str>) -> bool {
    resolv_conf.is_none_or(|t| !t.lines().any(|l| l.split_whitespace().next() == Some("nameserver")))
}

/// Names kept at most; the cache is emptied when full (it refills from the name servers).
const CACHE_NAMES: usize = 4096;

impl Resolver {
    /// From the system configuration. *Why fail*: without name servers every request by name
    /// would fail later, one by one; the filter refuses to start instead and says why.
    pub fn from_system(timeout: Duration) -> Result<Self, String> {
        use hickory_resolver::config::{NameServerConfig, ResolverConfig};
        let b = match hickory_resolver::TokioResolver::builder_tokio() {
            Ok(b) => b,
            // glibc's rule, which every other program on the host follows: without a
            // `nameserver` line (or without the file) the name server is the local machine's.
            Err(_) if local_default_applies(std::fs::read_to_string(RESOLV_CONF).ok().as_deref()) => {
                let local = [IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)]
                    .map(NameServerConfig::udp_and_tcp)
                    .to_vec();
                hickory_resolver::TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(local),
                    hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
                )
            }
            Err(e) => return Err(format!("cannot read the DNS configuration ({RESOLV_CONF}): {e}")),
        };
        let (order, note) = Order::from_nsswitch(std::fs::read_to_string(NSSWITCH_CONF).ok().as_deref());
        Self::build(b, timeout, (order, note), HostsFile::new(HOSTS))
    }

    fn build(
        mut b: hickory_resolver::ResolverBuilder<hickory_resolver::net::runtime::TokioRuntimeProvider>,
        timeout: Duration,
        (order, order_note): (Order, Option<String>),
        hosts: HostsFile,
    ) -> Result<Self, String> {
        use hickory_resolver::config::{LookupIpStrategy, ResolveHosts};
        let o = b.options_mut();
        o.ndots = 0;
        o.timeout = timeout;
        o.attempts = 2;
        o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // The hosts file is this resolver's own step, in the system's order (`resolve`).
        o.use_hosts_file = ResolveHosts::Never;
        // Small: answers are kept by this resolver (below); hickory keeps only what it needs.
        o.cache_size = 256;
        // Pending lookups for one slow name must not make lookups for other names "busy".
        o.max_active_requests = 4096;
        let inner = b.build().map_err(|e| format!("cannot set up the DNS client: {e}"))?;
        Ok(Self { inner, timeout, order, order_note, hosts, cache: Default::default() })
    }

    /// Why the lookup order is `files dns` although `/etc/nsswitch.conf` has a `hosts:` line
    /// (for the filter's log).
    pub fn order_note(&self) -> Option<&str> {
        self.order_note.as_deref()
    }

    /// Resolve `host` once, with a deadline. A timeout or a failure gives an empty list: the
    /// decision then falls through to "default" like squid, and there is nothing to dial.
    pub async fn resolve(&self, host: &str) -> Vec<IpAddr> {
        for step in self.order.steps() {
            let (status, addrs) = match step.source {
                Source::Files => match &*self.hosts.current() {
                    None => (Status::Unavail, Vec::new()),
                    Some(h) => match h.lookup(host) {
                        Some(found) => (Status::Success, found.to_vec()),
                        None => (Status::NotFound, Vec::new()),
                    },
                },
                Source::Dns => self.ask_name_servers(host).await,
            };
            if step.stops_at(status) {
                return addrs;
            }
        }
        Vec::new()
    }

    /// The name servers' addresses for `host`: kept ones first, then one query per family.
    async fn ask_name_servers(&self, host: &str) -> (Status, Vec<IpAddr>) {
        let fqdn = format!("{}.", crate::nss::key(host));
        let now = std::time::Instant::now();
        if let Ok(c) = self.cache.lock()
            && let Some((addrs, until)) = c.get(&fqdn)
            && *until > now
        {
            return (Status::Success, addrs.clone());
        }
        match tokio::time::timeout(self.timeout, self.inner.lookup_ip(fqdn.as_str())).await {
            Ok(Ok(found)) => {
                let mut out: Vec<IpAddr> = Vec::new();
                for ip in found.iter().map(canonical) {
                    if !out.contains(&ip) {
                        out.push(ip);
                    }
                }
                let until = found.valid_until();
                if !out.is_empty()
                    && until > now + Duration::from_secs(1)
                    && let Ok(mut c) = self.cache.lock()
                {
                    if c.len() >= CACHE_NAMES {
                        c.clear();
                    }
                    c.insert(fqdn, (out.clone(), until));
                }
                (if out.is_empty() { Status::NotFound } else { Status::Success }, out)
            }
            Ok(Err(e)) if e.is_no_records_found() => (Status::NotFound, Vec::new()),
            _ => (Status::TryAgain, Vec::new()),
        }
    }
}

/// `::ffff:a.b.c.d` is IPv4; treat it as such everywhere so the private check cannot be
/// sidestepped by the mapped form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Why a dial did not produce a connection.
#[derive(Debug)]
pub enum DialError {
    /// The resolver gave no address (NXDOMAIN, timeout, no A/AAAA).
    NoAddress,
    /// The connector refused a private address that the decision did not explicitly allow.
    /// This is the defence-in-depth check; reaching it means a logic error upstream.
    PrivateRefused(IpAddr),
    /// Every address failed; the last error is kept.
    Failed(IpAddr, std::io::Error),
}

/// The connector's own check of the addresses it is about to use (dial or reuse): none may be in
/// `refuse` (the policy's private set; `None` when an explicit rule allowed private addresses).
pub fn check(addrs: &[IpAddr], refuse: Option<&PrivateSet>) -> Result<(), DialError> {
    if addrs.is_empty() {
        return Err(DialError::NoAddress);
    }
    if let Some(set) = refuse
        && let Some(ip) = addrs.iter().find(|ip| set.contains(**ip))
    {
        return Err(DialError::PrivateRefused(*ip));
    }
    Ok(())
}

/// Connect to the checked addresses in order. `refuse` is `None` only when an explicit `allow`
/// or `connect` rule decided (the seed's "allow wins" rule); otherwise a private address here is
/// refused even though the decision code should already have denied it.
pub async fn dial_checked(
    addrs: &[IpAddr],
    port: u16,
    refuse: Option<&PrivateSet>,
    connect_timeout: Duration,
) -> Result<(TcpStream, IpAddr), DialError> {
    check(addrs, refuse)?;
    let mut last = None;
    for ip in addrs {
        let sa = SocketAddr::new(*ip, port);
        match tokio::time::timeout(connect_timeout, TcpStream::connect(sa)).await {
            Ok(Ok(s)) => {
                // The kernel's own answer to "is this the host?": a connection to one of its own
                // addresses gets that address as its source. Refused unless a rule allowed
                // private addresses, which covers an address added since the last refresh.
                if refuse.is_some()
                    && s.local_addr().ok().map(|a| a.ip()) == s.peer_addr().ok().map(|a| a.ip())
                {
                    return Err(DialError::PrivateRefused(*ip));
                }
                let _ = s.set_nodelay(true);
                return Ok((s, *ip));
            }
            Ok(Err(e)) => last = Some((*ip, e)),
            Err(_) => {
                last = Some((*ip, std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))
            }
        }
    }
    #[allow(clippy::expect_used, reason = "the loop above ran at least once: addrs is not empty")]
    let (ip, e) = last.expect("addrs is not empty");
    Err(DialError::Failed(ip, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A resolver whose name server is a UDP socket on loopback that never answers (a laptop
    /// off the VPN), with the given hosts file and `nsswitch.conf`.
    fn silent_world(hosts: &std::path::Path, nsswitch: &str) -> (Resolver, std::net::UdpSocket) {
        use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut udp = ConnectionConfig::udp();
        udp.port = server.local_addr().unwrap().port();
        let b = hickory_resolver::TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(vec![NameServerConfig::new(
                IpAddr::from([127, 0, 0, 1]),
                true,
                vec![udp],
            )]),
            hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
        );
        let order = Order::from_nsswitch(Some(nsswitch));
        let r = Resolver::build(b, Duration::from_millis(400), order, HostsFile::new(hosts)).unwrap();
        (r, server)
    }

    /// The names the silent name server was asked, in order.
    fn asked(server: &std::net::UdpSocket) -> Vec<String> {
        let mut names = Vec::new();
        let mut buf = [0u8; 1500];
        while let Ok(n) = server.recv(&mut buf) {
            let (mut i, mut labels) = (12, Vec::new());
            while i < n && buf[i] != 0 {
                let len = buf[i] as usize;
                labels.push(String::from_utf8_lossy(&buf[i + 1..(i + 1 + len).min(n)]).into_owned());
                i += 1 + len;
            }
            names.push(labels.join("."));
        }
        names
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_name_in_the_hosts_file_is_answered_from_it_alone_and_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "192.0.2.7 v4.corp.test v4\n2001:db8::7 v6.corp.test\n").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (r, server) =
            rt.block_on(async { silent_world(&hosts, "hosts: files mdns4_minimal [NOTFOUND=return] dns\n") });
        let t = Instant::now();
        assert_eq!(rt.block_on(r.resolve("V4.Corp.Test.")), [ip("192.0.2.7")]);
        assert_eq!(rt.block_on(r.resolve("v4")), [ip("192.0.2.7")]);
        assert_eq!(rt.block_on(r.resolve("v6.corp.test")), [ip("2001:db8::7")]);
        assert!(t.elapsed() < Duration::from_millis(100), "{:?}", t.elapsed());
        assert_eq!(asked(&server), Vec::<String>::new());

        // Edited while running, as a VPN client does (same size, another address; then a
        // replaced file): the next lookup has the new address.
        std::fs::write(&hosts, "192.0.2.8 v4.corp.test v4\n2001:db8::7 v6.corp.test\n").unwrap();
        assert_eq!(rt.block_on(r.resolve("v4.corp.test")), [ip("192.0.2.8")]);
        let next = dir.path().join("hosts.new");
        std::fs::write(&next, "::ffff:198.51.100.9 v4.corp.test\n").unwrap();
        std::fs::rename(&next, &hosts).unwrap();
        assert_eq!(rt.block_on(r.resolve("v4.corp.test")), [ip("198.51.100.9")]);
        assert_eq!(asked(&server), Vec::<String>::new());

        // A name the file does not list is asked of the name server, which stays silent.
        assert_eq!(rt.block_on(r.resolve("v6.corp.test")), Vec::<IpAddr>::new());
        assert!(asked(&server).iter().all(|n| n == "v6.corp.test"));
        std::fs::remove_file(&hosts).unwrap();
        assert_eq!(rt.block_on(r.resolve("v4.corp.test")), Vec::<IpAddr>::new());
        assert!(asked(&server).contains(&"v4.corp.test".to_string()));
    }

    #[test]
    fn nsswitch_dns_first_asks_the_name_server_first() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "192.0.2.7 v4.corp.test\n").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (r, server) = rt.block_on(async { silent_world(&hosts, "hosts: dns files\n") });
        // The silent server is asked first; after its timeout the hosts file answers.
        assert_eq!(rt.block_on(r.resolve("v4.corp.test")), [ip("192.0.2.7")]);
        assert!(asked(&server).contains(&"v4.corp.test".to_string()));
        // `files [NOTFOUND=return] dns`: a name the file lacks is never asked.
        let (r, server) = rt.block_on(async { silent_world(&hosts, "hosts: files [NOTFOUND=return] dns\n") });
        assert_eq!(rt.block_on(r.resolve("elsewhere.test")), Vec::<IpAddr>::new());
        assert_eq!(asked(&server), Vec::<String>::new());
    }

    #[test]
    fn without_a_nameserver_line_the_local_server_is_used_as_glibc_does() {
        assert!(local_default_applies(None));
        assert!(local_default_applies(Some("# managed\nsearch example.org\noptions ndots:1\n")));
        assert!(!local_default_applies(Some("nameserver 192.0.2.53\n")));
        assert!(!local_default_applies(Some("  nameserver\t192.0.2.53\n")));
        assert!(local_default_applies(Some("#nameserver 192.0.2.53\n")));
    }
}
