//! Image references as the Docker daemon reads them.
//!
//! *Why the gateway parses references at all*: a pull (`POST /images/create?fromImage=…`, the
//! `docker run` of a missing image) is made by the gateway itself ([`super::distribution`]),
//! and the image it loads is tagged with the name the client asked for, so it must read the
//! reference exactly as the daemon will: a name the gateway took for a Docker Hub repository
//! but the daemon for a registry host would load one image under another's name. The grammar
//! and the normalisation are those of Docker's `reference.ParseNormalizedNamed`
//! (`distribution/reference`).

use super::{Refusal, Verdict};

/// Docker Hub's name in references.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// The old name of Docker Hub, which the daemon reads as [`DEFAULT_DOMAIN`].
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Longest name the daemon takes (domain and path together).
const NAME_MAX: usize = 255;

/// A parsed, normalised reference: `docker.io/library/busybox:latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `docker.io`, `registry.example.com:5000`, `[::1]:5000`, `localhost`.
    pub domain: String,
    /// `library/busybox`.
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.domain, self.path)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn bad(reference: &str, why: &str) -> Refusal {
    Refusal::new("image-reference", format!("{reference:?} is not an image reference Docker reads: {why}"))
}

impl Reference {
    /// `ParseNormalizedNamed`: `busybox` is `docker.io/library/busybox`; the first component
    /// is a registry host when it has a `.` or a `:`, is `localhost`, or has an upper-case
    /// letter (the daemon's own rule); `index.docker.io` is `docker.io`.
    pub fn parse(s: &str) -> Verdict<Reference> {
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
            return Err(bad(s, "a 64-digit hexadecimal string is an image id, not a name"));
        }
        let (mut domain, mut rest) = match s.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':']) || first == "localhost" || first.to_lowercase() != first =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DEFAULT_DOMAIN.to_string(), s.to_string()),
        };
        if domain == LEGACY_DEFAULT_DOMAIN {
            domain = DEFAULT_DOMAIN.to_string();
        }
        if domain == DEFAULT_DOMAIN && !rest.contains('/') {
            rest = format!("library/{rest}");
        }
        let (name_tag, digest) = match rest.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (rest.as_str(), None),
        };
        let (path, tag) = match name_tag.rsplit_once(':') {
            Some((p, t)) => (p, Some(t)),
            None => (name_tag, None),
        };
        if path.to_lowercase() != path {
            return Err(bad(s, "repository name must be lowercase"));
        }
        if !valid_domain(&domain) {
            return Err(bad(s, "the registry host is not a host name, an address or host:port"));
        }
        if path.is_empty() || !path.split('/').all(valid_path_component) {
            return Err(bad(s, "the repository path is not lower-case components joined by `/`"));
        }
        if domain.len() + 1 + path.len() > NAME_MAX {
            return Err(bad(s, "the name is longer than 255 characters"));
        }
        if let Some(t) = tag
            && !valid_tag(t)
        {
            return Err(bad(s, "the tag is not 1-128 letters, digits, `_`, `.` or `-`"));
        }
        if let Some(d) = digest
            && !valid_digest(d)
        {
            return Err(bad(s, "the digest is not algorithm:hex"));
        }
        Ok(Reference {
            domain,
            path: path.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        })
    }

    /// The reference a pull is for: `fromImage`, with the separate `tag` parameter (a digest
    /// or a tag, as the daemon reads it) when one is given.
    pub fn for_pull(from_image: &str, tag: Option<&str>) -> Verdict<Reference> {
        let mut r = Reference::parse(from_image)?;
        match tag.filter(|t| !t.is_empty()) {
            Some(t) if t.contains(':') => {
                if !valid_digest(t) {
                    return Err(bad(t, "the tag parameter is neither a tag nor a digest"));
                }
                r.digest = Some(t.to_string());
            }
            Some(t) => {
                if !valid_tag(t) {
                    return Err(bad(t, "the tag parameter is not a tag"));
                }
                r.tag = Some(t.to_string());
            }
            None => {}
        }
        Ok(r)
    }
}

/// `domain-component ('.' domain-component)* (':' port)?`, an IPv4 address, or `[IPv6]:port`.
fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else { return false };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(p) => ("x", p),
                None => return false,
            },
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, p),
            None => (d, "1"),
        }
    };
    let component = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !c.starts_with('-')
            && !c.ends_with('-')
    };
    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && host.split('.').all(component)
}

/// `[a-z0-9]+ (separator [a-z0-9]+)*`, where a separator is `.`, `_`, `__` or `-`+.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    let (mut i, n) = (0, b.len());
    if n == 0 || !alnum(b[0]) || !alnum(b[n - 1]) {
        return false;
    }
    while i < n {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

/// `[\w][\w.-]{0,127}`.
fn valid_tag(t: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    !t.is_empty()
        && t.len() <= 128
        && word(t.as_bytes()[0])
        && t.bytes().all(|b| word(b) || b == b'.' || b == b'-')
}

/// `algorithm ':' hex{32,}`, the algorithm `[A-Za-z][A-Za-z0-9]*` joined by `+`, `.`, `_`, `-`.
fn valid_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else { return false };
    let alg_ok = alg.split(['+', '.', '_', '-']).all(|c| {
        c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && c.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The reference of a `POST /images/create` that pulls (`fromImage`, the first one as the
/// daemon's form reading takes it), or `None` for an import of the request's body.
pub fn pull_reference(query: &[(String, String)]) -> Verdict<Option<Reference>> {
    let first = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    match first("fromImage").filter(|v| !v.is_empty()) {
        Some(image) => Reference::for_pull(image, first("tag")).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(s: &str) -> (String, String, Option<String>, Option<String>) {
        let r = Reference::parse(s).unwrap_or_else(|e| panic!("{s}: {e:?}"));
        (r.domain, r.path, r.tag, r.digest)
    }

    fn p(
        d: &str,
        path: &str,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> (String, String, Option<String>, Option<String>) {
        (d.into(), path.into(), tag.map(Into::into), digest.map(Into::into))
    }

    const SHA: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn references_normalise_as_the_daemon_reads_them() {
        assert_eq!(parsed("busybox"), p("docker.io", "library/busybox", None, None));
        assert_eq!(parsed("busybox:1.36"), p("docker.io", "library/busybox", Some("1.36"), None));
        assert_eq!(parsed("user/app"), p("docker.io", "user/app", None, None));
        assert_eq!(parsed("index.docker.io/busybox"), p("docker.io", "library/busybox", None, None));
        assert_eq!(parsed("docker.io/user/app:v1"), p("docker.io", "user/app", Some("v1"), None));
        assert_eq!(parsed("localhost/app"), p("localhost", "app", None, None));
        assert_eq!(parsed("localhost:5000/a/b:c"), p("localhost:5000", "a/b", Some("c"), None));
        assert_eq!(parsed("127.0.0.1:8099/x/y:z"), p("127.0.0.1:8099", "x/y", Some("z"), None));
        assert_eq!(parsed("[::1]:5000/x"), p("[::1]:5000", "x", None, None));
        assert_eq!(parsed(&format!("ghcr.io/o/r@{SHA}")), p("ghcr.io", "o/r", None, Some(SHA)));
        assert_eq!(
            parsed(&format!("reg.example:443/a:t@{SHA}")),
            p("reg.example:443", "a", Some("t"), Some(SHA))
        );
        // A first component with an upper-case letter is a host to the daemon, not a user.
        assert_eq!(parsed("Intranet/app"), p("Intranet", "app", None, None));
        // No dot, no colon, not localhost: a Docker Hub user, however host-like it looks.
        assert_eq!(parsed("intranet/app"), p("docker.io", "intranet/app", None, None));
        assert_eq!(parsed("a__b/c-d--e.f_g"), p("docker.io", "a__b/c-d--e.f_g", None, None));
    }

    #[test]
    fn malformed_references_are_refused() {
        for s in [
            "",
            "Busybox",
            "docker.io/User/app",
            "a/",
            "/a",
            "a//b",
            "a/.b",
            "a/b_",
            "a/b___c",
            "a:",
            "a:-x",
            "a@sha256:short",
            "host:port/x",
            "-host.example/x",
            "[::1/x",
            "[zz]:5000/x",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "a b",
            "reg.example/a?b",
        ] {
            let e = Reference::parse(s).expect_err(s);
            assert_eq!(e.rule, "image-reference", "{s}");
        }
        let long = format!("reg.example/{}", "a".repeat(250));
        assert!(Reference::parse(&long).is_err());
    }

    #[test]
    fn the_tag_parameter_is_a_tag_or_a_digest() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let r = pull_reference(&q(&[("fromImage", "busybox"), ("tag", "1.36")])).unwrap().unwrap();
        assert_eq!(r.to_string(), "docker.io/library/busybox:1.36");
        let r = pull_reference(&q(&[("fromImage", "r.example/a"), ("tag", SHA)])).unwrap().unwrap();
        assert_eq!(r.digest.as_deref(), Some(SHA));
        assert!(pull_reference(&q(&[("fromImage", "busybox"), ("tag", "a b")])).is_err());
        assert!(pull_reference(&q(&[("fromImage", "busybox"), ("tag", "x:y")])).is_err());
        // The first `fromImage` is the daemon's; an import has none.
        let r = pull_reference(&q(&[("fromImage", "127.0.0.1:5000/x"), ("fromImage", "busybox")]))
            .unwrap()
            .unwrap();
        assert_eq!(r.domain, "127.0.0.1:5000");
        assert_eq!(pull_reference(&q(&[("fromSrc", "-")])).unwrap(), None);
        assert_eq!(pull_reference(&q(&[("fromImage", ""), ("fromSrc", "-")])).unwrap(), None);
    }
}
