//! Asking a human (DESIGN §3 "Approvals", issue 18): the one path every action takes when it
//! needs a human — a bash command asked up front, an overlay change set, generated content
//! (`generate_file` / `generate_sql`), a `run_code` gate, and the re-ask of an interrupted
//! approved job. It owns:
//! - the order: the job's snapshot (`queue.command_hash`, what the approval must match) is bound
//!   *first*, then the validation is created — a validation never exists that no snapshot
//!   matches, and a snapshot write that fails ends the job `failed` (never "pending forever");
//! - the per-client cap (`approvals::MAX_PENDING_PER_CLIENT`): past it the job ends `failed`
//!   with the cap named, in every caller alike (the re-ask included);
//! - the `hil_requests` counter and the fields every pending result has.
//!
//! What the human reads (command, reasons, previews, diffs) is the caller's. Asking produces no
//! evidence: only the human's answer does (`bash::evidence`).

use crate::actions::{JobCtx, Outcome};
use crate::bash::approvals::{self, Validation};
use crate::db::output::JobStatus;
use crate::db::{write_tx, Stores};
use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

/// What a job asks a human about.
#[derive(Debug, Clone)]
pub struct Request {
    /// The validation's id (`new_id`): callers may name it in the reasons they show.
    pub id: String,
    /// What the human reads as "the command".
    pub command: String,
    /// What the approval binds to (command hash, effect hash, content hash, gate hash).
    pub bound_hash: String,
    /// The policy shown (`ask`, `ask_warning`, `always_ask`).
    pub policy: String,
    pub risk_score: Option<f64>,
    pub permission_set: String,
    /// Recorded in the snapshot when the action has one (execute_bash).
    pub workdir: Option<String>,
    pub reasons: Vec<String>,
}

/// Binds the job's snapshot to the request, then creates its validation. An error means the
/// job must not wait: its message names the cause (the per-client cap, a database failure).
pub fn create_blocking(
    stores: &Stores,
    job_id: i64,
    client_id: &str,
    r: &Request,
    ttl_ms: u64,
) -> Result<String> {
    let id = r.id.clone();
    let (hash, set, wd) = (&r.bound_hash, &r.permission_set, &r.workdir);
    stores
        .lifecycle
        .with(|c| {
            Ok(write_tx(c, |tx| {
                tx.execute(
                    "UPDATE queue SET command_hash = ?2, permission_set = ?3,
                         workdir = coalesce(?4, workdir) WHERE job_id = ?1",
                    rusqlite::params![job_id, hash, set, wd],
                )
            })?)
        })
        .context("cannot record the request in the job's snapshot")?;
    let now = crate::time::now_ms();
    let v = Validation {
        id: id.clone(),
        job_id,
        client_id: client_id.to_string(),
        command: Some(r.command.clone()),
        command_hash: Some(r.bound_hash.clone()),
        policy: Some(r.policy.clone()),
        risk_score: r.risk_score,
        permission_set: Some(r.permission_set.clone()),
        reasons: Some(json!(r.reasons).to_string()),
        status: "pending".into(),
        requested_at: now,
        decided_at: None,
        expires_at: Some(now + ttl_ms as i64),
    };
    stores.output.with(|c| approvals::create(c, &v))?;
    Ok(id)
}

/// A fresh validation id (128 random bits), or the failed outcome.
pub fn new_id() -> Result<String, Outcome> {
    approvals::new_id().map_err(|e| Outcome::failed(format!("{e:#}")))
}

/// Asks from a running job; returns the validation id and the common pending-result fields
/// (`status`, `validation_id`, `command`, `policy`, `risk_score`, `permission_set`, `reasons`,
/// `message`) for the caller to extend. Err: the job's final outcome (`failed`, cause named).
pub async fn ask(ctx: &JobCtx, r: Request) -> Result<(String, Map<String, Value>), Outcome> {
    let asker = Asker {
        stores: &ctx.stores,
        stats: &ctx.stats,
        job_id: ctx.job_id,
        client_id: &ctx.client_id,
        ttl_ms: ctx.config.validation_ttl_ms,
    };
    ask_as(&asker, r).await
}

/// The job that asks, by its ids and stores (what [`ask`] reads of a job context).
#[derive(Clone, Copy)]
pub struct Asker<'a> {
    pub stores: &'a std::sync::Arc<Stores>,
    pub stats: &'a crate::stats::Stats,
    pub job_id: i64,
    pub client_id: &'a str,
    /// The validation expires after this long (`validation_ttl_ms`).
    pub ttl_ms: u64,
}

/// [`ask`] for a caller that holds the job's ids and stores rather than its context.
pub async fn ask_as(a: &Asker<'_>, r: Request) -> Result<(String, Map<String, Value>), Outcome> {
    let (stores, job, client, ttl) = (
        std::sync::Arc::clone(a.stores),
        a.job_id,
        a.client_id.to_string(),
        a.ttl_ms,
    );
    let r2 = r.clone();
    let id = tokio::task::spawn_blocking(move || create_blocking(&stores, job, &client, &r2, ttl))
        .await
        .map_err(|e| Outcome::failed(format!("asking a human: {e}")))?
        .map_err(|e| Outcome::failed(format!("cannot ask a human, so nothing ran: {e:#}")))?;
    a.stats.incr("hil_requests", 1.0);
    let mut m = Map::new();
    m.insert("status".into(), json!("pending_validation"));
    m.insert("validation_id".into(), json!(id));
    m.insert("command".into(), json!(r.command));
    m.insert("policy".into(), json!(r.policy));
    m.insert("risk_score".into(), json!(r.risk_score));
    m.insert("permission_set".into(), json!(r.permission_set));
    m.insert("reasons".into(), json!(r.reasons));
    m.insert(
        "message".into(),
        json!(format!(
            "waiting for a human: brainloop approve {id} (or deny)"
        )),
    );
    Ok((id, m))
}

/// The `pending_validation` outcome with the given result fields.
pub fn pending(result: Map<String, Value>) -> Outcome {
    Outcome {
        status: JobStatus::PendingValidation,
        result: Some(Value::Object(result)),
        error: None,
    }
}
