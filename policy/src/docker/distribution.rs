//! What the gateway's own pull takes from a registry: the manifests it reads, the platform it
//! picks, the auth challenges it answers, and the archive it hands the daemon.
//!
//! *Why the gateway pulls*: a pull the daemon makes follows the registry's token challenge and
//! blob redirects itself, from the host's network and without the filter, to hosts nobody can
//! know before the pull (an allowed registry could send it to the host's loopback or the LAN).
//! So the gateway makes the pull, every connection through the filter, and hands the daemon a
//! `docker load` archive. This module is the pure part: nothing here touches the network.
//!
//! The formats are those of the OCI distribution and image specifications and Docker's
//! schema 2; the old schema 1 (unsigned layers named by the manifest alone) is refused.

use serde_json::{Value, json};

use super::registry::{DEFAULT_DOMAIN, Reference};
use super::{Refusal, Verdict};

/// The API host of Docker Hub, which references name as `docker.io`.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// The largest manifest, index, config or token answer read (bytes).
pub const MAX_DOCUMENT: usize = 4 << 20;
/// The most layers an image may have (Docker's own limit is 127 for overlay; this is looser).
pub const MAX_LAYERS: usize = 256;
/// The most bytes one pull may write to disk, layers and config together.
pub const MAX_PULL_BYTES: u64 = 64 << 30;
/// The most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// The `Accept` header of a manifest request: the four formats read here.
pub fn accept() -> String {
    [DOCKER_MANIFEST, DOCKER_LIST, OCI_MANIFEST, OCI_INDEX].join(", ")
}

/// Where the registry's API is, for a reference: the scheme, `host:port` and the repository
/// path in the API (`/v2/<path>/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    /// `host:port`, an IPv6 address in brackets.
    pub authority: String,
    pub repository: String,
}

impl Endpoint {
    /// Docker Hub's references go to its API host; a registry of its own is asked over HTTPS
    /// on 443, or over plain HTTP on 80 when the daemon counts it insecure (`insecure`), as the
    /// daemon would (it tries HTTPS first there; the gateway does not fall back).
    pub fn of(r: &Reference, insecure: bool) -> Endpoint {
        let host = if r.domain == DEFAULT_DOMAIN { DOCKER_HUB_API } else { r.domain.as_str() };
        let has_port = match host.strip_prefix('[') {
            Some(v6) => v6.contains("]:"),
            None => host.contains(':'),
        };
        let https = !insecure || r.domain == DEFAULT_DOMAIN;
        let authority =
            if has_port { host.to_string() } else { format!("{host}:{}", if https { 443 } else { 80 }) };
        Endpoint { https, authority, repository: r.path.clone() }
    }

    /// `https://host:port/v2/<repo>/<kind>/<what>`.
    pub fn url(&self, kind: &str, what: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}/v2/{}/{kind}/{what}", self.authority, self.repository)
    }
}

/// Whether the daemon counts `r`'s registry insecure (plain HTTP), from `GET /info`'s
/// `RegistryConfig`: listed by name in `IndexConfigs` with `Secure: false`, or an address
/// within `InsecureRegistryCIDRs` (which holds 127.0.0.0/8 by default). A name is not
/// resolved to test it against the ranges: such a registry is asked over HTTPS.
pub fn insecure(r: &Reference, registry_config: &Value) -> bool {
    if r.domain == DEFAULT_DOMAIN {
        return false;
    }
    if let Some(secure) = registry_config["IndexConfigs"][&r.domain]["Secure"].as_bool() {
        return !secure;
    }
    let host = match r.domain.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => r.domain.split(':').next().unwrap_or(""),
    };
    let Ok(ip) = host.parse::<std::net::IpAddr>() else { return false };
    let cidrs = registry_config["InsecureRegistryCIDRs"].as_array().cloned().unwrap_or_default();
    cidrs
        .iter()
        .filter_map(Value::as_str)
        .any(|c| crate::egress::IpNet::parse(c).is_ok_and(|n| n.contains(ip)))
}

/// An `os/architecture[/variant]` the image is chosen for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// The daemon's own (`GET /info`: `OSType`, `Architecture` as `uname -m` prints it).
    pub fn of_daemon(os: &str, machine: &str) -> Platform {
        let (architecture, variant) = match machine {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", None),
            "armv7l" => ("arm", Some("v7")),
            "armv6l" => ("arm", Some("v6")),
            "i386" | "i686" => ("386", None),
            other => (other, None),
        };
        Platform {
            os: os.to_string(),
            architecture: architecture.into(),
            variant: variant.map(str::to_string),
        }
    }

    /// A pull's `platform` parameter: `linux/arm64`, `linux/arm/v7`.
    pub fn parse(s: &str) -> Verdict<Platform> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok = |p: &&&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match parts.as_slice() {
            [os, arch] if [os, arch].iter().all(ok) => {
                Ok(Platform { os: os.to_lowercase(), architecture: arch.to_lowercase(), variant: None })
            }
            [os, arch, v] if [os, arch, v].iter().all(ok) => Ok(Platform {
                os: os.to_lowercase(),
                architecture: arch.to_lowercase(),
                variant: Some(v.to_lowercase()),
            }),
            _ => Err(Refusal::new("pull", format!("{s:?} is not a platform (os/architecture[/variant])"))),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

/// A blob a manifest names: its digest (`sha256:<64 hex>`) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub digest: String,
    pub size: u64,
}

impl Blob {
    /// The digest's hexadecimal part, a safe file name.
    pub fn hex(&self) -> &str {
        &self.digest["sha256:".len()..]
    }
}

/// What a manifest request answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manifest {
    /// An image: its config and layers, in order.
    Image { config: Blob, layers: Vec<Blob> },
    /// An index (a manifest list): the image manifest chosen for the platform.
    Index { chosen: String },
}

fn bad(what: impl Into<String>) -> Refusal {
    Refusal::new("pull", what)
}

/// A `sha256:` digest of 64 lower-case hex digits: the only algorithm the gateway checks, so
/// the only one it takes (the file names of the archive are made of it).
pub fn digest(v: &Value, what: &str) -> Verdict<String> {
    let d = v.as_str().unwrap_or_default();
    let hex = d.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(d.to_string())
    } else {
        Err(bad(format!("the registry's {what} names a digest that is not sha256{}", shown(d))))
    }
}

/// `: "VALUE"` for a value a registry sent (a media type, a digest) that is short and made of
/// the characters such values are made of, and nothing otherwise: a message quotes what helps
/// to know, and no text of the remote side's choosing reaches the agent through it.
fn shown(v: &str) -> String {
    let plain = !v.is_empty()
        && v.len() <= 100
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._/:=".contains(&b));
    if plain { format!(": {v:?}") } else { String::new() }
}

fn blob(v: &Value, what: &str) -> Verdict<Blob> {
    let size = v["size"].as_u64().ok_or_else(|| bad(format!("the registry's {what} has no size")))?;
    Ok(Blob { digest: digest(&v["digest"], what)?, size })
}

/// Reads a manifest of `content_type` (the answer's header; the document's own `mediaType`
/// when the header is generic), choosing from an index the entry for `want`.
pub fn manifest(content_type: &str, body: &[u8], want: &Platform) -> Verdict<Manifest> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the registry's manifest is not JSON: {e}")))?;
    let header = content_type.split(';').next().unwrap_or("").trim();
    let kind = match v["mediaType"].as_str() {
        Some(t) if ![DOCKER_MANIFEST, DOCKER_LIST, OCI_MANIFEST, OCI_INDEX].contains(&header) => t,
        _ => header,
    };
    match kind {
        DOCKER_MANIFEST | OCI_MANIFEST => image(&v),
        DOCKER_LIST | OCI_INDEX => choose(&v, want).map(|chosen| Manifest::Index { chosen }),
        "" if v["manifests"].is_array() => choose(&v, want).map(|chosen| Manifest::Index { chosen }),
        "" if v["layers"].is_array() => image(&v),
        other if other.contains("manifest.v1") || v["schemaVersion"] == 1 => {
            Err(bad("the registry offers only a schema 1 manifest, which Docker no longer pulls")
                .allow("push the image again with a current Docker or another OCI tool"))
        }
        other => Err(bad(format!(
            "the registry answered a manifest of another type{}, not an image",
            shown(other)
        ))),
    }
}

fn image(v: &Value) -> Verdict<Manifest> {
    let config = blob(&v["config"], "config")?;
    let list = v["layers"].as_array().ok_or_else(|| bad("the registry's manifest lists no layers"))?;
    if list.len() > MAX_LAYERS {
        return Err(bad(format!("the image has {} layers, more than {MAX_LAYERS}", list.len())));
    }
    let mut layers = Vec::with_capacity(list.len());
    for l in list {
        let t = l["mediaType"].as_str().unwrap_or_default();
        if t.contains("foreign") || t.contains("nondistributable") || l.get("urls").is_some() {
            // The daemon would fetch these from the URLs the manifest names.
            return Err(bad("the image has a layer fetched from a URL of its own (a foreign layer)")
                .allow("use an image without foreign layers"));
        }
        if t.contains("zstd") {
            return Err(bad("the image has a zstd-compressed layer, which `docker load` here cannot read"));
        }
        layers.push(blob(l, "layer")?);
    }
    // A blob is fetched once by its digest, and its size is the length its archive entry
    // declares: one digest named with two sizes would make an entry's length lie.
    let all = || std::iter::once(&config).chain(&layers);
    if let Some(b) = all().find(|b| all().any(|o| o.digest == b.digest && o.size != b.size)) {
        return Err(bad(format!("the registry's manifest names blob {} with two sizes", b.digest)));
    }
    let total = layers.iter().map(|b| b.size).fold(config.size, u64::saturating_add);
    if total > MAX_PULL_BYTES || config.size > MAX_DOCUMENT as u64 {
        return Err(bad(format!(
            "the image is {total} bytes, more than the gateway pulls ({MAX_PULL_BYTES})"
        )));
    }
    Ok(Manifest::Image { config, layers })
}

/// The digest of the index entry for `want`: os and architecture equal, and the variant when
/// both name one (`arm64` without a variant is `v8`).
fn choose(v: &Value, want: &Platform) -> Verdict<String> {
    let entries = v["manifests"].as_array().ok_or_else(|| bad("the registry's index lists no manifests"))?;
    let norm = |arch: &str, variant: Option<&str>| -> Option<String> {
        match (arch, variant) {
            ("arm64", None) => Some("v8".into()),
            (_, v) => v.map(str::to_string),
        }
    };
    let wanted = norm(&want.architecture, want.variant.as_deref());
    for e in entries {
        let p = &e["platform"];
        let (os, arch) = (p["os"].as_str().unwrap_or(""), p["architecture"].as_str().unwrap_or(""));
        if os != want.os || arch != want.architecture {
            continue;
        }
        let variant = norm(arch, p["variant"].as_str());
        if wanted.is_none() || variant.is_none() || variant == wanted {
            return digest(&e["digest"], "index");
        }
    }
    Err(bad(format!("the image has no variant for {want}")).allow("pull an image built for this platform"))
}

/// An auth challenge (`WWW-Authenticate`) the gateway answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// A token service: `realm` (a URL), with `service` and `scope` when the registry names them.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
}

impl Challenge {
    /// `Bearer realm="https://auth.example/token",service="registry.example"`.
    pub fn parse(header: &str) -> Option<Challenge> {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = auth_params(rest);
        let get = |k: &str| params.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
        Some(Challenge::Bearer { realm: get("realm")?, service: get("service"), scope: get("scope") })
    }
}

/// `k="v", k2=v2` with quoted strings holding commas and `\"`.
fn auth_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',')).collect();
        if key.is_empty() || chars.next() != Some('=') {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value =
                std::iter::from_fn(|| chars.next_if(|c| *c != ',')).collect::<String>().trim().to_string();
        }
        out.push((key.trim().to_string(), value));
    }
}

/// The scope a pull asks the token service for.
pub fn pull_scope(repository: &str) -> String {
    format!("repository:{repository}:pull")
}

/// The token in a token service's answer (`token`, or OAuth's `access_token`).
pub fn token(body: &[u8]) -> Verdict<String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| bad("the token service's answer is not JSON"))?;
    v["token"]
        .as_str()
        .or(v["access_token"].as_str())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .ok_or_else(|| bad("the token service answered no usable token"))
}

/// The credentials a client sends with a pull (`X-Registry-Auth`, base64url JSON).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    pub username: Option<String>,
    pub password: Option<String>,
    /// A bearer token for the registry itself (`registrytoken`).
    pub registry_token: Option<String>,
}

impl Credentials {
    /// From the header's decoded JSON. An `identitytoken` (an OAuth refresh token) is refused:
    /// the gateway does not run that exchange.
    pub fn from_json(v: &Value) -> Verdict<Credentials> {
        let s = |k: &str| v[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        if s("identitytoken").is_some() {
            return Err(bad("the registry login is an identity token, which the gateway's pull cannot use")
                .allow("log in to the registry with a user name and password or access token"));
        }
        Ok(Credentials {
            username: s("username"),
            password: s("password"),
            registry_token: s("registrytoken"),
        })
    }
}

/// The `manifest.json` of a `docker load` archive: one image, its config at `<hex>.json`, its
/// layers at `<hex>/layer.tar` (compressed as the registry sent them: the daemon decompresses
/// each and checks it against the config's `diff_ids`), tagged `tag`.
pub fn archive_manifest(config: &Blob, layers: &[Blob], tag: &str) -> String {
    let layers: Vec<String> = layers.iter().map(|l| format!("{}/layer.tar", l.hex())).collect();
    json!([{ "Config": format!("{}.json", config.hex()), "RepoTags": [tag], "Layers": layers }]).to_string()
}

/// The name the loaded image is tagged with: the reference as the daemon names it
/// (`busybox:latest` for Docker Hub's official images). A reference by digest has no tag to
/// give, and `docker load` cannot record a digest: refused.
pub fn load_tag(r: &Reference) -> Verdict<String> {
    if r.digest.is_some() {
        return Err(bad(format!(
            "{r} names a digest: the gateway pulls images itself and loads them by tag"
        ))
        .allow("pull by tag (name:tag)"));
    }
    let tag = r.tag.as_deref().unwrap_or("latest");
    let name = if r.domain == DEFAULT_DOMAIN {
        r.path.strip_prefix("library/").unwrap_or(&r.path).to_string()
    } else {
        format!("{}/{}", r.domain, r.path)
    };
    Ok(format!("{name}:{tag}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Reference {
        Reference::parse(s).unwrap()
    }

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn endpoints_follow_the_daemons_reading() {
        let hub = Endpoint::of(&r("busybox"), true);
        assert_eq!(
            hub.url("manifests", "latest"),
            "https://registry-1.docker.io:443/v2/library/busybox/manifests/latest"
        );
        assert_eq!(
            Endpoint::of(&r("192.0.2.1:80/a/b:1"), true).url("blobs", D1),
            format!("http://192.0.2.1:80/v2/a/b/blobs/{D1}")
        );
        assert_eq!(Endpoint::of(&r("ghcr.io/o/i"), false).authority, "ghcr.io:443");
        assert_eq!(Endpoint::of(&r("reg.test/o/i"), true).authority, "reg.test:80");
        assert_eq!(Endpoint::of(&r("[::1]:5000/o/i"), true).authority, "[::1]:5000");
    }

    #[test]
    fn insecure_registries_are_the_daemons() {
        let cfg = json!({"InsecureRegistryCIDRs": ["127.0.0.0/8", "192.0.2.0/24"],
                         "IndexConfigs": {"named.test:5000": {"Secure": false}, "docker.io": {"Secure": true}}});
        assert!(insecure(&r("192.0.2.1:80/a/b"), &cfg));
        assert!(insecure(&r("127.0.0.1:8099/a/b"), &cfg));
        assert!(insecure(&r("named.test:5000/a/b"), &cfg));
        assert!(!insecure(&r("198.51.100.1/a/b"), &cfg));
        assert!(!insecure(&r("other.test/a/b"), &cfg), "names are not resolved");
        assert!(!insecure(&r("busybox"), &cfg));
    }

    #[test]
    fn platforms_of_the_daemon_and_of_the_request() {
        assert_eq!(Platform::of_daemon("linux", "x86_64").to_string(), "linux/amd64");
        assert_eq!(Platform::of_daemon("linux", "armv7l").to_string(), "linux/arm/v7");
        assert_eq!(Platform::parse("linux/arm64").unwrap().to_string(), "linux/arm64");
        assert_eq!(Platform::parse("Linux/ARM/v7").unwrap().to_string(), "linux/arm/v7");
        assert!(Platform::parse("linux").is_err());
        assert!(Platform::parse("linux/../x").is_err());
    }

    #[test]
    fn an_index_gives_the_platforms_image() {
        let idx = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"digest": D1, "size": 1, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": D2, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}}]})
        .to_string();
        let amd = Platform::of_daemon("linux", "x86_64");
        assert_eq!(
            manifest("application/json", idx.as_bytes(), &amd).unwrap(),
            Manifest::Index { chosen: D2.into() }
        );
        let arm = Platform::parse("linux/arm64").unwrap();
        assert_eq!(manifest(OCI_INDEX, idx.as_bytes(), &arm).unwrap(), Manifest::Index { chosen: D1.into() });
        let e = manifest(OCI_INDEX, idx.as_bytes(), &Platform::parse("linux/s390x").unwrap()).unwrap_err();
        assert!(e.what.contains("linux/s390x"), "{e:?}");
    }

    #[test]
    fn images_are_read_and_what_the_daemon_would_fetch_itself_is_refused() {
        let m = |layers: Value| {
            json!({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                   "config": {"digest": D1, "size": 10}, "layers": layers})
            .to_string()
        };
        let ok = m(
            json!([{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": D2, "size": 5}]),
        );
        assert_eq!(
            manifest(DOCKER_MANIFEST, ok.as_bytes(), &Platform::of_daemon("linux", "x86_64")).unwrap(),
            Manifest::Image {
                config: Blob { digest: D1.into(), size: 10 },
                layers: vec![Blob { digest: D2.into(), size: 5 }]
            }
        );
        let p = Platform::of_daemon("linux", "x86_64");
        let foreign = m(
            json!([{"mediaType": "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", "digest": D2, "size": 5, "urls": ["http://127.0.0.1/x"]}]),
        );
        assert!(manifest(DOCKER_MANIFEST, foreign.as_bytes(), &p).unwrap_err().what.contains("foreign"));
        let urls = m(
            json!([{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D2, "size": 5, "urls": ["http://x"]}]),
        );
        assert!(manifest(OCI_MANIFEST, urls.as_bytes(), &p).is_err());
        let path = m(json!([{"digest": "sha256:../../etc/passwd", "size": 5}]));
        assert!(manifest(OCI_MANIFEST, path.as_bytes(), &p).unwrap_err().what.contains("not sha256"));
        let other = m(json!([{"digest": "sha512:aa", "size": 5}]));
        assert!(manifest(OCI_MANIFEST, other.as_bytes(), &p).is_err());
        let twice = m(json!([{"digest": D2, "size": 5}, {"digest": D2, "size": 5}]));
        assert!(matches!(
            manifest(OCI_MANIFEST, twice.as_bytes(), &p).unwrap(),
            Manifest::Image { layers, .. } if layers.len() == 2
        ));
        let two_sizes = m(json!([{"digest": D2, "size": 5}, {"digest": D2, "size": 6}]));
        assert!(manifest(OCI_MANIFEST, two_sizes.as_bytes(), &p).unwrap_err().what.contains("two sizes"));
        let as_config = m(json!([{"digest": D1, "size": 11}]));
        assert!(manifest(OCI_MANIFEST, as_config.as_bytes(), &p).unwrap_err().what.contains("two sizes"));
        let huge = m(json!([{"digest": D2, "size": MAX_PULL_BYTES}]));
        assert!(manifest(OCI_MANIFEST, huge.as_bytes(), &p).is_err());
        let v1 = json!({"schemaVersion": 1, "fsLayers": []}).to_string();
        assert!(
            manifest("application/vnd.docker.distribution.manifest.v1+prettyjws", v1.as_bytes(), &p)
                .unwrap_err()
                .what
                .contains("schema 1")
        );
        assert!(manifest(OCI_MANIFEST, b"<html>", &p).is_err());
        // What the registry named is quoted only when it looks like what it stands for.
        let page = "<html><body>".repeat(1000);
        let e = manifest(OCI_MANIFEST, m(json!([{"digest": page, "size": 5}])).as_bytes(), &p).unwrap_err();
        assert!(!e.what.contains("<html>") && e.what.len() < 200, "{e:?}");
        let e = manifest(OCI_MANIFEST, other.as_bytes(), &p).unwrap_err();
        assert!(e.what.ends_with(r#"not sha256: "sha512:aa""#), "{e:?}");
        let e = manifest("text/html", json!({"mediaType": page}).to_string().as_bytes(), &p).unwrap_err();
        assert!(!e.what.contains("<html>") && e.what.len() < 200, "{e:?}");
        let e = manifest("application/vnd.x+json", b"{}", &p).unwrap_err();
        assert!(e.what.contains(r#""application/vnd.x+json""#), "{e:?}");
    }

    #[test]
    fn challenges_and_tokens() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/busybox:pull".into()),
            })
        );
        assert_eq!(
            Challenge::parse(r#"bearer realm="https://a.test/t?x=1,2", service=s"#),
            Some(Challenge::Bearer {
                realm: "https://a.test/t?x=1,2".into(),
                service: Some("s".into()),
                scope: None
            })
        );
        assert_eq!(Challenge::parse(r#"Basic realm="Registry""#), Some(Challenge::Basic));
        assert_eq!(Challenge::parse("Bearer service=x"), None);
        assert_eq!(Challenge::parse("Negotiate"), None);
        assert_eq!(token(br#"{"token":"abc.def"}"#).unwrap(), "abc.def");
        assert_eq!(token(br#"{"access_token":"t"}"#).unwrap(), "t");
        assert!(token(br#"{"token":"a\r\nX-Evil: 1"}"#).is_err());
        assert!(token(b"<html>").is_err());
    }

    #[test]
    fn credentials_and_the_loaded_name() {
        let c =
            Credentials::from_json(&json!({"username": "u", "password": "p", "serveraddress": "x"})).unwrap();
        assert_eq!((c.username.as_deref(), c.password.as_deref()), (Some("u"), Some("p")));
        assert!(Credentials::from_json(&json!({"identitytoken": "t"})).is_err());
        assert_eq!(load_tag(&r("busybox")).unwrap(), "busybox:latest");
        assert_eq!(load_tag(&r("docker.io/bitnami/redis:7")).unwrap(), "bitnami/redis:7");
        assert_eq!(load_tag(&r("192.0.2.1:80/ocsb/pulled:1")).unwrap(), "192.0.2.1:80/ocsb/pulled:1");
        assert!(load_tag(&r(&format!("busybox@{D1}"))).unwrap_err().what.contains("digest"));
        let a = archive_manifest(
            &Blob { digest: D1.into(), size: 1 },
            &[Blob { digest: D2.into(), size: 1 }],
            "x:1",
        );
        let v: Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v[0]["Config"], format!("{}.json", &D1[7..]));
        assert_eq!(v[0]["Layers"][0], format!("{}/layer.tar", &D2[7..]));
        assert_eq!(v[0]["RepoTags"][0], "x:1");
    }
}
