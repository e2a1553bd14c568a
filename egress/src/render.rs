//! What `egress render` prints and what squid is given: pure functions from a compiled policy
//! and a listen plan to text. Nothing here starts, stops or asks a filter anything.

use std::net::IpAddr;

use ocsb_policy::egress::{IpNet, Policy, SquidOptions};

use crate::error::Result;
use crate::instance::SquidOverrides;
use crate::listen::{Gateway, ListenPlan};

/// The normalised policy the builtin proxy enforces.
pub fn builtin(policy: &Policy) -> String {
    policy.to_text()
}

/// Who may use the proxy: loopback, and the docker network behind the gateway (its /16, as
/// Docker allocates bridges) so containers started by the agent can use it too.
pub fn client_networks(plan: &ListenPlan) -> Vec<IpNet> {
    let mut nets = ocsb_policy::egress::loopback_clients();
    if let Gateway::Configured(IpAddr::V4(gw)) | Gateway::Docker0(IpAddr::V4(gw)) = plan.gateway {
        let o = gw.octets();
        nets.push(IpNet { addr: IpAddr::V4([o[0], o[1], 0, 0].into()), prefix: 16 });
    }
    nets
}

fn apply_overrides(o: &mut SquidOptions, ov: &SquidOverrides) {
    if let Some(h) = &ov.hosts_file {
        o.hosts_file = Some(h.into());
    }
    if !ov.dns_nameservers.is_empty() {
        o.dns_nameservers = ov.dns_nameservers.clone();
    }
}

/// squid.conf for the container (paths inside the image; logs to stdout/stderr).
pub fn squid_conf(policy: &Policy, plan: &ListenPlan, ov: &SquidOverrides) -> Result<String> {
    let mut o = SquidOptions::container(plan.addrs.clone(), client_networks(plan));
    apply_overrides(&mut o, ov);
    Ok(policy.render_squid(&o)?)
}

/// squid.conf for squid run as a host process with everything in `dir` (the differential test
/// and the benchmark run the host's squid this way inside their namespaces).
pub fn squid_conf_host_process(
    policy: &Policy,
    dir: &std::path::Path,
    listen: Vec<std::net::SocketAddr>,
    ov: &SquidOverrides,
) -> Result<String> {
    let mut o = SquidOptions::host_process(dir, listen);
    apply_overrides(&mut o, ov);
    Ok(policy.render_squid(&o)?)
}
