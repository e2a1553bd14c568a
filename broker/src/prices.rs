//! What a reply costs: OpenCode's per-model prices (USD per million tokens, the `cost` of a model
//! in its config and in its models.dev list) applied to the usage the provider reported.
//!
//! *Why the highest price wins*: some of the places prices come from are the agent's to write
//! (the project's `opencode.jsonc`, the model list OpenCode caches in the state directory). If
//! a source could lower a price, the agent could switch the spend cap off by writing a price of
//! zero. So every source can only raise a price, and the broker remembers the highest price it
//! has seen for each model in a file the sandbox cannot see: a price, once seen, stays at least
//! as high until the user deletes that file. A model the user's own files never priced could
//! still get its first price from the agent: while a spend limit is set, only a price a file
//! of the user's gave counts ([`Prices::by_user`]), and a zero price counts as none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::usage::Usage;

/// USD per million tokens, as OpenCode writes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// A `cost` object as written, fields optional.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    input: f64,
    #[serde(default)]
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

impl Price {
    /// A missing cache price counts as the input price: the cap would rather count a cache
    /// read too high than a cache write as free.
    fn of(v: &Value) -> Option<Price> {
        let w: Written = serde_json::from_value(v.clone()).ok()?;
        let p = Price {
            input: w.input,
            output: w.output,
            cache_read: w.cache_read.unwrap_or(w.input),
            cache_write: w.cache_write.unwrap_or(w.input),
        };
        let ok = |f: f64| f.is_finite() && f >= 0.0;
        (ok(p.input) && ok(p.output) && ok(p.cache_read) && ok(p.cache_write)).then_some(p)
    }

    fn raise(&mut self, o: Price) {
        self.input = self.input.max(o.input);
        self.output = self.output.max(o.output);
        self.cache_read = self.cache_read.max(o.cache_read);
        self.cache_write = self.cache_write.max(o.cache_write);
    }

    /// Nothing at all: a model that costs nothing cannot be capped.
    pub fn is_zero(&self) -> bool {
        self.input == 0.0 && self.output == 0.0 && self.cache_read == 0.0 && self.cache_write == 0.0
    }

    /// The cost of `u` in USD.
    pub fn cost(&self, u: &Usage) -> f64 {
        (u.input as f64 * self.input
            + u.output as f64 * self.output
            + u.cache_read as f64 * self.cache_read
            + u.cache_write as f64 * self.cache_write)
            / 1e6
    }
}

/// Who can write a source of prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The user's own files (the global OpenCode config, the user's own model cache).
    User,
    /// Files the agent can write (the project's config, the sandbox's model cache).
    Agent,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Known {
    price: Price,
    /// Whether a file of the user's gave (part of) this price.
    by_user: bool,
}

/// Prices by `provider/model`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices(BTreeMap<String, Known>);

impl Prices {
    fn add(&mut self, provider: &str, model: &str, p: Price, from: Source) {
        let k = self.0.entry(format!("{provider}/{model}")).or_default();
        k.price.raise(p);
        k.by_user |= from == Source::User;
    }

    /// `provider.<id>.models.<model>.cost` of an OpenCode config.
    pub fn add_config(&mut self, cfg: &Value, from: Source) {
        self.add_providers(&cfg["provider"], from);
    }

    /// OpenCode's models.dev list: `<id>.models.<model>.cost`.
    pub fn add_models_list(&mut self, list: &Value, from: Source) {
        self.add_providers(list, from);
    }

    fn add_providers(&mut self, providers: &Value, from: Source) {
        let Some(providers) = providers.as_object() else { return };
        for (id, p) in providers {
            let Some(models) = p["models"].as_object() else { continue };
            for (m, model) in models {
                if let Some(price) = Price::of(&model["cost"]) {
                    self.add(id, m, price, from);
                }
            }
        }
    }

    /// Every price of `other` (the prices remembered from earlier runs), each raised to at
    /// least the one here.
    pub fn add_all(&mut self, other: &Prices) {
        for (k, o) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            e.price.raise(o.price);
            e.by_user |= o.by_user;
        }
    }

    pub fn get(&self, provider: &str, model: &str) -> Option<Price> {
        self.0.get(&format!("{provider}/{model}")).map(|k| k.price)
    }

    /// The price, when a file of the user's gave it: what a spend limit is judged by (a price
    /// only the agent's files give could be the agent's choice).
    pub fn by_user(&self, provider: &str, model: &str) -> Option<Price> {
        self.0.get(&format!("{provider}/{model}")).filter(|k| k.by_user).map(|k| k.price)
    }

    /// Models whose price only files the agent can write gave (`provider/model`).
    #[cfg(test)]
    fn by_agent_only(&self) -> Vec<&str> {
        self.0.iter().filter(|(_, k)| !k.by_user).map(|(m, _)| m.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cost(v: Value) -> Value {
        json!({"provider": {"fake": {"models": {"m1": {"cost": v}}}}})
    }

    #[test]
    fn cost_is_per_million() {
        let p = Price { input: 1000.0, output: 2000.0, cache_read: 100.0, cache_write: 1000.0 };
        let u = Usage { input: 802, output: 50, cache_read: 200, cache_write: 0 };
        assert!((p.cost(&u) - 0.922).abs() < 1e-9, "{}", p.cost(&u));
    }

    #[test]
    fn a_source_can_only_raise_a_price() {
        let mut prices = Prices::default();
        let user = json!({"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 0});
        prices.add_config(&cost(user), Source::User);
        // The project's config (the agent's to edit) says zero: the price stays.
        prices.add_config(&cost(json!({"input": 0, "output": 0})), Source::Agent);
        prices.add_models_list(
            &json!({"fake": {"models": {"m1": {"cost": {"input": 1, "cache_read": 0.1}}}}}),
            Source::Agent,
        );
        assert_eq!(
            prices.get("fake", "m1"),
            Some(Price { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 1.0 })
        );
        assert!(prices.by_agent_only().is_empty());
        assert!(prices.by_user("fake", "m1").is_some());
        prices.add_config(
            &json!({"provider": {"fake": {"models": {"m2": {"cost": {"input": 1}}}}}}),
            Source::Agent,
        );
        assert_eq!(prices.by_agent_only(), vec!["fake/m2"]);
        assert_eq!(prices.by_user("fake", "m2"), None, "the agent's price does not count for a limit");
        assert_eq!(
            prices.get("fake", "m2").unwrap().cache_read,
            1.0,
            "a missing cache price is the input price"
        );
        // Remembered prices survive a later source that lowers them.
        let remembered: Prices = serde_json::from_str(&serde_json::to_string(&prices).unwrap()).unwrap();
        let mut next = Prices::default();
        next.add_config(&cost(json!({"input": 0.01})), Source::Agent);
        next.add_all(&remembered);
        assert_eq!(next.get("fake", "m1").unwrap().input, 3.0);
        assert_eq!(next.get("fake", "m3"), None);
        assert_eq!(next.by_agent_only(), vec!["fake/m2"], "who gave a price is remembered too");
    }

    #[test]
    fn bad_prices_are_ignored_and_zero_is_zero() {
        let mut prices = Prices::default();
        prices.add_config(
            &json!({"provider": {"x": {"models": {
                "neg": {"cost": {"input": -5}}, "text": {"cost": {"input": "free"}}, "none": {}, "free": {"cost": {}}}}}}),
            Source::User,
        );
        for m in ["neg", "text", "none"] {
            assert_eq!(prices.get("x", m), None, "{m}");
        }
        assert!(prices.get("x", "free").unwrap().is_zero());
    }
}
