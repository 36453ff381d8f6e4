//! The recorder (issue 19): **the worker's writes of telemetry events and audit rows into
//! metadata.db happen here, never on the dispatch loop or in the result writer**, so a
//! metadata.db lock held by another process (each attempt waits up to `busy_timeout`, 5 s; after
//! a shutdown signal at most 1 s, `shutdown::lock_wait_limit`) delays only this task.
//!
//! It wakes when an event is recorded or audit rows are staged (`telemetry::Queue::wake`) —
//! while jobs stream in, at most once per [`PACE`] — and writes what is waiting — audit rows first (moved from lifecycle's outbox exactly once,
//! `db::audit_outbox`), then events in batches — and while anything fails it retries with
//! back-off (50 ms doubling to 2 s), one log line per cause per 30 s. At shutdown it makes one
//! last attempt, bounded by the caller: events still in memory then are lost (counted in the
//! log), audit rows stay staged and move at the next start.

use crate::db::{audit_outbox, metadata, Stores};
use crate::stats::Every;
use anyhow::{Context, Result};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const BATCH: usize = 1024;
/// While jobs stream in (a flush moved at least [`STREAM`] audit rows), at most one write of
/// audit rows and events per this period: they are not on any job's path (results are), so a
/// stream moves its audit rows in a few large transactions instead of two small ones per job
/// (issue 24). A few jobs at rest are audited at once, as before.
const PACE: Duration = Duration::from_millis(50);
const STREAM: usize = 16;
const FIRST_RETRY: Duration = Duration::from_millis(50);
const LAST_RETRY: Duration = Duration::from_secs(2);
const LOG_PERIOD: Duration = Duration::from_secs(30);

/// Starts the recorder; it returns after `stop` is cancelled and its last attempt ended.
pub fn spawn(stores: Arc<Stores>, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(run(stores, stop))
}

async fn run(stores: Arc<Stores>, stop: CancellationToken) {
    let mut retry: Option<Duration> = None;
    let mut log_every = Every::default();
    loop {
        let backoff = async {
            match retry {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = stores.telemetry.woken() => {}
            _ = backoff => {}
        }
        match flush(&stores).await {
            Ok(moved) => {
                retry = None;
                log_every.reset();
                if moved >= STREAM {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(PACE) => {}
                    }
                }
            }
            Err(e) => {
                if let Some(suppressed) = log_every.due(LOG_PERIOD) {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        suppressed,
                        "cannot write to metadata.db; retrying (audit rows stay staged, nothing is lost)"
                    );
                }
                retry = Some(retry.map_or(FIRST_RETRY, |d| (d * 2).min(LAST_RETRY)));
            }
        }
    }
    if let Err(e) = flush(&stores).await {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot write to metadata.db at shutdown; staged audit rows move at the next start"
        );
    }
    let lost = stores.telemetry.len() as u64 + stores.telemetry.take_dropped();
    if lost > 0 {
        tracing::warn!(events = lost, "telemetry events lost at shutdown");
    }
}

/// Writes everything waiting, on the blocking pool; returns how many audit rows moved.
async fn flush(stores: &Arc<Stores>) -> Result<usize> {
    let st = Arc::clone(stores);
    tokio::task::spawn_blocking(move || {
        let audit = move_audit(&st);
        let events = write_events(&st);
        events.and(audit)
    })
    .await
    .context("the recorder's task panicked")?
}

/// Moves every staged audit row; returns how many.
fn move_audit(stores: &Stores) -> Result<usize> {
    let mut moved = 0;
    loop {
        let n = audit_outbox::move_batch(stores, BATCH)?;
        moved += n;
        if n < BATCH {
            return Ok(moved);
        }
    }
}

fn write_events(stores: &Stores) -> Result<()> {
    let q = &stores.telemetry;
    loop {
        let mut batch = q.take(BATCH);
        let dropped = q.take_dropped();
        if batch.is_empty() && dropped == 0 {
            return Ok(());
        }
        if dropped > 0 {
            batch.push(crate::telemetry::Event::now(
                "events_dropped",
                None,
                json!({"count": dropped}),
            ));
        }
        if let Err(e) = stores.metadata.with(|c| metadata::insert_events(c, &batch)) {
            if dropped > 0 {
                batch.pop();
                q.restore_dropped(dropped);
            }
            q.put_back(batch);
            return Err(e).context("cannot write telemetry events");
        }
        if dropped > 0 {
            tracing::warn!(
                events = dropped,
                "telemetry events were dropped while metadata.db could not be written"
            );
        }
    }
}
