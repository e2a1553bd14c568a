//! The table itself: golden diff against netlock.nft, idempotence, remove, verify exit codes.
//! Every test runs in namespaces it creates (see tests/support/world.rs).

use crate::support::world::*;

use ocsb_netlock_helper::model::{Model, normalize};

fn model(w: &World) -> Model {
    Model::new(w.gid, &[DNS4.parse().unwrap(), DNS6.parse().unwrap()], false)
}

#[test]
fn applied_table_matches_the_contract_and_apply_is_idempotent() {
    let w = World::new();
    ok(&mut w.helper(&["apply"]));
    let first = w.nft_list().expect("table listed after apply");
    // One-shot apply: the table is orphaned at once (PERSIST kept, OWNER cleared).
    assert_eq!(
        normalize(&first),
        normalize(&model(&w).render(true)),
        "kernel table differs from netlock.nft:\n{first}"
    );
    assert!(first.contains(&format!("meta skgid {} jump locked", w.gid)));
    assert!(
        first.contains("elements = { 198.51.100.53 }") && first.contains("elements = { 2001:db8:1::53 }")
    );
    // `print` renders the same text the kernel shows.
    let printed = ok(&mut w.helper(&["print"]));
    assert_eq!(normalize(&printed), normalize(&first));

    ok(&mut w.helper(&["apply"]));
    assert_eq!(w.nft_list().unwrap(), first, "second apply changed the table");
    let out = ok(&mut w.helper(&["verify"]));
    assert!(out.starts_with("ok"), "{out}");
}

#[test]
fn table_owned_by_the_daemon_renders_as_the_contract() {
    let w = World::new();
    let _d = w.daemon();
    let text = w.nft_list().unwrap();
    // nft 1.0.x spells the owner flags `flags owner` and names the owning process.
    assert!(
        text.starts_with("table inet ocsb_netlock { # progname ocsb-netlock-he\n\tflags owner\n\n"),
        "{text}"
    );
    let expected = model(&w).render(true);
    let strip = |t: &str| t.replacen(" # progname ocsb-netlock-he", "", 1);
    assert_eq!(strip(&text), expected, "exact text differs from netlock.nft");
}

#[test]
fn remove_twice_and_verify_exit_codes() {
    let w = World::new();
    let code = |w: &World, args: &[&str]| run(&mut w.helper(args)).status.code();
    assert_eq!(code(&w, &["verify"]), Some(2), "missing before apply");
    ok(&mut w.helper(&["apply"]));
    assert_eq!(code(&w, &["verify"]), Some(0));
    // resolv.conf changed after a one-shot apply: drift, and the diff names the DNS set.
    w.set_resolv("nameserver 198.51.100.54\n");
    let out = run(&mut w.helper(&["verify"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("-\t\telements = { 198.51.100.54 }"));
    w.set_resolv(RESOLV);
    assert_eq!(code(&w, &["verify"]), Some(0));

    // Someone else edited the (orphaned) table: drift, with a diff.
    ok(&mut w.lock.exec(&["nft", "insert", "rule", "inet", "ocsb_netlock", "locked", "accept"]));
    let out = run(&mut w.helper(&["verify"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("+\t\taccept"));

    ok(&mut w.helper(&["remove"]));
    assert!(w.nft_list().is_none(), "table still there after remove");
    ok(&mut w.helper(&["remove"]));
    assert_eq!(code(&w, &["verify"]), Some(2));
}

#[test]
fn a_plain_table_of_the_same_name_is_replaced_atomically() {
    let w = World::new();
    ok(&mut w.lock.exec(&["nft", "add table inet ocsb_netlock; add chain inet ocsb_netlock junk"]));
    ok(&mut w.helper(&["apply"]));
    let text = w.nft_list().unwrap();
    assert!(!text.contains("junk") && text.contains("\tflags"), "{text}");
}

#[test]
fn bad_config_is_refused_with_file_and_line_and_nothing_is_applied() {
    let w = World::with_config("group = \"opencode-sandbox\"\ntable = \"other\"\n");
    let out = run(&mut w.helper(&["apply"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/etc/ocsb/netlock.toml") && err.contains("line 2") && err.contains("table"),
        "{err}"
    );
    assert!(w.nft_list().is_none());
    let out = run(&mut w.helper(&["print"]));
    assert_eq!(out.status.code(), Some(1), "print reads the same config");
}

#[test]
fn print_shows_the_model_and_static_and_none_dns_modes() {
    let w = World::with_config("dns = { static = [\"203.0.113.53\"] }\n");
    let out = ok(&mut w.helper(&["print"]));
    assert!(
        out.contains("elements = { 203.0.113.53 }") && out.contains(&format!("skgid {} jump", w.gid)),
        "{out}"
    );
    let w = World::with_config("dns = \"none\"\n");
    ok(&mut w.helper(&["apply"]));
    assert!(!w.nft_list().unwrap().contains("elements"));
    ok(&mut w.helper(&["verify"]));
}

/// `dns = "none"` means no DNS, also where the resolver is on loopback (systemd-resolved,
/// dnsmasq): with a loopback resolver in resolv.conf, `resolv-conf` reaches it and `none` does
/// not; other loopback ports and the remote resolver's absence hold either way.
#[test]
fn dns_none_closes_a_loopback_resolver_too() {
    for (config, expect) in [("dns = \"resolv-conf\"\n", "ok"), ("dns = \"none\"\n", "EPERM")] {
        let w = World::with_config(config);
        w.set_resolv("nameserver 127.0.0.53\n");
        let _resolver = w.local_servers("53");
        ok(&mut w.helper(&["apply"]));
        assert_eq!(w.probe(&["udp", "127.0.0.53", "53"]), expect, "{config}");
        assert_eq!(w.probe(&["tcp", "127.0.0.53", "53"]), if expect == "ok" { "ok" } else { "EHOSTUNREACH" });
        assert_eq!(w.probe(&["tcp-self", "127.0.0.1"]), "ok", "other loopback ports stay open");
        assert_eq!(w.probe(&["udp", DNS4, "53"]), "EPERM", "the remote resolver is not in resolv.conf");
        ok(&mut w.helper(&["verify"]));
    }
}

#[test]
fn config_must_be_root_owned_and_name_a_system_group() {
    let w = World::new();
    let cfg = w.path("etc/ocsb/netlock.toml");
    nix::unistd::chown(&cfg, Some(TEST_UID.into()), None).unwrap();
    let out = run(&mut w.helper(&["apply"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be owned by root"), "{out:?}");
    nix::unistd::chown(&cfg, Some(0.into()), None).unwrap();
    // A login user's group (gid >= 1000) would lock that user everywhere: refused.
    std::fs::write(&cfg, format!("group = \"{TEST_USER}\"\n")).unwrap();
    let out = run(&mut w.helper(&["apply"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be a system group"), "{out:?}");
    assert!(w.nft_list().is_none());
}
