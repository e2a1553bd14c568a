//! Origin servers: every connection is recorded (local address it arrived on), every HTTP request
//! is answered `200` with a body naming the address and the `Host` header it received.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Seen {
    /// (local address, Host header) per request.
    pub requests: Vec<(SocketAddr, String)>,
}

pub type SharedSeen = Arc<Mutex<Seen>>;

/// Bind every address/port pair (call from a thread inside the namespace) and serve forever.
pub fn serve_all(binds: Vec<SocketAddr>, seen: SharedSeen) {
    for b in binds {
        let l = TcpListener::bind(b).unwrap_or_else(|e| panic!("origin bind {b}: {e}"));
        let seen = seen.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || handle(s, seen));
            }
        });
    }
}

fn handle(s: TcpStream, seen: SharedSeen) {
    let local = s.local_addr().unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut host = String::new();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("host:") {
                host = v.trim().to_string();
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        let _ = r.read_exact(&mut body);
        seen.lock().unwrap().requests.push((local, host.clone()));
        if let Some(n) = path.strip_prefix("/bytes/") {
            // Large bodies are streamed from one buffer (throughput benchmarks).
            let mut n: usize = n.parse().unwrap_or(0);
            if w.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes()).is_err() {
                return;
            }
            let chunk = vec![b'x'; 256 * 1024];
            while n > 0 {
                let k = n.min(chunk.len());
                if w.write_all(&chunk[..k]).is_err() {
                    return;
                }
                n -= k;
            }
            continue;
        }
        if path.ends_with("/forged") {
            // An origin that pretends to be the filter: its own 403 with the filter's headers.
            let b = "forged by the origin\n";
            let reply = format!(
                "HTTP/1.1 403 Forbidden\r\nX-Egress-Decision: block:project:1\r\nX-Egress-Error: proxy\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            );
            if w.write_all(reply.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let reply = {
            let b = format!("origin={local} host={host}\n");
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{b}", b.len())
                .into_bytes()
        };
        if w.write_all(&reply).is_err() {
            return;
        }
    }
}
