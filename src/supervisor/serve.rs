//! The loop, between start-up and the drain: each pass claims from input.db, fires the schedules,
//! collects approvals and starts ready jobs, as the wake-up state (`wake.rs`) asks; then it waits
//! — in one `select!` — for a finished job, a file event, a deadline or shutdown. While a backlog
//! lasts it does not wait: it reaps, lets the result writer catch up, and passes again.

use super::ready::Job;
use super::wake::{ClaimAsk, Wake};
use super::wakeup::InputWatcher;
use super::{approvals, claim, event, instant, Claim, Loop};
use crate::actions::Registry;
use crate::db::{input, Stores};
use crate::schedules::Scheduler;
use crate::shutdown::Shutdown;
use anyhow::Result;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Runs passes until shutdown is requested; `hwm` — where the first claim starts.
pub(super) async fn serve(jobs: &mut Loop, watcher: &InputWatcher, hwm: i64, shutdown: &Shutdown) {
    let poll = Duration::from_millis(jobs.config.poll_fallback_ms);
    let mut wake = Wake::new(poll, hwm, Instant::now());
    let tz = crate::schedules::cronexpr::parse_tz(&jobs.config.schedules_timezone)
        .unwrap_or(chrono_tz::Tz::UTC);
    let mut scheduler = Scheduler::new(tz);
    loop {
        jobs.stats.tick();
        if shutdown.requested.is_cancelled() {
            break;
        }
        if let Some(ask) = wake.claim_now(Instant::now()) {
            claim(jobs, &mut wake, ask, shutdown).await;
            watcher.looked();
            super::cancels::adopt(jobs).await;
        }
        if wake.take_schedules_check() {
            refresh_schedules(jobs, &mut scheduler).await;
        }
        fire_schedules(jobs, &mut scheduler).await;
        if wake.security_to_confirm() {
            let st = &jobs.stores;
            let dv = tokio::task::block_in_place(|| st.security.with(|c| input::data_version(c)));
            wake.security_version(dv.ok());
        }
        if wake.take_approvals_check() {
            collect_approvals(jobs).await;
            super::cancels::pass(jobs).await;
        }
        start(jobs).await;

        if wake.backlog() {
            if !catch_up(jobs, &mut wake, watcher, shutdown).await {
                break;
            }
            continue;
        }
        // Both on the monotonic clock: the ready queue's own, a schedule's wall time converted.
        let dues = [
            jobs.ready.next_due(),
            scheduler.next_due().map(crate::time::mono_deadline),
        ];
        let deadline = wake.deadline(Instant::now(), crate::time::mono_ms(), dues);
        tokio::select! {
            biased;
            _ = shutdown.requested.cancelled() => break,
            Some(res) = jobs.tasks.join_next_with_id(), if !jobs.tasks.is_empty() => {
                jobs.reap(res);
            }
            _ = watcher.wake.notified() => wake.input_changed(),
            _ = watcher.approvals.notified() => wake.approvals_changed(Instant::now()),
            _ = tokio::time::sleep_until(deadline) => wake.timer(Instant::now()),
        }
    }
}

/// What a claim found: input.db's data_version, the claim, whether it came back full, and the
/// high-water mark after it.
type Claimed = (i64, Claim, bool, i64);

/// Claims new jobs (or only reads data_version, if it has not moved and the claim is not forced);
/// a failure is logged, shown in the heartbeat, and retried at the next poll. A shutdown
/// requested meanwhile does not wait for the claim (a locked database would make it wait): the
/// drain starts, and whatever the claim took is recovered at the next start like any claim.
async fn claim(jobs: &mut Loop, wake: &mut Wake, ask: ClaimAsk, shutdown: &Shutdown) {
    if jobs.stats.has_problem(crate::stats::DATABASE_FILES) {
        // A database deleted or replaced under the worker (the heartbeat's check): nothing new
        // is taken on until the operator repairs and restarts it (`brainloop status` says why).
        let failure = wake.claim_failed();
        if let Some(suppressed) = failure.log {
            tracing::warn!(
                suppressed,
                "not claiming: a database was deleted or replaced under the worker (see `brainloop status`)"
            );
        }
        return;
    }
    let (st, reg) = (Arc::clone(&jobs.stores), Arc::clone(&jobs.registry));
    let c = &jobs.config;
    let limits = (c.claim_batch, c.params_max_bytes, c.claim_max_bytes);
    // Fail closed (issue 21) holds for instant jobs too: none is answered while results
    // cannot be recorded.
    let answer = !jobs.stats.has_problem("results");
    let task = tokio::task::spawn_blocking(move || claim_blocking(&st, &reg, ask, limits, answer));
    let res = tokio::select! {
        biased;
        res = task => res,
        _ = shutdown.requested.cancelled() => {
            tracing::info!("shutdown requested during a claim: draining without waiting for it");
            return;
        }
    };
    match res {
        Ok(Ok((dv, claim, full, mark))) => {
            let rows = claim.ready.len() + claim.answered.len();
            wake.claimed(dv, rows, full, mark, Instant::now());
            jobs.stats.clear_problem("claim");
            jobs.take(claim);
        }
        Ok(Err(e)) => {
            let failure = wake.claim_failed();
            if let Some(suppressed) = failure.log {
                tracing::warn!(
                    error = format!("{e:#}"),
                    suppressed,
                    "cannot claim new jobs; retrying at the next poll"
                );
            }
            let problem = format!("cannot claim new jobs: {e:#}");
            jobs.stats.set_problem("claim", problem);
            if failure.first {
                let detail = json!({"where": "claim", "error": format!("{e:#}")});
                event(&jobs.stores, "error", None, detail).await;
            }
        }
        Err(e) => {
            wake.claim_panicked();
            tracing::error!(error = %e, "claim task panicked");
        }
    }
}

/// The claim itself, on the blocking pool. A check a file event asked for (`ask.settle`) waits
/// briefly for the commit to become visible. `limits`: the claim's batch, a job's largest
/// params, the claim's byte budget.
fn claim_blocking(
    st: &Stores,
    reg: &Registry,
    ask: ClaimAsk,
    (batch, cap, budget): (usize, u64, u64),
    answer: bool,
) -> Result<Claimed> {
    let mut mark = ask.mark;
    let dv = input::settled_data_version(&st.input, ask.prev, ask.settle)?;
    if !ask.force && Some(dv) == ask.prev {
        return Ok((dv, Claim::default(), false, mark));
    }
    let b = claim::claim_batch(st, reg, &mut mark, batch, cap, budget, answer)?;
    let answered = instant::answer(reg, &b.started);
    let claim = Claim {
        ready: b.claimed,
        answered,
    };
    Ok((dv, claim, b.full, mark))
}

/// Re-reads the schedules (at start and at every poll); invalid ones are skipped and recorded.
async fn refresh_schedules(jobs: &Loop, scheduler: &mut Scheduler) {
    let (stores, catch_up) = (&jobs.stores, jobs.config.schedules_catch_up);
    match tokio::task::block_in_place(|| scheduler.refresh(stores, catch_up)) {
        Ok(problems) => {
            for p in problems {
                tracing::warn!(problem = %p, "invalid schedule (skipped)");
                event(stores, "schedule_invalid", None, json!({"problem": p})).await;
            }
        }
        Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot read schedules"),
    }
}

/// Fires the schedules whose time has come: their jobs go to the ready queue; one whose
/// previous job still runs is skipped (and recorded).
async fn fire_schedules(jobs: &mut Loop, scheduler: &mut Scheduler) {
    let now = crate::time::now_ms();
    if scheduler.observe_clock(now) {
        tracing::info!(
            next_due = scheduler.next_due(),
            "the wall clock stepped back: schedules re-planned from the new time"
        );
    }
    if scheduler.next_due().is_none_or(|t| t > now) {
        return;
    }
    let stores = Arc::clone(&jobs.stores);
    match tokio::task::block_in_place(|| scheduler.fire_due(&stores, now)) {
        Ok((fired, skipped)) => {
            for f in fired {
                tracing::info!(schedule = %f.schedule, job_id = f.job_id, "schedule fired");
                jobs.ready
                    .push(Job::new(f.job_id, 0, &f.client_id), None, now);
            }
            for name in skipped {
                tracing::info!(schedule = %name, "schedule skipped: its previous job is still running");
                let detail = json!({"schedule": name, "reason": "previous job still running"});
                event(&stores, "schedule_skipped", None, detail).await;
            }
        }
        Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot fire schedules"),
    }
}

/// Consumes the operators' answers: an approved job goes back to the ready queue with its
/// approval, a denied or expired one ends.
async fn collect_approvals(jobs: &mut Loop) {
    let st = Arc::clone(&jobs.stores);
    let (dd, pp) = (jobs.config.data_dir.clone(), jobs.config.path_lists());
    let reg = Arc::clone(&jobs.registry);
    let collected = tokio::task::spawn_blocking(move || {
        approvals::collect(&st, &dd, &pp, &|a| reg.on_decision(&st, a))
    })
    .await;
    let resumes = match collected {
        Ok(Ok(resumes)) => resumes,
        Ok(Err(e)) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot process approvals; retrying"
            );
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "approvals task panicked");
            return;
        }
    };
    let now = crate::time::mono_ms();
    for r in resumes {
        match r {
            approvals::Resume::Run {
                job_id,
                priority,
                client_id,
                approval,
            } => {
                tracing::info!(job_id, validation_id = %approval.validation_id, "approved: resuming the job");
                jobs.approved.insert(job_id, approval);
                jobs.ready
                    .push(Job::new(job_id, priority, &client_id), None, now);
            }
            approvals::Resume::End(row) => jobs.finish_waiting(row),
        }
    }
}

/// Starts the due jobs slots allow, and updates the gauges the heartbeat reports.
async fn start(jobs: &mut Loop) {
    jobs.ready.promote(crate::time::mono_ms());
    jobs.start_ready().await;
    let stats = &jobs.stats;
    stats
        .jobs_running
        .store(jobs.tasks.len() as i64, Ordering::Relaxed);
    stats
        .queue_depth
        .store(jobs.ready.len() as i64, Ordering::Relaxed);
}

/// Between two claims of a backlog: reaps what finished without waiting, takes a stored
/// approvals notification or a due poll (`Wake::backlog_pass`), then claims again once the
/// result writer has caught up enough. False: shutdown was requested meanwhile.
async fn catch_up(
    jobs: &mut Loop,
    wake: &mut Wake,
    watcher: &InputWatcher,
    shutdown: &Shutdown,
) -> bool {
    use futures_util::FutureExt;
    while let Some(res) = jobs.tasks.try_join_next_with_id() {
        jobs.reap(res);
    }
    let notified = watcher.approvals.notified().now_or_never().is_some();
    wake.backlog_pass(Instant::now(), notified);
    tokio::select! {
        biased;
        _ = shutdown.requested.cancelled() => return false,
        _ = jobs.fin_tx.below_max() => {}
    }
    tokio::task::yield_now().await;
    true
}
