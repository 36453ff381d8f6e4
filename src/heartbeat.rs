//! The heartbeat: a row in output.db `heartbeat` at start, on every state change and every
//! `heartbeat_interval_ms` (15 s by default), carrying the live gauges (`sessions_active` /
//! `sessions_completed`: open / ended `loop` sessions, counted in lifecycle.db at each beat); each
//! beat also flushes the metric counters to `metrics`; a beat that finds the worker idle after
//! work releases memory (`memory::release`). A failed write (disk full, lock held) is logged and
//! retried at the next beat; it never stops the worker, and becomes the problem `output`
//! ("results cannot be written to output.db: …").
//!
//! Beside it, every second (or every beat when shorter) and at each state change, the heartbeat
//! rewrites the status file (`db::status_file`, its only writer): the live counters, the
//! problems and the clocks, on a channel that does not depend on output.db — so `brainloop
//! status` learns of a failing output.db, a stuck worker (the file stops moving on the monotonic
//! clock) and wall-clock steps (each write compares elapsed wall time with elapsed monotonic
//! time since the previous one).

use crate::config::Config;
use crate::db::output::{self, Heartbeat};
use crate::db::status_file::{self, StatusFile};
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
    let live = tokio::spawn(status_file_loop(
        Arc::clone(&stats),
        Arc::clone(&config),
        worker_id.clone(),
        sandbox_level.clone(),
        state.clone(),
    ));
    beats(
        &stores,
        &stats,
        &worker_id,
        &sandbox_level,
        &mut state,
        started,
        interval,
        &idle,
    )
    .await;
    let _ = live.await;
}

#[allow(clippy::too_many_arguments)]
async fn beats(
    stores: &Arc<Stores>,
    stats: &Arc<Stats>,
    worker_id: &str,
    sandbox_level: &str,
    state: &mut watch::Receiver<WorkerState>,
    started: Instant,
    interval: Duration,
    idle: &crate::memory::IdleRelease,
) {
    loop {
        let current = *state.borrow_and_update();
        beat(stores, stats, worker_id, sandbox_level, current, started).await;
        if current == WorkerState::Stopped {
            return;
        }
        if idle.due(
            stats.jobs_running.load(Ordering::Relaxed),
            stats.jobs_done_total.load(Ordering::Relaxed),
        ) {
            let s = Arc::clone(stores);
            let _ = tokio::task::spawn_blocking(move || crate::memory::release(&s)).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            changed = state.changed() => {
                if changed.is_err() {
                    // The supervisor is gone without saying Stopped: record it anyway.
                    beat(stores, stats, worker_id, sandbox_level, WorkerState::Stopped, started).await;
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
    // The databases' identity on the heartbeat's cadence (issue 50): a file deleted or replaced
    // under the worker is a problem `status` names; claims stop while it lasts.
    let st = Arc::clone(stores);
    match tokio::task::spawn_blocking(move || (st.files_gone(), st.files_unwritable())).await {
        Ok((gone, unwritable)) => {
            for (cause, why) in [
                (crate::stats::DATABASE_FILES, gone),
                (crate::stats::DATABASE_UNWRITABLE, unwritable),
            ] {
                if why.is_empty() {
                    stats.clear_problem(cause);
                } else {
                    stats.set_problem(cause, why.join("; "));
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "the database file check failed"),
    }
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
            stats.set_problem(
                "output",
                format!("results cannot be written to output.db: {e:#}"),
            );
            if let Some(suppressed) = every.due(Duration::from_secs(30)) {
                tracing::warn!(
                    error = format!("{e:#}"),
                    suppressed,
                    "heartbeat write failed; retrying at the next beat"
                );
            }
        }
        Ok(()) => {
            stats.clear_problem("output");
            every.reset()
        }
    }
}

/// Rewrites the status file every [`status_file::EVERY_MS`] (the heartbeat interval when
/// shorter) and at each state change, until the worker has stopped.
async fn status_file_loop(
    stats: Arc<Stats>,
    config: Arc<Config>,
    worker_id: String,
    sandbox_level: String,
    mut state: watch::Receiver<WorkerState>,
) {
    let every = Duration::from_millis(
        config
            .heartbeat_interval_ms
            .clamp(50, status_file::EVERY_MS),
    );
    let mut live = StatusFile {
        pid: std::process::id() as i64,
        worker_id,
        version: env!("CARGO_PKG_VERSION").to_string(),
        boot_id: crate::time::boot_id(),
        wall_ms: crate::time::now_ms(),
        mono_ms: crate::time::mono_ms(),
        sandbox_level: Some(sandbox_level),
        ..Default::default()
    };
    let started_mono = live.mono_ms;
    let mut log = crate::stats::Every::default();
    loop {
        let current = *state.borrow_and_update();
        refresh(&mut live, &stats, current, started_mono);
        write_status_file(&config.data_dir, &live, &stats, &mut log).await;
        if current == WorkerState::Stopped {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            changed = state.changed() => {
                if changed.is_err() {
                    // The supervisor is gone without saying Stopped: record it anyway.
                    refresh(&mut live, &stats, WorkerState::Stopped, started_mono);
                    write_status_file(&config.data_dir, &live, &stats, &mut log).await;
                    return;
                }
            }
        }
    }
}

/// The status file's fields from the counters and the clocks, now.
fn refresh(live: &mut StatusFile, stats: &Stats, state: WorkerState, started_mono: i64) {
    let (wall, mono) = (crate::time::now_ms(), crate::time::mono_ms());
    let step = crate::time::significant_step(crate::time::wall_step_ms(
        (live.wall_ms, live.mono_ms),
        (wall, mono),
    ));
    if step != 0 {
        live.clock_step_ms += step;
        live.last_clock_step = Some((wall, step));
        tracing::warn!(
            step_ms = step,
            "the wall clock was stepped; waits and expiries run on the monotonic clock"
        );
    }
    live.state = state.as_str().to_string();
    live.wall_ms = wall;
    live.mono_ms = mono;
    live.uptime_ms = mono - started_mono;
    live.jobs_running = stats.jobs_running.load(Ordering::Relaxed);
    live.queue_depth = stats.queue_depth.load(Ordering::Relaxed);
    live.jobs_done_total = stats.jobs_done_total.load(Ordering::Relaxed);
    live.sessions_active = stats.sessions_active.load(Ordering::Relaxed);
    live.sessions_completed = stats.sessions_completed.load(Ordering::Relaxed);
    live.cache_hit_rate = stats.cache_hit_rate();
    live.problems = stats
        .problems_json()
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or_default();
}

async fn write_status_file(
    data_dir: &std::path::Path,
    live: &StatusFile,
    stats: &Stats,
    log: &mut crate::stats::Every,
) {
    let (dir, body) = (data_dir.to_path_buf(), live.clone());
    let res = tokio::task::spawn_blocking(move || status_file::write(&dir, &body)).await;
    match res {
        Ok(Ok(())) => {
            if stats.has_problem("status_file") {
                stats.clear_problem("status_file");
            }
            log.reset();
        }
        Ok(Err(e)) => {
            stats.set_problem("status_file", format!("{e:#}"));
            if let Some(suppressed) = log.due(Duration::from_secs(30)) {
                tracing::warn!(
                    error = format!("{e:#}"),
                    suppressed,
                    "status file write failed; retrying"
                );
            }
        }
        Err(e) => tracing::error!(error = %e, "status file task failed"),
    }
}
