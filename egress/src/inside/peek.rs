//! The host name a redirected connection is for, from the first bytes its client sends: the
//! TLS ClientHello's server name (SNI) or an HTTP request's `Host` header. Pure functions: the
//! bytes come from a socket the client controls, so every length is checked and anything
//! malformed gives `None` (the connection is then judged by its address).

/// How much of the client's first bytes is read at most (a ClientHello with post-quantum key
/// shares passes 1,500 bytes; 16 KiB is TLS's record limit).
pub const MAX_FIRST: usize = 16 * 1024 + 5;

/// Whether `buf` holds a whole first TLS record, or an HTTP head up to its blank line, or
/// cannot become either: reading more would not change the answer of [`host_name`].
pub fn complete(buf: &[u8]) -> bool {
    if buf.len() >= MAX_FIRST {
        return true;
    }
    if buf.first() == Some(&0x16) {
        return buf.len() >= 5 && buf.len() >= 5 + u16::from_be_bytes([buf[3], buf[4]]) as usize;
    }
    let method = buf.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    match buf.get(method) {
        None => method >= 16, // empty, or still in what may be a method
        Some(b' ') if method > 0 => buf.windows(4).any(|w| w == b"\r\n\r\n"),
        Some(_) => true, // neither TLS nor HTTP
    }
}

/// The server name the client asked for, if its first bytes say so and it is a plain DNS
/// name (letters, digits, `-`, `_`, `.`; no port, no address).
pub fn host_name(buf: &[u8]) -> Option<String> {
    let name = if buf.first() == Some(&0x16) { sni(buf)? } else { http_host(buf)? };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let plain = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    plain.then_some(name)
}

/// A cursor over untrusted bytes: every read is bounds-checked.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| b[0] as usize)
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The `server_name` extension (type 0, host_name entry) of a ClientHello in one TLS record.
fn sni(buf: &[u8]) -> Option<String> {
    let mut rec = Cur(buf);
    rec.take(3)?; // content type, legacy version
    let mut hs = Cur(rec.vec16()?);
    if hs.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = hs.take(3)?;
    let mut ch = Cur(hs.take(u32::from_be_bytes([0, len[0], len[1], len[2]]) as usize)?);
    ch.take(2 + 32)?; // version, random
    ch.vec8()?; // session id
    ch.vec16()?; // cipher suites
    ch.vec8()?; // compression methods
    let mut exts = Cur(ch.vec16()?);
    while !exts.0.is_empty() {
        let ty = exts.u16()?;
        let mut ext = Cur(exts.vec16()?);
        if ty == 0 {
            let mut list = Cur(ext.vec16()?);
            while !list.0.is_empty() {
                let kind = list.u8()?;
                let name = list.vec16()?;
                if kind == 0 {
                    return String::from_utf8(name.to_vec()).ok();
                }
            }
        }
    }
    None
}

/// The `Host` header of an HTTP/1 request head, without its port.
fn http_host(buf: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(&buf[..buf.windows(4).position(|w| w == b"\r\n\r\n")?]).ok()?;
    let value = head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("host").then(|| v.trim())
    })?;
    let host = match value.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => value,
    };
    Some(host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello record naming `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let n = name.as_bytes();
        let mut sni = vec![0u8]; // host_name
        sni.extend((n.len() as u16).to_be_bytes());
        sni.extend(n);
        let mut ext = 0u16.to_be_bytes().to_vec();
        ext.extend(((sni.len() + 2) as u16).to_be_bytes());
        ext.extend((sni.len() as u16).to_be_bytes());
        ext.extend(sni);
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn reads_the_server_name_of_a_client_hello() {
        let rec = client_hello("API.Example.com.");
        assert!(complete(&rec) && !complete(&rec[..rec.len() - 1]));
        assert_eq!(host_name(&rec).as_deref(), Some("api.example.com"));
        // Every truncation and a lying length fail closed, never panic.
        for cut in 0..rec.len() {
            assert_eq!(host_name(&rec[..cut]), None, "cut at {cut}");
        }
        let mut lie = rec.clone();
        lie[rec.len() - 17] = 0xff;
        assert_eq!(host_name(&lie), None);
        assert_eq!(host_name(&client_hello("10.0.0.5")), None, "an address is not a name");
        assert_eq!(host_name(&client_hello("a b")), None);
    }

    #[test]
    fn reads_the_host_header_of_an_http_request() {
        let req = b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nhost: Example.org:8080\r\n\r\n";
        assert!(complete(req) && !complete(&req[..20]) && !complete(b"GE"));
        assert_eq!(host_name(req).as_deref(), Some("example.org"));
        assert_eq!(host_name(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), None);
        assert_eq!(host_name(b"GET / HTTP/1.1\r\n\r\n"), None);
        assert!(complete(b"SSH-2.0-x\r\n"), "not HTTP once the method is over");
        assert!(complete(b"\x00\x01"));
    }
}
