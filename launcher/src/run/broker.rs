//! `ocsb run`'s model-key broker (the `ocsb-broker` crate) and what the launcher hands it: the
//! keys and OpenCode's configs as the launcher's readers parsed them, and a thread to serve on.

use std::path::Path;
use std::sync::Arc;

use ocsb_broker::ledger::Ledger;
use ocsb_broker::prices::Source;
use ocsb_broker::{Endpoint, Keys, PriceSources};
use ocsb_policy::settings::Settings;
use ocsb_sandbox::statefs::StateDir;
use serde_json::Value;

use crate::error::Result;
use crate::opencode::{configs, envfile};
use crate::served::Served;

/// The keys of the user's files ([`Keys::load`]), `OCSB_ENV_FILE` read by OpenCode's env-file
/// reader (the one that also feeds OpenCode's environment).
pub fn keys(s: &Settings) -> Result<Keys> {
    let env_file = match s.env_file() {
        Some(p) => envfile::load(&p)?,
        None => Vec::new(),
    };
    Ok(Keys::load(s, env_file)?)
}

/// Refuses a provider key written as a literal into one of OpenCode's configs that the sandbox
/// reads ([`ocsb_broker::check_configs`]): the global one and the project's, those that parse.
pub fn check_configs(s: &Settings, user_config_dir: &Path, project_dir: &Path) -> Result<()> {
    let (global, from) = configs::global(s, user_config_dir)?;
    let mut texts = vec![(global, from)];
    texts.extend(configs::project(project_dir).into_iter().map(|(text, p)| (text, p.display().to_string())));
    let parsed: Vec<(Value, String)> =
        texts.into_iter().filter_map(|(text, from)| Some((configs::parse(&text)?, from))).collect();
    Ok(ocsb_broker::check_configs(&parsed)?)
}

/// Where the broker's prices come from: OpenCode's global config, the project's config,
/// OpenCode's model lists (the user's own cache and the sandbox's), each with whose it is.
pub fn price_sources(
    s: &Settings,
    user_config_dir: &Path,
    project_dir: &Path,
    sd: &StateDir,
) -> PriceSources {
    let mut p = PriceSources::default();
    if let Ok((global, _)) = configs::global(s, user_config_dir) {
        p.configs.extend(configs::parse(&global).map(|v| (v, Source::User)));
    }
    for (text, _) in configs::project(project_dir) {
        p.configs.extend(configs::parse(&text).map(|v| (v, Source::Agent)));
    }
    // The user's own OpenCode cache is the agent's to write only where a setting makes it
    // writable (`OCSB_CACHES=shared`, `OCSB_RW`).
    let host_cache = configs::host_cache(s);
    let overlaps = |d: &Path| host_cache.starts_with(d) || d.starts_with(&host_cache);
    let agent_writes =
        s.home_dirs().iter().any(|(d, u)| overlaps(d) && *u == ocsb_policy::settings::CacheUse::Shared)
            || s.rw().iter().any(|d| overlaps(d));
    if let Some(text) = configs::models_list(&host_cache) {
        let source = if agent_writes { Source::Agent } else { Source::User };
        p.models_lists.extend(configs::parse(&text).map(|v| (v, source)));
    }
    if let Some(b) = sd.read(Path::new(configs::STATE_MODELS_LIST)) {
        p.models_lists.extend(configs::parse(&String::from_utf8_lossy(&b)).map(|v| (v, Source::Agent)));
    }
    p
}

/// A running broker, served on a thread of its own.
pub struct Broker {
    pub endpoint: Endpoint,
    pub ledger: Arc<Ledger>,
    served: Option<Served>,
}

impl Broker {
    pub fn start(bound: ocsb_broker::Bound, start: ocsb_broker::Start) -> Result<Broker> {
        let ledger = start.ledger.clone();
        let service = ocsb_broker::Service::new(start);
        let served = Served::spawn("the model-key broker", "ocsb-broker", bound.listener, move |l, stop| {
            service.serve(l, stop)
        })?;
        Ok(Broker { endpoint: bound.endpoint, ledger, served: Some(served) })
    }
}

impl Drop for Broker {
    /// The server first: once no call can settle any more, the ledger writes those still open.
    fn drop(&mut self) {
        if let Some(s) = self.served.take() {
            s.stop();
        }
        self.ledger.close();
    }
}

#[cfg(test)]
mod tests {
    /// Settings of a project in `tmp` with `OCSB_*` from the environment layer.
    fn settings(tmp: &std::path::Path, env: &[(&str, String)]) -> ocsb_policy::settings::Settings {
        let input = ocsb_policy::settings::LoadInput {
            home: tmp.join("home"),
            project_dir: tmp.join("proj"),
            user_config_dir: tmp.join("home/.config/opencode-sandbox"),
            env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        };
        std::fs::create_dir_all(tmp.join("proj")).unwrap();
        std::fs::create_dir_all(&input.user_config_dir).unwrap();
        ocsb_policy::settings::Settings::load(&input).unwrap()
    }

    #[test]
    fn keys_load_from_both_files_and_nothing_provider_shaped_is_left() {
        let d = tempfile::tempdir().unwrap();
        let env_file = d.path().join("agent.env");
        let keys_file = d.path().join("provider-keys");
        std::fs::write(&env_file, "MCP_TOKEN=tok\nANTHROPIC_API_KEY=sk-ant-api03-x\n").unwrap();
        std::fs::write(&keys_file, "fake real http://192.0.2.1:9/v1\n").unwrap();
        let s = settings(
            d.path(),
            &[
                ("OCSB_ENV_FILE", env_file.display().to_string()),
                ("OCSB_PROVIDER_KEYS", keys_file.display().to_string()),
            ],
        );
        let k = super::keys(&s).unwrap();
        assert_eq!(k.env_file, vec![("MCP_TOKEN".to_string(), "tok".to_string())]);
        let ids: Vec<&str> = k.upstreams.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["fake", "anthropic"]);
        let default = d.path().join("home/.config/opencode-sandbox/provider-keys");
        assert_eq!(
            ocsb_broker::key_files(&s),
            vec![env_file.clone(), keys_file.clone(), default.clone()],
            "both are hidden, and the default key file even before it exists"
        );
        // Without the setting, a key file in the user's config directory is all it takes.
        let s = settings(d.path(), &[]);
        assert!(super::keys(&s).unwrap().upstreams.is_empty(), "no file, no keys");
        std::fs::write(&default, "anthropic sk-ant-api03-y\n").unwrap();
        let k = super::keys(&settings(d.path(), &[])).unwrap();
        let ids: Vec<&str> = k.upstreams.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["anthropic"], "the default key file is read");
        assert_eq!(ocsb_broker::key_files(&settings(d.path(), &[])), vec![default.clone()]);
        std::fs::remove_file(&default).unwrap();
        // OCSB_ENV cannot carry one in either.
        let local = d.path().join("proj/.opencode-sandbox/local");
        std::fs::create_dir_all(&local).unwrap();
        std::fs::write(local.join("sandbox.conf"), "OCSB_ENV=(\"X=sk-or-v1-abcdef\")\n").unwrap();
        let s = settings(d.path(), &[]);
        let s = match super::keys(&s) {
            Err(e) => e.to_string(),
            Ok(_) => String::new(),
        };
        assert!(s.contains("OCSB_ENV: X looks like a model-provider key"), "{s}");
    }

    #[test]
    fn a_limit_needs_a_key_to_meter() {
        let d = tempfile::tempdir().unwrap();
        let s = settings(d.path(), &[("OCSB_SPEND_LIMIT", "5".into())]);
        let e = super::keys(&s).unwrap().require_meter(&s).unwrap_err().to_string();
        assert!(e.contains("nothing meters the spend"), "{e}");
        let s = settings(d.path(), &[]);
        assert!(super::keys(&s).unwrap().require_meter(&s).is_ok());
    }

    #[test]
    fn a_literal_key_in_a_config_the_sandbox_reads_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = settings(d.path(), &[]);
        let (ucd, proj) = (d.path().join("home/.config/opencode-sandbox"), d.path().join("proj"));
        assert!(super::check_configs(&s, &ucd, &proj).is_ok(), "the package's config holds no key");
        std::fs::write(proj.join("opencode.json"), r#"{"provider":{"x":{"options":{"apiKey":"fake-key"}}}}"#)
            .unwrap();
        assert!(super::check_configs(&s, &ucd, &proj).is_ok());
        std::fs::write(
            ucd.join("opencode.jsonc"),
            "// mine\n{\"provider\":{\"anthropic\":{\"options\":{\"apiKey\":\"sk-ant-api03-abc\"}}}}\n",
        )
        .unwrap();
        let e = super::check_configs(&s, &ucd, &proj).unwrap_err().to_string();
        assert!(
            e.contains("opencode.jsonc: `provider.anthropic.options.apiKey` looks like a model-provider key"),
            "{e}"
        );
    }
}
