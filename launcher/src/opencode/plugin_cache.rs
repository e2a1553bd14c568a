//! A warm plugin cache: npm plugins of the global config (e.g. `cc-safety-net@2.4.5`) that are
//! already installed globally with npm at exactly that version are copied into OpenCode's own
//! cache in the state directory before every start, replacing what is there (the agent can
//! write the cache between runs, and one of these plugins is a guard).
//!
//! Why: OpenCode installs npm plugins into `$XDG_CACHE_HOME/opencode/packages/<spec>/
//! node_modules/<name>` on first use and reuses that copy offline. Behind the
//! egress filter the first install needs the registry allowed and can stall the start; with a
//! global install on the machine (the way `opencode-ai` itself is installed) no request is
//! needed at all. Only exact versions of unscoped packages are copied: a range or a tag could
//! not be matched without asking the registry, and that install is left to OpenCode.

use std::path::{Path, PathBuf};

use ocsb_sandbox::statefs::StateDir;

use super::configs::jsonc_to_json;

/// One plugin copied into the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warmed {
    pub spec: String,
    pub from: PathBuf,
}

/// `name@1.2.3` with an unscoped name and an exact version.
fn exact_spec(spec: &str) -> Option<(&str, &str)> {
    let (name, version) = spec.split_once('@')?;
    let name_ok = !name.is_empty()
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-._".contains(&c))
        && !name.starts_with('.');
    let mut parts = version.split('.');
    let version_ok = (0..3)
        .all(|_| parts.next().is_some_and(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit())))
        && parts.next().is_none();
    (name_ok && version_ok).then_some((name, version))
}

/// The global `node_modules` directories to look in: the one the OpenCode binary was installed
/// into (`npm i -g opencode-ai` puts both there), `$NPM_CONFIG_PREFIX`, then the usual prefixes.
pub fn global_roots(opencode_bin: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(real) = std::fs::canonicalize(opencode_bin)
        && let Some(nm) = real.ancestors().find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
    {
        roots.push(nm.to_path_buf());
    }
    for var in ["NPM_CONFIG_PREFIX", "npm_config_prefix"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            roots.push(PathBuf::from(p).join("lib/node_modules"));
        }
    }
    roots.extend(["/usr/local/lib/node_modules", "/usr/lib/node_modules"].map(PathBuf::from));
    roots.dedup();
    roots
}

fn installed_version(dir: &Path) -> Option<String> {
    let text = std::fs::read(dir.join("package.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    v["version"].as_str().map(str::to_string)
}

/// Copy what can be copied; a plugin with no trusted copy is left to OpenCode's own install (the
/// cache is an optimisation, the plugin list is OpenCode's to enforce). A plugin that has one
/// but cannot be refreshed is an error: OpenCode would load what the agent left there.
pub fn warm(state: &StateDir, global_config: &str, opencode_bin: &Path) -> crate::error::Result<Vec<Warmed>> {
    let Ok(cfg) = serde_json::from_str::<serde_json::Value>(&jsonc_to_json(global_config)) else {
        return Ok(Vec::new());
    };
    let specs: Vec<&str> =
        cfg["plugin"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    let roots = global_roots(opencode_bin);
    let mut out = Vec::new();
    for spec in specs {
        let Some((name, version)) = exact_spec(spec) else { continue };
        let dest = Path::new("cache/opencode/packages").join(spec).join("node_modules").join(name);
        let Some(src) =
            roots.iter().map(|r| r.join(name)).find(|d| installed_version(d).as_deref() == Some(version))
        else {
            continue;
        };
        // The cache is the agent's to write between runs: a guard plugin there (cc-safety-net)
        // could have been neutered. With the trusted copy at hand, it is replaced on every start.
        if let Ok(fd) = state.dir(&dest) {
            ocsb_sandbox::tmpclean::clear(fd);
        }
        if let Err(e) = state.copy_tree(&src, &dest) {
            let at = state.path().join(&dest);
            return Err(crate::error::Error::failed(
                format!("could not refresh {spec} in OpenCode's plugin cache: {e}"),
                format!("inspect and remove it (`rm -rf {}`); the next start copies it again", at.display()),
            ));
        }
        out.push(Warmed { spec: spec.to_string(), from: src });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_unscoped_specs() {
        assert_eq!(exact_spec("cc-safety-net@2.4.5"), Some(("cc-safety-net", "2.4.5")));
        for s in
            ["cc-safety-net", "x@latest", "x@^1.2.3", "@scope/x@1.0.0", "x@1.2", "../x@1.0.0", "x@1.0.0-rc1"]
        {
            assert_eq!(exact_spec(s), None, "{s}");
        }
    }

    #[test]
    fn copies_a_matching_global_install_once() {
        let state_dir = tempfile::tempdir().unwrap();
        let prefix = tempfile::tempdir().unwrap();
        let nm = prefix.path().join("node_modules");
        std::fs::create_dir_all(nm.join("opencode-ai/bin")).unwrap();
        std::fs::write(nm.join("opencode-ai/bin/opencode"), "").unwrap();
        std::fs::create_dir_all(nm.join("good/dist")).unwrap();
        std::fs::write(nm.join("good/package.json"), r#"{"version":"2.4.5"}"#).unwrap();
        std::fs::write(nm.join("good/dist/index.js"), "export {}").unwrap();
        std::fs::create_dir_all(nm.join("old")).unwrap();
        std::fs::write(nm.join("old/package.json"), r#"{"version":"1.0.0"}"#).unwrap();
        let state = StateDir::open(state_dir.path()).unwrap();
        let cfg = r#"{ "plugin": ["good@2.4.5", "old@2.0.0", "tagged@latest"] }"#;
        let bin = nm.join("opencode-ai/bin/opencode");
        let w = warm(&state, cfg, &bin).unwrap();
        assert_eq!(w, vec![Warmed { spec: "good@2.4.5".into(), from: nm.join("good") }]);
        let copied =
            state_dir.path().join("cache/opencode/packages/good@2.4.5/node_modules/good/dist/index.js");
        assert_eq!(std::fs::read_to_string(&copied).unwrap(), "export {}");
        assert!(!state_dir.path().join("cache/opencode/packages/old@2.0.0").exists());
        // The agent edits the cached plugin and adds a file: the next start restores the copy.
        std::fs::write(&copied, "/* neutered */").unwrap();
        let extra =
            state_dir.path().join("cache/opencode/packages/good@2.4.5/node_modules/good/dist/extra.js");
        std::fs::write(&extra, "evil").unwrap();
        // A directory made read-only does not keep the edit either.
        use std::os::unix::fs::PermissionsExt;
        let dist = state_dir.path().join("cache/opencode/packages/good@2.4.5/node_modules/good/dist");
        std::fs::set_permissions(&dist, std::fs::Permissions::from_mode(0o555)).unwrap();
        assert_eq!(warm(&state, cfg, &bin).unwrap().len(), 1, "refreshed on every start");
        assert_eq!(std::fs::read_to_string(&copied).unwrap(), "export {}");
        assert!(!extra.exists());
    }
}
