//! The model-key broker: model-provider keys stay outside the sandbox, and the spend cap is
//! enforced where the agent cannot reach it.
//!
//! OpenCode runs inside the sandbox, and anything in its environment or files is the agent's to
//! read (and, through the filter, to send wherever the rules allow). So OpenCode gets a
//! per-run placeholder instead of each key and a `baseURL` on the host's loopback; the broker,
//! in the launcher's process (outside the sandbox, as the user), checks the placeholder, forwards the
//! model call to the provider's real address with the real key, streams the reply back
//! unchanged, and counts what it cost. The placeholder opens the broker and nothing else: the
//! broker forwards model calls only ([`route`]), to addresses from the user's files only
//! ([`keys`]), and refuses new calls once `OCSB_SPEND_LIMIT` is reached ([`ledger`]).
//!
//! The modules: [`keys`] (whose keys, sent where), [`route`] (which calls), [`usage`] and
//! [`prices`](mod@prices) (what a reply cost), [`ledger`] (the record and the cap), [`server`] and
//! [`upstream`] (the enforcement: HTTP in, HTTPS out), [`error`].
//!
//! The launcher owns what is not the broker's: the state directory's names ([`Files`]),
//! reading OpenCode's configuration (it hands over what it parsed), the TLS client's trust
//! store, the secret in the placeholder, and the thread the server runs on ([`Service::serve`]).

pub mod error;
pub mod keys;
pub mod ledger;
pub mod prices;
pub mod route;
pub mod server;
pub mod upstream;
pub mod usage;

#[cfg(test)]
mod tests;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use ocsb_policy::settings::Settings;
use serde_json::Value;

pub use error::{Error, Result};
use keys::Upstream;
use ledger::Ledger;
use ocsb_sandbox::statefs::StateDir;
use prices::Prices;

/// The broker's files, relative to the state directory. The launcher's state layout names them
/// (it is the one owner of the directory's names); they are in a directory the sandbox cannot
/// see, since what the cap counts must not be the agent's to rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// The directory of the others (made when the ledger opens).
    pub dir: PathBuf,
    /// The ledger, one JSON line per model request.
    pub ledger: PathBuf,
    /// The id of the `ocsb run` that runs now (or ran last).
    pub session: PathBuf,
    /// The highest price seen for each model.
    pub prices: PathBuf,
}

#[cfg(test)]
impl Files {
    /// The launcher's names, for the tests.
    pub(crate) fn for_tests() -> Files {
        Files {
            dir: "spend".into(),
            ledger: "spend/ledger.jsonl".into(),
            session: "spend/session".into(),
            prices: "spend/prices.json".into(),
        }
    }
}

/// The keys of the user's files, split from what the sandbox may get.
#[derive(Debug, Default)]
pub struct Keys {
    /// `OCSB_ENV_FILE` without the provider keys: for OpenCode's environment.
    pub env_file: Vec<(String, String)>,
    /// The providers the broker serves.
    pub upstreams: Vec<Upstream>,
}

impl Keys {
    /// Splits `OCSB_ENV_FILE` (`env_file`, as the launcher parsed it; empty without the
    /// setting), reads `OCSB_PROVIDER_KEYS` (parsed, never run) and checks that no
    /// provider-shaped value is left for the sandbox (`OCSB_ENV` included).
    pub fn load(settings: &Settings, env_file: Vec<(String, String)>) -> Result<Keys> {
        let (env_file, from_env) = match settings.env_file() {
            Some(p) => keys::split_env_file(env_file, &p)?,
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
/// literal would be the agent's to read. Refused, with where it is. `configs`: each config as
/// the launcher parsed it, with where it is (`OpenCode config <where>` in the refusal).
pub fn check_configs(configs: &[(Value, String)]) -> Result<()> {
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
    for (v, from) in configs {
        if let Some(at) = find(v, &mut Vec::new()) {
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

/// What OpenCode is told of the broker: where it listens, the placeholder that opens it, and
/// the providers it serves (the launcher writes OpenCode's config from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub token: String,
    pub providers: Vec<String>,
}

/// The broker's port, bound before OpenCode's config is written (which names it).
pub struct Bound {
    /// For the launcher to serve ([`Service::serve`]) on a thread of its own.
    pub listener: TcpListener,
    pub endpoint: Endpoint,
}

/// Binds the broker's port on the loopback; `secret` (random, new every run) makes the
/// placeholder OpenCode sends.
pub fn bind(keys: &Keys, secret: &str) -> Result<Bound> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("listen on 127.0.0.1 for", "the model-key broker", e))?;
    let addr =
        listener.local_addr().map_err(|e| Error::io("read the address of", "the broker's socket", e))?;
    let token = format!("ocsb-broker-{secret}");
    let providers = keys.upstreams.iter().map(|u| u.id.clone()).collect();
    Ok(Bound { listener, endpoint: Endpoint { addr, token, providers } })
}

/// OpenCode's files the prices come from, as the launcher read and parsed them, each with whose
/// it is ([`prices::Source`]).
#[derive(Debug, Default)]
pub struct PriceSources {
    /// OpenCode's global config (the user's), then the project's.
    pub configs: Vec<(Value, prices::Source)>,
    /// OpenCode's model lists: the user's own cache, then the sandbox's.
    pub models_lists: Vec<(Value, prices::Source)>,
}

/// The prices the broker uses: OpenCode's configs and model lists, and the highest price
/// remembered from earlier runs (in [`Files::prices`]; [`remember_prices`] updates it). Each
/// source can only raise a price (see [`prices`](mod@prices)).
pub fn prices(sources: PriceSources, sd: &StateDir, files: &Files) -> Prices {
    let mut p = Prices::default();
    for (v, source) in &sources.configs {
        p.add_config(v, *source);
    }
    for (v, source) in &sources.models_lists {
        p.add_models_list(v, *source);
    }
    if let Some(b) = sd.read(&files.prices)
        && let Ok(seen) = serde_json::from_slice::<Prices>(&b)
    {
        p.add_all(&seen);
    }
    p
}

/// Keeps `prices` for the next runs (their highest price of each model).
pub fn remember_prices(prices: &Prices, sd: &StateDir, files: &Files) -> Result<()> {
    match serde_json::to_vec(prices) {
        Ok(text) => Ok(sd.rewrite_private(&files.prices, &text)?),
        Err(_) => Ok(()),
    }
}

/// What the broker serves with.
pub struct Start {
    /// The placeholder OpenCode sends ([`Endpoint::token`]).
    pub token: String,
    pub upstreams: Vec<Upstream>,
    pub prices: Prices,
    pub ledger: Arc<Ledger>,
    /// Where OCSB_SPEND_LIMIT is set (named in the refusal).
    pub limit_set_at: String,
    /// The TLS client for the providers (the system's trust store, chosen by the launcher).
    pub tls: Arc<rustls::ClientConfig>,
}

/// A broker ready to serve.
pub struct Service {
    cfg: Arc<server::Config>,
}

impl Service {
    pub fn new(s: Start) -> Service {
        Service {
            cfg: Arc::new(server::Config {
                upstreams: s.upstreams,
                token: s.token,
                prices: s.prices,
                ledger: s.ledger,
                limit_set_at: s.limit_set_at,
                tls: s.tls,
            }),
        }
    }

    /// Serves `listener` until `stop` fires, then closes the open connections. The caller
    /// closes the ledger ([`Ledger::close`]) once this returned: only then can no call settle.
    pub async fn serve(self, listener: tokio::net::TcpListener, stop: tokio::sync::oneshot::Receiver<()>) {
        server::serve(listener, self.cfg, stop).await
    }
}
