//! Instant jobs (issue 24): jobs answered without a task of their own — the actions that run
//! [`Run::Instant`](crate::actions::Run) (`ping`, `list_actions`, `get_schema`) and every job that
//! fails before an action runs (rejected at claim, no or an unknown action). `claim.rs` starts
//! them in the claim transaction itself; they are answered right there in the claim's blocking
//! call and hold no slot, so a backlog of them costs bookkeeping, not a task, a slot and four
//! thread hand-offs each.
//!
//! Nothing else changes for them: `processed_log` goes running (attempt 1) → done, the results
//! row and the audit row are built by the same [`Finished::ended`] as a reaped task's, and the
//! finisher writes them (result committed before done).

use super::finisher::Finished;
use crate::actions::{self, Outcome, Registry};
use crate::db::lifecycle::Snapshot;
use std::time::Instant;

/// Answers started instant jobs: pure (no I/O).
pub fn answer(registry: &Registry, started: &[Snapshot]) -> Vec<Finished> {
    started
        .iter()
        .map(|snap| answer_one(registry, snap))
        .collect()
}

fn answer_one(registry: &Registry, snap: &Snapshot) -> Finished {
    let t = Instant::now();
    let out = actions::instant(
        registry,
        snap.action.as_deref(),
        snap.params.as_deref(),
        snap.reject_reason.as_deref(),
    )
    // Cannot happen (`is_instant` and `instant` agree); a job is never left hanging.
    .unwrap_or_else(|| Outcome::failed("internal error: the job is not instant"));
    if out.error.is_some() {
        tracing::info!(
            job_id = snap.job_id,
            status = out.status.as_str(),
            error = out.error.as_deref().unwrap_or(""),
            "job ended"
        );
    }
    let hash = crate::db::metadata::params_hash(snap.params.as_deref().unwrap_or(""));
    Finished::ended(registry, snap, hash, out, Some(t.elapsed()), false)
}
