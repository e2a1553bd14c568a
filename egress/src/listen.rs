//! Where the filter listens: 127.0.0.1 always, and the docker0 gateway when there is one.
//!
//! *Why explicit*: containers started by the agent reach the filter through the docker0 gateway.
//! When docker0 does not exist (no Docker on the host) the filter listens on loopback only and
//! says so, instead of failing or binding to a wildcard address that would expose it to the LAN.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gateway {
    /// `OCSB_DOCKER_GW` set by the user.
    Configured(IpAddr),
    /// The IPv4 address of the `docker0` interface.
    Docker0(IpAddr),
    /// No docker0 interface: loopback only.
    Absent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenPlan {
    pub addrs: Vec<SocketAddr>,
    pub gateway: Gateway,
}

impl ListenPlan {
    pub fn note(&self) -> String {
        match &self.gateway {
            Gateway::Configured(ip) => format!("listening on 127.0.0.1 and {ip} (OCSB_DOCKER_GW)"),
            Gateway::Docker0(ip) => format!("listening on 127.0.0.1 and {ip} (docker0)"),
            Gateway::Absent => "listening on 127.0.0.1 only: there is no docker0 interface, so containers cannot reach the filter (set OCSB_DOCKER_GW if Docker uses another bridge)".into(),
        }
    }
}

/// The IPv4 address of an interface, if it exists and has one.
pub fn interface_v4(name: &str) -> Option<Ipv4Addr> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        if a.interface_name != name {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Some(sin.ip());
        }
    }
    None
}

/// `OCSB_DOCKER_GW`: unset = detect docker0; an address = use it; `Disabled` = loopback only
/// (tests, and hosts that never give containers the filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewaySetting {
    Detect,
    Address(IpAddr),
    Disabled,
}

pub fn plan(port: u16, setting: GatewaySetting) -> ListenPlan {
    let mut addrs = vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)];
    let gateway = match setting {
        GatewaySetting::Address(ip) => Gateway::Configured(ip),
        GatewaySetting::Disabled => Gateway::Absent,
        GatewaySetting::Detect => match interface_v4("docker0") {
            Some(ip) => Gateway::Docker0(IpAddr::V4(ip)),
            None => Gateway::Absent,
        },
    };
    if let Gateway::Configured(ip) | Gateway::Docker0(ip) = gateway
        && !ip.is_loopback()
    {
        addrs.push(SocketAddr::new(ip, port));
    }
    ListenPlan { addrs, gateway }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_always_gateway_only_when_known() {
        let p = plan(3128, GatewaySetting::Disabled);
        assert_eq!(p.addrs, vec!["127.0.0.1:3128".parse().unwrap()]);
        assert!(p.note().contains("127.0.0.1 only"));
        let p = plan(3138, GatewaySetting::Address("172.18.0.1".parse().unwrap()));
        assert_eq!(p.addrs, vec!["127.0.0.1:3138".parse().unwrap(), "172.18.0.1:3138".parse().unwrap()]);
        assert!(p.note().contains("OCSB_DOCKER_GW"));
        // Detection agrees with the interface table.
        let p = plan(3128, GatewaySetting::Detect);
        match interface_v4("docker0") {
            Some(ip) => assert_eq!(p.gateway, Gateway::Docker0(IpAddr::V4(ip))),
            None => assert_eq!(p.gateway, Gateway::Absent),
        }
    }
}
