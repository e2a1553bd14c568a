//! The private address set: destinations that are denied unless a rule allows them.
//!
//! A sandboxed agent must not reach the host's own services, the LAN or the cloud metadata
//! endpoint by default. `0.0.0.0/8` and `::/128` are in the set because Linux connects
//! `0.0.0.0` to the local host. IPv4-mapped IPv6 addresses are mapped first, as squid does.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::host::IpNet;

/// The private networks, in the order squid's `private_dst` ACL lists them.
pub const PRIVATE_NETWORKS: [&str; 11] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::/128",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

fn nets() -> [IpNet; 11] {
    let v4 = |a, b, c, d, p| IpNet { addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix: p };
    let v6 = |s: u16, p| IpNet { addr: IpAddr::V6(Ipv6Addr::new(s, 0, 0, 0, 0, 0, 0, 0)), prefix: p };
    [
        v4(0, 0, 0, 0, 8),
        v4(10, 0, 0, 0, 8),
        v4(100, 64, 0, 0, 10),
        v4(127, 0, 0, 0, 8),
        v4(169, 254, 0, 0, 16),
        v4(172, 16, 0, 0, 12),
        v4(192, 168, 0, 0, 16),
        v6(0, 128),
        IpNet { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix: 128 },
        v6(0xfc00, 7),
        v6(0xfe80, 10),
    ]
}

/// Maps `::ffff:a.b.c.d` to `a.b.c.d`, as squid does before matching any address.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// True if `ip` is in the private set ([`PRIVATE_NETWORKS`]).
pub fn is_private(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    nets().iter().any(|n| n.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_private_set() {
        for (s, want) in [
            ("0.0.0.0", true),
            ("0.255.1.1", true),
            ("10.1.2.3", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("127.0.0.2", true),
            ("169.254.169.254", true),
            ("172.16.0.1", true),
            ("172.31.255.255", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("198.51.100.7", false),
            ("8.8.8.8", false),
            ("::", true),
            ("::1", true),
            ("::2", false),
            ("fc00::1", true),
            ("fdff::1", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("fec0::1", false),
            ("2001:db8::1", false),
            ("::ffff:127.0.0.1", true),
            ("::ffff:198.51.100.7", false),
        ] {
            assert_eq!(is_private(s.parse().unwrap()), want, "{s}");
        }
        let rendered: Vec<String> = nets().iter().map(|n| n.to_string()).collect();
        assert_eq!(rendered, PRIVATE_NETWORKS);
    }
}
