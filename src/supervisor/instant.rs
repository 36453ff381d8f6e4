//! Instant jobs (issue 24): jobs answered without a task of their own — the actions that run
//! [`Run::Instant`](crate::actions::Run) (`ping`, `list_actions`, `get_schema`) and every job that
//! fails before an action runs (rejected at claim, no or an unknown action). They are started and
//! answered in the claim's own blocking call, a whole claim batch per lifecycle transaction, and
//! hold no slot, so a backlog of them costs bookkeeping, not a task, a slot and four thread
//! hand-offs each.
//!
//! Nothing else changes for them: `processed_log` goes claimed → running (one more attempt) →
//! done, the results row and the audit row are built by the same [`Finished::ended`] as a
//! reaped task's, and the finisher writes them (result committed before done).

use super::claim::Claimed;
use super::finisher::Finished;
use crate::actions::{self, Outcome, Registry};
use crate::db::{lifecycle, write_tx, Stores};
use anyhow::Result;
use std::time::Instant;

/// Splits `claimed` into the instant jobs that are due now and the rest (for the ready queue).
pub fn due_now(claimed: Vec<Claimed>, now: i64) -> (Vec<Claimed>, Vec<Claimed>) {
    claimed
        .into_iter()
        .partition(|c| c.instant && c.not_before.is_none_or(|t| t <= now))
}

/// Starts `jobs` (one lifecycle transaction) and answers them. Jobs with no open
/// `processed_log` row are not started (as in the ordinary path). Blocking: run it off the
/// runtime threads. On error nothing was started: the caller queues the jobs the ordinary way.
pub fn run(stores: &Stores, registry: &Registry, jobs: &[Claimed]) -> Result<Vec<Finished>> {
    let ids: Vec<i64> = jobs.iter().map(|c| c.id).collect();
    let now = crate::time::now_ms();
    let snaps = stores
        .lifecycle
        .with(|c| Ok(write_tx(c, |tx| lifecycle::start(tx, &ids, now))?))?;
    let finished = snaps
        .iter()
        .map(|snap| {
            let t = Instant::now();
            let out = actions::instant(
                registry,
                snap.action.as_deref(),
                snap.params.as_deref(),
                snap.reject_reason.as_deref(),
            )
            // Cannot happen (`is_instant` and `instant` agree); a job is never left hanging.
            .unwrap_or_else(|| Outcome::failed("internal error: the job is not instant"));
            if !out.status.is_final() || out.error.is_some() {
                tracing::info!(
                    job_id = snap.job_id,
                    status = out.status.as_str(),
                    error = out.error.as_deref().unwrap_or(""),
                    "job ended"
                );
            }
            let hash = crate::db::metadata::params_hash(snap.params.as_deref().unwrap_or(""));
            Finished::ended(registry, snap, hash, out, Some(t.elapsed()), false)
        })
        .collect();
    Ok(finished)
}
