//! What every HTTP hop of ocsb shares: the web front, the model-key broker, the Docker gateway
//! and the egress filter each pass messages from one connection to another, and each must drop
//! the same headers on the way and read percent-escapes the same way. Pure: the callers own
//! their sockets and their header types; this says which names and which bytes.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// The headers that describe one connection, not the message, and so never pass a hop.
///
/// RFC 9110 §7.6.1 names `Connection` and the fields it lists, and the fields used that way
/// before it was defined: `Proxy-Connection`, `Keep-Alive`, `TE`, `Transfer-Encoding` and
/// `Upgrade`. `Trailer` announces fields of this hop's chunked framing (RFC 9112 §6.5), so it
/// goes with `Transfer-Encoding`. `Proxy-Authenticate` and `Proxy-Authorization` are the
/// credentials of the client↔proxy hop (RFC 9110 §11.7): a client's credentials for the filter
/// must not reach an origin, and nothing ocsb forwards to is a proxy that would want them.
/// Every hop of ocsb drops the whole list, together with the names its `Connection` lists
/// ([`hop_by_hop`]): a header a client marks as its hop's (`Connection: x-secret`) is not
/// passed on by one hop and forwarded by another.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Every header name (lower case) a hop drops: [`HOP_BY_HOP`] and the names listed in the
/// message's `Connection` values (`connection`, each value as received).
pub fn hop_by_hop<'a>(connection: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = HOP_BY_HOP.iter().map(|n| n.to_string()).collect();
    for listed in connection.into_iter().flat_map(|v| v.split(',')) {
        let n = listed.trim().to_ascii_lowercase();
        if !n.is_empty() && !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// Whether `name` is one of `dropped` (from [`hop_by_hop`]), in any case.
pub fn is_dropped(dropped: &[String], name: &str) -> bool {
    dropped.iter().any(|d| d.eq_ignore_ascii_case(name))
}

/// Percent-escapes decoded, where an escape that is not one (`%zz`) stays as it is and bytes
/// that are not UTF-8 become U+FFFD: for values only compared or shown (the web front's query
/// parameters), never forwarded.
pub fn decode_lossy(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// One component of a form-encoded query (`+` is a space), decoded exactly: a bad escape or a
/// result that is not UTF-8 is refused, with what was wrong. For values that are judged and
/// then encoded again (the Docker gateway's queries), where a lenient decoding would judge
/// something other than what the next hop reads.
pub fn decode_query_strict(s: &str) -> Result<String, &'static str> {
    let b = s.as_bytes();
    let escape_ok = |i: usize| b.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
    if b.iter().enumerate().any(|(i, &c)| c == b'%' && !escape_ok(i)) {
        return Err("a bad percent escape");
    }
    let spaced = s.replace('+', " ");
    String::from_utf8(percent_decode_str(&spaced).collect()).map_err(|_| "a target that is not UTF-8")
}

/// Kept as they are by [`encode`] with it: the unreserved characters (RFC 3986 §2.3) and `/`.
/// For a path or query value passed to OpenCode.
pub const PATH_VALUE: &AsciiSet =
    &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b'/');

/// [`PATH_VALUE`] and `:`: the Docker gateway's query values as it writes them again (image
/// references keep their `registry:port/name:tag` readable for the daemon's log).
pub const QUERY_VALUE: &AsciiSet = &PATH_VALUE.remove(b':');

/// Alphanumerics and `-_.` only: an id or name as one path segment or query value that can
/// change nothing around it.
pub const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// `s` percent-encoded (upper-case hex) except for the characters `keep` leaves out.
pub fn encode(s: &str, keep: &'static AsciiSet) -> String {
    utf8_percent_encode(s, keep).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_listed_names_join_the_fixed_list_once() {
        let d = hop_by_hop(["keep-alive, X-Secret", " ,upgrade"]);
        assert_eq!(d.len(), HOP_BY_HOP.len() + 1);
        assert!(is_dropped(&d, "x-secret") && is_dropped(&d, "Proxy-Authorization") && is_dropped(&d, "TE"));
        assert!(!is_dropped(&d, "accept") && !is_dropped(&d, "content-length"));
    }

    #[test]
    fn lenient_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(decode_lossy("%2Fhome%2Fu"), "/home/u");
        assert_eq!(decode_lossy("%zz%41%4"), "%zzA%4");
        assert_eq!(decode_lossy("a+b%FF"), "a+b\u{FFFD}");
    }

    #[test]
    fn strict_decoding_refuses_bad_escapes_and_non_utf8() {
        assert_eq!(decode_query_strict("a%20b+c%2B").unwrap(), "a b c+");
        assert_eq!(decode_query_strict("%C3%A9").unwrap(), "é");
        for bad in ["%zz", "%4", "a%", "%G0"] {
            assert_eq!(decode_query_strict(bad), Err("a bad percent escape"), "{bad}");
        }
        assert_eq!(decode_query_strict("%FF"), Err("a target that is not UTF-8"));
    }

    #[test]
    fn each_set_keeps_its_characters() {
        assert_eq!(encode("/tmp/a b~:", PATH_VALUE), "/tmp/a%20b~%3A");
        assert_eq!(encode("reg:5000/a b~", QUERY_VALUE), "reg:5000/a%20b~");
        assert_eq!(encode("a/b c~é", SEGMENT), "a%2Fb%20c%7E%C3%A9");
    }
}
