//! While `run` lasts, squid learns this host's addresses when they change.
//!
//! *Why*: the filter judges the host's own addresses as private (a service on the machine's
//! public address is the machine). The builtin filter re-reads them itself; squid has them only
//! in its rendered config, so an address that arrives later (DHCP, a VPN, a new IPv6 temporary
//! address) would be reachable through squid until the next `egress up`. The launcher watches
//! the interface table and re-deploys the config (`egress up` reloads squid when the rendered
//! text changed).

use std::net::IpAddr;
use std::time::Duration;

use ocsb_egress::{Backend, Instance};
use ocsb_policy::egress::Policy;

/// How often the interface table is read.
const EVERY: Duration = Duration::from_secs(3);

/// Whether `now` is a different set of addresses than `last` (which it then becomes). An
/// unreadable table is no change: the addresses known so far stay in force.
fn changed(last: &mut Option<Vec<IpAddr>>, now: std::io::Result<Vec<IpAddr>>) -> bool {
    let Ok(mut now) = now else { return false };
    now.sort();
    now.dedup();
    if last.as_ref() == Some(&now) {
        return false;
    }
    let first = last.is_none();
    *last = Some(now);
    !first
}

/// Start watching, for the squid backend only; the thread ends with the process.
pub fn watch(inst: Instance, policy: Policy) {
    if inst.backend != Backend::Squid {
        return;
    }
    let spawned = std::thread::Builder::new().name("ocsb-addresses".into()).spawn(move || {
        let mut last = None;
        changed(&mut last, ocsb_egress::host_addresses());
        loop {
            std::thread::sleep(EVERY);
            if !changed(&mut last, ocsb_egress::host_addresses()) {
                continue;
            }
            match ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress()) {
                Ok(_) => eprintln!("egress: this host's addresses changed; squid has the new ones"),
                Err(e) => {
                    eprintln!("ocsb: warning: this host's addresses changed and squid was not updated: {e}")
                }
            }
        }
    });
    if let Err(e) = spawned {
        eprintln!("ocsb: warning: squid will not learn new addresses of this host during the run: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(v: &[&str]) -> std::io::Result<Vec<IpAddr>> {
        Ok(v.iter().map(|s| s.parse().unwrap()).collect())
    }

    #[test]
    fn a_new_or_gone_address_is_a_change_and_an_unreadable_table_is_not() {
        let mut last = None;
        assert!(!changed(&mut last, ips(&["127.0.0.1", "192.0.2.1"])), "the first reading sets the base");
        assert!(!changed(&mut last, ips(&["192.0.2.1", "127.0.0.1"])), "order does not matter");
        assert!(changed(&mut last, ips(&["127.0.0.1", "192.0.2.1", "203.0.113.50"])));
        assert!(
            !changed(&mut last, Err(std::io::Error::from_raw_os_error(24))),
            "EMFILE keeps what was known"
        );
        assert!(changed(&mut last, ips(&["127.0.0.1"])));
        assert_eq!(last, Some(ips(&["127.0.0.1"]).unwrap()));
    }
}
