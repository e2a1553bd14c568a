//! Differential test: the real squid, running the rendered config, against `Policy::decide`.
//!
//! Everything runs in a network namespace this test creates (`unshare(CLONE_NEWNET)` on one
//! thread; squid, `ip` and the origin servers are started from that thread and so live in it).
//! Inside, the documentation address 198.51.100.7 is put on the namespace's own `lo` to stand in
//! for a public origin; 127.0.0.x addresses are private origins. Squid runs unprivileged (uid
//! 65534) with a `hosts_file` mapping the test names. Requests are sent as raw bytes, so no
//! client normalises the host first, and both verdict and deciding rule (the `X-Egress-Decision`
//! header and the access-log `rule=` field) must equal what the pure function says.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::squid_bin;
use ocsb_policy::egress::{EgressLayer, LayerText, LogLine, Policy, SquidOptions, Step, Target, Verdict};

const USER_RULES: &str = "block .corp.test\n";
const PROJECT_RULES: &str = r"allow jira.example.com gitlab.example.com # wins over block
allow-regex ^[a-z0-9-]+\.staging\.example\.com$
block .example.com # the domain and all subdomains
block-regex ^prod-
connect git.example.com:2222 127.0.0.5:6443
allow wiki internal.corp.test 127.0.0.7
block 203.0.113.0/24
block-regex ^198\.51\.100\.9$ ^\[fd00::9\]$
allow [fd00::2] 2001:db8::/64
";

const PUBLIC: &str = "198.51.100.7";

fn hosts() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut h: Vec<(&str, Vec<&str>)> = [
        "pub.test.net",
        "www.example.com",
        "example.com",
        "jira.example.com",
        "gitlab.example.com",
        "foo.staging.example.com",
        "a.b.staging.example.com",
        "prod-api.test.net",
        "x.corp.test",
        "wiki",
    ]
    .into_iter()
    .map(|n| (n, vec![PUBLIC]))
    .collect();
    h.push(("git.example.com", vec!["127.0.0.3"]));
    h.push(("internal.corp.test", vec!["127.0.0.6"]));
    h.push(("rebind.test.net", vec!["127.0.0.2"]));
    h.push(("mixed.test.net", vec![PUBLIC, "127.0.0.2"]));
    // Names whose only address embeds a private IPv4 address, and the site-local range.
    h.push(("nat64.test.net", vec!["64:ff9b::a09:909"]));
    h.push(("meta64.test.net", vec!["64:ff9b::a9fe:a9fe"]));
    h.push(("compat.test.net", vec!["::a09:909"]));
    h.push(("sixtofour.test.net", vec!["2002:a09:909::1"]));
    h.push(("teredo.test.net", vec!["2001:0:4136:e378:8000:63bf:3fff:fdd2"]));
    h.push(("sitelocal.test.net", vec!["fec0::1"]));
    h.push(("public64.test.net", vec!["64:ff9b::c633:6407"]));
    h
}

/// (request line, Host header or "" for the authority itself)
const CASES: &[(&str, &str)] = &[
    ("GET http://pub.test.net/", ""),
    ("GET http://pub.test.net:8080/", ""),
    ("CONNECT pub.test.net:443", ""),
    ("CONNECT pub.test.net:8443", ""),
    ("GET http://www.example.com/", ""),
    ("GET http://example.com/", ""),
    ("GET http://WWW.EXAMPLE.COM/", ""),
    ("GET http://www.example.com./", ""),
    ("GET http://WWW.Example.COM./", ""),
    ("CONNECT www.example.com.:443", ""),
    ("CONNECT www.example.com:443", ""),
    ("GET http://jira.example.com/", ""),
    ("GET http://gitlab.example.com/", ""),
    ("GET http://jira.example.com:8080/", ""),
    ("GET http://foo.staging.example.com/", ""),
    ("GET http://FOO.Staging.Example.COM/", ""),
    ("GET http://a.b.staging.example.com/", ""),
    ("GET http://prod-api.test.net/", ""),
    ("GET http://PROD-api.test.net/", ""),
    ("GET http://intranet/", ""),
    ("GET http://localhost/", ""),
    ("GET http://intranet./", ""),
    ("GET http://localhost./", ""),
    ("GET http://wiki/", ""),
    ("GET http://rebind.test.net/", ""),
    ("GET http://mixed.test.net/", ""),
    ("GET http://internal.corp.test/", ""),
    ("GET http://x.corp.test/", ""),
    ("GET http://127.0.0.2/", ""),
    ("GET http://127.0.0.7/", ""),
    ("GET http://198.51.100.7/", ""),
    ("GET http://[::ffff:198.51.100.7]/", ""),
    ("GET http://203.0.113.5/", ""),
    ("GET http://[::1]/", ""),
    ("GET http://[fe80::1]/", ""),
    ("CONNECT [::1]:443", ""),
    ("GET http://0.0.0.0/", ""),
    ("GET http://0/", ""),
    ("GET http://[::]/", ""),
    ("GET http://[::ffff:0.0.0.0]/", ""),
    ("CONNECT 0.0.0.0:443", ""),
    ("GET http://0x0.0/", ""),
    ("CONNECT git.example.com:2222", ""),
    ("CONNECT git.example.com.:2222", ""),
    ("CONNECT GIT.example.com:2222", ""),
    ("CONNECT git.example.com:2223", ""),
    ("GET http://git.example.com:2222/", ""),
    ("GET http://git.example.com/", ""),
    ("CONNECT 127.0.0.5:6443", ""),
    ("CONNECT 127.0.0.5.:6443", ""),
    ("CONNECT 2130706437:6443", ""),
    ("CONNECT 127.0.0.5:6444", ""),
    ("CONNECT rebind.test.net:443", ""),
    ("GET ftp://pub.test.net/", ""),
    ("GET http://2130706433/", ""),
    ("GET http://0x7f000001/", ""),
    ("GET http://017700000001/", ""),
    ("GET http://127.1/", ""),
    ("GET http://0x7f.0.0.1/", ""),
    ("GET http://0x7f.1/", ""),
    ("GET http://0177.0.0.1/", ""),
    ("GET http://[::ffff:127.0.0.1]/", ""),
    ("GET http://[::ffff:7f00:2]/", ""),
    ("CONNECT 2130706433:443", ""),
    ("GET http://jira.example.com@www.example.com/", ""),
    ("GET http://www.example.com@jira.example.com/", ""),
    ("GET http://pub.test.net/", "www.example.com"),
    ("GET http://www.example.com/", "pub.test.net"),
    ("CONNECT 127.0.0.7:443", ""),
    ("GET http://nx.test.net/", ""),
    ("GET http://198.51.100.9/", ""),
    ("GET http://[fd00::9]/", ""),
    ("GET http://[FD00::2]/", ""),
    ("GET http://[2001:db8::1]:443/", ""),
    ("GET http://[2001:db9::1]/", ""),
    ("GET http://nat64.test.net/", ""),
    ("GET http://meta64.test.net/", ""),
    ("GET http://compat.test.net/", ""),
    ("CONNECT sixtofour.test.net:443", ""),
    ("GET http://teredo.test.net/", ""),
    ("GET http://sitelocal.test.net/", ""),
    ("GET http://[::10.9.9.9]/", ""),
    ("CONNECT [::10.9.9.9]:443", ""),
    ("GET http://[::127.0.0.1]/", ""),
    ("GET http://public64.test.net/", ""),
];

/// squid's cache manager (everyone's in-flight requests and client addresses): `Target` refuses
/// the scheme, squid must answer 403 without serving it.
const MANAGER: &[&str] =
    &["GET cache_object://127.0.0.1/info", "GET cache_object://pub.test.net/active_requests"];

/// Requests that both squid (400) and `Target` refuse.
const MALFORMED: &[&str] = &[
    "GET /plain",
    "GET http://a..b/",
    "GET http://.a.b/",
    "GET http://a.b:0/",
    "GET http://a.b:65536/",
    "GET http:///x",
];

/// Origins (in the namespace) that answer every request with 200 and a forged decision header:
/// the filter must remove it (only its own refusals carry one).
struct Origins {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Origins {
    fn start(addrs: &[SocketAddr]) -> Origins {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = vec![];
        for a in addrs {
            let l = TcpListener::bind(a).unwrap_or_else(|e| panic!("bind origin {a}: {e}"));
            l.set_nonblocking(true).unwrap();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                            std::thread::spawn(move || {
                                let _ = read_head(&mut s);
                                let _ = s.write_all(
                                    b"HTTP/1.1 200 OK\r\nX-Egress-Decision: block:project:1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                                );
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }));
        }
        Origins { stop, threads }
    }
}

impl Drop for Origins {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A DNS server on 127.0.0.1:53 (in the namespace) that answers NXDOMAIN to everything, so a
/// name outside the hosts file fails at once (squid's own retries would take seconds).
struct NxDns {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for NxDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_nxdomain_dns() -> NxDns {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let sock = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53 in the test namespace");
    sock.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while !stop2.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
            let q = &buf[..n];
            if n < 12 {
                continue;
            }
            // End of the first question: QNAME labels, then QTYPE and QCLASS.
            let mut i = 12;
            while i < n && q[i] != 0 {
                i += 1 + q[i] as usize;
            }
            let end = (i + 5).min(n);
            let mut r = Vec::with_capacity(end);
            r.extend_from_slice(&q[..2]); // id
            r.extend_from_slice(&[0x81 | (q[2] & 0x01), 0x83]); // QR, RD copied, RA, NXDOMAIN
            r.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // 1 question, no records
            r.extend_from_slice(&q[12..end]);
            let _ = sock.send_to(&r, from);
        }
    });
    NxDns { stop, thread: Some(thread) }
}

/// Kills squid (started by this test) when the test ends, however it ends.
struct Squid {
    child: Child,
    dir: PathBuf,
    /// `squid -n`: names its shared-memory segments, so parallel squids do not collide.
    service: String,
}

impl Drop for Squid {
    fn drop(&mut self) {
        // SIGTERM lets squid remove its shared-memory segments (shutdown_lifetime is 1 s).
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&format!("{}-", self.service)) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

impl Squid {
    fn cache_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("cache.log")).unwrap_or_default()
    }
    fn access_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

fn read_head(s: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&b[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (apt-get install iproute2)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn enter_new_netns() {
    // SAFETY: unshare(2) with CLONE_NEWNET only changes this thread's network namespace; it takes
    // no pointers.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
}

struct Observed {
    status: u16,
    header: Option<String>,
    squid_error: Option<String>,
    log: Option<LogLine>,
}

fn send(squid: &Squid, proxy: SocketAddr, line: &str, host: &str, wait_log: bool) -> Observed {
    let before = squid.access_lines().len();
    let (method, target) = line.split_once(' ').unwrap();
    let host = if !host.is_empty() {
        host.to_string()
    } else if method == "CONNECT" {
        target.to_string()
    } else {
        target.split("://").nth(1).unwrap().split('/').next().unwrap().rsplit('@').next().unwrap().to_string()
    };
    let mut s = TcpStream::connect_timeout(&proxy, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(s, "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let head = read_head(&mut s).unwrap_or_default();
    drop(s);
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    // The access-log line appears when squid finishes the transaction.
    let deadline = Instant::now() + Duration::from_secs(if wait_log { 5 } else { 0 });
    let mut log = None;
    while Instant::now() < deadline {
        // Skip lines of connections that sent no request (the readiness probe).
        let lines = squid.access_lines();
        if let Some(l) =
            lines.iter().skip(before).filter_map(|l| LogLine::parse(l)).find(|l| l.method == method)
        {
            log = Some(l);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Observed { status, header: header("X-Egress-Decision"), squid_error: header("X-Squid-Error"), log }
}

fn differential() -> Result<(), String> {
    enter_new_netns();
    run("ip", &["link", "set", "lo", "up"]);
    run("ip", &["addr", "add", &format!("{PUBLIC}/32"), "dev", "lo"]);

    let origins: Vec<SocketAddr> = [
        "198.51.100.7:80",
        "198.51.100.7:443",
        "127.0.0.3:2222",
        "127.0.0.5:6443",
        "127.0.0.6:80",
        "127.0.0.7:80",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let _origins = Origins::start(&origins);
    let _dns = start_nxdomain_dns();

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let mut perms = std::fs::metadata(tmp.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(tmp.path(), perms).unwrap();

    let hosts_path = tmp.path().join("hosts");
    let mut hosts_text = String::new();
    for (name, addrs) in hosts() {
        for a in addrs {
            hosts_text.push_str(&format!("{a} {name}\n"));
        }
    }
    std::fs::write(&hosts_path, hosts_text).unwrap();

    let layers = [
        LayerText::package(),
        LayerText::new(EgressLayer::User, "/home/test/.config/opencode-sandbox/egress.conf", USER_RULES),
        LayerText::new(EgressLayer::Project, ".opencode-sandbox/egress.conf", PROJECT_RULES),
    ];
    let policy = Policy::compile(&layers).map_err(|e| e.to_string())?;
    let proxy: SocketAddr = "127.0.0.1:3128".parse().unwrap();
    let mut opts = SquidOptions::host_process(&dir, vec![proxy]);
    opts.hosts_file = Some(hosts_path);
    opts.dns_nameservers = vec!["127.0.0.1".parse().unwrap()];
    opts.dns_timeout_secs = 2;
    let conf = policy.render_squid(&opts).map_err(|e| e.to_string())?;
    let conf_path = tmp.path().join("squid.conf");
    std::fs::write(&conf_path, &conf).unwrap();
    crate::support::squid_parse_clean(&conf);

    let service = format!("ocsbdiff{}", std::process::id());
    let child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(squid_bin())
        .args(["-N", "-n", &service, "-f"])
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("setpriv (util-linux): {e}"))?;
    let mut squid = Squid { child, dir: dir.clone(), service };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect_timeout(&proxy, Duration::from_millis(200)).is_ok() {
            break;
        }
        if let Ok(Some(st)) = squid.child.try_wait() {
            return Err(format!("squid exited ({st}) before listening:\n{}", squid.cache_log()));
        }
        if Instant::now() > deadline {
            return Err(format!("squid did not listen on {proxy} within 20 s:\n{}", squid.cache_log()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let map: HashMap<&str, Vec<IpAddr>> =
        hosts().into_iter().map(|(n, a)| (n, a.iter().map(|s| s.parse().unwrap()).collect())).collect();
    let mut report = Vec::new();
    let mut mismatches = 0;
    for (line, host) in CASES {
        let (m, t) = line.split_once(' ').unwrap();
        let target = Target::from_request_line(m, t).map_err(|e| e.to_string())?;
        let resolved = match policy.evaluate(&target) {
            Step::NeedsAddresses(p) => map.get(p.host()).cloned().unwrap_or_default(),
            Step::Decided(_) => vec![],
        };
        let want = policy.decide(&target, &resolved);
        let t0 = Instant::now();
        let got = send(&squid, proxy, line, host, true);
        let ms = t0.elapsed().as_millis();
        let squid_denied = got.status == 403
            && got.squid_error.as_deref().is_some_and(|e| e.starts_with("ERR_ACCESS_DENIED"));
        let squid_verdict = if squid_denied { Verdict::Deny } else { Verdict::Allow };
        let log_rule = got.log.as_ref().map(|l| l.rule.clone());
        let log_verdict = got.log.as_ref().map(|l| l.verdict());
        let ok = squid_verdict == want.verdict
            && log_rule.as_deref() == Some(want.note().as_str())
            && log_verdict == Some(want.verdict)
            && match want.verdict {
                Verdict::Allow => got.header.is_none(),
                Verdict::Deny => got.header.as_deref() == Some(want.note().as_str()),
            };
        if !ok {
            mismatches += 1;
        }
        report.push(format!(
            "{} {ms:>5}ms {line:<48} host={host:<16} squid: {} {} hdr={:?} log={:?} | decide: {} {}",
            if ok { "ok  " } else { "DIFF" },
            got.status,
            squid_verdict,
            got.header,
            log_rule,
            want.verdict,
            want.note()
        ));
    }
    for line in MALFORMED {
        let (m, t) = line.split_once(' ').unwrap();
        let parsed = Target::from_request_line(m, t);
        let got = send(&squid, proxy, line, "pub.test.net", false);
        let ok = parsed.is_err() && got.status == 400;
        if !ok {
            mismatches += 1;
        }
        report.push(format!(
            "{} {line:<48} squid: {} | Target: {:?}",
            if ok { "ok  " } else { "DIFF" },
            got.status,
            parsed.err().map(|e| e.reason)
        ));
    }
    for line in MANAGER {
        let (m, t) = line.split_once(' ').unwrap();
        let parsed = Target::from_request_line(m, t);
        let got = send(&squid, proxy, line, "pub.test.net", false);
        let ok = parsed.is_err() && got.status == 403;
        if !ok {
            mismatches += 1;
        }
        report.push(format!("{} {line:<48} squid: {}", if ok { "ok  " } else { "DIFF" }, got.status));
    }
    drop(squid);
    let report = report.join("\n");
    eprintln!("{report}");
    if mismatches > 0 {
        return Err(format!(
            "{mismatches} of {} cases differ between squid and Policy::decide:\n{report}",
            CASES.len()
        ));
    }
    Ok(())
}

#[test]
fn egress_differential_squid_vs_decide() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test creates a network namespace and runs squid as uid 65534: run it as root (CI does)"
    );
    squid_bin();
    assert!(
        Path::new("/usr/bin/setpriv").exists() || Path::new("/bin/setpriv").exists(),
        "setpriv missing: apt-get install util-linux"
    );
    let started = Instant::now();
    let r = std::thread::spawn(differential).join();
    match r {
        Ok(Ok(())) => eprintln!(
            "differential test: {} cases + {} malformed in {:?}",
            CASES.len(),
            MALFORMED.len(),
            started.elapsed()
        ),
        Ok(Err(e)) => panic!("{e}"),
        Err(p) => std::panic::resume_unwind(p),
    }
}
