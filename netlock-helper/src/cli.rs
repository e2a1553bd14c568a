//! The helper's command line. In the library so that the man pages are rendered from these very
//! definitions (packaging/xtask). No subcommand takes an address, a gid, a path or a table name.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ocsb-netlock-helper",
    version,
    about = "Owns the nftables table inet ocsb_netlock (needs CAP_NET_ADMIN)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run as the systemd service (Type=notify): own the table, follow resolv.conf, serve D-Bus.
    Daemon,
    /// Create or atomically replace the table once.
    Apply,
    /// Delete the table (adopting it if orphaned); succeeds when it is already absent.
    Remove,
    /// Compare the kernel's table with the contract. Exit 0 ok, 2 missing, 3 drift (with a diff), 1 error.
    Verify,
    /// Print the exact nft text of the table the current inputs produce; changes nothing.
    Print,
}
