//! Retention and file-size bounds: a periodic pass that prunes, in bounded batches, old
//! heartbeats, metrics, finished results (with their lifecycle snapshots), decided validations,
//! telemetry events, command executions, egress connection records and consumed approvals, expired reader digests and unused
//! stored inferences; expires `loop` block sessions idle past `loop_session_ttl_ms` and closes
//! agent sessions whose job ended outside them; discards the change sets (`changes/<job>`) of
//! jobs whose final result is committed; then checkpoints each database's WAL (`TRUNCATE`) so
//! the `-wal` files stay small, and after a pass that deleted rows runs `incremental_vacuum` to
//! completion in bounded steps (`db::vacuum_step`) so freed pages go back to the disk.
//! The diff an applied change set kept for `brainloop show` (`bash::journal`) is dropped after
//! `results_days`, the rest of its journal row kept. The audit trail and policy history are kept. (input.db belongs to the producers: the worker never deletes there.)

use crate::config::Config;
use crate::db::{lifecycle, metadata, output, write_tx, Db, Stores};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const BATCH: usize = 5_000;
const DAY_MS: i64 = 86_400_000;

pub async fn run(stores: Arc<Stores>, config: Arc<Config>, stop: CancellationToken) {
    // First pass shortly after start, then every interval.
    let first = Duration::from_millis(config.retention.interval_ms.min(60_000));
    let mut wait = first;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        wait = Duration::from_millis(config.retention.interval_ms);
        match pass(&stores, &config, &stop).await {
            Ok(n) if n > 0 => tracing::info!(rows = n, "retention pass pruned rows"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "retention pass failed"),
        }
    }
}

/// One pruning + checkpoint pass; returns the number of rows deleted.
pub async fn pass(
    stores: &Arc<Stores>,
    config: &Config,
    stop: &CancellationToken,
) -> anyhow::Result<usize> {
    let now = crate::time::now_ms();
    let r = &config.retention;
    let days = |d: u64| now - d as i64 * DAY_MS;
    let (hb, me, res, ev, ex) = (
        days(r.heartbeat_days),
        days(r.metrics_days),
        days(r.results_days),
        days(r.events_days),
        days(r.executions_days),
    );
    let mut total = 0;
    // Each loop deletes one bounded batch per transaction so writers never wait long.
    loop {
        if stop.is_cancelled() {
            return Ok(total);
        }
        let n = stores
            .output
            .call(move |c| output::prune(c, hb, me, res, BATCH))
            .await?
            + stores
                .lifecycle
                .call(move |c| lifecycle::prune(c, res, BATCH))
                .await?
            + stores
                .metadata
                .call(move |c| metadata::prune(c, ev, BATCH))
                .await?
            + stores
                .security
                .call(move |c| {
                    // Egress records and consumed approvals are kept as long as executions;
                    // the diffs of applied change sets as long as results.
                    Ok(write_tx(c, |tx| {
                        Ok(crate::bash::registry::prune_executions(tx, ex, BATCH)?
                            + crate::egress::store::prune(tx, ex, BATCH)?
                            + crate::ask::validations::prune_approvals(tx, ex, BATCH)?
                            + crate::bash::journal::prune_diffs(tx, res, BATCH)?)
                    })?)
                })
                .await?;
        total += n;
        if n == 0 {
            break;
        }
    }
    // Open loop block sessions idle past their TTL end `expired`.
    let cutoff = now - config.loop_session_ttl_ms.min(i64::MAX as u64 / 2) as i64;
    let expired = stores
        .lifecycle
        .call(move |c| {
            crate::actions::expire_idle_loop_sessions(c, crate::actions::LOOP_BLOCKS_MODE, cutoff)
        })
        .await?;
    if expired > 0 {
        tracing::info!(sessions = expired, "idle loop sessions expired");
    }
    let closed = stores
        .lifecycle
        .call(crate::actions::close_orphaned_agent_sessions)
        .await?;
    if closed > 0 {
        tracing::info!(sessions = closed, "agent sessions of ended jobs closed");
    }
    // Change sets of finished jobs (kept after an apply until the result is committed).
    {
        let (st, dd) = (Arc::clone(stores), config.data_dir.clone());
        let swept = tokio::task::spawn_blocking(move || {
            crate::bash::changes::sweep_finished(&dd, |ids| {
                st.output.with(|c| crate::db::output::finals_among(c, ids))
            })
        })
        .await;
        match swept {
            Ok(Ok(n)) if n > 0 => {
                tracing::info!(change_sets = n, "discarded change sets of finished jobs")
            }
            Ok(Err(e)) => tracing::warn!(error = format!("{e:#}"), "cannot sweep change sets"),
            _ => {}
        }
    }
    for db in [
        &stores.output,
        &stores.lifecycle,
        &stores.metadata,
        &stores.security,
    ] {
        checkpoint(db).await;
        if total > 0 {
            vacuum(db, stop).await;
            checkpoint(db).await;
        }
    }
    Ok(total)
}

/// Gives the database's free pages back to the disk after a pass that deleted rows: bounded
/// `incremental_vacuum` steps (`db::vacuum_step`, each its own transaction on the writer
/// connection, so jobs' writes wait at most one step) until none is left or the worker stops.
async fn vacuum(db: &Arc<crate::db::Db>, stop: &CancellationToken) {
    let name = db.kind().file_name();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let step = db
            .call(|c| Ok(crate::db::vacuum_step(c, crate::db::VACUUM_STEP_PAGES)?))
            .await;
        match step {
            Ok(Some(0)) => return,
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::debug!(
                    db = name,
                    "made before incremental vacuum: free pages stay until a full VACUUM"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(db = name, error = format!("{e:#}"), "vacuum step skipped");
                return;
            }
        }
    }
}

/// `wal_checkpoint(TRUNCATE)`; a busy reader only makes it partial, which is fine.
pub async fn checkpoint(db: &Arc<Db>) {
    let name = db.kind().file_name();
    let res = db
        .call(|c| {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })
        .await;
    if let Err(e) = res {
        tracing::debug!(db = name, error = format!("{e:#}"), "checkpoint skipped");
    }
}
