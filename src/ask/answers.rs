//! Resuming jobs that wait for a human (DESIGN §3 "Approvals"). On every wake-up of
//! command_security.db (and on the poll tick) the supervisor:
//! - consumes each new approval row exactly once, acting on it only if its validation is still
//!   pending and unexpired and names the command hash recorded in the job's claimed snapshot;
//!   `approve` resumes the job (it runs that snapshot, without asking again), `deny` ends it
//!   `denied`, `--always` also sets the registry override. Anything else is consumed and ignored;
//! - then expires pending validations past their deadline (their jobs end `expired`: fail closed).
//!
//! A denial or expiry never says "nothing happened" about a job whose change set is already in
//! the workspace (`db::applies`, issue 34): [`late`] ends it with the apply's outcome or `failed`,
//! naming the late answer and `brainloop undo`; a re-ask of such a job says it is ALREADY applied.
//!
//! What an answer means beyond resuming or ending the job (overrides, learning, evidence,
//! discarding a change set) is the waiting action's business: `collect` hands every answer and
//! every expiry to the `on_decision` callback (the registry routes it to the action's spec).

use super::validations::{self, Decision, Validation};
use super::{ApprovedRun, By};
use crate::db::applies;
use crate::db::lifecycle::{self, status};
use crate::db::output::{self, JobStatus, ResultRow};
use crate::db::Stores;
use anyhow::Result;
use rusqlite::OptionalExtension;
use serde_json::json;

/// What the supervisor must do with a waiting job.
#[derive(Debug)]
pub enum Resume {
    Run {
        job_id: i64,
        priority: i64,
        /// The job's client (the queue snapshot's): its slot share.
        client_id: String,
        approval: ApprovedRun,
    },
    End(ResultRow),
}

struct Waiting {
    status: String,
    command_hash: Option<String>,
    priority: i64,
    action: Option<String>,
    client_id: String,
    attempts: u32,
}

fn waiting(stores: &Stores, job_id: i64) -> Result<Option<Waiting>> {
    stores.lifecycle.with(|c| {
        Ok(c.query_row(
            "SELECT p.status, q.command_hash, q.priority, q.action, q.client_id, p.attempts
             FROM processed_log p JOIN queue q USING(job_id) WHERE p.job_id = ?1",
            [job_id],
            |r| {
                Ok(Waiting {
                    status: r.get(0)?,
                    command_hash: r.get(1)?,
                    priority: r.get(2)?,
                    action: r.get(3)?,
                    client_id: r.get(4)?,
                    attempts: r.get::<_, i64>(5)?.max(0) as u32,
                })
            },
        )
        .optional()?)
    })
}

fn end_row(
    job_id: i64,
    w: &Waiting,
    status: JobStatus,
    error: String,
    result: serde_json::Value,
) -> ResultRow {
    ResultRow {
        job_id,
        action: w.action.clone(),
        client_id: w.client_id.clone(),
        status,
        result: Some(result.to_string()),
        error: Some(error),
        attempts: w.attempts,
        duration_ms: None,
        started_at: None,
        finished_at: Some(crate::time::now_ms()),
    }
}

fn ignore(stores: &Stores, row_id: i64, validation_id: &str, why: &str, now: i64) -> Result<()> {
    tracing::warn!(validation_id, why, "approval ignored");
    stores
        .security
        .with(|c| validations::consume(c, row_id, now))?;
    Ok(())
}

/// An action's consequences of an answer (its `ActionSpec::on_decision`).
pub type OnDecision = fn(&Stores, &Answer) -> Result<()>;

/// An answer (or the expiry) as the waiting action's `on_decision` sees it.
pub struct Answer<'a> {
    pub validation: &'a Validation,
    /// The waiting job's action (`run_code` and `loop` jobs ask about commands too).
    pub action: Option<&'a str>,
    /// What the validation is bound to (the job's snapshot hash).
    pub bound_hash: &'a str,
    pub what: Answered<'a>,
    /// The worker's data dir and the operator's path lists (for `approve --learn`).
    pub data_dir: &'a std::path::Path,
    pub protected: &'a crate::permset::PathLists,
    pub now: i64,
}

/// What happened to the validation.
pub enum Answered<'a> {
    Decided {
        decision: Decision,
        by: By,
        /// The decision row's `decided_by` (who, as written).
        decided_by: &'a str,
        /// `approve --learn`.
        learn: bool,
    },
    /// Nobody answered in time.
    Expired,
    /// The operator cancelled the waiting job (`brainloop cancel`): nothing runs; like an
    /// expiry, no evidence either way.
    Cancelled,
}

/// How to ask again after an expiry (issue 22): nothing is re-run by itself.
fn resubmit_hint(w: &Waiting) -> String {
    format!(
        "To ask again, submit a new {} job with the same params (e.g. `brainloop enqueue {} --params '<the same JSON>' --client {}`): a human is asked again (`validation_ttl_ms` to answer)",
        w.action.as_deref().unwrap_or("job of the same action"),
        w.action.as_deref().unwrap_or("ACTION"),
        w.client_id
    )
}

/// Expiries and new approvals, as actions for the supervisor. `protected`: the operator's
/// `protected_paths` and `data_paths` (for `approve --learn`); `on_decision`: the waiting
/// action's consequences.
pub fn collect(
    stores: &Stores,
    data_dir: &std::path::Path,
    protected: &crate::permset::PathLists,
    on_decision: &dyn Fn(&Answer) -> Result<()>,
) -> Result<Vec<Resume>> {
    let now = crate::time::now_ms();
    let mut out = Vec::new();
    let rows = stores.security.with(|c| validations::unconsumed(c))?;
    for a in rows {
        let Some(decision) = a.decision else {
            ignore(stores, a.row_id, &a.validation_id, "unknown decision", now)?;
            continue;
        };
        let v: Option<Validation> = stores
            .output
            .with(|c| validations::get(c, &a.validation_id))?;
        let Some(v) = v else {
            ignore(
                stores,
                a.row_id,
                &a.validation_id,
                "no such validation",
                now,
            )?;
            continue;
        };
        if v.status != "pending" {
            ignore(
                stores,
                a.row_id,
                &v.id,
                &format!("validation already {} (replayed approval)", v.status),
                now,
            )?;
            continue;
        }
        // A decision made before the deadline counts even if the worker sees it after.
        if validations::too_late(&v, a.created_at) {
            ignore(stores, a.row_id, &v.id, "validation expired", now)?;
            continue;
        }
        let Some(w) = waiting(stores, v.job_id)? else {
            ignore(stores, a.row_id, &v.id, "job not found", now)?;
            continue;
        };
        if w.status != status::PENDING_VALIDATION
            || w.command_hash.is_none()
            || w.command_hash != v.command_hash
        {
            ignore(
                stores,
                a.row_id,
                &v.id,
                "the job's snapshot does not match this validation",
                now,
            )?;
            continue;
        }
        let hash = v.command_hash.clone().unwrap_or_default();
        let runs = decision.runs();
        // A denial cannot take back a change set already in the workspace (issue 34).
        let late_end = if runs {
            None
        } else {
            late(
                stores,
                v.job_id,
                &w,
                &v,
                &format!("denied by {}", a.decided_by),
            )?
        };
        stores.output.with(|c| {
            validations::set_status(c, &v.id, if runs { "approved" } else { "denied" }, now)
        })?;
        let by = By::of(&a.decided_by);
        on_decision(&Answer {
            validation: &v,
            action: w.action.as_deref(),
            bound_hash: &hash,
            what: Answered::Decided {
                decision,
                by,
                decided_by: &a.decided_by,
                learn: a.learn,
            },
            data_dir,
            protected,
            now,
        })?;
        if runs {
            stores
                .lifecycle
                .with(|c| lifecycle::resume_validated(c, v.job_id))?;
            out.push(Resume::Run {
                job_id: v.job_id,
                priority: w.priority,
                client_id: w.client_id.clone(),
                approval: ApprovedRun {
                    validation_id: v.id.clone(),
                    command_hash: hash,
                    by,
                },
            });
        } else if let Some(end) = late_end {
            out.push(Resume::End(end));
        } else {
            out.push(Resume::End(end_row(
                v.job_id,
                &w,
                JobStatus::Denied,
                format!("denied by {}{}", a.decided_by, a.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()),
                json!({"status": "denied", "validation_id": v.id, "command": v.command, "decided_by": a.decided_by, "reason": a.reason}),
            )));
        }
        // Consumed last: a crash before this line re-reads the row, finds the validation decided,
        // and ignores it; recovery then re-asks the job (never runs it unapproved).
        stores
            .security
            .with(|c| validations::consume(c, a.row_id, now))?;
    }
    // Expiry after the decisions: what nobody answered in time fails closed.
    out.extend(expire(stores, data_dir, protected, on_decision, now)?);
    Ok(out)
}

/// The jobs whose validations expired unanswered, ended (see [`collect`]).
fn expire(
    stores: &Stores,
    data_dir: &std::path::Path,
    protected: &crate::permset::PathLists,
    on_decision: &dyn Fn(&Answer) -> Result<()>,
    now: i64,
) -> Result<Vec<Resume>> {
    let mut out = Vec::new();
    for v in stores.output.with(|c| validations::expire(c, now))? {
        if let Some(w) = waiting(stores, v.job_id)? {
            if w.status == status::PENDING_VALIDATION {
                let late_end = late(stores, v.job_id, &w, &v, "expired unanswered")?;
                on_decision(&Answer {
                    validation: &v,
                    action: w.action.as_deref(),
                    bound_hash: v.command_hash.as_deref().unwrap_or_default(),
                    what: Answered::Expired,
                    data_dir,
                    protected,
                    now,
                })?;
                if let Some(end) = late_end {
                    out.push(Resume::End(end));
                    continue;
                }
                out.push(Resume::End(end_row(
                    v.job_id,
                    &w,
                    JobStatus::Expired,
                    format!(
                        "validation {} was not answered in time; nothing ran. {}",
                        v.id,
                        resubmit_hint(&w)
                    ),
                    json!({
                        "status": "expired",
                        "validation_id": v.id,
                        "command": v.command,
                        "resubmit": resubmit_hint(&w),
                    }),
                )));
            }
        }
    }
    Ok(out)
}

/// The operator cancelled job `job_id`, which waits for a human (`brainloop cancel`, the
/// `db::cancels` row given as `result` / `error`): its pending validation is closed `cancelled`
/// (an answer after this is ignored as for any decided validation), the waiting action's
/// `on_decision` hears it (a change set waiting to be applied is discarded), and the job's end is
/// returned — `cancelled`, or, if its change set already reached the workspace, what [`late`]
/// says. None: the job no longer waits (the caller looks again later).
#[allow(clippy::too_many_arguments)]
pub fn cancel_waiting(
    stores: &Stores,
    job_id: i64,
    result: serde_json::Value,
    error: String,
    data_dir: &std::path::Path,
    protected: &crate::permset::PathLists,
    on_decision: &dyn Fn(&Answer) -> Result<()>,
    now: i64,
) -> Result<Option<ResultRow>> {
    let Some(w) = waiting(stores, job_id)? else {
        return Ok(None);
    };
    if w.status != status::PENDING_VALIDATION {
        return Ok(None);
    }
    let latest = stores
        .output
        .with(|c| validations::latest_of_job(c, job_id))?;
    if let Some(v) = latest.filter(|v| v.status == "pending") {
        let late_end = late(stores, job_id, &w, &v, "cancelled by the operator")?;
        stores
            .output
            .with(|c| validations::set_status(c, &v.id, "cancelled", now))?;
        on_decision(&Answer {
            validation: &v,
            action: w.action.as_deref(),
            bound_hash: v.command_hash.as_deref().unwrap_or_default(),
            what: Answered::Cancelled,
            data_dir,
            protected,
            now,
        })?;
        if late_end.is_some() {
            return Ok(late_end);
        }
    }
    Ok(Some(end_row(
        job_id,
        &w,
        JobStatus::Cancelled,
        error,
        result,
    )))
}

/// The end of a waiting job whose change set is already in the workspace (`db::applies`: applied,
/// or being applied when the worker stopped) when its request is denied or expires (`what`):
/// never `denied` / `expired` "nothing ran". An `execute_bash` job whose apply completed ends
/// with the apply's outcome (its status, `applied`, `undo`); any other ends `failed`, saying the
/// change set stays in the workspace. Either way the result names the late answer
/// (`late_answer`) and how to take the change set back (`brainloop undo`). None: nothing of the
/// job's was applied; the answer means what it says.
fn late(
    stores: &Stores,
    job_id: i64,
    w: &Waiting,
    v: &Validation,
    what: &str,
) -> Result<Option<ResultRow>> {
    let Some(ap) = stores.lifecycle.with(|c| applies::open_of(c, job_id))? else {
        return Ok(None);
    };
    let said = format!(
        "{what} (validation {}) after the change set{} had been {} — the answer undid nothing; `brainloop undo {job_id}` takes it back",
        v.id,
        ap.validation_id
            .as_deref()
            .map(|x| format!(" approved in validation {x}"))
            .unwrap_or_default(),
        if ap.applied() { "applied" } else { "partly applied (the worker stopped while applying it)" },
    );
    tracing::warn!(job_id, validation_id = %v.id, "{said}");
    let stored = ap
        .outcome()
        .filter(|_| ap.applied() && w.action.as_deref() == Some("execute_bash"));
    let (status, mut result, error) = match stored {
        Some(o) => (o.status, o.result.unwrap_or_else(|| json!({})), o.error),
        None => (
            JobStatus::Failed,
            json!({"status": "applied_before_answer", "validation_id": v.id, "command": v.command}),
            Some(said.clone()),
        ),
    };
    if let Some(r) = result.as_object_mut() {
        r.insert("late_answer".into(), json!(said));
    }
    let mut row = end_row(job_id, w, status, error.unwrap_or_default(), result);
    if row.error.as_deref() == Some("") {
        row.error = None;
    }
    Ok(Some(row))
}

/// Asks again for a job that had been approved but did not finish (crash or shutdown while it
/// ran, or between approval and start): a fresh validation through the one asking path
/// (`crate::ask`), the job back to waiting. Err: it cannot wait (the client is at its cap of
/// pending validations, or a database failed) — the caller ends the job `failed` with it.
pub fn reask(stores: &Stores, job_id: i64, previous: &Validation, ttl_ms: u64) -> Result<String> {
    let mut reasons: Vec<String> = previous
        .reasons
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    reasons.insert(
        0,
        format!(
            "asked again: the approved run (validation {}) was interrupted before it finished",
            previous.id
        ),
    );
    // Never the same diff as if nothing had happened (issue 34): say what is already there.
    if let Some(ap) = stores.lifecycle.with(|c| applies::open_of(c, job_id))? {
        reasons.insert(
            1,
            format!(
                "the change set shown is ALREADY {} in the workspace: approving lets the job go on; denying undoes nothing (`brainloop undo {job_id}` does)",
                if ap.applied() { "applied" } else { "partly applied" }
            ),
        );
    }
    let request = super::Request {
        id: validations::new_id()?,
        command: previous.command.clone().unwrap_or_default(),
        bound_hash: previous.command_hash.clone().unwrap_or_default(),
        policy: previous.policy.clone().unwrap_or_else(|| "ask".into()),
        risk_score: previous.risk_score,
        permission_set: previous.permission_set.clone().unwrap_or_default(),
        workdir: None,
        reasons,
    };
    let id = super::create_blocking(stores, job_id, &previous.client_id, &request, ttl_ms)?;
    let result = serde_json::Value::Object(super::pending_fields(&id, &request));
    stores
        .output
        .with(|c| output::mark_pending_validation(c, job_id, &result.to_string()))?;
    stores
        .lifecycle
        .with(|c| lifecycle::wait_for_validation(c, job_id))?;
    Ok(id)
}
