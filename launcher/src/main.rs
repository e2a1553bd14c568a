//! The `ocsb` binary; everything is in the library (see lib.rs).

fn main() -> std::process::ExitCode {
    ocsb::main()
}
