//! The daemon: owner|persist, survival of flush/delete/SIGKILL/SIGTERM, adoption on restart,
//! resolv.conf rename and SIGHUP. All inside namespaces the test creates.

use crate::support::world::*;

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn pid(p: &Proc) -> Pid {
    Pid::from_raw(p.0.id() as i32)
}

#[test]
fn flush_and_delete_from_another_process_leave_the_lock() {
    let w = World::new();
    let _d = w.daemon();
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    // What Debian's nftables.service runs on start, reload and stop.
    ok(&mut w.lock.exec(&["nft", "flush", "ruleset"]));
    let out = run(&mut w.lock.exec(&["nft", "delete", "table", "inet", "ocsb_netlock"]));
    assert!(!out.status.success(), "delete of an owned table succeeded");
    let out = run(&mut w.lock.exec(&["nft", "add", "rule", "inet", "ocsb_netlock", "locked", "accept"]));
    assert!(!out.status.success(), "a foreign rule was added to the owned table");
    assert!(w.nft_list().is_some());
    assert_eq!(w.probe(&["tcp", WORLD4, "8080"]), "EHOSTUNREACH");
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    // A one-shot `apply`/`remove` cannot take the table from the daemon either.
    assert_eq!(run(&mut w.helper(&["remove"])).status.code(), Some(1));
    assert!(w.nft_list().is_some());
    let st = w.status();
    assert_eq!(st["state"], "enforcing");
    assert_eq!(st["owner_flags"], true);
    assert_eq!(st["gid"], w.gid);
    assert_eq!(st["dns4"][0], DNS4);
}

/// Without owner flags (kernels before 6.9; forced here with `owner_flags = false`, the same code
/// path), anyone with CAP_NET_ADMIN can edit the table: the watcher puts back not only a deleted
/// table but also changed contents — an `accept` inserted at the top of `locked`, a flushed chain.
#[test]
fn without_owner_flags_the_watcher_repairs_changed_contents() {
    let w = World::with_config(&format!("group = \"{GROUP}\"\nowner_flags = false\n"));
    let _d = w.daemon();
    assert_eq!(w.status()["owner_flags"], false);
    let blocked = || w.probe(&["tcp", WORLD4, "8080"]) == "EHOSTUNREACH";
    assert!(blocked());
    for edit in [
        &["insert", "rule", "inet", "ocsb_netlock", "locked", "accept"][..],
        &["flush", "chain", "inet", "ocsb_netlock", "locked"],
        &["delete", "table", "inet", "ocsb_netlock"],
    ] {
        ok(&mut w.lock.exec(&[&["nft"][..], edit].concat()));
        assert!(
            wait_for(Duration::from_secs(3), || run(&mut w.helper(&["verify"])).status.code() == Some(0)),
            "not repaired after nft {edit:?}"
        );
        assert!(blocked(), "open after nft {edit:?}");
    }
}

/// Inputs that cannot be read (a typo in the config, a group lookup failing) leave the table as
/// it was, and do not stop the watcher: a flushed ruleset is put back with the last good model.
#[test]
fn a_broken_config_does_not_stop_repairs() {
    let w = World::with_config(&format!("group = \"{GROUP}\"\nowner_flags = false\n"));
    let _d = w.daemon();
    let blocked = || w.probe(&["tcp", WORLD4, "8080"]) == "EHOSTUNREACH";
    assert!(blocked());
    std::fs::write(w.path("etc/ocsb/netlock.toml"), "group = \"opencode-sandbox\"\nbogus = 1\n").unwrap();
    assert!(wait_for(Duration::from_secs(3), || w.status()["state"] == "error"), "{}", w.status());
    ok(&mut w.lock.exec(&["nft", "flush", "ruleset"]));
    assert!(wait_for(Duration::from_secs(3), || w.nft_list().is_some()), "not repaired after flush ruleset");
    assert!(blocked(), "open after flush ruleset with a broken config");
    assert!(w.status()["error"].as_str().is_some_and(|e| e.contains("bogus")), "{}", w.status());
}

/// A resolv.conf rewritten in place is read between two writes at times: changed inputs are
/// applied only when two reads a tick apart agree, so the half-written file is never applied.
#[test]
fn a_half_written_resolv_conf_is_not_applied() {
    use std::io::Write;
    let w = World::new();
    let _d = w.daemon();
    // With owner flags the daemon reads every second, so a pause of half a second is read at most once.
    assert_eq!(w.status()["owner_flags"], true, "this test needs a kernel with owner flags (6.9+)");
    let mut f =
        std::fs::OpenOptions::new().write(true).truncate(true).open(w.path("dns/resolv.conf")).unwrap();
    f.write_all(b"nameserver 198.51.100.5").unwrap();
    // A tick that read the half-written file would have applied it by now and kept it until
    // the next tick, a second later: one look at the end of the pause sees it.
    std::thread::sleep(Duration::from_millis(500));
    let seen = w.nft_list().unwrap_or_default();
    f.write_all(format!("4\nnameserver {OTHER53_6}\n").as_bytes()).unwrap();
    drop(f);
    let moved = wait_for(Duration::from_secs(5), || {
        w.nft_list().is_some_and(|t| t.contains(&format!("elements = {{ {OTHER53_4} }}")))
    });
    assert!(moved, "the finished file was not applied: {:?}", w.nft_list());
    assert!(!seen.contains("198.51.100.5 "), "the half-written file was applied:\n{seen}");
}

#[test]
fn sigkill_leaves_it_enforcing_and_a_restarted_daemon_adopts_it() {
    let w = World::new();
    let d = w.daemon();
    let first_pid = w.status()["pid"].clone();
    kill(pid(&d), Signal::SIGKILL).unwrap();
    drop(d);
    assert!(w.nft_list().is_some(), "table gone after SIGKILL");
    assert_eq!(w.probe(&["tcp", WORLD4, "8080"]), "EHOSTUNREACH");
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");

    let _d2 = w.daemon();
    assert_ne!(w.status()["pid"], first_pid);
    assert_eq!(run(&mut w.helper(&["verify"])).status.code(), Some(0));
    // Adopted: owned again, so a flush does not remove it.
    ok(&mut w.lock.exec(&["nft", "flush", "ruleset"]));
    assert!(w.nft_list().is_some());
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
}

#[test]
fn sigterm_leaves_the_table_enforcing() {
    let w = World::new();
    let mut d = w.daemon();
    kill(pid(&d), Signal::SIGTERM).unwrap();
    let status = d.0.wait().unwrap();
    assert!(status.success(), "daemon exit status {status}");
    assert!(w.nft_list().is_some());
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    assert!(w.status()["state"].as_str().unwrap().starts_with("stopped (table left enforcing)"));
}

#[test]
fn resolv_conf_rename_moves_the_dns_set() {
    let w = World::new();
    let _d = w.daemon();
    assert_eq!(w.probe(&["udp", DNS4, "53"]), "ok");
    assert_eq!(w.probe(&["udp", OTHER53_4, "53"]), "EPERM");
    w.set_resolv(&format!("nameserver {OTHER53_4}\nnameserver {OTHER53_6}\n"));
    let moved = wait_for(Duration::from_secs(5), || {
        w.nft_list().is_some_and(|t| t.contains(&format!("elements = {{ {OTHER53_4} }}")))
    });
    assert!(moved, "DNS set did not follow resolv.conf: {:?}", w.nft_list());
    assert_eq!(w.probe(&["udp", OTHER53_4, "53"]), "ok");
    assert_eq!(w.probe(&["tcp", OTHER53_6, "53"]), "ok");
    assert_eq!(w.probe(&["udp", DNS4, "53"]), "EPERM", "the old server must be blocked now");
    assert_eq!(w.probe(&["tcp", DNS6, "53"]), "EACCES");
    assert_eq!(w.status()["dns4"][0], OTHER53_4);
}

#[test]
fn sighup_rereads_the_config() {
    let w = World::new();
    let d = w.daemon();
    std::fs::write(w.path("etc/ocsb/netlock.toml"), "dns = \"none\"\n").unwrap();
    kill(pid(&d), Signal::SIGHUP).unwrap();
    let emptied = wait_for(Duration::from_secs(5), || w.nft_list().is_some_and(|t| !t.contains("elements")));
    assert!(emptied, "{:?}", w.nft_list());
    assert_eq!(w.probe(&["udp", DNS4, "53"]), "EPERM");
    assert_eq!(w.probe(&["tcp-self", "127.0.0.1"]), "ok");
}
