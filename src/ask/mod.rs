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
//!
//! Submodules: `validations` (the stored requests and the operator's decision rows),
//! `answers` (consuming decisions: resume or end the waiting job, expiry, the re-ask after a
//! crash). What an answer means for an action beyond that (learning, overrides, discarding a
//! change set) is the action's `on_decision` entry, called by `answers::collect`.

pub mod answers;
pub mod epoch;
pub mod evidence;
pub mod fleet;
pub mod learned;
pub mod validations;

use crate::db::output::{JobStatus, Outcome};
use crate::db::Stores;
use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use validations::Validation;

/// `decided_by` of the decisions a reviewer makes (`reviewer: COMMAND`).
pub const REVIEWER_PREFIX: &str = "reviewer:";

/// Who decided: only a human's decision is learning evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The operator, through the CLI or the review screen.
    Human,
    /// The `[reviewer]` command (`decided_by` starts with [`REVIEWER_PREFIX`]).
    Reviewer,
}

impl By {
    /// Who wrote a decision row, from its `decided_by`.
    pub fn of(decided_by: &str) -> By {
        if decided_by.starts_with(REVIEWER_PREFIX) {
            By::Reviewer
        } else {
            By::Human
        }
    }
}

/// What a consumed approval carries into the resumed job.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovedRun {
    pub validation_id: String,
    /// What the approval is bound to (command, effect, content or gate hash).
    pub command_hash: String,
    /// Who approved (a reviewer's approval is never learning evidence).
    pub by: By,
}

impl ApprovedRun {
    pub fn by_human(&self) -> bool {
        self.by == By::Human
    }
}

/// The job that asks, by its ids and stores (built by `job::JobCtx::asker`, or by the command
/// path from its own job).
#[derive(Clone, Copy)]
pub struct Asker<'a> {
    pub stores: &'a Arc<Stores>,
    pub stats: &'a crate::stats::Stats,
    pub job_id: i64,
    pub client_id: &'a str,
    /// The validation expires after this long (`validation_ttl_ms`).
    pub ttl_ms: u64,
}

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
        .with(|c| crate::db::lifecycle::bind_request(c, job_id, hash, set, wd.as_deref()))
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
    stores.output.with(|c| validations::create(c, &v))?;
    Ok(id)
}

/// A fresh validation id (128 random bits), or the failed outcome.
pub fn new_id() -> Result<String, Outcome> {
    validations::new_id().map_err(|e| Outcome::failed(format!("{e:#}")))
}

/// Asks from a running job; returns the validation id and the common pending-result fields
/// ([`pending_fields`]) for the caller to extend. Err: the job's final outcome (`failed`, cause
/// named).
pub async fn ask(asker: &Asker<'_>, r: Request) -> Result<(String, Map<String, Value>), Outcome> {
    let (stores, job, client, ttl) = (
        Arc::clone(asker.stores),
        asker.job_id,
        asker.client_id.to_string(),
        asker.ttl_ms,
    );
    let r2 = r.clone();
    let id = tokio::task::spawn_blocking(move || create_blocking(&stores, job, &client, &r2, ttl))
        .await
        .map_err(|e| Outcome::failed(format!("asking a human: {e}")))?
        .map_err(|e| cannot_ask(asker.job_id, e))?;
    asker.stats.incr("hil_requests", 1.0);
    Ok((id.clone(), pending_fields(&id, &r)))
}

/// The outcome of a request that could not be recorded: `failed` (nothing ran, cause named) —
/// or, when another process holds a database locked during the shutdown, `cancelled`: the job is
/// requeued and asks at the next start (its overlay, never applied, is discarded and run again)
/// rather than ending failed for a lock that outlived the worker.
fn cannot_ask(job_id: i64, e: anyhow::Error) -> Outcome {
    if crate::shutdown::signalled() && crate::db::is_busy(&e) {
        tracing::warn!(job_id, error = format!("{e:#}"), "cannot record the request during the shutdown (a database is locked): the job runs again at the next start");
        return Outcome::cancelled();
    }
    Outcome::failed(format!("cannot ask a human, so nothing ran: {e:#}"))
}

/// The fields every pending result has (`status`, `validation_id`, `command`, `policy`,
/// `risk_score`, `permission_set`, `reasons`, `message`): the one builder of a pending result,
/// for a job asking and for the re-ask after a crash alike.
pub fn pending_fields(id: &str, r: &Request) -> Map<String, Value> {
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
    m
}

/// The pending result of a call made on the job's behalf (a loop's step, a run_code call), for
/// the caller to extend with where it paused.
pub fn nested(result: Option<Value>) -> Map<String, Value> {
    match result {
        Some(Value::Object(m)) => m,
        other => {
            let mut m = Map::new();
            m.insert("status".into(), json!("pending_validation"));
            m.insert("detail".into(), json!(other));
            m
        }
    }
}

/// The `pending_validation` outcome with the given result fields.
pub fn pending(result: Map<String, Value>) -> Outcome {
    Outcome {
        status: JobStatus::PendingValidation,
        result: Some(Value::Object(result)),
        error: None,
    }
}
