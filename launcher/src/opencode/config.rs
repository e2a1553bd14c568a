//! `OPENCODE_CONFIG_CONTENT`: the highest config layer a project cannot override with its own
//! files. It carries the permission block, the skill paths and the plugin files.
//!
//! The permission block follows the measured recipe (research §1.5): no top-level `"*"` key. A
//! top-level `"*": "allow"` is appended after a project's own `permission.bash` entry by
//! OpenCode's order-preserving merge, and since rules are "last match wins" it would cancel the
//! `sudo`/`systemd-run` denies. The built-in default is already "allow everything", so the block
//! only turns the few `ask` defaults into `allow` and ends `bash` with the denies.
//!
//! These denies are a guard against the model's own `bash` tool, which matches rules as text
//! (`bash -c "sudo …"` slips through) and `/session/{id}/shell` and the terminal ignore them
//! entirely: the sandbox (`no_new_privs`, no system bus) is the boundary.

use std::path::PathBuf;

use serde_json::{Value, json};

/// Commands the agent's bash tool must refuse, each as bare word, with arguments, and by path.
pub const DENIED_COMMANDS: &[&str] = &["sudo", "systemd-run"];

pub fn permission() -> Value {
    let mut bash = serde_json::Map::new();
    bash.insert("*".into(), json!("allow"));
    for c in DENIED_COMMANDS {
        bash.insert((*c).into(), json!("deny"));
        bash.insert(format!("{c} *"), json!("deny"));
        bash.insert(format!("*/{c} *"), json!("deny"));
        bash.insert(format!("*/{c}"), json!("deny"));
    }
    json!({
        "read": "allow",
        "edit": "allow",
        "external_directory": "allow",
        "doom_loop": "allow",
        "webfetch": "allow",
        "bash": Value::Object(bash),
    })
}

/// The whole content: permissions, `skills.paths` (directories scanned for `SKILL.md`),
/// `plugin` entries as `file://` URLs, and the model-key broker's `provider` options (a
/// provider's `baseURL` and key here win over the project's own).
pub fn content(skill_paths: &[PathBuf], plugins: &[PathBuf], providers: Option<Value>) -> Value {
    let mut v = json!({ "permission": permission() });
    if let Some(p) = providers.filter(|p| p.as_object().is_some_and(|o| !o.is_empty())) {
        v["provider"] = p;
    }
    if !skill_paths.is_empty() {
        v["skills"] = json!({ "paths": skill_paths.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>() });
    }
    if !plugins.is_empty() {
        v["plugin"] = json!(plugins.iter().map(|p| format!("file://{}", p.display())).collect::<Vec<_>>());
    }
    v
}

/// The `provider` block of `OPENCODE_CONFIG_CONTENT` (the layer a project cannot override):
/// each provider's `baseURL` and `apiKey` point at the model-key broker (`broker`: where each
/// provider is and the placeholder OpenCode sends instead of a key).
pub fn providers(broker: &ocsb_broker::Endpoint) -> Value {
    let mut m = serde_json::Map::new();
    for id in &broker.providers {
        m.insert(
            id.clone(),
            json!({"options": {"baseURL": format!("http://{}/{id}", broker.addr), "apiKey": broker.token}}),
        );
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_top_level_star_and_denies_last() {
        let p = permission();
        assert!(p.get("*").is_none(), "a top-level * would let a project's bash rules cancel the denies");
        let bash = p["bash"].as_object().unwrap();
        let keys: Vec<&String> = bash.keys().collect();
        assert_eq!(keys[0], "*");
        assert!(bash.iter().skip(1).all(|(_, v)| v == "deny"));
        assert!(bash.contains_key("sudo *") && bash.contains_key("*/systemd-run *"));
    }

    #[test]
    fn content_has_skills_and_plugins() {
        let providers = json!({"fake": {"options": {"baseURL": "http://127.0.0.1:9/fake", "apiKey": "ph"}}});
        let c = content(&[PathBuf::from("/s/skills")], &[PathBuf::from("/p/x.js")], Some(providers));
        assert_eq!(c["skills"]["paths"][0], "/s/skills");
        assert_eq!(c["plugin"][0], "file:///p/x.js");
        assert_eq!(c["provider"]["fake"]["options"]["apiKey"], "ph");
        let c = content(&[], &[], Some(json!({})));
        assert!(c.get("skills").is_none() && c.get("plugin").is_none() && c.get("provider").is_none());
    }

    #[test]
    fn opencode_is_pointed_at_the_broker_for_each_provider() {
        let e = ocsb_broker::Endpoint {
            addr: "127.0.0.1:41000".parse().unwrap(),
            token: "ocsb-broker-x".into(),
            providers: vec!["anthropic".into(), "fake".into()],
        };
        assert_eq!(
            providers(&e),
            serde_json::json!({
                "anthropic": {"options": {"baseURL": "http://127.0.0.1:41000/anthropic", "apiKey": "ocsb-broker-x"}},
                "fake": {"options": {"baseURL": "http://127.0.0.1:41000/fake", "apiKey": "ocsb-broker-x"}},
            })
        );
    }
}
