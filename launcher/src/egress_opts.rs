//! The squid options that follow from the settings: where the filter listens.

use ocsb_policy::egress::SquidOptions;
use ocsb_policy::settings::Settings;

/// The /16 around a docker gateway address (Docker's default pools are /16s).
fn docker_network(gw: std::net::IpAddr) -> Option<ocsb_policy::egress::IpNet> {
    match gw {
        std::net::IpAddr::V4(v4) => {
            let [a, b, _, _] = v4.octets();
            Some(ocsb_policy::egress::IpNet { addr: std::net::Ipv4Addr::new(a, b, 0, 0).into(), prefix: 16 })
        }
        std::net::IpAddr::V6(_) => None,
    }
}

/// Listen on 127.0.0.1 and, when `OCSB_DOCKER_GW` names an address, on the docker0 gateway too,
/// so containers reach the filter but nothing else on the host's networks does.
pub fn squid_options(settings: &Settings) -> SquidOptions {
    let port = settings.egress_port();
    let mut listen = vec![std::net::SocketAddr::from(([127, 0, 0, 1], port))];
    if let Ok(gw) = settings.scalar("OCSB_DOCKER_GW").parse::<std::net::IpAddr>() {
        listen.push(std::net::SocketAddr::new(gw, port));
    }
    let mut clients = ocsb_policy::egress::loopback_clients();
    clients.extend(listen.iter().skip(1).filter_map(|a| docker_network(a.ip())));
    SquidOptions::container(listen, clients)
}
