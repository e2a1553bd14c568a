//! TEMPORARY review tests (to be deleted).
mod common;
use common::bus::*;
use common::*;

use std::process::Command;
use std::time::{Duration, Instant};

fn logs(w: &World) -> String {
    std::fs::read_dir(w.path(""))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("daemon-log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn review_flood_stalls_polkit() {
    let w = World::new();
    let bus = start_bus(&w);
    let _p = start_polkitd(&w, &bus, "");
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    let t = Instant::now();
    let (ok1, out1) = netlock(&bus, None, "Refresh");
    eprintln!("REVIEW baseline root Refresh: ok={ok1} in {:?}: {}", t.elapsed(), out1.trim());
    let burst = std::env::var("REVIEW_BURST").unwrap_or("100".into());
    let sock = w.path("bus").display().to_string();
    let mut flood = Command::new("setpriv")
        .args([
            "--reuid=ocsb-test",
            "--regid=ocsb-test",
            "--init-groups",
            "/tmp/review/flood.py",
            &sock,
            "30",
            &burst,
            &std::env::var("REVIEW_REFRESH").unwrap_or("1".into()),
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    for i in 0..3 {
        let t = Instant::now();
        let (okk, out) = netlock(&bus, None, "Refresh");
        eprintln!("REVIEW under flood #{i} root Refresh: ok={okk} in {:?}: {}", t.elapsed(), out.trim());
    }
    let t = Instant::now();
    let (okk, out) = netlock(&bus, Some(TEST_USER), "Status");
    eprintln!(
        "REVIEW under flood user Status: ok={okk} in {:?}: {}",
        t.elapsed(),
        &out.trim()[..out.trim().len().min(60)]
    );
    eprintln!("REVIEW lock still enforced: {}", w.probe(&["udp", "192.0.2.1", "9"]));
    let _ = flood.kill();
    let _ = flood.wait();
    eprintln!("REVIEW daemon log:\n{}", logs(&w));
}

#[test]
fn review_tick_inputs() {
    use std::io::Write;
    let w = World::new();
    let d = w.daemon();
    let elems = || {
        w.nft_list()
            .map(|t| {
                t.lines()
                    .filter(|l| l.contains("elements"))
                    .map(|l| l.trim().to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .unwrap_or("NO TABLE".into())
    };
    eprintln!("REVIEW start: {}", elems());
    // 1. in-place write of resolv.conf in two chunks (the target, as an in-place writer would).
    let mut f =
        std::fs::OpenOptions::new().write(true).truncate(true).open(w.path("dns/resolv.conf")).unwrap();
    f.write_all(b"nameserver 198.51.100.5").unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!("REVIEW mid-write (file = 'nameserver 198.51.100.5'): {}", elems());
    f.write_all(b"4\n").unwrap();
    drop(f);
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!("REVIEW after write (198.51.100.54): {}", elems());
    // 2. resolv.conf missing
    std::fs::remove_file(w.path("dns/resolv.conf")).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!("REVIEW resolv.conf missing: {} state={}", elems(), w.status()["state"]);
    w.set_resolv(RESOLV);
    std::thread::sleep(Duration::from_millis(1500));
    // 3. broken config / unknown group at runtime and on SIGHUP
    for cfg in ["dns = \"bogus\"\n", "group = \"no-such-group-xyz\"\n", "group = \"root\"\n"] {
        std::fs::write(w.path("etc/ocsb/netlock.toml"), cfg).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.0.id() as i32), nix::sys::signal::Signal::SIGHUP)
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let st = w.status();
        eprintln!(
            "REVIEW cfg {cfg:?}: table {} state={} err={:?} probe={}",
            elems(),
            st["state"],
            st["error"].as_str().map(|s| &s[..s.len().min(70)]),
            w.probe(&["udp", "192.0.2.1", "9"])
        );
    }
}

#[test]
fn review_broken_input_blocks_repair() {
    let w = World::with_config(&format!("group = \"{GROUP}\"\nowner_flags = false\n"));
    let _d = w.daemon();
    eprintln!("REVIEW start: table={} probe={}", w.nft_list().is_some(), w.probe(&["udp", "192.0.2.1", "9"]));
    let bad = std::env::var("REVIEW_BAD").unwrap_or("config".into());
    if bad == "config" {
        std::fs::write(w.path("etc/ocsb/netlock.toml"), format!("group = \"{GROUP}\"\nowner_flags = false\ndns = \"resolvconf\"\n")).unwrap();
    } else {
        // resolv.conf target unreadable for the daemon (EACCES rather than ENOENT)
        std::fs::create_dir_all(w.path("dns/sub")).unwrap();
        std::fs::write(w.path("dns/sub/x"), RESOLV).unwrap();
        std::fs::set_permissions(w.path("dns"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1000));
    eprintln!("REVIEW after breaking {bad}: state={} err={:?}", w.status()["state"], w.status()["error"].as_str().map(|s| s.lines().next().unwrap_or("").to_string()));
    // What nftables.service does on start/reload (Debian's nftables.conf begins with it).
    ok(&mut w.lock.exec(&["nft", "flush", "ruleset"]));
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("REVIEW 3 s after `nft flush ruleset`: table present={} probe={}", w.nft_list().is_some(), w.probe(&["udp", "192.0.2.1", "9"]));
    eprintln!("REVIEW log:\n{}", logs(&w));
}

#[test]
fn review_dbus_edges() {
    let w = World::new();
    let bus = start_bus(&w);
    let _p = start_polkitd(&w, &bus, "");
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    let sock = w.path("bus").display().to_string();
    for (who, member, path, iface) in [
        ("root", "Remove", "/dev/ocsb/Netlock1", "-"),
        ("root", "Remove", "/", "dev.ocsb.Netlock1"),
        ("root", "Remove", "/dev/ocsb/Netlock1", "org.freedesktop.DBus.Properties"),
        ("ocsb-test", "Remove", "/dev/ocsb/Netlock1", "dev.ocsb.Netlock1"),
    ] {
        let mut c = if who == "root" { Command::new("/tmp/review/raw.py") } else {
            let mut c = Command::new("setpriv"); c.args(["--reuid=ocsb-test", "--regid=ocsb-test", "--init-groups", "/tmp/review/raw.py"]); c };
        let out = c.args([&sock, member, path, iface]).output().unwrap();
        eprintln!("REVIEW {who} {member} path={path} iface={iface}: {} table={}", String::from_utf8_lossy(&out.stdout).trim(), w.nft_list().is_some());
    }
}

#[test]
fn review_forged_polkit_reply() {
    let w = World::new();
    let bus = start_bus(&w);
    let _p = start_polkitd(&w, &bus, "");
    let _d = w.start_daemon(w.helper_as_service(&["daemon"]), &bus.address);
    let (_, out) = call(&bus, None, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.GetNameOwner", &["string:dev.ocsb.Netlock1"]);
    let owner = out.split('"').nth(1).unwrap().to_string();
    let sock = w.path("bus").display().to_string();
    let out = Command::new("setpriv").args(["--reuid=ocsb-test", "--regid=ocsb-test", "--init-groups", "/tmp/review/forge.py", &sock, &owner]).output().unwrap();
    eprintln!("REVIEW forge as ocsb-test to {owner}: {} table={}", String::from_utf8_lossy(&out.stdout).trim(), w.nft_list().is_some());
}
