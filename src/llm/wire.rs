//! The Cerebras (OpenAI-compatible) wire format, as checked against the real API (CRATES.md):
//! - request: `{model, messages, stream: true, temperature, max_completion_tokens}`;
//! - stream: SSE `data:` chunks `{choices: [{delta: {content}, finish_reason}], usage?,
//!   time_info?}`; the last chunk carries `finish_reason`, `usage` and `time_info`; the stream
//!   may end without `data: [DONE]`;
//! - a mid-stream error is a chunk `{"error": {...}, "status_code": N}`;
//! - HTTP error bodies are flat: `{"message", "type", "param", "code"}` (the OpenAI nesting
//!   `{"error": {...}}` is accepted too);
//! - tool calling (issue 10): `tools: [{type: "function", function: {name, description,
//!   parameters, strict}}]` and `tool_choice: "auto"` in the request; the stream sends
//!   `delta.tool_calls: [{index, id?, type?, function: {name?, arguments?}}]` pieces (accumulated
//!   by `tools::Accumulator`) and ends with `finish_reason: "tool_calls"`; the next request
//!   carries the assistant message with its `tool_calls` and one `{role: "tool", tool_call_id,
//!   content}` message per call;
//! - reasoning (issue 51): `reasoning_effort` and `reasoning_format` in the request (sent as
//!   `llm::models` says the model takes them); `delta.reasoning` in the stream (`message.reasoning`
//!   in a non-streamed reply), `usage.completion_tokens_details.reasoning_tokens`; `raw` puts
//!   `<think>…</think>` in the content instead (split off by `text::split_reasoning`);
//! - structured replies: `response_format: {type: "json_schema", json_schema: {name, strict:
//!   true, schema}}`; `frequency_penalty`, `presence_penalty`, `logit_bias`,
//!   `parallel_tool_calls` and `service_tier` are refused with 400 and never sent (the request
//!   type has no field for them);
//! - rate-limit headers: `x-ratelimit-{limit,remaining,reset}-{BUCKET}` for every bucket the
//!   server names (`requests-minute`, `tokens-day`, `uncached-tokens-minute`, …; reset in float
//!   seconds), `retry-after(-ms)`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// One message of a conversation (system, user, assistant — possibly with tool calls —, or a
/// tool result). Stored as is in agent sessions, hence `Deserialize`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    fn plain(role: &str, c: String) -> Message {
        Message {
            role: role.into(),
            content: c,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    pub fn system(c: impl Into<String>) -> Message {
        Message::plain("system", c.into())
    }
    pub fn user(c: impl Into<String>) -> Message {
        Message::plain("user", c.into())
    }
    /// What the model answered: text and/or tool calls.
    pub fn assistant(c: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls,
            ..Message::plain("assistant", c.into())
        }
    }
    /// The result of tool call `id`.
    pub fn tool(id: impl Into<String>, c: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(id.into()),
            ..Message::plain("tool", c.into())
        }
    }
}

/// A complete tool call (the model's request to run `function.name` with the JSON text
/// `function.arguments`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// One streamed piece of a tool call.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ToolCallDelta {
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct FunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub stream: bool,
    pub temperature: f32,
    pub max_completion_tokens: u64,
    /// Tool definitions (`{type: "function", function: {...}}`); absent without tool calling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// `"auto"` with tools (Cerebras accepts only `auto` / `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'static str>,
    /// `low` / `medium` / `high` / `none`, as the model takes it (`llm::models`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// `parsed` / `raw` / `hidden` / `none`, as the model takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_format: Option<String>,
    /// `{type: "json_schema", json_schema: {name, strict: true, schema}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// `completion_tokens_details.reasoning_tokens` (part of `completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
    /// Reasoning tokens the server reported (0 when it said nothing).
    pub fn reasoning_tokens(&self) -> u64 {
        self.completion_tokens_details
            .map_or(0, |d| d.reasoning_tokens)
    }
    /// The sum of two calls' usage (a structured reply retried once).
    pub fn plus(&self, o: &Usage) -> Usage {
        let r = self.reasoning_tokens() + o.reasoning_tokens();
        Usage {
            prompt_tokens: self.prompt_tokens + o.prompt_tokens,
            completion_tokens: self.completion_tokens + o.completion_tokens,
            completion_tokens_details: (r > 0).then_some(CompletionDetails {
                reasoning_tokens: r,
            }),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct Delta {
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning text (`reasoning_format: parsed`), kept apart from the answer.
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub delta: Option<Delta>,
    /// A non-streamed reply's whole message.
    #[serde(default)]
    pub message: Option<FullMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The message of a non-streamed reply (`choices[0].message`).
#[derive(Debug, Default, Deserialize)]
pub struct FullMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
}

/// Error details, flat or nested.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub code: Option<Value>,
}

/// One `data:` chunk of the stream.
#[derive(Debug, Default, Deserialize)]
pub struct Chunk {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub time_info: Option<Value>,
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(default)]
    pub status_code: Option<u16>,
}

/// Parses an HTTP error body: flat `{"message","type",...}` or `{"error": {...}}`; anything
/// else becomes the (truncated) text itself.
pub fn parse_error_body(body: &str) -> ErrorBody {
    let v: Option<Value> = serde_json::from_str(body).ok();
    let obj = match &v {
        Some(Value::Object(m)) => match m.get("error") {
            Some(e @ Value::Object(_)) => Some(e.clone()),
            Some(Value::String(s)) => Some(serde_json::json!({"message": s})),
            _ => Some(Value::Object(m.clone())),
        },
        _ => None,
    };
    let mut e: ErrorBody = obj
        .and_then(|o| serde_json::from_value(o).ok())
        .unwrap_or_default();
    if e.message.is_none() {
        let t = body.trim();
        if !t.is_empty() {
            e.message = Some(t.chars().take(500).collect());
        }
    }
    e
}

/// One rate-limit bucket the server reported (`x-ratelimit-*-{name}`), e.g. `tokens-minute`,
/// `requests-day`, `uncached-tokens-hour`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bucket {
    pub name: String,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// Time until the bucket refills.
    pub reset: Option<Duration>,
}

impl Bucket {
    /// A token bucket (charged input + `max_completion_tokens`) or a request bucket (1).
    pub fn counts_tokens(&self) -> bool {
        self.name.contains("tokens")
    }
}

/// What the server said about waiting, from the response headers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateHints {
    /// `retry-after-ms`, else `retry-after` (seconds).
    pub retry_after: Option<Duration>,
    /// Every `x-ratelimit-{limit,remaining,reset}-{bucket}` bucket, by name.
    pub buckets: Vec<Bucket>,
}

fn secs(v: &str) -> Option<Duration> {
    let f: f64 = v.trim().trim_end_matches('s').parse().ok()?;
    (0.0..1e9).contains(&f).then(|| Duration::from_secs_f64(f))
}

impl RateHints {
    pub fn from_headers(h: &reqwest::header::HeaderMap) -> RateHints {
        let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok());
        let retry_after = get("retry-after-ms")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|ms| Duration::from_millis(ms as u64))
            .or_else(|| get("retry-after").and_then(secs));
        let mut hints = RateHints {
            retry_after,
            buckets: Vec::new(),
        };
        for (k, v) in h {
            let Some(rest) = k.as_str().strip_prefix("x-ratelimit-") else {
                continue;
            };
            let Ok(v) = v.to_str() else { continue };
            hints.set(rest, v);
        }
        hints
    }

    /// Records one `x-ratelimit-` header (`rest` is the name after the prefix).
    pub fn set(&mut self, rest: &str, v: &str) {
        let int = |v: &str| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|f| *f >= 0.0)
                .map(|f| f as u64)
        };
        let (field, name) = match ["limit-", "remaining-", "reset-"]
            .iter()
            .find_map(|f| rest.strip_prefix(f).map(|n| (*f, n)))
        {
            Some((f, n)) if !n.is_empty() => (f, n),
            _ => return,
        };
        let pos = match self.buckets.iter().position(|b| b.name == name) {
            Some(p) => p,
            None => {
                self.buckets.push(Bucket {
                    name: name.to_string(),
                    ..Bucket::default()
                });
                self.buckets.len() - 1
            }
        };
        let b = &mut self.buckets[pos];
        match field {
            "limit-" => b.limit = int(v),
            "remaining-" => b.remaining = int(v),
            _ => b.reset = secs(v),
        }
    }

    pub fn bucket(&self, name: &str) -> Option<&Bucket> {
        self.buckets.iter().find(|b| b.name == name)
    }

    /// How long the server wants us to wait before the next attempt, if it said so: its
    /// `retry-after`, else the longest reset among the exhausted buckets.
    pub fn wait(&self) -> Option<Duration> {
        if let Some(d) = self.retry_after {
            return Some(d);
        }
        self.buckets
            .iter()
            .filter(|b| b.remaining == Some(0))
            .filter_map(|b| b.reset)
            .max()
    }

    /// The exhausted bucket the wait comes from (for messages).
    pub fn exhausted(&self) -> Option<&Bucket> {
        self.buckets
            .iter()
            .filter(|b| b.remaining == Some(0) && b.reset.is_some())
            .max_by_key(|b| b.reset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn error_bodies_flat_nested_or_text() {
        let e = parse_error_body(
            r#"{"message":"Rate limit exceeded","type":"too_many_requests_error","param":"quota","code":"token_quota_exceeded"}"#,
        );
        assert_eq!(e.message.as_deref(), Some("Rate limit exceeded"));
        assert_eq!(e.kind.as_deref(), Some("too_many_requests_error"));
        let e =
            parse_error_body(r#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#);
        assert_eq!(e.message.as_deref(), Some("bad model"));
        assert_eq!(
            parse_error_body("upstream down").message.as_deref(),
            Some("upstream down")
        );
    }

    #[test]
    fn every_bucket_parses_by_the_same_pattern_the_uncached_one_too() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("x-ratelimit-limit-requests-minute", "30"),
            ("x-ratelimit-remaining-requests-minute", "29"),
            ("x-ratelimit-reset-requests-minute", "30.5"),
            ("x-ratelimit-limit-tokens-hour", "1000000"),
            ("x-ratelimit-remaining-tokens-hour", "999"),
            ("x-ratelimit-reset-tokens-hour", "1200.25"),
            ("x-ratelimit-remaining-uncached-tokens-minute", "0"),
            ("x-ratelimit-reset-uncached-tokens-minute", "7.5"),
        ] {
            h.insert(k, HeaderValue::from_static(v));
        }
        let r = RateHints::from_headers(&h);
        let b = r.bucket("requests-minute").unwrap();
        assert_eq!(
            (b.limit, b.remaining, b.reset),
            (Some(30), Some(29), Some(Duration::from_millis(30_500)))
        );
        assert!(!b.counts_tokens());
        let t = r.bucket("tokens-hour").unwrap();
        assert_eq!(t.remaining, Some(999));
        assert!(t.counts_tokens());
        let u = r.bucket("uncached-tokens-minute").unwrap();
        assert!(u.counts_tokens());
        assert_eq!(r.wait(), Some(Duration::from_millis(7_500)));
        assert_eq!(r.exhausted().unwrap().name, "uncached-tokens-minute");
    }

    #[test]
    fn hints_prefer_retry_after_ms_then_reset_of_the_exhausted_quota() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(
            RateHints::from_headers(&h).wait(),
            Some(Duration::from_millis(150))
        );
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-remaining-tokens-minute",
            HeaderValue::from_static("0"),
        );
        h.insert(
            "x-ratelimit-reset-tokens-minute",
            HeaderValue::from_static("12.5"),
        );
        h.insert(
            "x-ratelimit-remaining-requests-day",
            HeaderValue::from_static("99"),
        );
        h.insert(
            "x-ratelimit-reset-requests-day",
            HeaderValue::from_static("30000.1"),
        );
        assert_eq!(
            RateHints::from_headers(&h).wait(),
            Some(Duration::from_millis(12_500))
        );
        assert_eq!(RateHints::from_headers(&HeaderMap::new()).wait(), None);
    }

    #[test]
    fn the_last_chunk_and_the_error_chunk_parse() {
        let c: Chunk = serde_json::from_str(r#"{"id":"x","choices":[{"delta":{},"finish_reason":"stop","index":0}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15},"time_info":{"queue_time":0.1}}"#).unwrap();
        assert_eq!(c.choices[0].finish_reason.as_deref(), Some("stop"));
        assert_eq!(c.usage.unwrap().total(), 15);
        let c: Chunk = serde_json::from_str(
            r#"{"error":{"message":"overloaded","type":"server_error"},"status_code":503}"#,
        )
        .unwrap();
        assert_eq!(c.status_code, Some(503));
        assert!(c.error.is_some());
    }
}
