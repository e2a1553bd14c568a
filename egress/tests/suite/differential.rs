//! The differential suite: the same raw requests through the builtin proxy, squid (the host's
//! binary with the rendered config) and the policy's decision function; same verdicts and rules.
//! Everything runs inside namespaces the test creates (world + filter).

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::client::{self, Reply};
use crate::support::dns::Answer;
use crate::support::lab::{BUILTIN_PORT, Lab, RULES, SQUID_PORT, zone_map};
use crate::support::topology::{FILTER_ADDR, ip};
use ocsb_policy::egress::Target;

enum Req {
    /// A raw absolute-form request line target (sent verbatim).
    Get(&'static str),
    /// Raw GET with an explicit Host header.
    GetHost(&'static str, &'static str),
    Connect(&'static str),
}

/// (request, expected note, expected status class: 2 = success, 4 = denied, 5 = upstream error)
const CASES: &[(Req, &str, u16)] = &[
    (Req::Get("http://pub.test.net/"), "default", 2),
    (Req::Get("http://www.example.com/"), "block:project:3", 4),
    (Req::Get("http://jira.example.com/"), "allow:project:1", 2),
    (Req::Get("http://api.staging.example.com/"), "allow:project:2", 2),
    (Req::Get("http://prod-db.test.net/"), "block:project:4", 4),
    (Req::Get("http://private.test.net/"), "private", 4),
    (Req::Get("http://loop.test.net/"), "private", 4),
    (Req::Get("http://mixed.test.net/"), "private", 4),
    (Req::Get("http://internal.corp.test/"), "allow:project:1", 2),
    (Req::Get("http://127.0.0.2/"), "private", 4),
    (Req::Get("http://198.51.100.7/"), "default", 2),
    (Req::Get("http://[::1]/"), "no-dot", 4),
    (Req::Get("http://0.0.0.0/"), "private", 4),
    (Req::Get("http://localhost/"), "no-dot", 4),
    (Req::Get("http://intranet./"), "no-dot", 4),
    (Req::Get("http://2130706433/"), "private", 4),
    (Req::Get("http://0x7f000001/"), "private", 4),
    (Req::Get("http://017700000001/"), "private", 4),
    (Req::Get("http://127.1/"), "private", 4),
    (Req::Get("http://0x7f.0.0.1/"), "private", 4),
    (Req::Get("http://[::ffff:127.0.0.1]/"), "private", 4),
    (Req::Get("http://www.example.com./"), "block:project:3", 4),
    (Req::Get("http://WWW.Example.COM./"), "block:project:3", 4),
    (Req::Get("http://jira.example.com@www.example.com/"), "block:project:3", 4),
    (Req::GetHost("http://pub.test.net/host-check", "www.example.com"), "default", 2),
    (Req::Get("http://pub.test.net:8080/"), "port", 4),
    (Req::Get("ftp://pub.test.net/"), "port", 4),
    (Req::Get("http://git.example.com:2222/"), "port", 4),
    (Req::Get("http://192.0.2.10:8080/"), "port", 4),
    (Req::Get("http://nxdomain.test.net/"), "default", 5),
    (Req::Get("http://slow.test.net/"), "default", 5),
    (Req::Connect("git.example.com:2222"), "connect:project:5", 2),
    (Req::Connect("git.example.com.:2222"), "connect:project:5", 2),
    (Req::Connect("git.example.com:2223"), "port", 4),
    (Req::Connect("127.0.0.5:6443"), "connect:project:5", 2),
    (Req::Connect("127.0.0.5:6444"), "port", 4),
    (Req::Connect("192.0.2.10:8080"), "connect:project:5", 2),
    (Req::Connect("www.example.com:443"), "block:project:3", 4),
    (Req::Connect("www.example.com.:443"), "block:project:3", 4),
    (Req::Connect("pub.test.net:443"), "default", 2),
    // CONNECT without a port: squid assumes 443, and so does the policy.
    (Req::Connect("pub.test.net"), "default", 2),
    (Req::Connect("2130706433:443"), "private", 4),
    (Req::Connect("[::1]:443"), "no-dot", 4),
    (Req::Connect("private.test.net:443"), "private", 4),
    (Req::Connect("mixed.test.net:443"), "private", 4),
    // The filter host's own address, by literal and by name, is the host.
    (Req::Get("http://192.0.2.1/"), "private", 4),
    (Req::Get("http://self.test.net/"), "private", 4),
    (Req::Connect("self.test.net:443"), "private", 4),
    // IPv6 forms that embed a private IPv4 address, and the site-local range.
    (Req::Get("http://nat64.test.net/"), "private", 4),
    (Req::Get("http://meta64.test.net/"), "private", 4),
    (Req::Get("http://compat.test.net/"), "private", 4),
    (Req::Connect("sixtofour.test.net:443"), "private", 4),
    (Req::Get("http://sitelocal.test.net/"), "private", 4),
    (Req::Get("http://[::10.9.9.9]/"), "private", 4),
    (Req::Connect("[::127.0.0.2]:443"), "private", 4),
    // An origin's own 403 is passed on, but never with the filter's headers.
    (Req::Get("http://pub.test.net/forged"), "default", 4),
];

fn send(proxy: SocketAddr, req: &Req) -> Option<Reply> {
    match req {
        Req::Get(u) => client::get(proxy, u, "ignored.test.net"),
        Req::GetHost(u, h) => client::get(proxy, u, h),
        Req::Connect(a) => {
            let (first, inner) = client::connect(proxy, a);
            if let (Some(f), Some(i)) = (&first, &inner)
                && f.status == 200
            {
                assert_eq!(i.status, 200, "tunnel {a}: inner request failed: {i:?}");
            }
            first
        }
    }
}

/// What the decision function says, with the resolver answers the world's DNS gives.
fn expected_by_policy(lab: &Lab, req: &Req) -> String {
    // explain on the filter's host knows that host's addresses.
    let policy = lab
        .instance()
        .load_policy()
        .unwrap()
        .with_host_addresses(lab.client(ocsb_egress::host_addresses).unwrap());
    let t = match req {
        Req::Get(u) | Req::GetHost(u, _) => Target::from_absolute_uri("GET", u).unwrap(),
        Req::Connect(a) => Target::from_connect(a).unwrap(),
    };
    let zone = zone_map();
    let resolved = match &t.host {
        ocsb_policy::egress::Host::Name(n) => match zone.get(n.as_str()) {
            Some(Answer::Fixed(a)) => a.clone(),
            Some(Answer::Slow(..)) | None => vec![],
            Some(Answer::Alternate(a)) => a.clone(),
        },
        ocsb_policy::egress::Host::Ip(_) => vec![],
    };
    policy.decide(&t, &resolved).note()
}

#[test]
fn builtin_squid_and_policy_agree_on_the_case_table() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    let builtin: SocketAddr = format!("127.0.0.1:{BUILTIN_PORT}").parse().unwrap();
    let squid: SocketAddr = format!("127.0.0.1:{SQUID_PORT}").parse().unwrap();
    let (mut bskip, mut sskip) = (0usize, 0usize);
    let mut failures = Vec::new();
    for (i, (req, want, class)) in CASES.iter().enumerate() {
        let label = match req {
            Req::Get(u) => format!("GET {u}"),
            Req::GetHost(u, h) => format!("GET {u} Host:{h}"),
            Req::Connect(a) => format!("CONNECT {a}"),
        };
        let policy_note = expected_by_policy(&lab, req);
        if &policy_note != want {
            failures.push(format!("#{i} {label}: decision function says {policy_note}, table says {want}"));
        }
        for (name, proxy, log, skip) in [
            ("builtin", builtin, lab.builtin_log(), &mut bskip),
            ("squid", squid, lab.squid_log(), &mut sskip),
        ] {
            let req_ref: &'static Req = &CASES[i].0;
            let reply = lab.client(move || send(proxy, req_ref));
            let Some(reply) = reply else {
                failures.push(format!("#{i} {label} via {name}: no reply"));
                continue;
            };
            if reply.status / 100 != *class {
                failures.push(format!("#{i} {label} via {name}: status {} (want {class}xx)", reply.status));
            }
            // Only the filter's own refusals carry the decision, in one format on both backends.
            let h = reply.header("x-egress-decision");
            let denied = !(want.starts_with("allow") || want.starts_with("connect") || *want == "default");
            let want_header = denied.then_some(*want);
            if h != want_header {
                failures
                    .push(format!("#{i} {label} via {name}: X-Egress-Decision {h:?}, want {want_header:?}"));
            }
            if !denied && reply.header("x-egress-error").is_some() && reply.status == 403 {
                failures
                    .push(format!("#{i} {label} via {name}: an origin's X-Egress-Error reached the client"));
            }
            match crate::support::lab::wait_log_line_any(&log, *skip, Duration::from_secs(12)) {
                Some((line, n)) => {
                    *skip = n;
                    if line.rule != *want {
                        failures.push(format!(
                            "#{i} {label} via {name}: logged rule={} (line: {line})",
                            line.rule
                        ));
                    }
                    if let Some(peer) = &line.peer
                        && peer.starts_with("127.")
                        && !want.starts_with("allow")
                        && !want.starts_with("connect")
                    {
                        failures.push(format!("#{i} {label} via {name}: connected to private {peer}"));
                    }
                }
                None => failures.push(format!("#{i} {label} via {name}: no log line")),
            }
        }
    }
    // The URL wins over the Host header: the origin saw `pub.test.net` from both proxies.
    let hosts: Vec<String> = lab
        .world_seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(_, h)| h.starts_with("pub.test.net"))
        .map(|(_, h)| h.clone())
        .collect();
    assert!(hosts.len() >= 2, "origin never saw Host: pub.test.net: {hosts:?}");
    assert!(
        !lab.world_seen.lock().unwrap().requests.iter().any(|(_, h)| h == "www.example.com"),
        "a proxy forwarded the client's Host header instead of the URL's"
    );
    // Host side: nothing reached the service on the filter's own address.
    let to_self: Vec<_> = lab
        .filter_seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(a, _)| a.ip() == ip(FILTER_ADDR))
        .cloned()
        .collect();
    assert!(to_self.is_empty(), "a proxy connected to the filter host's own address: {to_self:?}");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

/// Both backends listen on the gateway address too (for containers); a client that is neither on
/// loopback nor on the network behind the gateway gets 403 `client`, even for a host the rules
/// allow, and the allowed internal service behind the filter is never contacted for it.
#[test]
fn only_the_filters_clients_are_served() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    let curl = |src: &str, port: u16, url: &str| -> (String, String) {
        let out = lab
            .topo
            .world
            .exec(&["curl"])
            .args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10", "--interface", src, "-x"])
            .arg(format!("http://{FILTER_ADDR}:{port}"))
            .arg(url)
            .output()
            .expect("curl (apt-get install curl)");
        (
            String::from_utf8_lossy(&out.stdout).to_ascii_lowercase(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    };
    for (name, port, log) in
        [("builtin", BUILTIN_PORT, lab.builtin_log()), ("squid", SQUID_PORT, lab.squid_log())]
    {
        let before = lab.filter_seen.lock().unwrap().requests.len();
        // From beyond the gateway's network: refused, by the client rule.
        let (head, err) = curl("198.51.100.7", port, "http://internal.corp.test/");
        assert!(head.starts_with("http/1.1 403"), "{name}: outsider got {head:?} {err}");
        assert!(head.contains("x-egress-decision: client"), "{name}: {head}");
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        let last = lines.lines().rev().find_map(ocsb_policy::egress::LogLine::parse).expect("a log line");
        assert_eq!((last.rule.as_str(), last.client.as_str()), ("client", "198.51.100.7"), "{name}: {last}");
        assert_eq!(
            lab.filter_seen.lock().unwrap().requests.len(),
            before,
            "{name}: the internal service was contacted for an outside client"
        );
        // Positive control: a client on the gateway's network is served.
        let (head, err) = curl("192.0.2.2", port, "http://internal.corp.test/");
        assert!(head.starts_with("http/1.1 200"), "{name}: client behind the gateway got {head:?} {err}");
        assert!(
            lab.filter_seen.lock().unwrap().requests.len() > before,
            "{name}: allowed request not served"
        );
    }
}

#[test]
fn rebinding_never_reaches_a_private_address() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    lab.start_squid();
    for (name, port, log) in
        [("builtin", BUILTIN_PORT, lab.builtin_log()), ("squid", SQUID_PORT, lab.squid_log())]
    {
        let proxy: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut skip = 0;
        let (mut allowed, mut denied) = (0, 0);
        for i in 0..8 {
            let (host, reply) = if i % 2 == 0 {
                ("rb.test.net", lab.client(move || client::get(proxy, "http://rb.test.net/", "rb.test.net")))
            } else {
                ("rb2.test.net:443", lab.client(move || client::connect(proxy, "rb2.test.net:443").0))
            };
            let reply = reply.unwrap_or_else(|| panic!("{name}: no reply for {host}"));
            let (line, n) = crate::support::lab::wait_log_line_any(&log, skip, Duration::from_secs(12))
                .unwrap_or_else(|| panic!("{name}: no log line"));
            skip = n;
            match reply.status {
                200 => {
                    allowed += 1;
                    assert_eq!(
                        line.peer.as_deref(),
                        Some("198.51.100.7"),
                        "{name}: allowed rebinding request went to {:?}",
                        line.peer
                    );
                    assert_eq!(line.rule, "default");
                }
                403 => {
                    denied += 1;
                    assert_eq!(line.rule, "private", "{name}: {line}");
                    assert_eq!(line.peer, None, "{name}: a denied request connected somewhere: {line}");
                }
                s => panic!("{name}: unexpected status {s} for {host}"),
            }
        }
        assert!(allowed + denied == 8, "{name}");
        if name == "builtin" {
            // One lookup per request: the alternating answers show up as both verdicts.
            assert!(
                allowed > 0 && denied > 0,
                "builtin: {allowed} allowed, {denied} denied: expected both (one DNS query per request)"
            );
        }
    }
    // The trap listener on the private answer's address was never contacted.
    let trapped: Vec<_> = lab
        .filter_seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(a, _)| a.ip().to_string() == "127.0.0.2")
        .cloned()
        .collect();
    assert!(trapped.is_empty(), "a proxy connected to the private rebinding answer: {trapped:?}");
    let q = lab.zone.lock().unwrap().queries.get("rb.test.net").copied().unwrap_or(0);
    assert!(q >= 4, "the rebinding name was queried only {q} times");
}

/// An address the filter host gets after the filter started is its own at once: the builtin
/// refuses a connection that the kernel answers from that same address, before its next
/// refresh of the host's addresses. (squid learns host addresses at `egress up`; see docs/network.md.)
#[test]
fn a_host_address_added_after_start_is_refused_at_once() {
    let mut lab = Lab::new(RULES);
    lab.start_builtin();
    let f = lab.topo.filter.name().to_string();
    crate::support::topology::sh(&["ip", "-n", &f, "addr", "add", "203.0.113.50/32", "dev", "lo"]);
    let seen: crate::support::origin::SharedSeen = Default::default();
    let s2 = seen.clone();
    lab.topo
        .filter
        .run(move || crate::support::origin::serve_all(vec!["203.0.113.50:80".parse().unwrap()], s2));
    let p: SocketAddr = format!("127.0.0.1:{BUILTIN_PORT}").parse().unwrap();
    let reply = lab.client(move || client::get(p, "http://203.0.113.50/", "203.0.113.50")).unwrap();
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(seen.lock().unwrap().requests.is_empty(), "the host's new address was reached");
    // After the refresh (every 2 s) the decision itself says private.
    let t0 = std::time::Instant::now();
    let reply = loop {
        let r = lab.client(move || client::get(p, "http://203.0.113.50/", "203.0.113.50")).unwrap();
        if r.header("x-egress-decision").is_some() || t0.elapsed() > Duration::from_secs(8) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!((reply.status, reply.header("x-egress-decision")), (403, Some("private")), "{reply:?}");
    assert!(seen.lock().unwrap().requests.is_empty(), "the host's new address was reached");
    // Positive control: a public origin in the world is still reached.
    let reply = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net")).unwrap();
    assert_eq!(reply.status, 200);
}
