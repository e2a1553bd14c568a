//! The front's HTTP helpers on hyper's types: the lists and the decoding are
//! [`ocsb_policy::http`]'s, shared with the key broker, the Docker gateway and the egress filter.

use hyper::Uri;
use hyper::header::{self, HeaderMap};

/// Removes the headers of one hop (the fixed list and what the message's `Connection` names, as
/// [`ocsb_policy::http::hop_by_hop`] says, so every hop strips alike).
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed = h.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    for name in ocsb_policy::http::hop_by_hop(listed) {
        h.remove(name.as_str());
    }
}

/// Whether the request asks to upgrade its connection (`Connection: upgrade` with `Upgrade`).
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.get(header::UPGRADE).is_some()
        && h.get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

/// The value of query parameter `name`, percent-decoded (leniently: it is compared, never
/// forwarded).
pub fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| ocsb_policy::http::decode_lossy(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let u: Uri = "/a/b?x=1&auth_token=abc&y=%2Fhome%2Fu&z=%zz%41".parse().unwrap();
        assert_eq!(query_param(&u, "y").unwrap(), "/home/u");
        assert_eq!(query_param(&u, "z").unwrap(), "%zzA");
        assert_eq!(query_param(&u, "w"), None);
    }
}
