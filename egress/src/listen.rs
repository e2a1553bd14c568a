//! Where the filter listens: 127.0.0.1 always, and the docker0 gateway when there is one.
//!
//! *Why explicit*: containers started by the agent reach the filter through the docker0 gateway.
//! When docker0 does not exist (no Docker on the host) the filter listens on loopback only and
//! says so, instead of failing or binding to a wildcard address that would expose it to the LAN.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use ocsb_policy::egress::IpNet;

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

/// The IPv4 network of the interface that holds `ip`, from its netmask. *Why exact*: a
/// listener lent on a Docker network's gateway serves that network's containers as clients,
/// and no more of the address space around it (a /20 from Docker's pools sits in a /16 that may
/// hold the LAN).
pub fn interface_network(ip: IpAddr) -> Option<IpNet> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let (Some(addr), Some(mask)) = (a.address, a.netmask) else { continue };
        let (Some(sin), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) else { continue };
        if IpAddr::V4(sin.ip()) != ip {
            continue;
        }
        let bits = u32::from(m.ip());
        let net = u32::from(sin.ip()) & bits;
        return Some(IpNet { addr: IpAddr::V4(Ipv4Addr::from(net)), prefix: bits.count_ones() as u8 });
    }
    None
}

/// Every address of every interface of this host (in the caller's network namespace).
///
/// *Why*: a service bound to the host's public or global IPv6 address is the host itself, as
/// much as one on loopback; the policy judges these addresses private
/// ([`ocsb_policy::egress::Policy::with_host_addresses`]). *Why an error and not an empty
/// list*: the table can be unreadable for a moment (no descriptor left, which a client can
/// provoke); an empty list would make the host's own services reachable, so callers keep the
/// addresses they had, or refuse to start.
pub fn host_addresses() -> std::io::Result<Vec<IpAddr>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
    Ok(addrs
        .filter_map(|a| {
            let s = a.address?;
            s.as_sockaddr_in()
                .map(|v| IpAddr::V4(v.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v| IpAddr::V6(v.ip())))
        })
        .collect())
}

/// [`host_addresses`] for a caller that cannot go on without them, with the fix in the error.
pub fn host_addresses_checked() -> crate::Result<Vec<IpAddr>> {
    host_addresses().map_err(|e| {
        crate::Error::state(
            format!("cannot list this host's addresses, which the filter must refuse to the agent: {e}"),
            "check that `ip addr` works here and that the process has file descriptors left (`ulimit -n`)",
        )
    })
}

/// Who may use a filter that listens on `listen`: loopback, and for each non-loopback IPv4
/// listen address (the docker gateway) its /16, as Docker allocates bridge networks, so the
/// containers behind the gateway can use it. Both backends take their client rule from here.
pub fn client_networks(listen: &[SocketAddr]) -> Vec<IpNet> {
    let mut nets = ocsb_policy::egress::loopback_clients();
    for a in listen {
        if let IpAddr::V4(v4) = a.ip()
            && !v4.is_loopback()
        {
            let o = v4.octets();
            let net = IpNet { addr: IpAddr::V4([o[0], o[1], 0, 0].into()), prefix: 16 };
            if !nets.contains(&net) {
                nets.push(net);
            }
        }
    }
    nets
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

    #[test]
    fn the_network_of_an_interface_address_is_its_own() {
        let lo = interface_network("127.0.0.1".parse().unwrap());
        assert_eq!(lo, Some(IpNet { addr: "127.0.0.0".parse().unwrap(), prefix: 8 }));
        assert_eq!(interface_network("192.0.2.77".parse().unwrap()), None, "on no interface here");
    }

    use super::*;

    #[test]
    fn loopback_always_gateway_only_when_known() {
        let p = plan(3128, GatewaySetting::Disabled);
        assert_eq!(p.addrs, vec!["127.0.0.1:3128".parse().unwrap()]);
        assert!(p.note().contains("127.0.0.1 only"));
        let p = plan(3138, GatewaySetting::Address("172.18.0.1".parse().unwrap()));
        assert_eq!(p.addrs, vec!["127.0.0.1:3138".parse().unwrap(), "172.18.0.1:3138".parse().unwrap()]);
        assert!(p.note().contains("OCSB_DOCKER_GW"));
        let nets: Vec<String> = client_networks(&p.addrs).iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["127.0.0.0/8", "::1/128", "172.18.0.0/16"]);
        // Detection agrees with the interface table.
        let p = plan(3128, GatewaySetting::Detect);
        match interface_v4("docker0") {
            Some(ip) => assert_eq!(p.gateway, Gateway::Docker0(IpAddr::V4(ip))),
            None => assert_eq!(p.gateway, Gateway::Absent),
        }
    }
}
