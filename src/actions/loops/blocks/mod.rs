//! Block mode of `loop` (issue 10): the original's propose / audit / refine / commit workflow,
//! with its bugs fixed — commit writes the refined code (no LLM call), sessions end
//! (`committed`, `abandoned`, `expired`), generation runs at most [`propose::PARALLEL`] calls at
//! once, and no lock is held across an LLM call (a session is re-read and updated in one short
//! transaction afterwards, refusing a refinement made from stale code).
//!
//! | file | owns |
//! |---|---|
//! | `state.rs` | the session's JSON state (blocks, versions, claims) and its pure transitions |
//! | `model.rs` | target checks before any token, prompts, one generation, SQLite's verdict |
//! | `propose.rs` | `propose`: checks every target, generates the blocks, creates the session |
//! | `refine.rs` | `refine`: the model improves a block's current code with feedback |
//! | `commit.rs` | `commit`: plan, claim, ask a human or write, resume after approval |
//! | `manage.rs` | `status` (event `session_audit`), `audit` (the model's findings) and `abandon` |
//!
//! Sessions belong to the client that proposed them: another client's session answers exactly
//! like a missing one.

mod commit;
mod manage;
mod model;
mod propose;
mod refine;
pub mod state;

use crate::actions::{JobCtx, Outcome};
use crate::db::sessions::{self as store, Session};
use serde_json::{json, Value};
use state::{Block, State};

/// The `mode` column of block sessions.
pub const MODE: &str = "blocks";

pub async fn run(ctx: &JobCtx, mode: &str, params: &Value) -> Outcome {
    let r = match mode {
        "propose" => propose::run(ctx, params).await,
        "audit" => manage::audit(ctx, params).await,
        "status" => manage::status(ctx, params).await,
        "refine" => refine::run(ctx, params).await,
        "commit" => commit::run(ctx, params).await,
        "abandon" => manage::abandon(ctx, params).await,
        other => Err(Outcome::failed(format!("unknown loop mode {other:?}"))),
    };
    match r {
        Ok(o) | Err(o) => o,
    }
}

fn str_param<'a>(params: &'a Value, key: &str) -> &'a str {
    params.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The answer for a session the client does not own or that does not exist (the same).
fn missing(id: &str) -> Outcome {
    Outcome::failed(format!("no loop session {id:?} for this client"))
}

fn internal(what: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome::failed(format!("{what}: {e:#}"))
}

fn expired_error(id: &str, ttl_ms: u64) -> Outcome {
    Outcome::failed(format!(
        "loop session {id:?} expired (untouched for more than loop_session_ttl_ms = {ttl_ms} ms); nothing was done — propose a new session"
    ))
}

/// Loads the client's block session `id`: missing/foreign, agent sessions and expired ones are
/// refused here (an open session idle past the TTL is marked `expired` on the way).
async fn open_session(ctx: &JobCtx, id: &str) -> Result<(Session, State), Outcome> {
    let s = store::load(&ctx.stores.lifecycle, id, &ctx.client_id)
        .await
        .map_err(|e| internal("cannot read the loop session", e))?
        .ok_or_else(|| missing(id))?;
    if s.mode != MODE {
        return Err(Outcome::failed(format!(
            "loop session {id:?} is an {} session; block modes (status, audit, refine, commit, abandon) do not apply",
            s.mode
        )));
    }
    let ttl = ctx.config.loop_session_ttl_ms;
    let cutoff = crate::time::now_ms() - ttl as i64;
    if s.status == state::EXPIRED
        || (s.status == state::OPEN
            && s.updated_at < cutoff
            && store::expire_one(&ctx.stores.lifecycle, id, MODE, cutoff)
                .await
                .map_err(|e| internal("cannot expire the loop session", e))?)
    {
        return Err(expired_error(id, ttl));
    }
    let st = State::from_value(&s.state).map_err(Outcome::failed)?;
    Ok((s, st))
}

/// Refuses modes that change a session that has ended.
fn require_open(s: &Session) -> Result<(), Outcome> {
    if s.status == state::OPEN {
        Ok(())
    } else {
        Err(Outcome::failed(format!(
            "loop session {:?} is {}; nothing more can be done in it",
            s.session_id, s.status
        )))
    }
}

/// Inside a session update: the session must still be open and not idle past the TTL.
fn still_open(s: &Session, ttl_ms: u64) -> Result<(), String> {
    if s.status != state::OPEN {
        return Err(format!("loop session {:?} is {}", s.session_id, s.status));
    }
    if s.updated_at < crate::time::now_ms() - ttl_ms as i64 {
        return Err(format!("loop session {:?} expired", s.session_id));
    }
    Ok(())
}

/// The block's commit claim if the claiming job is still live (an unreadable log counts as live).
fn live_claim(tx: &rusqlite::Connection, b: &Block) -> Option<i64> {
    b.committing
        .filter(|job| store::job_live(tx, *job).unwrap_or(true))
}

/// A telemetry event in metadata.db; a failure is logged only.
async fn event(ctx: &JobCtx, kind: &'static str, detail: Value) {
    let job = ctx.job_id;
    let res = ctx
        .stores
        .metadata
        .call(move |c| crate::db::metadata::insert_event(c, kind, Some(job), &detail))
        .await;
    if let Err(e) = res {
        tracing::warn!(
            kind,
            error = format!("{e:#}"),
            "cannot write the session event"
        );
    }
}

/// A block as answers show it (`history`: every version with its feedback).
fn block_json(b: &Block, with_history: bool) -> Value {
    let mut v = json!({
        "id": b.id,
        "type": b.kind,
        "target": b.target,
        "overwrite": b.overwrite,
        "description": b.description,
        "code": b.code,
        "iterations": b.iterations,
        "status": b.status,
    });
    if let Some(sql) = &b.sql {
        v["sql"] = sql.clone();
    }
    if let Some(c) = &b.committed {
        v["committed"] = c.clone();
    }
    if let Some(j) = b.committing {
        v["committing_job"] = json!(j);
    }
    if with_history {
        v["history"] = json!(b.history);
    }
    v
}
