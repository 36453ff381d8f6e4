//! `refine {session_id, block_id, feedback}`: the model improves the block's CURRENT code with
//! the feedback. The session is read, the model asked with no lock held, then the result is
//! applied in one short transaction that re-checks the block (still open, not claimed by a
//! live commit, still the code the model was shown): iterations + 1, the new version appended
//! to the history with its feedback. A refine job run again after a crash answers the version
//! it already stored.

use super::model;
use super::state::{self, Version};
use super::{block_json, internal, live_claim, missing, open_session, require_open, str_param};
use crate::actions::llm::llm_info;
use crate::actions::{JobCtx, Outcome};
use crate::db::sessions as store;
use crate::llm::JobUsage;
use serde_json::{json, Value};

pub async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let (id, block_id, feedback) = (
        str_param(params, "session_id"),
        str_param(params, "block_id"),
        str_param(params, "feedback"),
    );
    let (s, st) = open_session(ctx, id).await?;
    let b = st
        .block(block_id)
        .ok_or_else(|| Outcome::failed(format!("loop session {id:?} has no block {block_id:?}")))?
        .clone();
    if b.history.last().is_some_and(|v| v.job_id == ctx.job_id) && b.iterations > 0 {
        return Ok(Outcome::ok(json!({
            "session_id": id,
            "block": block_json(&b, false),
            "replayed": true,
            "message": "this job had already refined the block (run again after an interruption); nothing was generated again",
        })));
    }
    require_open(&s)?;
    if !b.is_open() {
        return Err(Outcome::failed(format!(
            "block {block_id} is committed; refinement refused (propose a new session to change it)"
        )));
    }
    let claimed = match b.committing {
        Some(job) => ctx
            .stores
            .lifecycle
            .call(move |c| Ok(store::job_live(c, job)?.then_some(job)))
            .await
            .map_err(|e| internal("cannot read the job log", e))?,
        None => None,
    };
    if let Some(job) = claimed {
        return Err(Outcome::failed(format!(
            "block {block_id} is being committed by job {job} (running or waiting for approval); refinement refused"
        )));
    }
    let checked = model::check_target(ctx, &b.kind, &b.target, b.overwrite, false).await?;
    let prompt = model::refine_prompt(
        &b.kind,
        &b.target,
        &checked,
        &b.description,
        b.iterations,
        &b.code,
        feedback,
    );
    let job = JobUsage::default();
    let (code, answer) = model::generate(ctx, &job, prompt, &b.kind, &b.target).await?;
    let verdict = if b.is_sql() {
        Some(model::sql_verdict(ctx, &b.target, &code).await)
    } else {
        None
    };
    let version = Version {
        iteration: b.iterations + 1,
        code,
        feedback: Some(feedback.to_string()),
        job_id: ctx.job_id,
        at: crate::time::now_ms(),
        tokens: answer.usage.total(),
    };
    let (base, bid, ttl) = (
        b.code.clone(),
        block_id.to_string(),
        ctx.config.loop_session_ttl_ms,
    );
    let updated = store::update(&ctx.stores.lifecycle, id, &ctx.client_id, move |tx, s| {
        super::still_open(s, ttl)?;
        let mut st = state::State::from_value(&s.state)?;
        let b = st
            .block_mut(&bid)
            .ok_or_else(|| format!("block {bid} is gone"))?;
        let claim = live_claim(tx, b);
        state::apply_refinement(b, &base, version, claim)?;
        b.sql = verdict;
        let out = b.clone();
        s.state = st.to_value();
        Ok::<_, String>(out)
    })
    .await
    .map_err(|e| internal("cannot save the refinement", e))?
    .ok_or_else(|| missing(id))?
    .map_err(|e| {
        let mut o = Outcome::failed(e);
        o.result = Some(json!({"llm": llm_info(&answer)}));
        o
    })?;
    tracing::info!(
        session_id = id,
        block_id,
        iterations = updated.iterations,
        "loop block refined"
    );
    Ok(Outcome::ok(json!({
        "session_id": id,
        "block": block_json(&updated, false),
        "llm": llm_info(&answer),
        "usage": {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.completion_tokens, "calls": 1},
    })))
}
