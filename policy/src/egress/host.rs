//! Host values of `allow`, `block` and `connect`: names, `.domain`s, IP addresses and networks.
//!
//! Values are normalised the way squid normalises the request host (lowercase, no trailing dot)
//! so that a rule written as `Example.COM.` still matches. Anything squid would read differently
//! from what the user meant is refused with a hint instead of being rendered.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::private::canonical;
use super::target::{Host, inet_aton};

/// An IP network; a single address has the full prefix (/32, /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    /// The network of one address.
    pub fn host(addr: IpAddr) -> IpNet {
        IpNet { addr, prefix: Self::max_prefix(addr) }
    }

    pub fn max_prefix(addr: IpAddr) -> u8 {
        if addr.is_ipv4() { 32 } else { 128 }
    }

    fn bits(addr: IpAddr) -> u128 {
        match addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    fn mask(&self) -> u128 {
        let max = Self::max_prefix(self.addr) as u32;
        if self.prefix == 0 {
            0
        } else {
            let ones = (!0u128) << (128 - self.prefix as u32);
            ones >> (128 - max)
        }
    }

    /// True if `ip` (after mapping `::ffff:a.b.c.d`) lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4()
            && Self::bits(ip) & self.mask() == Self::bits(self.addr) & self.mask()
    }

    fn contains_v6_bits(&self, bits: u128) -> bool {
        self.addr.is_ipv6() && bits & self.mask() == Self::bits(self.addr) & self.mask()
    }

    /// True if every address of `other` is in `self`.
    pub fn covers(&self, other: &IpNet) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }

    /// Parses `a.b.c.d[/n]` or `ipv6[/n]` strictly (no legacy IPv4 forms); host bits must be zero.
    pub fn parse(s: &str) -> Result<IpNet, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let parsed: IpAddr = addr.parse().map_err(|_| format!("`{addr}` is not an IP address"))?;
        let max = Self::max_prefix(parsed);
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') && !(p.len() > 1 && p.starts_with('0')) => n,
                _ => return Err(format!("`/{p}` is not a prefix length (0 to {max})")),
            },
        };
        // squid stores IPv4 as `::ffff:a.b.c.d`: a mapped network is an IPv4 network, and an IPv6
        // network that contains the mapped range would also match IPv4 addresses in squid.
        let addr = canonical(parsed);
        let prefix = if addr.is_ipv4() && parsed.is_ipv6() {
            if prefix < 96 {
                return Err(format!(
                    "`{s}` contains the IPv4-mapped range ::ffff:0:0/96; list IPv4 networks separately"
                ));
            }
            prefix - 96
        } else {
            prefix
        };
        if addr.is_ipv6() {
            let mapped = IpNet { addr, prefix };
            if prefix <= 96 && mapped.contains_v6_bits(0xffff_0000_0000) {
                return Err(format!(
                    "`{s}` contains the IPv4-mapped range ::ffff:0:0/96 (squid would match IPv4 addresses with it); list IPv4 networks separately"
                ));
            }
        }
        let net = IpNet { addr, prefix };
        if Self::bits(addr) & !net.mask() & (u128::MAX >> (128 - max as u32)) != 0 {
            let base = Self::from_bits(Self::bits(addr) & net.mask(), addr.is_ipv4());
            return Err(format!("`{s}` has host bits set; the network is {}", IpNet { addr: base, prefix }));
        }
        Ok(net)
    }

    fn from_bits(bits: u128, v4: bool) -> IpAddr {
        if v4 { IpAddr::V4(Ipv4Addr::from(bits as u32)) } else { IpAddr::V6(Ipv6Addr::from(bits)) }
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One host value of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostPattern {
    /// `jira.example.com`: exactly this name.
    Exact(String),
    /// `.example.com` (stored without the dot): the domain and all its subdomains.
    Domain(String),
    /// An IP address or network. It matches IP-literal requests only (squid `dst -n`): a name that
    /// resolves into it does not match, so an allowed address cannot be reached by a rebinding name.
    Net(IpNet),
}

impl HostPattern {
    /// True if a request for `host` matches. Names match names and networks match IP literals.
    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(n), Host::Name(h)) => n == h,
            (HostPattern::Domain(d), Host::Name(h)) => {
                h == d
                    || (h.len() > d.len()
                        && h.ends_with(d.as_str())
                        && h.as_bytes()[h.len() - d.len() - 1] == b'.')
            }
            (HostPattern::Net(n), Host::Ip(ip)) => n.contains(*ip),
            _ => false,
        }
    }

    /// True if every host matched by `other` is matched by `self`.
    pub fn covers(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Net(a), HostPattern::Net(b)) => a.covers(b),
            (HostPattern::Domain(d), HostPattern::Exact(n) | HostPattern::Domain(n)) => {
                HostPattern::Domain(d.clone()).matches(&Host::Name(n.clone()))
            }
            (a, b) => a == b,
        }
    }

    pub fn is_net(&self) -> bool {
        matches!(self, HostPattern::Net(_))
    }

    /// Parses one `allow`/`block` value. `Err((message, hint))`.
    pub fn parse(raw: &str) -> Result<HostPattern, (String, String)> {
        parse_value(raw, true)
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Domain(d) => write!(f, ".{d}"),
            HostPattern::Net(n) if n.prefix == IpNet::max_prefix(n.addr) => write!(f, "{}", n.addr),
            HostPattern::Net(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for HostPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn err(message: impl Into<String>, hint: impl Into<String>) -> (String, String) {
    (message.into(), hint.into())
}

/// Parses a host value; `allow_net` = CIDR networks are accepted (not for `connect`).
pub(crate) fn parse_value(raw: &str, allow_net: bool) -> Result<HostPattern, (String, String)> {
    if raw.contains("://") {
        let host = raw.split("://").nth(1).unwrap_or("").split(['/', '?', '#']).next().unwrap_or("");
        return Err(err(
            format!("`{raw}` is a URL, not a host"),
            format!("write only the host name, e.g. `{host}`; a rule matches every path on the host"),
        ));
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return Err(err(
                format!("`{raw}`: unbalanced `[`"),
                "write IPv6 addresses as `2001:db8::1` or `[2001:db8::1]`",
            ));
        };
        return match inner.parse::<Ipv6Addr>() {
            Ok(a) => Ok(HostPattern::Net(IpNet {
                addr: canonical(IpAddr::V6(a)),
                prefix: IpNet::max_prefix(canonical(IpAddr::V6(a))),
            })),
            Err(_) => Err(err(format!("`{raw}` is not an IPv6 address"), "write e.g. `[2001:db8::1]`")),
        };
    }
    if raw.contains('/') {
        if !allow_net {
            return Err(err(
                format!("`{raw}`: a network is not allowed here"),
                "`connect` takes one host or address and a port, e.g. `connect 10.0.0.5:6443`",
            ));
        }
        return IpNet::parse(raw).map(HostPattern::Net).map_err(|m| {
            err(m, "write a network as `10.0.0.0/8` or `fd00::/8` (address, slash, prefix length)")
        });
    }
    if raw.contains(':') {
        if let Ok(a) = raw.parse::<Ipv6Addr>() {
            let addr = canonical(IpAddr::V6(a));
            return Ok(HostPattern::Net(IpNet { addr, prefix: IpNet::max_prefix(addr) }));
        }
        let (h, p) = raw.rsplit_once(':').unwrap_or((raw, ""));
        if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !h.contains(':') {
            return Err(err(
                format!("`{raw}`: a port is not allowed here"),
                format!(
                    "allow and block apply to ports 80 and 443 only; to open another port write `connect {raw}`"
                ),
            ));
        }
        return Err(err(
            format!("`{raw}` is neither a host name nor an IP address"),
            "host names contain only letters, digits, `-`, `_` and dots",
        ));
    }
    if let Ok(a) = raw.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Net(IpNet { addr: IpAddr::V4(a), prefix: 32 }));
    }
    parse_name(raw)
}

fn parse_name(raw: &str) -> Result<HostPattern, (String, String)> {
    let lower = raw.to_ascii_lowercase();
    if lower.starts_with("*.") {
        return Err(err(
            format!("`{raw}`: wildcards are not supported"),
            format!("write `{}` for the domain and all its subdomains", &lower[1..]),
        ));
    }
    let (domain, rest) = match lower.strip_prefix('.') {
        Some(r) => (true, r),
        None => (false, lower.as_str()),
    };
    let name = rest.strip_suffix('.').unwrap_or(rest);
    if name.is_empty() {
        return Err(err(format!("`{raw}` is not a host name"), "write e.g. `example.com` or `.example.com`"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return Err(err(
            format!("`{raw}`: `{c}` cannot appear in a host name"),
            if c == '*' {
                "wildcards are not supported; `.example.com` matches the domain and all its subdomains"
                    .to_string()
            } else {
                "host names contain only letters, digits, `-`, `_` and dots; use allow-regex or block-regex for patterns"
                    .to_string()
            },
        ));
    }
    if name.len() > 253 {
        return Err(err(
            format!("`{raw}` is longer than 253 characters"),
            "a DNS name has at most 253 characters",
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(err(format!("`{raw}` has an empty label (`..`)"), "remove the extra dot"));
        }
        if label.len() > 63 {
            return Err(err(
                format!("`{raw}`: label `{label}` is longer than 63 characters"),
                "a DNS label has at most 63 characters",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(err(
                format!("`{raw}`: label `{label}` starts or ends with `-`"),
                "DNS labels cannot start or end with a hyphen",
            ));
        }
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.bytes().all(|b| b.is_ascii_digit()) || inet_aton(name).is_some() {
        let hint = match inet_aton(name) {
            Some(a) if !domain => format!("squid reads this as the address {a}; write `{a}`"),
            _ => "write an IPv4 address as four decimal numbers (`10.0.0.5`) or a network as `10.0.0.0/8`"
                .to_string(),
        };
        return Err(err(format!("`{raw}` is not a valid host name or IPv4 address"), hint));
    }
    Ok(if domain { HostPattern::Domain(name.to_string()) } else { HostPattern::Exact(name.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        HostPattern::parse(s).map(|h| h.to_string()).unwrap_or_else(|(m, _)| format!("ERR {m}"))
    }

    #[test]
    fn egress_host_values_normalise() {
        assert_eq!(p("Example.COM."), "example.com");
        assert_eq!(p(".Example.com."), ".example.com");
        assert_eq!(p("wiki"), "wiki");
        assert_eq!(p("10.0.0.5"), "10.0.0.5");
        assert_eq!(p("10.0.0.0/8"), "10.0.0.0/8");
        assert_eq!(p("[::1]"), "::1");
        assert_eq!(p("FE80::/10"), "fe80::/10");
        assert_eq!(p("::ffff:10.0.0.5"), "10.0.0.5");
        assert_eq!(p("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        assert!(p("::/0").contains("IPv4-mapped"), "{}", p("::/0"));
        assert!(p("::ffff:0:0/95").contains("IPv4-mapped"));
        assert_eq!(p("0.0.0.0/0"), "0.0.0.0/0");
        assert_eq!(p("2001:db8::/32"), "2001:db8::/32");
        assert!(p("10.0.0.5/8").contains("host bits"), "{}", p("10.0.0.5/8"));
        assert!(p("10.0.0.0/33").starts_with("ERR"));
        assert!(p("a..b").starts_with("ERR"));
        assert!(p("*.example.com").starts_with("ERR"));
        assert!(p("https://x.com/").contains("URL"));
        assert!(p("x.com:8080").contains("port"));
        assert!(p("2130706433").starts_with("ERR"));
        assert!(p("127.1").starts_with("ERR"));
        assert!(p("-a.com").starts_with("ERR"));
        assert!(p(".").starts_with("ERR"));
    }

    #[test]
    fn egress_host_cover() {
        let d = HostPattern::parse(".example.com").unwrap();
        assert!(d.covers(&HostPattern::parse("example.com").unwrap()));
        assert!(d.covers(&HostPattern::parse("a.b.example.com").unwrap()));
        assert!(!d.covers(&HostPattern::parse("badexample.com").unwrap()));
        let n = HostPattern::parse("10.0.0.0/8").unwrap();
        assert!(n.covers(&HostPattern::parse("10.2.0.0/16").unwrap()));
        assert!(!n.covers(&HostPattern::parse("11.0.0.0/16").unwrap()));
        assert!(!n.covers(&HostPattern::parse("0.0.0.0/0").unwrap()));
    }
}
