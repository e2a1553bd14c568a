//! A private system bus (dbus-daemon with its own config and our bus policy) and a real polkitd
//! on it, for the D-Bus tests. Callers use dbus-send.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::world::*;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

pub struct Bus {
    pub address: String,
    _daemon: Proc,
}

pub fn start_bus(w: &World) -> Bus {
    for (tool, pkg) in [
        ("/usr/bin/dbus-daemon", "dbus"),
        ("/usr/bin/dbus-send", "dbus"),
        ("/usr/lib/polkit-1/polkitd", "polkitd"),
    ] {
        assert!(Path::new(tool).exists(), "{tool} missing: install the Debian package `{pkg}`");
    }
    let sysd = w.path("system.d");
    fs::create_dir_all(&sysd).unwrap();
    fs::copy(format!("{REPO}/polkit/dev.ocsb.Netlock1.conf"), sysd.join("dev.ocsb.Netlock1.conf")).unwrap();
    fs::copy(
        "/usr/share/dbus-1/system.d/org.freedesktop.PolicyKit1.conf",
        sysd.join("org.freedesktop.PolicyKit1.conf"),
    )
    .unwrap();
    // Debian's system.conf policy, minus forking, the pid file, activation and the real socket.
    let conf = format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <auth>EXTERNAL</auth>
  <listen>unix:path={bus}</listen>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <includedir>{sysd}</includedir>
</busconfig>
"#,
        bus = w.path("bus").display(),
        sysd = sysd.display()
    );
    fs::write(w.path("bus.conf"), conf).unwrap();
    // The bus logs every message its policy rejects (a flood test makes hundreds): into the
    // world's directory, not the test run's output.
    let log = fs::File::create(w.path("bus.log")).unwrap();
    let mut child = Command::new("dbus-daemon")
        .args(["--nofork", "--print-address", &format!("--config-file={}", w.path("bus.conf").display())])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut address = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut address).unwrap();
    assert!(address.starts_with("unix:"), "dbus-daemon did not start: {address:?}");
    Bus { address: address.trim().to_string(), _daemon: Proc(child) }
}

/// polkitd against the private bus, with our actions file and the given rules (JavaScript).
/// Started as root like its unit does; it switches to user polkitd itself.
pub fn start_polkitd(w: &World, bus: &Bus, rules: &str) -> Proc {
    let actions = w.path("actions");
    let rules_dir = w.path(&format!("rules-{}", rules.len()));
    fs::create_dir_all(&actions).unwrap();
    fs::create_dir_all(&rules_dir).unwrap();
    fs::copy(format!("{REPO}/polkit/dev.ocsb.netlock.policy"), actions.join("dev.ocsb.netlock.policy"))
        .unwrap();
    if !rules.is_empty() {
        fs::write(rules_dir.join("10-ocsb-test.rules"), rules).unwrap();
    }
    let script = format!(
        "mount -t overlay overlay -o lowerdir={a}:/usr/share/polkit-1/actions /usr/share/polkit-1/actions
         mount -t overlay overlay -o lowerdir={r}:/etc/polkit-1/rules.d /etc/polkit-1/rules.d
         exec /usr/lib/polkit-1/polkitd --no-debug",
        a = actions.display(),
        r = rules_dir.display()
    );
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-ec", &script])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    let up = wait_for(Duration::from_secs(15), || {
        call(
            bus,
            None,
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
            &["string:org.freedesktop.PolicyKit1"],
        )
        .1
        .contains("boolean true")
    });
    assert!(up, "polkitd did not claim org.freedesktop.PolicyKit1 on the private bus");
    p
}

/// dbus-send as `user` (None = root); returns (success, output).
pub fn call(
    bus: &Bus,
    user: Option<&str>,
    dest: &str,
    path: &str,
    method: &str,
    args: &[&str],
) -> (bool, String) {
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={u}"), &format!("--regid={u}"), "--init-groups", "dbus-send"]);
            c
        }
        None => Command::new("dbus-send"),
    };
    let out = c
        .args(["--system", "--print-reply", &format!("--dest={dest}"), path, method])
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

pub fn netlock(bus: &Bus, user: Option<&str>, method: &str) -> (bool, String) {
    call(bus, user, "dev.ocsb.Netlock1", "/dev/ocsb/Netlock1", &format!("dev.ocsb.Netlock1.{method}"), &[])
}
