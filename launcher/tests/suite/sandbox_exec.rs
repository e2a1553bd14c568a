//! `ocsb exec` end to end, as the ordinary user with the netlock in place: the settings are
//! mapped to the sandbox, the builtin filter is started, the lock is probed, the command runs as
//! the netlock group and its exit status comes back. Inside a network namespace the test
//! creates, with the lock installed there only.

use crate::support::sandbox::{World, shell_quote};

#[test]
fn exec_runs_as_the_netlock_group_and_passes_the_status_through() {
    let w = World::new();
    let o = std::process::Command::new("getent").args(["group", "opencode-sandbox"]).output().unwrap();
    assert!(o.status.success(), "group opencode-sandbox is missing: `groupadd -r opencode-sandbox`");
    let g: u32 = String::from_utf8_lossy(&o.stdout).split(':').nth(2).unwrap().trim().parse().unwrap();
    let table = format!(
        "table inet ocsb_netlock {{\n chain output {{\n  type filter hook output priority filter; policy accept;\n  \
         meta skgid {g} jump locked\n }}\n chain locked {{\n  ip daddr 127.0.0.0/8 accept\n  ip6 daddr ::1 accept\n  \
         reject with icmpx admin-prohibited\n }}\n}}\n"
    );
    let ocsb = shell_quote(&w.bin.display().to_string());
    let o = w.netns_script(&format!(
        "printf '%s' {table} | nft -f -; cd {proj}; trap 'rm -f exec.out exec.err' EXIT; \
         U() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME={home} setpriv --reuid 1990 --regid {g} --clear-groups -- \"$@\"; }}; \
         U git init -q .; U {ocsb} init >/dev/null; \
         U {ocsb} exec -- id -g >exec.out 2>exec.err </dev/null; echo \"ID $(cat exec.out)\"; \
         U {ocsb} exec -- sh -c 'exit 3' >/dev/null 2>&1 </dev/null || echo RC=$?; \
         U {ocsb} egress down >/dev/null 2>&1 </dev/null || true; cat exec.err >&2",
        table = shell_quote(&table),
        proj = shell_quote(&w.proj.display().to_string()),
        home = shell_quote(&w.home.display().to_string()),
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.lines().any(|l| l == format!("ID {g}")), "stdout is the command's alone: {out}\n{err}");
    assert!(out.contains("RC=3"), "{out}\n{err}");
}
