//! The model-key broker: model-provider keys stay outside the sandbox, and the spend cap is
//! enforced where the agent cannot reach it.
//!
//! OpenCode runs inside the sandbox, and anything in its environment or files is the agent's to
//! read (and, through the filter, to send wherever the rules allow). So OpenCode gets a
//! per-run placeholder instead of each key and a `baseURL` on the host's loopback; the broker,
//! in the launcher (outside the sandbox, as the user), checks the placeholder, forwards the
//! model call to the provider's real address with the real key, streams the reply back
//! unchanged, and counts what it cost. The placeholder opens the broker and nothing else: the
//! broker forwards model calls only ([`route`]), to addresses from the user's files only
//! ([`keys`]), and refuses new calls once `OCSB_SPEND_LIMIT` is reached ([`ledger`]).
//!
//! The modules: [`keys`] (whose keys, sent where), [`route`] (which calls), [`usage`] and
//! [`prices`] (what a reply cost), [`ledger`] (the record and the cap), [`server`] and
//! [`upstream`] (the enforcement: HTTP in, HTTPS out).

pub mod keys;
pub mod ledger;
pub mod prices;
pub mod route;
pub mod server;
pub mod upstream;
pub mod usage;

#[cfg(test)]
mod tests;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ocsb_policy::settings::Settings;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::opencode::configs;
use crate::state;
use keys::Upstream;
use ledger::Ledger;
use ocsb_sandbox::statefs::StateDir;
use prices::Prices;

/// The keys of the user's files, split from what the sandbox may get.
#[derive(Debug, Default)]
pub struct Keys {
    /// `OCSB_ENV_FILE` without the provider keys: for OpenCode's environment.
    pub env_file: Vec<(String, String)>,
    /// The providers the broker serves.
    pub upstreams: Vec<Upstream>,
}

impl Keys {
    /// Reads `OCSB_ENV_FILE` and `OCSB_PROVIDER_KEYS` (parsed, never run) and checks that no
    /// provider-shaped value is left for the sandbox (`OCSB_ENV` included).
    pub fn load(settings: &Settings) -> Result<Keys> {
        let (env_file, from_env) = match settings.env_file() {
            Some(p) => keys::split_env_file(crate::opencode::envfile::load(&p)?, &p)?,
            None => (Vec::new(), Vec::new()),
        };
        let from_file = match settings.provider_keys() {
            Some(p) => {
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| Error::io("read the OCSB_PROVIDER_KEYS file", &p, e))?;
                keys::parse_keys_file(&text, &p)?
            }
            None => Vec::new(),
        };
        for (k, v) in settings.env_vars() {
            if keys::looks_like_provider_key(&v) {
                return Err(keys::unmapped_key(&format!("OCSB_ENV: {k}")));
            }
        }
        let upstreams = keys::merge(from_env, from_file);
        Ok(Keys { env_file, upstreams })
    }

    /// A spend limit needs the broker: without a key given to it, nothing would meter.
    pub fn require_meter(&self, settings: &Settings) -> Result<()> {
        if self.upstreams.is_empty() && settings.spend_limit().is_set() {
            return Err(Error::failed(
                "OCSB_SPEND_LIMIT is set, but no model-provider key is given to the broker, so nothing meters the spend",
                "put your provider keys in the OCSB_PROVIDER_KEYS file (or as ANTHROPIC_API_KEY, OPENAI_API_KEY, \
                 OPENROUTER_API_KEY in OCSB_ENV_FILE), or remove OCSB_SPEND_LIMIT",
            ));
        }
        Ok(())
    }
}

/// OpenCode's configs that the sandbox reads (the global one is copied into the state
/// directory; the project's is in the project): a provider key written into one of them as a
/// literal would be the agent's to read. Refused, with where it is.
pub fn check_configs(settings: &Settings, user_config_dir: &Path, project_dir: &Path) -> Result<()> {
    fn find(v: &Value, path: &mut Vec<String>) -> Option<String> {
        match v {
            Value::String(s) if keys::looks_like_provider_key(s) => Some(path.join(".")),
            Value::Object(m) => m.iter().find_map(|(k, v)| {
                path.push(k.clone());
                let r = find(v, path);
                path.pop();
                r
            }),
            Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| {
                path.push(i.to_string());
                let r = find(v, path);
                path.pop();
                r
            }),
            _ => None,
        }
    }
    let (global, from) = configs::global(settings, user_config_dir)?;
    let mut texts = vec![(global, from)];
    texts.extend(configs::project(project_dir).into_iter().map(|(text, p)| (text, p.display().to_string())));
    for (text, from) in texts {
        let Some(v) = configs::parse(&text) else {
            continue;
        };
        if let Some(at) = find(&v, &mut Vec::new()) {
            return Err(keys::unmapped_key(&format!("OpenCode config {from}: `{at}`")));
        }
    }
    Ok(())
}

/// The files that hold keys: hidden from the sandbox wherever they are. The default key file
/// also while it does not exist: made while a sandbox runs, it must not show up there.
pub fn key_files(settings: &Settings) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [settings.env_file(), settings.provider_keys()]
        .into_iter()
        .flatten()
        .filter(|p| p.exists())
        .collect();
    let default = settings.default_provider_keys();
    if !files.contains(&default) {
        files.push(default);
    }
    files
}

/// What OpenCode is told of the broker (its config names the broker, not the reverse).
pub use crate::opencode::config::Broker as Endpoint;

/// The broker's port, bound before OpenCode's config is written (which names it).
pub struct Bound {
    listener: TcpListener,
    pub endpoint: Endpoint,
}

pub fn bind(keys: &Keys) -> Result<Bound> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("listen on 127.0.0.1 for", "the model-key broker", e))?;
    let addr =
        listener.local_addr().map_err(|e| Error::io("read the address of", "the broker's socket", e))?;
    let token = format!("ocsb-broker-{}", crate::web::auth::random_secret()?);
    let providers = keys.upstreams.iter().map(|u| u.id.clone()).collect();
    Ok(Bound { listener, endpoint: Endpoint { addr, token, providers } })
}

/// The prices the broker uses: OpenCode's global config, the project's config, OpenCode's model
/// lists (the user's own cache and the sandbox's), and the highest price remembered from
/// earlier runs. Each source can only raise a price (see [`prices`]).
pub fn prices(settings: &Settings, user_config_dir: &Path, project_dir: &Path, sd: &StateDir) -> Prices {
    use prices::Source;
    let mut p = Prices::default();
    if let Ok((global, _)) = configs::global(settings, user_config_dir) {
        configs::parse(&global).inspect(|v| p.add_config(v, Source::User));
    }
    for (text, _) in configs::project(project_dir) {
        configs::parse(&text).inspect(|v| p.add_config(v, Source::Agent));
    }
    // The user's own OpenCode cache is the agent's to write only where a setting makes it
    // writable (`OCSB_CACHES=shared`, `OCSB_RW`).
    let host_cache = configs::host_cache(settings);
    let overlaps = |d: &Path| host_cache.starts_with(d) || d.starts_with(&host_cache);
    let agent_writes = settings
        .home_dirs()
        .iter()
        .any(|(d, u)| overlaps(d) && *u == ocsb_policy::settings::CacheUse::Shared)
        || settings.rw().iter().any(|d| overlaps(d));
    if let Some(text) = configs::models_list(&host_cache) {
        configs::parse(&text)
            .inspect(|v| p.add_models_list(v, if agent_writes { Source::Agent } else { Source::User }));
    }
    if let Some(b) = sd.read(Path::new(configs::STATE_MODELS_LIST)) {
        configs::parse(&String::from_utf8_lossy(&b)).inspect(|v| p.add_models_list(v, Source::Agent));
    }
    if let Some(b) = sd.read(Path::new(state::PRICES))
        && let Ok(seen) = serde_json::from_slice::<Prices>(&b)
    {
        p.add_all(&seen);
    }
    if let Ok(text) = serde_json::to_vec(&p)
        && let Err(e) = state::rewrite_private(sd, Path::new(state::PRICES), &text)
    {
        eprintln!("ocsb: warning: broker: {e}");
    }
    p
}

/// A running broker.
pub struct Broker {
    pub endpoint: Endpoint,
    pub ledger: Arc<Ledger>,
    served: Option<crate::served::Served>,
}

/// What the broker serves with.
pub struct Start {
    pub bound: Bound,
    pub upstreams: Vec<Upstream>,
    pub prices: Prices,
    pub ledger: Ledger,
    /// Where OCSB_SPEND_LIMIT is set (named in the refusal).
    pub limit_set_at: String,
}

impl Broker {
    pub fn start(s: Start) -> Result<Broker> {
        let tls = crate::tls::client_config()?;
        let ledger = Arc::new(s.ledger);
        let endpoint = s.bound.endpoint.clone();
        let cfg = Arc::new(server::Config {
            upstreams: s.upstreams,
            token: endpoint.token.clone(),
            prices: s.prices,
            ledger: ledger.clone(),
            limit_set_at: s.limit_set_at,
            tls,
        });
        let served = crate::served::Served::spawn(
            "the model-key broker",
            "ocsb-broker",
            s.bound.listener,
            move |l, stop| server::serve(l, cfg, stop),
        )?;
        Ok(Broker { endpoint, ledger, served: Some(served) })
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
