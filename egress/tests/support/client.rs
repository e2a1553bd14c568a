//! Raw HTTP client for the proxies (not curl: curl normalises the bypass forms before sending).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Shown in the failure messages (`{:?}`) only.
    #[allow(dead_code)]
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub fn read_reply(r: &mut BufReader<TcpStream>, head_only: bool) -> Option<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = Vec::new();
    if !head_only {
        let len = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok());
        match len {
            Some(n) => {
                body.resize(n, 0);
                r.read_exact(&mut body).ok()?;
            }
            None => {
                let _ = r.read_to_end(&mut body);
            }
        }
    }
    Some(Reply { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn open(proxy: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&proxy, Duration::from_secs(5)).expect("connect to proxy");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Send `request` verbatim, return the proxy's reply. `None` when the proxy closed without one.
pub fn raw(proxy: SocketAddr, request: &str) -> Option<Reply> {
    let mut s = open(proxy);
    s.write_all(request.as_bytes()).ok()?;
    let mut r = BufReader::new(s);
    read_reply(&mut r, request.starts_with("HEAD "))
}

pub fn get(proxy: SocketAddr, url: &str, host: &str) -> Option<Reply> {
    raw(proxy, &format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"))
}

/// CONNECT, and when it succeeds speak HTTP through the tunnel. Returns the CONNECT reply and
/// the inner reply.
pub fn connect(proxy: SocketAddr, authority: &str) -> (Option<Reply>, Option<Reply>) {
    let mut s = open(proxy);
    if s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes()).is_err() {
        return (None, None);
    }
    let mut r = BufReader::new(s.try_clone().unwrap());
    let first = read_reply(&mut r, true);
    let Some(first) = first else { return (None, None) };
    if first.status != 200 {
        // Drain a body if any so the connection closes cleanly.
        return (Some(first), None);
    }
    s.write_all(b"GET /through-tunnel HTTP/1.1\r\nHost: tunnel\r\n\r\n").unwrap();
    let inner = read_reply(&mut r, false);
    (Some(first), inner)
}
