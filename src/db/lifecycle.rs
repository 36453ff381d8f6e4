//! `brainloop.lifecycle.db`: the claim high-water mark, the immutable job snapshots (`queue`) and
//! each job's progress (`processed_log`). Only the supervisor writes here.

use super::input::NewJob;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

pub const HWM_KEY: &str = "high_water_mark";

/// `processed_log.status` values.
pub mod status {
    pub const CLAIMED: &str = "claimed";
    pub const RUNNING: &str = "running";
    pub const PENDING_VALIDATION: &str = "pending_validation";
    pub const DONE: &str = "done";
}

/// The highest `jobs.id` already claimed (0 on a fresh database).
pub fn high_water_mark(conn: &Connection) -> Result<i64> {
    let v: Option<String> = conn
        .query_row("SELECT value FROM config WHERE key = ?1", [HWM_KEY], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(v.and_then(|s| s.parse().ok()).unwrap_or(0))
}

/// Claims `jobs` in one transaction: snapshot into `queue`, a `processed_log` row each, and the
/// high-water mark moved past them. Jobs in `already_final` (a final result exists, e.g. after a
/// claim was lost to power failure) are recorded as done and never run. Jobs in `start` are
/// claimed and started in this same transaction (`running`, attempt 1, `started_at` = `now`:
/// the state `claimed` then `start` would leave, with nothing in between to see); the returned
/// set holds those whose row was new — only they may run (supervisor::instant).
pub fn claim(
    tx: &Transaction<'_>,
    jobs: &[NewJob],
    already_final: &std::collections::HashSet<i64>,
    start: &std::collections::HashSet<i64>,
    now: i64,
) -> rusqlite::Result<std::collections::HashSet<i64>> {
    let mut ins_q = tx.prepare_cached(
        "INSERT OR IGNORE INTO queue(job_id, action, params, client_id, priority, not_before,
                                     created_at, claimed_at, reject_reason)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    let mut ins_p = tx.prepare_cached(
        "INSERT OR IGNORE INTO processed_log(job_id, status, attempts, started_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut started = std::collections::HashSet::new();
    let mut max_id = 0;
    for j in jobs {
        ins_q.execute(params![
            j.id,
            j.action,
            j.params,
            j.client_id,
            j.priority,
            j.not_before,
            j.created_at,
            now,
            j.reject
        ])?;
        let none = Option::<i64>::None;
        if already_final.contains(&j.id) {
            ins_p.execute(params![j.id, status::DONE, 0, none, now])?;
        } else if start.contains(&j.id) {
            if ins_p.execute(params![j.id, status::RUNNING, 1, now, none])? == 1 {
                started.insert(j.id);
            }
        } else {
            ins_p.execute(params![j.id, status::CLAIMED, 0, none, none])?;
        }
        max_id = max_id.max(j.id);
    }
    tx.execute(
        "INSERT INTO config(key, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
         WHERE CAST(config.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        params![HWM_KEY, max_id.to_string(), now],
    )?;
    Ok(started)
}

/// The claimed snapshot a job runs from.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub job_id: i64,
    pub action: Option<String>,
    pub params: Option<String>,
    pub client_id: String,
    pub reject_reason: Option<String>,
    /// Including the attempt being started.
    pub attempts: u32,
    pub started_at: i64,
}

/// Marks jobs running (one more attempt each) and returns their snapshots.
pub fn start(tx: &Transaction<'_>, ids: &[i64], now: i64) -> rusqlite::Result<Vec<Snapshot>> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'running', attempts = attempts + 1, started_at = ?2
         WHERE job_id = ?1 RETURNING attempts",
    )?;
    let mut sel = tx.prepare_cached(
        "SELECT action, params, client_id, reject_reason FROM queue WHERE job_id = ?1",
    )?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        let attempts: Option<i64> = upd.query_row(params![id, now], |r| r.get(0)).optional()?;
        let Some(attempts) = attempts else { continue };
        let snap = sel
            .query_row([id], |r| {
                Ok(Snapshot {
                    job_id: id,
                    action: r.get(0)?,
                    params: r.get(1)?,
                    client_id: r.get(2)?,
                    reject_reason: r.get(3)?,
                    attempts: attempts as u32,
                    started_at: now,
                })
            })
            .optional()?;
        if let Some(s) = snap {
            out.push(s);
        }
    }
    Ok(out)
}

/// Marks jobs done (their final result is already committed in output.db).
pub fn finish(tx: &Transaction<'_>, ids: &[i64], now: i64) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'done', finished_at = ?2 WHERE job_id = ?1",
    )?;
    for &id in ids {
        upd.execute(params![id, now])?;
    }
    Ok(())
}

/// Puts jobs cut off by a graceful shutdown back to `claimed`; the cut-off attempt is not counted.
pub fn requeue(tx: &Transaction<'_>, ids: &[i64]) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'claimed', attempts = max(attempts - 1, 0)
         WHERE job_id = ?1 AND status = 'running'",
    )?;
    for &id in ids {
        upd.execute([id])?;
    }
    Ok(())
}

/// A claimed job that is not done yet (for recovery at start-up).
#[derive(Debug, Clone)]
pub struct OpenJob {
    pub job_id: i64,
    pub status: String,
    pub attempts: u32,
    pub priority: i64,
    pub not_before: Option<i64>,
    pub action: Option<String>,
    pub client_id: String,
}

pub fn open_jobs(conn: &Connection) -> Result<Vec<OpenJob>> {
    let mut stmt = conn.prepare(
        "SELECT p.job_id, p.status, p.attempts, q.priority, q.not_before, q.action, q.client_id
         FROM processed_log p JOIN queue q ON q.job_id = p.job_id
         WHERE p.status <> 'done' ORDER BY p.job_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(OpenJob {
                job_id: r.get(0)?,
                status: r.get(1)?,
                attempts: r.get::<_, i64>(2)?.max(0) as u32,
                priority: r.get(3)?,
                not_before: r.get(4)?,
                action: r.get(5)?,
                client_id: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Deletes snapshots and progress rows of jobs finished before `before`; returns rows deleted.
pub fn prune(conn: &mut Connection, before: i64, batch: usize) -> Result<usize> {
    Ok(super::write_tx(conn, |tx| {
        let ids: Vec<i64> = {
            let mut s = tx.prepare(
                "SELECT job_id FROM processed_log WHERE status = 'done' AND finished_at < ?1 LIMIT ?2",
            )?;
            let v = s
                .query_map(params![before, batch as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            v
        };
        for id in &ids {
            tx.execute("DELETE FROM queue WHERE job_id = ?1", [id])?;
            tx.execute("DELETE FROM processed_log WHERE job_id = ?1", [id])?;
        }
        // Generated content of jobs that ended (written, denied, expired) is of no further use.
        let stale = tx.execute(
            "DELETE FROM llm_pending WHERE job_id IN
                 (SELECT l.job_id FROM llm_pending l LEFT JOIN processed_log p USING(job_id)
                  WHERE p.job_id IS NULL OR p.status = 'done' LIMIT ?1)",
            [batch as i64],
        )?;
        // Daily LLM usage is kept a year (the budget needs only today).
        let old = tx.execute(
            "DELETE FROM llm_usage WHERE updated_at < ?1 - 365 * 86400000",
            [crate::time::now_ms()],
        )?;
        Ok(ids.len() + stale + old)
    })?)
}
