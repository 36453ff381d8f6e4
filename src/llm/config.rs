//! The `[llm]` section of the configuration: model, endpoint, timeouts, retries, budgets and
//! the client-side tokens-per-minute limit. Every key has a documented default; the API key is
//! never part of the configuration (it comes from `CEREBRAS_API_KEY` or a credentials file, see
//! `llm::key`), so `--print-config` can never show it.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Cerebras's OpenAI-compatible endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.cerebras.ai/v1";
/// A model Cerebras's shared inference serves (2026-10; seed 001's `zai-glm-4.6` was deprecated
/// on 2026-01-20).
pub const DEFAULT_MODEL: &str = "gpt-oss-120b";
/// `reasoning_effort` values the API defines (each model takes a subset: `llm::models`).
pub const EFFORTS: &[&str] = &["none", "low", "medium", "high"];
/// `reasoning_format` values the API defines.
pub const FORMATS: &[&str] = &["parsed", "raw", "hidden", "none"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Model name sent with every request; checked against `GET /v1/models` at start-up
    /// (`BRAINLOOP_LLM_MODEL`).
    pub model: String,
    /// Base URL of an OpenAI-compatible API, up to and including `/v1`
    /// (`BRAINLOOP_LLM_BASE_URL`). Plain `http://` is accepted only for loopback hosts: the key
    /// must never travel in clear.
    pub base_url: String,
    /// A file holding the API key (used when `CEREBRAS_API_KEY` is not set). Under systemd,
    /// `$CREDENTIALS_DIRECTORY/cerebras_api_key` (`LoadCredential=`) is read when this is unset.
    pub api_key_file: Option<PathBuf>,
    /// TCP + TLS connection timeout (ms).
    pub connect_timeout_ms: u64,
    /// Upper bound of one call, all retries and waits included (ms).
    pub request_timeout_ms: u64,
    /// A response that sends no byte for this long is abandoned (and retried) (ms).
    pub stall_timeout_ms: u64,
    /// Retries after the first attempt on 429, 5xx, connection errors and stalls.
    pub max_retries: u32,
    /// First backoff step (ms); doubles per retry, full jitter.
    pub retry_base_ms: u64,
    /// Largest backoff step (ms).
    pub retry_max_ms: u64,
    /// A server asking to wait longer than this (retry-after, reset hints) fails the call (ms).
    pub max_retry_wait_ms: u64,
    /// `max_completion_tokens` of a request (lowered to fit the remaining budgets).
    pub max_completion_tokens: u64,
    /// Tokens (prompt + completion) one job may spend; 0 = no limit.
    pub job_token_budget: u64,
    /// Tokens all jobs may spend per UTC day (persisted in lifecycle `llm_usage`); 0 = no limit.
    pub daily_token_budget: u64,
    /// Client-side tokens-per-minute limit: a request reserves its prompt estimate plus its
    /// `max_completion_tokens` and waits while the last minute's total would exceed this;
    /// 0 = no limit.
    pub tokens_per_minute: u64,
    /// Check at start-up that the model is served (`GET /v1/models`).
    pub check_models: bool,
    /// Send `tools` (API tool calling) in agent sessions; false asks for one strict JSON
    /// object per step instead (servers without tool calling; a 400/422 naming tools switches a
    /// session to that fallback by itself) (`BRAINLOOP_LLM_TOOL_CALLING`).
    pub tool_calling: bool,
    /// `reasoning_effort` sent to reasoning models (`low` / `medium` / `high` / `none`); unset:
    /// the model's default (`llm::models`). A value the model refuses is replaced by its
    /// default with a warning (`BRAINLOOP_LLM_REASONING_EFFORT`).
    pub reasoning_effort: Option<String>,
    /// `reasoning_format` (`parsed`: a separate `reasoning` field; `raw`: `<think>` in the
    /// content; `hidden`; `none`); unset: the model's default. Reasoning is kept apart from the
    /// answer whatever the format (`BRAINLOOP_LLM_REASONING_FORMAT`).
    pub reasoning_format: Option<String>,
    /// Ask for `response_format: json_schema` (constrained decoding) where an action expects
    /// structure and the model supports it; false: prompts and parsing only
    /// (`BRAINLOOP_LLM_STRUCTURED_OUTPUTS`).
    pub structured_outputs: bool,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            model: DEFAULT_MODEL.into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key_file: None,
            connect_timeout_ms: 10_000,
            request_timeout_ms: 300_000,
            stall_timeout_ms: 60_000,
            max_retries: 4,
            retry_base_ms: 500,
            retry_max_ms: 30_000,
            max_retry_wait_ms: 120_000,
            max_completion_tokens: 8_192,
            job_token_budget: 200_000,
            daily_token_budget: 5_000_000,
            tokens_per_minute: 150_000,
            check_models: true,
            tool_calling: true,
            reasoning_effort: None,
            reasoning_format: None,
            structured_outputs: true,
        }
    }
}

impl LlmConfig {
    /// Applies `BRAINLOOP_LLM_*` variables.
    pub fn apply_env(&mut self, get: &impl Fn(&str) -> Option<String>) -> Result<()> {
        fn num(key: &str, v: &str) -> Result<u64> {
            v.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a valid number"))
        }
        if let Some(v) = get("BRAINLOOP_LLM_BASE_URL") {
            self.base_url = v.trim().to_string();
        }
        if let Some(v) = get("BRAINLOOP_LLM_MODEL") {
            self.model = v.trim().to_string();
        }
        if let Some(v) = get("BRAINLOOP_LLM_API_KEY_FILE") {
            self.api_key_file = Some(PathBuf::from(v));
        }
        let nums: [(&str, &mut u64); 10] = [
            (
                "BRAINLOOP_LLM_CONNECT_TIMEOUT_MS",
                &mut self.connect_timeout_ms,
            ),
            (
                "BRAINLOOP_LLM_REQUEST_TIMEOUT_MS",
                &mut self.request_timeout_ms,
            ),
            ("BRAINLOOP_LLM_STALL_TIMEOUT_MS", &mut self.stall_timeout_ms),
            ("BRAINLOOP_LLM_RETRY_BASE_MS", &mut self.retry_base_ms),
            ("BRAINLOOP_LLM_RETRY_MAX_MS", &mut self.retry_max_ms),
            (
                "BRAINLOOP_LLM_MAX_RETRY_WAIT_MS",
                &mut self.max_retry_wait_ms,
            ),
            (
                "BRAINLOOP_LLM_MAX_COMPLETION_TOKENS",
                &mut self.max_completion_tokens,
            ),
            ("BRAINLOOP_LLM_JOB_TOKEN_BUDGET", &mut self.job_token_budget),
            (
                "BRAINLOOP_LLM_DAILY_TOKEN_BUDGET",
                &mut self.daily_token_budget,
            ),
            (
                "BRAINLOOP_LLM_TOKENS_PER_MINUTE",
                &mut self.tokens_per_minute,
            ),
        ];
        for (key, field) in nums {
            if let Some(v) = get(key) {
                *field = num(key, &v)?;
            }
        }
        if let Some(v) = get("BRAINLOOP_LLM_MAX_RETRIES") {
            self.max_retries = u32::try_from(num("BRAINLOOP_LLM_MAX_RETRIES", &v)?)
                .map_err(|_| anyhow::anyhow!("BRAINLOOP_LLM_MAX_RETRIES is too large"))?;
        }
        if let Some(v) = get("BRAINLOOP_LLM_CHECK_MODELS") {
            self.check_models = matches!(v.trim(), "1" | "true" | "yes");
        }
        if let Some(v) = get("BRAINLOOP_LLM_TOOL_CALLING") {
            self.tool_calling = matches!(v.trim(), "1" | "true" | "yes");
        }
        if let Some(v) = get("BRAINLOOP_LLM_STRUCTURED_OUTPUTS") {
            self.structured_outputs = matches!(v.trim(), "1" | "true" | "yes");
        }
        if let Some(v) = get("BRAINLOOP_LLM_REASONING_EFFORT") {
            self.reasoning_effort = Some(v.trim().to_string()).filter(|s| !s.is_empty());
        }
        if let Some(v) = get("BRAINLOOP_LLM_REASONING_FORMAT") {
            self.reasoning_format = Some(v.trim().to_string()).filter(|s| !s.is_empty());
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        if self.model.trim().is_empty() {
            bail!("[llm] model must not be empty");
        }
        let url = reqwest::Url::parse(&self.base_url)
            .map_err(|e| anyhow::anyhow!("[llm] base_url {:?} is not a URL: {e}", self.base_url))?;
        match url.scheme() {
            "https" => {}
            "http" => {
                let host = url.host_str().unwrap_or_default();
                let loopback = host == "localhost"
                    || host
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|a| a.is_loopback());
                if !loopback {
                    bail!(
                        "[llm] base_url {:?} is plain http to a remote host: the API key would travel in clear; use https",
                        self.base_url
                    );
                }
            }
            other => bail!("[llm] base_url scheme {other:?} is not http(s)"),
        }
        if self.stall_timeout_ms == 0
            || self.request_timeout_ms == 0
            || self.connect_timeout_ms == 0
        {
            bail!("[llm] timeouts must be positive");
        }
        if self.max_completion_tokens == 0 {
            bail!("[llm] max_completion_tokens must be positive");
        }
        for (key, v, allowed) in [
            ("reasoning_effort", &self.reasoning_effort, EFFORTS),
            ("reasoning_format", &self.reasoning_format, FORMATS),
        ] {
            if let Some(v) = v {
                if !allowed.contains(&v.as_str()) {
                    bail!("[llm] {key} {v:?} is not one of {}", allowed.join(", "));
                }
            }
        }
        if self.retry_base_ms > self.retry_max_ms {
            bail!("[llm] retry_base_ms must not exceed retry_max_ms");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_remote_http_is_refused() {
        LlmConfig::default().validate().unwrap();
        let mut c = LlmConfig {
            base_url: "http://127.0.0.1:9/v1".into(),
            ..LlmConfig::default()
        };
        c.validate().unwrap();
        c.base_url = "http://api.example.com/v1".into();
        assert!(c.validate().unwrap_err().to_string().contains("clear"));
        c.base_url = "ftp://x".into();
        assert!(c.validate().is_err());
    }

    #[test]
    fn env_overrides() {
        let mut c = LlmConfig::default();
        c.apply_env(&|k: &str| match k {
            "BRAINLOOP_LLM_BASE_URL" => Some("http://localhost:1/v1".into()),
            "BRAINLOOP_LLM_MAX_RETRIES" => Some("2".into()),
            "BRAINLOOP_LLM_STALL_TIMEOUT_MS" => Some("300".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.base_url, "http://localhost:1/v1");
        assert_eq!(c.max_retries, 2);
        assert_eq!(c.stall_timeout_ms, 300);
        let e = c
            .apply_env(&|k: &str| (k == "BRAINLOOP_LLM_TOKENS_PER_MINUTE").then(|| "x".into()))
            .unwrap_err();
        assert!(e.to_string().contains("TOKENS_PER_MINUTE"));
    }
}
