//! Everything OpenCode is given: its binary, its global config, its skills and plugins, and its
//! environment (`OPENCODE_CONFIG_CONTENT`, `OCSB_ENV_FILE`, `OCSB_ENV`, `OCSB_KUBECONFIG`, the
//! per-run server secret). Files go to the state directory; the environment is returned for the
//! sandbox (which adds the proxy variables and the own `XDG_*` directories).

pub mod config;
pub mod configs;
pub mod envfile;
pub mod plugin_cache;

use std::path::{Path, PathBuf};

use ocsb_policy::settings::Settings;

use crate::error::{Error, Result};
use ocsb_sandbox::statefs::StateDir;

/// The package's files, built into the binary so an installed `ocsb` needs no data directory
/// (its global OpenCode config is [`configs::PACKAGE`]).
pub const GUARD_PLUGIN: &str = include_str!("../../../opencode/plugins/ocsb-guard.js");
/// Desktop notifications through the filtered bus (`OCSB_NOTIFICATIONS`).
pub const NOTIFY_PLUGIN: &str = include_str!("../../../opencode/plugins/ocsb-notify.js");
/// Always loaded: ends a bash tool's output with the egress refusals of that command.
pub const DENIALS_PLUGIN: &str = include_str!("../../../opencode/plugins/ocsb-denials.js");
/// Plugins selectable with `OCSB_PLUGINS` by name.
pub const PACKAGE_PLUGINS: &[(&str, &str)] =
    &[("skill-compact-resurrect", include_str!("../../../opencode/plugins/skill-compact-resurrect.js"))];
/// Skills selectable with `OCSB_SKILLS` by name (besides those in `OCSB_SKILL_DIRS`).
pub const PACKAGE_SKILLS: &[(&str, &str)] =
    &[("opencode-sandbox", include_str!("../../../skills/opencode-sandbox/SKILL.md"))];
/// The Tokens panel is part of the web front; the name is accepted in `OCSB_PLUGINS` for
/// compatibility with the seed and selects nothing (`OCSB_PANEL` switches it).
const BUILTIN_PANEL: &str = "context-panel";

/// What `run` needs to start OpenCode.
#[derive(Debug, Clone)]
pub struct Setup {
    /// `opencode serve --hostname 127.0.0.1 --port <web+1>` and the user's extra arguments.
    pub argv: Vec<String>,
    /// Variables added to the sandbox's environment (they win over its defaults).
    pub env: Vec<(String, String)>,
    /// OpenCode's own per-run password; the web front sends it upstream.
    pub server_secret: String,
    /// Directories with skills, read by OpenCode (`skills.paths`).
    pub skill_paths: Vec<PathBuf>,
    /// npm plugins of the global config copied into OpenCode's cache from a global npm install.
    pub warmed: Vec<plugin_cache::Warmed>,
}

/// The OpenCode binary: an absolute path, or a name looked up in `PATH`.
pub fn find_binary(bin: &Path, path_var: Option<&str>) -> Result<PathBuf> {
    let fix = "install OpenCode 2 (`npm i -g opencode-ai`), or set OCSB_OPENCODE_BIN to its path";
    if bin.is_absolute() {
        return if bin.is_file() {
            Ok(bin.to_path_buf())
        } else {
            Err(Error::failed(format!("OCSB_OPENCODE_BIN={} does not exist", bin.display()), fix))
        };
    }
    let path = path_var.unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(bin))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| Error::failed(format!("`{}` was not found in PATH", bin.display()), fix))
}

/// Resolve `OCSB_SKILLS`: a skill named N is `<dir>/N/SKILL.md` in an `OCSB_SKILL_DIRS` entry
/// (first match wins), else the package's skill N (written to `<state>/package/skills/N`).
pub fn resolve_skills(settings: &Settings, state: &StateDir) -> Result<Vec<PathBuf>> {
    let dirs = settings.skill_dirs();
    let mut out = Vec::new();
    for name in settings.skills() {
        if let Some(d) = dirs.iter().map(|d| d.join(name)).find(|d| d.join("SKILL.md").is_file()) {
            out.push(d);
            continue;
        }
        if let Some((_, text)) = PACKAGE_SKILLS.iter().find(|(n, _)| n == name) {
            let rel = Path::new("package/skills").join(name);
            state.write(&rel.join("SKILL.md"), text.as_bytes(), 0o644)?;
            out.push(state.path().join(rel));
            continue;
        }
        let known: Vec<&str> = PACKAGE_SKILLS.iter().map(|(n, _)| *n).collect();
        return Err(Error::failed(
            format!(
                "skill `{name}` (OCSB_SKILLS) was not found: no {name}/SKILL.md in OCSB_SKILL_DIRS ({}) and the package has only {}",
                if dirs.is_empty() {
                    "empty".to_string()
                } else {
                    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" ")
                },
                known.join(", ")
            ),
            "add the directory that contains it to OCSB_SKILL_DIRS, or remove the name from OCSB_SKILLS",
        ));
    }
    Ok(out)
}

/// Resolve `OCSB_PLUGINS` (absolute `.js`/`.ts` files, or the package's plugins by name) and add
/// the always-on guard and denials plugins, and the notifier when `OCSB_NOTIFICATIONS` is on. Package plugins
/// are written to `<state>/package/plugins/`.
pub fn resolve_plugins(settings: &Settings, state: &StateDir) -> Result<Vec<PathBuf>> {
    let package = |name: &str, text: &str| -> Result<PathBuf> {
        let rel = Path::new("package/plugins").join(format!("{name}.js"));
        state.write(&rel, text.as_bytes(), 0o644)?;
        Ok(state.path().join(rel))
    };
    let mut out = vec![package("ocsb-guard", GUARD_PLUGIN)?, package("ocsb-denials", DENIALS_PLUGIN)?];
    if settings.notifications() {
        out.push(package("ocsb-notify", NOTIFY_PLUGIN)?);
    }
    for p in settings.plugins() {
        if p == BUILTIN_PANEL {
            continue;
        }
        let path = Path::new(p);
        if path.is_absolute() {
            if !path.is_file() {
                return Err(Error::failed(
                    format!("plugin {p} (OCSB_PLUGINS) does not exist"),
                    "fix the path or remove it from OCSB_PLUGINS",
                ));
            }
            out.push(path.to_path_buf());
        } else if let Some((name, text)) = PACKAGE_PLUGINS.iter().find(|(n, _)| n == p) {
            out.push(package(name, text)?);
        } else {
            let known: Vec<&str> = PACKAGE_PLUGINS.iter().map(|(n, _)| *n).chain([BUILTIN_PANEL]).collect();
            return Err(Error::failed(
                format!(
                    "plugin `{p}` (OCSB_PLUGINS) is not a package plugin ({}) nor an absolute path",
                    known.join(", ")
                ),
                "use one of those names or an absolute path to a .js/.ts plugin file",
            ));
        }
    }
    Ok(out)
}

/// Keep OpenCode from running `npm install @opencode-ai/plugin` in its global config directory.
///
/// OpenCode installs that package into every writable config directory without `node_modules`
/// (or whose `package-lock.json` lacks it), and with plugins configured the first request for a
/// project waits for the install: about 70 s of npm retries when the registry cannot be reached
/// (measured: 70.3 s behind an unreachable proxy, 0.08 s with this seed). ocsb's own plugins
/// import nothing, so the directory only needs to look installed.
pub fn seed_config_dir(state: &StateDir, dir: &Path) -> Result<()> {
    state.dir(&dir.join("node_modules"))?;
    let lock = dir.join("package-lock.json");
    let listed = state
        .read(&lock)
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["packages"][""]["dependencies"]["@opencode-ai/plugin"].is_string());
    if !listed {
        let text = "{\"packages\":{\"\":{\"dependencies\":{\"@opencode-ai/plugin\":\"*\"}}}}\n";
        state.write(&lock, text.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// `OCSB_KUBECONFIG`, copied into the state directory (0600) so the agent gets exactly this file
/// while `~/.kube/config` stays hidden.
fn kubeconfig(settings: &Settings, state: &StateDir) -> Result<Option<PathBuf>> {
    let Some(src) = settings.kubeconfig() else { return Ok(None) };
    let text = std::fs::read(&src).map_err(|e| Error::io("read OCSB_KUBECONFIG", &src, e))?;
    state.write(Path::new("kube/config"), &text, 0o600)?;
    Ok(Some(state.path().join("kube/config")))
}

/// Prepare OpenCode's files in the state directory and compute its command line and
/// environment. Fails before anything starts when an input is bad (env file line, missing skill).
/// `env_file` is `OCSB_ENV_FILE` without its provider keys; `broker` is where OpenCode finds
/// those providers instead (the model-key broker).
pub fn setup(
    settings: &Settings,
    user_config_dir: &Path,
    state: &StateDir,
    extra_args: &[String],
    env_file: &[(String, String)],
    broker: Option<&ocsb_broker::Endpoint>,
) -> Result<Setup> {
    let bin = find_binary(&settings.opencode_bin(), std::env::var("PATH").ok().as_deref())?;
    let (global, _) = configs::global(settings, user_config_dir)?;
    state.write(Path::new("config/opencode/opencode.jsonc"), global.as_bytes(), 0o644)?;
    seed_config_dir(state, Path::new("config/opencode"))?;
    let warmed = plugin_cache::warm(state, &global, &bin)?;
    let skill_paths = resolve_skills(settings, state)?;
    let plugins = resolve_plugins(settings, state)?;
    let content = config::content(&skill_paths, &plugins, broker.map(config::providers));
    let server_secret = crate::web::auth::random_secret()?;

    let mut env: Vec<(String, String)> = Vec::new();
    env.extend(env_file.iter().cloned());
    env.extend(settings.env_vars());
    if let Some(k) = kubeconfig(settings, state)? {
        env.push(("KUBECONFIG".into(), k.display().to_string()));
    }
    // Names the guard plugin blanks in the agent's shells: the env file holds tokens for MCP
    // servers, which run in OpenCode's process, not in the agent's shell (its provider keys went
    // to the broker).
    let blank: Vec<&str> = env_file.iter().map(|(k, _)| k.as_str()).collect();
    env.extend([
        ("OPENCODE_CONFIG_CONTENT".to_string(), content.to_string()),
        ("OPENCODE_SERVER_USERNAME".to_string(), crate::web::auth::USER.to_string()),
        ("OPENCODE_SERVER_PASSWORD".to_string(), server_secret.clone()),
        ("OPENCODE_DISABLE_AUTOUPDATE".to_string(), "1".to_string()),
        ("OCSB_BLANK_ENV".to_string(), blank.join(",")),
        ("OCSB_WEB_URL".to_string(), format!("http://127.0.0.1:{}/", settings.web_port())),
    ]);
    let mut argv = vec![
        bin.display().to_string(),
        "serve".into(),
        "--hostname".into(),
        "127.0.0.1".into(),
        "--port".into(),
        settings.opencode_port().to_string(),
    ];
    argv.extend(extra_args.iter().cloned());
    Ok(Setup { argv, env, server_secret, skill_paths, warmed })
}

/// Where OpenCode fetches its model list at start and every hour (research §2.3).
pub const MODELS_HOST: &str = "models.opencode.ai";

/// Whether the egress rules refuse OpenCode's model-list fetch. Then `run` sets
/// `OPENCODE_DISABLE_MODELS_FETCH=1`: the request could only fail (OpenCode falls back to its
/// built-in list) and would log an error at every start and every hour.
pub fn models_fetch_blocked(policy: &ocsb_policy::egress::Policy) -> bool {
    use ocsb_policy::egress::{Step, Target, Verdict};
    let Ok(t) = Target::from_connect(&format!("{MODELS_HOST}:443")) else { return false };
    matches!(policy.evaluate(&t), Step::Decided(d) if d.verdict == Verdict::Deny)
}

/// The hidden subcommand of [`config_for_tests`].
pub const CONFIG_FOR_TESTS: &str = "__opencode-config";

/// `ocsb __opencode-config DIR`: write the guard plugin into DIR and return the
/// `OPENCODE_CONFIG_CONTENT` that `run` would use (no skills), so tests can start a real
/// OpenCode with exactly the launcher's permissions.
pub fn config_for_tests(dir: &Path) -> Result<String> {
    let guard = dir.join("ocsb-guard.js");
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&guard, GUARD_PLUGIN))
        .map_err(|e| Error::io("write", &guard, e))?;
    Ok(config::content(&[], &[guard], None).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_lookup() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("opencode");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let e = find_binary(Path::new("opencode"), Some(d.path().to_str().unwrap())).unwrap_err().to_string();
        assert!(e.contains("npm i -g opencode-ai"), "not executable: {e}");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            find_binary(Path::new("opencode"), Some(&format!("/nonexistent:{}", d.path().display())))
                .unwrap(),
            f
        );
        assert!(find_binary(&d.path().join("nope"), None).is_err());
    }

    #[test]
    fn config_dir_seed_keeps_a_real_lock() {
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(d.path()).unwrap();
        seed_config_dir(&state, Path::new(".")).unwrap();
        assert!(d.path().join("node_modules").is_dir());
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("package-lock.json")).unwrap()).unwrap();
        assert_eq!(v["packages"][""]["dependencies"]["@opencode-ai/plugin"], "*");
        let real = r#"{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}},"x":1}"#;
        std::fs::write(d.path().join("package-lock.json"), real).unwrap();
        seed_config_dir(&state, Path::new(".")).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("package-lock.json")).unwrap(), real);
    }

    #[test]
    fn models_fetch_follows_the_rules() {
        use ocsb_policy::egress::{EgressLayer, LayerText, Policy};
        let policy = |text: &str| {
            Policy::compile(&[
                LayerText::package(),
                LayerText::new(EgressLayer::Project, "egress.conf", text),
            ])
            .unwrap()
        };
        assert!(!models_fetch_blocked(&policy("")), "public hosts are allowed by default");
        assert!(models_fetch_blocked(&policy("block .opencode.ai\n")));
        assert!(!models_fetch_blocked(&policy("block .opencode.ai\nallow models.opencode.ai\n")));
    }

    #[test]
    fn package_files_are_valid() {
        assert!(GUARD_PLUGIN.contains("shell.env"));
        assert!(PACKAGE_SKILLS[0].1.starts_with("---\nname: opencode-sandbox\n"));
        assert!(configs::PACKAGE.contains("\"plugin\""));
    }
}
