//! `status {session_id, block_id?}` — the block(s) with code, iterations, every version with its
//! feedback, and status (event `session_audit`; reading does not touch the session's idle
//! clock; no LLM call) —, `audit {session_id, block_id?}` — the model audits each block's
//! current code, findings in `audit_code`'s schema (issue 51; the session is not changed) — and
//! `abandon {session_id}`, which ends an open session `abandoned`.

use super::state;
use super::{block_json, event, internal, missing, open_session, str_param};
use crate::actions::llm::audit::review;
use crate::actions::llm::llm_info;
use crate::actions::{JobCtx, Outcome};
use crate::db::sessions as store;
use crate::llm::JobUsage;
use serde_json::{json, Value};

/// The model's audit of the block(s): per block its findings (audit_code's schema), the
/// Markdown rendered from them, and the call's usage.
pub async fn audit(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let id = str_param(params, "session_id");
    let block_id = params.get("block_id").and_then(Value::as_str);
    let (s, st) = open_session(ctx, id).await?;
    let chosen: Vec<&state::Block> = match block_id {
        Some(b) => vec![st
            .block(b)
            .ok_or_else(|| Outcome::failed(format!("loop session {id:?} has no block {b:?}")))?],
        None => st.blocks.iter().collect(),
    };
    let job = JobUsage::default();
    let mut out = Vec::new();
    for b in chosen {
        if b.code.trim().is_empty() {
            out.push(json!({"id": b.id, "audit": null, "findings": null, "why": "the block has no code"}));
            continue;
        }
        let focus = format!(
            "Audit this block against what it must do: {}. Identify bugs, vulnerabilities, inefficiencies and violations of best practices.",
            b.description
        );
        let name = std::path::Path::new(&b.target)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| b.target.clone());
        let (findings, audit, answer) = review(
            ctx,
            &job,
            &name,
            &focus,
            &b.code,
            crate::actions::loops::NAME,
        )
        .await?;
        out.push(json!({
            "id": b.id,
            "iterations": b.iterations,
            "audit": audit,
            "findings": findings.as_ref().map(|v| v["findings"].clone()),
            "llm": llm_info(&answer),
        }));
    }
    event(
        ctx,
        "session_audit",
        json!({"session_id": id, "block_id": block_id, "client_id": ctx.client_id, "session_status": s.status, "llm": true}),
    )
    .await;
    Ok(Outcome::ok(json!({
        "session_id": id,
        "status": s.status,
        "blocks": out,
        "tokens": job.used(),
    })))
}

/// The session's state, no LLM call (what `audit` returned before issue 51).
pub async fn status(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let id = str_param(params, "session_id");
    let block_id = params.get("block_id").and_then(Value::as_str);
    let (s, st) = open_session(ctx, id).await?;
    let blocks: Vec<Value> = match block_id {
        Some(b) => vec![block_json(
            st.block(b).ok_or_else(|| {
                Outcome::failed(format!("loop session {id:?} has no block {b:?}"))
            })?,
            true,
        )],
        None => st.blocks.iter().map(|b| block_json(b, true)).collect(),
    };
    event(
        ctx,
        "session_audit",
        json!({"session_id": id, "block_id": block_id, "client_id": ctx.client_id, "session_status": s.status}),
    )
    .await;
    Ok(Outcome::ok(json!({
        "session_id": id,
        "status": s.status,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "blocks": blocks,
    })))
}

pub async fn abandon(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let id = str_param(params, "session_id");
    open_session(ctx, id).await?;
    let ttl = ctx.config.loop_session_ttl_ms;
    store::update(&ctx.stores.lifecycle, id, &ctx.client_id, move |_, s| {
        super::still_open(s, ttl)?;
        s.status = state::ABANDONED.into();
        Ok::<_, String>(())
    })
    .await
    .map_err(|e| internal("cannot abandon the loop session", e))?
    .ok_or_else(|| missing(id))?
    .map_err(|e| Outcome::failed(format!("{e}; nothing was abandoned")))?;
    event(
        ctx,
        "session_abandon",
        json!({"session_id": id, "client_id": ctx.client_id}),
    )
    .await;
    tracing::info!(session_id = id, "loop session abandoned");
    Ok(Outcome::ok(
        json!({"session_id": id, "status": state::ABANDONED}),
    ))
}
