//! The numbers of the Tokens panel, computed from OpenCode's own API responses (`GET
//! /session/{id}`, `GET /session/{id}/message`, `GET /config/providers`, `GET
//! /experimental/tool`). Pure: no I/O, so every number is unit-tested.
//!
//! OpenCode reports per assistant message how many prompt tokens the provider counted (`input`
//! plus cache `read`/`write`), but not what they were made of. The composition is therefore an
//! estimate: messages from the size of their parts, tools from the size of the tool definitions
//! the model is offered, and the system prompt as the rest. All estimates use 4 characters per
//! token and are marked as estimates in the panel.

use serde::Serialize;
use serde_json::Value;

const CHARS_PER_TOKEN: u64 = 4;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Context {
    /// Prompt tokens of the last assistant step: input + cache read + cache write.
    pub used: u64,
    /// The model's context window (0 = unknown).
    pub limit: u64,
    pub system: u64,
    pub tools: u64,
    pub messages: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Speed {
    /// Output tokens per second of the last completed assistant message.
    pub last: Option<f64>,
    /// Total output tokens over total generation time, for the session's messages.
    pub average: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    pub session: String,
    pub title: String,
    /// `provider/model` of the last assistant message.
    pub model: String,
    pub context: Context,
    /// Spend in the provider's currency unit (OpenCode uses USD).
    pub cost: f64,
    pub tokens: Totals,
    pub speed: Speed,
    pub assistant_messages: u64,
    /// Whether a message is being generated (its `time.completed` is missing).
    pub busy: bool,
}

fn u(v: &Value) -> u64 {
    v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)).unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// Characters a part contributes to later prompts: text, reasoning, tool input and output.
fn part_chars(p: &Value) -> u64 {
    match p["type"].as_str().unwrap_or("") {
        "text" | "reasoning" => p["text"].as_str().map_or(0, |s| s.chars().count() as u64),
        "tool" => {
            let st = &p["state"];
            let input = if st["input"].is_null() { 0 } else { st["input"].to_string().len() as u64 };
            let output = st["output"].as_str().map_or(0, |s| s.chars().count() as u64);
            input + output
        }
        "file" => p["url"].as_str().map_or(0, |s| s.len() as u64),
        _ => 0,
    }
}

/// The context window of `provider/model` in a `GET /config/providers` answer.
pub fn context_limit(providers: &Value, provider: &str, model: &str) -> u64 {
    let list = providers["providers"].as_array().cloned().unwrap_or_default();
    list.iter().find(|p| p["id"] == provider).map(|p| u(&p["models"][model]["limit"]["context"])).unwrap_or(0)
}

/// Estimated tokens of a `GET /experimental/tool` answer (the definitions sent with every call).
pub fn tools_tokens(tools: &Value) -> u64 {
    match tools {
        Value::Array(a) if !a.is_empty() => tools.to_string().len() as u64 / CHARS_PER_TOKEN,
        _ => 0,
    }
}

/// The generation time of an assistant message in seconds: from its first content part's start
/// (not from its creation, which includes waiting for the provider) to its completion.
fn generation_seconds(m: &Value) -> Option<f64> {
    let done = m["info"]["time"]["completed"].as_f64()?;
    let start = m["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["time"]["start"].as_f64().or_else(|| p["state"]["time"]["start"].as_f64()))
        .reduce(f64::min)
        .or_else(|| m["info"]["time"]["created"].as_f64())?;
    let s = (done - start) / 1000.0;
    (s > 0.0).then_some(s)
}

/// Build the panel's numbers. `tools` is the estimated size of the tool definitions in tokens.
pub fn summarize(session: &Value, messages: &Value, providers: &Value, tools: u64) -> Summary {
    let msgs: Vec<&Value> = messages.as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let mut s = Summary {
        session: session["id"].as_str().unwrap_or_default().to_string(),
        title: session["title"].as_str().unwrap_or_default().to_string(),
        ..Summary::default()
    };
    let mut cost = 0.0;
    let (mut out_sum, mut secs_sum) = (0u64, 0.0f64);
    let mut last_assistant: Option<usize> = None;
    for (i, m) in msgs.iter().enumerate() {
        let info = &m["info"];
        if info["role"] != "assistant" {
            continue;
        }
        s.assistant_messages += 1;
        let t = &info["tokens"];
        s.tokens.input += u(&t["input"]);
        s.tokens.output += u(&t["output"]);
        s.tokens.reasoning += u(&t["reasoning"]);
        s.tokens.cache_read += u(&t["cache"]["read"]);
        s.tokens.cache_write += u(&t["cache"]["write"]);
        cost += f(&info["cost"]);
        if info["time"]["completed"].is_null() {
            s.busy = true;
        }
        let out = u(&t["output"]) + u(&t["reasoning"]);
        if out > 0
            && let Some(secs) = generation_seconds(m)
        {
            out_sum += out;
            secs_sum += secs;
            s.speed.last = Some(out as f64 / secs);
        }
        if u(&t["input"]) + u(&t["cache"]["read"]) + u(&t["cache"]["write"]) > 0 {
            last_assistant = Some(i);
        }
    }
    if secs_sum > 0.0 {
        s.speed.average = Some(out_sum as f64 / secs_sum);
    }
    // Prefer OpenCode's own session total when present (it also counts deleted messages).
    s.cost = session["cost"].as_f64().filter(|c| *c > 0.0).unwrap_or(cost);
    if let Some(i) = last_assistant {
        let info = &msgs[i]["info"];
        let t = &info["tokens"];
        let provider = info["providerID"].as_str().unwrap_or_default();
        let model = info["modelID"].as_str().unwrap_or_default();
        s.model = format!("{provider}/{model}");
        let c = &mut s.context;
        c.cache_read = u(&t["cache"]["read"]);
        c.cache_write = u(&t["cache"]["write"]);
        c.used = u(&t["input"]) + c.cache_read + c.cache_write;
        c.limit = context_limit(providers, provider, model);
        // What the last prompt contained: every message before it, and its own earlier steps
        // (tool results of a multi-step turn are sent back in the same message's later steps).
        let chars: u64 =
            msgs[..=i].iter().flat_map(|m| m["parts"].as_array().into_iter().flatten()).map(part_chars).sum();
        c.messages = (chars / CHARS_PER_TOKEN).min(c.used);
        c.tools = tools.min(c.used - c.messages);
        c.system = c.used - c.messages - c.tools;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(
        input: u64,
        output: u64,
        read: u64,
        write: u64,
        cost: f64,
        start: f64,
        done: Option<f64>,
    ) -> Value {
        json!({
            "info": {"role": "assistant", "providerID": "fake", "modelID": "m1", "cost": cost,
                     "tokens": {"input": input, "output": output, "reasoning": 0, "cache": {"read": read, "write": write}},
                     "time": {"created": start - 500.0, "completed": done}},
            "parts": [{"type": "step-start"}, {"type": "text", "text": "x".repeat(40), "time": {"start": start, "end": done}}]
        })
    }

    #[test]
    fn totals_context_and_speed() {
        let user = json!({"info": {"role": "user"}, "parts": [{"type": "text", "text": "y".repeat(400)}]});
        let msgs = json!([
            user,
            assistant(800, 50, 200, 0, 0.01, 1000.0, Some(3000.0)),
            {"info": {"role": "user"}, "parts": [{"type": "text", "text": "z".repeat(40)}]},
            assistant(900, 100, 1000, 100, 0.02, 10_000.0, Some(11_000.0)),
        ]);
        let providers = json!({"providers": [{"id": "fake", "models": {"m1": {"limit": {"context": 128000, "output": 4096}}}}]});
        let s = summarize(&json!({"id": "ses_1", "title": "t", "cost": 0}), &msgs, &providers, 500);
        assert_eq!(
            s.tokens,
            Totals { input: 1700, output: 150, reasoning: 0, cache_read: 1200, cache_write: 100 }
        );
        assert!((s.cost - 0.03).abs() < 1e-9);
        assert_eq!(s.model, "fake/m1");
        assert_eq!(s.context.used, 2000);
        assert_eq!(s.context.limit, 128000);
        assert_eq!(s.context.cache_read, 1000);
        // 400 + 40 + 40 + 40 characters = 130 tokens of messages.
        assert_eq!(s.context.messages, 130);
        assert_eq!(s.context.tools, 500);
        assert_eq!(s.context.system, 2000 - 130 - 500);
        // last: 100 tokens in 1 s; average: 150 tokens in 3 s.
        assert_eq!(s.speed.last, Some(100.0));
        assert_eq!(s.speed.average, Some(50.0));
        assert!(!s.busy);
        assert_eq!(s.assistant_messages, 2);
    }

    #[test]
    fn running_message_and_session_cost() {
        let msgs = json!([assistant(10, 0, 0, 0, 0.0, 1.0, None)]);
        let s = summarize(&json!({"id": "ses_2", "cost": 1.5}), &msgs, &json!({}), 10_000);
        assert!(s.busy);
        assert_eq!(s.cost, 1.5);
        assert_eq!(s.context.limit, 0);
        assert_eq!(s.context.used, 10);
        assert_eq!(
            s.context.messages + s.context.tools + s.context.system,
            10,
            "estimates never exceed the total"
        );
        assert_eq!(s.speed.last, None);
    }

    #[test]
    fn empty_session() {
        let s = summarize(&json!({"id": "ses_3"}), &json!([]), &json!({}), 0);
        assert_eq!(s.context, Context::default());
        assert_eq!(s.model, "");
    }
}
