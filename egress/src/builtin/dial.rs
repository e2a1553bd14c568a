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

/// Resolve `host` once, with a deadline. A timeout or a failure gives an empty list: the
/// decision then falls through to "default" like squid, and there is nothing to dial.
pub async fn resolve(host: &str, timeout: Duration) -> Vec<IpAddr> {
    let lookup = tokio::net::lookup_host((host, 0u16));
    match tokio::time::timeout(timeout, lookup).await {
        Ok(Ok(addrs)) => {
            let mut out: Vec<IpAddr> = Vec::new();
            for a in addrs {
                let ip = canonical(a.ip());
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
            out
        }
        _ => Vec::new(),
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
