//! The builtin backend's lifecycle in the lab namespaces: reload under load, invalid rules keep
//! the old policy, in-flight tunnels survive a reload, status reports stale/current, logs.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::client::{self, read_reply};
use crate::support::lab::{BUILTIN_PORT, Lab, RULES};
use crate::support::topology::FILTER_ADDR;

fn proxy() -> SocketAddr {
    format!("127.0.0.1:{BUILTIN_PORT}").parse().unwrap()
}

#[test]
fn reload_applies_fast_keeps_old_rules_on_error_and_keeps_tunnels() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    let inst = lab.instance();
    let p = proxy();

    let st = ocsb_egress::status(&inst).unwrap();
    assert!(st.running, "{st:?}");
    assert_eq!(st.config, "current");
    // Loopback, and the lab's stand-in for the docker gateway.
    assert_eq!(st.listen, vec![format!("127.0.0.1:{BUILTIN_PORT}"), format!("{FILTER_ADDR}:{BUILTIN_PORT}")]);

    assert_eq!(lab.client(move || client::get(p, "http://pub.test.net/", "x")).unwrap().status, 200);
    // A request body is streamed to the origin; hop-by-hop and proxy credentials are not.
    let post = "POST http://pub.test.net/post HTTP/1.1\r\nHost: pub.test.net\r\nProxy-Authorization: Basic c2VjcmV0\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    assert_eq!(lab.client(move || client::raw(p, post)).unwrap().status, 200);
    // Keep-alive: two requests on one client connection, each decided on its own.
    let two = lab.client(move || {
        let mut s = TcpStream::connect(p).unwrap();
        s.write_all(b"GET http://pub.test.net/a HTTP/1.1\r\nHost: pub.test.net\r\n\r\n").unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let a = read_reply(&mut r, false).unwrap().status;
        s.write_all(b"GET http://www.example.com/b HTTP/1.1\r\nHost: www.example.com\r\n\r\n").unwrap();
        let b = read_reply(&mut r, false).unwrap().status;
        (a, b)
    });
    assert_eq!(two, (200, 403));

    // An open tunnel, kept across the reload (the stream lives in the filter namespace thread).
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(u16, u16)>();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel::<()>();
    lab.topo.filter.spawn(move || {
        let mut s = TcpStream::connect(p).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"CONNECT pub.test.net:443 HTTP/1.1\r\nHost: pub.test.net:443\r\n\r\n").unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let first = read_reply(&mut r, true).unwrap().status;
        opened_tx.send(()).unwrap();
        rx.recv().unwrap(); // wait for the reload
        s.write_all(b"GET /after-reload HTTP/1.1\r\nHost: pub.test.net\r\n\r\n").unwrap();
        let second = read_reply(&mut r, false).map(|r| r.status).unwrap_or(0);
        done_tx.send((first, second)).unwrap();
    });

    opened_rx.recv_timeout(Duration::from_secs(10)).expect("tunnel did not open");

    // Background load during the reload.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let load = lab.topo.filter.spawn(move || {
        let mut n = 0;
        while n < 20 || !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            let r = client::get(p, "http://jira.example.com/", "x").map(|r| r.status);
            assert_eq!(r, Some(200), "request {n} under load failed");
            n += 1;
        }
        n
    });

    // Change a rule: pub.test.net becomes blocked.
    lab.write_rules(&format!("{RULES}block pub.test.net\n"));
    let st = ocsb_egress::status(&inst).unwrap();
    assert_eq!(st.config, "stale", "{st:?}");
    let t0 = Instant::now();
    let r = ocsb_egress::up(&inst, &inst.load_policy().unwrap(), ocsb_egress::lifecycle::stderr_progress())
        .unwrap();
    assert_eq!(r.action, ocsb_egress::UpAction::Reloaded);
    let mut applied = None;
    while t0.elapsed() < Duration::from_secs(1) {
        let reply = lab.client(move || client::get(p, "http://pub.test.net/", "x")).unwrap();
        if reply.status == 403 {
            assert_eq!(
                reply.header("x-egress-decision").map(|h| h.starts_with("block:project:")),
                Some(true),
                "{reply:?}"
            );
            applied = Some(t0.elapsed());
            break;
        }
    }
    let applied = applied.expect("the new rule did not apply within 1 s");
    eprintln!("reload applied after {applied:?}");
    assert_eq!(ocsb_egress::status(&inst).unwrap().config, "current");

    tx.send(()).unwrap();
    let (first, second) = done_rx.recv_timeout(Duration::from_secs(15)).unwrap();
    assert_eq!((first, second), (200, 200), "the tunnel opened before the reload was cut");

    // An invalid file: compiling for `up` fails naming file and line; the old (new) rules stay
    // in force.
    lab.write_rules(&format!("{RULES}block pub.test.net\nallow-regex ^[a-\n"));
    let err = inst.load_policy().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("egress.conf:8"), "error does not name file:line: {msg}");
    assert!(err.is_input(), "{err:?}");
    let reply = lab.client(move || client::get(p, "http://pub.test.net/", "x")).unwrap();
    assert_eq!(reply.status, 403, "old rules not kept after an invalid reload");
    assert_eq!(lab.client(move || client::get(p, "http://jira.example.com/", "x")).unwrap().status, 200);
    // The same through the control socket directly (a SIGHUP-style reload by the process).
    let r = ocsb_egress::builtin::control::reload(&inst.paths().control_socket(), Duration::from_secs(5))
        .unwrap();
    assert!(!r.ok);
    assert!(r.error.as_deref().unwrap().contains("egress.conf:8"), "{r:?}");
    let st = ocsb_egress::status(&inst).unwrap();
    assert!(st.running && st.rules_error.is_some(), "{st:?}");

    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let n = load.join().unwrap();
    assert!(n >= 20, "only {n} requests under load");

    // Logs: denials highlighted, JSON lines parse.
    let mut out = Vec::new();
    ocsb_egress::logs(&inst, &ocsb_egress::LogsOptions { json: true, ..Default::default() }, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let denied = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["verdict"] == "deny")
        .count();
    assert!(denied >= 1, "{text}");
    let mut out = Vec::new();
    ocsb_egress::logs(&inst, &ocsb_egress::LogsOptions { color: true, ..Default::default() }, &mut out)
        .unwrap();
    assert!(String::from_utf8(out).unwrap().contains("\x1b[1;31m"), "denials are not highlighted");

    // Down stops it; status says so; a second down is a no-op.
    assert!(ocsb_egress::down(&inst).unwrap());
    assert!(!ocsb_egress::status(&inst).unwrap().running);
    assert!(!ocsb_egress::down(&inst).unwrap());
    lab.builtin_started = false;
}

#[test]
fn bad_input_is_refused_logged_and_others_keep_being_served() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    let p = proxy();
    let malformed: &[(&str, u16)] = &[
        ("GARBAGE\r\n\r\n", 400),
        ("GET /plain HTTP/1.1\r\nHost: pub.test.net\r\n\r\n", 400),
        ("CONNECT pub.test.net:99999 HTTP/1.1\r\nHost: pub.test.net\r\n\r\n", 400),
        ("GET http://pub.test.net/ HTTP/1.1\r\nHost: x\r\nX-Big: BIG\r\n\r\n", 431),
        ("GET http://exa mple.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ];
    for (req, want) in malformed {
        let req = req.replace("BIG", &"a".repeat(128 * 1024));
        let sent = req.clone();
        let r = lab.client(move || client::raw(p, &sent));
        let status = r.map(|r| r.status).unwrap_or(0);
        assert_eq!(status, *want, "request {:?}", &req[..req.len().min(60)]);
    }
    // Parse errors are logged when hyper gives the connection back, just after the reply.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let log = std::fs::read_to_string(lab.builtin_log()).unwrap();
        let refusals =
            log.lines().filter(|l| l.contains("NONE_NONE/400") || l.contains("NONE_NONE/431")).count();
        if refusals >= malformed.len() {
            break;
        }
        assert!(Instant::now() < deadline, "each refusal must be logged:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // 10k idle connections: the proxy keeps serving other clients, and logs each eviction/refusal.
    let served = lab.client(move || {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
        let mut idle = Vec::new();
        let t0 = Instant::now();
        for _ in 0..10_000 {
            match TcpStream::connect(p) {
                Ok(s) => idle.push(s),
                Err(e) => panic!("connect #{}: {e}", idle.len()),
            }
        }
        eprintln!("10k connects took {:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(300));
        let t1 = Instant::now();
        let mut ok = 0;
        for _ in 0..20 {
            if client::get(p, "http://pub.test.net/", "x").map(|r| r.status) == Some(200) {
                ok += 1;
            }
        }
        eprintln!("20 requests took {:?}", t1.elapsed());
        drop(idle);
        ok
    });
    assert_eq!(served, 20, "requests failed while 10k idle connections were open");
    let log = std::fs::read_to_string(lab.builtin_log()).unwrap();
    let limit_lines = log.lines().filter(|l| l.contains("EVICT_IDLE") || l.contains("CONN_LIMIT")).count();
    assert!(limit_lines >= 10_000 - 1024, "evictions were not logged: {limit_lines}");
}

/// A resolv.conf without a `nameserver` line means the local machine's server, as for every
/// other program (glibc's rule): the filter starts, literals are served, names are asked of
/// 127.0.0.1 (nothing answers in the lab, so they fail as unresolvable).
#[test]
fn a_resolv_conf_without_nameservers_means_the_local_server() {
    let mut lab = Lab::new(RULES);
    let conf = format!("/etc/netns/{}/resolv.conf", lab.topo.filter.name());
    std::fs::write(&conf, "# no nameserver line\noptions timeout:1 attempts:1\n").unwrap();
    lab.start_builtin();
    let p = proxy();
    assert_eq!(lab.client(move || client::get(p, "http://198.51.100.7/", "x")).unwrap().status, 200);
    let r = lab.client(move || client::get(p, "http://pub.test.net/", "x")).unwrap();
    assert_eq!(r.status, 503, "{r:?}");
}

/// `serve` on the control socket takes only a listening TCP socket, sent with the line; a lent
/// listener is served with the same rules as the filter's own port until the lender hangs up,
/// and then closed.
#[test]
fn a_lent_listener_is_served_until_its_lender_hangs_up() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    let sock = lab.instance().paths().control_socket();
    let (s2, s3) = (sock.clone(), sock.clone());
    let answers = lab.client(move || {
        use std::io::{BufRead, Write};
        let mut bare = std::os::unix::net::UnixStream::connect(&s2).unwrap();
        bare.write_all(b"serve\n").unwrap();
        let mut line = String::new();
        BufReader::new(&bare).read_line(&mut line).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let refused =
            ocsb_egress::builtin::lend::lend(&s2, &udp, Duration::from_secs(5)).err().map(|e| e.to_string());
        (line, refused)
    });
    assert_eq!(answers.0.trim(), r#"{"ok":false,"error":"no descriptor came with `serve`"}"#);
    assert!(answers.1.unwrap_or_default().contains("only a listening TCP socket can be lent"));

    // A listener on another port of the filter's namespace, lent and then taken back.
    let (status, after) = lab.client(move || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let lease = ocsb_egress::builtin::lend::lend(&s3, &l, Duration::from_secs(5)).unwrap();
        drop(l); // the filter holds its own copy
        // The filter keeps the lease open: no end of stream for the lender while it serves.
        lease.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut byte = [0u8; 1];
        let kept = std::io::Read::read(&mut &lease, &mut byte).map_err(|e| e.kind());
        assert!(
            matches!(kept, Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "{kept:?}"
        );
        let status = client::get(at, "http://www.example.com/", "x").unwrap().status;
        drop(lease);
        let t0 = Instant::now();
        let mut after = "still served".to_string();
        while t0.elapsed() < Duration::from_secs(5) {
            match TcpStream::connect(at) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    after = format!("{:?}", e.kind());
                    break;
                }
                // A connection that met the listener while it closed is reset: closing, not
                // closed yet; look again.
                Err(e) => after = format!("{:?}", e.kind()),
                Ok(_) => {}
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (status, after)
    });
    assert_eq!(status, 403, "the lent listener is judged by the same rules (block .example.com)");
    assert_eq!(after, "ConnectionRefused", "closed once the lender hung up");
}

/// The control socket answers only in the filter's own pid namespace: a sandbox (always in a
/// pid namespace of its own) that could reach the socket can neither stop the filter nor lend
/// it a listener.
#[test]
fn the_control_socket_refuses_another_pid_namespace() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    let sock = lab.instance().paths().control_socket();
    let script = format!(
        "import socket; c = socket.socket(socket.AF_UNIX); c.connect({:?}); c.sendall(b'stop\\n'); print(c.recv(4096).decode().strip())",
        sock.display().to_string()
    );
    let o = std::process::Command::new("unshare")
        .args(["--user", "--pid", "--fork", "python3", "-c", &script])
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&o.stdout);
    assert!(
        answer.contains(r#""ok":false"#) && answer.contains("outside the sandbox"),
        "{answer} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The filter still runs, and answers its own user.
    let st = ocsb_egress::status(&lab.instance()).unwrap();
    assert!(st.running, "{st:?}");
}

/// A filter of an older build, as far as `up` can tell: its `status` has no `build` field.
const OLD_FILTER: &str = r#"
import json, os, socket, sys
state = sys.argv[sys.argv.index("--state-dir") + 1]
open(os.path.join(state, "old-filter.pid"), "w").write(str(os.getpid()))
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(state, "egress", "control.sock"))
s.listen(4)
while True:
    c, _ = s.accept()
    word = c.makefile().readline().strip()
    if word == "status":
        c.sendall((json.dumps({"ok": True, "backend": "builtin", "pid": os.getpid(), "listen": [],
            "policy_hash": "h", "started": 1, "open_connections": 0}) + "\n").encode())
    else:
        c.sendall(b'{"ok":true}\n')
        os.unlink(os.path.join(state, "egress", "control.sock"))
        sys.exit(0)
    c.close()
"#;

/// A filter program left from another build (a stale `ocsb-egress` beside a rebuilt `ocsb`)
/// would judge requests by other code: `up` refuses it, names it and the fix, and leaves no
/// process behind. Here the stale program is a stand-in that answers `status` as a filter of
/// an older build would (no `build` field); the real program starting is every other test.
#[test]
fn a_filter_program_of_another_build_is_refused() {
    let mut lab = Lab::new(RULES);
    lab.serve_program = vec!["python3".into(), "-c".into(), OLD_FILTER.into()];
    let inst = lab.instance();
    let policy = inst.load_policy().unwrap();
    let e =
        ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress()).unwrap_err().to_string();
    let ours = format!("it is older, ocsb is {}-", env!("CARGO_PKG_VERSION"));
    assert!(e.contains("was built from other sources than this ocsb") && e.contains(&ours), "{e}");
    assert!(e.contains("make install") && e.contains("remove the stale program"), "{e}");
    let pid: i32 = std::fs::read_to_string(lab.state_dir().join("old-filter.pid")).unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "the stale filter {pid} still runs");
    assert!(!ocsb_egress::status(&inst).unwrap().running);
}

/// After an upgrade the filter of the old build still runs: `up` replaces it (stops it and
/// starts this build's program) instead of reloading its rules into the old code.
#[test]
fn a_running_filter_of_another_build_is_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new(RULES);
    let egress = lab.state_dir().join("egress");
    std::fs::create_dir_all(&egress).unwrap();
    std::fs::set_permissions(&egress, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut old = std::process::Command::new("python3")
        .args(["-c", OLD_FILTER, "--state-dir"])
        .arg(lab.state_dir())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !egress.join("control.sock").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let inst = lab.instance();
    let policy = inst.load_policy().unwrap();
    let up = ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress()).unwrap();
    assert_eq!(up.action, ocsb_egress::UpAction::Started, "replaced, not reloaded");
    let deadline = Instant::now() + Duration::from_secs(5);
    while old.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(old.try_wait().unwrap().is_some(), "the filter of the old build still runs");
    let now = ocsb_egress::status(&inst).unwrap();
    assert!(now.running);
    assert!(!up.process.unwrap_or_default().starts_with(&format!("{}@", old.id())));
    ocsb_egress::down(&inst).unwrap();
}
