//! Escape attempt e39 of docs/escape-tests.md: background and double-forked daemons do not
//! survive the launcher; exit statuses and signals pass through.

use crate::support::sandbox::World;

#[test]
fn e39_everything_dies_within_a_second_of_sigkill_of_the_launcher() {
    everything_dies_with_the_launcher(World::new(), 1);
}

/// The same with a network namespace of its own, where the launcher also serves the relays.
#[test]
fn e39_isolated_everything_dies_within_a_second_of_sigkill_of_the_launcher() {
    everything_dies_with_the_launcher(World::isolated(), 2);
}

/// `tag` keeps the markers of the two variants apart when they run at the same time.
fn everything_dies_with_the_launcher(w: World, tag: u32) {
    let marker = format!("1000.{}{tag}", std::process::id());
    let inner = format!("setsid sleep {marker}1 & (sleep {marker}2 &); sleep {marker}3");
    let o = w.netns_script(&format!(
        "eval \"exec $SB sh -c '{inner}'\" & L=$!; \
         for i in $(seq 100); do [ $(pgrep -fc '^sleep {marker}') -ge 3 ] && break; sleep 0.05; done; \
         echo BEFORE $(pgrep -fc '^sleep {marker}'); \
         kill -9 $L; T0=$(date +%s%N); \
         while pgrep -f '^sleep {marker}' >/dev/null; do sleep 0.02; [ $(( ($(date +%s%N) - T0) / 1000000 )) -gt 3000 ] && break; done; \
         echo AFTER $(pgrep -fc '^sleep {marker}' || true) MS $(( ($(date +%s%N) - T0) / 1000000 ))"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("BEFORE 3"),
        "three sandbox processes were running: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let after = out.lines().find_map(|l| l.strip_prefix("AFTER ")).expect("AFTER line");
    let mut it = after.split_whitespace();
    assert_eq!(it.next(), Some("0"), "processes left: {out}");
    let ms: u64 = it.nth(1).unwrap().parse().unwrap();
    assert!(ms < 1000, "took {ms} ms");
}

#[test]
fn exit_status_and_signals_pass_through() {
    let w = World::new();
    assert_eq!(w.run(&w.spec(), &["sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(w.run(&w.spec(), &["sh", "-c", "kill -TERM $$"]).status.code(), Some(128 + 15));
    let o = w.run(&w.spec(), &["no-such-command-xyz"]);
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("command not found"));
}

#[test]
fn environment_is_the_spec_only() {
    let w = World::new();
    let o = w.netns_script("export AWS_SECRET_ACCESS_KEY=leak; eval \"$SB sh -c 'env | sort'\"");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("AWS_SECRET_ACCESS_KEY"), "{out}");
    assert!(!out.contains("OCSB_SANDBOX"), "the request does not leak into the command: {out}");
    assert!(out.contains("LANG=C.UTF-8"), "{out}");
}

#[test]
fn sandbox_zero_keeps_no_namespaces_but_runs() {
    let w = World::new();
    let mut spec = w.spec();
    spec["namespaces"] = serde_json::json!(false);
    let probe = w.probe.display().to_string();
    // without namespaces the host's /tmp is visible and nothing is masked (OCSB_SANDBOX=0)
    let v = w.probe_with(&spec, &["read", &w.home.join(".ssh/id_ed25519").display().to_string()]);
    assert_eq!(v, "OK PRIVATE KEY");
    let _ = probe;
}

#[test]
fn refuses_to_start_without_user_namespaces_and_says_why() {
    let w = World::new();
    let spec = w.write_spec(&w.spec());
    // user.max_user_namespaces is per user namespace: 0 in a wrapper namespace emulates a host
    // where unprivileged user namespaces are off.
    let o = w.netns_script(&format!(
        "setpriv --reuid 1990 --regid 1990 --clear-groups -- unshare --user --map-root-user sh -c \
         'echo 0 > /proc/sys/user/max_user_namespaces; exec {} __sandbox-run {} true' || echo RC=$?",
        w.bin.display(),
        spec.display()
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(String::from_utf8_lossy(&o.stdout).contains("RC=125"), "{err}");
    assert!(err.contains("unshare(user") && err.contains("max_user_namespaces"), "{err}");
}
