//! `ocsb-egress serve ARGS`: the builtin filter process, for tests and for hosts that run the
//! filter without the launcher. The launcher's `ocsb egress serve` calls the same function.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        Some("serve") => std::process::exit(ocsb_egress::builtin::serve::main(&args[1..])),
        _ => {
            eprintln!(
                "usage: ocsb-egress serve --state-dir DIR --user-config-dir DIR --project-dir DIR --listen ADDR:PORT..."
            );
            std::process::exit(2);
        }
    }
}
