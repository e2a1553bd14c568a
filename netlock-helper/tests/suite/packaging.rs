//! The unit, sysusers and polkit files under packaging/ and polkit/, checked with the real tools.

use crate::support::world::*;

use std::fs;
use std::path::Path;
use std::process::Command;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn need(tool: &str, pkg: &str) {
    assert!(Path::new(tool).exists(), "{tool} missing: install the Debian package `{pkg}`");
}

/// The unit with ExecStart pointing at the freshly built helper (verify checks it is executable).
fn unit_copy(dir: &TempDir) -> String {
    let text = fs::read_to_string(format!("{REPO}/packaging/systemd/ocsb-netlock.service")).unwrap();
    assert!(text.contains("ExecStart=/usr/libexec/ocsb/ocsb-netlock-helper daemon"));
    let path = dir.0.join("ocsb-netlock.service");
    fs::write(&path, text.replace("/usr/libexec/ocsb/ocsb-netlock-helper", HELPER)).unwrap();
    path.display().to_string()
}

#[test]
fn unit_verifies_and_scores_ok_offline() {
    need("/usr/bin/systemd-analyze", "systemd");
    let dir = TempDir::new();
    let unit = unit_copy(&dir);
    let out = run(Command::new("systemd-analyze").args(["verify", &unit]));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out =
        run(Command::new("systemd-analyze").args(["security", "--offline=yes", "--threshold=20", &unit]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exposure above 2.0:\n{text}");
    let line = text.lines().find(|l| l.contains("Overall exposure level")).expect("no exposure line");
    let score: f64 = line.split(':').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(score <= 2.0, "{line}");
    // The lock only works in the initial network and user namespace, with CAP_NET_ADMIN alone.
    let unit_text = fs::read_to_string(&unit).unwrap();
    for forbidden in ["PrivateNetwork=", "PrivateUsers=", "User=root"] {
        assert!(!unit_text.lines().any(|l| l.starts_with(forbidden)), "{forbidden} set");
    }
    assert!(
        unit_text.contains("\nCapabilityBoundingSet=CAP_NET_ADMIN\n")
            && unit_text.contains("\nType=notify\n")
    );
}

#[test]
fn sysusers_creates_a_system_group_and_user() {
    need("/usr/bin/systemd-sysusers", "systemd");
    let dir = TempDir::new();
    fs::create_dir_all(dir.0.join("etc")).unwrap();
    let conf = format!("{REPO}/packaging/sysusers.d/ocsb.conf");
    let out = run(Command::new("systemd-sysusers").arg(format!("--root={}", dir.0.display())).arg(&conf));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let group = fs::read_to_string(dir.0.join("etc/group")).unwrap();
    let passwd = fs::read_to_string(dir.0.join("etc/passwd")).unwrap();
    let gid: u32 = group
        .lines()
        .find(|l| l.starts_with("opencode-sandbox:"))
        .expect("group")
        .split(':')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(gid > 0 && gid < 1000, "gid {gid} is not a system gid");
    let user = passwd.lines().find(|l| l.starts_with("ocsb-netlock:")).expect("user");
    let uid: u32 = user.split(':').nth(2).unwrap().parse().unwrap();
    assert!(uid > 0 && uid < 1000 && user.ends_with(":/usr/sbin/nologin"), "{user}");
}

#[test]
fn polkit_and_dbus_files_are_well_formed() {
    let policy = fs::read_to_string(format!("{REPO}/polkit/dev.ocsb.netlock.policy")).unwrap();
    for (action, default) in [("apply", "<allow_any>auth_admin_keep"), ("remove", "<allow_any>auth_admin<")] {
        let start =
            policy.find(&format!("id=\"dev.ocsb.netlock.{action}\"")).unwrap_or_else(|| panic!("{action}"));
        let block = &policy[start..start + policy[start..].find("</action>").unwrap()];
        assert!(block.contains(default), "{action}: {block}");
        assert!(block.contains("unix-user:ocsb-netlock"), "{action} lacks the owner annotation");
    }
    let conf = fs::read_to_string(format!("{REPO}/polkit/dev.ocsb.Netlock1.conf")).unwrap();
    assert!(
        conf.contains("<policy user=\"ocsb-netlock\">")
            && conf.contains("<allow own=\"dev.ocsb.Netlock1\"/>")
    );
    let svc = fs::read_to_string(format!("{REPO}/polkit/dev.ocsb.Netlock1.service")).unwrap();
    assert!(
        svc.contains("SystemdService=dbus-dev.ocsb.Netlock1.service") && svc.contains("User=ocsb-netlock")
    );
    let unit = fs::read_to_string(format!("{REPO}/packaging/systemd/ocsb-netlock.service")).unwrap();
    assert!(unit.contains("Alias=dbus-dev.ocsb.Netlock1.service"));
    // xmllint is optional; dbus-daemon itself parsed the bus policy in suite/dbus.rs.
}

#[test]
fn the_shipped_config_parses_to_the_defaults() {
    let text = fs::read_to_string(format!("{REPO}/packaging/etc/netlock.toml")).unwrap();
    let cfg = ocsb_netlock_helper::config::Config::parse(&text).unwrap();
    assert_eq!(cfg, ocsb_netlock_helper::config::Config::default());
}
