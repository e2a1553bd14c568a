//! The little HTTP/1.1 the gateway speaks: a request head read from the client, its body
//! framed exactly (so nothing after it reaches the daemon unjudged), the daemon's answer heads,
//! and heads written out. Heads are read to their empty line here, within [`MAX_HEAD`], and
//! parsed by `httparse`; the query's escapes are read by [`ocsb_policy::http`].

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
        header(&self.headers, name)
    }

    /// Every value of the header `name`, in order.
    pub fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers.iter().filter(move |(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
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
    if lines.is_empty() {
        return Ok(None);
    }
    let text = head_text(&lines);
    let mut slots = vec![httparse::EMPTY_HEADER; lines.len()];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(text.as_bytes()) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("a truncated head")),
        Err(httparse::Error::HeaderName | httparse::Error::HeaderValue) => {
            return Err(bad("a malformed header"));
        }
        Err(_) => return Err(bad("a malformed request line")),
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err(bad("a malformed request line"));
    };
    if !target.starts_with('/') {
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
    let decode = |s: &str| ocsb_policy::http::decode_query_strict(s).map_err(bad);
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let headers = pairs(req.headers)?;
    Ok(Some(Head { method: method.into(), path: path.to_string(), query, headers }))
}

/// An answer's head, from the daemon or the filter.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// How the body is framed, as the gateway's own calls read it: chunked whenever there is a
    /// transfer coding, else by its length, else up to the end of the connection.
    pub fn framing(&self) -> Framing {
        if self.header("transfer-encoding").is_some() {
            Framing::Chunked
        } else {
            self.header("content-length").and_then(|n| n.parse().ok()).map_or(Framing::None, Framing::Length)
        }
    }
}

/// Reads an answer's head (see [`parse_response`]).
pub fn read_response(r: &mut impl BufRead) -> io::Result<ResponseHead> {
    let lines = read_lines(r)?;
    parse_response(head_text(&lines).as_bytes())
}

/// An answer's head, up to and with its empty line.
pub fn parse_response(raw: &[u8]) -> io::Result<ResponseHead> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "the answer has a malformed head");
    let count = raw.iter().filter(|b| **b == b'\n').count();
    let mut slots = vec![httparse::EMPTY_HEADER; count];
    let mut resp = httparse::Response::new(&mut slots);
    match resp.parse(raw) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(malformed()),
    }
    let status = resp.code.ok_or_else(malformed)?;
    Ok(ResponseHead { status, headers: pairs(resp.headers).map_err(|_| malformed())? })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// The head's lines as one text again, with its empty line, for `httparse`.
fn head_text(lines: &[String]) -> String {
    let mut text = lines.join("\r\n");
    text.push_str("\r\n\r\n");
    text
}

fn pairs(headers: &[httparse::Header<'_>]) -> io::Result<Vec<(String, String)>> {
    headers
        .iter()
        .map(|h| {
            let v = std::str::from_utf8(h.value).map_err(|_| bad("a head that is not UTF-8"))?;
            Ok((h.name.to_string(), v.trim().to_string()))
        })
        .collect()
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

fn encode(s: &str) -> String {
    ocsb_policy::http::encode(s, ocsb_policy::http::QUERY_VALUE)
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
            b"GET / HTTP/1.1\r\n x: folded\r\n\r\n",
            b"GET /?a=%+1 HTTP/1.1\r\n\r\n",
            b"GET /?a=%FF HTTP/1.1\r\n\r\n",
        ] {
            assert!(read_head(&mut io::BufReader::new(raw)).is_err(), "{}", String::from_utf8_lossy(raw));
        }
        assert!(read_head(&mut io::BufReader::new(&b"\r\nGET / HTTP/1.1\r\n\r\n"[..])).unwrap().is_none());
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(70_000));
        assert!(read_head(&mut io::BufReader::new(big.as_bytes())).is_err());
        let body = b"ffffffff\r\n";
        assert!(read_body(&mut io::BufReader::new(&body[..]), Framing::Chunked, 10).is_err());
        assert!(read_body(&mut io::BufReader::new(&b"abc"[..]), Framing::Length(5), 10).is_err());
    }

    #[test]
    fn answer_heads_are_read_with_their_framing() {
        let raw = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let mut r = io::BufReader::new(&raw[..]);
        let h = read_response(&mut r).unwrap();
        assert_eq!((h.status, h.framing()), (201, Framing::Length(2)));
        assert_eq!(h.header("content-type"), Some("application/json"));
        let h = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert_eq!(h.framing(), Framing::Chunked);
        assert!(parse_response(b"HTTP/1.1 OK\r\n\r\n").is_err());
        assert!(read_response(&mut io::BufReader::new(&b""[..])).is_err());
    }
}
