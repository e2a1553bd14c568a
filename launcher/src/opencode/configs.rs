//! OpenCode's configuration as OpenCode finds it, read here and nowhere else: the global config
//! ocsb gives it (`OCSB_OPENCODE_CONFIG`, else the user's, else the package's), the project's own
//! config files (the agent's to edit), and the model lists OpenCode caches. The files are JSONC.
//! [`super::setup`] writes what OpenCode reads; the model-key broker reads these for the keys
//! they must not hold and the prices they name.

use std::path::{Path, PathBuf};

use ocsb_policy::settings::Settings;
use serde_json::Value;

use crate::error::{Error, Result};

/// The package's global OpenCode config, built into the binary.
pub const PACKAGE: &str = include_str!("../../../opencode/opencode.jsonc");

/// The project's OpenCode config files, as OpenCode looks for them.
pub const PROJECT: &[&str] =
    &["opencode.json", "opencode.jsonc", ".opencode/opencode.json", ".opencode/opencode.jsonc"];

/// OpenCode's model list in a cache directory (`XDG_CACHE_HOME`).
const MODELS_LIST: &str = "opencode/models.json";

/// The sandbox's OpenCode model list, relative to the state directory (the sandbox's
/// `XDG_CACHE_HOME` is its `cache/`).
pub const STATE_MODELS_LIST: &str = "cache/opencode/models.json";

/// The global OpenCode config: `OCSB_OPENCODE_CONFIG`, else `~/.config/opencode-sandbox/
/// opencode.jsonc` when it exists, else the package's. Returns the text and where it came from.
pub fn global(settings: &Settings, user_config_dir: &Path) -> Result<(String, String)> {
    if let Some(p) = settings.opencode_config() {
        let t = std::fs::read_to_string(&p).map_err(|e| Error::io("read OCSB_OPENCODE_CONFIG", &p, e))?;
        return Ok((t, p.display().to_string()));
    }
    let user = user_config_dir.join("opencode.jsonc");
    match std::fs::read_to_string(&user) {
        Ok(t) => Ok((t, user.display().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok((PACKAGE.to_string(), "the package's".into()))
        }
        Err(e) => Err(Error::io("read", user, e)),
    }
}

/// The project's config files that exist ([`PROJECT`]), each with its path, read as the agent
/// may have left them ([`read_untrusted`]).
pub fn project(project_dir: &Path) -> Vec<(String, PathBuf)> {
    PROJECT
        .iter()
        .map(|name| project_dir.join(name))
        .filter_map(|p| read_untrusted(&p).map(|text| (text, p)))
        .collect()
}

/// The user's own cache directory, where OpenCode run outside ocsb keeps its model list:
/// `XDG_CACHE_HOME` when it is absolute, else `~/.cache`.
pub fn host_cache(settings: &Settings) -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| settings.home().join(".cache"))
}

/// The model list in the cache directory `cache`, if there is one ([`read_untrusted`]).
pub fn models_list(cache: &Path) -> Option<String> {
    read_untrusted(&cache.join(MODELS_LIST))
}

/// A config file's JSONC as JSON, `None` when it is not JSON even then.
pub fn parse(text: &str) -> Option<Value> {
    serde_json::from_str(&jsonc_to_json(text)).ok()
}

/// JSONC (comments, trailing commas) to JSON. Strings are copied verbatim, so `//` inside a
/// URL stays.
pub fn jsonc_to_json(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.extend_from_slice(&b[start..i]);
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            }
            b',' => {
                let next = b[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
                if !matches!(next, Some(b']' | b'}')) {
                    out.push(b',');
                }
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A config or model list the agent may have written or replaced (the project's config;
/// `~/.cache` with `OCSB_CACHES=shared`), read up to 16 MiB without following a final link.
pub fn read_untrusted(p: &Path) -> Option<String> {
    ocsb_sandbox::checkouts::read_limited(p, 16 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonc_comments_and_trailing_commas() {
        let t = "// top\n{\n  \"a\": \"http://x/*y*/\", /* c */\n  \"plugin\": [\"p@1.0.0\",],\n}\n";
        let v: serde_json::Value = serde_json::from_str(&jsonc_to_json(t)).unwrap();
        assert_eq!(v["a"], "http://x/*y*/");
        assert_eq!(v["plugin"][0], "p@1.0.0");
        let v: serde_json::Value = serde_json::from_str(&jsonc_to_json(PACKAGE)).unwrap();
        assert!(
            v["plugin"].as_array().unwrap().iter().any(|p| p.as_str().unwrap().starts_with("cc-safety-net@"))
        );
    }
}
