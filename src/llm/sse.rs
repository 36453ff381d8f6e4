//! Reading one streamed chat completion: SSE events → accumulated text, `finish_reason`, `usage`
//! and `time_info`. Ends at `data: [DONE]` or at the end of the body (Cerebras may omit
//! `[DONE]`); a body that ends before any `finish_reason` was cut off (a transport error, worth
//! a retry). A mid-stream `{"error": ..., "status_code": N}` chunk becomes an API error with that
//! status. Every wait is bounded by the stall timeout and the call's deadline, and gives way to
//! cancellation. Reasoning — `delta.reasoning` pieces and `<think>` blocks in the content — is
//! collected apart from the answer ([`Streamed::reasoning`]); a server that answers with one JSON
//! body instead of a stream is read by [`from_json`] into the same shape.

use super::tools::Accumulator;
use super::wire::{parse_error_body, Chunk, ToolCall, Usage};
use super::LlmError;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A finished completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Streamed {
    /// The answer, reasoning removed.
    pub content: String,
    /// The reasoning text (`reasoning` field and `<think>` blocks), never part of `content`.
    pub reasoning: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub time_info: Option<Value>,
    pub model: Option<String>,
    /// Time from the start of the read to the first content delta.
    pub first_token: Option<Duration>,
    /// Complete tool calls (streamed `delta.tool_calls` pieces, accumulated).
    pub tool_calls: Vec<ToolCall>,
}

/// Hard cap of the accumulated text (bytes): a runaway stream cannot exhaust memory.
pub const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;

/// Reads the SSE body `body` until the completion is complete.
pub async fn read<S, B, E>(
    body: S,
    stall: Duration,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<Streamed, LlmError>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let started = Instant::now();
    let mut events = body.eventsource();
    let mut out = Streamed::default();
    let mut saw_chunk = false;
    let mut calls = Accumulator::default();
    loop {
        let wait = stall.min(deadline.saturating_duration_since(Instant::now()));
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            r = tokio::time::timeout(wait, events.next()) => r,
        };
        let item = match next {
            Err(_) if Instant::now() >= deadline => {
                return Err(LlmError::Timeout(0));
            }
            Err(_) => return Err(LlmError::Stalled(stall.as_millis() as u64)),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(LlmError::Transport(format!("stream broke: {e}"))),
            Ok(Some(Ok(ev))) => ev,
        };
        let data = item.data.trim();
        if data.is_empty() {
            continue;
        }
        if data == "[DONE]" {
            return finish(out, calls, saw_chunk, true);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            LlmError::Malformed(format!(
                "a chunk is not JSON ({e}): {}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        if let Some(err) = &chunk.error {
            let body = parse_error_body(&err.to_string());
            return Err(LlmError::Api {
                status: chunk.status_code.unwrap_or(500),
                kind: body.kind,
                message: body
                    .message
                    .unwrap_or_else(|| "error in the middle of the stream".into()),
            });
        }
        saw_chunk = true;
        if out.model.is_none() {
            out.model = chunk.model;
        }
        for choice in chunk.choices {
            let delta = choice.delta.unwrap_or_default();
            for piece in delta.tool_calls.iter().flatten() {
                if out.first_token.is_none() {
                    out.first_token = Some(started.elapsed());
                }
                calls.push(piece)?;
            }
            if let Some(text) = delta.content {
                if !text.is_empty() && out.first_token.is_none() {
                    out.first_token = Some(started.elapsed());
                }
                if out.content.len() + text.len() > MAX_CONTENT_BYTES {
                    return Err(LlmError::Malformed(format!(
                        "the completion exceeds {MAX_CONTENT_BYTES} bytes"
                    )));
                }
                out.content.push_str(&text);
            }
            if let Some(r) = delta.reasoning {
                if out.content.len() + out.reasoning.len() + r.len() > MAX_CONTENT_BYTES {
                    return Err(LlmError::Malformed(format!(
                        "the completion exceeds {MAX_CONTENT_BYTES} bytes"
                    )));
                }
                out.reasoning.push_str(&r);
            }
            if choice.finish_reason.is_some() {
                out.finish_reason = choice.finish_reason;
            }
        }
        if chunk.usage.is_some() {
            out.usage = chunk.usage;
        }
        if chunk.time_info.is_some() {
            out.time_info = chunk.time_info;
        }
    }
    finish(out, calls, saw_chunk, false)
}

fn finish(
    mut out: Streamed,
    calls: Accumulator,
    saw_chunk: bool,
    done: bool,
) -> Result<Streamed, LlmError> {
    if !saw_chunk {
        return Err(if done {
            LlmError::Malformed("the stream ended before any chunk".into())
        } else {
            LlmError::Transport("the response body was empty".into())
        });
    }
    if out.finish_reason.is_none() && !done {
        return Err(LlmError::Transport(
            "the stream ended before the model finished (no finish_reason)".into(),
        ));
    }
    if !calls.is_empty() {
        out.tool_calls = calls.finish()?;
    }
    Ok(split(out))
}

/// Moves `<think>` blocks of the content to the reasoning.
fn split(mut out: Streamed) -> Streamed {
    let (answer, think) = super::text::split_reasoning(&out.content);
    if !think.is_empty() {
        out.content = answer;
        if !out.reasoning.is_empty() {
            out.reasoning.push_str("\n\n");
        }
        out.reasoning.push_str(&think);
    }
    out
}

/// A non-streamed reply (`{choices: [{message: {content, reasoning?, tool_calls?},
/// finish_reason}], usage, model}`), read into the shape of a stream.
pub fn from_json(body: &str) -> Result<Streamed, LlmError> {
    if body.len() > MAX_CONTENT_BYTES {
        return Err(LlmError::Malformed(format!(
            "the completion exceeds {MAX_CONTENT_BYTES} bytes"
        )));
    }
    let chunk: Chunk = serde_json::from_str(body).map_err(|e| {
        LlmError::Malformed(format!(
            "the reply is not JSON ({e}): {}",
            body.chars().take(200).collect::<String>()
        ))
    })?;
    let Some(choice) = chunk.choices.into_iter().next() else {
        return Err(LlmError::Malformed("the reply has no choices".into()));
    };
    let m = choice.message.unwrap_or_default();
    Ok(split(Streamed {
        content: m.content.unwrap_or_default(),
        reasoning: m.reasoning.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        usage: chunk.usage,
        time_info: chunk.time_info,
        model: chunk.model,
        first_token: None,
        tool_calls: m.tool_calls,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn body(parts: &[&str]) -> impl Stream<Item = Result<Vec<u8>, String>> + Unpin {
        stream::iter(
            parts
                .iter()
                .map(|p| Ok(p.as_bytes().to_vec()))
                .collect::<Vec<_>>(),
        )
    }

    async fn go(parts: &[&str]) -> Result<Streamed, LlmError> {
        read(
            body(parts),
            Duration::from_secs(5),
            Instant::now() + Duration::from_secs(5),
            &CancellationToken::new(),
        )
        .await
    }

    const C1: &str = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"index\":0}],\"model\":\"zai-glm-4.6\"}\n\n";
    const C2: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"index\":0}]}\n\n";
    const LAST: &str = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9},\"time_info\":{\"completion_time\":0.01}}\n\n";

    #[tokio::test]
    async fn chunks_accumulate_with_or_without_done() {
        let s = go(&[C1, C2, LAST, "data: [DONE]\n\n"]).await.unwrap();
        assert_eq!(s.content, "Hello");
        assert_eq!(s.finish_reason.as_deref(), Some("stop"));
        assert_eq!(s.usage.unwrap().total(), 9);
        assert!(s.time_info.is_some());
        assert_eq!(s.model.as_deref(), Some("zai-glm-4.6"));
        // Split across reads, and no [DONE].
        let (a, b) = LAST.split_at(20);
        let s = go(&[C1, ": keep-alive\n\n", C2, a, b]).await.unwrap();
        assert_eq!(s.content, "Hello");
    }

    #[tokio::test]
    async fn reasoning_pieces_and_think_blocks_stay_out_of_the_answer() {
        let r1 =
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\"The user wants\"},\"index\":0}]}\n\n";
        let r2 =
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\" a greeting.\"},\"index\":0}]}\n\n";
        let end = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9,\"completion_tokens_details\":{\"reasoning_tokens\":6}}}\n\n";
        let s = go(&[r1, r2, C1, C2, end]).await.unwrap();
        assert_eq!(s.content, "Hello");
        assert_eq!(s.reasoning, "The user wants a greeting.");
        assert_eq!(s.usage.unwrap().reasoning_tokens(), 6);
        let t = "data: {\"choices\":[{\"delta\":{\"content\":\"<think>hidden plan</think>SELECT 1;\"},\"index\":0}]}\n\n";
        let s = go(&[t, LAST]).await.unwrap();
        assert_eq!(s.content, "SELECT 1;");
        assert_eq!(s.reasoning, "hidden plan");
        let j = r#"{"model":"gpt-oss-120b","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"","reasoning":"use ls","tool_calls":[{"id":"c1","type":"function","function":{"name":"run_command","arguments":"{\"command\":\"ls\"}"}}]}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#;
        let s = from_json(j).unwrap();
        assert_eq!(s.reasoning, "use ls");
        assert_eq!(s.tool_calls[0].function.name, "run_command");
        assert_eq!(s.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[tokio::test]
    async fn streamed_tool_calls_are_accumulated() {
        let t1 = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"run_command\",\"arguments\":\"\"}}]},\"index\":0}]}\n\n";
        let t2 = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"command\\\": \"}}]},\"index\":0}]}\n\n";
        let t3 = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"ls\\\"}\"}}]},\"index\":0}]}\n\n";
        let end = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\",\"index\":0}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n";
        let s = go(&[t1, t2, t3, end]).await.unwrap();
        assert_eq!(s.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(s.content, "");
        assert_eq!(s.tool_calls.len(), 1);
        assert_eq!(s.tool_calls[0].id, "call_1");
        assert_eq!(s.tool_calls[0].function.name, "run_command");
        assert_eq!(s.tool_calls[0].function.arguments, "{\"command\": \"ls\"}");
    }

    #[tokio::test]
    async fn cut_off_error_chunk_and_malformed() {
        assert!(matches!(go(&[C1, C2]).await, Err(LlmError::Transport(_))));
        let e = go(&[C1, "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"},\"status_code\":503}\n\n"]).await.unwrap_err();
        assert!(matches!(e, LlmError::Api { status: 503, .. }), "{e:?}");
        assert!(e.retryable());
        assert!(matches!(
            go(&[C1, "data: {not json\n\n"]).await,
            Err(LlmError::Malformed(_))
        ));
        assert!(matches!(go(&[]).await, Err(LlmError::Transport(_))));
    }

    #[tokio::test]
    async fn a_stalled_stream_times_out_and_cancel_stops_it() {
        let pending =
            stream::iter(vec![Ok::<_, String>(C1.as_bytes().to_vec())]).chain(stream::pending());
        let e = read(
            Box::pin(pending),
            Duration::from_millis(50),
            Instant::now() + Duration::from_secs(5),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(e, LlmError::Stalled(50));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let e = read(
            Box::pin(stream::pending::<Result<Vec<u8>, String>>()),
            Duration::from_secs(5),
            Instant::now() + Duration::from_secs(5),
            &cancel,
        )
        .await
        .unwrap_err();
        assert_eq!(e, LlmError::Cancelled);
    }
}
