//! The errors of an LLM call, and which of them a retry can cure.

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
    #[error("the LLM API answered {status}{}: {message}", kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default())]
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
}
