//! Resource limits and connection ends: a client that half-closes after its request still gets
//! the answer (both backends); a tunnel in which nothing moves ends, and a quiet tunnel makes
//! room for a new client at the connection cap (builtin, with small limits); edge and malformed
//! inputs get the answers docs/network.md lists from each backend.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::client;
use crate::support::lab::{BUILTIN_PORT, Lab, RULES, SILENT_ORIGIN, SQUID_PORT};
use ocsb_policy::egress::Target;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Send `head`, half-close after `pause`, read everything until the proxy closes.
fn half_closed(
    proxy: SocketAddr,
    first: Option<&'static str>,
    head: &'static str,
    pause: Duration,
) -> String {
    let mut s = TcpStream::connect_timeout(&proxy, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut out = Vec::new();
    if let Some(connect) = first {
        s.write_all(connect.as_bytes()).unwrap();
        let mut b = [0u8; 1];
        while !out.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).unwrap(), 1, "the proxy closed during CONNECT");
            out.push(b[0]);
        }
    }
    s.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(pause);
    s.shutdown(Shutdown::Write).unwrap();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_client_that_half_closes_still_gets_its_answer() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    // squid 5.7 drops a plain request whose end of input arrives with it, in the same read
    // (`transaction-end-before-headers`; `half_closed_clients on` is no cure: it makes squid
    // die on an assertion when such a client sends a long head); the builtin does
    // not. Both are tested with a pause, the builtin also without.
    let pause = Duration::from_millis(200);
    for (name, port, pause) in [
        ("builtin", BUILTIN_PORT, Duration::ZERO),
        ("builtin", BUILTIN_PORT, pause),
        ("squid", SQUID_PORT, pause),
    ] {
        let p = addr(port);
        // As `printf 'GET …' | nc proxy 3128` sends it: the request, then end of input.
        let plain = lab.client(move || {
            half_closed(
                p,
                None,
                "GET http://pub.test.net/plain HTTP/1.1\r\nHost: pub.test.net\r\n\r\n",
                pause,
            )
        });
        assert!(
            plain.starts_with("HTTP/1.1 200") && plain.contains("origin="),
            "{name} plain: {plain:?}\n{}",
            std::fs::read_to_string(lab.squid_log()).unwrap_or_default()
        );
        let tunnelled = lab.client(move || {
            half_closed(
                p,
                Some("CONNECT pub.test.net:443 HTTP/1.1\r\nHost: pub.test.net:443\r\n\r\n"),
                "GET /tunnel HTTP/1.1\r\nHost: pub.test.net\r\n\r\n",
                pause,
            )
        });
        assert!(tunnelled.contains("HTTP/1.1 200 OK\r\nContent-Length"), "{name} tunnel: {tunnelled:?}");
        assert!(tunnelled.contains("origin="), "{name} tunnel: the answer was lost: {tunnelled:?}");
    }
}

fn open_connections(lab: &Lab) -> usize {
    let sock = lab.state_dir().join("egress/control.sock");
    ocsb_egress::builtin::control::status(&sock, Duration::from_secs(3)).unwrap().open_connections
}

/// A TCP connection to `to` from the local address `from` (another 127/8 address).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
    let src: std::net::SocketAddrV4 = format!("{from}:0").parse().unwrap();
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(src)).unwrap();
    let SocketAddr::V4(dst) = to else { panic!("IPv4 only") };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(dst)).unwrap();
    TcpStream::from(fd)
}

fn open_quiet_tunnel(p: SocketAddr) -> TcpStream {
    open_quiet_tunnel_from("127.0.0.1", p)
}

fn open_quiet_tunnel_from(from: &str, p: SocketAddr) -> TcpStream {
    let mut s = connect_from(from, p);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("CONNECT {SILENT_ORIGIN} HTTP/1.1\r\nHost: {SILENT_ORIGIN}\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the proxy closed during CONNECT");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s
}

#[test]
fn quiet_tunnels_end_and_make_room_at_the_cap() {
    let mut lab = Lab::new(RULES);
    lab.serve_extra =
        ["--max-connections", "3", "--tunnel-idle", "3", "--quiet-tunnel", "1"].map(Into::into).to_vec();
    lab.start_builtin();
    let p = addr(BUILTIN_PORT);
    let tunnels: Vec<TcpStream> = lab.client(move || (0..3).map(|_| open_quiet_tunnel(p)).collect());
    assert_eq!(open_connections(&lab), 3);
    // Every slot holds a fresh tunnel: the cap holds, the new client is refused.
    let refused = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net"));
    assert!(refused.is_none(), "a fourth connection was served at a cap of 3: {refused:?}");
    // Once the tunnels have been quiet for a second, the quietest one makes room.
    std::thread::sleep(Duration::from_millis(1300));
    let served = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net"));
    assert_eq!(served.map(|r| r.status), Some(200), "a quiet tunnel did not make room");
    let log = std::fs::read_to_string(lab.builtin_log()).unwrap();
    assert!(log.contains("CONN_LIMIT") && log.contains("EVICT_IDLE"), "{log}");
    // The clients go away; the origin never closes its side. The tunnels end by the idle limit
    // and give their slots back.
    drop(tunnels);
    let t0 = Instant::now();
    while open_connections(&lab) > 0 && t0.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(open_connections(&lab), 0, "tunnels kept their slots after the clients closed");
}

/// Every loopback address is one client (a process can bind any of 127/8), and outsiders are
/// refused without taking or evicting a client's slot.
#[test]
fn loopback_aliases_are_one_client_and_outsiders_take_no_slot() {
    let mut lab = Lab::new(RULES);
    lab.serve_extra =
        ["--max-connections", "4", "--max-per-client", "2", "--quiet-tunnel", "60"].map(Into::into).to_vec();
    lab.start_builtin();
    let p = addr(BUILTIN_PORT);
    let held: Vec<TcpStream> = lab
        .client(move || vec![open_quiet_tunnel_from("127.0.0.2", p), open_quiet_tunnel_from("127.0.0.3", p)]);
    // A third loopback address is the same client, at its cap: refused.
    let third = lab.client(move || {
        let mut s = connect_from("127.0.0.4", p);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(b"GET http://pub.test.net/ HTTP/1.1\r\nHost: pub.test.net\r\n\r\n");
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    });
    assert!(third.is_empty(), "a third loopback address was served past the per-client cap: {third:?}");
    // Outsiders are refused with their answer, and the clients' tunnels are untouched.
    for _ in 0..3 {
        let out = lab
            .topo
            .world
            .exec(&[
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--interface",
                "198.51.100.7",
                "-x",
            ])
            .arg(format!("http://{}:{BUILTIN_PORT}", crate::support::topology::FILTER_ADDR))
            .arg("http://pub.test.net/")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
    }
    assert_eq!(open_connections(&lab), 2, "an outsider took or evicted a client's slot");
    drop(held);
}

/// Hundreds of lookups hanging on a slow name server hold no thread: a request for another
/// name is answered at once, on both backends (bounded: 700 clients, each done within 20 s).
#[test]
fn slow_dns_does_not_starve_other_requests() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    for (name, port) in [("builtin", BUILTIN_PORT), ("squid", SQUID_PORT)] {
        let p = addr(port);
        let slow: Vec<_> = (0..700)
            .map(|_| lab.topo.filter.spawn(move || client::get(p, "http://slow.test.net/", "slow.test.net")))
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        let reply = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net"));
        let took = t0.elapsed();
        assert_eq!(reply.map(|r| r.status), Some(200), "{name}: a normal request failed behind slow lookups");
        eprintln!("{name}: a request behind 700 slow lookups took {took:?}");
        assert!(
            took < Duration::from_secs(1),
            "{name}: a normal request waited {took:?} behind slow lookups"
        );
        for h in slow {
            let _ = h.join();
        }
    }
}

/// Inputs at the edges of HTTP/1 get the same answer from both backends: a head over 64 KiB is
/// refused (431), 150 header fields are fine, an HTTP/2 preface gets 400, and blank lines alone
/// get nothing (both wait for a request line, then close).
#[test]
fn edge_inputs_get_the_same_answer_from_both() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    let big = format!(
        "GET http://pub.test.net/ HTTP/1.1\r\nHost: pub.test.net\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(100_000)
    );
    let many = format!(
        "GET http://pub.test.net/ HTTP/1.1\r\nHost: pub.test.net\r\n{}Connection: close\r\n\r\n",
        (0..150).map(|i| format!("X-H{i}: v\r\n")).collect::<String>()
    );
    let cases: Vec<(&str, String, &str)> = vec![
        ("a 100,000-byte header", big, "HTTP/1.1 431"),
        ("150 headers", many, "HTTP/1.1 200"),
        ("an HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".into(), "HTTP/1.1 400"),
        ("blank lines only", "\r\n\r\n\r\n\r\n".into(), ""),
    ];
    for (what, req, want) in cases {
        for (name, port) in [("builtin", BUILTIN_PORT), ("squid", SQUID_PORT)] {
            let p = addr(port);
            let req = req.clone();
            let first = lab.client(move || {
                let mut s = TcpStream::connect_timeout(&p, Duration::from_secs(5)).unwrap();
                // Blank lines alone: each backend waits for more; the read times out quietly.
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                let _ = s.write_all(req.as_bytes());
                let mut b = Vec::new();
                let _ = s.read_to_end(&mut b);
                String::from_utf8_lossy(&b).lines().next().unwrap_or("").to_string()
            });
            assert!(
                first.starts_with(want) && (want.is_empty() == first.is_empty()),
                "{name}, {what}: {first:?}"
            );
        }
    }
}

/// The first line of each backend's answer to `raw`, sent whole on a fresh connection.
fn first_line(lab: &Lab, port: u16, raw: &'static str) -> String {
    let p = addr(port);
    lab.client(move || {
        let mut s = TcpStream::connect_timeout(&p, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let _ = s.write_all(raw.as_bytes());
        // Up to the end of the answer's head: an open tunnel sends nothing more.
        let (mut b, mut c) = (Vec::new(), [0u8; 1]);
        while !b.ends_with(b"\r\n\r\n") && matches!(s.read(&mut c), Ok(1)) {
            b.push(c[0]);
        }
        String::from_utf8_lossy(&b).lines().next().unwrap_or("").to_string()
    })
}

fn log_lines(path: &std::path::Path) -> Vec<ocsb_policy::egress::LogLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(ocsb_policy::egress::LogLine::parse).filter(|l| l.method != "-").collect()
}

/// Malformed request lines and heads. A lower-case `get` is an extension method to both
/// backends; a port out of range or empty is refused by both. Everything else here the builtin
/// proxy (and `egress explain`) refuses as a bad request while squid reads it leniently: the
/// leading digits of a port, HTTP/0.9 and /1.2 lines, a lower-case `connect`, folded header
/// lines. squid's lenient reading is still judged by the rules (the port it reads is the port it
/// checks and dials, so `:8080abc` is refused as port 8080): a difference in what is malformed,
/// never a way around a rule.
#[test]
fn malformed_requests_get_the_answers_the_docs_list() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    // (request, builtin's status line, squid's status line)
    let same: &[(&'static str, &str, &str)] = &[
        (
            "get http://pub.test.net/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "HTTP/1.1 200",
        ),
        (
            "GET http://pub.test.net:65616/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400",
            "HTTP/1.1 400",
        ),
        (
            "GET http://pub.test.net:/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400",
            "HTTP/1.1 400",
        ),
        (
            "GET http://pub.test.net/ HTTP/1.1\nHost: pub.test.net\nConnection: close\n\n",
            "HTTP/1.1 200",
            "HTTP/1.1 200",
        ),
        // squid says 505 where the builtin says 400: both refuse.
        (
            "GET http://pub.test.net/ HTTP/2.0\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400",
            "HTTP/1.1 505",
        ),
    ];
    for (req, want_builtin, want_squid) in same {
        for (name, port, want) in [("builtin", BUILTIN_PORT, want_builtin), ("squid", SQUID_PORT, want_squid)]
        {
            let got = first_line(&lab, port, req);
            assert!(got.starts_with(want), "{name}, {:?}: {got:?} (want {want})", req.lines().next());
        }
    }
    // (request, squid's status line, squid's rule)
    let lenient: &[(&'static str, &str, &str)] = &[
        (
            "GET http://pub.test.net:80abc/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "default",
        ),
        (
            "GET http://pub.test.net:+80/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "default",
        ),
        (
            "GET http://pub.test.net:443.0/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "default",
        ),
        (
            "GET http://pub.test.net:8080abc/ HTTP/1.1\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 403",
            "port",
        ),
        (
            "CONNECT git.example.com:2222.5 HTTP/1.1\r\nHost: git.example.com\r\n\r\n",
            "HTTP/1.1 200",
            "connect:project:5",
        ),
        ("CONNECT git.example.com:2223.5 HTTP/1.1\r\nHost: git.example.com\r\n\r\n", "HTTP/1.1 403", "port"),
        ("CONNECT pub.test.net:+443 HTTP/1.1\r\nHost: pub.test.net\r\n\r\n", "HTTP/1.1 200", "default"),
        (
            "CONNECT www.example.com:443abc HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
            "HTTP/1.1 403",
            "block:project:3",
        ),
        ("connect pub.test.net:443 HTTP/1.1\r\nHost: pub.test.net\r\n\r\n", "HTTP/1.1 200", "default"),
        (
            "connect www.example.com:443 HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
            "HTTP/1.1 403",
            "block:project:3",
        ),
        ("GET http://pub.test.net/\r\n", "HTTP/1.1 200", "default"),
        ("GET http://www.example.com/\r\n", "HTTP/1.1 403", "block:project:3"),
        (
            "GET http://pub.test.net/ HTTP/1.2\r\nHost: pub.test.net\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "default",
        ),
        (
            "GET http://pub.test.net/ HTTP/1.1\r\nHost: pub.test.net\r\nX-A: a\r\n b\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200",
            "default",
        ),
    ];
    for (req, want, rule) in lenient {
        let what = req.lines().next().unwrap_or("");
        let got = first_line(&lab, BUILTIN_PORT, req);
        assert!(got.starts_with("HTTP/1.1 400"), "builtin, {what:?}: {got:?}");
        let before = log_lines(&lab.squid_log()).len();
        let got = first_line(&lab, SQUID_PORT, req);
        assert!(got.starts_with(want), "squid, {what:?}: {got:?} (want {want})");
        let deadline = Instant::now() + Duration::from_secs(10);
        let line = loop {
            let lines = log_lines(&lab.squid_log());
            if lines.len() > before {
                break lines[lines.len() - 1].clone();
            }
            assert!(Instant::now() < deadline, "squid, {what:?}: no log line");
            std::thread::sleep(Duration::from_millis(30));
        };
        assert_eq!(line.rule, *rule, "squid, {what:?}: {line}");
    }
    // explain reads a port as the builtin does: these are not targets it can judge.
    for t in ["http://pub.test.net:80abc/", "http://pub.test.net:+80/", "http://pub.test.net:443.0/"] {
        assert!(Target::from_absolute_uri("GET", t).is_err(), "explain accepted {t}");
    }
    for t in ["git.example.com:2222.5", "pub.test.net:+443", "www.example.com:443abc"] {
        assert!(Target::from_connect(t).is_err(), "explain accepted CONNECT {t}");
    }
}
