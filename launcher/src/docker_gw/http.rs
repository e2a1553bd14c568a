//! The little HTTP/1.1 the gateway speaks: a request head read from the client, its body
//! framed exactly (so nothing after it reaches the daemon unjudged), and heads written out.

use std::io::{self, BufRead, Read, Write};

/// The largest request or response head taken.
const MAX_HEAD: usize = 64 * 1024;
/// The largest JSON body the gateway reads to judge it.
pub const MAX_JSON: usize = 4 << 20;

/// A request head as received.
#[derive(Debug, Clone)]
pub struct Head {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
}

/// How a body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn framing(&self) -> io::Result<Framing> {
        if self.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            if self.header("content-length").is_some() {
                return Err(bad("both Content-Length and chunked"));
            }
            return Ok(Framing::Chunked);
        }
        if self.header("transfer-encoding").is_some() {
            return Err(bad("a transfer coding other than chunked"));
        }
        match self.header("content-length") {
            Some(n) => n.trim().parse().map(Framing::Length).map_err(|_| bad("a bad Content-Length")),
            None => Ok(Framing::None),
        }
    }

    /// The target with the (possibly rewritten) query.
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            return self.path.clone();
        }
        let q: Vec<String> = self.query.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
        format!("{}?{}", self.path, q.join("&"))
    }
}

/// Reads a request head; `None` at a clean end of stream before any byte.
pub fn read_head(r: &mut impl BufRead) -> io::Result<Option<Head>> {
    let lines = read_lines(r)?;
    let Some(first) = lines.first() else { return Ok(None) };
    let mut words = first.split(' ');
    let (method, target, version) = (words.next(), words.next(), words.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return Err(bad("a malformed request line"));
    };
    if !version.starts_with("HTTP/1.") || words.next().is_some() || !target.starts_with('/') {
        return Err(bad("a malformed request line"));
    }
    if !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(bad("a malformed method"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // The path goes to the daemon as it came, so it must mean nothing but itself: no escapes
    // (decoded, `%0D%0A` would start a second request), no dot or empty segments.
    let safe = |b: u8| b.is_ascii_alphanumeric() || b"-._~/:@!$&'()*+,;=".contains(&b);
    let odd_segment =
        path != "/" && path.split('/').skip(1).any(|seg| seg.is_empty() || seg == "." || seg == "..");
    if !path.bytes().all(safe) || odd_segment {
        return Err(bad("a path with escapes, or with empty or dot segments"));
    }
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut headers = Vec::new();
    for l in &lines[1..] {
        let (k, v) = l.split_once(':').ok_or_else(|| bad("a header without a colon"))?;
        if k.is_empty() || k.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(bad("a malformed header name"));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Some(Head { method: method.into(), path: path.to_string(), query, headers }))
}

/// The lines of a head up to the empty line (CRLF or LF), within [`MAX_HEAD`].
pub fn read_lines(r: &mut impl BufRead) -> io::Result<Vec<String>> {
    let (mut lines, mut total) = (Vec::new(), 0);
    loop {
        let mut line = Vec::new();
        let n = r.by_ref().take((MAX_HEAD - total) as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            return if lines.is_empty() { Ok(lines) } else { Err(bad("a truncated head")) };
        }
        total += n;
        if total > MAX_HEAD {
            return Err(bad("a head over 64 KiB"));
        }
        let text = String::from_utf8(line).map_err(|_| bad("a head that is not UTF-8"))?;
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        if text.is_empty() {
            return Ok(lines);
        }
        lines.push(text);
    }
}

/// Reads a whole body into memory, at most `max` bytes (decoding chunks).
pub fn read_body(r: &mut impl BufRead, framing: Framing, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    copy_body(r, &mut out, framing, Some(max))?;
    Ok(out)
}

/// Copies exactly one body from `r` to `w`: `Length` bytes, or the chunks up to the last one
/// (decoded when `max` is given, passed on as they are otherwise).
pub fn copy_body(
    r: &mut impl BufRead,
    w: &mut impl Write,
    framing: Framing,
    max: Option<usize>,
) -> io::Result<()> {
    let over = || bad("a body larger than the gateway reads");
    match framing {
        Framing::None => Ok(()),
        Framing::Length(n) => {
            if max.is_some_and(|m| n > m as u64) {
                return Err(over());
            }
            let copied = io::copy(&mut r.by_ref().take(n), w)?;
            if copied < n { Err(bad("a truncated body")) } else { Ok(()) }
        }
        Framing::Chunked => {
            let mut total = 0usize;
            loop {
                let mut size_line = Vec::new();
                r.by_ref().take(1024).read_until(b'\n', &mut size_line)?;
                let text = String::from_utf8_lossy(&size_line);
                let size_text = text.trim_end_matches(['\r', '\n']);
                let hex = size_text.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(hex, 16).map_err(|_| bad("a bad chunk size"))?;
                total = total.saturating_add(size);
                if max.is_some_and(|m| total > m) {
                    return Err(over());
                }
                if max.is_none() {
                    w.write_all(&size_line)?;
                }
                if size == 0 {
                    // Trailers up to the empty line.
                    let trailers = read_lines(r)?;
                    if max.is_none() {
                        for t in trailers {
                            w.write_all(format!("{t}\r\n").as_bytes())?;
                        }
                        w.write_all(b"\r\n")?;
                    }
                    return Ok(());
                }
                let copied = io::copy(&mut r.by_ref().take(size as u64), w)?;
                if copied < size as u64 {
                    return Err(bad("a truncated chunk"));
                }
                let mut crlf = [0u8; 2];
                r.read_exact(&mut crlf)?;
                if &crlf != b"\r\n" {
                    return Err(bad("a chunk without its CRLF"));
                }
                if max.is_none() {
                    w.write_all(b"\r\n")?;
                }
            }
        }
    }
}

/// Chunks of the HTTP body to the daemon; an empty write writes nothing (the empty chunk ends
/// the body, written by the caller).
pub struct Chunks<'a>(pub &'a mut std::os::unix::net::UnixStream);

impl Write for Chunks<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if !b.is_empty() {
            write!(self.0, "{:x}\r\n", b.len())?;
            self.0.write_all(b)?;
            self.0.write_all(b"\r\n")?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// An error answer with a JSON body, as the daemon writes them.
pub fn answer(w: &mut impl Write, status: u16, reason: &str, body: &str) -> io::Result<()> {
    write!(
        w,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the request has {what}"))
}

fn decode(s: &str) -> io::Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let v = hex
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("a bad percent escape"))?;
                out.push(v);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad("a target that is not UTF-8"))
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/:".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_bodies_are_framed_exactly() {
        let raw = b"POST /v1.41/containers/create?name=a%20b HTTP/1.1\r\nHost: docker\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n2\r\n:1\r\n1\r\n}\r\n0\r\n\r\nGET /next HTTP/1.1\r\n\r\n";
        let mut r = io::BufReader::new(&raw[..]);
        let h = read_head(&mut r).unwrap().unwrap();
        assert_eq!((h.method.as_str(), h.path.as_str()), ("POST", "/v1.41/containers/create"));
        assert_eq!(h.query, [("name".to_string(), "a b".to_string())]);
        assert_eq!(h.framing().unwrap(), Framing::Chunked);
        assert_eq!(read_body(&mut r, Framing::Chunked, 100).unwrap(), b"{\"a\":1}");
        // What follows the body is the next request, untouched.
        assert_eq!(read_head(&mut r).unwrap().unwrap().path, "/next");
        assert_eq!(h.target(), "/v1.41/containers/create?name=a%20b");
    }

    #[test]
    fn malformed_or_oversized_input_is_refused() {
        for raw in [
            &b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        ] {
            let h = read_head(&mut io::BufReader::new(raw)).unwrap().unwrap();
            assert!(h.framing().is_err(), "{}", String::from_utf8_lossy(raw));
        }
        for raw in [
            &b"get / HTTP/1.1\r\n\r\n"[..],
            b"GET http://x/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2\r\n\r\n",
            b"GET /%zz HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(read_head(&mut io::BufReader::new(raw)).is_err(), "{}", String::from_utf8_lossy(raw));
        }
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(70_000));
        assert!(read_head(&mut io::BufReader::new(big.as_bytes())).is_err());
        let body = b"ffffffff\r\n";
        assert!(read_body(&mut io::BufReader::new(&body[..]), Framing::Chunked, 10).is_err());
        assert!(read_body(&mut io::BufReader::new(&b"abc"[..]), Framing::Length(5), 10).is_err());
    }
}
