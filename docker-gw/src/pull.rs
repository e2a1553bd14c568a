//! Pulls: made by the gateway itself, every connection through the project's filter, and
//! loaded into the daemon.
//!
//! *Why not let the daemon pull*: it dials the registry from the host's network namespace
//! without the filter, and then follows the registry's token challenge and blob redirects to
//! whatever hosts they name. Judging the registry's host first was not enough: an allowed
//! registry could send the daemon to the host's loopback, the LAN or a blocked host, and the
//! daemon resolves the name again itself. So the gateway speaks the registry protocol
//! ([`super::fetch`]: each hop a connection the filter judges, dials and logs), checks every
//! blob against its digest, and hands the daemon a `docker load` archive: the daemon opens no
//! connection for a pull at all.
//!
//! What the agent sees of a failure is the gateway's own words (the host, the filter's rule,
//! the status): a remote side's body never reaches it, and the daemon's messages about the
//! archive go to the gateway's log.

use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use hyper::header;
use ocsb_policy::docker::Refusal;
use ocsb_policy::docker::distribution::{
    self as dist, Blob, Challenge, Credentials, Endpoint, MAX_DOCUMENT, Manifest, Platform,
};
use ocsb_policy::docker::registry::{self, Reference};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::Url;

use super::fetch::{Answer, Failure, Via, host_of};
use super::http::{self, Framing};
use super::{Daemon, Shared};

/// How often a download says how far it got (and so finds out that its client went away).
const PROGRESS_STEP: u64 = 1 << 20;
/// A progress line longer than this is dropped (the daemon's are a few hundred bytes).
const MAX_LINE: usize = 64 << 10;

/// What a pull needs besides the daemon: the filter's address, the TLS client and where blobs
/// wait.
pub(super) struct Registries {
    /// The filter on the host's loopback.
    pub filter: std::net::SocketAddr,
    /// Makes the TLS client ([`crate::Config::tls`]).
    pub tls: fn() -> Result<std::sync::Arc<rustls::ClientConfig>, String>,
    /// A private directory (the project's egress state) where a pull keeps its blobs until
    /// they are loaded.
    pub work_dir: PathBuf,
    /// The gateway's own log, named in the agent's message for a failed load.
    pub docker_log: PathBuf,
}

/// The reference a call pulls, when it is a pull (`POST /images/create?fromImage=…`).
pub(super) fn pulled(head: &http::Head) -> Option<Reference> {
    use ocsb_policy::docker::route::{Call, route};
    match route(&head.method, &head.path) {
        Ok(Call::Pull) => registry::pull_reference(&head.query).ok().flatten(),
        _ => None,
    }
}

/// Serves a pull of `image` to `client`. `Err` is a refusal made before any answer was
/// written (the caller answers it); once the image is found, progress and any later failure
/// go to the client as the daemon's stream would carry them.
pub(super) fn serve(
    gw: &Shared,
    head: &http::Head,
    image: &Reference,
    client: &mut impl Write,
) -> Result<io::Result<()>, Refusal> {
    let tag = dist::load_tag(image)?;
    let info = gw.daemon.call("GET", "/info", None).map_err(|e| daemon_refusal(&e))?.1;
    let want = match head.query.iter().find(|(k, _)| k == "platform").map(|(_, v)| v.as_str()) {
        Some(p) if !p.is_empty() => Platform::parse(p)?,
        _ => Platform::of_daemon(
            info["OSType"].as_str().unwrap_or("linux"),
            info["Architecture"].as_str().unwrap_or("x86_64"),
        ),
    };
    let creds = credentials(head.header("x-registry-auth"))?;
    let endpoint = Endpoint::of(image, dist::insecure(image, &info["RegistryConfig"]));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Refusal::new("daemon", format!("the gateway cannot make connections: {e}")))?;
    let tls = (gw.registries.tls)().map_err(|e| Refusal::new("pull", e))?;
    let mut session = Session {
        via: Via { filter: gw.registries.filter, tls },
        endpoint,
        auth: creds.registry_token.as_ref().map(|t| format!("Bearer {t}")),
        creds,
        image,
    };
    let found = rt.block_on(session.manifest(&want)).map_err(|f| refusal(image, f))?;
    Ok(rt.block_on(deliver(gw, &mut session, found, &tag, client)))
}

/// An image's manifest, found: its digest, config and layers.
struct Found {
    digest: String,
    config: Blob,
    layers: Vec<Blob>,
}

/// A pull's conversation with one registry.
struct Session<'a> {
    via: Via,
    endpoint: Endpoint,
    creds: Credentials,
    /// The `Authorization` the registry took (a bearer token once one was issued).
    auth: Option<String>,
    image: &'a Reference,
}

impl Session<'_> {
    /// A `GET` of the registry's `url`, logging in once when it asks to.
    async fn get(&mut self, url: &str, accept: Option<&str>) -> Result<Answer, Failure> {
        let url = parse(url)?;
        let a = self.via.get(url.clone(), accept, self.auth.as_deref()).await?;
        if !registry_challenge(a.status, &url, &a.url) {
            return Ok(a);
        }
        let challenge = a.header(header::WWW_AUTHENTICATE).and_then(Challenge::parse);
        self.auth = Some(match challenge {
            Some(Challenge::Bearer { realm, service, .. }) => {
                format!("Bearer {}", self.token(&realm, service.as_deref()).await?)
            }
            Some(Challenge::Basic) => self.basic().ok_or_else(|| {
                Failure::Failed(format!(
                    "{} asks for a login: docker login {}",
                    host_of(&url),
                    self.image.domain
                ))
            })?,
            None => {
                return Err(Failure::Failed(format!(
                    "{} asks for a login the gateway cannot give",
                    host_of(&url)
                )));
            }
        });
        self.via.get(url, accept, self.auth.as_deref()).await
    }

    fn basic(&self) -> Option<String> {
        let (u, p) = (self.creds.username.as_ref()?, self.creds.password.as_ref()?);
        Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))))
    }

    /// A pull token from the token service the registry named (itself judged by the filter
    /// like any host), with the user's login when the client sent one.
    async fn token(&self, realm: &str, service: Option<&str>) -> Result<String, Failure> {
        let mut url = parse(realm)?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            q.append_pair("scope", &dist::pull_scope(&self.endpoint.repository));
        }
        let a = self.via.get(url.clone(), None, self.basic().as_deref()).await?;
        match a.status {
            200 => {
                let body = a.bytes(MAX_DOCUMENT).await?;
                dist::token(&body).map_err(|r| Failure::Failed(r.what))
            }
            401 | 403 => {
                Err(Failure::Failed(format!("the token service {} refused the login", host_of(&url))))
            }
            s => Err(Failure::Failed(format!("the token service {} answered {s}", host_of(&url)))),
        }
    }

    /// The image manifest for `want`, through an index when the registry answers one.
    async fn manifest(&mut self, want: &Platform) -> Result<Found, Failure> {
        let mut what = self.image.tag.clone().unwrap_or_else(|| "latest".into());
        let mut top = None;
        for _ in 0..2 {
            let url = self.endpoint.url("manifests", &what);
            let a = self.get(&url, Some(&dist::accept())).await?;
            match a.status {
                200 => {}
                401 | 403 => {
                    return Err(Failure::Failed(format!(
                        "the registry refused access to {} (docker login {} first, if it is private)",
                        self.image, self.image.domain
                    )));
                }
                404 => return Err(Failure::Failed(format!("the registry has no image {}", self.image))),
                s => return Err(Failure::Failed(format!("the registry answered {s} for {}", self.image))),
            }
            let kind = a.header(header::CONTENT_TYPE).unwrap_or_default().to_string();
            let body = a.bytes(MAX_DOCUMENT).await?;
            let digest = sha256(&body);
            if top.is_some() && digest != what {
                return Err(Failure::Failed(format!(
                    "the registry's manifest for {what} has another digest"
                )));
            }
            let top = top.get_or_insert(digest).clone();
            match dist::manifest(&kind, &body, want).map_err(|r| Failure::Failed(r.what))? {
                Manifest::Image { config, layers } => return Ok(Found { digest: top, config, layers }),
                Manifest::Index { chosen } => what = chosen,
            }
        }
        Err(Failure::Failed(format!("the registry's index for {} names another index", self.image)))
    }

    /// Downloads `blob` into `dir/<hex>`, checking its size and digest as it comes.
    /// `progress` hears the bytes so far after each [`PROGRESS_STEP`]; its error (the client
    /// went away) ends the download.
    async fn blob(
        &mut self,
        blob: &Blob,
        dir: &Path,
        progress: &mut dyn FnMut(u64) -> io::Result<()>,
    ) -> Result<PathBuf, Failure> {
        let url = self.endpoint.url("blobs", &blob.digest);
        let mut a = self.get(&url, None).await?;
        if a.status != 200 {
            return Err(Failure::Failed(format!(
                "the registry answered {} for blob {}",
                a.status, blob.digest
            )));
        }
        let path = dir.join(blob.hex());
        let failed = |e: io::Error| Failure::Failed(format!("cannot write {}: {e}", path.display()));
        let mut file = std::fs::File::create_new(&path).map_err(failed)?;
        let (mut hash, mut got) = (Sha256::new(), 0u64);
        while let Some(piece) = a.next().await? {
            got += piece.len() as u64;
            if got > blob.size {
                return Err(Failure::Failed(format!(
                    "blob {} is larger than its manifest says",
                    blob.digest
                )));
            }
            hash.update(&piece);
            file.write_all(&piece).map_err(failed)?;
            if got / PROGRESS_STEP != (got - piece.len() as u64) / PROGRESS_STEP {
                progress(got).map_err(|e| Failure::Failed(format!("the client went away: {e}")))?;
            }
        }
        let digest = format!("sha256:{}", hex(&hash.finalize()));
        if got != blob.size || digest != blob.digest {
            return Err(Failure::Failed(format!("blob {} does not match its digest", blob.digest)));
        }
        Ok(path)
    }
}

/// Answers 200, then gets what the daemon lacks and loads it.
async fn deliver(
    gw: &Shared,
    s: &mut Session<'_>,
    found: Found,
    tag: &str,
    client: &mut impl Write,
) -> io::Result<()> {
    client.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")?;
    let (name, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    line(client, json!({"status": format!("Pulling from {}", s.image.path), "id": version}))?;
    // The image id is its config's digest: an image the daemon has is the same image.
    let have = gw.daemon.call("GET", &format!("/images/{}/json", found.config.digest), None);
    if matches!(have, Ok((200, _))) {
        // Up to date when the name already meant this image; newer when only the name is new.
        // The name is a parsed reference (letters, digits, `._-:/[]`): a path as the CLI sends it.
        let named = gw.daemon.call("GET", &format!("/images/{tag}/json"), None);
        let same = matches!(named, Ok((200, v)) if v["Id"] == found.config.digest.as_str());
        let target =
            format!("/images/{}/tag?{}", found.config.digest, query(&[("repo", name), ("tag", version)]));
        return match gw.daemon.call("POST", &target, None) {
            Ok((201, _)) => {
                line(client, json!({"status": format!("Digest: {}", found.digest)}))?;
                let status = if same { "Image is up to date for" } else { "Downloaded newer image for" };
                line(client, json!({"status": format!("Status: {status} {tag}")}))
            }
            other => {
                gw.note(&format!("pull of {}: tagging answered {other:?}", s.image));
                error(client, &failed(s.image, &gw.registries.docker_log))
            }
        };
    }
    let dir = Work::create(&gw.registries.work_dir)?;
    for blob in distinct(&found) {
        let id = &blob.hex()[..12];
        line(client, json!({"status": "Pulling fs layer", "id": id}))?;
        let size = blob.size;
        let mut progress = |got: u64| {
            let detail = json!({"current": got, "total": size});
            line(client, json!({"status": "Downloading", "id": id, "progressDetail": detail}))
        };
        match s.blob(blob, &dir.0, &mut progress).await {
            Ok(_) => {}
            Err(f) => {
                let r = refusal(s.image, f);
                gw.log(&format!("DENY pull {} rule={} {}", s.image, r.rule, r.what));
                return error(client, &r.message());
            }
        }
        line(client, json!({"status": "Download complete", "id": id}))?;
    }
    match load(&gw.daemon, &found, &dir.0, tag) {
        Ok(()) => {
            line(client, json!({"status": format!("Digest: {}", found.digest)}))?;
            line(client, json!({"status": format!("Status: Downloaded newer image for {tag}")}))
        }
        Err(why) => {
            gw.note(&format!("pull of {}: loading into the daemon: {why}", s.image));
            error(client, &failed(s.image, &gw.registries.docker_log))
        }
    }
}

/// Whether an answer is the registry's own challenge, the only one the gateway answers with a
/// login: a host the registry redirected to (a CDN) that asks for one would otherwise be sent
/// the user's login through a token service of its choosing. Docker, too, logs in only where
/// the registry asked.
fn registry_challenge(status: u16, asked: &Url, answered: &Url) -> bool {
    status == 401 && host_of(asked) == host_of(answered)
}

/// The blobs a pull fetches: the config and the layers, each digest once. A manifest may name
/// one layer twice (two steps of a build that made the same layer; images converted from the
/// old format repeat the empty layer), and the daemon pulls such images: each blob is fetched
/// and checked once, into the file its digest names.
fn distinct(found: &Found) -> Vec<&Blob> {
    let mut seen = std::collections::HashSet::new();
    std::iter::once(&found.config).chain(&found.layers).filter(|b| seen.insert(b.digest.as_str())).collect()
}

/// The archive's files after its `manifest.json` ([`dist::archive_manifest`] names them), each
/// once: a name written twice would be read by the daemon as whichever came last.
fn entries(found: &Found) -> Vec<(String, &Blob)> {
    let config = std::iter::once((format!("{}.json", found.config.hex()), &found.config));
    let layers = found.layers.iter().map(|b| (format!("{}/layer.tar", b.hex()), b));
    let mut seen = std::collections::HashSet::new();
    config.chain(layers).filter(|(name, _)| seen.insert(name.clone())).collect()
}

/// `docker load` of one image: the archive streamed to the daemon as it is made, from the
/// blobs [`distinct`] fetched into `dir`.
fn load(daemon: &Daemon, found: &Found, dir: &Path, tag: &str) -> Result<(), String> {
    let mut up = std::os::unix::net::UnixStream::connect(&daemon.socket).map_err(|e| e.to_string())?;
    up.write_all(
        b"POST /images/load?quiet=1 HTTP/1.1\r\nHost: docker\r\nContent-Type: application/x-tar\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
    .map_err(|e| e.to_string())?;
    {
        let mut chunks = io::BufWriter::with_capacity(64 << 10, http::Chunks(&mut up));
        let mut tar = tar::Builder::new(&mut chunks);
        let mut put = |name: String, data: &mut dyn Read, size: u64| -> io::Result<()> {
            let mut h = tar::Header::new_ustar();
            h.set_size(size);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut h, name, data)
        };
        let manifest = dist::archive_manifest(&found.config, &found.layers, tag);
        put("manifest.json".into(), &mut manifest.as_bytes(), manifest.len() as u64)
            .map_err(|e| e.to_string())?;
        for (name, blob) in entries(found) {
            let mut f = std::fs::File::open(dir.join(blob.hex())).map_err(|e| e.to_string())?;
            put(name, &mut f, blob.size).map_err(|e| e.to_string())?;
        }
        tar.into_inner().map_err(|e| e.to_string())?;
        chunks.flush().map_err(|e| e.to_string())?;
    }
    up.write_all(b"0\r\n\r\n").map_err(|e| e.to_string())?;
    let mut r = BufReader::new(up);
    let head = http::read_response(&mut r).map_err(|e| e.to_string())?;
    let status = head.status.to_string();
    let chunked = head.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    let framing = if chunked { Framing::Chunked } else { Framing::None };
    match framing {
        Framing::None => drop(r.take(http::MAX_JSON as u64).read_to_end(&mut body)),
        f => http::copy_body(&mut r, &mut body, f, Some(http::MAX_JSON)).map_err(|e| e.to_string())?,
    }
    let text = String::from_utf8_lossy(&body);
    let error =
        text.lines().any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.get("error").is_some()));
    if status != "200" || error || !text.contains(tag) {
        return Err(format!(
            "the daemon answered {status}: {}",
            text.chars().take(MAX_LINE).collect::<String>()
        ));
    }
    Ok(())
}

/// The directory a pull's blobs wait in, removed with it.
struct Work(PathBuf);

impl Work {
    fn create(parent: &Path) -> io::Result<Work> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
        remove_stale(parent);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let dir = parent.join(format!("{}-{}", std::process::id(), t.as_nanos()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Work(dir))
    }
}

/// Removes what the pulls of launchers that are gone left (a launcher killed mid-pull makes no
/// end): each directory is named `<pid>-<time>` by [`Work::create`].
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if pid.is_some() && !alive && e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One line of the pull's stream.
fn line(client: &mut impl Write, v: Value) -> io::Result<()> {
    client.write_all(format!("{v}\r\n").as_bytes())?;
    client.flush()
}

/// An error line, as the daemon ends a failed pull's stream.
fn error(client: &mut impl Write, message: &str) -> io::Result<()> {
    line(client, json!({"errorDetail": {"message": message}, "error": message}))
}

fn query(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
}

fn parse(url: &str) -> Result<Url, Failure> {
    Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| Failure::Failed("the registry named a URL that is not http(s)".into()))
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(b)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The refusal the agent gets for a failed step of the pull of `image`.
fn refusal(image: &Reference, f: Failure) -> Refusal {
    match f {
        Failure::Refused { authority, decision } => Refusal::new(
            "egress",
            format!("the pull of {image} connects to {authority}, which the egress rules deny ({decision})"),
        )
        .allow(format!(
            "an egress rule for it outside the sandbox (`ocsb egress explain --connect {authority}` shows the decision)"
        )),
        Failure::Failed(why) => Refusal::new("pull", format!("the pull of {image} failed: {why}")),
    }
}

fn daemon_refusal(e: &io::Error) -> Refusal {
    Refusal::new("daemon", format!("the gateway could not ask the daemon: {e}"))
}

/// The message for a load that failed: the daemon's own is kept out, as it can quote what it
/// read.
fn failed(image: &Reference, log: &Path) -> String {
    format!("ocsb: the pull of {image} failed in the Docker daemon; its message is in {}", log.display())
}

/// The client's registry login (`X-Registry-Auth`: base64url JSON, padded or not).
fn credentials(header: Option<&str>) -> Result<Credentials, Refusal> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let Some(h) = header.map(str::trim).filter(|h| !h.is_empty()) else { return Ok(Credentials::default()) };
    let lenient = GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let decoded = GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient)
        .decode(h)
        .or_else(|_| GeneralPurpose::new(&base64::alphabet::STANDARD, lenient).decode(h))
        .map_err(|_| Refusal::new("pull", "the registry login (X-Registry-Auth) is not base64"))?;
    let v: Value = serde_json::from_slice(&decoded).unwrap_or(Value::Null);
    Credentials::from_json(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_are_read_as_the_cli_sends_them() {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE.encode(s);
        let c = credentials(Some(&enc(r#"{"username":"u","password":"p?>"}"#))).unwrap();
        assert_eq!((c.username.as_deref(), c.password.as_deref()), (Some("u"), Some("p?>")));
        let unpadded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"registrytoken":"t"}"#);
        assert_eq!(credentials(Some(&unpadded)).unwrap().registry_token.as_deref(), Some("t"));
        assert_eq!(credentials(None).unwrap(), Credentials::default());
        assert_eq!(credentials(Some(&enc("{}"))).unwrap(), Credentials::default());
        assert!(credentials(Some("%%%")).is_err());
    }

    #[test]
    fn only_the_registrys_own_challenge_is_answered() {
        let u = |s: &str| Url::parse(s).unwrap();
        let registry = u("http://192.0.2.5/v2/a/b/blobs/sha256:1");
        assert!(registry_challenge(401, &registry, &registry));
        assert!(registry_challenge(401, &registry, &u("http://192.0.2.5:80/v2/other")));
        assert!(!registry_challenge(401, &registry, &u("http://192.0.2.3/login/v2/a/b/blobs/sha256:1")));
        assert!(!registry_challenge(401, &registry, &u("https://192.0.2.5/v2/a")), "another port");
        assert!(!registry_challenge(200, &registry, &registry));
    }

    /// An image with one layer twice, and a config whose digest is also a layer's: each blob
    /// is fetched once, and each file of the archive is written once.
    #[test]
    fn a_blob_named_twice_is_fetched_once_and_archived_once() {
        let b = |c: char| Blob { digest: format!("sha256:{}", c.to_string().repeat(64)), size: 3 };
        let found =
            Found { digest: String::new(), config: b('1'), layers: vec![b('2'), b('2'), b('1'), b('3')] };
        let fetched: Vec<&str> = distinct(&found).iter().map(|b| b.digest.as_str()).collect();
        assert_eq!(fetched, [&b('1').digest, &b('2').digest, &b('3').digest]);
        let names: Vec<String> =
            entries(&found).into_iter().map(|(n, _)| n[..3].to_string() + &n[64..]).collect();
        assert_eq!(names, ["111.json", "222/layer.tar", "111/layer.tar", "333/layer.tar"]);
        // The manifest of the archive still lists every layer, in order: the daemon stacks the
        // repeated one again.
        let m: Value =
            serde_json::from_str(&dist::archive_manifest(&found.config, &found.layers, "x:1")).unwrap();
        assert_eq!(m[0]["Layers"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn a_refused_hop_names_the_host_and_the_rule_and_nothing_it_sent() {
        let image = Reference::parse("192.0.2.4/redir/x:1").unwrap();
        let r = refusal(
            &image,
            Failure::Refused { authority: "192.0.2.2:80".into(), decision: "block:project:1".into() },
        );
        assert_eq!(r.rule, "egress");
        assert!(r.what.contains("192.0.2.2:80") && r.what.contains("block:project:1"), "{r:?}");
    }
}
