//! `ocsb netlock verify|status|setup|teardown` end to end, as the ordinary user ocsb-test, with the
//! real shim, the real helper daemon (as ocsb-netlock with CAP_NET_ADMIN only), a private system
//! bus and a real polkitd, inside namespaces the test creates.
//!
//! Needs the `ocsb` binary (its `launcher/src/netlock` client): it is taken from
//! $OCSB_LAUNCHER_BIN, else from beside the helper binary (`cargo test --workspace` builds it
//! there).

use crate::support::bus::*;
use crate::support::world::*;

use std::fs;
use std::path::PathBuf;
use std::process::Output;

fn ocsb_bin() -> PathBuf {
    let p = std::env::var_os("OCSB_LAUNCHER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(HELPER).with_file_name("ocsb"));
    assert!(
        p.exists(),
        "{} missing: build the launcher first (`cargo build -p ocsb`; `cargo test --workspace` does it)",
        p.display()
    );
    p
}

/// Installs the launcher as <prefix>/bin/ocsb beside the shim, and a project directory.
fn install(w: &World) {
    fs::copy(ocsb_bin(), w.path("prefix/bin/ocsb")).unwrap();
    fs::create_dir_all(w.path("proj")).unwrap();
}

fn ocsb(w: &World, bus: &str, args: &[&str]) -> Output {
    let bin = w.path("prefix/bin/ocsb").display().to_string();
    let proj = w.path("proj").display().to_string();
    let bus = format!("DBUS_SYSTEM_BUS_ADDRESS={bus}");
    let mut a = vec![
        "env",
        "-i",
        "HOME=/home/ocsb-test",
        "PATH=/usr/bin:/bin",
        bus.as_str(),
        bin.as_str(),
        "-C",
        proj.as_str(),
        "netlock",
    ];
    a.extend_from_slice(args);
    run(&mut w.as_user(&a))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn verify_tells_a_working_lock_from_a_missing_one() {
    let w = World::new();
    install(&w);
    let nobus = format!("unix:path={}", w.path("no-bus").display());
    let o = ocsb(&w, &nobus, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("NOT working"), "{}", text(&o));
    ok(&mut w.helper(&["apply"]));
    let o = ocsb(&w, &nobus, &["verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("ok: the netlock works"), "{}", text(&o));
}

#[test]
fn setup_and_teardown_go_through_dbus_and_polkit() {
    let w = World::new();
    install(&w);
    let bus = start_bus(&w);
    let rule = "polkit.addRule(function(action, subject) {\n  if (action.id == \"dev.ocsb.netlock.apply\" && subject.user == \"ocsb-test\") return polkit.Result.YES;\n});\n";
    let _polkitd = start_polkitd(&w, &bus, rule);
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    let o = ocsb(&w, &bus.address, &["status"]);
    assert!(
        o.status.success()
            && text(&o).contains("helper: enforcing")
            && text(&o).contains("probe as group opencode-sandbox: locked"),
        "{}",
        text(&o)
    );

    // The admin removes the lock; verify notices.
    assert!(netlock(&bus, None, "Remove").0);
    let o = ocsb(&w, &bus.address, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("ocsb netlock setup"), "{}", text(&o));

    // setup as the user (granted by the polkit rule): the lock is back and verified.
    let o = ocsb(&w, &bus.address, &["setup"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("ok: the netlock works"), "{}", text(&o));
    assert!(w.nft_list().is_some());

    // teardown needs an admin: refused, the lock stays.
    let o = ocsb(&w, &bus.address, &["teardown"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("refused"), "{}", text(&o));
    assert!(w.nft_list().is_some());
    let o = ocsb(&w, &bus.address, &["verify"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
