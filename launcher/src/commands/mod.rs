//! One module per subcommand.

pub mod config;
pub mod egress;
pub mod init;
pub mod sandbox;
