//! The HTTP client: `POST {base_url}/chat/completions` streamed over SSE, with retries
//! (`retry`), a stall timeout per read (`sse`), a deadline for the whole call
//! (`request_timeout_ms`, retries and waits included) and cancellation; `GET {base_url}/models`
//! for the start-up check. The key goes only into a sensitive `Authorization` header; redirects
//! are not followed (a redirect could carry the header elsewhere). Every request carries
//! `X-Cerebras-3rd-Party-Integration: brainloop`. A reply with a JSON body instead of a stream
//! (a server ignoring `stream`) is read as one completion (`sse::from_json`).

use super::key::ApiKey;
use super::sse::{self, Streamed};
use super::wire::{parse_error_body, ChatRequest, RateHints};
use super::{retry, LlmConfig, LlmError};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub struct Client {
    /// Built at the first call (rustls, root certificates and connection pool cost memory a
    /// worker that never calls the LLM should not pay for).
    http: std::sync::OnceLock<reqwest::Client>,
    auth: HeaderValue,
    base: String,
    cfg: LlmConfig,
}

/// A completion and how it was obtained.
#[derive(Debug, Clone)]
pub struct Completion {
    pub streamed: Streamed,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
    /// From the start of the successful attempt to its end.
    pub total: Duration,
}

fn transport(e: &reqwest::Error) -> LlmError {
    // reqwest's Display names the URL, never headers; keep the chain short.
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    LlmError::Transport(msg)
}

impl Client {
    pub fn new(cfg: &LlmConfig, key: &ApiKey) -> anyhow::Result<Client> {
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                anyhow::anyhow!(
                    "the LLM API key contains characters that cannot go in an HTTP header"
                )
            })?;
        auth.set_sensitive(true);
        Ok(Client {
            http: std::sync::OnceLock::new(),
            auth,
            base: cfg.base_url.trim_end_matches('/').to_string(),
            cfg: cfg.clone(),
        })
    }

    /// The HTTP client, built on first use.
    fn http(&self) -> Result<&reqwest::Client, LlmError> {
        if let Some(c) = self.http.get() {
            return Ok(c);
        }
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, self.auth.clone());
        headers.insert(
            "x-cerebras-3rd-party-integration",
            HeaderValue::from_static("brainloop"),
        );
        let built = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_millis(self.cfg.connect_timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("brainloop/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Transport(format!("cannot build the HTTP client: {e}")))?;
        // Two first calls at once may both build one; the first stored is kept.
        Ok(self.http.get_or_init(|| built))
    }

    /// One attempt; the hints are those of the response, if one arrived.
    async fn attempt(
        &self,
        req: &ChatRequest,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<(Streamed, RateHints), (LlmError, RateHints)> {
        let stall = Duration::from_millis(self.cfg.stall_timeout_ms);
        let http = self.http().map_err(|e| (e, RateHints::default()))?;
        let send = http
            .post(format!("{}/chat/completions", self.base))
            .header(CONTENT_TYPE, "application/json")
            .header("accept", "text/event-stream")
            .json(req)
            .send();
        let wait = stall.min(deadline.saturating_duration_since(Instant::now()));
        let resp = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err((LlmError::Cancelled, RateHints::default())),
            r = tokio::time::timeout(wait, send) => match r {
                Err(_) if Instant::now() >= deadline => return Err((LlmError::Timeout(self.cfg.request_timeout_ms), RateHints::default())),
                Err(_) => return Err((LlmError::Stalled(self.cfg.stall_timeout_ms), RateHints::default())),
                Ok(Err(e)) => return Err((transport(&e), RateHints::default())),
                Ok(Ok(r)) => r,
            },
        };
        let hints = RateHints::from_headers(resp.headers());
        let status = resp.status();
        if !status.is_success() {
            let body = tokio::select! {
                _ = cancel.cancelled() => return Err((LlmError::Cancelled, hints)),
                b = tokio::time::timeout(stall, resp.text()) => b.ok().and_then(Result::ok).unwrap_or_default(),
            };
            let e = parse_error_body(&body);
            return Err((
                LlmError::Api {
                    status: status.as_u16(),
                    kind: e.kind,
                    message: e.message.unwrap_or_else(|| {
                        status.canonical_reason().unwrap_or("error").to_string()
                    }),
                },
                hints,
            ));
        }
        let json_body = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if json_body {
            let wait = stall.min(deadline.saturating_duration_since(Instant::now()));
            let body = tokio::select! {
                _ = cancel.cancelled() => return Err((LlmError::Cancelled, hints)),
                b = tokio::time::timeout(wait, resp.text()) => match b {
                    Err(_) => return Err((LlmError::Stalled(self.cfg.stall_timeout_ms), hints)),
                    Ok(Err(e)) => return Err((transport(&e), hints)),
                    Ok(Ok(b)) => b,
                },
            };
            return match sse::from_json(&body) {
                Ok(s) => Ok((s, hints)),
                Err(e) => Err((e, hints)),
            };
        }
        match sse::read(Box::pin(resp.bytes_stream()), stall, deadline, cancel).await {
            Ok(s) => Ok((s, hints)),
            Err(LlmError::Timeout(_)) => {
                Err((LlmError::Timeout(self.cfg.request_timeout_ms), hints))
            }
            Err(e) => Err((e, hints)),
        }
    }

    /// The completion of `req`, retried as `retry` says, within `deadline`; `observe` sees the
    /// rate-limit headers of every response.
    pub async fn chat(
        &self,
        req: &ChatRequest,
        deadline: Instant,
        cancel: &CancellationToken,
        observe: &(dyn Fn(&RateHints) + Sync),
        mut on_retry: impl FnMut(&LlmError, Duration),
    ) -> Result<Completion, LlmError> {
        let mut retries = 0u32;
        loop {
            let started = Instant::now();
            let got = self.attempt(req, deadline, cancel).await;
            match &got {
                Ok((_, h)) | Err((_, h)) => observe(h),
            }
            match got {
                Ok((streamed, _)) => {
                    return Ok(Completion {
                        streamed,
                        attempts: retries + 1,
                        total: started.elapsed(),
                    })
                }
                Err((e, hints)) => {
                    if !e.retryable() || retries >= self.cfg.max_retries {
                        return Err(if retries > 0 && e.retryable() {
                            annotate(e, retries + 1)
                        } else {
                            e
                        });
                    }
                    let wait = retry::delay(&self.cfg, retries, &e, &hints)?;
                    if Instant::now() + wait >= deadline {
                        return Err(LlmError::Timeout(self.cfg.request_timeout_ms));
                    }
                    on_retry(&e, wait);
                    tokio::select! {
                        _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                        _ = tokio::time::sleep(wait) => {}
                    }
                    retries += 1;
                }
            }
        }
    }

    /// The model ids the server lists (`GET /models`).
    pub async fn models(&self, cancel: &CancellationToken) -> Result<Vec<String>, LlmError> {
        let stall = Duration::from_millis(self.cfg.stall_timeout_ms.min(30_000));
        let send = self.http()?.get(format!("{}/models", self.base)).send();
        let resp = tokio::select! {
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            r = tokio::time::timeout(stall, send) => match r {
                Err(_) => return Err(LlmError::Stalled(stall.as_millis() as u64)),
                Ok(Err(e)) => return Err(transport(&e)),
                Ok(Ok(r)) => r,
            },
        };
        let status = resp.status();
        let body = tokio::select! {
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            b = tokio::time::timeout(stall, resp.text()) => match b {
                Err(_) => return Err(LlmError::Stalled(stall.as_millis() as u64)),
                Ok(Err(e)) => return Err(transport(&e)),
                Ok(Ok(b)) => b,
            },
        };
        if !status.is_success() {
            let e = parse_error_body(&body);
            return Err(LlmError::Api {
                status: status.as_u16(),
                kind: e.kind,
                message: e.message.unwrap_or_default(),
            });
        }
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| LlmError::Malformed(format!("GET /models: {e}")))?;
        Ok(v["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }
}

fn annotate(e: LlmError, attempts: u32) -> LlmError {
    match e {
        LlmError::Api {
            status,
            kind,
            message,
        } => LlmError::Api {
            status,
            kind,
            message: format!("{message} (gave up after {attempts} attempts)"),
        },
        LlmError::Transport(m) => {
            LlmError::Transport(format!("{m} (gave up after {attempts} attempts)"))
        }
        other => other,
    }
}
