//! Which model-provider keys the broker holds, and where each may be sent. Pure: the files are
//! read by the caller, so every rule here is unit-tested.
//!
//! The rule: a key is bound to its provider's address by the user's own files only. The
//! project's `opencode.jsonc` is the agent's to edit, so a `baseURL` there can never decide where
//! a real key goes; the broker forwards to the public address of a provider it knows, or to the
//! address written next to the key in `OCSB_PROVIDER_KEYS`.
//!
//! A value that looks like a provider key anywhere else the sandbox would get it (`OCSB_ENV_FILE`
//! under a name the broker does not map, `OCSB_ENV`) stops the run: silently passing it in would
//! break the promise, and silently dropping it would break the user's setup without a word.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

/// How the provider expects the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI and every OpenAI-compatible API).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
}

/// Where requests to a provider go: `http(s)://host[:port]/path`, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Without a trailing `/`; empty for the root.
    pub path: String,
}

impl BaseUrl {
    pub fn parse(s: &str) -> std::result::Result<BaseUrl, String> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("`{s}` is not an http:// or https:// URL"));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') || path.contains(['?', '#']) {
            return Err(format!("`{s}`: give scheme, host, port and path only (no user, query or fragment)"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                let port = p.parse::<u16>().ok().filter(|p| *p > 0);
                (h, port.ok_or_else(|| format!("`{s}`: `{p}` is not a port"))?)
            }
            _ => (authority, if tls { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || "-.:".contains(c)) {
            return Err(format!("`{s}` has no valid host"));
        }
        Ok(BaseUrl {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            path: path.trim_end_matches('/').to_string(),
        })
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == default { host } else { format!("{host}:{}", self.port) }
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        write!(f, "{scheme}://{host}:{}{}", self.port, self.path)
    }
}

/// A real key. Never printed: `Debug` shows its length only.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One provider the broker serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// OpenCode's provider id (`anthropic`, `openai`, `openrouter`, or the project's own).
    pub id: String,
    pub base: BaseUrl,
    pub auth: Auth,
    pub key: Secret,
    /// Where the key came from, for messages (`file:line` or `file: NAME`).
    pub from: String,
}

/// The providers OpenCode knows by id: their public API, how they take a key, and the variable
/// OpenCode would read it from.
pub const KNOWN: &[(&str, &str, Auth, &str)] = &[
    ("anthropic", "https://api.anthropic.com/v1", Auth::XApiKey, "ANTHROPIC_API_KEY"),
    ("openai", "https://api.openai.com/v1", Auth::Bearer, "OPENAI_API_KEY"),
    ("openrouter", "https://openrouter.ai/api/v1", Auth::Bearer, "OPENROUTER_API_KEY"),
];

/// Whether a value has the shape of a model-provider key: the prefixes of Anthropic's,
/// OpenRouter's and OpenAI's keys, and the long `sk-…` tokens of OpenAI-compatible services.
pub fn looks_like_provider_key(v: &str) -> bool {
    let v = v.trim();
    let prefixed =
        ["sk-ant-", "sk-or-", "sk-proj-", "sk-svcacct-", "sk-admin-"].iter().any(|p| v.starts_with(p));
    let long_sk = v.strip_prefix("sk-").is_some_and(|rest| {
        rest.len() >= 20 && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    });
    prefixed || long_sk
}

/// A provider id as OpenCode spells them, safe in a URL path segment.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !id.starts_with('.')
}

/// Parse an `OCSB_PROVIDER_KEYS` file: `# comments`, blank lines, and
/// `<provider> <key> [<base URL>]` (the URL may be left out for the providers in [`KNOWN`]).
pub fn parse_keys_file(text: &str, file: &Path) -> Result<Vec<Upstream>> {
    let mut out: Vec<Upstream> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let at = |msg: String, fix: &str| Error::failed(format!("{}:{}: {msg}", file.display(), i + 1), fix);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (id, key, url) = match fields[..] {
            [id, key] => (id, key, None),
            [id, key, url] => (id, key, Some(url)),
            _ => {
                return Err(at(
                    "expected `<provider> <key> [<base URL>]`".into(),
                    "write one provider per line, e.g. `anthropic sk-ant-…` (the file is parsed, never run)",
                ));
            }
        };
        if !valid_id(id) {
            return Err(at(
                format!("`{id}` is not a provider id"),
                "use OpenCode's provider id, e.g. anthropic",
            ));
        }
        if out.iter().any(|u| u.id == id) {
            return Err(at(format!("provider `{id}` is listed twice"), "keep one line per provider"));
        }
        let known = KNOWN.iter().find(|(k, ..)| *k == id);
        let (base, auth) = match (url, known) {
            (Some(u), k) => (
                BaseUrl::parse(u).map_err(|why| at(why, "e.g. https://llm.example.com/v1"))?,
                k.map_or(Auth::Bearer, |(_, _, a, _)| *a),
            ),
            #[allow(clippy::expect_used, reason = "the table's URLs are constants tested below")]
            (None, Some((_, u, a, _))) => (BaseUrl::parse(u).expect("a known provider's URL"), *a),
            (None, None) => {
                return Err(at(
                    format!("provider `{id}` is not one ocsb knows, so its URL must follow the key"),
                    "write `<provider> <key> <base URL>`, the URL OpenCode's baseURL would be",
                ));
            }
        };
        out.push(Upstream {
            id: id.to_string(),
            base,
            auth,
            key: Secret(key.to_string()),
            from: format!("{}:{}", file.display(), i + 1),
        });
    }
    Ok(out)
}

/// `KEY=VALUE` pairs of an env file.
pub type Vars = Vec<(String, String)>;

/// The part of `OCSB_ENV_FILE` that holds provider keys: the variables of [`KNOWN`] become
/// upstreams at the provider's public address, everything else stays for the sandbox. A value
/// that looks like a provider key under another name is an error.
pub fn split_env_file(vars: Vec<(String, String)>, file: &Path) -> Result<(Vars, Vec<Upstream>)> {
    let mut keep = Vec::new();
    let mut upstreams = Vec::new();
    for (k, v) in vars {
        if let Some((id, url, auth, _)) = KNOWN.iter().find(|(.., var)| *var == k) {
            if !v.is_empty() {
                #[allow(clippy::expect_used, reason = "the table's URLs are constants tested below")]
                let base = BaseUrl::parse(url).expect("a known provider's URL");
                upstreams.push(Upstream {
                    id: id.to_string(),
                    base,
                    auth: *auth,
                    key: Secret(v),
                    from: format!("{}: {k}", file.display()),
                });
            }
            continue;
        }
        if looks_like_provider_key(&v) {
            return Err(unmapped_key(&format!("{}: {k}", file.display())));
        }
        keep.push((k, v));
    }
    Ok((keep, upstreams))
}

/// The error for a provider-shaped value the broker has no provider for.
pub fn unmapped_key(at: &str) -> Error {
    Error::failed(
        format!("{at} looks like a model-provider key, and it would reach the sandbox"),
        "move it to OCSB_PROVIDER_KEYS as `<provider> <key> [<base URL>]` (or name it ANTHROPIC_API_KEY, \
         OPENAI_API_KEY or OPENROUTER_API_KEY in OCSB_ENV_FILE); the broker then adds it outside the sandbox",
    )
}

/// Both sources together: `OCSB_PROVIDER_KEYS` wins over `OCSB_ENV_FILE` for the same provider.
pub fn merge(from_env_file: Vec<Upstream>, from_keys_file: Vec<Upstream>) -> Vec<Upstream> {
    let mut out = from_keys_file;
    for u in from_env_file {
        if !out.iter().any(|o| o.id == u.id) {
            out.push(u);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> &'static Path {
        Path::new("/h/.config/opencode-sandbox/provider-keys")
    }

    #[test]
    fn known_urls_parse() {
        for (id, url, ..) in KNOWN {
            let b = BaseUrl::parse(url).unwrap();
            assert!(b.tls && b.port == 443, "{id}");
        }
        let b = BaseUrl::parse("https://api.anthropic.com/v1/").unwrap();
        assert_eq!(
            (b.host.as_str(), b.path.as_str(), b.authority()),
            ("api.anthropic.com", "/v1", "api.anthropic.com".into())
        );
        let b = BaseUrl::parse("http://192.0.2.1:8080").unwrap();
        assert_eq!((b.port, b.path.as_str(), b.authority()), (8080, "", "192.0.2.1:8080".into()));
        let b = BaseUrl::parse("http://[2001:db8::1]:9000/v1").unwrap();
        assert_eq!(
            (b.host.as_str(), b.port, b.authority()),
            ("2001:db8::1", 9000, "[2001:db8::1]:9000".into())
        );
        for bad in [
            "ftp://x/",
            "https://user:pw@x/",
            "https://x/?q",
            "http://x:0/",
            "http://x:99999/",
            "https:///v1",
            "x.com",
        ] {
            assert!(BaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_file_lines() {
        let u = parse_keys_file(
            "# mine\n\nanthropic sk-ant-abc\nfake real-key http://192.0.2.1:9/v1\nopenai sk-x https://gw.example/v1\n",
            file(),
        )
        .unwrap();
        assert_eq!(u.len(), 3);
        assert_eq!(
            (u[0].id.as_str(), u[0].auth, u[0].base.host.as_str()),
            ("anthropic", Auth::XApiKey, "api.anthropic.com")
        );
        assert_eq!(u[0].from, format!("{}:3", file().display()));
        assert_eq!((u[1].auth, u[1].base.port, u[1].key.expose()), (Auth::Bearer, 9, "real-key"));
        assert_eq!(u[2].base.host, "gw.example", "a known provider's address can be replaced by the user");
        assert!(!format!("{:?}", u[1]).contains("real-key"), "Debug never shows a key");
        for (text, line, what) in [
            ("anthropic\n", 1, "expected"),
            ("\nmine sk-x\n", 2, "URL must follow"),
            ("a/b k http://x/\n", 1, "not a provider id"),
            ("openai a\nopenai b\n", 2, "twice"),
            ("x k ftp://h/\n", 1, "not an http"),
            ("x k http://h/ extra\n", 1, "expected"),
        ] {
            let e = parse_keys_file(text, file()).unwrap_err().to_string();
            assert!(e.contains(&format!("provider-keys:{line}: ")) && e.contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn env_file_keys_are_taken_out() {
        let vars = vec![
            ("MCP_TOKEN".to_string(), "tok-1".to_string()),
            ("ANTHROPIC_API_KEY".to_string(), "sk-ant-api03-xyz".to_string()),
            ("OPENAI_API_KEY".to_string(), "".to_string()),
        ];
        let (keep, ups) = split_env_file(vars, Path::new("/h/agent.env")).unwrap();
        assert_eq!(keep, vec![("MCP_TOKEN".to_string(), "tok-1".to_string())]);
        assert_eq!(ups.len(), 1);
        assert_eq!(
            (ups[0].id.as_str(), ups[0].from.as_str()),
            ("anthropic", "/h/agent.env: ANTHROPIC_API_KEY")
        );
        let e =
            split_env_file(vec![("MY_LLM".into(), "sk-or-v1-0123456789".into())], Path::new("/h/agent.env"))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("/h/agent.env: MY_LLM looks like a model-provider key")
                && e.contains("OCSB_PROVIDER_KEYS"),
            "{e}"
        );
    }

    #[test]
    fn key_shapes() {
        for k in ["sk-ant-api03-abc", "sk-or-v1-abc", "sk-proj-abc", "sk-0123456789abcdefghijKLMN"] {
            assert!(looks_like_provider_key(k), "{k}");
        }
        for k in ["sk_live_0123456789abcdefghij", "ghp_0123456789", "sk-short", "tok-$(x)", ""] {
            assert!(!looks_like_provider_key(k), "{k}");
        }
    }

    #[test]
    fn keys_file_wins() {
        let a = parse_keys_file("openai from-keys-file\n", file()).unwrap();
        let (_, b) =
            split_env_file(vec![("OPENAI_API_KEY".into(), "from-env".into())], Path::new("/e")).unwrap();
        let m = merge(b, a);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].key.expose(), "from-keys-file");
    }
}
