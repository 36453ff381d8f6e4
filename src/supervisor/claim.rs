//! Claiming: copies new rows of input.db `jobs` (above the high-water mark) into lifecycle.db
//! `queue` + `processed_log` in one transaction, so a job is snapshotted exactly once and history
//! is never rescanned. Instant jobs due now (`actions::is_instant`) are started in that same
//! transaction and handed back as snapshots for `supervisor::instant` to answer. Runs on the
//! blocking pool.

use crate::actions::{self, Registry};
use crate::db::input::NewJob;
use crate::db::lifecycle::Snapshot;
use crate::db::output::{JobStatus, ResultRow};
use crate::db::{cancels, input, lifecycle, output, write_tx, Stores};
use anyhow::Result;
use std::collections::{HashMap, HashSet};

/// A freshly claimed job, for the dispatcher.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub priority: i64,
    pub not_before: Option<i64>,
    /// The row's `client_id` (whose slot share the job uses).
    pub client_id: String,
}

/// What one claim took.
#[derive(Debug, Default)]
pub struct Batch {
    /// Jobs for the ready queue.
    pub claimed: Vec<Claimed>,
    /// Instant jobs already started (running, attempt 1) in the claim transaction.
    pub started: Vec<Snapshot>,
    /// The batch was full: more rows may be waiting.
    pub full: bool,
}

/// Claims at most `limit` rows, and at most about `max_bytes` of their text (always at least one
/// row), above `*hwm`; advances `*hwm`. Jobs whose final result already exists are recorded
/// done and left out. With `start_instant`, due instant jobs are started at once (`started`);
/// the rest go to the ready queue. The byte budget bounds the worker's memory whatever the
/// rows' size.
pub fn claim_batch(
    stores: &Stores,
    registry: &Registry,
    hwm: &mut i64,
    limit: usize,
    params_cap: u64,
    max_bytes: u64,
    start_instant: bool,
) -> Result<Batch> {
    let (mut rows, out_of_budget) = stores
        .input
        .with(|c| input::scan_budget(c, *hwm, limit, params_cap, max_bytes))?;
    if rows.is_empty() {
        return Ok(Batch::default());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    // A claim lost to power failure (lifecycle is synchronous=NORMAL) can be re-claimed, but a
    // job whose final result was committed (output is FULL) must never run again.
    let mut finals = stores.output.with(|c| output::finals_among(c, &ids))?;
    let now = crate::time::now_ms();
    // Cancelled by the operator before the worker saw them: they end here and never run.
    finals.extend(cancel_unclaimed(stores, &rows, &finals, now)?);
    refuse_held(stores, &mut rows, &finals)?;
    let instant: HashSet<i64> = rows
        .iter()
        .filter(|r| start_instant && !finals.contains(&r.id))
        .filter(|r| r.not_before.is_none_or(|t| t <= now))
        .filter(|r| actions::is_instant(registry, r.action.as_deref(), r.reject.is_some()))
        .map(|r| r.id)
        .collect();
    let started = stores.lifecycle.with(|c| {
        Ok(write_tx(c, |tx| {
            lifecycle::claim(tx, &rows, &finals, &instant, now)
        })?)
    })?;
    write_waiting(stores, &rows, &finals, now)?;
    let full = rows.len() == limit || out_of_budget;
    if let Some(last) = rows.last() {
        *hwm = last.id;
    }
    let mut batch = Batch {
        full,
        ..Batch::default()
    };
    for r in rows.into_iter().filter(|r| !finals.contains(&r.id)) {
        if started.contains(&r.id) {
            batch.started.push(Snapshot {
                job_id: r.id,
                action: r.action,
                params: r.params,
                client_id: r.client_id,
                reject_reason: r.reject,
                attempts: 1,
                started_at: now,
                retry: r.retry,
            });
        } else {
            batch.claimed.push(Claimed {
                id: r.id,
                priority: r.priority,
                not_before: r.not_before,
                client_id: r.client_id,
            });
        }
    }
    Ok(batch)
}

/// `unique_key` (issue 36): a row whose key an open job of the same client holds — claimed
/// before (`lifecycle::unique_holder`: queued, running or waiting for a human), or earlier in
/// this batch — is refused: it ends `failed` naming the holder's id, and never runs. The check
/// is here, where every job passes, so a producer's raw INSERT cannot run a key twice.
fn refuse_held(stores: &Stores, rows: &mut [NewJob], finals: &HashSet<i64>) -> Result<()> {
    let mut in_batch: HashMap<(String, String), i64> = HashMap::new();
    for r in rows.iter_mut() {
        if finals.contains(&r.id) || r.reject.is_some() {
            continue;
        }
        let Some(key) = r.unique_key.clone() else {
            continue;
        };
        let ck = (r.client_id.clone(), key.clone());
        let holder = match in_batch.get(&ck) {
            Some(&id) => Some((id, "queued".to_string())),
            None => stores
                .lifecycle
                .with(|c| lifecycle::unique_holder(c, &r.client_id, &key, r.id))?,
        };
        match holder {
            Some((by, status)) => {
                r.reject = Some(format!(
                    "refused: unique_key {:?} of client {:?} is held by job {by} ({status}); this job never runs — wait for job {by} to end, or `brainloop cancel {by}`, then submit again",
                    crate::quote::prefix(&key, crate::quote::VALUE_MAX),
                    crate::quote::prefix(&r.client_id, crate::quote::VALUE_MAX),
                ));
                r.params = None;
                r.not_before = None;
            }
            None => {
                in_batch.insert(ck, r.id);
            }
        }
    }
    Ok(())
}

/// Jobs of `rows` with a `brainloop cancel` request (`db::cancels`) and no final result: their
/// `cancelled` result is committed (output.db, FULL) before the claim records them done, like
/// any final result. Returns their ids.
fn cancel_unclaimed(
    stores: &Stores,
    rows: &[NewJob],
    finals: &HashSet<i64>,
    now: i64,
) -> Result<HashSet<i64>> {
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r.id)
        .filter(|id| !finals.contains(id))
        .collect();
    let cancelled = stores.security.with(|c| cancels::among(c, &ids))?;
    if cancelled.is_empty() {
        return Ok(cancelled);
    }
    let mut ended = Vec::new();
    for r in rows.iter().filter(|r| cancelled.contains(&r.id)) {
        let Some(c) = stores.security.with(|s| cancels::get(s, r.id))? else {
            continue;
        };
        ended.push(ResultRow {
            job_id: r.id,
            action: r.action.clone(),
            client_id: r.client_id.clone(),
            status: JobStatus::Cancelled,
            result: Some(cancels::result_json(&c, "queued").to_string()),
            error: Some(cancels::error_line(&c, "queued (before it was claimed)")),
            attempts: 0,
            duration_ms: None,
            started_at: None,
            finished_at: Some(now),
        });
    }
    stores
        .output
        .with(|c| Ok(write_tx(c, |tx| output::upsert_results(tx, &ended))?))?;
    Ok(cancelled)
}

/// Jobs claimed to wait for their `not_before` get their `queued` result row now (docs/actions.md), so a
/// producer sees them in flight; jobs that start at once get `running` when they start.
fn write_waiting(stores: &Stores, rows: &[NewJob], finals: &HashSet<i64>, now: i64) -> Result<()> {
    let waiting: Vec<ResultRow> = rows
        .iter()
        .filter(|r| r.reject.is_none() && !finals.contains(&r.id))
        .filter_map(|r| r.not_before.filter(|&t| t > now).map(|t| (r, t)))
        .map(|(r, t)| ResultRow {
            job_id: r.id,
            action: r.action.clone(),
            client_id: r.client_id.clone(),
            status: JobStatus::Queued,
            result: Some(serde_json::json!({ "waiting_until": t }).to_string()),
            error: None,
            attempts: 0,
            duration_ms: None,
            started_at: None,
            finished_at: None,
        })
        .collect();
    if waiting.is_empty() {
        return Ok(());
    }
    stores
        .output
        .with(|c| Ok(write_tx(c, |tx| output::upsert_results(tx, &waiting))?))
}
