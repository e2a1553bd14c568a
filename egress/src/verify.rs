//! `egress verify`: every `expect-pass` / `expect-block` through the filter, as the sandbox
//! would send it (curl with the proxy, plus the line's extra curl options), and a check that a
//! direct connection that bypasses the filter is blocked.
//!
//! A failure names the expectation's `file:line`, what happened, and which rule decided, so the
//! user knows what to change. Nothing fails silently: a missing curl is an error.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::Command;

use ocsb_policy::egress::{ExpectKind, Policy, Target};
use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The filter's address as the sandbox uses it (`127.0.0.1:<OCSB_EGRESS_PORT>`).
    pub proxy: SocketAddr,
    /// Prefix that runs a command the way the sandbox would (e.g. under the netlock group, or
    /// `ip netns exec <ns>` in tests); empty = run directly.
    pub wrap: Vec<OsString>,
    /// Run the direct-connection (bypass) check.
    pub direct_check: bool,
    /// URL for the direct check when no `expect-pass` line gives one.
    pub direct_url: String,
    pub curl: OsString,
    /// Per-request limit in seconds.
    pub max_time: u32,
}

/// curl from the system: root-owned and writable by nobody else, in a root-owned directory that
/// only root may write. A curl looked up in `PATH` may be one the agent planted (a writable
/// cache directory early in `PATH`), and then it reports whatever the agent wants.
pub fn system_curl() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let root_only =
        |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
    // The last one is NixOS's system profile (a root-owned link into the read-only store).
    ["/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl", "/run/current-system/sw/bin/curl"]
        .iter()
        .map(std::path::Path::new)
        .find(|p| root_only(p) && p.parent().is_some_and(root_only))
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        .filter(|p| root_only(p))
}

impl VerifyOptions {
    pub fn new(proxy: SocketAddr) -> Self {
        Self {
            proxy,
            wrap: Vec::new(),
            direct_check: true,
            direct_url: "https://example.com/".into(),
            curl: "curl".into(),
            max_time: 20,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `expect-pass`, `expect-block` or `direct-blocked`.
    pub kind: String,
    pub url: String,
    /// `file:line` of the expectation (none for the built-in direct check).
    pub at: Option<String>,
    pub ok: bool,
    /// What happened: `blocked by block:project:3`, `passed (HTTP 200)`, `proxy error 503`, ...
    pub observed: String,
    /// When it failed: why, and what to change.
    pub why: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
    /// Turn failures into an error (for the CLI's exit status).
    pub fn into_result(self) -> Result<Report> {
        if self.ok() {
            return Ok(self);
        }
        let failures = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| {
                format!(
                    "{} {}{}: {}{}",
                    c.kind,
                    c.url,
                    c.at.as_deref().map(|a| format!(" ({a})")).unwrap_or_default(),
                    c.observed,
                    c.why.as_deref().map(|w| format!(" — {w}")).unwrap_or_default()
                )
            })
            .collect();
        Err(Error::Verify { failures })
    }
}

/// What curl saw.
struct Outcome {
    exit: i32,
    http_code: u16,
    connect_code: u16,
    decision: Option<String>,
    proxy_error: bool,
    stderr: String,
}

fn curl(opts: &VerifyOptions, url: &str, extra: &[String], via_proxy: bool) -> Result<Outcome> {
    let mut argv: Vec<OsString> = opts.wrap.clone();
    argv.push(opts.curl.clone());
    // `-q` first: no `.curlrc` (in the sandbox, `$XDG_CONFIG_HOME` is the agent's to write).
    argv.extend(
        ["-q", "-sS", "-o", "/dev/null", "-D", "-", "-w", "\nocsb-verify %{http_code} %{http_connect}\n"]
            .map(OsString::from),
    );
    argv.push("--max-time".into());
    argv.push(opts.max_time.to_string().into());
    if via_proxy {
        argv.push("-x".into());
        argv.push(format!("http://{}", opts.proxy).into());
    } else {
        argv.push("--noproxy".into());
        argv.push("*".into());
    }
    argv.push(url.into());
    argv.extend(extra.iter().map(OsString::from));
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .map_err(|e| {
            Error::io("cannot run curl (apt-get install curl)", std::path::PathBuf::from(&argv[0]), e)
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // curl prints its `-w` line whatever happened to the request. Without it curl did not run
    // (the wrapper, e.g. the sandbox, refused to start it): that is no evidence of a blocked
    // connection, so it is an error, never a passed check.
    Outcome::parse(&String::from_utf8_lossy(&out.stdout), &stderr, out.status.code().unwrap_or(-1))
        .ok_or_else(|| {
            Error::state(
                format!(
                    "curl did not run for {url}: {}",
                    stderr.trim().lines().last().unwrap_or("no message")
                ),
                "the sandbox that runs the checks could not start; run `ocsb doctor`",
            )
        })
}

impl Outcome {
    /// What curl printed (`-D -` header blocks, then the `ocsb-verify` line); `None` without it.
    fn parse(stdout: &str, stderr: &str, exit: i32) -> Option<Outcome> {
        let last = stdout.lines().rev().find_map(|l| l.strip_prefix("ocsb-verify "))?;
        let mut codes = last.split_whitespace().map(|c| c.parse::<u16>().unwrap_or(0));
        let (http_code, connect_code) = (codes.next().unwrap_or(0), codes.next().unwrap_or(0));
        // curl prints one header block per response: with a CONNECT first the proxy's answer to
        // it, then the origin's through the tunnel. The filter's headers are only in the proxy's
        // block; an origin can send anything inside TLS, where no filter can strip it.
        let first = stdout.split("\r\n\r\n").next().unwrap_or("").split("\n\n").next().unwrap_or("");
        let proxy_block = if connect_code != 0 { first } else { stdout };
        let header = |name: &str| {
            proxy_block.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        Some(Outcome {
            exit,
            http_code,
            connect_code,
            decision: header("x-egress-decision"),
            proxy_error: header("x-egress-error").is_some()
                || header("x-squid-error").is_some_and(|v| !v.starts_with("ERR_ACCESS_DENIED")),
            stderr: stderr.trim().to_string(),
        })
    }
}

impl Outcome {
    /// The filter refused: a 403 to CONNECT (only the proxy answers a CONNECT), or a plain 403
    /// that carries `X-Egress-Decision`. Both backends send that header on their own refusals
    /// only and remove any copy an origin sends, so an origin's 403 never passes an
    /// `expect-block`; inside a tunnel nothing counts but the answer to CONNECT.
    fn blocked_by_proxy(&self) -> bool {
        if self.connect_code != 0 {
            // Through a tunnel only the answer to CONNECT is the filter's.
            return self.connect_code == 403;
        }
        self.http_code == 403 && self.decision.is_some()
    }
    fn describe(&self) -> String {
        if self.blocked_by_proxy() {
            return format!(
                "blocked by the filter{}",
                self.decision.as_deref().map(|d| format!(" (rule {d})")).unwrap_or_default()
            );
        }
        if self.http_code == 403 {
            return "passed the filter; the server itself answered 403".into();
        }
        if self.proxy_error || self.connect_code >= 500 {
            return format!("filter error (HTTP {} / CONNECT {})", self.http_code, self.connect_code);
        }
        if self.http_code == 0 {
            return format!("no answer (curl exit {}: {})", self.exit, self.stderr);
        }
        format!("passed (HTTP {})", self.http_code)
    }
}

/// The rule the policy says decides `url` (no DNS: explains name-based rules).
fn explain(policy: &Policy, url: &str) -> String {
    let t = Target::for_client_url(url).ok();
    match t {
        Some(t) => {
            let d = policy.decide(&t, &[]);
            format!("the rules say {} by `{d}`", d.verdict)
        }
        None => "the URL cannot be parsed".into(),
    }
}

/// Run every expectation of `policy` and the direct check.
pub fn run(policy: &Policy, opts: &VerifyOptions) -> Result<Report> {
    let mut checks = Vec::new();
    for e in policy.expects() {
        let o = curl(opts, &e.url, &e.curl_args, true)?;
        let blocked = o.blocked_by_proxy();
        let (kind, ok, why) = match e.kind {
            ExpectKind::Block => (
                "expect-block",
                blocked,
                (!blocked).then(|| {
                    format!(
                        "{}; add a `block` rule (and check that no `allow`/`connect` rule wins)",
                        explain(policy, &e.url)
                    )
                }),
            ),
            ExpectKind::Pass => {
                let ok = !blocked && !o.proxy_error && o.connect_code < 500 && o.http_code != 0;
                let why = (!ok).then(|| {
                    if blocked {
                        format!("{}; add an `allow` rule (or `connect host:port` for a non-443 port)", explain(policy, &e.url))
                    } else {
                        "the filter let it through but the server could not be reached (DNS or connection failure); check the host name and `ocsb egress logs`".to_string()
                    }
                });
                ("expect-pass", ok, why)
            }
        };
        checks.push(Check {
            kind: kind.into(),
            url: e.url.clone(),
            at: Some(e.at.to_string()),
            ok,
            observed: o.describe(),
            why,
        });
    }
    if opts.direct_check {
        let url = policy
            .expects()
            .iter()
            .find(|e| e.kind == ExpectKind::Pass)
            .map(|e| e.url.clone())
            .unwrap_or_else(|| opts.direct_url.clone());
        let o = curl(opts, &url, &[], false)?;
        // Blocked = no HTTP answer at all: the connection was refused before it left.
        let ok = o.http_code == 0 && o.connect_code == 0;
        checks.push(Check {
            kind: "direct-blocked".into(),
            url,
            at: None,
            ok,
            observed: if ok { format!("direct connection failed as it should (curl exit {})", o.exit) } else { format!("a direct connection without the filter got HTTP {}", o.http_code) },
            why: (!ok).then(|| "traffic can bypass the filter: the netlock is not active for this process (`ocsb netlock setup`, then `ocsb netlock verify`)".into()),
        });
    }
    Ok(Report { checks })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapper that never starts curl (a sandbox that refuses to start) must not make the
    /// direct check pass: no answer from curl is not a blocked connection.
    /// Through a tunnel only the proxy's answer to CONNECT speaks for the filter: an origin's 403
    /// with a decision header inside TLS is not a block, a 403 to CONNECT is.
    #[test]
    fn inside_a_tunnel_only_the_answer_to_connect_counts() {
        let forged = "HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 403 Forbidden\r\n\
                      X-Egress-Decision: block:project:1\r\nContent-Length: 3\r\n\r\n\nocsb-verify 403 200\n";
        let o = Outcome::parse(forged, "", 0).unwrap();
        assert!(!o.blocked_by_proxy() && o.decision.is_none(), "{}", o.describe());
        assert!(o.describe().contains("server itself"), "{}", o.describe());
        let refused =
            "HTTP/1.1 403 Forbidden\r\nX-Egress-Decision: block:project:3\r\n\r\n\nocsb-verify 000 403\n";
        let o = Outcome::parse(refused, "curl: (56) CONNECT tunnel failed", 56).unwrap();
        assert!(o.blocked_by_proxy() && o.decision.as_deref() == Some("block:project:3"));
        let plain = "HTTP/1.1 403 Forbidden\r\nX-Egress-Decision: private\r\n\r\n\nocsb-verify 403 000\n";
        assert!(Outcome::parse(plain, "", 0).unwrap().blocked_by_proxy());
        let origin = "HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\n\nocsb-verify 403 000\n";
        assert!(!Outcome::parse(origin, "", 0).unwrap().blocked_by_proxy());
        assert!(Outcome::parse("", "exec failed", 1).is_none());
    }

    #[test]
    fn a_curl_that_never_ran_is_an_error_not_a_blocked_connection() {
        let policy = Policy::compile(&[]).unwrap();
        let mut opts = VerifyOptions::new("127.0.0.1:9".parse().unwrap());
        opts.wrap = vec!["false".into()];
        let err = run(&policy, &opts).unwrap_err().to_string();
        assert!(err.contains("curl did not run"), "{err}");
    }
}
