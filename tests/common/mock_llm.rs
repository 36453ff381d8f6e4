//! A mock OpenAI-compatible server on 127.0.0.1 speaking Cerebras's wire format as of 2026-10
//! (issue 51): SSE chunks whose last one carries `finish_reason`, `usage` (with
//! `completion_tokens_details.reasoning_tokens`) and `time_info`, optional `data: [DONE]`,
//! `delta.reasoning` pieces, `<think>` in the content, `tool_calls` split across chunks, JSON
//! bodies for non-streamed replies and json_schema answers, mid-stream `{"error": ...,
//! "status_code": N}` chunks, flat error bodies (402, 404 for a model it does not serve:
//! [`MockLlm::serving`]), every `x-ratelimit-*` bucket, stalls. Plain threads and HTTP/1.1 with
//! `connection: close`.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The model the chunks name (brainloop's default).
pub const MODEL: &str = "gpt-oss-120b";
/// What Cerebras's shared inference lists in 2026-10.
pub const TODAY: &[&str] = &["gpt-oss-120b", "qwen-3.8-27b"];

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// The request's messages (empty if none).
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
    /// How many assistant turns the conversation already holds (an agent session's step).
    pub fn turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }
    /// The concatenated message contents.
    pub fn prompt(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|x| x["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

/// What the server answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 `text/event-stream`: the raw SSE pieces, written one by one; then, if `stall`, the
    /// connection stays open without a byte.
    Stream {
        pieces: Vec<String>,
        stall: bool,
        headers: Vec<(String, String)>,
    },
    /// Any status with a body.
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// The connection is closed without an answer.
    Hangup,
}

pub fn chunk(content: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
               "choices": [{"index": 0, "delta": {"content": content}}]})
    )
}

pub fn last_chunk(prompt_tokens: u64, completion_tokens: u64) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
               "time_info": {"queue_time": 0.0001, "prompt_time": 0.001, "completion_time": 0.01, "total_time": 0.02, "created": 1}})
    )
}

/// A streamed tool call as OpenAI-compatible servers send it: the first piece with id, type
/// and name, the arguments split in pieces of ~9 characters, then the last chunk with
/// `finish_reason: "tool_calls"` and `usage`.
pub fn tool_call_pieces(
    id: &str,
    name: &str,
    arguments: &Value,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Vec<String> {
    let frame = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                   "choices": [{"index": 0, "delta": delta}]})
        )
    };
    let mut pieces = vec![frame(json!({"role": "assistant", "tool_calls": [
        {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
    ]}))];
    let args: Vec<char> = arguments.to_string().chars().collect();
    for c in args.chunks(9) {
        pieces.push(frame(json!({"tool_calls": [
            {"index": 0, "function": {"arguments": c.iter().collect::<String>()}}
        ]})));
    }
    pieces.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}})
    ));
    pieces.push("data: [DONE]\n\n".into());
    pieces
}

/// `reasoning` streamed as `delta.reasoning` pieces, then `content`, usage with 7 reasoning
/// tokens, `[DONE]`.
pub fn reasoning_pieces(reasoning: &str, content: &str) -> Vec<String> {
    let frame = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                   "choices": [{"index": 0, "delta": delta}]})
        )
    };
    let mut pieces = vec![frame(json!({"role": "assistant", "content": ""}))];
    let r: Vec<char> = reasoning.chars().collect();
    for c in r.chunks(8) {
        pieces.push(frame(json!({"reasoning": c.iter().collect::<String>()})));
    }
    let t: Vec<char> = content.chars().collect();
    for c in t.chunks(7) {
        pieces.push(chunk(&c.iter().collect::<String>()));
    }
    pieces.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22,
                         "completion_tokens_details": {"reasoning_tokens": 7}}})
    ));
    pieces.push("data: [DONE]\n\n".into());
    pieces
}

/// Rate-limit headers as Cerebras sends them: requests and tokens per minute, hour and day,
/// and the uncached-token bucket; `tokens_left` tokens left this minute, resetting in
/// `reset_s` seconds.
pub fn rate_headers(tokens_left: u64, reset_s: &str) -> Vec<(String, String)> {
    let mut h = Vec::new();
    for (bucket, limit, remaining, reset) in [
        (
            "requests-minute",
            "30".to_string(),
            "29".to_string(),
            "59.5",
        ),
        ("requests-hour", "900".into(), "899".into(), "3599.5"),
        ("requests-day", "14400".into(), "14399".into(), "86399.5"),
        (
            "tokens-minute",
            "60000".into(),
            tokens_left.to_string(),
            reset_s,
        ),
        ("tokens-hour", "1000000".into(), "999000".into(), "3599.5"),
        ("tokens-day", "1000000".into(), "990000".into(), "86399.5"),
        (
            "uncached-tokens-minute",
            "60000".into(),
            "59000".into(),
            "59.5",
        ),
    ] {
        h.push((format!("x-ratelimit-limit-{bucket}"), limit));
        h.push((format!("x-ratelimit-remaining-{bucket}"), remaining));
        h.push((format!("x-ratelimit-reset-{bucket}"), reset.to_string()));
    }
    h
}

impl Reply {
    /// Reasoning in `delta.reasoning`, then the answer (`reasoning_format: parsed`).
    pub fn reasoning(reasoning: &str, content: &str) -> Reply {
        Reply::Stream {
            pieces: reasoning_pieces(reasoning, content),
            stall: false,
            headers: vec![],
        }
    }

    /// A structured (json_schema) answer: the object's JSON text, streamed.
    pub fn json(v: &Value) -> Reply {
        Reply::text(&v.to_string())
    }

    /// A non-streamed reply (`choices[0].message`), for a server that ignores `stream`.
    pub fn whole(content: &str, reasoning: Option<&str>, tool_calls: Option<Value>) -> Reply {
        let mut message = json!({"role": "assistant", "content": content});
        if let Some(r) = reasoning {
            message["reasoning"] = json!(r);
        }
        if let Some(t) = &tool_calls {
            message["tool_calls"] = t.clone();
        }
        let finish = if tool_calls.is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        Reply::Status {
            status: 200,
            headers: vec![],
            body: json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
                .to_string(),
        }
    }

    /// The same reply with these headers added.
    pub fn with_headers(self, extra: Vec<(String, String)>) -> Reply {
        match self {
            Reply::Stream {
                pieces,
                stall,
                mut headers,
            } => {
                headers.extend(extra);
                Reply::Stream {
                    pieces,
                    stall,
                    headers,
                }
            }
            Reply::Status {
                status,
                mut headers,
                body,
            } => {
                headers.extend(extra);
                Reply::Status {
                    status,
                    headers,
                    body,
                }
            }
            Reply::Hangup => Reply::Hangup,
        }
    }

    /// Cerebras's 404 for a model it does not serve.
    pub fn model_not_found(model: &str) -> Reply {
        Reply::Status {
            status: 404,
            headers: vec![],
            body: json!({"message": format!("Model {model} does not exist or you do not have access to it."),
                         "type": "not_found_error", "param": "model", "code": "model_not_found"})
            .to_string(),
        }
    }

    /// 402: the organisation has no credit left.
    pub fn payment_required() -> Reply {
        Reply::Status {
            status: 402,
            headers: vec![],
            body:
                json!({"message": "Payment required: your organization has exhausted its credits.",
                         "type": "payment_required_error", "param": "", "code": "payment_required"})
                .to_string(),
        }
    }

    /// One streamed tool call (usage 10 prompt, 5 completion).
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Reply {
        Reply::tool_call_with_usage(id, name, arguments, 10, 5)
    }

    /// One streamed tool call with the given usage.
    pub fn tool_call_with_usage(
        id: &str,
        name: &str,
        arguments: Value,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Reply {
        Reply::Stream {
            pieces: tool_call_pieces(id, name, &arguments, prompt_tokens, completion_tokens),
            stall: false,
            headers: vec![],
        }
    }

    /// `content` streamed in pieces of ~7 characters, usage (10 prompt, 5 completion), `[DONE]`.
    pub fn text(content: &str) -> Reply {
        Reply::text_with(content, true)
    }

    /// The same, ending without `data: [DONE]` (Cerebras may do that).
    pub fn text_no_done(content: &str) -> Reply {
        Reply::text_with(content, false)
    }

    fn text_with(content: &str, done: bool) -> Reply {
        let chars: Vec<char> = content.chars().collect();
        let mut pieces: Vec<String> = chars
            .chunks(7)
            .map(|c| chunk(&c.iter().collect::<String>()))
            .collect();
        pieces.push(last_chunk(10, 5));
        if done {
            pieces.push("data: [DONE]\n\n".into());
        }
        Reply::Stream {
            pieces,
            stall: false,
            headers: vec![],
        }
    }

    /// Some content, then a mid-stream error chunk with `status_code`.
    pub fn mid_stream_error(status: u16) -> Reply {
        Reply::Stream {
            pieces: vec![
                chunk("partial "),
                format!(
                    "data: {}\n\n",
                    json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}, "status_code": status})
                ),
            ],
            stall: false,
            headers: vec![],
        }
    }

    /// One chunk, then silence.
    pub fn stall() -> Reply {
        Reply::Stream {
            pieces: vec![chunk("never ")],
            stall: true,
            headers: vec![],
        }
    }

    /// A flat Cerebras error body.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Status {
            status,
            headers: vec![],
            body: json!({"message": message, "type": "invalid_request_error", "param": "", "code": "wrong"}).to_string(),
        }
    }

    /// 429 with `retry-after-ms` and the rate-limit headers.
    pub fn rate_limited(retry_after_ms: u64) -> Reply {
        Reply::Status {
            status: 429,
            headers: vec![
                ("retry-after-ms".into(), retry_after_ms.to_string()),
                ("x-ratelimit-limit-tokens-minute".into(), "60000".into()),
                ("x-ratelimit-remaining-tokens-minute".into(), "0".into()),
                ("x-ratelimit-reset-tokens-minute".into(), "0.05".into()),
                ("x-ratelimit-limit-requests-day".into(), "14400".into()),
                ("x-ratelimit-remaining-requests-day".into(), "14000".into()),
                ("x-ratelimit-reset-requests-day".into(), "3600.5".into()),
            ],
            body: json!({"message": "Requests per minute limit exceeded - too many requests sent.", "type": "too_many_requests_error", "param": "quota", "code": "request_quota_exceeded"}).to_string(),
        }
    }

    pub fn models(ids: &[&str]) -> Reply {
        let data: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "Cerebras"}))
            .collect();
        Reply::Status {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: json!({"object": "list", "data": data}).to_string(),
        }
    }
}

type Responder = dyn Fn(&Seen) -> Reply + Send + Sync;

pub struct MockLlm {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The models a mock serves: `GET /models` lists them, a chat for another model gets 404.
type Served = Option<Vec<String>>;

impl MockLlm {
    /// Starts a server answering chat requests with `respond`; `GET /v1/models` lists
    /// today's models ([`TODAY`]) unless `respond` handles it (it sees every request).
    pub fn start(respond: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> MockLlm {
        MockLlm::start_with(None, respond)
    }

    /// A server that serves exactly `models`: `GET /v1/models` lists them, a chat naming any
    /// other model is answered 404 (`model_not_found`) as Cerebras does, before `respond`.
    pub fn serving(
        models: &[&str],
        respond: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> MockLlm {
        MockLlm::start_with(
            Some(models.iter().map(|m| m.to_string()).collect()),
            respond,
        )
    }

    fn start_with(
        served: Served,
        respond: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> MockLlm {
        let served = Arc::new(served);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the mock");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<Responder> = Arc::new(respond);
        let s = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, respond, served) =
                    (Arc::clone(&s), Arc::clone(&respond), Arc::clone(&served));
                std::thread::spawn(move || serve(conn, &s, &*respond, &served));
            }
        });
        MockLlm { addr, seen }
    }

    /// Answers chat requests with `replies` in order, then with the last one forever.
    pub fn script(replies: Vec<Reply>) -> MockLlm {
        let q = Mutex::new((replies, 0usize));
        MockLlm::start(move |req| {
            if req.method == "GET" {
                return Reply::models(TODAY);
            }
            let mut g = q.lock().unwrap();
            let i = g.1.min(g.0.len() - 1);
            g.1 += 1;
            g.0[i].clone()
        })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The chat-completion requests received.
    pub fn chats(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.ends_with("/chat/completions"))
            .collect()
    }
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<Seen>>, respond: &Responder, served: &Served) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    let _ = reader.read_exact(&mut body);
    let req = Seen {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    seen.lock().unwrap().push(req.clone());
    let model = req.body["model"].as_str().unwrap_or_default().to_string();
    let reply = match served {
        Some(list) if req.method == "GET" && req.path.ends_with("/models") => {
            Reply::models(&list.iter().map(String::as_str).collect::<Vec<_>>())
        }
        Some(list) if req.method == "POST" && !list.contains(&model) => {
            Reply::model_not_found(&model)
        }
        _ if req.method == "GET" && req.path.ends_with("/models") => match respond(&req) {
            r @ Reply::Status { .. } => r,
            _ => Reply::models(TODAY),
        },
        _ => respond(&req),
    };
    let mut w = conn;
    match reply {
        Reply::Hangup => {}
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            if !headers.iter().any(|(k, _)| k == "content-type") {
                head.push_str("content-type: application/json\r\n");
            }
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = w.write_all(head.as_bytes());
            let _ = w.write_all(body.as_bytes());
        }
        Reply::Stream {
            pieces,
            stall,
            headers,
        } => {
            let mut head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n".to_string();
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            if w.write_all(head.as_bytes()).is_err() {
                return;
            }
            for p in pieces {
                if w.write_all(p.as_bytes()).and_then(|_| w.flush()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            if stall {
                // Silence until the client gives up (it closes the socket) or a minute passes.
                for _ in 0..600 {
                    std::thread::sleep(Duration::from_millis(100));
                    let mut probe = [0u8; 1];
                    let _ = w.set_read_timeout(Some(Duration::from_millis(1)));
                    if let Ok(0) = w.read(&mut probe) {
                        return;
                    }
                }
            }
        }
    }
    let _ = w.flush();
}
