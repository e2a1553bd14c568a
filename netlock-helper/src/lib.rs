//! `ocsb-netlock-helper`: owns the nftables table `inet ocsb_netlock` that takes the network away
//! from every socket created with fsgid `opencode-sandbox` (except loopback and the configured DNS
//! servers). Read `netlock.nft` first: it is the contract this crate implements.
//!
//! Module map: `config` + `resolv` (inputs, root-owned files only) → `model` (pure) → `nft`
//! (netlink, the only place that changes the kernel) ; `verify`, `status`, `daemon`, `notify`,
//! `dbus` around it. No module takes input from an unprivileged caller.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod daemon;
pub mod dbus;
pub mod model;
pub mod nft;
pub mod notify;
pub mod resolv;
pub mod status;
pub mod verify;
