//! Shutdown, after the loop, in this order and within these bounds (all inside 60 s): heartbeat
//! `draining`; running jobs finish within `drain_window_ms` (a second signal cuts it short);
//! the rest are cancelled and get `cancel_grace_ms` to wind down, then are abandoned — every
//! one reaped and recorded so it runs again; the result writer flushes (≤ 5 s); the background
//! tasks stop; a `shutdown` event; the recorder writes what is left (≤ 5 s); heartbeat
//! `stopped` (≤ 3 s).

use super::startup::Background;
use super::{event, Loop};
use crate::shutdown::Shutdown;
use crate::stats::WorkerState;
use crate::systemd;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Drains the running jobs, then stops what start-up started, the recorder and heartbeat last.
pub(super) async fn drain(mut jobs: Loop, bg: Background, shutdown: &Shutdown) {
    let t0 = Instant::now();
    let _ = bg.state.send(WorkerState::Draining);
    systemd::stopping("draining");
    tracing::info!(
        running = jobs.tasks.len(),
        queued = jobs.ready.len(),
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
    if tokio::time::timeout(Duration::from_secs(5), bg.finisher)
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
            "drain_ms": t0.elapsed().as_millis() as u64,
            "cancelled_jobs": cancelled,
            "claimed_not_started": claimed_not_started,
        }),
    )
    .await;
    // Last: the recorder writes what is left (the shutdown event included), within bounds.
    bg.recorder_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(5), bg.recorder)
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
    let _ = tokio::time::timeout(Duration::from_secs(3), bg.heartbeat).await;
    tracing::info!(
        elapsed_ms = t0.elapsed().as_millis() as u64,
        "brainloop worker stopped"
    );
}

/// Lets running jobs finish within the drain window (or until a second signal), then cancels
/// the rest, waits `cancel_grace_ms`, and abandons those that ignored it. Every task is reaped.
/// Returns how many jobs were cancelled.
async fn finish_running(jobs: &mut Loop, shutdown: &Shutdown) -> usize {
    let window = Duration::from_millis(jobs.config.drain_window_ms);
    let drain_deadline = tokio::time::Instant::now() + window;
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
    let grace = Duration::from_millis(jobs.config.cancel_grace_ms);
    let grace = tokio::time::Instant::now() + grace;
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
