//! The destination of a proxy request, parsed exactly the way squid 5 parses it.
//!
//! Why this matters: a filter that reads the host differently from the component that connects
//! can be bypassed. Squid lowercases the host, strips trailing dots and userinfo, ignores the
//! `Host` header for absolute URIs, and accepts the legacy IPv4 spellings of `inet_aton`
//! (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`). `std::net::Ipv4Addr` rejects those, so a
//! naive parser would treat them as names. This module mirrors squid (`AnyP::Uri::parse`,
//! `Ip::Address::fromHost`, glibc `inet_aton`/`inet_ntop`), and refuses (instead of guessing)
//! hosts with characters no DNS name has.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::private::canonical;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum Method {
    Connect,
    Other(String),
}

impl Method {
    pub fn parse(s: &str) -> Method {
        if s == "CONNECT" { Method::Connect } else { Method::Other(s.to_string()) }
    }
}

/// The request host as squid sees it after parsing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A name, lowercase, without trailing dots. The unspecified addresses (`0.0.0.0`, `0`,
    /// `[::]`) are names too: squid keeps them as text and resolves them later (to a private address).
    Name(String),
    /// An IP literal, with `::ffff:a.b.c.d` mapped to IPv4.
    Ip(IpAddr),
}

impl Host {
    /// The string squid's `dstdomain`/`dstdom_regex` ACLs see: the name, a dotted quad, or
    /// `[ipv6]` as printed by glibc's `inet_ntop`.
    pub fn acl_string(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(IpAddr::V4(a)) => a.to_string(),
            Host::Ip(IpAddr::V6(a)) => format!("[{}]", ntop6(a)),
        }
    }

    /// The addresses of a name that is itself numeric (only the unspecified address reaches
    /// here): squid's ipcache answers those without DNS.
    pub(crate) fn numeric_name(&self) -> Option<IpAddr> {
        match self {
            Host::Name(n) => numeric_host(n),
            Host::Ip(_) => None,
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.acl_string())
    }
}

impl Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Target {
    pub method: Method,
    pub host: Host,
    pub port: u16,
}

/// A request target that squid would reject, or that this parser refuses because it contains
/// characters no host name has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTarget {
    pub input: String,
    pub reason: String,
}

impl fmt::Display for BadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad request target `{}`: {}", self.input, self.reason)
    }
}

impl std::error::Error for BadTarget {}

fn bad(input: &str, reason: impl Into<String>) -> BadTarget {
    BadTarget { input: input.to_string(), reason: reason.into() }
}

impl Target {
    /// From the request line of a forward proxy: `CONNECT authority` or `METHOD absolute-URI`.
    pub fn from_request_line(method: &str, target: &str) -> Result<Target, BadTarget> {
        match Method::parse(method) {
            Method::Connect => Target::from_connect(target),
            Method::Other(_) => Target::from_absolute_uri(method, target),
        }
    }

    /// What a client configured with `http_proxy`/`https_proxy` (curl, git, npm, pip…) sends
    /// for `url`: `https://` becomes a CONNECT to the URL's host and port (443 by default),
    /// `http://` and `ftp://` an absolute-form GET. *Why one function*: `egress explain`,
    /// `egress verify` and the tests must judge the request the proxy will actually see; a GET
    /// for an `https://` URL would be decided by other rules (`connect` never applies to it).
    pub fn for_client_url(url: &str) -> Result<Target, BadTarget> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if scheme.as_deref() != Some("https") {
            return Target::from_absolute_uri("GET", url);
        }
        let t = Target::from_absolute_uri("GET", url)?;
        Ok(Target { method: Method::Connect, ..t })
    }

    /// A CONNECT authority: `host:port`, `[ipv6]:port`; no port means 443 (as squid assumes).
    pub fn from_connect(authority: &str) -> Result<Target, BadTarget> {
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad(authority, "missing `]`"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad(authority, "garbage after `]`"))?),
            };
            (h, port)
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => 443,
            Some(p) => parse_port(authority, p)?,
        };
        let host = parse_host(authority, host, authority.starts_with('['))?;
        Ok(Target { method: Method::Connect, host, port })
    }

    /// An absolute URI (`http://`, `https://` or `ftp://`; scheme case-insensitive). Userinfo is
    /// dropped, the default port comes from the scheme, and the `Host` header plays no part.
    pub fn from_absolute_uri(method: &str, uri: &str) -> Result<Target, BadTarget> {
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| bad(uri, "not an absolute URI (a forward proxy needs `http://host/...`)"))?;
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            "ftp" => 21,
            _ => return Err(bad(uri, format!("unsupported scheme `{scheme}`"))),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(bad(uri, "whitespace in the authority"));
        }
        // squid: the last `@` ends the userinfo.
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port, bracketed) = if let Some(r) = hostport.strip_prefix('[') {
            let (h, after) = r.split_once(']').ok_or_else(|| bad(uri, "missing `]`"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad(uri, "garbage after `]`"))?),
            };
            (h, port, true)
        } else if hostport.matches(':').count() > 1 {
            // squid accepts an unbracketed IPv6 address (and then there is no port).
            (hostport, None, false)
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p), false),
                None => (hostport, None, false),
            }
        };
        let port = match port {
            None => default_port,
            Some(p) => parse_port(uri, p)?,
        };
        if host.is_empty() {
            return Err(bad(uri, "missing host"));
        }
        let host = parse_host(uri, host, bracketed)?;
        Ok(Target { method: Method::parse(method), host, port })
    }
}

fn parse_port(input: &str, p: &str) -> Result<u16, BadTarget> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(input, format!("bad port `{p}`")));
    }
    match p.parse::<u32>() {
        Ok(n @ 1..=65535) => Ok(n as u16),
        _ => Err(bad(input, format!("port `{p}` is not in 1-65535"))),
    }
}

/// squid: lowercase, strip all trailing dots, refuse `..` and a leading dot, then try the host as
/// a numeric address (`getaddrinfo(AI_NUMERICHOST)`); the unspecified address stays a name.
fn parse_host(input: &str, raw: &str, bracketed: bool) -> Result<Host, BadTarget> {
    let mut h = raw.to_ascii_lowercase();
    if bracketed {
        let a: Ipv6Addr = h.parse().map_err(|_| bad(input, format!("`[{raw}]` is not an IPv6 address")))?;
        return Ok(ip_or_unspecified(IpAddr::V6(a), h));
    }
    while h.ends_with('.') {
        h.pop();
    }
    if h.is_empty() {
        return Err(bad(input, "empty host"));
    }
    if h.contains("..") || h.starts_with('.') {
        return Err(bad(input, "empty label in host"));
    }
    if let Some(a) = numeric_host(&h) {
        return Ok(ip_or_unspecified(a, h));
    }
    if let Some(c) = h.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return Err(bad(input, format!("`{c}` cannot appear in a host name")));
    }
    Ok(Host::Name(h))
}

fn ip_or_unspecified(a: IpAddr, text: String) -> Host {
    let a = canonical(a);
    if a.is_unspecified() { Host::Name(text) } else { Host::Ip(a) }
}

/// What `getaddrinfo(host, AI_NUMERICHOST)` accepts: the `inet_aton` forms and IPv6.
fn numeric_host(h: &str) -> Option<IpAddr> {
    if let Some(a) = inet_aton(h) {
        return Some(IpAddr::V4(a));
    }
    if h.contains(':') && !h.contains('%') {
        return h.parse::<Ipv6Addr>().ok().map(|a| canonical(IpAddr::V6(a)));
    }
    None
}

/// glibc's `inet_aton` (as used by `getaddrinfo` with `AI_NUMERICHOST`, no trailing garbage):
/// one to four parts separated by dots, each decimal, octal (`0` prefix) or hex (`0x` prefix);
/// all parts but the last are bytes, the last fills the remaining bytes.
pub fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let mut parts: Vec<u32> = Vec::with_capacity(4);
    let mut rest = s;
    loop {
        let (val, tail) = strtoul(rest)?;
        match tail.strip_prefix('.') {
            Some(t) => {
                if parts.len() >= 3 || val > 0xff {
                    return None;
                }
                parts.push(val);
                rest = t;
            }
            None if tail.is_empty() => {
                let max: u32 = [0xffff_ffff, 0xff_ffff, 0xffff, 0xff][parts.len()];
                if val > max {
                    return None;
                }
                let mut word = val;
                for (i, p) in parts.iter().enumerate() {
                    word |= p << (24 - 8 * i);
                }
                return Some(Ipv4Addr::from(word));
            }
            None => return None,
        }
    }
}

/// `strtoul(s, &end, 0)` for a string that must start with a digit; `None` on overflow past
/// 32 bits (glibc refuses those) or when no digit follows.
fn strtoul(s: &str) -> Option<(u32, &str)> {
    let b = s.as_bytes();
    if b.first().is_none_or(|c| !c.is_ascii_digit()) {
        return None;
    }
    let (radix, start) = if b[0] == b'0'
        && matches!(b.get(1), Some(b'x' | b'X'))
        && b.get(2).is_some_and(|c| c.is_ascii_hexdigit())
    {
        (16, 2)
    } else if b[0] == b'0' {
        (8, 0)
    } else {
        (10, 0)
    };
    let mut end = start;
    let mut val: u64 = 0;
    while let Some(&c) = b.get(end) {
        let Some(d) = (c as char).to_digit(radix) else { break };
        val = val * radix as u64 + d as u64;
        if val > u32::MAX as u64 {
            return None;
        }
        end += 1;
    }
    Some((val as u32, &s[end..]))
}

/// glibc `inet_ntop(AF_INET6)`: the longest run (≥ 2) of zero groups becomes `::` (the first one
/// on a tie), hex in lowercase, and `::a.b.c.d` when the first six groups are zero (and the 7th
/// is not) or for `::ffff:a.b.c.d`.
pub(crate) fn ntop6(a: &Ipv6Addr) -> String {
    let w = a.segments();
    let (mut best, mut best_len, mut cur, mut cur_len) = (None, 0, None, 0);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            if cur.is_none() {
                cur = Some(i);
                cur_len = 0;
            }
            cur_len += 1;
            if cur_len > best_len {
                best = cur;
                best_len = cur_len;
            }
        } else {
            cur = None;
        }
    }
    if best_len < 2 {
        best = None;
    }
    let mut out = String::new();
    let mut i = 0;
    while i < 8 {
        if Some(i) == best {
            out.push(':');
            i += best_len;
            if i == 8 {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 && best == Some(0) && (best_len == 6 || (best_len == 5 && w[5] == 0xffff)) {
            let [.., a, b, c, d] = a.octets();
            out.push_str(&format!("{a}.{b}.{c}.{d}"));
            break;
        }
        out.push_str(&format!("{:x}", w[i]));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(t: &Result<Target, BadTarget>) -> String {
        match t {
            Ok(t) => format!(
                "{}{} {}",
                if t.method == Method::Connect { "C " } else { "" },
                match &t.host {
                    Host::Name(n) => format!("name:{n}"),
                    Host::Ip(ip) => format!("ip:{ip}"),
                },
                t.port
            ),
            Err(e) => format!("ERR {}", e.reason),
        }
    }

    #[test]
    fn egress_target_squid_table() {
        let cases = [
            ("GET", "http://www.example.com./", "name:www.example.com 80"),
            ("GET", "http://WWW.Example.COM./x", "name:www.example.com 80"),
            ("CONNECT", "www.example.com.:443", "C name:www.example.com 443"),
            ("GET", "http://intranet./", "name:intranet 80"),
            ("GET", "http://2130706433/", "ip:127.0.0.1 80"),
            ("GET", "http://0x7f000001/", "ip:127.0.0.1 80"),
            ("GET", "http://017700000001/", "ip:127.0.0.1 80"),
            ("GET", "http://127.1/", "ip:127.0.0.1 80"),
            ("GET", "http://0x7f.1/", "ip:127.0.0.1 80"),
            ("GET", "http://0x7f.0.0.1/", "ip:127.0.0.1 80"),
            ("GET", "http://0177.0.0.1/", "ip:127.0.0.1 80"),
            ("GET", "http://[::ffff:127.0.0.1]/", "ip:127.0.0.1 80"),
            ("GET", "http://[::ffff:7f00:2]/", "ip:127.0.0.2 80"),
            ("GET", "http://[fe80::1]/", "ip:fe80::1 80"),
            ("CONNECT", "[::1]:443", "C ip:::1 443"),
            ("CONNECT", "2130706433:443", "C ip:127.0.0.1 443"),
            ("CONNECT", "127.0.0.5.:6443", "C ip:127.0.0.5 6443"),
            ("CONNECT", "git.example.com.:2222", "C name:git.example.com 2222"),
            ("CONNECT", "example.com", "C name:example.com 443"),
            ("GET", "http://jira.example.com@www.example.com/", "name:www.example.com 80"),
            ("GET", "http://u:p@a@Host.Test:8080/", "name:host.test 8080"),
            ("GET", "ftp://pub.test.net/", "name:pub.test.net 21"),
            ("GET", "HTTPS://pub.test.net", "name:pub.test.net 443"),
            ("GET", "http://pub.test.net?x", "name:pub.test.net 80"),
            ("GET", "http://0.0.0.0/", "name:0.0.0.0 80"),
            ("GET", "http://0/", "name:0 80"),
            ("GET", "http://[::]/", "name::: 80"),
            ("GET", "http://::1/", "ip:::1 80"),
            ("GET", "http://[::1]:8080/", "ip:::1 8080"),
            ("GET", "http://127.0.0.1:0080/", "ip:127.0.0.1 80"),
            ("GET", "/plain", "ERR not an absolute URI (a forward proxy needs `http://host/...`)"),
            ("GET", "http:///x", "ERR missing host"),
            ("GET", "http://a..b/", "ERR empty label in host"),
            ("GET", "http://.a.b/", "ERR empty label in host"),
            ("GET", "http://a.b:0/", "ERR port `0` is not in 1-65535"),
            ("GET", "http://a.b:65536/", "ERR port `65536` is not in 1-65535"),
            ("GET", "http://a.b:/", "ERR bad port ``"),
            ("GET", "gopher://a.b/", "ERR unsupported scheme `gopher`"),
            ("GET", "http://ex%61mple.com/", "ERR `%` cannot appear in a host name"),
            ("CONNECT", "a.b:x", "ERR bad port `x`"),
            ("GET", "http://256.1.1.1/", "ERR `256.1.1.1`... "),
        ];
        for (m, t, want) in cases {
            let got = show(&Target::from_request_line(m, t));
            if want.ends_with("... ") {
                // 256.1.1.1 is not numeric; squid treats it as a name (DNS then fails).
                assert_eq!(got, "name:256.1.1.1 80");
                continue;
            }
            assert_eq!(got, want, "{m} {t}");
        }
    }

    #[test]
    fn egress_inet_aton() {
        for (s, want) in [
            ("1.2.3.4", Some("1.2.3.4")),
            ("2130706433", Some("127.0.0.1")),
            ("0x7f000001", Some("127.0.0.1")),
            ("0X7F000001", Some("127.0.0.1")),
            ("017700000001", Some("127.0.0.1")),
            ("127.1", Some("127.0.0.1")),
            ("127.0.1", Some("127.0.0.1")),
            ("1.65535", Some("1.0.255.255")),
            ("1.65536", Some("1.1.0.0")),
            ("1.16777216", None),
            ("1.2.65535", Some("1.2.255.255")),
            ("1.2.65536", None),
            ("4294967295", Some("255.255.255.255")),
            ("4294967296", None),
            ("08", None),
            ("0x", None),
            ("0xg", None),
            ("1.2.3.4.5", None),
            ("1.2.3.", None),
            ("256.1", None),
            ("", None),
            ("a", None),
            ("0", Some("0.0.0.0")),
            ("00", Some("0.0.0.0")),
        ] {
            assert_eq!(inet_aton(s).map(|a| a.to_string()).as_deref(), want, "{s}");
        }
    }

    #[test]
    fn egress_ntop6_like_glibc() {
        for (s, want) in [
            ("::1", "::1"),
            ("::", "::"),
            ("fe80::1", "fe80::1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("::102:304", "::1.2.3.4"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
        ] {
            assert_eq!(ntop6(&s.parse().unwrap()), want, "{s}");
        }
    }
}
