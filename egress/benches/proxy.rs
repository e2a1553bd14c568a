//! Benchmark (not a timed test): builtin proxy vs squid vs a direct connection, in the same run,
//! inside network namespaces this program creates (root needed). Prints throughput and latency
//! ratios. Run: `cargo bench -p ocsb-egress --bench proxy`.
//!
//! Measured: plain-HTTP requests/s over keep-alive client connections (by name and by IP
//! literal; both backends cache answers), added latency per request with a new client
//! connection each time (p50/p99), CONNECT tunnel throughput (median of 5 interleaved rounds
//! of 256 MiB), and the memory of each backend (RSS, and the part of it that is the process's
//! own rather than file pages shared with other processes).
//!
//! `OCSB_BENCH=tunnel` runs the tunnel and memory figures alone.
//!
//! The builtin filter runs as users run it: the `ocsb-egress` program `make` builds (linked
//! statically) and installs, which `ocsb` starts. Run `make` first; the benchmark says which
//! binary it ran and how it is linked.
// A benchmark is a test harness: a failed unwrap is a failed run with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The lab of the integration tests; the benchmark uses part of it.
#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::client::read_reply;
use support::lab::{BUILTIN_PORT, Lab, SQUID_PORT};

const ORIGIN: &str = "198.51.100.7";

#[derive(Clone, Copy)]
enum Via {
    Direct,
    Proxy(u16),
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Proxy(BUILTIN_PORT) => "builtin",
            Via::Proxy(_) => "squid",
        }
    }
    fn connect(self) -> TcpStream {
        let addr: SocketAddr = match self {
            Via::Direct => format!("{ORIGIN}:80").parse().unwrap(),
            Via::Proxy(p) => format!("127.0.0.1:{p}").parse().unwrap(),
        };
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }
    fn request(self, host: &str) -> String {
        match self {
            Via::Direct => format!("GET /bench HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            Via::Proxy(_) => format!("GET http://{host}/bench HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        }
    }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Requests/s with `threads` keep-alive client connections for `secs` seconds.
fn keepalive_rps(lab: &Lab, via: Via, host: &'static str, threads: usize, secs: u64) -> f64 {
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            lab.topo.filter.spawn(move || {
                let s = via.connect();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                let req = via.request(host);
                let end = Instant::now() + Duration::from_secs(secs);
                let mut n = 0u64;
                while Instant::now() < end {
                    w.write_all(req.as_bytes()).unwrap();
                    let rep = read_reply(&mut r, false).expect("reply");
                    assert_eq!(rep.status, 200, "{}", via.name());
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total as f64 / secs as f64
}

/// Latency of one request on a fresh client connection (connect + request + reply).
fn fresh_latencies(lab: &Lab, via: Via, host: &'static str, n: usize) -> Vec<Duration> {
    lab.topo.filter.run(move || {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let s = via.connect();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            w.write_all(via.request(host).replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").as_bytes())
                .unwrap();
            let rep = read_reply(&mut r, false).expect("reply");
            assert_eq!(rep.status, 200);
            v.push(t.elapsed());
        }
        v
    })
}

/// MB/s of one 256 MiB body through a CONNECT tunnel (or directly to port 443).
fn tunnel_mbps(lab: &Lab, via: Via) -> f64 {
    const N: usize = 256 << 20;
    lab.topo.filter.run(move || {
        let t = Instant::now();
        let s = match via {
            Via::Direct => {
                let s = TcpStream::connect(format!("{ORIGIN}:443")).unwrap();
                s.set_nodelay(true).unwrap();
                s
            }
            Via::Proxy(p) => {
                let mut s = TcpStream::connect(format!("127.0.0.1:{p}")).unwrap();
                s.write_all(
                    format!("CONNECT {ORIGIN}:443 HTTP/1.1\r\nHost: {ORIGIN}:443\r\n\r\n").as_bytes(),
                )
                .unwrap();
                // Read the CONNECT reply head byte by byte so no tunnel bytes are buffered away.
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    s.read_exact(&mut b).unwrap();
                    head.push(b[0]);
                }
                assert!(
                    head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
                    "{}",
                    String::from_utf8_lossy(&head)
                );
                s
            }
        };
        let mut s = s;
        s.write_all(format!("GET /bytes/{N} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0usize;
        let mut header_done = false;
        let mut head = Vec::new();
        while got < N {
            let k = s.read(&mut buf).unwrap();
            assert!(k > 0, "eof after {got}");
            if !header_done {
                head.extend_from_slice(&buf[..k]);
                if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    header_done = true;
                    got += head.len() - (i + 4);
                }
            } else {
                got += k;
            }
        }
        N as f64 / 1e6 / t.elapsed().as_secs_f64()
    })
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn memory(what: &str, builtin: u32, squid: u32) {
    let (b, s) = (status_kib(builtin, "VmRSS:"), status_kib(squid, "VmRSS:"));
    let (ba, sa) = (status_kib(builtin, "RssAnon:"), status_kib(squid, "RssAnon:"));
    println!(
        "{what} memory: RSS builtin {b} KiB, squid {s} KiB, builtin/squid {:.2}; anonymous builtin {ba} KiB, squid {sa} KiB, builtin/squid {:.2}",
        b as f64 / s as f64,
        ba as f64 / sa as f64
    );
}

/// The filter program `make` keeps beside this benchmark's own binary
/// (`target/release/static/` and `target/release/deps/proxy-…`), and whether it is statically
/// linked (no program interpreter).
fn filter_binary() -> (std::path::PathBuf, bool) {
    let exe = std::env::current_exe().unwrap();
    let filter = exe.parent().and_then(|d| d.parent()).unwrap().join("static/ocsb-egress");
    let Ok(elf) = std::fs::read(&filter) else {
        eprintln!("{} is missing: run `make` first", filter.display());
        std::process::exit(1);
    };
    // ELF64: program headers at e_phoff (0x20), e_phentsize (0x36) bytes each, e_phnum (0x38)
    // of them; PT_INTERP (3) names the dynamic loader.
    let n = |at: usize, len: usize| elf[at..at + len].iter().rev().fold(0usize, |v, b| v << 8 | *b as usize);
    let (off, size, count) = (n(0x20, 8), n(0x36, 2), n(0x38, 2));
    (filter.clone(), !(0..count).any(|i| n(off + i * size, 4) == 3))
}

/// Rounds of the tunnel measurement (each path once per round).
const ROUNDS: usize = 5;

/// The machine's CPU time so far, busy and in all, in clock ticks (`/proc/stat`, all cores).
fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// A process's own CPU time so far (user and system), in clock ticks.
fn process_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses come the state letter (which the parse below
    // drops) and the numbers from field 4 on: utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the benchmark creates network namespaces: run it as root");
        std::process::exit(1);
    }
    let mut lab = Lab::new("allow pub.test.net\n");
    let (filter, is_static) = filter_binary();
    let linked =
        if is_static { "statically linked" } else { "dynamically linked: `make` links it statically" };
    println!("builtin filter: {} serve ({linked})", filter.display());
    lab.serve_program = vec![filter.into(), "serve".into()];
    lab.start_builtin();
    lab.start_squid();
    std::thread::sleep(Duration::from_millis(500));
    let builtin_pid: u32 = ocsb_egress::status(&lab.instance()).unwrap().process.unwrap().parse().unwrap();
    let squid_pid = lab.squid.as_ref().unwrap().id();
    memory("idle", builtin_pid, squid_pid);

    let vias = [Via::Direct, Via::Proxy(BUILTIN_PORT), Via::Proxy(SQUID_PORT)];
    // `OCSB_BENCH=tunnel` measures the tunnel alone.
    let requests = std::env::var("OCSB_BENCH").ok().as_deref() != Some("tunnel");
    for (label, host) in [("by name (pub.test.net)", "pub.test.net"), ("by IP literal", ORIGIN)] {
        if !requests {
            break;
        }
        let rps: Vec<f64> = vias.iter().map(|v| keepalive_rps(&lab, *v, host, 4, 3)).collect();
        println!(
            "plain HTTP {label}, 4 keep-alive connections: direct {:.0} req/s, builtin {:.0} req/s, squid {:.0} req/s; builtin/squid {:.2}, builtin/direct {:.2}",
            rps[0],
            rps[1],
            rps[2],
            rps[1] / rps[2],
            rps[1] / rps[0]
        );
    }
    for (label, host) in [("by name", "pub.test.net"), ("by IP literal", ORIGIN)] {
        if !requests {
            break;
        }
        let mut lat: Vec<Vec<Duration>> = vias.iter().map(|v| fresh_latencies(&lab, *v, host, 400)).collect();
        let p: Vec<(Duration, Duration)> =
            lat.iter_mut().map(|l| (percentile(l, 0.5), percentile(l, 0.99))).collect();
        println!(
            "one request per new client connection {label}: p50/p99 direct {:?}/{:?}, builtin {:?}/{:?}, squid {:?}/{:?}",
            p[0].0, p[0].1, p[1].0, p[1].1, p[2].0, p[2].1
        );
    }
    // Interleaved rounds, so that a slow spell of the machine weighs on every path alike.
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); vias.len()];
    // How busy the machine's cores are while each path runs, and the builtin filter's own CPU
    // time: what the tunnel can gain is bounded by what the direct path leaves free.
    let mut busy = vec![(0u64, 0u64); vias.len()];
    let mut filter_ticks = 0;
    for _ in 0..ROUNDS {
        for (i, v) in vias.iter().enumerate() {
            let (b0, t0) = cpu_ticks();
            let f0 = process_ticks(builtin_pid);
            runs[i].push(tunnel_mbps(&lab, *v));
            let (b1, t1) = cpu_ticks();
            busy[i].0 += b1 - b0;
            busy[i].1 += t1 - t0;
            if matches!(v, Via::Proxy(BUILTIN_PORT)) {
                filter_ticks += process_ticks(builtin_pid) - f0;
            }
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let share = |i: usize| busy[i].0 as f64 / busy[i].1.max(1) as f64 * cores;
    println!(
        "CPU busy during the tunnel, in cores of {cores}: direct {:.2}, builtin {:.2}, squid {:.2}; the builtin filter itself {:.2} s per GiB",
        share(0),
        share(1),
        share(2),
        // /proc counts in USER_HZ ticks, 100 a second on Linux; each run moves 0.25 GiB.
        filter_ticks as f64 / 100.0 / (ROUNDS as f64 * 0.25),
    );
    let t: Vec<f64> = runs
        .iter_mut()
        .map(|r| {
            r.sort_by(|a, b| a.partial_cmp(b).unwrap());
            r[ROUNDS / 2]
        })
        .collect();
    println!(
        "CONNECT tunnel, 256 MiB (median of {ROUNDS}, interleaved): direct {:.0} MB/s, builtin {:.0} MB/s, squid {:.0} MB/s; builtin/direct {:.2}, builtin/squid {:.2}",
        t[0],
        t[1],
        t[2],
        t[1] / t[0],
        t[1] / t[2]
    );
    memory("busy", builtin_pid, squid_pid);
}
