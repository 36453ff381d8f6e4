//! `propose {blocks: [{description, type, target, overwrite?}]}`: checks every block's target
//! (before any token), generates the blocks at most [`PARALLEL`] at a time under the job's
//! token budget, and creates the session (mode `blocks`, owned by the job's client). A propose
//! job run again after a crash answers the session it already created.

use super::model::{self, Checked};
use super::state::{self, Block, State, Version};
use super::{block_json, internal, MODE};
use crate::actions::llm::llm_info;
use crate::actions::{JobCtx, Outcome};
use crate::db::sessions::{self as store, Session};
use crate::llm::JobUsage;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

/// LLM calls of one propose in flight at once.
pub const PARALLEL: usize = 4;

struct Spec {
    description: String,
    kind: String,
    target: String,
    overwrite: bool,
}

fn specs(params: &Value) -> Vec<Spec> {
    params["blocks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| Spec {
                    description: b["description"].as_str().unwrap_or_default().to_string(),
                    kind: b["type"].as_str().unwrap_or("code").to_string(),
                    target: b["target"].as_str().unwrap_or_default().to_string(),
                    overwrite: b["overwrite"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn answer(s: &Session, st: &State, llm: Vec<Value>, replayed: bool) -> Value {
    let (mut prompt, mut completion) = (0u64, 0u64);
    for l in &llm {
        prompt += l["prompt_tokens"].as_u64().unwrap_or(0);
        completion += l["completion_tokens"].as_u64().unwrap_or(0);
    }
    let blocks: Vec<Value> = st
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut v = block_json(b, false);
            if let Some(l) = llm.get(i) {
                v["llm"] = l.clone();
            }
            v
        })
        .collect();
    let mut v = json!({
        "session_id": s.session_id,
        "status": s.status,
        "blocks": blocks,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "calls": llm.len()},
    });
    if replayed {
        v["replayed"] = json!(true);
        v["message"] = json!("this job had already created the session (run again after an interruption); nothing was generated again");
    }
    v
}

pub async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let existing = store::load_by_job(&ctx.stores.lifecycle, ctx.job_id, &ctx.client_id, MODE)
        .await
        .map_err(|e| internal("cannot read the loop sessions", e))?;
    if let Some(s) = existing {
        let st = State::from_value(&s.state).map_err(Outcome::failed)?;
        return Ok(Outcome::ok(answer(&s, &st, Vec::new(), true)));
    }
    let specs = specs(params);
    // Every target first: a refused one costs no token.
    let mut checked = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let c = model::check_target(ctx, &s.kind, &s.target, s.overwrite, true)
            .await
            .map_err(|mut o| {
                o.error = Some(format!(
                    "block {} ({}): {}; nothing was generated",
                    i + 1,
                    s.target,
                    o.error.unwrap_or_default()
                ));
                o
            })?;
        checked.push(c);
    }
    let job = JobUsage::default();
    let job = &job;
    // The futures are built first (each owns its prompt), then polled at most PARALLEL at a
    // time, in order; nothing is spawned and no lock is held.
    let calls: Vec<_> = specs
        .iter()
        .zip(checked)
        .enumerate()
        .map(|(i, (s, c))| {
            let prompt = model::propose_prompt(&s.kind, &s.target, &c, &s.description);
            let (kind, target, sql) = (
                s.kind.clone(),
                s.target.clone(),
                matches!(c, Checked::Sql { .. }),
            );
            async move {
                let r = model::generate(ctx, job, prompt, &kind, &target).await;
                let verdict = match &r {
                    Ok((code, _)) if sql => Some(model::sql_verdict(ctx, &target, code).await),
                    _ => None,
                };
                (i, r, verdict)
            }
        })
        .collect();
    let results: Vec<_> = stream::iter(calls).buffered(PARALLEL).collect().await;
    let mut failures = Vec::new();
    let mut cancelled = false;
    let mut blocks = Vec::with_capacity(specs.len());
    let mut llm = Vec::with_capacity(specs.len());
    let now = crate::time::now_ms();
    for ((i, r, verdict), s) in results.into_iter().zip(&specs) {
        match r {
            Ok((code, a)) => {
                llm.push(llm_info(&a));
                blocks.push(Block {
                    id: format!("b{}", i + 1),
                    description: s.description.clone(),
                    kind: s.kind.clone(),
                    target: s.target.clone(),
                    overwrite: s.overwrite,
                    code: code.clone(),
                    iterations: 0,
                    status: state::OPEN.into(),
                    history: vec![Version {
                        iteration: 0,
                        code,
                        feedback: None,
                        job_id: ctx.job_id,
                        at: now,
                        tokens: a.usage.total(),
                    }],
                    committing: None,
                    committed: None,
                    sql: verdict,
                });
            }
            Err(o) => {
                cancelled |= o.status == crate::db::output::JobStatus::Cancelled;
                failures.push(format!("block {}: {}", i + 1, o.error.unwrap_or_default()));
            }
        }
    }
    if cancelled {
        return Err(Outcome::cancelled());
    }
    if !failures.is_empty() {
        return Err(Outcome::failed(format!(
            "no session was created: {}",
            failures.join("; ")
        )));
    }
    let st = State { blocks };
    let session = Session {
        session_id: store::new_id(MODE).map_err(|e| internal("no session id", e))?,
        job_id: Some(ctx.job_id),
        client_id: ctx.client_id.clone(),
        mode: MODE.into(),
        status: state::OPEN.into(),
        state: st.to_value(),
        created_at: now,
        updated_at: now,
    };
    store::save(&ctx.stores.lifecycle, &session)
        .await
        .map_err(|e| internal("cannot save the loop session", e))?;
    tracing::info!(session_id = %session.session_id, blocks = st.blocks.len(), "loop session proposed");
    Ok(Outcome::ok(answer(&session, &st, llm, false)))
}
