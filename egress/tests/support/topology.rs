//! The two namespaces of the egress lab (the network rule: no test packet leaves a namespace
//! that the test created, except on the host's loopback).
//!
//! `world` holds the origin servers on documentation addresses and the DNS server; `filter` runs
//! the proxy (and its clients, on its loopback), with a default route to `world` through a veth
//! pair. Neither namespace has any other way out.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use testkit::Netns;
pub use testkit::netns::run_ok as sh;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub const FILTER_ADDR: &str = "192.0.2.1";
pub const WORLD_ADDRS: [&str; 4] = ["192.0.2.2", "192.0.2.10", "198.51.100.7", "203.0.113.9"];
pub const DNS_ADDR: &str = "192.0.2.53";

/// The two namespaces joined by a veth pair.
pub struct Topology {
    pub world: Netns,
    pub filter: Netns,
}

impl Topology {
    pub fn new() -> Self {
        testkit::host::require_all(&[("ip", "iproute2")]);
        let world = Netns::new("eg-w");
        let filter = Netns::new("eg-f");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let (vf, vw) = (
            format!("oeF{}x{n}", std::process::id() % 10000),
            format!("oeW{}x{n}", std::process::id() % 10000),
        );
        filter.veth(&vf, &world, &vw);
        sh(&["ip", "-n", filter.name(), "addr", "add", &format!("{FILTER_ADDR}/24"), "dev", &vf]);
        for a in WORLD_ADDRS.iter().chain([DNS_ADDR].iter()) {
            let prefix = if a.starts_with("192.0.2.") { 24 } else { 32 };
            sh(&["ip", "-n", world.name(), "addr", "add", &format!("{a}/{prefix}"), "dev", &vw]);
        }
        sh(&["ip", "-n", filter.name(), "route", "add", "default", "via", "192.0.2.2"]);
        sh(&["ip", "-n", world.name(), "route", "add", "default", "dev", &vw]);
        // The filter namespace resolves through the world's DNS server only (`ip netns exec`
        // binds this file over /etc/resolv.conf; the namespace's drop removes it).
        let etc = format!("/etc/netns/{}", filter.name());
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            format!("{etc}/resolv.conf"),
            format!("nameserver {DNS_ADDR}\noptions timeout:2 attempts:1\n"),
        )
        .unwrap();
        Self { world, filter }
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
