//! What the broker forwards: the model calls OpenCode makes, and nothing else the real key could
//! do. Pure, unit-tested.
//!
//! *Why a list of calls*: the key opens the whole account at the provider (files, batches,
//! fine-tuning, admin endpoints), and the agent can send requests to the broker itself (it can
//! read OpenCode's placeholder). Forwarding only the model calls keeps the key's power in the
//! sandbox at "ask the model", which is what OpenCode needs and what the cap meters.

use serde_json::Value;

/// One forwardable call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Generates tokens: checked against the cap and metered.
    Generate,
    /// Costs nothing (model lists, token counting).
    Free,
}

/// The calls, by method and path below the provider's base URL.
const CALLS: &[(&str, &str, Call)] = &[
    ("POST", "chat/completions", Call::Generate),
    ("POST", "completions", Call::Generate),
    ("POST", "responses", Call::Generate),
    ("POST", "messages", Call::Generate),
    ("POST", "embeddings", Call::Generate),
    ("POST", "messages/count_tokens", Call::Free),
    ("GET", "models", Call::Free),
];

/// Split `/<provider>/<rest>` (the broker's own path) into the provider id and the rest.
pub fn split(path: &str) -> Option<(&str, &str)> {
    let (id, rest) = path.strip_prefix('/')?.split_once('/')?;
    Some((id, rest))
}

/// Whether `method rest` is a call the broker forwards. `rest` is the raw path below the base
/// URL: every segment must be plain (no `..`, no percent-escapes), so the path the provider sees
/// is the one judged here.
pub fn call(method: &str, rest: &str) -> Result<Call, String> {
    let plain = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg.chars().all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
    };
    if !rest.split('/').all(plain) {
        return Err(format!("`{rest}` is not a plain API path"));
    }
    if let Some((_, _, c)) = CALLS.iter().find(|(m, p, _)| *m == method && *p == rest) {
        return Ok(*c);
    }
    // `GET models/<id>`: one model's description.
    if method == "GET" && rest.strip_prefix("models/").is_some_and(|m| !m.contains('/')) {
        return Ok(Call::Free);
    }
    Err(format!("{method} {rest} is not a model call"))
}

/// A model call's body as the broker forwards it.
#[derive(Debug, Default, PartialEq)]
pub struct Body {
    /// `None`: forwarded as it came.
    pub rewritten: Option<Vec<u8>>,
    pub model: String,
    /// The most output tokens the call may produce (what it asked for, or a high default):
    /// what the broker reserves against the cap while the call runs.
    pub max_output: u64,
}

/// Output tokens reserved for a call that names no maximum.
const DEFAULT_MAX_OUTPUT: u64 = 32_000;

/// Tool types the client runs itself (OpenCode's tools, Anthropic's client tools). Any other
/// type is a server tool: it runs at the provider (web search and fetch, code execution, MCP,
/// file search), reaching addresses the egress rules never judge and costing fees that are not
/// in the token usage.
fn client_tool(t: &Value) -> bool {
    match t.get("type").and_then(Value::as_str) {
        None => true,
        Some(ty) => {
            matches!(ty, "function" | "custom")
                || ["bash_", "text_editor_", "computer_"].iter().any(|p| ty.starts_with(p))
        }
    }
}

/// Fields that make the provider do what the broker cannot meter or the rules cannot judge.
const REFUSED_FIELDS: &[(&str, &str)] = &[
    ("mcp_servers", "makes the provider connect to MCP servers, around the egress rules"),
    ("background", "runs the call in the background, where its usage never reaches the broker"),
    ("conversation", "reads conversations stored in the account"),
    ("prompt", "runs a prompt stored in the account"),
    ("models", "lets the provider fall back to other models, at their prices"),
    ("plugins", "turns on the provider's paid plugins"),
];

/// Check a model call's body and prepare it. A streamed chat completion without
/// `stream_options.include_usage` would end without a usage report (OpenAI reports it only when
/// asked), and an unmetered reply would let the agent spend around the cap: the broker asks
/// for it.
pub fn prepare(rest: &str, body: &[u8]) -> Result<Body, String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| "the body is not JSON".to_string())?;
    if !v.is_object() {
        return Err("the body is not a JSON object".into());
    }
    let model = v["model"].as_str().unwrap_or_default().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "._:/@+-".contains(c);
    if model.is_empty() || model.len() > 200 || !model.chars().all(plain) {
        return Err("`model` must name a model (letters, digits and ._:/@+-, at most 200)".into());
    }
    for (field, why) in REFUSED_FIELDS {
        let set = match &v[*field] {
            Value::Null => false,
            Value::Bool(b) => *b,
            _ => true,
        };
        if set {
            return Err(format!("`{field}` {why}"));
        }
    }
    if let Some(tier) = v["service_tier"].as_str().filter(|t| !matches!(*t, "auto" | "default")) {
        return Err(format!("`service_tier: {tier}` is priced apart from the model's prices"));
    }
    if let Some(t) = v["tools"].as_array().and_then(|ts| ts.iter().find(|t| !client_tool(t))) {
        return Err(format!(
            "the server tool `{}` runs at the provider, outside the sandbox's rules",
            t["type"]
        ));
    }
    let max_output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| v[*k].as_u64())
        .unwrap_or(DEFAULT_MAX_OUTPUT);
    let streamed_chat =
        matches!(rest, "chat/completions" | "completions") && v["stream"] == Value::Bool(true);
    let mut rewritten = None;
    if streamed_chat && v["stream_options"]["include_usage"] != Value::Bool(true) {
        if !v["stream_options"].is_object() {
            v["stream_options"] = Value::Object(serde_json::Map::new());
        }
        v["stream_options"]["include_usage"] = Value::Bool(true);
        rewritten = serde_json::to_vec(&v).ok();
    }
    Ok(Body { rewritten, model, max_output })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_calls_pass() {
        assert_eq!(split("/anthropic/messages"), Some(("anthropic", "messages")));
        assert_eq!(split("/anthropic"), None);
        assert_eq!(call("POST", "chat/completions"), Ok(Call::Generate));
        assert_eq!(call("POST", "messages"), Ok(Call::Generate));
        assert_eq!(call("POST", "messages/count_tokens"), Ok(Call::Free));
        assert_eq!(call("GET", "models"), Ok(Call::Free));
        assert_eq!(call("GET", "models/gpt-5.1"), Ok(Call::Free));
        for (m, p) in [
            ("POST", "files"),
            ("GET", "organization/api_keys"),
            ("DELETE", "models/ft:x"),
            ("GET", "chat/completions"),
            ("POST", "chat/../files"),
            ("POST", "chat/%2e%2e/files"),
            ("POST", "chat//completions"),
            ("GET", "models/a/b"),
        ] {
            assert!(call(m, p).is_err(), "{m} {p}");
        }
    }

    #[test]
    fn streamed_chat_asks_for_usage() {
        let b = prepare("chat/completions", br#"{"model":"m1","stream":true,"messages":[]}"#).unwrap();
        let v: Value = serde_json::from_slice(&b.rewritten.unwrap()).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!((b.model.as_str(), b.max_output), ("m1", DEFAULT_MAX_OUTPUT));
        let b = prepare(
            "chat/completions",
            br#"{"model":"m1","stream":true,"stream_options":{"include_usage":false},"max_completion_tokens":9}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&b.rewritten.unwrap()).unwrap()["stream_options"]["include_usage"],
            true
        );
        assert_eq!(b.max_output, 9);
        let b = prepare("messages", br#"{"model":"claude","stream":true,"max_tokens":100}"#).unwrap();
        assert!(b.rewritten.is_none() && b.max_output == 100, "Anthropic always reports usage");
    }

    #[test]
    fn calls_the_broker_cannot_meter_or_the_rules_cannot_judge_are_refused() {
        let ok = [
            r#"{"model":"claude-sonnet-4-5","tools":[{"name":"bash","input_schema":{}},{"type":"bash_20250124","name":"bash"}]}"#,
            r#"{"model":"gpt-5","tools":[{"type":"function","name":"x"}],"service_tier":"auto"}"#,
            r#"{"model":"anthropic/claude-sonnet-4.5","background":false}"#,
        ];
        for b in ok {
            assert!(prepare("responses", b.as_bytes()).is_ok(), "{b}");
        }
        for (b, why) in [
            ("not json", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"messages":[]}"#, "`model`"),
            ("{\"model\":\"m\\u001b]52;c;x\"}", "`model`"),
            (r#"{"model":"gpt-5","background":true}"#, "background"),
            (r#"{"model":"c","mcp_servers":[{"url":"https://evil/"}]}"#, "MCP"),
            (
                r#"{"model":"gpt-5","tools":[{"type":"mcp","server_url":"https://evil/"}]}"#,
                "server tool `\"mcp\"`",
            ),
            (r#"{"model":"c","tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}"#, "server tool"),
            (r#"{"model":"gpt-5","tools":[{"type":"web_search"}]}"#, "server tool"),
            (r#"{"model":"a/b","models":["x/y"]}"#, "fall back"),
            (r#"{"model":"a/b","plugins":[{"id":"web"}]}"#, "plugins"),
            (r#"{"model":"gpt-5","service_tier":"priority"}"#, "priced apart"),
            (r#"{"model":"gpt-5","conversation":"conv_1"}"#, "conversations"),
        ] {
            let e = prepare("responses", b.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{b}: {e}");
        }
    }
}
