//! The netlock gid: the sandbox runs with gid `opencode-sandbox`, the lock is probed before the
//! command starts and while it runs. Each test builds its own network namespace with a dummy
//! address 192.0.2.1 (documentation range) on its loopback and an nftables table in that namespace only.

use crate::support::sandbox::{World, shell_join};
use serde_json::json;

fn netlock_gid() -> u32 {
    let o = std::process::Command::new("getent").args(["group", "opencode-sandbox"]).output().unwrap();
    assert!(
        o.status.success(),
        "group opencode-sandbox is missing: `groupadd -r opencode-sandbox` (tests/install-deps.sh creates it)"
    );
    String::from_utf8_lossy(&o.stdout).split(':').nth(2).unwrap().trim().parse().unwrap()
}

fn require_nft() {
    let ok = std::process::Command::new("sh")
        .args(["-c", "command -v nft"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "`nft` is missing: install the Debian package nftables");
}

/// The lock as the helper installs it (netlock-helper/netlock.nft, simplified), for gid G, installed in the test's namespace.
fn table(gid: u32) -> String {
    format!(
        "table inet ocsb_netlock {{\n chain output {{\n  type filter hook output priority filter; policy accept;\n  meta skgid {gid} jump locked\n }}\n \
         chain locked {{\n  ip daddr 127.0.0.0/8 accept\n  ip6 daddr ::1 accept\n  reject with icmpx admin-prohibited\n }}\n}}\n"
    )
}

/// Spec with the netlock required and the gid inherited from `setpriv --regid G`.
fn locked_spec(w: &World, gid: u32) -> serde_json::Value {
    let mut spec = w.spec();
    spec["netlock"] = json!({"Required": {"gid": gid, "acquire": "Inherited", "probe_interval": {"secs": 0, "nanos": 300_000_000}}});
    spec
}

fn as_group(w: &World, spec: &serde_json::Value, gid: u32, cmd: &[&str]) -> String {
    let mut words = w.sandbox_words(spec, cmd);
    // sandbox_words starts with `setpriv --reuid U --regid U`: switch the gid to G
    words[4] = gid.to_string();
    shell_join(&words)
}

const WORLD: &str = "ip addr add 192.0.2.1/32 dev lo; \
    python3 -c 'import socket,time; s=socket.socket(); s.bind((\"192.0.2.1\",80)); s.listen(8); time.sleep(30)' & SRV=$!; sleep 0.3";

#[test]
fn e29_e31_direct_egress_is_rejected_for_the_sandbox_gid() {
    require_nft();
    let g = netlock_gid();
    let w = World::new();
    let spec = locked_spec(&w, g);
    let probe = w.probe.display().to_string();
    let o = w.netns_script(&format!(
        "{WORLD}; printf '%s' '{}' | nft -f -; \
         echo CONTROL $(setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} tcp-connect 192.0.2.1 80); \
         echo TCP $({}); echo UDP $({}); echo GID $({}); kill $SRV",
        table(g),
        as_group(&w, &spec, g, &["python3", &probe, "tcp-connect", "192.0.2.1", "80"]),
        as_group(&w, &spec, g, &["python3", &probe, "udp-send", "192.0.2.1", "53"]),
        as_group(&w, &spec, g, &["id", "-g"]),
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CONTROL OK"), "{out} {}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("TCP ERR EACCES") || out.contains("TCP ERR EHOSTUNREACH"),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("UDP ERR EPERM"), "{out}");
    assert!(out.contains(&format!("GID {g}")), "{out}");
}

#[test]
fn start_is_refused_without_the_lock() {
    let g = netlock_gid();
    let w = World::new();
    let spec = locked_spec(&w, g);
    let o =
        w.netns_script(&format!("{WORLD}; {} || echo RC=$?; kill $SRV", as_group(&w, &spec, g, &["true"])));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("RC=125"), "{out} {err}");
    assert!(err.contains("NOT working"), "{err}");
}

#[test]
fn start_is_refused_with_the_wrong_gid() {
    let g = netlock_gid();
    let w = World::new();
    let spec = locked_spec(&w, g);
    let words = shell_join(&w.sandbox_words(&spec, &["true"])); // gid 1990, not G
    let o = w.netns_script(&format!("{words} || echo RC=$?"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(String::from_utf8_lossy(&o.stdout).contains("RC=125"), "{err}");
    assert!(err.contains("not the netlock group"), "{err}");
}

#[test]
fn a_lock_removed_while_running_kills_the_sandbox() {
    require_nft();
    let g = netlock_gid();
    let w = World::new();
    let spec = locked_spec(&w, g);
    let o = w.netns_script(&format!(
        "{WORLD}; printf '%s' '{}' | nft -f -; T0=$(date +%s%N); \
         ( sleep 1; nft delete table inet ocsb_netlock ) & \
         {} || echo RC=$? MS=$(( ($(date +%s%N) - T0) / 1000000 )); kill $SRV",
        table(g),
        as_group(&w, &spec, g, &["sleep", "20"]),
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("RC=125"), "{out} {err}");
    assert!(err.contains("NOT working") && err.contains("stopped"), "{err}");
    let ms: u64 = out.split("MS=").nth(1).unwrap().trim().parse().unwrap();
    assert!(ms < 3000, "killed {ms} ms after start (lock removed at 1000 ms, probe every 300 ms)");
}

/// The real acquisition path: the launcher runs as the user's own gid, the setgid shim
/// `ocsb-netlock-exec` (installed `2755 root:opencode-sandbox`) puts stage 2 into the group.
#[test]
fn gid_through_the_setgid_shim() {
    require_nft();
    let g = netlock_gid();
    let w = World::new();
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_ocsb")).with_file_name("ocsb-netlock-exec");
    assert!(
        built.exists(),
        "{} is missing: build it first (`cargo build -p ocsb-netlock-helper --bin ocsb-netlock-exec`, \
         or `cargo test --workspace`)",
        built.display()
    );
    // An installation layout: <prefix>/libexec/ocsb/ocsb-netlock-exec execs <prefix>/bin/ocsb.
    let prefix = w.root.join("prefix");
    let shim = prefix.join("libexec/ocsb/ocsb-netlock-exec");
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::copy(&w.bin, prefix.join("bin/ocsb")).unwrap();
    std::fs::copy(&built, &shim).unwrap();
    crate::support::sandbox::run_ok(std::process::Command::new("chown").arg(format!("root:{g}")).arg(&shim));
    crate::support::sandbox::run_ok(std::process::Command::new("chmod").args(["2755"]).arg(&shim));
    crate::support::sandbox::run_ok(std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(&prefix));
    let mut spec = w.spec();
    spec["netlock"] = json!({"Required": {"gid": g, "acquire": {"Shim": {"path": shim}},
                              "probe_interval": {"secs": 1, "nanos": 0}}});
    let probe = w.probe.display().to_string();
    let launcher = prefix.join("bin/ocsb").display().to_string();
    let run = |cmd: &[&str]| {
        let mut words = w.sandbox_words(&spec, cmd);
        words[7] = launcher.clone(); // the installed ocsb, next to the shim
        shell_join(&words)
    };
    let o = w.netns_script(&format!(
        "{WORLD}; printf '%s' '{}' | nft -f -; echo GID $({}); echo TCP $({}); kill $SRV",
        table(g),
        run(&["id", "-g"]),
        run(&["python3", &probe, "tcp-connect", "192.0.2.1", "80"]),
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains(&format!("GID {g}")), "the sandbox runs as the netlock group: {out} {err}");
    assert!(out.contains("TCP ERR EACCES") || out.contains("TCP ERR EHOSTUNREACH"), "{out} {err}");
}
