//! Start-up reconciliation of claims left by a previous run (crash, kill -9, power loss):
//!
//! - a job with a final result in output.db is marked done — it never runs again — and its
//!   audit row, lost with the lifecycle transaction that should have closed the claim, is
//!   staged again (`db::audit_outbox`);
//! - a job that was running when the worker died ran one attempt; it runs again until it has
//!   started `max_attempts` times, then ends `interrupted`;
//! - a job the operator cancelled (`db::cancels`) and that has no final result ends `cancelled`
//!   (its pending validation closed `cancelled`), whatever it was doing: never run again;
//! - a job that was only claimed (or cut off by a graceful shutdown) runs again;
//! - a job waiting for a human validation keeps waiting (it is never re-run without approval) —
//!   also when the crash cut the result writer between its two commits (the results row says it
//!   waits for the job's pending validation, the lifecycle row still `running`): the lost
//!   transition is made here ([`cut_before_waiting`]). A pending validation the job never reached
//!   waiting on (the crash came before its results row) is expired: the job runs again and asks
//!   anew, and no validation stays pending for a job that does not wait for it;
//! - a job whose approved run did not finish is asked again, never re-run unapproved — unless
//!   it is an `execute_bash` job whose change set reached the workspace (`db::applies`): that one
//!   is finished by `bash::recover_apply` (applied: its outcome; cut off half-way: the apply
//!   completed or reported), saying so, and never asked again (issue 34: a denial cannot take
//!   back what is in the workspace).

use super::claim::Claimed;
use crate::actions::{permission_set_of, Registry};
use crate::ask::validations;
use crate::db::lifecycle::{self, status};
use crate::db::metadata::AuditRow;
use crate::db::output::{self, JobStatus, ResultRow};
use crate::db::{audit_outbox, cancels, write_tx, Stores};
use anyhow::Result;
use serde::Serialize;
use std::collections::HashSet;

#[derive(Debug, Default, Serialize)]
pub struct Recovered {
    #[serde(skip)]
    pub requeue: Vec<Claimed>,
    pub requeued: usize,
    pub retried_after_crash: usize,
    pub interrupted: usize,
    pub already_done: usize,
    pub pending_validation: usize,
    /// Approved jobs that did not finish: asked again, never re-run unapproved.
    pub asked_again: usize,
    /// Jobs whose change set was applied (or being applied) when the worker stopped: finished
    /// with the apply's outcome, never asked again.
    pub finished_applies: usize,
    /// Jobs `brainloop cancel` named that had not ended: ended `cancelled`, never run again.
    pub cancelled: usize,
}

/// Long because recovery is one pass over the previous run's open claims whose outcomes (done,
/// asked again, claimed again) are committed together, results first: split, that order would
/// be spread over several functions.
pub fn recover(
    stores: &Stores,
    registry: &Registry,
    max_attempts: u32,
    validation_ttl_ms: u64,
) -> Result<Recovered> {
    let open = stores.lifecycle.with(|c| lifecycle::open_jobs(c))?;
    let mut rec = Recovered::default();
    if open.is_empty() {
        return Ok(rec);
    }
    let ids: Vec<i64> = open.iter().map(|j| j.job_id).collect();
    let finals = stores.output.with(|c| output::finals_among(c, &ids))?;
    // `brainloop cancel` requests (`db::cancels`): such a job ends `cancelled` here, whatever it
    // was doing when the worker stopped — it never runs (or is asked about) again.
    let cancelled = stores.security.with(|c| cancels::among(c, &ids))?;
    let mut ended_cancelled = Vec::new();
    let now = crate::time::now_ms();

    let mut done = Vec::new();
    let mut results = Vec::new();
    let mut back_to_claimed = Vec::new();
    let mut reask = Vec::new();
    let mut finished_by_apply = Vec::new();
    let mut waiting = Vec::new();
    let mut orphans = Vec::new();
    for mut j in open {
        let latest = if finals.contains(&j.job_id) {
            None
        } else {
            stores
                .output
                .with(|c| validations::latest_of_job(c, j.job_id))?
        };
        match cut_before_waiting(stores, &j, latest.as_ref())? {
            Some(Cut::Waiting) => {
                j.status = status::PENDING_VALIDATION.to_string();
                waiting.push(j.job_id);
            }
            Some(Cut::Orphan(id)) => orphans.push(id),
            None => {}
        }
        if finals.contains(&j.job_id) {
            done.push(j.job_id);
            rec.already_done += 1;
        } else if let Some(o) = applied_outcome(stores, &j)? {
            results.push(ResultRow {
                job_id: j.job_id,
                action: j.action.clone(),
                client_id: j.client_id.clone(),
                status: o.status,
                result: o.result.map(|r| r.to_string()),
                error: o.error,
                attempts: j.attempts,
                duration_ms: None,
                started_at: None,
                finished_at: Some(now),
            });
            done.push(j.job_id);
            finished_by_apply.push(j.job_id);
            rec.finished_applies += 1;
        } else if cancelled.contains(&j.job_id) {
            let c = stores.security.with(|s| cancels::get(s, j.job_id))?;
            let was = match j.status.as_str() {
                status::PENDING_VALIDATION => "waiting for a human",
                status::RUNNING => "running (the worker stopped meanwhile)",
                _ => "queued",
            };
            results.push(ResultRow {
                job_id: j.job_id,
                action: j.action.clone(),
                client_id: j.client_id.clone(),
                status: JobStatus::Cancelled,
                result: c.as_ref().map(|c| cancels::result_json(c, was).to_string()),
                error: Some(match &c {
                    Some(c) => cancels::error_line(c, was),
                    None => "cancelled by the operator".into(),
                }),
                attempts: j.attempts,
                duration_ms: None,
                started_at: None,
                finished_at: Some(now),
            });
            done.push(j.job_id);
            ended_cancelled.push(j.job_id);
            rec.cancelled += 1;
        } else if let Some(v) = latest.filter(|v| {
            v.status == "approved"
                || (j.status == status::PENDING_VALIDATION && v.status != "pending")
        }) {
            // A human decided, but the job never finished acting on it (a crash, a shutdown
            // cut-off, or a crash between approval and start): a denial or expiry is final;
            // an approval is asked again rather than re-run.
            match v.status.as_str() {
                "denied" | "expired" => {
                    let mut status = if v.status == "denied" {
                        JobStatus::Denied
                    } else {
                        JobStatus::Expired
                    };
                    let mut error = format!("validation {} was {}", v.id, v.status);
                    // Never `denied` with a change set in the workspace (issue 34).
                    if stores
                        .lifecycle
                        .with(|c| crate::db::applies::open_of(c, j.job_id))?
                        .is_some()
                    {
                        status = JobStatus::Failed;
                        error.push_str(&format!(
                            " after the job's change set had been applied (or partly, if the worker stopped while applying it): the answer undid nothing — `brainloop undo {}` takes it back",
                            j.job_id
                        ));
                    }
                    results.push(ResultRow {
                        job_id: j.job_id,
                        action: j.action.clone(),
                        client_id: j.client_id.clone(),
                        status,
                        result: None,
                        error: Some(error),
                        attempts: j.attempts,
                        duration_ms: None,
                        started_at: None,
                        finished_at: Some(now),
                    });
                    done.push(j.job_id);
                }
                _ => {
                    reask.push((j.clone(), v));
                    rec.asked_again += 1;
                }
            }
        } else if j.status == status::PENDING_VALIDATION {
            rec.pending_validation += 1;
        } else if j.status == status::RUNNING && j.attempts >= crash_cap(&j, max_attempts) {
            results.push(ResultRow {
                job_id: j.job_id,
                action: j.action.clone(),
                client_id: j.client_id.clone(),
                status: JobStatus::Interrupted,
                result: None,
                error: Some(format!(
                    "the worker stopped while this job ran, {} time(s); not retried (max_attempts = {})",
                    j.attempts,
                    crash_cap(&j, max_attempts)
                )),
                attempts: j.attempts,
                duration_ms: None,
                started_at: None,
                finished_at: Some(now),
            });
            done.push(j.job_id);
            rec.interrupted += 1;
        } else {
            if j.status == status::RUNNING {
                rec.retried_after_crash += 1;
                back_to_claimed.push(j.job_id);
                results.push(ResultRow {
                    job_id: j.job_id,
                    action: j.action.clone(),
                    client_id: j.client_id.clone(),
                    status: JobStatus::Queued,
                    result: None,
                    error: Some(format!(
                        "attempt {} was cut off by a worker crash; runs again",
                        j.attempts
                    )),
                    attempts: j.attempts,
                    duration_ms: None,
                    started_at: None,
                    finished_at: None,
                });
            }
            rec.requeue.push(Claimed {
                id: j.job_id,
                priority: j.priority,
                not_before: j.not_before,
                client_id: j.client_id.clone(),
            });
        }
    }
    rec.requeued = rec.requeue.len();
    for (j, v) in &reask {
        // A job that cannot wait (its client is at the cap of pending validations) ends failed
        // with the cause: it never stays `pending_validation` with a validation that does not
        // exist.
        if let Err(e) = crate::ask::answers::reask(stores, j.job_id, v, validation_ttl_ms) {
            tracing::warn!(
                job_id = j.job_id,
                error = format!("{e:#}"),
                "cannot ask again"
            );
            results.push(ResultRow {
                job_id: j.job_id,
                action: j.action.clone(),
                client_id: j.client_id.clone(),
                status: JobStatus::Failed,
                result: None,
                error: Some(format!(
                    "the approved run was interrupted and cannot be asked again, so nothing ran: {e:#}"
                )),
                attempts: j.attempts,
                duration_ms: None,
                started_at: None,
                finished_at: Some(now),
            });
            done.push(j.job_id);
            rec.asked_again -= 1;
        }
    }
    // Results first (FULL): an `interrupted` row is the proof; marking done second is idempotent.
    stores.output.with(|c| {
        Ok(write_tx(c, |tx| {
            output::upsert_results(tx, &results)?;
            validations::cancel_pending_of(tx, &ended_cancelled, now)?;
            validations::expire_orphans(tx, &orphans, now)
        })?)
    })?;
    // A final result whose claim is still open was cut off between the result writer's two
    // commits: its audit row went with the lifecycle transaction, so it is staged again here —
    // as is the audit row of a job finished just now from its apply journal (it ran, like any
    // job that reached the finisher).
    let mut audited = finals;
    audited.extend(finished_by_apply);
    audited.extend(ended_cancelled);
    let mut lost_audit = audit_of_cut_off(stores, registry, &done, &audited)?;
    // The waiting transition's audit row went with the same lost commit.
    let all: HashSet<i64> = waiting.iter().copied().collect();
    lost_audit.extend(audit_of_cut_off(stores, registry, &waiting, &all)?);
    stores.lifecycle.with(|c| {
        Ok(write_tx(c, |tx| {
            audit_outbox::stage(tx, &lost_audit)?;
            lifecycle::pending_validation(tx, &waiting)?;
            lifecycle::finish(tx, &done, now)?;
            lifecycle::reclaim_running(tx, &back_to_claimed)
        })?)
    })?;
    Ok(rec)
}

/// How many starts a job cut off by crashes gets: the configuration's `max_attempts`, or more if
/// the job's own retry policy allows more attempts (a crash then costs one of them).
fn crash_cap(j: &lifecycle::OpenJob, max_attempts: u32) -> u32 {
    j.retry
        .as_deref()
        .and_then(|t| crate::retry::Policy::parse(t).ok())
        .map_or(max_attempts, |p| p.max_attempts.max(max_attempts))
}

/// What a crash left between a job's validation and its waiting for it.
#[derive(Debug, PartialEq)]
enum Cut {
    /// The results row says the job waits for its pending validation: only the lifecycle
    /// transition (the result writer's second commit) was lost.
    Waiting,
    /// The job's latest validation is pending but its results row does not wait for it (the
    /// crash came between creating the validation and writing the result): the job runs again
    /// and asks anew, so this one is expired (by its id).
    Orphan(String),
}

/// A job still `claimed`/`running` whose latest validation is pending: which [`Cut`] left it so.
fn cut_before_waiting(
    stores: &Stores,
    j: &lifecycle::OpenJob,
    latest: Option<&validations::Validation>,
) -> Result<Option<Cut>> {
    let Some(v) = latest.filter(|v| v.status == "pending") else {
        return Ok(None);
    };
    if j.status == status::PENDING_VALIDATION {
        return Ok(None);
    }
    let waits_for = stores.output.with(|c| output::waiting_for(c, j.job_id))?;
    Ok(Some(if waits_for.contains(&v.id) {
        Cut::Waiting
    } else {
        Cut::Orphan(v.id.clone())
    }))
}

/// The outcome of a job's change set that reached the workspace before the worker stopped
/// (`bash::recover_apply`: the apply's outcome, or the apply completed now): an `execute_bash`
/// job's, or one of the actions that stage their write as a change set and apply it alone
/// (`generate_file`, a measured `generate_sql`; a loop commit and `run_code` are asked again
/// instead — the commit must still record its blocks and run its SQL, the script must go on —,
/// the re-ask saying the change set is already in the workspace, and a denial then never ends
/// them `denied`).
fn applied_outcome(
    stores: &Stores,
    j: &lifecycle::OpenJob,
) -> Result<Option<crate::db::output::Outcome>> {
    if !matches!(
        j.action.as_deref(),
        Some("execute_bash" | "generate_file" | "generate_sql")
    ) {
        return Ok(None);
    }
    let out = crate::bash::recover_apply(stores, j.job_id)?;
    if let Some(o) = &out {
        tracing::warn!(
            job_id = j.job_id,
            status = o.status.as_str(),
            "the worker stopped in the apply window; the job is finished from its apply journal"
        );
    }
    Ok(out)
}

/// The audit rows of jobs in `done` that already had a final result (see `db::audit_outbox`).
fn audit_of_cut_off(
    stores: &Stores,
    registry: &Registry,
    done: &[i64],
    finals: &HashSet<i64>,
) -> Result<Vec<AuditRow>> {
    let set_of = |a: Option<&str>| permission_set_of(registry, a).map(|s| s.to_string());
    let mut rows = Vec::new();
    for id in done.iter().filter(|id| finals.contains(id)) {
        let row = stores.output.with(|out| {
            stores
                .lifecycle
                .with(|lc| audit_outbox::derive_for_done(out, lc, *id, set_of))
        })?;
        rows.extend(row);
    }
    Ok(rows)
}
