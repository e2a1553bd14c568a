//! D-Bus + polkit for real: a private system bus (dbus-daemon with its own config, our bus policy
//! file), a real polkitd on it (switching to user polkitd itself, seeing our actions file through an overlay), and
//! the helper daemon as system user ocsb-netlock with only CAP_NET_ADMIN. Callers use dbus-send.

use crate::support::bus::*;
use crate::support::world::*;

use std::time::Duration;

#[test]
fn polkit_decides_who_may_apply_and_remove() {
    let w = World::new();
    let bus = start_bus(&w);
    let polkitd = start_polkitd(&w, &bus, "");
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    assert!(
        w.nft_list().is_some(),
        "daemon as ocsb-netlock with only CAP_NET_ADMIN did not install the table"
    );
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");

    // Status is open to everyone.
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Status");
    assert!(okk && out.contains("\"enforcing\""), "{out}");
    // Any other call is answered at once, with an error, not left to time out.
    let t = std::time::Instant::now();
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Bogus");
    assert!(!okk && out.contains("UnknownMethod") && t.elapsed() < Duration::from_secs(5), "{out}");

    // An ordinary user may neither remove nor apply (no agent, not interactive).
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Remove");
    assert!(!okk && out.contains("InteractiveAuthorizationRequired"), "{out}");
    assert!(w.nft_list().is_some(), "refused Remove removed the table");
    // There is no action for asking the daemon to look again: it looks every tick.
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Refresh");
    assert!(!okk && out.contains("UnknownMethod"), "{out}");

    // root (uid 0 is authorised by polkit) removes it; the daemon keeps it removed.
    let (okk, out) = netlock(&bus, None, "Remove");
    assert!(okk && out.contains("removed"), "{out}");
    assert!(w.nft_list().is_none());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(w.nft_list().is_none(), "watcher re-applied a removed table");
    assert_eq!(
        w.probe(&["udp", "192.0.2.1", "9"]),
        "timeout",
        "lock removed: the datagram leaves (and is not answered)"
    );

    let (okk, out) = netlock(&bus, Some(TEST_USER), "Apply");
    assert!(!okk && out.contains("InteractiveAuthorizationRequired"), "{out}");
    assert!(w.nft_list().is_none(), "refused Apply installed the table");

    // The admin grants Apply to the test user with a polkit rule: now it works.
    drop(polkitd);
    let rule = "polkit.addRule(function(action, subject) {\n  if (action.id == \"dev.ocsb.netlock.apply\" && subject.user == \"ocsb-test\") return polkit.Result.YES;\n});\n";
    let _polkitd = start_polkitd(&w, &bus, rule);
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Apply");
    assert!(okk && out.contains("enforcing"), "{out}");
    assert!(w.nft_list().is_some());
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    // ... and still not Remove.
    let (okk, _) = netlock(&bus, Some(TEST_USER), "Remove");
    assert!(!okk);
    assert!(w.nft_list().is_some());
}

#[test]
fn only_the_service_user_may_own_the_bus_name() {
    let w = World::new();
    let bus = start_bus(&w);
    // The daemon as root is refused the name by the bus policy: it says so and keeps enforcing.
    let _d = w.daemon_on_bus(&bus.address);
    assert!(w.nft_list().is_some());
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Status");
    assert!(!okk && out.contains("ServiceUnknown"), "{out}");
}

#[test]
fn the_daemon_serves_the_bus_once_it_appears() {
    // The unit starts before dbus.service: the lock first, the interface when the bus is up.
    let w = World::new();
    let address = format!("unix:path={}", w.path("bus").display());
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &address);
    assert!(w.nft_list().is_some());
    let bus = start_bus(&w);
    let served = wait_for(Duration::from_secs(12), || netlock(&bus, Some(TEST_USER), "Status").0);
    assert!(served, "the daemon never claimed dev.ocsb.Netlock1 after the bus appeared");
}

#[test]
fn the_daemon_serves_the_bus_again_after_the_bus_restarts() {
    // dbus.service restarted (an upgrade): the old connection is dead; its message stream ends,
    // and the daemon claims the name on the new bus, while the lock stays in force throughout.
    let w = World::new();
    let bus = start_bus(&w);
    // As the real system bus is named: by its path, without the server's guid.
    let address = format!("unix:path={}", w.path("bus").display());
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &address);
    assert!(wait_for(Duration::from_secs(12), || netlock(&bus, Some(TEST_USER), "Status").0));
    drop(bus);
    let _ = std::fs::remove_file(w.path("bus"));
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    let bus = start_bus(&w);
    let served = wait_for(Duration::from_secs(20), || netlock(&bus, Some(TEST_USER), "Status").0);
    let logs: Vec<String> = std::fs::read_dir(w.path(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("daemon-log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(served, "the daemon did not come back to the restarted bus; its log:\n{}", logs.join("\n"));
}

/// A caller who floods the interface from one connection (calls nobody waits for, one needing
/// polkit in each burst) must not make it unusable for others: the bus thread only dispatches,
/// so its queue never fills while a polkit check waits.
#[test]
fn a_flood_from_one_caller_leaves_the_interface_usable() {
    let w = World::new();
    let bus = start_bus(&w);
    let _polkitd = start_polkitd(&w, &bus, "");
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    assert!(wait_for(Duration::from_secs(12), || netlock(&bus, None, "Apply").0), "baseline Apply");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/dbus_flood.py");
    let socket = w.path("bus").display().to_string();
    let mut flood = std::process::Command::new("setpriv")
        .args([&format!("--reuid={TEST_USER}"), &format!("--regid={TEST_USER}"), "--init-groups"])
        .args(["/usr/bin/python3", script, &socket, "6", "100"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let (okk, out) = netlock(&bus, None, "Apply");
        assert!(
            okk && t.elapsed() < Duration::from_secs(3),
            "Apply under a flood: {out} after {:?}",
            t.elapsed()
        );
        let (okk, out) = netlock(&bus, Some(TEST_USER), "Status");
        assert!(okk, "Status under a flood: {out}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut err = String::new();
    std::io::Read::read_to_string(flood.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(flood.wait().unwrap().success(), "the flood script failed: {err}");
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
}
