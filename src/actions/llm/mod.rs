//! The LLM actions (issue 9): `generate_file`, `generate_sql`, `explore`, `audit_code`. Each
//! needs the LLM grant; files are reached only through the client's FILE_READ / FILE_WRITE
//! grants (`clients::paths`, `clients::write`). What a model wrote is a side effect only when it
//! is written (a file, a writing SQL script): that asks a human exactly like a shell write,
//! unless a FILE_WRITE grant with `auto` covers the target (see `pending`).

pub(in crate::actions) mod audit;
mod explore;
mod generate_file;
mod generate_sql;
pub(in crate::actions) mod pending;
pub(in crate::actions) mod preview;
mod sql_effect;
pub(in crate::actions) mod staged;

use super::{ActionSpec, JobCtx, Outcome};
use crate::llm::{Answer, JobUsage, JsonSchema, LlmError, Prompt};
use serde_json::{json, Value};

pub fn specs() -> Vec<ActionSpec> {
    vec![
        generate_file::spec(),
        generate_sql::spec(),
        explore::spec(),
        audit::spec(),
    ]
}

/// What `loop`'s block mode reuses: generate_file's target helpers, generate_sql's SQLite rules.
pub(in crate::actions) use generate_file::{current, is_markdown};
pub(in crate::actions) use generate_sql::{judge, run_read_only, run_writing, schema_text};

/// The first string among `keys` (a parameter and its seed 001 alias).
pub(super) fn str_param<'a>(params: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
}

/// One completion for a job, with its usage counted against the job's budget.
pub(super) async fn ask_model(
    ctx: &JobCtx,
    job: &JobUsage,
    prompt: Prompt,
) -> Result<Answer, Outcome> {
    ctx.llm
        .complete(job, &prompt, &ctx.stats, &ctx.cancel)
        .await
        .map_err(llm_failure)
}

/// A structured completion (`Llm::complete_json`): `Some(object)` checked against `schema`
/// when the model was asked with `response_format`, None when the caller must parse
/// `answer.text` itself (no structured outputs).
pub(in crate::actions) async fn ask_structured(
    ctx: &JobCtx,
    job: &JobUsage,
    prompt: Prompt,
    schema: &JsonSchema,
) -> Result<(Option<Value>, Answer), Outcome> {
    ctx.llm
        .complete_json(job, &prompt, schema, &ctx.stats, &ctx.cancel)
        .await
        .map(|s| (s.value, s.answer))
        .map_err(llm_failure)
}

/// How an LLM error ends the job: cancellation runs it again; the rest fail with the message.
pub(super) fn llm_failure(e: LlmError) -> Outcome {
    match e {
        LlmError::Cancelled => Outcome::cancelled(),
        other => Outcome::failed(other.to_string()),
    }
}

/// What every LLM result says about the call.
pub(in crate::actions) fn llm_info(a: &Answer) -> Value {
    json!({
        "model": a.model,
        "prompt_tokens": a.usage.prompt_tokens,
        "completion_tokens": a.usage.completion_tokens,
        "reasoning_tokens": a.usage.reasoning_tokens(),
        "reasoning": (!a.reasoning.is_empty()).then(|| reasoning_text(&a.reasoning)),
        "usage_estimated": a.usage_estimated,
        "finish_reason": a.finish_reason,
        "attempts": a.attempts,
        "latency_ms": a.latency_ms,
        "first_token_ms": a.first_token_ms,
    })
}

/// Characters of reasoning kept in a result (`brainloop show JOB --reasoning` prints them).
pub const REASONING_KEPT: usize = 32 * 1024;

/// The reasoning as a result keeps it: at most [`REASONING_KEPT`] characters.
fn reasoning_text(r: &str) -> String {
    if r.chars().count() <= REASONING_KEPT {
        return r.to_string();
    }
    let kept: String = r.chars().take(REASONING_KEPT).collect();
    format!("{kept}\n[... reasoning cut at {REASONING_KEPT} characters]")
}

/// The inferred permission set of JS/TS code (seed 002), or None for other languages.
pub(super) async fn js_permissions(
    ctx: &JobCtx,
    path: &std::path::Path,
    code: &str,
) -> Option<Value> {
    let lang = match crate::actions::readers::code::language_of(path)? {
        "javascript" => crate::infer::Lang::Js,
        "typescript" => crate::infer::Lang::Ts,
        _ => return None,
    };
    let mapping = crate::infer::McpPermissions::load(ctx.config.mcp_permissions.as_deref()).ok()?;
    let code = code.to_string();
    let r = tokio::task::spawn_blocking(move || crate::infer::infer_isolated(code, lang, mapping))
        .await
        .ok()?
        .ok()?;
    Some(json!({
        "permission_set": r.permission_set,
        "confidence": r.confidence,
        "detected_patterns": r.detected_patterns,
        "requires_validation": r.requires_validation,
    }))
}
