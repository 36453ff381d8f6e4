//! `brainloop cancel ID` in the running worker (which jobs are cancelled is `db::cancels`'s):
//! on every approvals pass (a write to command_security.db, or the poll) each open request is
//! acted on by what its job is doing —
//! - queued (in the ready queue): taken out, ended `cancelled`; it never starts;
//! - running: its cancellation token is cancelled (a command is killed, its overlay discarded
//!   unapplied); `Loop::reap` ends it `cancelled` — unless it had already finished, whose real
//!   outcome is kept (a cancel never claims to have stopped what completed);
//! - waiting for a human: `ask::answers::cancel_waiting` (validation closed, change set
//!   discarded), ended `cancelled`;
//! - done: the request is closed with the job's final status.
//!
//! A job claimed after the request ends in the claim (`claim::cancel_unclaimed`); one a crash
//! left open ends in recovery: a cancelled job never runs again.
//!
//! A client withdraws its own job (issue 55): `brainloop mcp`'s `tasks/cancel` (or a producer's
//! raw row) writes input.db `withdrawals`; [`adopt`] turns each row whose `client_id` is the
//! job's — the claimed snapshot's, never what input.db says now — into the worker's own cancel
//! request, `requested_by = client:NAME`, and from there it is the path above. Rows naming
//! another client's job, a job that already ended, or no job at all change nothing.

use super::finisher::Finished;
use super::Loop;
use crate::db::cancels::{self, Cancel};
use crate::db::lifecycle::status;
use crate::db::output::{JobStatus, ResultRow};
use anyhow::Result;
use rusqlite::OptionalExtension;
use std::sync::Arc;

/// What the databases say of a cancelled job.
struct Seen {
    cancel: Cancel,
    /// processed_log status, action, client, attempts (None: not claimed yet).
    open: Option<(String, Option<String>, String, u32)>,
    /// Its final results status, if it has one.
    final_status: Option<String>,
}

fn look(stores: &crate::db::Stores) -> Result<Vec<Seen>> {
    let rows = stores.security.with(|c| cancels::open(c))?;
    let mut out = Vec::with_capacity(rows.len());
    for cancel in rows {
        let id = cancel.job_id;
        let open = stores.lifecycle.with(|c| {
            Ok(c.query_row(
                "SELECT p.status, q.action, q.client_id, p.attempts
                 FROM processed_log p JOIN queue q USING(job_id) WHERE p.job_id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get::<_, i64>(3)?.max(0) as u32,
                    ))
                },
            )
            .optional()?)
        })?;
        let final_status = stores.output.with(|c| {
            Ok(c.query_row(
                &format!(
                    "SELECT status FROM results WHERE job_id = ?1 AND status IN {}",
                    crate::db::output::FINAL_SQL
                ),
                [id],
                |r| r.get::<_, String>(0),
            )
            .optional()?)
        })?;
        out.push(Seen {
            cancel,
            open,
            final_status,
        });
    }
    Ok(out)
}

/// How many withdrawals one pass reads at most (the rest wait for the next pass).
const WITHDRAWALS_BATCH: usize = 256;

/// What [`adopt`] decided for one withdrawal.
#[derive(Debug, PartialEq)]
enum Adopt {
    /// Became a cancel request (new or already there).
    Cancel,
    /// Changes nothing (another client's job, ended, unknown): logged and passed over.
    Ignore(&'static str),
    /// Its job is not claimed yet: read again at the next pass.
    Later,
}

/// Reads the withdrawals above `after` and decides each; returns the new watermark and how
/// many became cancel requests. Blocking (SQLite).
fn adopt_blocking(stores: &crate::db::Stores, after: i64) -> Result<(i64, usize)> {
    use crate::db::input;
    // The last id is read before the batch: stepping past it (below) then skips only malformed
    // rows the read left out, never a row committed between the two reads (a second
    // tasks/cancel 20 ms after a first one was lost so until this order).
    let last = stores.input.with(|c| input::last_withdrawal(c))?;
    let rows = stores
        .input
        .with(|c| input::withdrawals_after(c, after, WITHDRAWALS_BATCH))?;
    let hwm = stores
        .lifecycle
        .with(|c| crate::db::lifecycle::high_water_mark(c))?;
    let mut mark = after;
    let mut adopted = 0;
    for w in &rows {
        let decided = decide(stores, w, hwm)?;
        if decided == Adopt::Later {
            return Ok((mark, adopted));
        }
        match decided {
            Adopt::Cancel => {
                adopted += 1;
                tracing::info!(job_id = w.job_id, client = %crate::shown::line(&w.client_id), "withdrawn by its client: cancelling");
            }
            Adopt::Ignore(why) => {
                tracing::info!(job_id = w.job_id, client = %crate::shown::line(&w.client_id), why, "withdrawal ignored");
            }
            Adopt::Later => {}
        }
        mark = w.id;
    }
    if rows.len() < WITHDRAWALS_BATCH {
        // Malformed raw rows are skipped by the read: step past them too.
        mark = mark.max(last);
    }
    Ok((mark, adopted))
}

fn decide(stores: &crate::db::Stores, w: &crate::db::input::Withdrawal, hwm: i64) -> Result<Adopt> {
    if w.job_id > hwm {
        return Ok(Adopt::Later);
    }
    let owner = stores.lifecycle.with(|c| {
        Ok(c.query_row(
            "SELECT client_id FROM queue WHERE job_id = ?1",
            [w.job_id],
            |r| r.get::<_, String>(0),
        )
        .optional()?)
    })?;
    let Some(owner) = owner else {
        return Ok(Adopt::Ignore("no open job with that id"));
    };
    if owner != w.client_id {
        return Ok(Adopt::Ignore("the job is another client's"));
    }
    let ended = stores.output.with(|c| {
        Ok(c.query_row(
            &format!(
                "SELECT 1 FROM results WHERE job_id = ?1 AND status IN {}",
                crate::db::output::FINAL_SQL
            ),
            [w.job_id],
            |_| Ok(()),
        )
        .optional()?)
    })?;
    if ended.is_some() {
        return Ok(Adopt::Ignore("the job already ended"));
    }
    let by = format!("client:{owner}");
    stores.security.with(|c| {
        cancels::request(
            c,
            w.job_id,
            &by,
            Some("withdrawn by its client"),
            crate::time::now_ms(),
        )
    })?;
    Ok(Adopt::Cancel)
}

/// Turns new withdrawals into cancel requests (module doc), then runs a [`pass`] if any did.
/// Called after each claim (a withdrawal is a write to input.db).
pub(super) async fn adopt(jobs: &mut Loop) {
    let st = Arc::clone(&jobs.stores);
    let after = jobs.withdrawn;
    match tokio::task::spawn_blocking(move || adopt_blocking(&st, after)).await {
        Ok(Ok((mark, adopted))) => {
            jobs.withdrawn = mark;
            if adopted > 0 {
                pass(jobs).await;
            }
        }
        Ok(Err(e)) => tracing::warn!(
            error = format!("{e:#}"),
            "cannot read withdrawals; retrying"
        ),
        Err(e) => tracing::error!(error = %e, "withdrawal task panicked"),
    }
}

/// One pass over the open cancel requests (see the module doc).
pub(super) async fn pass(jobs: &mut Loop) {
    let st = Arc::clone(&jobs.stores);
    let seen = match tokio::task::spawn_blocking(move || look(&st)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot read cancel requests; retrying"
            );
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "cancel task panicked");
            return;
        }
    };
    for s in seen {
        let id = s.cancel.job_id;
        let done = s.open.as_ref().is_some_and(|o| o.0 == status::DONE);
        if let Some(fin) = s.final_status.as_deref().filter(|_| done) {
            close(jobs, id, fin).await;
            continue;
        }
        let Some((state, action, client, attempts)) = s.open else {
            continue; // not claimed yet: the claim ends it
        };
        if jobs.ended.contains(&id) {
            continue; // its end is on its way to output.db
        }
        if let Some(r) = jobs.running.values_mut().find(|r| r.snap.job_id == id) {
            if jobs.cancelling.insert(id) {
                tracing::info!(job_id = id, by = %s.cancel.requested_by, "cancel: stopping the running job");
                r.cancel.cancel();
            }
            continue;
        }
        if jobs.ready.remove(id) {
            jobs.approved.remove(&id);
            tracing::info!(job_id = id, by = %s.cancel.requested_by, "cancel: the queued job never runs");
            let row = ResultRow {
                job_id: id,
                action,
                client_id: client,
                status: JobStatus::Cancelled,
                result: Some(cancels::result_json(&s.cancel, "queued").to_string()),
                error: Some(cancels::error_line(&s.cancel, "queued")),
                attempts,
                duration_ms: None,
                started_at: None,
                finished_at: Some(crate::time::now_ms()),
            };
            end(jobs, row);
            continue;
        }
        if state == status::PENDING_VALIDATION {
            waiting(jobs, &s.cancel).await;
        }
        // Otherwise a transition is in flight (reaped, not yet committed): the next pass.
    }
}

/// Ends a job waiting for a human (`ask::answers::cancel_waiting`).
async fn waiting(jobs: &mut Loop, c: &Cancel) {
    let st = Arc::clone(&jobs.stores);
    let (dd, pp) = (jobs.config.data_dir.clone(), jobs.config.path_lists());
    let reg = Arc::clone(&jobs.registry);
    let (result, error) = (
        cancels::result_json(c, "waiting for a human"),
        cancels::error_line(c, "waiting for a human"),
    );
    let id = c.job_id;
    let res = tokio::task::spawn_blocking(move || {
        crate::ask::answers::cancel_waiting(
            &st,
            id,
            result,
            error,
            &dd,
            &pp,
            &|a| reg.on_decision(&st, a),
            crate::time::now_ms(),
        )
    })
    .await;
    match res {
        Ok(Ok(Some(row))) => {
            tracing::info!(job_id = id, by = %c.requested_by, "cancel: the waiting job ends");
            end(jobs, row);
        }
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::warn!(
            job_id = id,
            error = format!("{e:#}"),
            "cannot cancel the waiting job; retrying"
        ),
        Err(e) => tracing::error!(error = %e, "cancel task panicked"),
    }
}

/// Hands a cancelled job's end to the result writer, audited like any end.
fn end(jobs: &mut Loop, row: ResultRow) {
    jobs.ended.insert(row.job_id);
    if !jobs.fin_tx.send(Finished::final_end(&jobs.registry, row)) {
        tracing::error!("result writer is gone; the cancel applies at the next start");
    }
}

/// The job has its final result: the request is closed with it.
async fn close(jobs: &mut Loop, id: i64, outcome: &str) {
    let st = Arc::clone(&jobs.stores);
    let o = outcome.to_string();
    let res = tokio::task::spawn_blocking(move || {
        st.security
            .with(|c| cancels::consume(c, id, &o, crate::time::now_ms()))
    })
    .await;
    match res {
        Ok(Ok(())) => {
            jobs.ended.remove(&id);
            jobs.cancelling.remove(&id);
        }
        Ok(Err(e)) => tracing::warn!(
            job_id = id,
            error = format!("{e:#}"),
            "cannot close the cancel request; retrying"
        ),
        Err(e) => tracing::error!(error = %e, "cancel task panicked"),
    }
}
