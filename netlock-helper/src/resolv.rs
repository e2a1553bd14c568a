//! `nameserver` lines of resolv.conf → the DNS servers a locked process may reach.

use std::fs::File;
use std::io::Read;
use std::net::IpAddr;

use anyhow::{Context, Result};

const MAX_LEN: u64 = 64 * 1024;
/// More servers than this is not a resolv.conf any resolver reads; cap so a garbage file cannot
/// grow the sets without bound.
pub const MAX_SERVERS: usize = 16;

/// Reads `path` (following symlinks, at most 64 KiB). A missing file means no servers: fail closed.
pub fn read(path: &str) -> Result<Vec<IpAddr>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(f) => f.take(MAX_LEN).read_to_end(&mut bytes).with_context(|| format!("cannot read {path}"))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).with_context(|| format!("cannot read {path}")),
    };
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// Only `nameserver <literal>` lines count; comments, `search`, `options` and garbage are ignored.
/// Loopback is dropped (always allowed anyway: that covers 127.0.0.53 and dnsmasq), and so are
/// unspecified, multicast and broadcast addresses, which are never a resolver.
pub fn parse(text: &str) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        // A zone (`fe80::1%eth0`) is cut off; no word, or not a literal, is no server.
        let literal = words.next().unwrap_or_default().split('%').next().unwrap_or_default();
        let Ok(addr) = literal.parse::<IpAddr>() else { continue };
        let addr = addr.to_canonical();
        let useless = addr.is_loopback()
            || addr.is_unspecified()
            || addr.is_multicast()
            || addr == IpAddr::from([255, 255, 255, 255]);
        if !useless && !out.contains(&addr) && out.len() < MAX_SERVERS {
            out.push(addr);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        parse(s).iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn table() {
        assert_eq!(p("nameserver 192.0.2.53\n"), ["192.0.2.53"]);
        assert_eq!(p("# c\n; c\nsearch x\noptions edns0\nnameserver 127.0.0.53\n"), [] as [&str; 0]);
        assert_eq!(p("nameserver fe80::1%eth0\r\nnameserver ::1\n"), ["fe80::1"]);
        assert_eq!(p("nameserver ::ffff:198.51.100.1\nnameserver 198.51.100.1\n"), ["198.51.100.1"]);
        assert_eq!(
            p("nameserver 0.0.0.0\nnameserver 224.0.0.1\nnameserver 255.255.255.255\n"),
            [] as [&str; 0]
        );
        assert_eq!(
            p("nameserver\nnameserver x\nnameserverx 1.2.3.4\n  nameserver   203.0.113.9  # c\n"),
            ["203.0.113.9"]
        );
        assert_eq!(p("nameserver 1.2.3.4\0\n"), [] as [&str; 0]);
        let many: String = (1..40).map(|i| format!("nameserver 192.0.2.{i}\n")).collect();
        assert_eq!(parse(&many).len(), MAX_SERVERS);
    }

    #[test]
    fn missing_file_is_empty() {
        assert!(read("/nonexistent/ocsb/resolv.conf").unwrap().is_empty());
    }
}
