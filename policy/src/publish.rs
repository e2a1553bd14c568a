//! Which servers of an isolated sandbox are published on the host, and where: the rule behind
//! `OCSB_PUBLISH`. The launcher sees the listeners inside (the kernel's list, never the
//! agent's word) and asks this module what to do with them; binding the host's sockets and
//! relaying is the launcher's.
//!
//! What a publication can do to the host: it is a listener on the host's loopback whose every
//! connection reaches a server the agent wrote. So it is never on another address than
//! loopback, never on a port a host program already listens on (it would take that program's
//! clients), and never on a port ocsb itself serves or relays (the filter's, the web front's,
//! OpenCode's, a forwarded host service's): those are ports other programs of the user trust
//! to be ocsb's or their own.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// `OCSB_PUBLISH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// Every port the sandbox listens on (but the reserved ones).
    Auto,
    /// None.
    Off,
    /// These ports only, when the sandbox listens on them.
    Ports(BTreeSet<u16>),
}

impl Publish {
    /// `auto`, `0`, or ports separated by commas or spaces (`3000,8080`). `Err` says why not.
    pub fn parse(v: &str) -> Result<Publish, String> {
        match v.trim() {
            "auto" => Ok(Publish::Auto),
            "0" => Ok(Publish::Off),
            list => {
                let mut ports = BTreeSet::new();
                for p in list.split([',', ' ']).filter(|p| !p.is_empty()) {
                    match p.parse::<u16>() {
                        Ok(n) if n > 0 && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
                            ports.insert(n);
                        }
                        _ => return Err(format!("`{p}` is not a port")),
                    }
                }
                if ports.is_empty() {
                    return Err("no port is named".into());
                }
                Ok(Publish::Ports(ports))
            }
        }
    }
}

/// The web front's and the filter's default ports. *Why they are always reserved*: another
/// project's `ocsb run` uses them by default, so a publication there would take its clients
/// (its browser tab, its sandbox's proxy relay) while it is not running.
pub const OCSB_DEFAULT_PORTS: [u16; 3] = [3128, 4196, 4197];

/// How far above a taken port the next free one is looked for.
pub const NEXT_FREE_WITHIN: u16 = 100;

/// At most this many publications at once, and this many new ones per look. *Why*: each is a
/// port of the host's, held for the agent; without a cap the agent could listen on every port
/// and hold them all, so that no program of any user could listen on them.
pub const MAX_PUBLISHED: usize = 32;
pub const NEW_PER_LOOK: usize = 4;

/// Why a listener inside is not published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// `OCSB_PUBLISH=0`.
    Off,
    /// `OCSB_PUBLISH` lists ports, and not this one.
    NotListed,
    /// A port ocsb serves or relays.
    Reserved,
    /// Taken on the host, and no free port within [`NEXT_FREE_WITHIN`] above it.
    NoFreePort,
    /// Listed in `OCSB_PUBLISH`, and taken on the host (a listed port is that port or none).
    Taken,
    /// It listens on no loopback address (the namespace has no other: nothing reaches it).
    NotLoopback,
    /// In the host's ephemeral range, where the kernel picks the local ports of outgoing
    /// connections: held for the agent, they would be missing to every program's connections.
    Ephemeral,
    /// [`MAX_PUBLISHED`] are published already.
    TooMany,
}

impl Skip {
    /// The reason, for the line the user reads.
    pub fn why(&self, port: u16) -> String {
        match self {
            Skip::Off => "OCSB_PUBLISH=0".into(),
            Skip::NotListed => "not in OCSB_PUBLISH".into(),
            Skip::Reserved => format!("{port} is a port ocsb serves or relays"),
            Skip::NotLoopback => "it listens on no loopback address".into(),
            Skip::Ephemeral => {
                format!("{port} is in the host's ephemeral port range, which outgoing connections use")
            }
            Skip::TooMany => format!("{MAX_PUBLISHED} servers are published already"),
            Skip::Taken => format!(
                "127.0.0.1:{port} is in use on the host; OCSB_PUBLISH lists it, so no other port is used"
            ),
            Skip::NoFreePort => {
                format!("127.0.0.1:{port} and the {NEXT_FREE_WITHIN} ports above it are in use on the host")
            }
        }
    }
}

/// What is never published: every port the launcher serves or relays for this sandbox, and
/// the host's ephemeral range.
#[derive(Debug, Clone)]
pub struct Reserved {
    ports: BTreeSet<u16>,
    ephemeral: std::ops::RangeInclusive<u16>,
}

impl Reserved {
    /// `ports` (the filter's, the front's, OpenCode's, the forwarded ones) and
    /// [`OCSB_DEFAULT_PORTS`]; `ephemeral`, the host's `ip_local_port_range`.
    pub fn new(ports: impl IntoIterator<Item = u16>, ephemeral: std::ops::RangeInclusive<u16>) -> Reserved {
        Reserved { ports: ports.into_iter().chain(OCSB_DEFAULT_PORTS).collect(), ephemeral }
    }

    /// Why `port` is never published, if it is not.
    pub fn check(&self, port: u16) -> Result<(), Skip> {
        if self.ports.contains(&port) {
            Err(Skip::Reserved)
        } else if self.ephemeral.contains(&port) {
            Err(Skip::Ephemeral)
        } else {
            Ok(())
        }
    }

    pub fn contains(&self, port: u16) -> bool {
        self.check(port).is_err()
    }
}

/// `/proc/sys/net/ipv4/ip_local_port_range`'s text (`32768\t60999`) as a range; Linux's
/// default when it does not parse.
pub fn ephemeral_range(text: &str) -> std::ops::RangeInclusive<u16> {
    let mut n = text.split_whitespace().map(|v| v.parse::<u16>());
    match (n.next(), n.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => lo..=hi,
        _ => 32768..=60999,
    }
}

/// Whether a listener on `port` inside is to be published under `mode`.
pub fn wanted(mode: &Publish, reserved: &Reserved, port: u16) -> Result<(), Skip> {
    match mode {
        Publish::Off => Err(Skip::Off),
        Publish::Ports(list) if !list.contains(&port) => Err(Skip::NotListed),
        _ => reserved.check(port),
    }
}

/// The host port for a listener on `port` inside: `port` itself when `free` says it is, else
/// (with `auto`) the next free one above it that is not reserved (the user is told which).
/// Ports the user listed are published at that port or not at all: the list is how a user
/// keeps the agent off the fixed ports of services that are sometimes down. `free` binds the
/// port (so the answer holds: a port found free stays the launcher's).
pub fn host_port(
    port: u16,
    mode: &Publish,
    reserved: &Reserved,
    mut free: impl FnMut(u16) -> bool,
) -> Result<u16, Skip> {
    let listed = matches!(mode, Publish::Ports(_));
    let within = if listed { 0 } else { NEXT_FREE_WITHIN };
    (0..=within)
        .filter_map(|i| port.checked_add(i))
        .filter(|p| *p == port || !reserved.contains(*p))
        .find(|p| free(*p))
        .ok_or(if listed { Skip::Taken } else { Skip::NoFreePort })
}

/// Where inside a connection to a published `port` goes, given every address the sandbox
/// listens on with that port: IPv4 loopback when any listener takes it (`0.0.0.0`, `127.x`),
/// else IPv6 loopback (`::`, `::1`). `None` for a port nothing listens on.
pub fn dial_address(port: u16, listening: &[SocketAddr]) -> Option<SocketAddr> {
    let on: Vec<IpAddr> = listening.iter().filter(|a| a.port() == port).map(|a| a.ip()).collect();
    let v4 = on.iter().find_map(|ip| match ip {
        IpAddr::V4(a) if a.is_unspecified() => Some(Ipv4Addr::LOCALHOST),
        IpAddr::V4(a) if a.is_loopback() => Some(*a),
        // `::` also takes IPv4 (unless the program set IPV6_V6ONLY: then IPv6 is tried below).
        IpAddr::V6(a) if a.is_unspecified() => None,
        _ => None,
    });
    if let Some(a) = v4 {
        return Some(SocketAddr::from((a, port)));
    }
    on.iter()
        .any(|ip| matches!(ip, IpAddr::V6(a) if a.is_unspecified() || a.is_loopback()))
        .then_some(SocketAddr::from((Ipv6Addr::LOCALHOST, port)))
}

/// One server published on the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Publication {
    /// Its port inside the sandbox.
    pub inside: u16,
    /// Where the host serves it (`127.0.0.1:host`, and `[::1]:host`).
    pub host: u16,
    /// The program that listens, and its pid, when the launcher could see them.
    pub by: Option<(String, i32)>,
}

impl Publication {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.host)
    }

    /// `http://127.0.0.1:3000 (python3, pid 4242)`.
    pub fn describe(&self) -> String {
        let mut s = self.url();
        match &self.by {
            Some((name, pid)) => s.push_str(&format!(" ({name}, pid {pid})")),
            None => s.push_str(&format!(" (port {} inside)", self.inside)),
        }
        if self.host != self.inside {
            s.push_str(&format!(
                "; port {} inside: 127.0.0.1:{} is in use on the host",
                self.inside, self.inside
            ));
        }
        s
    }
}

/// The sandbox's publications as they stand, for whoever shows them (the Tokens panel).
pub type Publications = Arc<Mutex<Vec<Publication>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publication_says_where_and_who() {
        let p = Publication { inside: 3000, host: 3000, by: Some(("python3".into(), 42)) };
        assert_eq!(p.describe(), "http://127.0.0.1:3000 (python3, pid 42)");
        let moved = Publication { inside: 3000, host: 3001, by: None };
        assert_eq!(
            moved.describe(),
            "http://127.0.0.1:3001 (port 3000 inside); port 3000 inside: 127.0.0.1:3000 is in use on the host"
        );
    }

    #[test]
    fn the_setting_is_auto_off_or_ports() {
        assert_eq!(Publish::parse("auto"), Ok(Publish::Auto));
        assert_eq!(Publish::parse("0"), Ok(Publish::Off));
        assert_eq!(Publish::parse("3000,8080"), Ok(Publish::Ports([3000, 8080].into())));
        assert_eq!(Publish::parse("3000 8080"), Ok(Publish::Ports([3000, 8080].into())));
        for bad in ["", "yes", "0,3000x", "70000", "+80", "3000,-1", " , "] {
            assert!(Publish::parse(bad).is_err(), "{bad:?} taken");
        }
    }

    #[test]
    fn reserved_and_unlisted_ports_are_not_published() {
        let r = Reserved::new([3129, 5555], 32768..=60999);
        assert_eq!(wanted(&Publish::Auto, &r, 3000), Ok(()));
        assert_eq!(wanted(&Publish::Auto, &r, 5555), Err(Skip::Reserved));
        for p in OCSB_DEFAULT_PORTS {
            assert_eq!(wanted(&Publish::Auto, &r, p), Err(Skip::Reserved), "{p}");
        }
        assert_eq!(wanted(&Publish::Off, &r, 3000), Err(Skip::Off));
        let list = Publish::Ports([3000, 5555].into());
        assert_eq!(wanted(&list, &r, 3000), Ok(()));
        assert_eq!(wanted(&list, &r, 8080), Err(Skip::NotListed));
        // Naming a reserved port does not lift the reservation.
        assert_eq!(wanted(&list, &r, 5555), Err(Skip::Reserved));
        // The host's ephemeral range is never published, listed or not.
        assert_eq!(wanted(&Publish::Auto, &r, 40000), Err(Skip::Ephemeral));
        assert_eq!(wanted(&Publish::Ports([40000].into()), &r, 40000), Err(Skip::Ephemeral));
        assert_eq!(wanted(&Publish::Auto, &r, 61000), Ok(()));
    }

    #[test]
    fn a_taken_host_port_is_not_taken_and_the_next_free_one_is_offered() {
        let r = Reserved::new([3002], 32768..=60999);
        let auto = Publish::Auto;
        assert_eq!(host_port(3000, &auto, &r, |_| true), Ok(3000));
        // 3000 and 3001 taken on the host, 3002 reserved: 3003.
        let mut asked = Vec::new();
        let got = host_port(3000, &auto, &r, |p| {
            asked.push(p);
            p >= 3003
        });
        assert_eq!(got, Ok(3003));
        assert_eq!(asked, [3000, 3001, 3003], "a reserved port was tried");
        assert_eq!(host_port(3000, &auto, &r, |_| false), Err(Skip::NoFreePort));
        // Near the top of the range: no overflow.
        assert_eq!(host_port(65535, &auto, &r, |p| p == 65535), Ok(65535));
        assert_eq!(host_port(65535, &auto, &r, |_| false), Err(Skip::NoFreePort));
        // The next free port never lands in the ephemeral range.
        let low = Reserved::new([], 3001..=3050);
        assert_eq!(host_port(3000, &auto, &low, |p| p > 3000), Ok(3051));
        // A listed port: that port or none.
        let listed = Publish::Ports([3000].into());
        assert_eq!(host_port(3000, &listed, &r, |p| p > 3000), Err(Skip::Taken));
        assert_eq!(host_port(3000, &listed, &r, |_| true), Ok(3000));
    }

    #[test]
    fn the_ephemeral_range_is_read_from_the_kernels_text() {
        assert_eq!(ephemeral_range("32768\t60999\n"), 32768..=60999);
        assert_eq!(ephemeral_range("1024 65535"), 1024..=65535);
        assert_eq!(ephemeral_range("garbage"), 32768..=60999);
        assert_eq!(ephemeral_range("9 8"), 32768..=60999);
    }

    #[test]
    fn connections_go_to_a_loopback_address_the_server_listens_on() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(dial_address(3000, &[a("0.0.0.0:3000")]), Some(a("127.0.0.1:3000")));
        assert_eq!(dial_address(3000, &[a("127.0.0.2:3000")]), Some(a("127.0.0.2:3000")));
        assert_eq!(dial_address(3000, &[a("[::1]:3000")]), Some(a("[::1]:3000")));
        assert_eq!(dial_address(3000, &[a("[::]:3000")]), Some(a("[::1]:3000")));
        assert_eq!(dial_address(3000, &[a("[::]:3000"), a("127.0.0.1:3000")]), Some(a("127.0.0.1:3000")));
        assert_eq!(dial_address(3000, &[a("127.0.0.1:8080")]), None);
    }
}
