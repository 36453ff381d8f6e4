//! The errors of an LLM call, which of them a retry can cure, and what each API status means
//! for the operator (`hint`: the cause and the fix, appended to every `Api` error, so a failed
//! job's `results.error` says why).

/// Why an LLM call failed. Messages never contain the API key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// No key was found at start-up: LLM actions fail, everything else keeps working.
    #[error("no LLM API key: set CEREBRAS_API_KEY in the worker's environment (or [llm] api_key_file, or the systemd credential cerebras_api_key){0}")]
    NoKey(String),
    /// The job's cancellation token fired (shutdown): the job will run again.
    #[error("cancelled")]
    Cancelled,
    /// A per-job or daily token budget would be exceeded; nothing was sent.
    #[error("{0}")]
    Budget(String),
    /// The API answered with an error status (HTTP or a mid-stream error chunk).
    #[error("the LLM API answered {status}{}: {message} — {}", kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default(), hint(*status))]
    Api {
        status: u16,
        kind: Option<String>,
        message: String,
    },
    /// Connection refused/reset, TLS failure, a body cut off before the model finished.
    #[error("cannot reach the LLM API: {0}")]
    Transport(String),
    /// No byte arrived for the stall timeout.
    #[error("the LLM response stalled: no data for {0} ms")]
    Stalled(u64),
    /// The whole call (retries and waits included) exceeded `request_timeout_ms`.
    #[error("the LLM call did not finish within {0} ms")]
    Timeout(u64),
    /// The server sent something that is not the chat-completions format.
    #[error("malformed LLM response: {0}")]
    Malformed(String),
    /// The server asked to wait longer than `max_retry_wait_ms`.
    #[error("the LLM API is rate limiting: {0}")]
    RateLimited(String),
    /// The configured model is not among those the key can use (start-up check, or a 404).
    #[error("model {model:?} is not served by {base_url} (served: {}); set [llm] model = \"{}\" in the config (or BRAINLOOP_LLM_MODEL) to a served model — `brainloop llm models` lists them", if served.is_empty() { "none".to_string() } else { served.join(", ") }, served.first().map(String::as_str).unwrap_or(super::config::DEFAULT_MODEL))]
    ModelNotServed {
        model: String,
        base_url: String,
        served: Vec<String>,
    },
    /// A structured reply did not match its schema, twice.
    #[error("the model's reply does not match the {schema} schema (asked twice): {why}")]
    Schema { schema: String, why: String },
}

/// The cause and the fix of an API error status (Cerebras's documented statuses).
pub fn hint(status: u16) -> &'static str {
    match status {
        400 => "the request was refused as invalid (a parameter or value this model does not take); check [llm] model, reasoning_effort and reasoning_format",
        401 => "the API key was refused: check CEREBRAS_API_KEY (or [llm] api_key_file, the systemd credential cerebras_api_key)",
        402 => "payment required: the organisation has no credit or plan left for this request; add credit or change plan in the Cerebras cloud console, or lower [llm] daily_token_budget",
        403 => "the key is not allowed this model or endpoint: check the key's organisation and project permissions, or choose another [llm] model",
        404 => "not found: the model is deprecated or not available to this key, or [llm] base_url is wrong; `brainloop llm models` lists the models the key can use",
        408 => "the API timed out the request; it is retried",
        413 => "the request is too large for the model's context: send less (smaller files, fewer sources)",
        422 => "the request was understood but refused (unprocessable: a message, schema or tool definition the model cannot take)",
        429 => "rate limited (requests or tokens per minute, hour or day for this model): wait for the reset, or lower [llm] tokens_per_minute / max_completion_tokens",
        500 => "the API had an internal error; it is retried, try again later if it persists",
        502..=504 => "the API is overloaded or unavailable; it is retried, try again later if it persists",
        _ => "an unexpected status from the LLM API",
    }
}

impl LlmError {
    /// 429, 5xx, connection errors and stalls are worth another attempt; client errors
    /// (bad request, authentication, unknown model), budgets and cancellation are not.
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Api { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            LlmError::Transport(_) | LlmError::Stalled(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_classes() {
        let api = |status| LlmError::Api {
            status,
            kind: None,
            message: String::new(),
        };
        assert!(api(429).retryable() && api(500).retryable() && api(503).retryable());
        assert!(!api(400).retryable() && !api(401).retryable() && !api(404).retryable());
        assert!(LlmError::Stalled(1).retryable());
        assert!(!LlmError::Cancelled.retryable() && !LlmError::Budget(String::new()).retryable());
        assert!(LlmError::NoKey(String::new())
            .to_string()
            .contains("CEREBRAS_API_KEY"));
    }

    #[test]
    fn each_status_names_its_cause_and_fix() {
        let msg = |status| {
            LlmError::Api {
                status,
                kind: None,
                message: "m".into(),
            }
            .to_string()
        };
        for (status, words) in [
            (400, "invalid"),
            (401, "CEREBRAS_API_KEY"),
            (402, "payment required"),
            (403, "not allowed"),
            (404, "brainloop llm models"),
            (422, "unprocessable"),
            (429, "rate limited"),
            (500, "internal error"),
            (503, "overloaded"),
        ] {
            assert!(msg(status).contains(words), "{status}: {}", msg(status));
        }
        let e = LlmError::ModelNotServed {
            model: "zai-glm-4.6".into(),
            base_url: "https://api.cerebras.ai/v1".into(),
            served: vec!["gpt-oss-120b".into(), "qwen-3.8-27b".into()],
        }
        .to_string();
        assert!(e.contains("served: gpt-oss-120b, qwen-3.8-27b"), "{e}");
        assert!(e.contains("[llm] model = \"gpt-oss-120b\""), "{e}");
    }
}
