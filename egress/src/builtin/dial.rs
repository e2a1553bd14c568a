//! Resolving and dialing: the only place the builtin proxy opens upstream sockets.
//!
//! *Why this module exists*: the decision is only as good as the address it was made about. The
//! name is resolved **once**; the decision function sees every address; the connector dials
//! exactly those addresses and re-checks the private set itself, so no code path can connect to
//! an address the policy did not see (a DNS-rebinding server gets no second lookup to answer
//! differently).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ocsb_policy::egress::PrivateSet;
use tokio::net::TcpStream;

/// The proxy's DNS client: asynchronous, so a slow or silent name server holds no thread (with
/// `getaddrinfo` on tokio's blocking pool, hundreds of hanging lookups starved every other
/// request), with the answers cached for their TTL.
///
/// Names are looked up as given, fully qualified (no search domains, as squid's
/// `dns_defnames off`), in `/etc/hosts` first and then from the name servers of
/// `/etc/resolv.conf`, A and AAAA together.
pub struct Resolver {
    inner: hickory_resolver::TokioResolver,
    timeout: Duration,
    /// Answers with at least one address, until the smallest TTL among them runs out. *Why our
    /// own*: hickory keeps an answer per query type, and a name without AAAA records (no SOA
    /// in the reply) sent an AAAA query with every request. A TTL of 0 is never kept, so a
    /// rebinding name is asked again each time, and the addresses kept are the ones checked and
    /// dialled.
    cache: std::sync::Mutex<std::collections::HashMap<String, (Vec<IpAddr>, std::time::Instant)>>,
}

const RESOLV_CONF: &str = "/etc/resolv.conf";

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
        use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
        let mut b = match hickory_resolver::TokioResolver::builder_tokio() {
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
        let o = b.options_mut();
        o.ndots = 0;
        o.timeout = timeout;
        o.attempts = 2;
        o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // Small: answers are kept by this resolver (below); hickory keeps only what it needs.
        o.cache_size = 256;
        // Pending lookups for one slow name must not make lookups for other names "busy".
        o.max_active_requests = 4096;
        let inner = b.build().map_err(|e| format!("cannot set up the DNS client: {e}"))?;
        Ok(Self { inner, timeout, cache: Default::default() })
    }

    /// Resolve `host` once, with a deadline. A timeout or a failure gives an empty list: the
    /// decision then falls through to "default" like squid, and there is nothing to dial.
    pub async fn resolve(&self, host: &str) -> Vec<IpAddr> {
        let fqdn = if host.ends_with('.') { host.to_string() } else { format!("{host}.") };
        let now = std::time::Instant::now();
        if let Ok(c) = self.cache.lock()
            && let Some((addrs, until)) = c.get(&fqdn)
            && *until > now
        {
            return addrs.clone();
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
                out
            }
            _ => Vec::new(),
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

    #[test]
    fn without_a_nameserver_line_the_local_server_is_used_as_glibc_does() {
        assert!(local_default_applies(None));
        assert!(local_default_applies(Some("# managed\nsearch example.org\noptions ndots:1\n")));
        assert!(!local_default_applies(Some("nameserver 192.0.2.53\n")));
        assert!(!local_default_applies(Some("  nameserver\t192.0.2.53\n")));
        assert!(local_default_applies(Some("#nameserver 192.0.2.53\n")));
    }
}
