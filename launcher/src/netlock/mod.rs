//! The user's side of the network lock (`ocsb netlock setup|teardown|status|verify` prints
//! through `commands::netlock`).
//!
//! The lock itself is the nftables table `inet ocsb_netlock`, owned by the privileged
//! `ocsb-netlock-helper` daemon (see netlock-helper/netlock.nft). This module never changes the
//! firewall: it asks the helper over the system bus (zero-argument methods, authorised by polkit,
//! so no sudo once installed) and it checks the result the only way that cannot lie, by probing
//! as the locked group ([`probe`]). When the helper is not installed it says how to install it.

pub mod client;
pub mod probe;

use crate::error::Error;
use client::Helper;

/// What to do about a netlock that does not work, for the helper as found.
pub fn setup_hint(helper: &Helper) -> String {
    match helper {
        Helper::Present(_) => "run `ocsb netlock setup`".into(),
        absent => format!("{}; {}", absent.why(), INSTALL_HINT),
    }
}

/// How to install the helper.
pub const INSTALL_HINT: &str = "install the helper as root (the ocsb package, or `sudo make install` in the ocsb \
    source tree), which starts ocsb-netlock.service; without systemd run \
    `sudo /usr/local/libexec/ocsb/ocsb-netlock-helper apply`";

/// The helper is not there to ask.
pub fn not_installed(helper: &Helper) -> Error {
    Error::failed(format!("the netlock helper is not reachable: {}", helper.why()), INSTALL_HINT)
}
