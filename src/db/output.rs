//! `brainloop.output.db`: one `results` row per job (updated in place), the heartbeat and the
//! metrics — every write to those tables is a function here (`validations` belongs to
//! `ask::validations`). Written only by the worker and `repair`; anyone may read it.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;
use std::collections::HashSet;

/// `results.status`. DESIGN §2 fixes the final ones; `queued`, `running` and
/// `pending_validation` are not final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    PendingValidation,
    Succeeded,
    Failed,
    Denied,
    Blocked,
    DuplicateWarning,
    Expired,
    Cancelled,
    Interrupted,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::PendingValidation => "pending_validation",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Denied => "denied",
            JobStatus::Blocked => "blocked",
            JobStatus::DuplicateWarning => "duplicate_warning",
            JobStatus::Expired => "expired",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Interrupted => "interrupted",
        }
    }

    /// The status named `s` ([`JobStatus::as_str`] backwards: serde's names are the same).
    pub fn parse(s: &str) -> Option<JobStatus> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
    }

    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobStatus::Queued | JobStatus::Running | JobStatus::PendingValidation
        )
    }
}

/// SQL list of the final statuses, for queries.
pub const FINAL_SQL: &str = "('succeeded','failed','denied','blocked','duplicate_warning','expired','cancelled','interrupted')";

/// Which of `ids` already have a final result.
pub fn finals_among(conn: &Connection, ids: &[i64]) -> Result<HashSet<i64>> {
    // A claim batch is a dense id range: one range scan instead of a lookup per id (issue 24).
    let (lo, hi) = (ids.iter().min(), ids.iter().max());
    if let (Some(&lo), Some(&hi)) = (lo, hi) {
        if ids.len() > 1 && (hi - lo) < 2 * ids.len() as i64 {
            let wanted: HashSet<i64> = ids.iter().copied().collect();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT job_id FROM results WHERE job_id BETWEEN ?1 AND ?2 AND status IN {FINAL_SQL}"
            ))?;
            let found = stmt.query_map([lo, hi], |r| r.get::<_, i64>(0))?;
            let mut out = HashSet::new();
            for id in found {
                let id = id?;
                if wanted.contains(&id) {
                    out.insert(id);
                }
            }
            return Ok(out);
        }
    }
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT 1 FROM results WHERE job_id = ?1 AND status IN {FINAL_SQL}"
    ))?;
    let mut out = HashSet::new();
    for &id in ids {
        if stmt.exists([id])? {
            out.insert(id);
        }
    }
    Ok(out)
}

/// One job's row in `results`.
#[derive(Debug, Clone)]
pub struct ResultRow {
    pub job_id: i64,
    pub action: Option<String>,
    pub client_id: String,
    pub status: JobStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub attempts: u32,
    pub duration_ms: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Inserts or updates rows in place. A final row is never overwritten by a non-final one.
pub fn upsert_results<'r>(
    tx: &Transaction<'_>,
    rows: impl IntoIterator<Item = &'r ResultRow>,
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(&format!(
        "INSERT INTO results(job_id, action, client_id, status, result, error, attempts,
                             duration_ms, started_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT(job_id) DO UPDATE SET
            action = excluded.action, client_id = excluded.client_id, status = excluded.status,
            result = excluded.result, error = excluded.error, attempts = excluded.attempts,
            duration_ms = excluded.duration_ms, started_at = excluded.started_at,
            finished_at = excluded.finished_at
         WHERE results.status NOT IN {FINAL_SQL}"
    ))?;
    for r in rows {
        stmt.execute(params![
            r.job_id,
            r.action,
            r.client_id,
            r.status.as_str(),
            r.result,
            r.error,
            r.attempts,
            r.duration_ms,
            r.started_at,
            r.finished_at
        ])?;
    }
    Ok(())
}

/// A job's non-final result now waits for a human: status `pending_validation` with `result`
/// (the pending fields), no error. A final result is left as it is.
pub fn mark_pending_validation(conn: &mut Connection, job_id: i64, result: &str) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            &format!(
                "UPDATE results SET status = 'pending_validation', result = ?2, error = NULL
                 WHERE job_id = ?1 AND status NOT IN {FINAL_SQL}"
            ),
            params![job_id, result],
        )
    })?;
    Ok(())
}

/// The validation ids a job's `pending_validation` result waits for (its own `validation_id`,
/// and those of the nested calls it paused on: a loop's step, a run_code call). Empty when its
/// results row does not wait. Recovery's evidence that a job reached waiting (`supervisor::recovery`).
pub fn waiting_for(conn: &Connection, job_id: i64) -> Result<Vec<String>> {
    let result: Option<Option<String>> = conn
        .query_row(
            "SELECT result FROM results WHERE job_id = ?1 AND status = 'pending_validation'",
            [job_id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(v) = result
        .flatten()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
    else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::new();
    collect_validation_ids(&v, &mut ids);
    Ok(ids)
}

fn collect_validation_ids(v: &serde_json::Value, ids: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("validation_id", serde_json::Value::String(id)) => ids.push(id.clone()),
                    _ => collect_validation_ids(x, ids),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_validation_ids(x, ids)),
        _ => {}
    }
}

/// Repair of a replaced output.db (`cli::repair`), inside the caller's transaction: its
/// foreign results are dropped.
pub fn clear_results(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch("DELETE FROM results;")
}

/// A heartbeat row.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Heartbeat {
    pub worker_id: String,
    pub timestamp: i64,
    pub status: String,
    pub pid: i64,
    pub version: String,
    pub sessions_active: i64,
    pub sessions_completed: i64,
    pub jobs_running: i64,
    pub queue_depth: i64,
    pub jobs_done_total: i64,
    pub cache_hit_rate: f64,
    pub sandbox_level: Option<String>,
    pub uptime_ms: i64,
}

pub fn insert_heartbeat(conn: &mut Connection, hb: &Heartbeat) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO heartbeat(worker_id, timestamp, status, pid, version, sessions_active,
                 sessions_completed, jobs_running, queue_depth, jobs_done_total, cache_hit_rate,
                 sandbox_level, uptime_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                hb.worker_id,
                hb.timestamp,
                hb.status,
                hb.pid,
                hb.version,
                hb.sessions_active,
                hb.sessions_completed,
                hb.jobs_running,
                hb.queue_depth,
                hb.jobs_done_total,
                hb.cache_hit_rate,
                hb.sandbox_level,
                hb.uptime_ms
            ],
        )?;
        Ok(())
    })?;
    Ok(())
}

/// Sets the latest heartbeat's `problem` (the worker's own view of what blocks it).
pub fn set_heartbeat_problem(conn: &mut Connection, problem: Option<&str>) -> Result<()> {
    conn.execute(
        "UPDATE heartbeat SET problem = ?1 WHERE rowid = (SELECT max(rowid) FROM heartbeat)",
        [problem],
    )?;
    Ok(())
}

/// The latest heartbeat's `problem` (`None` also on a database from before the column).
pub fn latest_problem(conn: &Connection) -> Option<String> {
    conn.query_row(
        "SELECT problem FROM heartbeat ORDER BY rowid DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .ok()
    .flatten()
}

/// The heartbeat written last — in insertion order, not by timestamp: a beat written before a
/// backward clock step carries a later time than the ones after it.
pub fn latest_heartbeat(conn: &Connection) -> Result<Option<Heartbeat>> {
    Ok(conn
        .query_row(
            "SELECT worker_id, timestamp, status, coalesce(pid, 0), coalesce(version, ''),
                    sessions_active, sessions_completed, jobs_running, queue_depth,
                    jobs_done_total, cache_hit_rate, sandbox_level, uptime_ms
             FROM heartbeat ORDER BY rowid DESC LIMIT 1",
            [],
            |r| {
                Ok(Heartbeat {
                    worker_id: r.get(0)?,
                    timestamp: r.get(1)?,
                    status: r.get(2)?,
                    pid: r.get(3)?,
                    version: r.get(4)?,
                    sessions_active: r.get(5)?,
                    sessions_completed: r.get(6)?,
                    jobs_running: r.get(7)?,
                    queue_depth: r.get(8)?,
                    jobs_done_total: r.get(9)?,
                    cache_hit_rate: r.get(10)?,
                    sandbox_level: r.get(11)?,
                    uptime_ms: r.get(12)?,
                })
            },
        )
        .optional()?)
}

/// A metric sample. Counters are flushed as one row per name per heartbeat with the delta.
#[derive(Debug, Clone)]
pub struct Metric {
    pub timestamp: i64,
    pub name: String,
    pub value: f64,
    pub labels: Option<String>,
}

pub fn insert_metrics(conn: &mut Connection, metrics: &[Metric]) -> Result<()> {
    if metrics.is_empty() {
        return Ok(());
    }
    super::write_tx(conn, |tx| {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO metrics(timestamp, name, value, labels) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for m in metrics {
            stmt.execute(params![m.timestamp, m.name, m.value, m.labels])?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Aggregate of one metric over a window.
#[derive(Debug, Clone, Serialize)]
pub struct MetricSummary {
    pub name: String,
    pub samples: i64,
    pub sum: f64,
    pub avg: f64,
    pub min: f64,
    pub max: f64,
}

pub fn summarize_metrics(conn: &Connection, since: i64) -> Result<Vec<MetricSummary>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, count(*), sum(value), avg(value), min(value), max(value)
         FROM metrics WHERE timestamp >= ?1 GROUP BY name ORDER BY name",
    )?;
    let rows = stmt
        .query_map([since], |r| {
            Ok(MetricSummary {
                name: r.get(0)?,
                samples: r.get(1)?,
                sum: r.get(2)?,
                avg: r.get(3)?,
                min: r.get(4)?,
                max: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Result counts by status for jobs finished since `since` (plus all non-final ones).
pub fn status_counts(conn: &Connection, since: i64) -> Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT status, count(*) FROM results
         WHERE finished_at >= ?1 OR finished_at IS NULL GROUP BY status ORDER BY status",
    )?;
    let rows = stmt
        .query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Retention: deletes old heartbeats, metrics and finished results (in bounded batches).
pub fn prune(
    conn: &mut Connection,
    heartbeat_before: i64,
    metrics_before: i64,
    results_before: i64,
    batch: usize,
) -> Result<usize> {
    let n = super::write_tx(conn, |tx| {
        let mut n = tx.execute(
            "DELETE FROM heartbeat WHERE rowid IN
                 (SELECT rowid FROM heartbeat WHERE timestamp < ?1 LIMIT ?2)",
            params![heartbeat_before, batch as i64],
        )?;
        n += tx.execute(
            "DELETE FROM metrics WHERE rowid IN
                 (SELECT rowid FROM metrics WHERE timestamp < ?1 LIMIT ?2)",
            params![metrics_before, batch as i64],
        )?;
        n += tx.execute(
            &format!(
                "DELETE FROM results WHERE rowid IN
                 (SELECT rowid FROM results WHERE finished_at < ?1 AND status IN {FINAL_SQL} LIMIT ?2)"
            ),
            params![results_before, batch as i64],
        )?;
        Ok(n)
    })?;
    Ok(n)
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: JobStatus,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

impl Outcome {
    pub fn ok(result: serde_json::Value) -> Outcome {
        Outcome {
            status: JobStatus::Succeeded,
            result: Some(result),
            error: None,
        }
    }
    /// Refused for lack of a grant (final status `denied`).
    pub fn denied(error: impl Into<String>) -> Outcome {
        Outcome {
            status: JobStatus::Denied,
            result: None,
            error: Some(error.into()),
        }
    }
    pub fn failed(error: impl Into<String>) -> Outcome {
        Outcome {
            status: JobStatus::Failed,
            result: None,
            error: Some(error.into()),
        }
    }
    /// The job stopped because its cancellation token fired; it will run again.
    pub fn cancelled() -> Outcome {
        Outcome {
            status: JobStatus::Cancelled,
            result: None,
            error: Some("cancelled".into()),
        }
    }
}

/// One job's row of `results`, as `brainloop show` tells it.
#[derive(Debug, Clone, Serialize)]
pub struct ShownResult {
    pub action: Option<String>,
    pub client_id: Option<String>,
    pub status: String,
    pub result: Option<String>,
    pub error: Option<String>,
    pub attempts: i64,
    pub duration_ms: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Job `job_id`'s result row, if it has one.
pub fn result_of(conn: &Connection, job_id: i64) -> Result<Option<ShownResult>> {
    Ok(conn
        .query_row(
            "SELECT action, client_id, status, result, error, attempts, duration_ms, started_at, finished_at FROM results WHERE job_id = ?1",
            [job_id],
            |r| {
                Ok(ShownResult {
                    action: r.get(0)?,
                    client_id: r.get(1)?,
                    status: r.get(2)?,
                    result: r.get(3)?,
                    error: r.get(4)?,
                    attempts: r.get(5)?,
                    duration_ms: r.get(6)?,
                    started_at: r.get(7)?,
                    finished_at: r.get(8)?,
                })
            },
        )
        .optional()?)
}

#[cfg(test)]
mod status_names {
    use super::JobStatus::{self, *};

    #[test]
    fn a_status_parses_back_from_its_name() {
        for s in [Queued, PendingValidation, DuplicateWarning, Interrupted] {
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobStatus::parse("nonsense"), None);
    }
}
