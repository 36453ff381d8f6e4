//! The LLM client (DESIGN §8, issue 9): Cerebras chat completions (any OpenAI-compatible
//! server), streamed over SSE.
//!
//! | file | owns |
//! |---|---|
//! | `config.rs` | `[llm]`: model, base URL, timeouts, retries, budgets, tokens per minute |
//! | `key.rs` | finding the API key (env, file, systemd credential); a redacted type |
//! | `wire.rs` | request / chunk / error-body types, rate-limit headers |
//! | `sse.rs` | reading one stream: chunks, `[DONE]` or not, mid-stream errors, stalls |
//! | `retry.rs` | backoff with jitter, honouring the server's hints |
//! | `limiter.rs` | client-side tokens-per-minute limiting by reservation |
//! | `budget.rs` | per-job and daily token budgets (daily usage persisted) |
//! | `client.rs` | HTTP: one call with retries and deadlines; `GET /models` |
//! | `text.rs` | code fences, JSON extraction, digest fallback, token estimates |
//! | `tools.rs` | tool calling: streamed `delta.tool_calls` pieces → complete calls |
//!
//! [`Llm`] ties them together for the actions: one per worker, shared by every job. Without a
//! key it still exists and every call fails with [`LlmError::NoKey`]: nothing else changes.

pub mod budget;
pub mod client;
pub mod config;
mod error;
pub mod key;
pub mod limiter;
pub mod retry;
pub mod sse;
pub mod text;
pub mod tools;
pub mod wire;

pub use budget::JobUsage;
pub use config::LlmConfig;
pub use error::LlmError;
pub use wire::{Message, ToolCall, Usage};

use crate::db::Db;
use crate::stats::Stats;
use serde::Serialize;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What an action asks the model.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub system: String,
    pub user: String,
    pub temperature: f32,
    /// The action asking (a metrics label).
    pub action: &'static str,
}

/// A multi-turn exchange (agent sessions): the whole message list, optional tools.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub messages: Vec<wire::Message>,
    /// Tool definitions (`{type: "function", function: {name, description, parameters}}`);
    /// empty: no tool calling (`tools` is not sent).
    pub tools: Vec<serde_json::Value>,
    pub temperature: f32,
    /// Lowers `max_completion_tokens` further (e.g. a session's remaining token budget).
    pub max_completion_tokens: Option<u64>,
    pub action: &'static str,
}

/// Whether an API error says the server does not take `tools` (a 400/422 naming them):
/// the caller may fall back to asking for strict JSON.
pub fn rejects_tools(e: &LlmError) -> bool {
    match e {
        LlmError::Api {
            status: 400 | 422 | 501,
            message,
            kind,
        } => {
            let m = format!("{message} {}", kind.as_deref().unwrap_or("")).to_ascii_lowercase();
            m.contains("tool") || m.contains("function")
        }
        _ => false,
    }
}

/// What the model answered.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub text: String,
    /// Complete tool calls (empty without tool calling, or when the model answered in text).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<wire::ToolCall>,
    pub model: String,
    pub finish_reason: Option<String>,
    pub usage: Usage,
    /// The server sent no `usage`; the figures are estimates.
    pub usage_estimated: bool,
    pub attempts: u32,
    pub latency_ms: u64,
    pub first_token_ms: Option<u64>,
    pub time_info: Option<serde_json::Value>,
}

/// The start-up check of the model (`GET /models`), shown by `status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelCheck {
    pub model: String,
    pub base_url: String,
    /// A key was found (where from, never the key).
    pub key_source: Option<String>,
    /// The model is listed by the server.
    pub ok: bool,
    pub served: Vec<String>,
    pub error: Option<String>,
}

pub struct Llm {
    cfg: LlmConfig,
    client: Option<client::Client>,
    key_source: Option<String>,
    /// Why there is no client (appended to the NoKey error).
    no_client: String,
    limiter: limiter::TpmLimiter,
    budgets: Arc<budget::Budgets>,
    last_check: Mutex<Option<ModelCheck>>,
}

impl Llm {
    /// Reads the key from the process environment / files; `store` is lifecycle.db.
    pub fn from_env(cfg: &LlmConfig, store: Option<Arc<Db>>) -> Llm {
        Llm::new(cfg, key::find(cfg, |k| std::env::var(k).ok()), store)
    }

    pub fn new(cfg: &LlmConfig, found: key::Found, store: Option<Arc<Db>>) -> Llm {
        let (client, key_source, no_client) = match found {
            key::Found::Key(k, src) => match client::Client::new(cfg, &k) {
                Ok(c) => (Some(c), Some(src.to_string()), String::new()),
                Err(e) => (None, Some(src.to_string()), format!(" ({e:#})")),
            },
            key::Found::None => (None, None, String::new()),
            key::Found::Unusable(why) => (None, None, format!(" ({why})")),
        };
        Llm {
            cfg: cfg.clone(),
            client,
            key_source,
            no_client,
            limiter: limiter::TpmLimiter::new(cfg.tokens_per_minute),
            budgets: Arc::new(budget::Budgets::new(
                cfg.job_token_budget,
                cfg.daily_token_budget,
                store,
            )),
            last_check: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &LlmConfig {
        &self.cfg
    }

    /// Whether calls can be made at all (a usable key was found).
    pub fn available(&self) -> Result<(), LlmError> {
        match self.client {
            Some(_) => Ok(()),
            None => Err(LlmError::NoKey(self.no_client.clone())),
        }
    }

    /// Tokens spent today, all jobs.
    pub fn used_today(&self) -> u64 {
        self.budgets.used_today()
    }

    /// One completion: budgets, then the tokens-per-minute limiter, then the call with retries;
    /// usage recorded in the budgets, metrics in `stats`.
    pub async fn complete(
        &self,
        job: &JobUsage,
        p: &Prompt,
        stats: &Stats,
        cancel: &CancellationToken,
    ) -> Result<Answer, LlmError> {
        let conv = Conversation {
            messages: vec![
                wire::Message::system(p.system.clone()),
                wire::Message::user(p.user.clone()),
            ],
            tools: Vec::new(),
            temperature: p.temperature,
            max_completion_tokens: None,
            action: p.action,
        };
        self.converse(job, &conv, stats, cancel).await
    }

    /// One turn of a conversation, with tools when `conv.tools` is not empty (the answer's
    /// `tool_calls`); same budgets, limiter, retries and metrics as [`Llm::complete`].
    pub async fn converse(
        &self,
        job: &JobUsage,
        conv: &Conversation,
        stats: &Stats,
        cancel: &CancellationToken,
    ) -> Result<Answer, LlmError> {
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| LlmError::NoKey(self.no_client.clone()))?;
        let tools_text = if conv.tools.is_empty() {
            String::new()
        } else {
            serde_json::Value::Array(conv.tools.clone()).to_string()
        };
        let estimate = conv
            .messages
            .iter()
            .map(|m| {
                text::estimate_tokens(&m.content)
                    + m.tool_calls
                        .iter()
                        .map(|c| text::estimate_tokens(&c.function.arguments) + 8)
                        .sum::<u64>()
                    + 4
            })
            .sum::<u64>()
            + text::estimate_tokens(&tools_text)
            + 16;
        let wanted = match conv.max_completion_tokens {
            Some(m) => self.cfg.max_completion_tokens.min(m.max(1)),
            None => self.cfg.max_completion_tokens,
        };
        let (budgets, used) = (Arc::clone(&self.budgets), job.used());
        let (hold, allowed) =
            tokio::task::spawn_blocking(move || budgets.reserve(used, estimate, wanted))
                .await
                .map_err(|e| LlmError::Transport(format!("budget task failed: {e}")))??;
        let deadline = Instant::now() + Duration::from_millis(self.cfg.request_timeout_ms);
        let reservation = match self
            .limiter
            .acquire(estimate + allowed, deadline, cancel)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.release(hold, None).await;
                return Err(e);
            }
        };
        let with_tools = !conv.tools.is_empty();
        let req = wire::ChatRequest {
            model: self.cfg.model.clone(),
            messages: conv.messages.clone(),
            stream: true,
            temperature: conv.temperature,
            max_completion_tokens: allowed,
            tools: with_tools.then(|| conv.tools.clone()),
            tool_choice: with_tools.then_some("auto"),
        };
        let p = conv;
        stats.incr("cerebras_requests", 1.0);
        let res = client
            .chat(&req, deadline, cancel, |e, wait| {
                stats.incr("cerebras_retries", 1.0);
                tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "LLM call failed; retrying");
            })
            .await;
        let c = match res {
            Ok(c) => c,
            Err(e) => {
                self.limiter.settle(reservation, 0);
                self.release(hold, None).await;
                if e != LlmError::Cancelled {
                    stats.incr("cerebras_errors", 1.0);
                }
                return Err(e);
            }
        };
        let (usage, estimated) = match c.streamed.usage {
            Some(u) => (u, false),
            None => (
                Usage {
                    prompt_tokens: estimate,
                    completion_tokens: text::estimate_tokens(&c.streamed.content)
                        + c.streamed
                            .tool_calls
                            .iter()
                            .map(|t| text::estimate_tokens(&t.function.arguments))
                            .sum::<u64>(),
                },
                true,
            ),
        };
        self.limiter.settle(reservation, usage.total());
        job.used.fetch_add(usage.total(), Ordering::Relaxed);
        self.release(hold, Some(usage)).await;
        let model = c
            .streamed
            .model
            .clone()
            .unwrap_or_else(|| self.cfg.model.clone());
        let latency_ms = c.total.as_millis() as u64;
        let first_token_ms = c.streamed.first_token.map(|d| d.as_millis() as u64);
        stats.incr("cerebras_tokens_prompt", usage.prompt_tokens as f64);
        stats.incr("cerebras_tokens_completion", usage.completion_tokens as f64);
        let label = |phase: &str| {
            Some(json!({"phase": phase, "model": model, "action": p.action}).to_string())
        };
        stats.sample("cerebras_latency_ms", latency_ms as f64, label("total"));
        if let Some(ft) = first_token_ms {
            stats.sample("cerebras_latency_ms", ft as f64, label("first_token"));
        }
        Ok(Answer {
            text: c.streamed.content,
            tool_calls: c.streamed.tool_calls,
            model,
            finish_reason: c.streamed.finish_reason,
            usage,
            usage_estimated: estimated,
            attempts: c.attempts,
            latency_ms,
            first_token_ms,
            time_info: c.streamed.time_info,
        })
    }

    async fn release(&self, hold: budget::Hold, usage: Option<Usage>) {
        let b = Arc::clone(&self.budgets);
        if let Err(e) = tokio::task::spawn_blocking(move || b.release(hold, usage)).await {
            tracing::warn!(error = %e, "cannot release an LLM budget hold");
        }
    }

    /// Checks that the configured model is served (`GET /models`); logs a warning if not.
    pub async fn check_models(&self, cancel: &CancellationToken) -> ModelCheck {
        let mut check = ModelCheck {
            model: self.cfg.model.clone(),
            base_url: self.cfg.base_url.clone(),
            key_source: self.key_source.clone(),
            ok: false,
            served: Vec::new(),
            error: None,
        };
        match &self.client {
            None => {
                let e = LlmError::NoKey(self.no_client.clone()).to_string();
                tracing::warn!("LLM actions disabled: {e}");
                check.error = Some(e);
            }
            Some(c) => match c.models(cancel).await {
                Ok(models) => {
                    check.ok = models.iter().any(|m| m == &self.cfg.model);
                    if !check.ok {
                        let e = format!(
                            "model {:?} is not served by {} (served: {})",
                            self.cfg.model,
                            self.cfg.base_url,
                            models.join(", ")
                        );
                        tracing::warn!("{e}; LLM calls will probably fail ([llm] model)");
                        check.error = Some(e);
                    } else {
                        tracing::info!(model = %self.cfg.model, key = self.key_source.as_deref().unwrap_or("?"), "LLM model available");
                    }
                    check.served = models;
                }
                Err(e) => {
                    tracing::warn!(error = %e, base_url = %self.cfg.base_url, "cannot check the LLM model list");
                    check.error = Some(format!("cannot list models: {e}"));
                }
            },
        }
        if let Ok(mut g) = self.last_check.lock() {
            *g = Some(check.clone());
        }
        check
    }

    /// The last start-up check, if it ran.
    pub fn last_check(&self) -> Option<ModelCheck> {
        self.last_check.lock().ok().and_then(|g| g.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_client_errors_naming_tools_switch_to_strict_json() {
        let api = |status, message: &str| LlmError::Api {
            status,
            kind: Some("invalid_request_error".into()),
            message: message.into(),
        };
        assert!(rejects_tools(&api(
            400,
            "tools are not supported with stream=true"
        )));
        assert!(rejects_tools(&api(422, "Unknown field: tool_choice")));
        assert!(!rejects_tools(&api(400, "max_completion_tokens too large")));
        assert!(!rejects_tools(&api(500, "tool server down")));
        assert!(!rejects_tools(&LlmError::Transport("tool".into())));
    }
}
