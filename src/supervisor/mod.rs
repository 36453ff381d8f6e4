//! The supervisor: the worker's main loop.
//!
//! Fair slots: at most `concurrency` jobs run, and at most `Config::slots_per_client` of them
//! for one client; the ready queue (`ready.rs`) counts a slot when a job is popped, and
//! `Loop::reap` gives it back exactly once however the task ended (result, pending validation,
//! panic, cancellation, abort). A job waiting for a human holds no slot.
//!
//! ```text
//!  input.db ──wake──▶ claim (snapshot → lifecycle) ──▶ ready queue ──▶ start (≤ concurrency)
//!                                                                        │ actions::run
//!  output.db ◀── finisher (group commit: results, then done) ◀───────────┘
//! ```
//!
//! Start-up: recovery of the previous run's claims, then `READY`. Shutdown (first signal): stop
//! claiming, heartbeat `draining`, let running jobs finish within `drain_window_ms`, cancel the
//! rest (`cancel_grace_ms` to wind down, then abandoned), record them so they run again, flush
//! results, heartbeat `stopped`, a `shutdown` event — all inside 60 s.

pub mod claim;
pub mod finisher;
pub mod instant;
mod pace;
pub mod ready;
pub mod recorder;
pub mod recovery;
pub mod wakeup;

use crate::actions::{self, JobCtx, Outcome, Registry};
use crate::ask::answers as approvals;
use crate::config::Config;
use crate::db::lifecycle::{self, Snapshot};
use crate::db::metadata::AuditRow;
use crate::db::output::{JobStatus, ResultRow};
use crate::db::{input, write_tx, Stores};
use crate::shutdown::Shutdown;
use crate::stats::{Stats, WorkerState};
use crate::{heartbeat, retention, systemd};
use anyhow::{Context, Result};
use finisher::{Disposition, Finished};
use ready::{Job, ReadyQueue};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What the supervisor remembers of a running job.
struct RunningJob {
    snap: Snapshot,
    params_hash: String,
    /// The client whose slot the job holds (released when the task is reaped).
    slot: Arc<str>,
}

type JobResult = (Outcome, Duration);

const RECHECK_FIRST: Duration = Duration::from_millis(1);
const RECHECK_LAST: Duration = Duration::from_millis(1024);

/// Runs the worker until shutdown. The databases must be migrated and the instance lock held.
pub async fn run(
    config: Arc<Config>,
    stores: Arc<Stores>,
    registry: Arc<Registry>,
    sandbox: Arc<crate::sandbox::detect::Level>,
    shutdown: Shutdown,
) -> Result<()> {
    let stats = Arc::new(Stats::default());
    stats.tick();
    let (state_tx, state_rx) = watch::channel(WorkerState::Starting);
    let heartbeat = tokio::spawn(heartbeat::run(
        Arc::clone(&stores),
        Arc::clone(&stats),
        Arc::clone(&config),
        sandbox.status_line(),
        state_rx,
    ));
    let background = CancellationToken::new();
    let recorder_stop = CancellationToken::new();
    let recorder = recorder::spawn(Arc::clone(&stores), recorder_stop.clone());
    systemd::spawn_watchdog(
        Arc::clone(&stats),
        Duration::from_millis(config.poll_fallback_ms),
        background.clone(),
    );
    event(
        &stores,
        "startup",
        None,
        json!({
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "worker_id": config.worker_id(),
            "concurrency": config.concurrency,
        }),
    )
    .await;

    // Recovery of the previous run.
    let st = Arc::clone(&stores);
    let max_attempts = config.max_attempts;
    let ttl = config.validation_ttl_ms;
    let dd = config.data_dir.clone();
    let (killed, swept, cgroups) = tokio::task::spawn_blocking(move || {
        let killed = crate::bash::leftovers::reap_previous(&dd);
        let swept = crate::sandbox::sweep_private_tmp(&dd);
        (killed, swept, crate::sandbox::cgroup::sweep_dead())
    })
    .await
    .context("recovery task panicked")?;
    if cgroups > 0 {
        tracing::info!(
            cgroups,
            "removed job cgroups left by workers no longer running"
        );
    }
    if swept > 0 {
        tracing::info!(
            dirs = swept,
            "removed private tmp dirs left by the previous run"
        );
    }
    if killed > 0 {
        tracing::warn!(
            processes = killed,
            "killed commands left running by the previous run"
        );
    }
    let reg = Arc::clone(&registry);
    let rec = tokio::task::spawn_blocking(move || recovery::recover(&st, &reg, max_attempts, ttl))
        .await
        .context("recovery task panicked")?
        .context("start-up recovery failed")?;
    // Change sets of jobs that ended (denied or expired while the worker was down, or applied
    // before a crash cut the clean-up) are discarded; waiting ones survive the restart.
    {
        let (st, dd) = (Arc::clone(&stores), config.data_dir.clone());
        let swept = tokio::task::spawn_blocking(move || {
            crate::bash::changes::sweep_finished(&dd, |ids| {
                st.output.with(|c| crate::db::output::finals_among(c, ids))
            })
        })
        .await;
        if let Ok(Ok(n)) = swept {
            if n > 0 {
                tracing::info!(change_sets = n, "discarded change sets of finished jobs");
            }
        }
    }
    let now = crate::time::now_ms();
    let mut ready = ReadyQueue::new(config.slots_per_client());
    for c in &rec.requeue {
        ready.push(Job::new(c.id, c.priority, &c.client_id), c.not_before, now);
    }
    // A re-ask is a request to a human like any other (`ask::answers::reask`).
    stats.incr("hil_requests", rec.asked_again as f64);
    if rec.requeued + rec.interrupted + rec.already_done + rec.asked_again > 0 {
        tracing::info!(
            requeued = rec.requeued,
            retried_after_crash = rec.retried_after_crash,
            interrupted = rec.interrupted,
            already_done = rec.already_done,
            asked_again = rec.asked_again,
            "recovered the previous run's jobs"
        );
        event(&stores, "recovery", None, json!(rec)).await;
    }
    let mut hwm = stores.lifecycle.with(|c| lifecycle::high_water_mark(c))?;

    let watcher = wakeup::InputWatcher::start(&config.data_dir);
    tokio::spawn(retention::run(
        Arc::clone(&stores),
        Arc::clone(&config),
        background.clone(),
    ));
    let (fin_tx, fin_handle) = finisher::spawn(Arc::clone(&stores), Arc::clone(&stats));

    let _ = state_tx.send(WorkerState::Running);
    crate::horos::register(&config.horos(), "running");
    systemd::ready("running");
    tracing::info!(
        data_dir = %config.data_dir.display(),
        concurrency = config.concurrency,
        slots_per_client = config.slots_per_client(),
        watching = watcher.is_watching(),
        poll_fallback_ms = config.poll_fallback_ms,
        high_water_mark = hwm,
        "brainloop worker ready"
    );

    // The LLM client: without a key it still exists and LLM actions fail with a clear error.
    let llm = Arc::new(crate::llm::Llm::from_env(
        &config.llm,
        Some(Arc::clone(&stores.lifecycle)),
    ));
    {
        let (llm, stores, stop, check) = (
            Arc::clone(&llm),
            Arc::clone(&stores),
            background.clone(),
            config.llm.check_models,
        );
        tokio::spawn(async move {
            let report = if check || llm.available().is_err() {
                llm.check_models(&stop).await
            } else {
                return;
            };
            event(&stores, "llm_check", None, json!(report)).await;
        });
    }

    // `[notify]` / `[reviewer]`: off the dispatch path (issue 22).
    let _hooks = crate::hooks::spawn(
        Arc::new(config.hooks()),
        Arc::clone(&stores),
        Arc::clone(&sandbox),
        background.clone(),
    );

    let job_cancel = CancellationToken::new();
    let mut loop_state = Loop {
        llm,
        config: Arc::clone(&config),
        stores: Arc::clone(&stores),
        registry,
        stats: Arc::clone(&stats),
        sandbox: Arc::clone(&sandbox),
        tasks: JoinSet::new(),
        running: HashMap::new(),
        fin_tx,
        job_cancel: job_cancel.clone(),
        approved: HashMap::new(),
        ready,
        start_log: crate::stats::Every::default(),
    };

    let poll = Duration::from_millis(config.poll_fallback_ms);
    let mut last_dv: Option<i64> = None;
    let mut more = true; // claim once at start whatever data_version says
    let mut check = true;
    let mut next_poll = tokio::time::Instant::now() + poll;
    let mut claim_errors = 0u32;
    let mut claim_log = crate::stats::Every::default();
    let mut recheck: Option<Duration> = None;
    let mut recheck_at: Option<tokio::time::Instant> = None;
    let mut recheck_next = RECHECK_FIRST;
    let mut pace = pace::ClaimPace::default();
    // The pending check was asked for by a file event (not a poll or a re-check).
    let mut woken = false;
    let mut approvals_check = true;
    let tz = crate::schedules::cronexpr::parse_tz(&config.schedules_timezone)
        .unwrap_or(chrono_tz::Tz::UTC);
    let mut scheduler = crate::schedules::Scheduler::new(tz);
    let mut schedules_check = true;
    let mut security = SecurityWatch::default();
    let mut security_dv: Option<i64> = None;
    loop {
        stats.tick();
        if shutdown.requested.is_cancelled() {
            break;
        }
        if check && !more && !pace.allows(tokio::time::Instant::now()) {
            check = false;
        }
        if more || check {
            let st = Arc::clone(&stores);
            let (force, prev, batch, cap) =
                (more, last_dv, config.claim_batch, config.params_max_bytes);
            let budget = config.claim_max_bytes;
            let mut mark = hwm;
            let reg = Arc::clone(&loop_state.registry);
            // Fail closed (issue 21) holds for instant jobs too: none is answered while results
            // cannot be recorded.
            let answer = !stats.has_problem("results");
            // A check a file event asked for waits briefly for the commit to become visible.
            let settle = woken && !force;
            woken = false;
            let res = tokio::task::spawn_blocking(move || -> Result<_> {
                let dv = input::settled_data_version(&st.input, prev, settle)?;
                if !force && Some(dv) == prev {
                    return Ok((dv, Claim::default(), false, mark));
                }
                let b = claim::claim_batch(&st, &reg, &mut mark, batch, cap, budget, answer)?;
                let answered = instant::answer(&reg, &b.started);
                let claim = Claim {
                    ready: b.claimed,
                    answered,
                };
                Ok((dv, claim, b.full, mark))
            })
            .await;
            match res {
                Ok(Ok((dv, claim, full, mark))) => {
                    let rows = claim.ready.len() + claim.answered.len();
                    pace.claimed(rows, tokio::time::Instant::now());
                    last_dv = Some(dv);
                    hwm = mark;
                    more = full;
                    claim_errors = 0;
                    claim_log.reset();
                    stats.clear_problem("claim");
                    loop_state.take(claim);
                }
                Ok(Err(e)) => {
                    more = false;
                    claim_errors += 1;
                    // One line per period, not per wake-up: producers keep inserting meanwhile.
                    if let Some(suppressed) = claim_log.due(Duration::from_secs(30)) {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            suppressed,
                            "cannot claim new jobs; retrying at the next poll"
                        );
                    }
                    stats.set_problem("claim", format!("cannot claim new jobs: {e:#}"));
                    if claim_errors == 1 {
                        event(
                            &stores,
                            "error",
                            None,
                            json!({"where": "claim", "error": format!("{e:#}")}),
                        )
                        .await;
                    }
                }
                Err(e) => {
                    more = false;
                    tracing::error!(error = %e, "claim task panicked");
                }
            }
            watcher.looked();
            check = false;
        }
        if schedules_check {
            schedules_check = false;
            let catch_up = config.schedules_catch_up;
            match tokio::task::block_in_place(|| scheduler.refresh(&stores, catch_up)) {
                Ok(problems) => {
                    for p in problems {
                        tracing::warn!(problem = %p, "invalid schedule (skipped)");
                        event(&stores, "schedule_invalid", None, json!({"problem": p})).await;
                    }
                }
                Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot read schedules"),
            }
        }
        if scheduler
            .next_due()
            .is_some_and(|t| t <= crate::time::now_ms())
        {
            let now = crate::time::now_ms();
            match tokio::task::block_in_place(|| scheduler.fire_due(&stores, now)) {
                Ok((fired, skipped)) => {
                    for f in fired {
                        tracing::info!(schedule = %f.schedule, job_id = f.job_id, "schedule fired");
                        loop_state
                            .ready
                            .push(Job::new(f.job_id, 0, &f.client_id), None, now);
                    }
                    for name in skipped {
                        tracing::info!(schedule = %name, "schedule skipped: its previous job is still running");
                        event(
                            &stores,
                            "schedule_skipped",
                            None,
                            json!({"schedule": name, "reason": "previous job still running"}),
                        )
                        .await;
                    }
                }
                Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot fire schedules"),
            }
        }
        if security.notified && !approvals_check {
            security.notified = false;
            let dv =
                tokio::task::block_in_place(|| stores.security.with(|c| input::data_version(c)))
                    .ok();
            if dv.is_some() && dv != security_dv {
                security_dv = dv;
                approvals_check = true;
            }
        }
        if approvals_check {
            approvals_check = false;
            security.notified = false;
            let st = Arc::clone(&stores);
            let (dd, pp) = (config.data_dir.clone(), config.protected_paths.clone());
            let reg = Arc::clone(&loop_state.registry);
            match tokio::task::spawn_blocking(move || {
                approvals::collect(&st, &dd, &pp, &|a| reg.on_decision(&st, a))
            })
            .await
            {
                Ok(Ok(resumes)) => {
                    let now = crate::time::now_ms();
                    for r in resumes {
                        match r {
                            approvals::Resume::Run {
                                job_id,
                                priority,
                                client_id,
                                approval,
                            } => {
                                tracing::info!(job_id, validation_id = %approval.validation_id, "approved: resuming the job");
                                loop_state.approved.insert(job_id, approval);
                                let job = Job::new(job_id, priority, &client_id);
                                loop_state.ready.push(job, None, now);
                            }
                            approvals::Resume::End(row) => loop_state.finish_waiting(row),
                        }
                    }
                }
                Ok(Err(e)) => tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot process approvals; retrying"
                ),
                Err(e) => tracing::error!(error = %e, "approvals task panicked"),
            }
        }
        loop_state.ready.promote(crate::time::now_ms());
        loop_state.start_ready().await;
        stats
            .jobs_running
            .store(loop_state.tasks.len() as i64, Ordering::Relaxed);
        stats
            .queue_depth
            .store(loop_state.ready.len() as i64, Ordering::Relaxed);

        if more {
            // Catching up with a backlog: reap what finished without waiting, then claim again
            // once the result writer has caught up enough.
            while let Some(res) = loop_state.tasks.try_join_next_with_id() {
                loop_state.reap(res);
            }
            // A backlog does not hold up an operator's decision, nor the schedules: a stored
            // notification or a due poll is taken here too (the next pass acts on it).
            use futures_util::FutureExt;
            let now = tokio::time::Instant::now();
            if watcher.approvals.notified().now_or_never().is_some() {
                security.noticed(now);
                recheck = Some(RECHECK_FIRST);
            }
            // Re-checked once per batch meanwhile.
            security.recheck(now);
            if now >= next_poll {
                approvals_check = true;
                schedules_check = true;
                next_poll = now + poll;
            }
            tokio::select! {
                biased;
                _ = shutdown.requested.cancelled() => break,
                _ = loop_state.fin_tx.below_max() => {}
            }
            tokio::task::yield_now().await;
            continue;
        }

        // The file watcher fires when a producer writes the WAL, which can be well before its
        // commit becomes visible (a FULL fsync lies in between, slow on a busy disk), and events
        // of several producers coalesce into one wake-up. So after a wake-up the supervisor
        // re-checks data_version with doubling delays (1, 2, 4 … 1024 ms: about 2 s, when the
        // poll fallback takes over), whether or not that check found rows.
        if let Some(delay) = recheck.take() {
            if delay <= RECHECK_LAST {
                recheck_at = Some(tokio::time::Instant::now() + delay);
                recheck_next = delay * 2;
            } else {
                recheck_at = None;
            }
        }
        let mut deadline = next_poll;
        if let Some(t) = recheck_at {
            deadline = deadline.min(t);
        }
        if let Some(t) = pace.deferred {
            deadline = deadline.min(t);
        }
        for t in [loop_state.ready.next_due(), scheduler.next_due()]
            .into_iter()
            .flatten()
        {
            let in_ms = (t - crate::time::now_ms()).max(0) as u64;
            deadline = deadline.min(tokio::time::Instant::now() + Duration::from_millis(in_ms));
        }
        tokio::select! {
            biased;
            _ = shutdown.requested.cancelled() => break,
            Some(res) = loop_state.tasks.join_next_with_id(), if !loop_state.tasks.is_empty() => {
                loop_state.reap(res);
            }
            _ = watcher.wake.notified() => {
                // A producer committing job by job wakes the loop once per job: `pace` holds
                // the claim back while claims keep finding rows.
                check = true;
                woken = true;
                recheck = Some(RECHECK_FIRST);
            }
            _ = watcher.approvals.notified() => {
                security.noticed(tokio::time::Instant::now());
                recheck = Some(RECHECK_FIRST);
            }
            _ = tokio::time::sleep_until(deadline) => {
                let now = tokio::time::Instant::now();
                if now >= next_poll {
                    check = true;
                    approvals_check = true;
                    schedules_check = true;
                    next_poll = now + poll;
                }
                if pace.due(now) {
                    check = true;
                }
                if recheck_at.is_some_and(|t| now >= t) {
                    check = true;
                    security.recheck(now);
                    recheck_at = None;
                    recheck = Some(recheck_next);
                }
            }
        }
    }

    // ---- shutdown ----
    let t0 = Instant::now();
    let _ = state_tx.send(WorkerState::Draining);
    systemd::stopping("draining");
    tracing::info!(
        running = loop_state.tasks.len(),
        queued = loop_state.ready.len(),
        "draining"
    );
    let drain_deadline =
        tokio::time::Instant::now() + Duration::from_millis(config.drain_window_ms);
    while !loop_state.tasks.is_empty() {
        tokio::select! {
            Some(res) = loop_state.tasks.join_next_with_id() => loop_state.reap(res),
            _ = tokio::time::sleep_until(drain_deadline) => break,
            _ = shutdown.hurry.cancelled() => break,
        }
        stats
            .jobs_running
            .store(loop_state.tasks.len() as i64, Ordering::Relaxed);
    }
    let mut cancelled = 0;
    if !loop_state.tasks.is_empty() {
        cancelled = loop_state.tasks.len();
        tracing::warn!(
            jobs = cancelled,
            "drain window over: cancelling running jobs"
        );
        job_cancel.cancel();
        let grace = tokio::time::Instant::now() + Duration::from_millis(config.cancel_grace_ms);
        while !loop_state.tasks.is_empty() {
            tokio::select! {
                Some(res) = loop_state.tasks.join_next_with_id() => loop_state.reap(res),
                _ = tokio::time::sleep_until(grace) => break,
            }
        }
        if !loop_state.tasks.is_empty() {
            tracing::warn!(
                jobs = loop_state.tasks.len(),
                "jobs ignored cancellation: abandoning them"
            );
            loop_state.tasks.abort_all();
            while let Some(res) = loop_state.tasks.join_next_with_id().await {
                loop_state.reap(res);
            }
        }
    }
    stats.jobs_running.store(0, Ordering::Relaxed);
    let claimed_not_started = loop_state.ready.len();
    let Loop { fin_tx, .. } = loop_state;
    drop(fin_tx);
    if tokio::time::timeout(Duration::from_secs(5), fin_handle)
        .await
        .is_err()
    {
        tracing::error!(
            "results could not be flushed in time; unfinished jobs will run again at next start"
        );
    }
    background.cancel();
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
    recorder_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(5), recorder)
        .await
        .is_err()
    {
        tracing::warn!(
            events = stores.telemetry.len(),
            "metadata.db could not be written in time: these telemetry events are lost; staged audit rows move at the next start"
        );
    }
    crate::horos::register(&config.horos(), "stopped");
    let _ = state_tx.send(WorkerState::Stopped);
    let _ = tokio::time::timeout(Duration::from_secs(3), heartbeat).await;
    tracing::info!(
        elapsed_ms = t0.elapsed().as_millis() as u64,
        "brainloop worker stopped"
    );
    Ok(())
}

/// What one claim produced: jobs for the ready queue, and instant jobs already answered
/// (`instant.rs`).
#[derive(Default)]
struct Claim {
    ready: Vec<claim::Claimed>,
    answered: Vec<Finished>,
}

/// The supervisor's running-jobs bookkeeping.
struct Loop {
    config: Arc<Config>,
    stores: Arc<Stores>,
    registry: Arc<Registry>,
    stats: Arc<Stats>,
    sandbox: Arc<crate::sandbox::detect::Level>,
    llm: Arc<crate::llm::Llm>,
    tasks: JoinSet<JobResult>,
    running: HashMap<Id, RunningJob>,
    fin_tx: finisher::Sender,
    job_cancel: CancellationToken,
    /// Jobs resumed by a human approval, until they start.
    approved: HashMap<i64, actions::ApprovedRun>,
    /// Claimed jobs not started yet, and the running slots of each client.
    ready: ReadyQueue,
    /// Rate limit of the "cannot start jobs" line.
    start_log: crate::stats::Every,
}

impl Loop {
    /// Takes a claim's outcome: answered jobs to the result writer, the rest to the ready queue.
    fn take(&mut self, claim: Claim) {
        for f in claim.answered {
            if !self.fin_tx.send(f) {
                tracing::error!(
                    "result writer is gone; answered jobs will run again at next start"
                );
                break;
            }
        }
        let now = crate::time::now_ms();
        for c in claim.ready {
            let job = Job::new(c.id, c.priority, &c.client_id);
            self.ready.push(job, c.not_before, now);
        }
    }

    /// Starts due jobs while slots are free (within each client's share): one lifecycle + one
    /// output transaction per group.
    async fn start_ready(&mut self) {
        // Fail closed (issue 21): while results cannot be recorded, nothing new starts — a job
        // whose run could not be recorded must not run. The jobs wait here and start once the
        // finisher's retries (with back-off) succeed again.
        if self.stats.has_problem("results") {
            return;
        }
        let free = self.config.concurrency.saturating_sub(self.tasks.len());
        let picked: Vec<Job> = std::iter::from_fn(|| self.ready.pop()).take(free).collect();
        if picked.is_empty() {
            return;
        }
        let ids: Vec<i64> = picked.iter().map(|p| p.id).collect();
        // Inline, not on the blocking pool: lifecycle.db is synchronous=NORMAL and only this
        // connection writes it, so marking a few rows running takes microseconds, and the hop
        // would cost more than the write. The `running` results rows go through the finisher,
        // which groups them with finished jobs into one output.db transaction.
        let now = crate::time::now_ms();
        let res = tokio::task::block_in_place(|| {
            self.stores
                .lifecycle
                .with(|c| Ok(write_tx(c, |tx| lifecycle::start(tx, &ids, now))?))
        });
        let snaps = match res {
            Ok(s) => {
                self.start_ok();
                s
            }
            Err(e) => {
                self.start_failed(format!("{e:#}"));
                for job in picked {
                    self.ready.put_back(job);
                }
                return;
            }
        };
        let mut slots: HashMap<i64, Arc<str>> =
            picked.into_iter().map(|j| (j.id, j.client)).collect();
        for s in &snaps {
            let row = ResultRow {
                job_id: s.job_id,
                action: s.action.clone(),
                client_id: s.client_id.clone(),
                status: JobStatus::Running,
                result: None,
                error: None,
                attempts: s.attempts,
                duration_ms: None,
                started_at: Some(now),
                finished_at: None,
            };
            self.fin_tx.send(Finished {
                row,
                disposition: Disposition::Started,
                audit: None,
            });
        }
        for snap in snaps {
            match slots.remove(&snap.job_id) {
                Some(slot) => self.spawn_job(snap, slot),
                None => tracing::error!(job_id = snap.job_id, "started a job that was not picked"),
            }
        }
        // Picked jobs that had no open processed_log row did not start: their slots are free.
        for (_, client) in slots {
            self.ready.release(&client);
        }
    }

    fn start_ok(&mut self) {
        self.start_log.reset();
        self.stats.clear_problem("start");
    }

    /// Jobs could not be marked running: one log line per 30 s, and a problem in the heartbeat.
    fn start_failed(&mut self, error: String) {
        if let Some(suppressed) = self.start_log.due(Duration::from_secs(30)) {
            tracing::error!(error, suppressed, "cannot start jobs; will retry");
        }
        self.stats.set_problem(
            "start",
            format!("cannot mark jobs running in lifecycle.db: {error}"),
        );
    }

    fn spawn_job(&mut self, snap: Snapshot, slot: Arc<str>) {
        let ctx = JobCtx {
            job_id: snap.job_id,
            client_id: snap.client_id.clone(),
            attempt: snap.attempts,
            cancel: self.job_cancel.child_token(),
            stores: Arc::clone(&self.stores),
            config: Arc::clone(&self.config),
            actions: Arc::clone(&self.registry) as Arc<dyn crate::job::Actions>,
            stats: Arc::clone(&self.stats),
            grants: None,
            approval: self.approved.remove(&snap.job_id),
            sandbox: Arc::clone(&self.sandbox),
            llm: Arc::clone(&self.llm),
        };
        let params_hash = crate::db::metadata::params_hash(snap.params.as_deref().unwrap_or(""));
        let span = tracing::info_span!(
            "job",
            job_id = snap.job_id,
            action = snap.action.as_deref().unwrap_or("?"),
            client = %snap.client_id,
            attempt = snap.attempts
        );
        let (action, params, reject) = (
            snap.action.clone(),
            snap.params.clone(),
            snap.reject_reason.clone(),
        );
        let registry = Arc::clone(&self.registry);
        let handle = self.tasks.spawn(
            async move {
                let t = Instant::now();
                let mut out = actions::run(
                    &registry,
                    ctx,
                    action.as_deref(),
                    params.as_deref(),
                    reject.as_deref(),
                )
                .await;
                out.error = out.error.map(crate::quote::error);
                if out.status == JobStatus::Succeeded {
                    tracing::debug!(ms = t.elapsed().as_millis() as u64, "job succeeded");
                } else {
                    tracing::info!(
                        status = out.status.as_str(),
                        error = out.error.as_deref().unwrap_or(""),
                        "job ended"
                    );
                }
                (out, t.elapsed())
            }
            .instrument(span),
        );
        self.running.insert(
            handle.id(),
            RunningJob {
                snap,
                params_hash,
                slot,
            },
        );
    }

    /// Ends a job that was waiting for a human (denied, expired).
    fn finish_waiting(&mut self, row: ResultRow) {
        let audit = AuditRow {
            timestamp: crate::time::now_ms(),
            job_id: Some(row.job_id),
            client_id: row.client_id.clone(),
            action: row.action.clone(),
            params_hash: None,
            status: row.status.as_str().to_string(),
            duration_ms: None,
            permission_set: actions::permission_set_of(&self.registry, row.action.as_deref())
                .map(|s| s.to_string()),
        };
        let _ = self.fin_tx.send(Finished {
            row,
            disposition: Disposition::Final,
            audit: Some(audit),
        });
    }

    /// Records a job that stopped: its outcome goes to the finisher.
    fn reap(&mut self, res: Result<(Id, JobResult), JoinError>) {
        let (id, outcome, elapsed) = match res {
            Ok((id, (out, d))) => (id, out, Some(d)),
            Err(e) => {
                let id = e.id();
                let out = if e.is_panic() {
                    let msg = panic_message(e.into_panic());
                    tracing::error!(panic = %msg, "action panicked");
                    Outcome::failed(format!("internal error: the action panicked ({msg})"))
                } else {
                    Outcome::cancelled()
                };
                (id, out, None)
            }
        };
        let Some(job) = self.running.remove(&id) else {
            tracing::error!("a finished task had no job record");
            return;
        };
        // A started job gives its slot back here only: every task is reaped exactly once.
        self.ready.release(&job.slot);
        let finished = Finished::ended(
            &self.registry,
            &job.snap,
            job.params_hash,
            outcome,
            elapsed,
            self.job_cancel.is_cancelled(),
        );
        if !self.fin_tx.send(finished) {
            tracing::error!(
                job_id = job.snap.job_id,
                "result writer is gone; the job will run again at next start"
            );
        }
    }
}

/// Set by a change notification on command_security.db; confirmed with data_version, which
/// moves only when *another* connection (the operator's CLI) commits — the worker's own registry
/// writes do not trigger a scan. The WAL write that notified comes before its commit is visible
/// (as on the input side), so the input's re-checks re-check it for a while.
#[derive(Default)]
struct SecurityWatch {
    /// A data_version check is due.
    notified: bool,
    recheck_until: Option<tokio::time::Instant>,
}

impl SecurityWatch {
    fn noticed(&mut self, now: tokio::time::Instant) {
        self.notified = true;
        self.recheck_until = Some(now + RECHECK_LAST * 2);
    }

    /// At a re-check: another data_version check while the last notification is recent.
    fn recheck(&mut self, now: tokio::time::Instant) {
        if self.recheck_until.is_some_and(|u| now <= u) {
            self.notified = true;
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Records a telemetry event: queued for the recorder, never waits on metadata.db
/// (`telemetry`, `recorder`).
pub async fn event(
    stores: &Arc<Stores>,
    kind: &'static str,
    job_id: Option<i64>,
    detail: serde_json::Value,
) {
    stores
        .telemetry
        .push(crate::telemetry::Event::now(kind, job_id, detail));
}
