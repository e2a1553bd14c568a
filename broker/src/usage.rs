//! The token usage a provider reports in a reply, read from the bytes on their way to OpenCode.
//! Pure and incremental: the server feeds every chunk of the body, so the reply streams through
//! unchanged and the count is known when it ends.
//!
//! Three shapes cover the supported providers:
//! - OpenAI chat completions (and every OpenAI-compatible API, OpenRouter included): a `usage`
//!   object with `prompt_tokens` (cached ones included, listed again in
//!   `prompt_tokens_details.cached_tokens`) and `completion_tokens`; streamed, in the last chunk;
//! - OpenAI responses: `response.usage` of the `response.completed` event (or `usage` of the
//!   whole reply) with `input_tokens` (cached included) and `output_tokens`;
//! - Anthropic messages: `message.usage` of `message_start` and `usage` of `message_delta`, with
//!   `input_tokens` (cache excluded), `cache_read_input_tokens`, `cache_creation_input_tokens`
//!   and a running `output_tokens`.
//!
//! Every field is merged by its largest value, which is right for all three (a running count
//! only grows, and a field is reported by at most one kind of event).

use serde_json::Value;

/// Tokens of one reply, split the way prices are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Prompt tokens read neither from nor into the cache.
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

impl Usage {
    fn merge(&mut self, o: Usage) {
        self.input = self.input.max(o.input);
        self.output = self.output.max(o.output);
        self.cache_read = self.cache_read.max(o.cache_read);
        self.cache_write = self.cache_write.max(o.cache_write);
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// One usage object in any of the three shapes.
fn of_usage(u: &Value) -> Option<Usage> {
    if !u.is_object() {
        return None;
    }
    if u.get("prompt_tokens").is_some() || u.get("completion_tokens").is_some() {
        let cached = n(&u["prompt_tokens_details"]["cached_tokens"]);
        return Some(Usage {
            input: n(&u["prompt_tokens"]).saturating_sub(cached),
            output: n(&u["completion_tokens"]),
            cache_read: cached,
            cache_write: 0,
        });
    }
    if u.get("input_tokens").is_some() || u.get("output_tokens").is_some() {
        // Responses: cached tokens are part of `input_tokens`; Anthropic lists them apart.
        let cached_in = n(&u["input_tokens_details"]["cached_tokens"]);
        return Some(Usage {
            input: n(&u["input_tokens"]).saturating_sub(cached_in),
            output: n(&u["output_tokens"]),
            cache_read: cached_in + n(&u["cache_read_input_tokens"]),
            cache_write: n(&u["cache_creation_input_tokens"]),
        });
    }
    None
}

/// The usage in one JSON document of a reply (a streamed event or the whole body).
pub fn of_document(v: &Value) -> Option<Usage> {
    [&v["usage"], &v["message"]["usage"], &v["response"]["usage"]].into_iter().find_map(of_usage)
}

/// Reads a reply as it passes: server-sent events line by line, or one JSON body.
#[derive(Debug, Default)]
pub struct Meter {
    /// The current unfinished line of an event stream, or the whole JSON body so far.
    pending: Vec<u8>,
    stream: Option<bool>,
    usage: Option<Usage>,
    /// Whether the reply's end was seen (`[DONE]`, `message_stop`, a final `response.*`
    /// event, or a whole JSON body): usage read from a reply cut short is not its cost.
    complete: bool,
}

/// A JSON body larger than this is not read for usage (a model reply is far smaller).
const MAX_BODY: usize = 16 << 20;

impl Meter {
    /// `event_stream`: the reply's content type is `text/event-stream`.
    pub fn new(event_stream: bool) -> Meter {
        Meter { stream: Some(event_stream), ..Meter::default() }
    }

    fn take(&mut self, v: &Value) {
        if let Some(u) = of_document(v) {
            self.usage.get_or_insert_with(Usage::default).merge(u);
        }
        let end = ["message_stop", "response.completed", "response.incomplete", "response.failed"];
        if v["type"].as_str().is_some_and(|t| end.contains(&t)) {
            self.complete = true;
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.stream != Some(true) {
            if self.pending.len() + chunk.len() <= MAX_BODY {
                self.pending.extend_from_slice(chunk);
            }
            return;
        }
        for &b in chunk {
            if b == b'\n' {
                let line = std::mem::take(&mut self.pending);
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                if let Some(data) = line.strip_prefix(b"data:") {
                    let data = data.trim_ascii();
                    if data == b"[DONE]" {
                        self.complete = true;
                    } else if let Ok(v) = serde_json::from_slice::<Value>(data) {
                        self.take(&v);
                    }
                }
            } else if self.pending.len() < MAX_BODY {
                self.pending.push(b);
            }
        }
    }

    /// Whether the reply's end has been seen so far.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// The usage the reply reported, if it reported any, and whether its end was seen.
    pub fn finish(mut self) -> (Option<Usage>, bool) {
        if self.stream != Some(true) {
            let body = std::mem::take(&mut self.pending);
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                self.take(&v);
                self.complete = true;
            }
        } else if !self.pending.is_empty() {
            self.feed(b"\n");
        }
        (self.usage, self.complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(text: &str, split: usize) -> Option<Usage> {
        stream_end(text, split).0
    }

    fn stream_end(text: &str, split: usize) -> (Option<Usage>, bool) {
        let mut m = Meter::new(true);
        for c in text.as_bytes().chunks(split) {
            m.feed(c);
        }
        m.finish()
    }

    #[test]
    fn openai_chat_stream_in_any_chunking() {
        let text = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1002,\"completion_tokens\":50,\
                    \"prompt_tokens_details\":{\"cached_tokens\":200}}}\r\n\r\ndata: [DONE]\n\n";
        let want = Usage { input: 802, output: 50, cache_read: 200, cache_write: 0 };
        for split in [1, 3, 7, 64, 4096] {
            assert_eq!(stream_end(text, split), (Some(want), true), "chunks of {split}");
        }
        let cut = &text[..text.find("data: [DONE]").unwrap()];
        assert_eq!(stream_end(cut, 5), (Some(want), false), "no [DONE]: cut short");
    }

    #[test]
    fn anthropic_stream() {
        let text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":\
                    {\"input_tokens\":10,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":4000,\
                    \"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n\
                    event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":120}}\n\n";
        assert_eq!(
            stream(text, 5),
            Some(Usage { input: 10, output: 120, cache_read: 4000, cache_write: 300 })
        );
    }

    #[test]
    fn openai_responses_stream_and_json_bodies() {
        let text = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":\
                    {\"input_tokens\":900,\"input_tokens_details\":{\"cached_tokens\":100},\"output_tokens\":30}}}\n\n";
        assert_eq!(stream(text, 11), Some(Usage { input: 800, output: 30, cache_read: 100, cache_write: 0 }));
        let mut m = Meter::new(false);
        m.feed(b"{\"id\":\"x\",\"usage\":{\"prompt_tokens\":5,");
        m.feed(b"\"completion_tokens\":2}}");
        assert_eq!(m.finish(), (Some(Usage { input: 5, output: 2, cache_read: 0, cache_write: 0 }), true));
    }

    #[test]
    fn no_usage_is_none() {
        assert_eq!(stream("data: {\"choices\":[]}\n\ndata: [DONE]\n\n", 4), None);
        let mut m = Meter::new(false);
        m.feed(b"not json");
        assert_eq!(m.finish(), (None, false));
    }
}
