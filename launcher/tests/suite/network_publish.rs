//! Published ports (`OCSB_PUBLISH`, isolated mode), as the user types it: `ocsb exec` runs a dev
//! server inside, and the user's own programs on the host reach it at `127.0.0.1:<port>` while it
//! listens — and only then, only there, and never in place of a host program's port.
//!
//! The host side runs as root in the scenario's namespace (the user's browser, a host service
//! that holds a port); a second namespace joined by veth stands for another machine.

use crate::support::sandbox::{ORIGIN_NS, World, has, scenario};

/// Inside: a dev server on 3000 (and on 3100, which a host program holds, and on 4196, the
/// web front's port), then the host looks, then the dev server stops, then the host looks again.
#[test]
fn a_server_the_agent_starts_is_published_on_the_hosts_loopback_while_it_listens() {
    let w = World::new();
    let body = format!(
        r#"{ORIGIN_NS}
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\n' > .opencode-sandbox/local/sandbox.conf
        chown -R 1990 .opencode-sandbox/local
        SRV="$P/srv"; mkdir -p "$SRV"; echo agent-dev-server > "$SRV/hello.txt"; chown -R 1990 "$SRV"
        HOSTSRV=$(mktemp -d); echo host-own-service > "$HOSTSRV/hello.txt"; chmod -R a+rX "$HOSTSRV"
        # A host program that holds 3100 on the host's loopback.
        python3 -m http.server 3100 --bind 127.0.0.1 --directory "$HOSTSRV" >/dev/null 2>&1 &
        HOLDER=$!
        sleep 0.5
        (
          for i in $(seq 300); do [ -e "$P/up" ] && break; sleep 0.1; done
          sleep 1
          echo "host-get $(curl -s --max-time 5 http://127.0.0.1:3000/hello.txt)"
          echo "host-get6 $(curl -s -g --max-time 5 'http://[::1]:3000/hello.txt')"
          echo "host-3100 $(curl -s --max-time 5 http://127.0.0.1:3100/hello.txt)"
          echo "host-3101 $(curl -s --max-time 5 http://127.0.0.1:3101/hello.txt)"
          curl -s --max-time 3 http://127.0.0.1:4196/hello.txt >/dev/null; echo "host-4196 $?"
          O curl -s --max-time 3 http://192.0.2.254:3000/hello.txt >/dev/null; echo "from-another-namespace $?"
          touch "$P/checked"
          for i in $(seq 100); do [ -e "$P/stopped" ] && break; sleep 0.1; done
          sleep 1
          curl -s --max-time 3 http://127.0.0.1:3000/hello.txt >/dev/null; echo "after-stop $?"
          echo "holder-still $(curl -s --max-time 5 http://127.0.0.1:3100/hello.txt)"
          touch "$P/done"
        ) > "$P/hostside.log" 2>&1 &
        X 'python3 -m http.server 3000 --bind 127.0.0.1 --directory '"$SRV"' >/dev/null 2>&1 & S=$!
           python3 -m http.server 3100 --bind 0.0.0.0 --directory '"$SRV"' >/dev/null 2>&1 &
           python3 -m http.server 4196 --bind 127.0.0.1 --directory '"$SRV"' >/dev/null 2>&1 &
           sleep 0.5; touch up
           for i in $(seq 200); do [ -e checked ] && break; sleep 0.1; done
           kill $S
           touch stopped
           for i in $(seq 200); do [ -e done ] && break; sleep 0.1; done
           echo inside-done' 2>&1 | sed 's/^/exec: /'
        cat "$P/hostside.log"
        kill $HOLDER
        ip netns pids "$ON" | xargs -r kill; ip netns del "$ON""#
    );
    let (out, err) = scenario(&w, &body);
    has(&out, "exec: inside-done", &err);
    // The dev server, from the host, on both loopback addresses.
    has(&out, "host-get agent-dev-server", &err);
    has(&out, "host-get6 agent-dev-server", &err);
    // The launcher said so, naming the program.
    let published = out.lines().find(|l| l.starts_with("exec: ocsb: published: http://127.0.0.1:3000 "));
    assert!(
        published.is_some_and(|l| l.contains("(python3, pid ")),
        "no publication line for 3000:\n{out}\n{err}"
    );
    // A port a host program holds is not taken: the host program still answers there, and the
    // agent's server is offered on the next free port, which the user is told.
    has(&out, "host-3100 host-own-service", &err);
    has(&out, "holder-still host-own-service", &err);
    has(&out, "host-3101 agent-dev-server", &err);
    assert!(
        out.lines().any(|l| l.starts_with("exec: ocsb: published: http://127.0.0.1:3101 ")
            && l.ends_with("127.0.0.1:3100 is in use on the host")),
        "the moved publication is not explained:\n{out}"
    );
    // The front's port is ocsb's: not published, and said why.
    has(&out, "host-4196 7", &err);
    has(&out, "exec: ocsb: not published: port 4196 inside (4196 is a port ocsb serves or relays)", &err);
    // ocsb's own listeners inside (the filter's port, the transparent and DNS ports) are never
    // taken for the agent's: the only refusal said is the agent's server on 4196.
    let refusals: Vec<&str> = out.lines().filter(|l| l.contains("not published")).collect();
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    // Loopback only: another machine on the host's network gets nothing.
    has(&out, "from-another-namespace 7", &err);
    // Stopped inside: withdrawn on the host.
    has(&out, "after-stop 7", &err);
    has(&out, "exec: ocsb: unpublished: http://127.0.0.1:3000 (the server stopped listening)", &err);
}

/// `OCSB_PUBLISH=0`: nothing is published; a list publishes only what it names.
#[test]
fn publishing_follows_the_setting() {
    let w = World::new();
    let body = r#"
        mkdir -p .opencode-sandbox/local
        chown -R 1990 .opencode-sandbox/local
        SRV="$P/srv"; mkdir -p "$SRV"; echo agent-dev-server > "$SRV/hello.txt"; chown -R 1990 "$SRV"
        for setting in 0 3000; do
          printf 'OCSB_NETWORK=isolated\nOCSB_PUBLISH=%s\n' "$setting" > .opencode-sandbox/local/sandbox.conf
          rm -f "$P/up" "$P/checked"
          (
            for i in $(seq 300); do [ -e "$P/up" ] && break; sleep 0.1; done
            sleep 1
            curl -s --max-time 3 http://127.0.0.1:3000/hello.txt >/dev/null; echo "$setting 3000 $?"
            curl -s --max-time 3 http://127.0.0.1:8080/hello.txt >/dev/null; echo "$setting 8080 $?"
            touch "$P/checked"
          ) > "$P/hostside.log" 2>&1 &
          X 'python3 -m http.server 3000 --bind 127.0.0.1 --directory '"$SRV"' >/dev/null 2>&1 &
             python3 -m http.server 8080 --bind 127.0.0.1 --directory '"$SRV"' >/dev/null 2>&1 &
             sleep 0.5; touch up
             for i in $(seq 200); do [ -e checked ] && break; sleep 0.1; done
             echo inside-done' 2>&1 | sed "s/^/exec $setting: /"
          wait
          cat "$P/hostside.log"
        done"#;
    let (out, err) = scenario(&w, body);
    has(&out, "exec 0: inside-done", &err);
    has(&out, "exec 3000: inside-done", &err);
    has(&out, "0 3000 7", &err);
    has(&out, "0 8080 7", &err);
    has(&out, "3000 3000 0", &err);
    has(&out, "3000 8080 7", &err);
    assert!(!out.lines().any(|l| l.starts_with("exec 0: ocsb: published")), "{out}");
    has(&out, "exec 3000: ocsb: not published: port 8080 inside (not in OCSB_PUBLISH)", &err);
}

/// What the agent cannot make the host hold: more than 32 publications (it listens on 40
/// ports), or a port of the host's ephemeral range (where outgoing connections get their local
/// ports).
#[test]
fn the_agent_cannot_make_the_host_hold_its_ports() {
    let w = World::new();
    let body = r#"
        mkdir -p .opencode-sandbox/local
        printf 'OCSB_NETWORK=isolated\n' > .opencode-sandbox/local/sandbox.conf
        chown -R 1990 .opencode-sandbox/local
        LO=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
        (
          for i in $(seq 300); do [ -e "$P/up" ] && break; sleep 0.1; done
          sleep 6
          python3 -c 'import socket, sys
n = 0
for p in range(5000, 5040):
    try: socket.create_connection(("127.0.0.1", p), timeout=2).close(); n += 1
    except OSError: pass
print("reachable", n)
try: socket.create_connection(("127.0.0.1", int(sys.argv[1]) + 7), timeout=2).close(); print("ephemeral reachable")
except OSError: print("ephemeral refused")' "$LO"
          touch "$P/checked"
        ) > "$P/hostside.log" 2>&1 &
        X 'python3 -c "import socket, time, os, sys
ls = []
for p in list(range(5000, 5040)) + [int(sys.argv[1]) + 7]:
    s = socket.socket(); s.bind((\"127.0.0.1\", p)); s.listen(4); ls.append(s)
open(\"up\", \"w\").close()
for i in range(200):
    if os.path.exists(\"checked\"): break
    time.sleep(0.1)
print(\"inside-done\")" '"$LO" 2>&1 | sed 's/^/exec: /'
        wait
        cat "$P/hostside.log""#;
    let (out, err) = scenario(&w, body);
    has(&out, "exec: inside-done", &err);
    has(&out, "reachable 32", &err);
    has(&out, "ephemeral refused", &err);
    let published = out.lines().filter(|l| l.starts_with("exec: ocsb: published:")).count();
    assert_eq!(published, 32, "{out}");
    assert!(out.lines().filter(|l| l.contains("32 servers are published already")).count() == 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("is in the host's ephemeral port range, which outgoing connections use")),
        "{out}"
    );
}
