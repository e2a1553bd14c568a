//! `OCSB_NETWORK`, resolved once: the settings say a mode, this module turns it into the
//! sandbox's [`Network`], which the spec carries from then on. Everything after reads the
//! spec's value; only the few places that must (the netlock, landlock's port rules, a port
//! the launcher serves, the isolated network's server, the bypass check) decide on it.

use std::time::Duration;

use ocsb_policy::settings::{NetlockAcquire, NetworkMode, Settings};
use ocsb_sandbox::{Acquire, Netlock, Network};

use crate::error::{Error, Result};
use crate::install::Installation;

/// The sandbox's network for the settings: the host's, or a namespace of its own with the
/// filter's port and the declared loopback ports relayed in.
pub fn of(settings: &Settings) -> Network {
    match settings.network() {
        NetworkMode::Netlock => Network::Host,
        NetworkMode::Isolated => {
            let mut forward = vec![settings.egress_port()];
            forward.extend(settings.loopback_ports().into_iter().filter(|p| *p != settings.egress_port()));
            Network::Isolated { forward }
        }
    }
}

/// The mode's name, as `OCSB_NETWORK` spells it.
pub fn name(network: &Network) -> &'static str {
    match network {
        Network::Host => NetworkMode::Netlock.as_str(),
        Network::Isolated { .. } => NetworkMode::Isolated.as_str(),
    }
}

/// The netlock part of the sandbox spec for the network. In an isolated network the netlock is
/// defence in depth: the sandbox joins the group where the netlock is installed (the group and
/// the way to join it exist), and needs nothing otherwise.
pub fn netlock_for(network: &Network, settings: &Settings) -> Result<Netlock> {
    match (network, netlock(settings)) {
        (Network::Host, lock) => lock,
        (Network::Isolated { .. }, Ok(Netlock::Required { acquire: Acquire::Shim { path }, .. }))
            if !path.exists() =>
        {
            Ok(Netlock::Off)
        }
        (Network::Isolated { .. }, lock) => Ok(lock.unwrap_or(Netlock::Off)),
    }
}

/// The netlock part of the sandbox spec: the group's gid and how the sandbox gets it.
fn netlock(settings: &Settings) -> Result<Netlock> {
    let group = settings.netlock_group();
    let gid = match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => g.gid.as_raw(),
        _ => {
            return Err(Error::failed(
                format!("netlock: the group {group} does not exist, so the netlock is not installed"),
                "install the netlock helper (`sudo make install`), then `ocsb netlock setup`",
            ));
        }
    };
    let ids =
        nix::unistd::getresgid().map_err(|e| Error::failed(format!("getresgid: {e}"), "report this"))?;
    let acquire = if [ids.real, ids.effective, ids.saved].iter().all(|g| g.as_raw() == gid) {
        // Already the group (e.g. started through `sg`): nothing to acquire.
        Acquire::Inherited
    } else {
        match settings.netlock_acquire() {
            NetlockAcquire::Exec => Acquire::Shim { path: Installation::current()?.shim() },
            NetlockAcquire::Sg => Acquire::Sg { group: group.to_string() },
        }
    };
    Ok(Netlock::Required { gid, acquire, probe_interval: Duration::from_secs(5) })
}
