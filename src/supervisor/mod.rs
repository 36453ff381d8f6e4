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
//! [`run`] is three steps, each in its own file: start-up (`startup.rs`: background tasks,
//! recovery of the previous run's claims, then `READY`), the loop (`serve.rs`, whose wake-up
//! state — what the next pass does and when — is `wake.rs`), and the drain (`drain.rs`; first
//! signal: stop claiming, heartbeat `draining`, let running jobs finish within
//! `drain_window_ms`, cancel the rest (`cancel_grace_ms` to wind down, then abandoned), record
//! them so they run again, flush results, a `shutdown` event, heartbeat `stopped` — all inside
//! 60 s). This file owns the running jobs' bookkeeping (`Loop`: start, spawn, reap).

mod cancels;
pub mod claim;
mod drain;
pub mod finisher;
mod fleet_local;
pub mod instant;
mod pace;
pub mod ready;
pub mod recorder;
pub mod recovery;
mod retrying;
mod serve;
pub mod spool;
mod startup;
mod wake;
pub mod wakeup;

use crate::actions::{self, JobCtx, Outcome, Registry};
use crate::ask::answers as approvals;
use crate::config::Config;
use crate::db::lifecycle::{self, Snapshot};
use crate::db::output::{JobStatus, ResultRow};
use crate::db::{write_tx, Stores};
use crate::shutdown::Shutdown;
use crate::stats::Stats;
use anyhow::Result;
use finisher::{Disposition, Finished};
use ready::{Job, ReadyQueue};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What the supervisor remembers of a running job.
struct RunningJob {
    snap: Snapshot,
    params_hash: String,
    /// The client whose slot the job holds (released when the task is reaped).
    slot: Arc<str>,
    /// This job's own token (a child of `Loop::job_cancel`): `brainloop cancel` stops it alone.
    cancel: CancellationToken,
}

type JobResult = (Outcome, Duration);

/// Runs the worker until shutdown. The databases must be migrated and the instance lock held.
pub async fn run(
    config: Arc<Config>,
    stores: Arc<Stores>,
    registry: Arc<Registry>,
    sandbox: Arc<crate::sandbox::detect::Level>,
    shutdown: Shutdown,
) -> Result<()> {
    let startup::Started {
        mut jobs,
        hwm,
        background,
    } = startup::start(config, stores, registry, sandbox, &shutdown).await?;
    serve::serve(&mut jobs, &background.watcher, hwm, &shutdown).await;
    drain::drain(jobs, background, &shutdown).await;
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
    /// Running jobs `brainloop cancel` stopped (`cancels`), until their request is closed.
    cancelling: std::collections::HashSet<i64>,
    /// Jobs whose `cancelled` end was handed to the result writer, until their request is closed.
    ended: std::collections::HashSet<i64>,
    /// The last input.db `withdrawals` row decided (`cancels::adopt`; 0 at start: every row is
    /// read again once, and adopting one twice changes nothing).
    withdrawn: i64,
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
        // `not_before` becomes a monotonic deadline once, here (see `ready`).
        let now = crate::time::mono_ms();
        for c in claim.ready {
            crate::sandbox::marks::early(c.id, "claimed");
            let job = Job::new(c.id, c.priority, &c.client_id);
            self.ready
                .push(job, c.not_before.map(crate::time::mono_deadline), now);
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
        for &id in &ids {
            crate::sandbox::marks::early(id, "picked");
        }
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
        crate::sandbox::marks::early(snap.job_id, "task");
        let cancel = self.job_cancel.child_token();
        let ctx = JobCtx {
            job_id: snap.job_id,
            client_id: snap.client_id.clone(),
            attempt: snap.attempts,
            cancel: cancel.clone(),
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
                cancel,
            },
        );
    }

    /// Ends a job that was waiting for a human (denied, expired).
    fn finish_waiting(&mut self, row: ResultRow) {
        let _ = self.fin_tx.send(Finished::final_end(&self.registry, row));
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
        crate::sandbox::marks::forget(job.snap.job_id);
        // A started job gives its slot back here only: every task is reaped exactly once.
        self.ready.release(&job.slot);
        // Stopped by `brainloop cancel` (`cancels`): final, never requeued — unless it had
        // finished first, whose real outcome stands.
        let by_operator =
            self.cancelling.contains(&job.snap.job_id) && outcome.status == JobStatus::Cancelled;
        let outcome = if by_operator {
            self.ended.insert(job.snap.job_id);
            cancelled_by_operator(&self.stores, job.snap.job_id)
        } else {
            outcome
        };
        // Cut by the shutdown: cancelled by the drain, or it gave up (`Outcome::cancelled`) on
        // something the shutdown stopped (a request it could not record).
        let shutdown_cut =
            !by_operator && (self.job_cancel.is_cancelled() || crate::shutdown::signalled());
        let mut outcome = outcome;
        if !by_operator && !shutdown_cut {
            if let Some(again) =
                retrying::decide(&self.config, &self.stores, &job.snap, &mut outcome)
            {
                self.retry_later(&job, outcome, elapsed, again);
                return;
            }
        }
        let finished = Finished::ended(
            &self.registry,
            &job.snap,
            job.params_hash,
            outcome,
            elapsed,
            shutdown_cut,
        );
        if !self.fin_tx.send(finished) {
            tracing::error!(
                job_id = job.snap.job_id,
                "result writer is gone; the job will run again at next start"
            );
        }
    }
}

impl Loop {
    /// A failed attempt the retry policy retries (`retrying`): the job is `claimed` again, due
    /// after the back-off, in lifecycle.db first (a crash then requeues it for that time), then
    /// its `queued` results row (with the failed attempt's audit row) goes to the result writer
    /// and the job back to the ready queue. If lifecycle.db cannot be written the attempt's
    /// failure is final instead.
    fn retry_later(
        &mut self,
        job: &RunningJob,
        outcome: Outcome,
        elapsed: Option<Duration>,
        again: retrying::Again,
    ) {
        let id = job.snap.job_id;
        let moved = tokio::task::block_in_place(|| {
            self.stores
                .lifecycle
                .with(|c| lifecycle::retry_later(c, id, again.next_at))
        });
        let failed = Finished::ended(
            &self.registry,
            &job.snap,
            job.params_hash.clone(),
            outcome,
            elapsed,
            false,
        );
        if !matches!(moved, Ok(true)) {
            tracing::warn!(job_id = id, error = ?moved.err().map(|e| format!("{e:#}")), "cannot requeue the job for its retry: its failure is final");
            let _ = self.fin_tx.send(failed);
            return;
        }
        tracing::info!(
            job_id = id,
            attempt = job.snap.attempts,
            delay_ms = again.delay_ms,
            "attempt failed: retrying after the back-off"
        );
        let mut row = failed.row;
        row.status = JobStatus::Queued;
        row.result = Some(again.result.to_string());
        row.error = Some(crate::quote::error(again.error));
        row.finished_at = None;
        let _ = self.fin_tx.send(Finished {
            row,
            disposition: Disposition::Started,
            audit: failed.audit,
        });
        let now = crate::time::mono_ms();
        let due = crate::time::mono_deadline(again.next_at);
        self.ready.push(
            Job::new(id, again.priority, &job.snap.client_id),
            Some(due),
            now,
        );
    }
}

/// The outcome of a running job `brainloop cancel` stopped: `cancelled`, naming the request.
fn cancelled_by_operator(stores: &Stores, job_id: i64) -> Outcome {
    let req = stores
        .security
        .with(|c| crate::db::cancels::get(c, job_id))
        .ok()
        .flatten();
    // A change set that reached the workspace is not taken back by a cancel (issue 34): said.
    let applied = stores
        .lifecycle
        .with(|c| crate::db::applies::open_of(c, job_id))
        .ok()
        .flatten()
        .is_some();
    let was = if applied {
        format!("running (stopped after its change set reached the workspace: `brainloop undo {job_id}` takes it back)")
    } else {
        "running (stopped; its overlay discarded, nothing applied)".to_string()
    };
    let mut out = Outcome::cancelled();
    if let Some(c) = req {
        out.result = Some(crate::db::cancels::result_json(&c, "running"));
        out.error = Some(crate::db::cancels::error_line(&c, &was));
    }
    out
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
