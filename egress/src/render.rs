//! What `egress render` prints and what squid is given: pure functions from a compiled policy
//! and a listen plan to text. Nothing here starts, stops or asks a filter anything.

use ocsb_policy::egress::{Policy, SquidOptions};

use crate::error::Result;
use crate::instance::SquidOverrides;
use crate::listen::{ListenPlan, client_networks, host_addresses_checked};

/// The normalised policy the builtin proxy enforces.
pub fn builtin(policy: &Policy) -> String {
    policy.to_text()
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
    let mut o = SquidOptions::container(plan.addrs.clone(), client_networks(&plan.addrs));
    apply_overrides(&mut o, ov);
    // squid shares the host's network: the host's addresses are the ones to refuse.
    Ok(policy.clone().with_host_addresses(host_addresses_checked()?).render_squid(&o)?)
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
    o.client_networks = client_networks(&o.listen);
    apply_overrides(&mut o, ov);
    // Called in the network namespace squid will run in: its addresses are the host's.
    Ok(policy.clone().with_host_addresses(host_addresses_checked()?).render_squid(&o)?)
}
