//! The heartbeat: a row in output.db `heartbeat` at start, on every state change and every
//! `heartbeat_interval_ms` (15 s by default), carrying the live gauges (`sessions_active` /
//! `sessions_completed`: open / ended `loop` sessions, counted in lifecycle.db at each beat); each
//! beat also flushes the metric counters to `metrics`; a beat that finds the worker idle after
//! work releases memory (`memory::release`). A failed write (disk full, lock held) is logged and
//! retried at the next beat; it never stops the worker.

use crate::config::Config;
use crate::db::output::{self, Heartbeat};
use crate::db::Stores;
use crate::stats::{Stats, WorkerState};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub async fn run(
    stores: Arc<Stores>,
    stats: Arc<Stats>,
    config: Arc<Config>,
    sandbox_level: String,
    mut state: watch::Receiver<WorkerState>,
) {
    let started = Instant::now();
    let worker_id = config.worker_id();
    let interval = Duration::from_millis(config.heartbeat_interval_ms);
    let idle = crate::memory::IdleRelease::default();
    loop {
        let current = *state.borrow_and_update();
        beat(
            &stores,
            &stats,
            &worker_id,
            &sandbox_level,
            current,
            started,
        )
        .await;
        if current == WorkerState::Stopped {
            return;
        }
        if idle.due(
            stats.jobs_running.load(Ordering::Relaxed),
            stats.jobs_done_total.load(Ordering::Relaxed),
        ) {
            let s = Arc::clone(&stores);
            let _ = tokio::task::spawn_blocking(move || crate::memory::release(&s)).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            changed = state.changed() => {
                if changed.is_err() {
                    // The supervisor is gone without saying Stopped: record it anyway.
                    beat(&stores, &stats, &worker_id, &sandbox_level, WorkerState::Stopped, started).await;
                    return;
                }
            }
        }
    }
}

async fn beat(
    stores: &Arc<Stores>,
    stats: &Arc<Stats>,
    worker_id: &str,
    sandbox_level: &str,
    state: WorkerState,
    started: Instant,
) {
    // `loop` sessions: open ones are active; committed, abandoned, expired… are completed.
    match (
        crate::actions::loop_sessions_open(&stores.lifecycle).await,
        crate::actions::loop_sessions_ended(&stores.lifecycle).await,
    ) {
        (Ok(open), Ok(ended)) => {
            stats.sessions_active.store(open, Ordering::Relaxed);
            stats.sessions_completed.store(ended, Ordering::Relaxed);
        }
        (Err(e), _) | (_, Err(e)) => tracing::warn!(
            error = format!("{e:#}"),
            "cannot count loop sessions; the heartbeat keeps the last figures"
        ),
    }
    let now = crate::time::now_ms();
    let hb = Heartbeat {
        worker_id: worker_id.to_string(),
        timestamp: now,
        status: state.as_str().to_string(),
        pid: std::process::id() as i64,
        version: env!("CARGO_PKG_VERSION").to_string(),
        sessions_active: stats.sessions_active.load(Ordering::Relaxed),
        sessions_completed: stats.sessions_completed.load(Ordering::Relaxed),
        jobs_running: stats.jobs_running.load(Ordering::Relaxed),
        queue_depth: stats.queue_depth.load(Ordering::Relaxed),
        jobs_done_total: stats.jobs_done_total.load(Ordering::Relaxed),
        cache_hit_rate: stats.cache_hit_rate(),
        sandbox_level: Some(sandbox_level.to_string()),
        uptime_ms: started.elapsed().as_millis() as i64,
    };
    let metrics = stats.take_metrics(now);
    let problem = stats.problems_json();
    let st = Arc::clone(stats);
    let res = stores
        .output
        .call(move |c| {
            // Metrics first: if they cannot be written they are kept for the next beat, and the
            // heartbeat row itself is still attempted.
            let flushed = output::insert_metrics(c, &metrics);
            if flushed.is_err() {
                st.restore_metrics(metrics);
            }
            output::insert_heartbeat(c, &hb)?;
            if problem.is_some() {
                output::set_heartbeat_problem(c, problem.as_deref())?;
            }
            flushed
        })
        .await;
    let mut every = match stats.heartbeat_log.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    match res {
        // One line per period, not per beat: a full disk or a held lock can last.
        Err(e) => {
            if let Some(suppressed) = every.due(Duration::from_secs(30)) {
                tracing::warn!(
                    error = format!("{e:#}"),
                    suppressed,
                    "heartbeat write failed; retrying at the next beat"
                );
            }
        }
        Ok(()) => every.reset(),
    }
}
