//! The LLM client (DESIGN §8, issue 9): Cerebras chat completions (any OpenAI-compatible
//! server), streamed over SSE.
//!
//! | file | owns |
//! |---|---|
//! | `config.rs` | `[llm]`: model, base URL, timeouts, retries, budgets, tokens per minute, reasoning |
//! | `models.rs` | what each model family accepts: reasoning parameters, json_schema, strict tools |
//! | `key.rs` | finding the API key (env, file, systemd credential); a redacted type |
//! | `wire.rs` | request / chunk / error-body types, rate-limit headers |
//! | `sse.rs` | reading one stream: chunks, `[DONE]` or not, mid-stream errors, stalls |
//! | `retry.rs` | backoff with jitter, honouring the server's hints |
//! | `limiter.rs` | client-side tokens-per-minute limiting; the server's rate-limit buckets |
//! | `budget.rs` | per-job and daily token budgets (daily usage persisted) |
//! | `client.rs` | HTTP: one call with retries and deadlines; `GET /models` |
//! | `text.rs` | `<think>` blocks, code fences, JSON extraction, digest fallback, token estimates |
//! | `tools.rs` | tool calling: streamed `delta.tool_calls` pieces → complete calls |
//!
//! [`Llm`] ties them together for the actions: one per worker, shared by every job. Without a
//! key it still exists and every call fails with [`LlmError::NoKey`]: nothing else changes.
//! Reasoning never reaches [`Answer::text`] (it is [`Answer::reasoning`]); a structured reply
//! ([`Llm::complete_json`]) is asked with `response_format: json_schema` where the model takes
//! it, checked against its schema, retried once, then fails naming the field. A 404 for the
//! model becomes [`LlmError::ModelNotServed`] with the served list and the config line to change.

pub mod budget;
pub mod client;
pub mod config;
mod error;
pub mod key;
pub mod limiter;
pub mod models;
pub mod retry;
pub mod sse;
pub mod text;
pub mod tools;
pub mod wire;

pub use budget::JobUsage;
pub use config::LlmConfig;
pub use error::{hint, LlmError};
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
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pub system: String,
    pub user: String,
    pub temperature: f32,
    /// The action asking (a metrics label).
    pub action: &'static str,
}

/// The shape a structured reply must have: a name (sent as `json_schema.name`) and a JSON
/// Schema, checked locally in full; what is sent is [`wire_schema`] of it.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    pub name: &'static str,
    pub schema: serde_json::Value,
}

/// A structured reply: the object (checked against the schema) when the model was asked with
/// `response_format`, else None (the caller parses `answer.text` as before).
#[derive(Debug, Clone)]
pub struct Structured {
    pub value: Option<serde_json::Value>,
    pub answer: Answer,
}

/// The schema as sent for constrained decoding: the validation keywords strict mode does not
/// take (lengths, counts, bounds, patterns, formats) removed; the full schema is still checked
/// on the reply.
pub fn wire_schema(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    const DROP: &[&str] = &[
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "pattern",
        "format",
    ];
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !DROP.contains(&k.as_str()))
                .map(|(k, v)| {
                    // `properties` maps names to schemas: a property may itself be called
                    // "format"; only schema keywords are dropped.
                    let v = if k == "properties" {
                        match v {
                            Value::Object(p) => Value::Object(
                                p.iter().map(|(n, s)| (n.clone(), wire_schema(s))).collect(),
                            ),
                            other => other.clone(),
                        }
                    } else {
                        wire_schema(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(wire_schema).collect()),
        other => other.clone(),
    }
}

/// Why `v` does not match `schema`, naming the field (its JSON pointer), or Ok.
pub fn check_schema(schema: &serde_json::Value, v: &serde_json::Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("internal error: the schema does not compile: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(v)
        .take(3)
        .map(|e| {
            let at = e.instance_path().to_string();
            format!(
                "field {}: {e}",
                if at.is_empty() { "/".to_string() } else { at }
            )
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
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
    /// `response_format` (a structured reply).
    pub response_format: Option<serde_json::Value>,
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

/// Whether an API error refuses `response_format` (a server without structured outputs).
fn rejects_response_format(e: &LlmError) -> bool {
    matches!(e, LlmError::Api { status: 400 | 422, message, .. }
        if message.contains("response_format") || message.contains("json_schema"))
}

/// Whether an API error refuses a reasoning parameter (then the call is made without them).
fn rejects_reasoning(e: &LlmError) -> bool {
    matches!(e, LlmError::Api { status: 400 | 422, message, .. } if message.contains("reasoning"))
}

/// What the model answered.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// The answer alone: no reasoning, no `<think>` block.
    pub text: String,
    /// The model's reasoning (the `reasoning` field, `<think>` blocks), kept apart.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
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
    /// The reasoning parameters sent (corrected for the model once, at construction).
    reasoning: models::Reasoning,
    /// The server refused a reasoning parameter: no longer sent.
    no_reasoning: std::sync::atomic::AtomicBool,
    /// The server refused `response_format`: structured replies fall back to parsing.
    no_response_format: std::sync::atomic::AtomicBool,
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
            reasoning: models::reasoning(
                &cfg.model,
                cfg.reasoning_effort.as_deref(),
                cfg.reasoning_format.as_deref(),
            ),
            no_reasoning: std::sync::atomic::AtomicBool::new(false),
            no_response_format: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The corrections made to `[llm] reasoning_effort` / `reasoning_format` for this model
    /// (logged at start-up).
    pub fn reasoning_warnings(&self) -> &[String] {
        &self.reasoning.warnings
    }

    /// Whether structured replies are asked with `response_format` (the model takes
    /// json_schema, `[llm] structured_outputs`, and the server did not refuse it).
    pub fn structured(&self) -> bool {
        self.cfg.structured_outputs
            && models::caps(&self.cfg.model).json_schema
            && !self.no_response_format.load(Ordering::Relaxed)
    }

    /// A reply of the shape `schema`: asked with `response_format` when [`Llm::structured`],
    /// parsed and checked; a reply that does not match is asked again once (the error named),
    /// then the call fails naming the field. Without structured outputs the answer comes back
    /// with `value: None`, for the caller's own parsing.
    pub async fn complete_json(
        &self,
        job: &JobUsage,
        p: &Prompt,
        schema: &JsonSchema,
        stats: &Stats,
        cancel: &CancellationToken,
    ) -> Result<Structured, LlmError> {
        if !self.structured() {
            let answer = self.complete(job, p, stats, cancel).await?;
            return Ok(Structured {
                value: None,
                answer,
            });
        }
        let format = json!({"type": "json_schema", "json_schema": {
            "name": schema.name, "strict": true, "schema": wire_schema(&schema.schema)}});
        let mut conv = Conversation {
            messages: vec![
                wire::Message::system(p.system.clone()),
                wire::Message::user(p.user.clone()),
            ],
            tools: Vec::new(),
            temperature: p.temperature,
            max_completion_tokens: None,
            action: p.action,
            response_format: Some(format),
        };
        let mut before: Option<Answer> = None;
        loop {
            let mut answer = match self.converse(job, &conv, stats, cancel).await {
                Ok(a) => a,
                Err(e) if rejects_response_format(&e) => {
                    tracing::warn!(error = %e, "the LLM server refuses response_format; structured replies fall back to parsing");
                    self.no_response_format.store(true, Ordering::Relaxed);
                    let answer = self.complete(job, p, stats, cancel).await?;
                    return Ok(Structured {
                        value: None,
                        answer,
                    });
                }
                Err(e) => return Err(e),
            };
            if let Some(b) = &before {
                answer.usage = answer.usage.plus(&b.usage);
                answer.attempts += b.attempts;
                if answer.reasoning.is_empty() {
                    answer.reasoning = b.reasoning.clone();
                }
            }
            let parsed = serde_json::from_str::<serde_json::Value>(answer.text.trim())
                .ok()
                .or_else(|| text::extract_json(&answer.text))
                .ok_or_else(|| "field /: the reply is not a JSON object".to_string())
                .and_then(|v| check_schema(&schema.schema, &v).map(|()| v));
            match parsed {
                Ok(v) => {
                    return Ok(Structured {
                        value: Some(v),
                        answer,
                    })
                }
                Err(why) if before.is_none() => {
                    stats.incr("cerebras_schema_retries", 1.0);
                    tracing::warn!(schema = schema.name, why = %why, "a structured reply does not match its schema; asking once more");
                    conv.messages
                        .push(wire::Message::assistant(answer.text.clone(), Vec::new()));
                    conv.messages.push(wire::Message::user(format!(
                        "Your reply does not match the required JSON schema ({why}). Reply again with one JSON object that matches it exactly."
                    )));
                    before = Some(answer);
                }
                Err(why) => {
                    return Err(LlmError::Schema {
                        schema: schema.name.to_string(),
                        why,
                    })
                }
            }
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
            response_format: None,
        };
        self.converse(job, &conv, stats, cancel).await
    }

    /// One turn of a conversation, with tools when `conv.tools` is not empty (the answer's
    /// `tool_calls`); same budgets, limiter, retries and metrics as [`Llm::complete`]. Long
    /// because it is the one path every call takes, in order: budgets, both limiters, the call
    /// (again without reasoning parameters if the server refuses them), the error explained,
    /// usage settled, metrics.
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
        let max_wait = Duration::from_millis(self.cfg.max_retry_wait_ms);
        if let Err(e) = self
            .limiter
            .server_room(estimate + allowed, deadline, max_wait, cancel)
            .await
        {
            self.limiter.settle(reservation, 0);
            self.release(hold, None).await;
            return Err(e);
        }
        let mut req = self.request(conv, allowed);
        let p = conv;
        stats.incr("cerebras_requests", 1.0);
        let observe = |h: &wire::RateHints| self.limiter.observe(h);
        let on_retry = |e: &LlmError, wait: Duration| {
            stats.incr("cerebras_retries", 1.0);
            tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "LLM call failed; retrying");
        };
        let mut res = client
            .chat(&req, deadline, cancel, &observe, on_retry)
            .await;
        if let Err(e) = &res {
            if rejects_reasoning(e)
                && (req.reasoning_effort.is_some() || req.reasoning_format.is_some())
            {
                tracing::warn!(error = %e, "the LLM server refuses the reasoning parameters; they are no longer sent ([llm] reasoning_effort, reasoning_format)");
                self.no_reasoning.store(true, Ordering::Relaxed);
                req.reasoning_effort = None;
                req.reasoning_format = None;
                res = client
                    .chat(&req, deadline, cancel, &observe, on_retry)
                    .await;
            }
        }
        let c = match res {
            Ok(c) => c,
            Err(e) => {
                self.limiter.settle(reservation, 0);
                self.release(hold, None).await;
                if e != LlmError::Cancelled {
                    stats.incr("cerebras_errors", 1.0);
                }
                return Err(self.explain(client, e, cancel).await);
            }
        };
        let (usage, estimated) = match c.streamed.usage {
            Some(u) => (u, false),
            None => (
                Usage {
                    prompt_tokens: estimate,
                    completion_tokens: text::estimate_tokens(&c.streamed.content)
                        + text::estimate_tokens(&c.streamed.reasoning)
                        + c.streamed
                            .tool_calls
                            .iter()
                            .map(|t| text::estimate_tokens(&t.function.arguments))
                            .sum::<u64>(),
                    completion_tokens_details: None,
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
        genai_metrics(stats, &self.cfg.model, &model, &usage, c.total);
        Ok(Answer {
            text: c.streamed.content,
            reasoning: c.streamed.reasoning,
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

    /// The request for `conv`: reasoning parameters as the model takes them, tools made
    /// `strict` where the model accepts it (never for Qwen), `tool_choice: auto`, and none of
    /// the parameters the API refuses.
    fn request(&self, conv: &Conversation, allowed: u64) -> wire::ChatRequest {
        let with_tools = !conv.tools.is_empty();
        let strict = models::caps(&self.cfg.model).strict_tools;
        let tools = with_tools.then(|| {
            conv.tools
                .iter()
                .map(|t| {
                    let mut t = t.clone();
                    if let Some(f) = t.get_mut("function").and_then(|f| f.as_object_mut()) {
                        if strict {
                            f.insert("strict".into(), json!(true));
                        } else {
                            f.remove("strict");
                        }
                    }
                    t
                })
                .collect()
        });
        let reasoning = !self.no_reasoning.load(Ordering::Relaxed);
        wire::ChatRequest {
            model: self.cfg.model.clone(),
            messages: conv.messages.clone(),
            stream: true,
            temperature: conv.temperature,
            max_completion_tokens: allowed,
            tools,
            tool_choice: with_tools.then_some("auto"),
            reasoning_effort: self.reasoning.effort.clone().filter(|_| reasoning),
            reasoning_format: self.reasoning.format.clone().filter(|_| reasoning),
            response_format: conv.response_format.clone(),
        }
    }

    /// A 404 whose model is not in the served list becomes [`LlmError::ModelNotServed`] (the
    /// list fetched now); every other error is returned as it is.
    async fn explain(
        &self,
        client: &client::Client,
        e: LlmError,
        cancel: &CancellationToken,
    ) -> LlmError {
        if !matches!(e, LlmError::Api { status: 404, .. }) {
            return e;
        }
        match client.models(cancel).await {
            Ok(served) if !served.iter().any(|m| m == &self.cfg.model) => {
                LlmError::ModelNotServed {
                    model: self.cfg.model.clone(),
                    base_url: self.cfg.base_url.clone(),
                    served,
                }
            }
            _ => e,
        }
    }

    /// The model ids the key can use (`GET /models`), for `brainloop llm models`.
    pub async fn served_models(&self, cancel: &CancellationToken) -> Result<Vec<String>, LlmError> {
        self.client
            .as_ref()
            .ok_or_else(|| LlmError::NoKey(self.no_client.clone()))?
            .models(cancel)
            .await
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
                        let e = LlmError::ModelNotServed {
                            model: self.cfg.model.clone(),
                            base_url: self.cfg.base_url.clone(),
                            served: models.clone(),
                        }
                        .to_string();
                        tracing::warn!("{e}; every LLM action will fail until then");
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

/// Token usage and duration under the OpenTelemetry GenAI names (semantic conventions v1.36),
/// beside the `cerebras_*` rows: `gen_ai.client.token.usage` per token type,
/// `gen_ai.client.operation.duration` in seconds, and `brainloop.llm.reasoning_tokens` (GenAI
/// has no stable metric for them).
fn genai_metrics(stats: &Stats, requested: &str, answered: &str, usage: &Usage, took: Duration) {
    let labels = |token_type: Option<&str>| {
        let mut l = json!({
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "cerebras",
            "gen_ai.request.model": requested,
            "gen_ai.response.model": answered,
        });
        if let Some(t) = token_type {
            l["gen_ai.token.type"] = json!(t);
        }
        Some(l.to_string())
    };
    stats.sample(
        "gen_ai.client.token.usage",
        usage.prompt_tokens as f64,
        labels(Some("input")),
    );
    stats.sample(
        "gen_ai.client.token.usage",
        usage.completion_tokens as f64,
        labels(Some("output")),
    );
    stats.sample(
        "gen_ai.client.operation.duration",
        took.as_secs_f64(),
        labels(None),
    );
    if usage.reasoning_tokens() > 0 {
        stats.sample(
            "brainloop.llm.reasoning_tokens",
            usage.reasoning_tokens() as f64,
            labels(None),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_schema_drops_bounds_and_the_check_names_the_field() {
        let schema = json!({"type": "object", "required": ["sql"], "additionalProperties": false,
            "properties": {"sql": {"type": "string", "minLength": 1, "maxLength": 10},
                           "format": {"type": "string", "format": "uri"}}});
        let w = wire_schema(&schema);
        assert_eq!(w["properties"]["sql"], json!({"type": "string"}));
        assert_eq!(w["properties"]["format"], json!({"type": "string"}));
        assert_eq!(w["required"], json!(["sql"]));
        let e = check_schema(&schema, &json!({"sql": 3})).unwrap_err();
        assert!(e.contains("field /sql"), "{e}");
        assert!(check_schema(&schema, &json!({"sql": "SELECT 1"})).is_ok());
    }

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
