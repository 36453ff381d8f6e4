//! The result writer: finished jobs arrive on a channel and are written in groups — one
//! output.db transaction for all their `results` rows (synchronous=FULL), then one lifecycle.db
//! transaction marking them done and staging their audit rows (`db::audit_outbox`; the recorder
//! moves them into metadata.db, so a locked metadata.db never holds results back). Under load this group commit is what
//! keeps throughput near the disk's commit rate; at rest a group is a single job.
//!
//! Order is the crash-safety argument: a result is committed before its job is marked done, and
//! recovery treats a committed final result as done, so a kill -9 between the two loses nothing
//! and runs nothing twice. A failed write (disk full, lock held too long) is retried, never dropped.
//!
//! Once shutdown is requested a failed write is not retried: the group goes to the results
//! spool beside the databases (`spool`, fsynced), and so does every later group, so the jobs
//! that finished during the drain keep their results within the shutdown budget; the next
//! start-up replays the spool through [`write_group`] before it claims anything.

use crate::actions::{self, Outcome, Registry};
use crate::db::lifecycle::Snapshot;
use crate::db::metadata::AuditRow;
use crate::db::output::{self, JobStatus, ResultRow};
use crate::db::{audit_outbox, lifecycle, write_tx, Stores};
use crate::shutdown::Shutdown;
use crate::stats::Stats;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

const MAX_GROUP: usize = 512;
/// The least time between the starts of two output.db commits while results stream in.
const PACE: Duration = Duration::from_millis(2);

/// What becomes of a job that stopped running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Only its results row is written, no lifecycle transition: a job that just started
    /// (`running`), or a failed attempt the retry policy retries (`queued`; `Loop::retry_later`
    /// committed its transition first).
    Started,
    /// A final status: the job is done.
    Final,
    /// Cut off by shutdown: back to `claimed`, runs again at next start (attempt not counted).
    Requeue,
    /// Waiting for a human (`pending_validation`): not done, not re-run.
    Pending,
}

#[derive(Debug, Clone)]
pub struct Finished {
    pub row: ResultRow,
    pub disposition: Disposition,
    pub audit: Option<AuditRow>,
}

impl Finished {
    /// The final end of a job that is not a run reaped now (a waiting job denied or expired, a
    /// cancelled one), audited like any end. One builder for every such end.
    pub fn final_end(registry: &Registry, row: ResultRow) -> Finished {
        let audit = AuditRow {
            timestamp: crate::time::now_ms(),
            job_id: Some(row.job_id),
            client_id: row.client_id.clone(),
            action: row.action.clone(),
            params_hash: None,
            status: row.status.as_str().to_string(),
            duration_ms: None,
            permission_set: actions::permission_set_of(registry, row.action.as_deref())
                .map(|s| s.to_string()),
        };
        Finished {
            row,
            disposition: Disposition::Final,
            audit: Some(audit),
        }
    }

    /// What is recorded of a job that stopped running: its results row and its audit row. One
    /// function for every way a job ends (a task reaped, an instant job answered).
    /// `shutdown_cut` — the task was cancelled by the worker's shutdown (runs again at next start);
    /// `elapsed` — how long it ran (`None`: the task panicked or was aborted).
    pub fn ended(
        registry: &Registry,
        snap: &Snapshot,
        params_hash: String,
        mut outcome: Outcome,
        elapsed: Option<Duration>,
        shutdown_cut: bool,
    ) -> Finished {
        outcome.error = outcome.error.map(crate::quote::error);
        let disposition = match outcome.status {
            JobStatus::Cancelled if shutdown_cut => Disposition::Requeue,
            JobStatus::PendingValidation => Disposition::Pending,
            _ => Disposition::Final,
        };
        let now = crate::time::now_ms();
        let (status, error) = match disposition {
            Disposition::Requeue => (
                JobStatus::Queued,
                Some("cut off by a worker shutdown; runs again at the next start".to_string()),
            ),
            _ if !outcome.status.is_final() && outcome.status != JobStatus::PendingValidation => (
                JobStatus::Failed,
                Some(format!(
                    "internal error: action returned non-final status {}",
                    outcome.status.as_str()
                )),
            ),
            _ => (outcome.status, outcome.error),
        };
        let duration_ms = elapsed
            .map(|d| d.as_millis() as i64)
            .unwrap_or(now - snap.started_at);
        let row = ResultRow {
            job_id: snap.job_id,
            action: snap.action.clone(),
            client_id: snap.client_id.clone(),
            status,
            result: outcome.result.as_ref().map(|v| v.to_string()),
            error,
            attempts: snap.attempts,
            duration_ms: Some(duration_ms),
            started_at: Some(snap.started_at),
            finished_at: (disposition == Disposition::Final).then_some(now),
        };
        let audit = AuditRow {
            timestamp: now,
            job_id: Some(snap.job_id),
            client_id: snap.client_id.clone(),
            action: snap.action.clone(),
            params_hash: Some(params_hash),
            status: status.as_str().to_string(),
            duration_ms: Some(duration_ms),
            permission_set: actions::permission_set_of(registry, snap.action.as_deref())
                .map(|s| s.to_string()),
        };
        Finished {
            row,
            disposition,
            audit: Some(audit),
        }
    }
}

/// Results handed to the writer and not yet written (the dispatch loop stops claiming while it
/// is over [`BACKLOG_MAX`], so a fast backlog drain cannot queue unbounded memory here).
#[derive(Default)]
pub struct Backlog {
    pending: AtomicUsize,
    /// Bytes of result and error text among them.
    bytes: AtomicUsize,
    written: Notify,
}

/// Beyond this many unwritten results, or [`BACKLOG_BYTES`] of their text, the dispatch loop
/// waits before claiming more.
pub const BACKLOG_MAX: usize = 4 * MAX_GROUP;
pub const BACKLOG_BYTES: usize = 8 << 20;

fn text_bytes(f: &Finished) -> usize {
    f.row.result.as_ref().map_or(0, String::len) + f.row.error.as_ref().map_or(0, String::len)
}

/// The dispatch side of the result writer.
#[derive(Clone)]
pub struct Sender {
    tx: mpsc::UnboundedSender<Finished>,
    backlog: Arc<Backlog>,
}

impl Sender {
    /// Hands `f` to the writer; false if the writer is gone (the job then runs again at the next
    /// start: its lifecycle row is not done).
    pub fn send(&self, f: Finished) -> bool {
        let bytes = text_bytes(&f);
        self.backlog.pending.fetch_add(1, Ordering::Relaxed);
        self.backlog.bytes.fetch_add(bytes, Ordering::Relaxed);
        if self.tx.send(f).is_err() {
            self.backlog.pending.fetch_sub(1, Ordering::Relaxed);
            self.backlog.bytes.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Waits until at most [`BACKLOG_MAX`] results and [`BACKLOG_BYTES`] wait to be written.
    pub async fn below_max(&self) {
        while self.backlog.pending.load(Ordering::Relaxed) > BACKLOG_MAX
            || self.backlog.bytes.load(Ordering::Relaxed) > BACKLOG_BYTES
        {
            self.backlog.written.notified().await;
        }
    }
}

pub fn spawn(
    stores: Arc<Stores>,
    stats: Arc<Stats>,
    shutdown: Shutdown,
) -> (Sender, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let backlog = Arc::new(Backlog::default());
    let handle = tokio::spawn(run(rx, stores, stats, Arc::clone(&backlog), shutdown));
    (Sender { tx, backlog }, handle)
}

/// At most one "cannot record results" line per this period.
const LOG_PERIOD: Duration = Duration::from_secs(30);

async fn run(
    mut rx: mpsc::UnboundedReceiver<Finished>,
    stores: Arc<Stores>,
    stats: Arc<Stats>,
    backlog: Arc<Backlog>,
    shutdown: Shutdown,
) {
    let mut log_every = crate::stats::Every::default();
    let mut paced_until: Option<tokio::time::Instant> = None;
    // Set at the first group that could not be written after shutdown was requested: from then
    // on every group goes to the spool, in order.
    let mut spooling = false;
    while let Some(first) = rx.recv().await {
        if let Some(t) = paced_until.take() {
            tokio::time::sleep_until(t).await;
        }
        let started = tokio::time::Instant::now();
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(f) => group.push(f),
                Err(_) => break,
            }
        }
        let group = Arc::new(group);
        let mut delay = Duration::from_millis(50);
        loop {
            if !spooling {
                if let Some(why) = gone(&stores).await {
                    // output.db or lifecycle.db deleted or replaced under the worker: a commit
                    // would land in a file nobody reads again. From now on every group goes to
                    // the fsynced spool, in order; the next start replays it (issue 50).
                    tracing::error!(
                        error = why,
                        "results go to the results spool: a database was deleted or replaced under the worker"
                    );
                    stats.set_problem(crate::stats::DATABASE_FILES, why);
                    spooling = true;
                }
            }
            if spooling {
                to_spool(&stores, &group, &stats).await;
                break;
            }
            let g = Arc::clone(&group);
            let st = Arc::clone(&stores);
            let failed = match tokio::task::spawn_blocking(move || write_group(&st, &g)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("{e:#}")),
                Err(e) => Some(format!("the result writer task failed: {e}")),
            };
            let Some(error) = failed else {
                stats.clear_problem("results");
                log_every.reset();
                break;
            };
            // One line per period, not per attempt (a full disk retries for as long as it lasts).
            if let Some(suppressed) = log_every.due(LOG_PERIOD) {
                tracing::error!(
                    jobs = group.len(),
                    error,
                    suppressed,
                    "cannot record results; retrying"
                );
            }
            stats.set_problem("results", format!("cannot record results: {error}"));
            if shutdown.requested.is_cancelled() {
                tracing::warn!(
                    error,
                    "cannot record results during the shutdown: writing them to the results spool; the next start replays it before claiming"
                );
                spooling = true;
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.requested.cancelled() => {}
            }
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        // A job ended: the warm sandbox helpers its commands used are replaced now, once its
        // result is committed, not while that result is written (issue 39: a replacement's exec,
        // cgroup and namespaces took the CPU the commit needed on a small machine).
        if group.iter().any(|f| f.disposition != Disposition::Started) {
            crate::sandbox::warm::replenish();
        }
        // Results arrived while this group was written: a stream, so the next commit waits
        // until PACE after this one began and takes them all (issue 24: a producer committing
        // job by job then shares the disk with a few large commits, not one per job). A client
        // waiting for each answer before sending the next sends nothing meanwhile: not paced.
        if !rx.is_empty() {
            paced_until = Some(started + PACE);
        }
        backlog.pending.fetch_sub(group.len(), Ordering::Relaxed);
        let bytes: usize = group.iter().map(text_bytes).sum();
        backlog.bytes.fetch_sub(bytes, Ordering::Relaxed);
        backlog.written.notify_one();
        for f in group.iter() {
            if f.disposition != Disposition::Final {
                continue;
            }
            stats.jobs_done_total.fetch_add(1, Ordering::Relaxed);
            stats.incr(counter_name(f.row.status), 1.0);
        }
    }
}

/// Why the results cannot be committed where they would be read: output.db or lifecycle.db
/// deleted or replaced under the worker (`db::Db::file_gone`, two stats on the blocking pool).
async fn gone(stores: &Arc<Stores>) -> Option<String> {
    let st = Arc::clone(stores);
    tokio::task::spawn_blocking(move || {
        let why: Vec<String> = [&st.output, &st.lifecycle]
            .iter()
            .filter_map(|d| d.file_gone())
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    })
    .await
    .ok()
    .flatten()
}

/// Writes `group` to the results spool (`spool`), on the blocking pool. If even that fails, the
/// group is lost and its jobs run again at the next start (logged).
async fn to_spool(stores: &Arc<Stores>, group: &Arc<Vec<Finished>>, stats: &Stats) {
    let (dir, g) = (stores.data_dir.clone(), Arc::clone(group));
    let res = tokio::task::spawn_blocking(move || super::spool::append(&dir, &g)).await;
    let error = match res {
        Ok(Ok(())) => {
            stats.set_problem(
                "results",
                "results spooled: output.db could not be written during the shutdown; the next start replays them".to_string(),
            );
            return;
        }
        Ok(Err(e)) => format!("{e:#}"),
        Err(e) => format!("the spool task failed: {e}"),
    };
    let ids: Vec<i64> = group.iter().map(|f| f.row.job_id).collect();
    tracing::error!(
        error,
        ?ids,
        "cannot write results to output.db nor to the results spool: these jobs run again at the next start"
    );
}

fn counter_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Succeeded => "jobs_succeeded",
        JobStatus::Failed | JobStatus::Interrupted => "jobs_failed",
        JobStatus::Denied => "jobs_denied",
        JobStatus::Blocked => "jobs_blocked",
        JobStatus::DuplicateWarning => "jobs_duplicate_warning",
        JobStatus::Expired => "jobs_expired",
        JobStatus::Cancelled => "jobs_cancelled",
        _ => "jobs_other",
    }
}

/// Commits `group`: its results rows in one output.db transaction, then its lifecycle
/// transitions and audit rows in one lifecycle.db transaction. Also the spool's replay.
pub(super) fn write_group(stores: &Stores, group: &[Finished]) -> anyhow::Result<()> {
    stores.output.with(|c| {
        Ok(write_tx(c, |tx| {
            output::upsert_results(tx, group.iter().map(|f| &f.row))
        })?)
    })?;
    let now = crate::time::now_ms();
    let ids = |d: Disposition| -> Vec<i64> {
        group
            .iter()
            .filter(|f| f.disposition == d)
            .map(|f| f.row.job_id)
            .collect()
    };
    let (done, requeue, pending) = (
        ids(Disposition::Final),
        ids(Disposition::Requeue),
        ids(Disposition::Pending),
    );
    let audit: Vec<AuditRow> = group.iter().filter_map(|f| f.audit.clone()).collect();
    stores.lifecycle.with(|c| {
        Ok(write_tx(c, |tx| {
            // Staged with the transition it records: the recorder moves it (audit_outbox).
            audit_outbox::stage(tx, &audit)?;
            lifecycle::finish(tx, &done, now)?;
            lifecycle::requeue(tx, &requeue)?;
            lifecycle::pending_validation(tx, &pending)
        })?)
    })?;
    if !audit.is_empty() {
        stores.telemetry.wake();
    }
    Ok(())
}
