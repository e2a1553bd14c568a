//! The private address set: destinations that are denied unless a rule allows them.
//!
//! A sandboxed agent must not reach the host's own services, the LAN or the cloud metadata
//! endpoint by default. The set is one list of networks that both backends use: the decision
//! function tests membership, and squid's `private_dst` ACL is rendered from the same list.
//!
//! * `0.0.0.0/8` and `::/128` are in it because Linux connects `0.0.0.0` to the local host.
//! * IPv4-mapped addresses (`::ffff:a.b.c.d`) are mapped before any test, as squid does.
//! * Every IPv6 form that **embeds** an IPv4 address is judged by that address: the
//!   IPv4-compatible form `::a.b.c.d`, NAT64 (`64:ff9b::/96`, which a NAT64 gateway turns back
//!   into the IPv4 address) and 6to4 (`2002:aabb:ccdd::/48`). Each private IPv4 network appears
//!   once more in each of these forms, so `64:ff9b::a9fe:a9fe` is the metadata endpoint.
//! * Ranges whose embedded address cannot be written as a prefix are private whole: Teredo
//!   (`2001::/32`, the client address is stored inverted) and the local-use NAT64 prefix
//!   `64:ff9b:1::/48`. The deprecated site-local range `fec0::/10` is private like `fc00::/7`.
//! * The filter host's own addresses are private too ([`PrivateSet::with_host_addresses`]):
//!   a service on the host's public address is the host, exactly like one on loopback.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock};

use super::host::IpNet;

/// The private IPv4 networks, in the order squid's `private_dst` ACL lists them.
const V4: [([u8; 4], u8); 9] = [
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24), // IETF protocol assignments (192.0.0.192 is a cloud metadata address)
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15), // network benchmarking, used inside data centres
];

/// IPv6 forms that carry an IPv4 address as a contiguous field: (prefix bits, bit offset of
/// the IPv4 address counted from the most significant bit).
const EMBEDDINGS: [(u128, u32); 4] = [
    (0, 96),                      // IPv4-compatible ::a.b.c.d
    (0xffff_u128 << 48, 96),      // IPv4-translated ::ffff:0:a.b.c.d
    (0x0064_ff9b_u128 << 96, 96), // NAT64 well-known prefix 64:ff9b::/96
    (0x2002_u128 << 112, 16),     // 6to4 2002:aabb:ccdd::/48
];

/// The IPv4 address an IPv6 address carries in one of the [`EMBEDDINGS`], if any.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(v6);
    EMBEDDINGS.iter().find_map(|&(base, offset)| {
        let top = !0u128 << (128 - offset);
        (bits & top == base).then(|| Ipv4Addr::from((bits >> (96 - offset)) as u32))
    })
}

/// `v4` written in every embedding, as the networks that carry exactly it.
pub(crate) fn embeddings_of(v4: Ipv4Addr) -> Vec<IpNet> {
    EMBEDDINGS
        .iter()
        .map(|&(base, offset)| IpNet {
            addr: IpAddr::V6(Ipv6Addr::from(base | (u128::from(u32::from(v4)) << (96 - offset)))),
            prefix: offset as u8 + 32,
        })
        .collect()
}

/// Native IPv6 ranges (the unspecified and loopback addresses are the compatible forms of
/// `0.0.0.0/8` and need no entry of their own).
const V6: [(u128, u8); 6] = [
    (0x0100_u128 << 112, 64),          // discard-only
    (0x2001_u128 << 112, 32),          // Teredo
    (0x0064_ff9b_0001_u128 << 80, 48), // local-use NAT64
    (0xfc00_u128 << 112, 7),           // unique local
    (0xfe80_u128 << 112, 10),          // link local
    (0xfec0_u128 << 112, 10),          // site local (deprecated, still routed by some)
];

/// The fixed private networks: IPv4, then each IPv4 network in every embedding, then the native
/// IPv6 ranges. No entry covers another (squid warns about overlaps inside one ACL).
pub fn private_networks() -> &'static [IpNet] {
    static NETS: OnceLock<Vec<IpNet>> = OnceLock::new();
    NETS.get_or_init(build)
}

fn build() -> Vec<IpNet> {
    let v4 = V4.iter().map(|(a, p)| IpNet { addr: IpAddr::V4(Ipv4Addr::from(*a)), prefix: *p });
    let embedded = EMBEDDINGS.iter().flat_map(|&(base, offset)| {
        V4.iter().map(move |(a, p)| {
            let bits = base | (u128::from(u32::from_be_bytes(*a)) << (96 - offset));
            IpNet { addr: IpAddr::V6(Ipv6Addr::from(bits)), prefix: offset as u8 + p }
        })
    });
    let v6 = V6.iter().map(|&(bits, p)| IpNet { addr: IpAddr::V6(Ipv6Addr::from(bits)), prefix: p });
    v4.chain(embedded).chain(v6).collect()
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

/// True if `ip` is in the fixed private set ([`private_networks`]); the host's own addresses
/// are not known here (see [`PrivateSet`]).
pub fn is_private(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    private_networks().iter().any(|n| n.contains(ip))
}

/// The private set a filter enforces: the fixed networks plus the addresses of the host the
/// filter runs on. Cheap to clone (the host list is shared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrivateSet {
    host: Arc<[IpAddr]>,
}

impl PrivateSet {
    /// `addrs` are the addresses of every interface of the filter's host (canonical, deduplicated;
    /// those already in the fixed networks are dropped, so squid sees no overlap).
    pub fn with_host_addresses(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut v: Vec<IpAddr> = Vec::new();
        for ip in addrs.into_iter().map(canonical) {
            if !is_private(ip) && !v.contains(&ip) {
                v.push(ip);
            }
        }
        v.sort();
        PrivateSet { host: v.into() }
    }

    /// The host's own addresses that are not already private.
    pub fn host_addresses(&self) -> &[IpAddr] {
        &self.host
    }

    /// Private, or one of the host's addresses, also in an IPv6 form that carries it (through a
    /// NAT64 gateway `64:ff9b::` of the host's address reaches the host).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let carried = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        is_private(ip) || self.host.contains(&ip) || carried.is_some_and(|v4| self.host.contains(&v4))
    }
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
            ("::2", true),
            ("fc00::1", true),
            ("fdff::1", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("fec0::1", true),
            ("feff::1", true),
            ("ff00::1", false),
            ("2001:db8::1", false),
            ("::ffff:127.0.0.1", true),
            ("::ffff:198.51.100.7", false),
            // IPv4-compatible, NAT64 and 6to4 forms are judged by the IPv4 address they carry.
            ("::10.9.9.9", true),
            ("::a09:909", true),
            ("::c633:6407", false),
            ("64:ff9b::a09:909", true),
            ("64:ff9b::a9fe:a9fe", true),
            ("64:ff9b::c633:6407", false),
            ("64:ff9b:1::1", true),
            ("2002:a09:909::1", true),
            ("2002:7f00:1::", true),
            ("2002:c633:6407::1", false),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true),
            ("2001:1::1", false),
            ("::ffff:0:a09:909", true),
            ("::ffff:0:c633:6407", false),
            ("100::1", true),
            ("192.0.0.192", true),
            ("192.0.2.1", false),
            ("198.18.0.1", true),
            ("198.19.255.255", true),
            ("198.20.0.1", false),
        ] {
            assert_eq!(is_private(s.parse().unwrap()), want, "{s}");
        }
    }

    #[test]
    fn no_network_of_the_set_covers_another() {
        let nets = private_networks();
        for (i, a) in nets.iter().enumerate() {
            for (j, b) in nets.iter().enumerate() {
                assert!(i == j || !a.covers(b), "{a} covers {b}");
            }
        }
        let text: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
        assert!(text.contains(&"64:ff9b::a9fe:0/112".to_string()), "{text:?}");
        assert!(text.contains(&"2002:a00::/24".to_string()), "{text:?}");
    }

    #[test]
    fn host_addresses_join_the_set() {
        let set = PrivateSet::with_host_addresses(
            ["203.0.113.4", "::ffff:203.0.113.4", "127.0.0.1", "2001:db8::5"].map(|s| s.parse().unwrap()),
        );
        assert_eq!(set.host_addresses().len(), 2, "{set:?}");
        assert!(set.contains("203.0.113.4".parse().unwrap()));
        assert!(set.contains("::ffff:203.0.113.4".parse().unwrap()));
        assert!(set.contains("2001:db8::5".parse().unwrap()));
        assert!(set.contains("10.0.0.1".parse().unwrap()));
        assert!(!set.contains("203.0.113.5".parse().unwrap()));
        // The host's IPv4 address carried in IPv6 is the host too.
        for s in ["64:ff9b::cb00:7104", "::cb00:7104", "2002:cb00:7104::1", "::ffff:0:cb00:7104"] {
            assert!(set.contains(s.parse().unwrap()), "{s}");
        }
        let nets: Vec<String> =
            embeddings_of("203.0.113.4".parse().unwrap()).iter().map(|n| n.to_string()).collect();
        assert!(nets.contains(&"2002:cb00:7104::/48".to_string()), "{nets:?}");
        assert!(!PrivateSet::default().contains("203.0.113.4".parse().unwrap()));
    }
}
