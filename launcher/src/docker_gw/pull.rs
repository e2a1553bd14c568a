//! Pulls: the registry a pull makes the daemon connect to, judged by the egress rules, and
//! what the daemon answers, kept to what the agent may read.
//!
//! *Why*: the daemon dials the registry itself, from the host's network namespace and without
//! the filter. Unjudged, `docker pull 127.0.0.1:8099/x` reads a service on the host's loopback
//! (and its answer came back in the error), and a pull names any host the rules block. So
//! before the daemon is asked, each host the pull is known to reach (the registry, Docker
//! Hub's token service and CDN, the daemon's mirrors for Docker Hub) is decided by the egress
//! rules' own decision function, as the filter decides a `CONNECT` to it: names resolved as the
//! filter resolves them, a private address refused unless a rule names the host, registries off
//! ports 80 and 443 under the port rule. Each decision goes to the filter's access log in its
//! format (client `docker-pull`), so `ocsb egress logs` and the agent's denial notes show it.
//!
//! What stays out of reach: the daemon resolves the name again itself, and follows the
//! registry's token challenge and blob redirects to hosts nobody can know before the pull.
//! Whatever the daemon answers for a failed pull may hold the remote side's reply, so the agent
//! gets a fixed message instead, and the daemon's own goes to the gateway's log.

use std::io::{self, BufReader, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ocsb_policy::docker::Refusal;
use ocsb_policy::docker::registry::{self, DEFAULT_DOMAIN, Reference};
use ocsb_policy::egress::{Decision, Host, LogLine, Policy, Step, Target, Verdict, load_layers};
use serde_json::Value;

use super::http::{self, Framing};
use super::{Daemon, Shared};

/// How long a registry's name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The client field of the access-log lines the gateway writes for a pull.
const CLIENT: &str = "docker-pull";
/// A progress line longer than this is dropped (the daemon's are a few hundred bytes).
const MAX_LINE: usize = 64 << 10;

/// What judging a pull needs: where the rules are, and where decisions and messages go.
pub(super) struct Registries {
    pub user_config_dir: PathBuf,
    pub project_dir: PathBuf,
    /// The filter's access log.
    pub access_log: PathBuf,
    /// The gateway's own log, named in the agent's message for a failed pull.
    pub docker_log: PathBuf,
}

impl Shared {
    /// The egress rules' verdict on a pull of `r`: `Ok` when every host the daemon is known to
    /// connect to for it is allowed, else the refusal naming the deciding rule. Each decision is
    /// logged in the filter's access log. (A build never pulls: its base images must be on the
    /// host already, so `docker pull` is the one way an image comes from a registry.)
    pub(super) fn judge_pull(&self, r: &Reference) -> Result<(), Refusal> {
        let reg = &self.registries;
        let unreadable = |e: String| {
            Refusal::new("egress", format!("the egress rules cannot be read to judge the pull of {r}: {e}"))
                .allow("fix the rules (`ocsb egress explain` shows the error)")
        };
        let layers =
            load_layers(&reg.user_config_dir, &reg.project_dir).map_err(|e| unreadable(e.to_string()))?;
        let addrs = ocsb_egress::host_addresses_checked().map_err(|e| unreadable(e.to_string()))?;
        let policy =
            Policy::compile(&layers).map_err(|e| unreadable(e.to_string()))?.with_host_addresses(addrs);
        let mut hosts = r.registry_hosts();
        if r.domain == DEFAULT_DOMAIN {
            hosts.extend(mirrors(&self.daemon));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Refusal::new("daemon", format!("the gateway cannot resolve names: {e}")))?;
        for host in hosts {
            let target = registry::target(&host)?;
            let (decision, resolved) = rt.block_on(decide(&policy, &target))?;
            self.log_decision(&target, &decision);
            if decision.verdict == Verdict::Deny {
                return Err(Refusal::new(
                    "egress",
                    format!(
                        "the pull of {r} makes the Docker daemon connect to {}, which the egress rules deny ({decision})",
                        authority(&target)
                    ),
                )
                .allow(format!(
                    "an egress rule for it outside the sandbox (`ocsb egress explain --connect {}` shows the decision)",
                    authority(&target)
                )));
            }
            if resolved.is_some_and(|a| a.is_empty()) {
                // The filter would have nothing to dial; the daemon resolves on its own, and
                // what it finds was never judged.
                return Err(Refusal::new(
                    "egress",
                    format!(
                        "the pull of {r}: {} does not resolve here, so the gateway cannot judge its addresses",
                        authority(&target)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// One line in the filter's access log, in its format.
    fn log_decision(&self, t: &Target, d: &Decision) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let denied = d.verdict == Verdict::Deny;
        let line = LogLine {
            time: format!("{}.{:03}", now.as_secs(), now.subsec_millis()),
            client: CLIENT.into(),
            result: if denied { "TCP_DENIED" } else { "NONE_NONE" }.into(),
            status: if denied { 403 } else { 0 },
            rule: d.note(),
            method: "CONNECT".into(),
            target: authority(t),
            peer: None,
        };
        // One write of the whole line, appended: the filter appends to the same file.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.registries.access_log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    }
}

/// The decision for a CONNECT to `t`, resolving the name as the filter does when the rules
/// need its addresses (`Some(addresses)` then).
async fn decide(policy: &Policy, t: &Target) -> Result<(Decision, Option<Vec<IpAddr>>), Refusal> {
    match policy.evaluate(t) {
        Step::Decided(d) => Ok((d, None)),
        Step::NeedsAddresses(p) => {
            let resolver = ocsb_egress::builtin::dial::Resolver::from_system(RESOLVE_TIMEOUT)
                .map_err(|e| Refusal::new("egress", format!("the gateway cannot resolve names: {e}")))?;
            let found: Vec<IpAddr> = resolver
                .resolve(p.host())
                .await
                .into_iter()
                .map(ocsb_egress::builtin::dial::canonical)
                .collect();
            Ok((p.finish(&found), Some(found)))
        }
    }
}

/// `host:port` as the filter logs a CONNECT.
fn authority(t: &Target) -> String {
    match &t.host {
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]:{}", t.port),
        h => format!("{h}:{}", t.port),
    }
}

/// The daemon's registry mirrors (`registry-mirrors`), which it asks for Docker Hub's images
/// before Docker Hub: `host:port` each.
fn mirrors(daemon: &Daemon) -> Vec<String> {
    let Ok((200, info)) = daemon.call("GET", "/info", None) else { return Vec::new() };
    let list = info["RegistryConfig"]["Mirrors"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(Value::as_str).filter_map(mirror_authority).collect()
}

/// `https://mirror.example/` → `mirror.example:443`; `http://m:5000` → `m:5000`.
fn mirror_authority(url: &str) -> Option<String> {
    let (port, rest) = if let Some(r) = url.strip_prefix("https://") {
        (443, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (80, r)
    } else {
        (443, url)
    };
    let host = rest.split(['/', '?', '#']).next().filter(|h| !h.is_empty())?;
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let has_port = match host.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => host.contains(':'),
    };
    Some(if has_port { host.to_string() } else { format!("{host}:{port}") })
}

/// The reference a call pulls, when it is a pull (`POST /images/create?fromImage=…`).
pub(super) fn pulled(head: &http::Head) -> Option<Reference> {
    use ocsb_policy::docker::route::{Call, route};
    match route(&head.method, &head.path) {
        Ok(Call::Pull) => registry::pull_reference(&head.query).ok().flatten(),
        _ => None,
    }
}

/// The message the agent gets for a failed pull instead of the daemon's.
fn failed(image: &Reference, log: &std::path::Path) -> String {
    format!(
        "ocsb: the pull of {image} failed; the Docker daemon's message is kept out of the sandbox, \
         as it can hold what the registry answered: the user finds it in {}",
        log.display()
    )
}

/// Streams the daemon's answer to a pull to the client: progress lines as they are, every
/// error line (and an error answer) replaced by [`failed`]'s message, the daemon's own kept in
/// the gateway's log.
pub(super) fn relay(
    up: impl Read,
    client: &mut impl Write,
    gw: &Shared,
    image: &Reference,
) -> io::Result<()> {
    relay_to(up, client, &|n| gw.note(n), &failed(image, &gw.registries.docker_log), image)
}

/// [`relay`], with where the daemon's messages go and what replaces them.
fn relay_to(
    up: impl Read,
    client: &mut impl Write,
    note: &dyn Fn(&str),
    message: &str,
    image: &Reference,
) -> io::Result<()> {
    let mut r = BufReader::new(up);
    let lines = http::read_lines(&mut r)?;
    let status: u16 =
        lines.first().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).unwrap_or(502);
    let header = |n: &str| {
        lines.iter().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(n).then(|| v.trim().to_string())
        })
    };
    let framing = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        Framing::Chunked
    } else {
        header("content-length").and_then(|n| n.parse().ok()).map_or(Framing::None, Framing::Length)
    };
    if !(200..300).contains(&status) {
        let mut body = Vec::new();
        match framing {
            Framing::None => drop(r.take(http::MAX_JSON as u64).read_to_end(&mut body)),
            f => drop(http::copy_body(&mut r, &mut body, f, Some(http::MAX_JSON))),
        }
        note(&format!("pull of {image}: the daemon answered {status}: {}", String::from_utf8_lossy(&body)));
        return http::answer(client, status, "Error", &serde_json::json!({ "message": message }).to_string());
    }
    client.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")?;
    let mut lines = Lines { out: client, partial: Vec::new(), note, image, message };
    match framing {
        Framing::None => drop(io::copy(&mut r, &mut lines)?),
        f => http::copy_body(&mut r, &mut lines, f, Some(usize::MAX))?,
    }
    lines.end()
}

/// The pull's progress stream, line by line (the daemon writes one JSON object a line).
struct Lines<'a, W: Write> {
    out: &'a mut W,
    partial: Vec<u8>,
    note: &'a dyn Fn(&str),
    image: &'a Reference,
    message: &'a str,
}

impl<W: Write> Lines<'_, W> {
    fn line(&mut self, line: &[u8]) -> io::Result<()> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        match serde_json::from_str::<Value>(text) {
            Ok(v) if v.is_object() && v.get("error").is_none() && v.get("errorDetail").is_none() => {
                self.out.write_all(text.as_bytes())?;
                self.out.write_all(b"\r\n")?;
                self.out.flush()
            }
            _ => {
                (self.note)(&format!("pull of {}: the daemon's message: {text}", self.image));
                let v = serde_json::json!({"errorDetail": {"message": self.message}, "error": self.message});
                self.out.write_all(format!("{v}\r\n").as_bytes())
            }
        }
    }

    fn end(mut self) -> io::Result<()> {
        let rest = std::mem::take(&mut self.partial);
        if !rest.is_empty() { self.line(&rest) } else { Ok(()) }
    }
}

impl<W: Write> Write for Lines<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial);
                self.line(&line)?;
            } else if self.partial.len() < MAX_LINE {
                self.partial.push(b);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_are_judged_at_their_host_and_port() {
        assert_eq!(mirror_authority("https://mirror.gcr.io/").as_deref(), Some("mirror.gcr.io:443"));
        assert_eq!(mirror_authority("http://10.0.0.5:5000").as_deref(), Some("10.0.0.5:5000"));
        assert_eq!(mirror_authority("http://m.example").as_deref(), Some("m.example:80"));
        assert_eq!(mirror_authority("https://u:p@m.example/x").as_deref(), Some("m.example:443"));
        assert_eq!(mirror_authority("https://[::1]:5000/").as_deref(), Some("[::1]:5000"));
        assert_eq!(mirror_authority("https://[::1]/").as_deref(), Some("[::1]:443"));
        assert_eq!(mirror_authority("https:///"), None);
    }

    fn relayed(answer: &str) -> (String, Vec<String>) {
        let noted = std::cell::RefCell::new(Vec::new());
        let mut out = Vec::new();
        let image = Reference::parse("127.0.0.1:8099/x/y:z").unwrap();
        relay_to(answer.as_bytes(), &mut out, &|n| noted.borrow_mut().push(n.to_string()), "FAILED", &image)
            .unwrap();
        (String::from_utf8(out).unwrap(), noted.into_inner())
    }

    /// The remote side's reply, which the daemon quotes in its error, never reaches the agent;
    /// progress passes as the daemon wrote it.
    #[test]
    fn a_failed_pull_answers_a_fixed_message_and_keeps_the_daemons_in_the_log() {
        let secret = "<!DOCTYPE HTML><html>loopback-secret</html>";
        let body = format!(r#"{{"message":"error parsing HTTP 404 response body: {secret}"}}"#);
        let (out, noted) =
            relayed(&format!("HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
        assert!(out.starts_with("HTTP/1.1 404 "), "{out}");
        assert!(out.ends_with(r#"{"message":"FAILED"}"#), "{out}");
        assert!(!out.contains("loopback-secret"), "{out}");
        assert!(noted.iter().any(|n| n.contains("loopback-secret")), "{noted:?}");

        let progress = r#"{"status":"Pulling from x/y","id":"z"}"#;
        let error = format!(r#"{{"errorDetail":{{"message":"{secret}"}},"error":"{secret}"}}"#);
        let stream = format!("{progress}\r\n{error}\r\nnot json {secret}\n");
        let chunked = format!("{:x}\r\n{stream}\r\n0\r\n\r\n", stream.len());
        let (out, noted) =
            relayed(&format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"));
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains(&format!("{progress}\r\n")), "{out}");
        assert_eq!(out.matches(r#""error":"FAILED""#).count(), 2, "{out}");
        assert!(!out.contains("loopback-secret"), "{out}");
        assert_eq!(noted.len(), 2, "{noted:?}");
    }
}
