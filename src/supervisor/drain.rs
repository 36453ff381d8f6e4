//! Shutdown, after the loop: one budget (`shutdown::BUDGET`, 55 s from the first signal, on the
//! monotonic clock) that every phase draws from, in this order — time the loop spent finishing
//! the call it was in when the signal came is already spent from it:
//!
//! | phase | ends at the earliest of | then |
//! |---|---|---|
//! | drain: heartbeat `draining`, running jobs finish (a second signal cuts it short) | signal + `drain_window_ms` | the rest are cancelled |
//! | cancel grace | + `cancel_grace_ms` | jobs that ignored it are abandoned; every one reaped and recorded so it runs again |
//! | result flush (output.db, else the spool: `finisher`, `spool`) | + 4 s | |
//! | background tasks stop, `shutdown` event, the recorder's last write | + 3 s | events still in memory are lost, audit rows stay staged |
//! | heartbeat `stopped` | + 2 s | |
//! | exit (idle sandbox helpers, the runtime) | + 1 s | |
//!
//! and each phase also ends where the phases after it would not keep their share of the budget
//! (`Shutdown::phase_end`), so a phase that overran (a lock wait before the drain, a slow
//! disk) takes from the drain window, never from the end. `Config::validate` holds
//! `drain_window_ms + cancel_grace_ms` to the 45 s the later phases leave. Results of jobs that
//! ended during the drain are written as they end (the result writer runs throughout), so
//! they are persisted first.

use super::startup::Background;
use super::{event, Loop};
use crate::shutdown::{self, Shutdown};
use crate::stats::WorkerState;
use crate::systemd;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Drains the running jobs, then stops what start-up started, the recorder and heartbeat last.
pub(super) async fn drain(mut jobs: Loop, bg: Background, shutdown: &Shutdown) {
    let _ = bg.state.send(WorkerState::Draining);
    systemd::stopping("draining");
    tracing::info!(
        running = jobs.tasks.len(),
        queued = jobs.ready.len(),
        since_signal_ms = shutdown.elapsed().as_millis() as u64,
        "draining"
    );
    let cancelled = finish_running(&mut jobs, shutdown).await;
    jobs.stats.jobs_running.store(0, Ordering::Relaxed);
    let claimed_not_started = jobs.ready.len();
    let Loop {
        fin_tx,
        stores,
        config,
        ..
    } = jobs;
    drop(fin_tx);
    let flush_end = shutdown.phase_end(
        shutdown::FLUSH_SHARE,
        shutdown::LATER_PHASES - shutdown::FLUSH_SHARE,
    );
    if tokio::time::timeout_at(flush_end.into(), bg.finisher)
        .await
        .is_err()
    {
        tracing::error!(
            "results could not be flushed in time; unfinished jobs will run again at next start"
        );
    }
    bg.background.cancel();
    event(
        &stores,
        "shutdown",
        None,
        json!({
            "drain_ms": shutdown.elapsed().as_millis() as u64,
            "cancelled_jobs": cancelled,
            "claimed_not_started": claimed_not_started,
        }),
    )
    .await;
    // Last: the recorder writes what is left (the shutdown event included), within bounds.
    bg.recorder_stop.cancel();
    let recorder_end = shutdown.phase_end(
        shutdown::RECORDER_SHARE,
        shutdown::HEARTBEAT_SHARE + shutdown::EXIT_SHARE,
    );
    if tokio::time::timeout_at(recorder_end.into(), bg.recorder)
        .await
        .is_err()
    {
        tracing::warn!(
            events = stores.telemetry.len(),
            "metadata.db could not be written in time: these telemetry events are lost; staged audit rows move at the next start"
        );
    }
    crate::horos::register(&config.horos(), "stopped");
    let _ = bg.state.send(WorkerState::Stopped);
    let heartbeat_end = shutdown.phase_end(shutdown::HEARTBEAT_SHARE, shutdown::EXIT_SHARE);
    if tokio::time::timeout_at(heartbeat_end.into(), bg.heartbeat)
        .await
        .is_err()
    {
        tracing::warn!("the heartbeat `stopped` could not be written in time");
    }
    tracing::info!(
        elapsed_ms = shutdown.elapsed().as_millis() as u64,
        "brainloop worker stopped (elapsed since the signal)"
    );
}

/// Lets running jobs finish within the drain window (counted from the signal; or until a second
/// signal), then cancels the rest, waits `cancel_grace_ms`, and abandons those that ignored it.
/// Every task is reaped. Returns how many jobs were cancelled.
async fn finish_running(jobs: &mut Loop, shutdown: &Shutdown) -> usize {
    let window = Duration::from_millis(jobs.config.drain_window_ms);
    let grace = Duration::from_millis(jobs.config.cancel_grace_ms);
    let signal = shutdown.deadline() - shutdown::BUDGET;
    let drain_deadline: tokio::time::Instant = (signal + window)
        .min(shutdown.deadline() - shutdown::LATER_PHASES - grace.min(shutdown::DRAIN_AND_GRACE))
        .into();
    while !jobs.tasks.is_empty() {
        tokio::select! {
            Some(res) = jobs.tasks.join_next_with_id() => jobs.reap(res),
            _ = tokio::time::sleep_until(drain_deadline) => break,
            _ = shutdown.hurry.cancelled() => break,
        }
        jobs.stats
            .jobs_running
            .store(jobs.tasks.len() as i64, Ordering::Relaxed);
    }
    if jobs.tasks.is_empty() {
        return 0;
    }
    let cancelled = jobs.tasks.len();
    tracing::warn!(
        jobs = cancelled,
        "drain window over: cancelling running jobs"
    );
    jobs.job_cancel.cancel();
    let grace: tokio::time::Instant = shutdown.phase_end(grace, shutdown::LATER_PHASES).into();
    while !jobs.tasks.is_empty() {
        tokio::select! {
            Some(res) = jobs.tasks.join_next_with_id() => jobs.reap(res),
            _ = tokio::time::sleep_until(grace) => break,
        }
    }
    if !jobs.tasks.is_empty() {
        tracing::warn!(
            jobs = jobs.tasks.len(),
            "jobs ignored cancellation: abandoning them"
        );
        jobs.tasks.abort_all();
        while let Some(res) = jobs.tasks.join_next_with_id().await {
            jobs.reap(res);
        }
    }
    cancelled
}
