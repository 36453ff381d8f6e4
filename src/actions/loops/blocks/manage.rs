//! `audit {session_id, block_id?}` — the block(s) with code, iterations, every version with its
//! feedback, and status (event `session_audit`; reading does not touch the session's idle
//! clock) — and `abandon {session_id}`, which ends an open session `abandoned`.

use super::state;
use super::{block_json, event, internal, missing, open_session, str_param};
use crate::actions::{JobCtx, Outcome};
use crate::db::sessions as store;
use serde_json::{json, Value};

pub async fn audit(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
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
