//! lifecycle.db `applies`: the apply journal (issue 34) — for every change set a job applies to
//! this machine's workspace, `applying` committed durably (synchronous = FULL for that commit)
//! before the first byte lands, then `applied` with the outcome the job ends with, or `failed`
//! when the apply was refused. It lives in the worker's own local database because it is about
//! this machine's workspace. Written only here; `bash::overlay` drives it, start-up recovery and
//! the ask loop read it ([`open_of`]): an applied (or half-applied) change set is never asked
//! about again as if nothing had happened.

use super::output::{JobStatus, Outcome};
use super::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// `applies.state` values.
pub mod state {
    pub const APPLYING: &str = "applying";
    pub const APPLIED: &str = "applied";
    pub const FAILED: &str = "failed";
}

/// A job's apply, as journaled.
#[derive(Debug, Clone, PartialEq)]
pub struct Apply {
    pub job_id: i64,
    pub effect_hash: String,
    pub validation_id: Option<String>,
    pub policy_used: String,
    pub state: String,
    /// `{status, result, error}` of the job, once applied.
    pub outcome: Option<String>,
    pub started_at: i64,
}

impl Apply {
    pub fn applied(&self) -> bool {
        self.state == state::APPLIED
    }

    /// The stored outcome of an applied change set (see [`encode_outcome`]); None if there is
    /// none or it does not read back.
    pub fn outcome(&self) -> Option<Outcome> {
        let v: serde_json::Value = serde_json::from_str(self.outcome.as_deref()?).ok()?;
        // An apply's outcome is the finished command's: succeeded or failed (its exit).
        let status = match v.get("status")?.as_str()? {
            "succeeded" => JobStatus::Succeeded,
            _ => JobStatus::Failed,
        };
        Some(Outcome {
            status,
            result: v.get("result").filter(|r| !r.is_null()).cloned(),
            error: v.get("error").and_then(|e| e.as_str()).map(str::to_string),
        })
    }
}

/// The outcome an applied change set ends its job with, as [`applied`] stores it.
pub fn encode_outcome(o: &Outcome) -> String {
    serde_json::json!({"status": o.status.as_str(), "result": o.result, "error": o.error})
        .to_string()
}

/// Records that job `job_id` starts applying the change set `effect_hash` (again, for an apply
/// resumed after a crash). Committed with `synchronous = FULL`: the row is on disk before the
/// caller writes the first byte to the workspace.
pub fn begin(
    conn: &mut Connection,
    job_id: i64,
    effect_hash: &str,
    validation_id: Option<&str>,
    policy_used: &str,
    now: i64,
) -> Result<()> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    let r = write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO applies(job_id, effect_hash, validation_id, policy_used, state, outcome, error, started_at, finished_at)
             VALUES (?1, ?2, ?3, ?4, 'applying', NULL, NULL, ?5, NULL)
             ON CONFLICT(job_id, effect_hash) DO UPDATE SET
                 state = 'applying', validation_id = COALESCE(excluded.validation_id, validation_id),
                 policy_used = excluded.policy_used, error = NULL, finished_at = NULL",
            params![job_id, effect_hash, validation_id, policy_used, now],
        )
    });
    // Back to the database's own setting (`db::DbKind::synchronous`), whatever happened.
    let back = conn.pragma_update(None, "synchronous", super::DbKind::Lifecycle.synchronous());
    r?;
    back?;
    Ok(())
}

/// The change set is in the workspace; `outcome` is what the job ends with.
pub fn applied(
    conn: &mut Connection,
    job_id: i64,
    effect_hash: &str,
    outcome: &str,
    now: i64,
) -> Result<()> {
    write_tx(conn, |tx| {
        tx.execute(
            "UPDATE applies SET state = 'applied', outcome = ?3, error = NULL, finished_at = ?4
             WHERE job_id = ?1 AND effect_hash = ?2",
            params![job_id, effect_hash, outcome, now],
        )
    })?;
    Ok(())
}

/// The apply was refused (`error`).
pub fn failed(
    conn: &mut Connection,
    job_id: i64,
    effect_hash: &str,
    error: &str,
    now: i64,
) -> Result<()> {
    write_tx(conn, |tx| {
        tx.execute(
            "UPDATE applies SET state = 'failed', error = ?3, finished_at = ?4
             WHERE job_id = ?1 AND effect_hash = ?2",
            params![job_id, effect_hash, error, now],
        )
    })?;
    Ok(())
}

/// Job `job_id`'s latest apply that put bytes in the workspace or may have (`applying` or
/// `applied`); None if it has none.
pub fn open_of(conn: &Connection, job_id: i64) -> Result<Option<Apply>> {
    Ok(conn
        .query_row(
            "SELECT job_id, effect_hash, validation_id, policy_used, state, outcome, started_at
             FROM applies WHERE job_id = ?1 AND state IN ('applying', 'applied')
             ORDER BY started_at DESC, rowid DESC LIMIT 1",
            [job_id],
            |r| {
                Ok(Apply {
                    job_id: r.get(0)?,
                    effect_hash: r.get(1)?,
                    validation_id: r.get(2)?,
                    policy_used: r.get(3)?,
                    state: r.get(4)?,
                    outcome: r.get(5)?,
                    started_at: r.get(6)?,
                })
            },
        )
        .optional()?)
}

/// Deletes the rows of jobs that are done and started before `before` (inside
/// `db::lifecycle::prune`'s transaction); returns how many.
pub fn prune(tx: &Transaction<'_>, before: i64, batch: usize) -> rusqlite::Result<usize> {
    tx.execute(
        "DELETE FROM applies WHERE rowid IN
             (SELECT a.rowid FROM applies a LEFT JOIN processed_log p USING(job_id)
              WHERE a.started_at < ?1 AND (p.job_id IS NULL OR p.status = 'done') LIMIT ?2)",
        params![before, batch as i64],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{migrate, open, DbKind};

    #[test]
    fn an_apply_is_applying_then_applied_and_a_refused_one_is_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate::ensure_data_dir(&data).unwrap();
        migrate::migrate(&data, DbKind::Lifecycle).unwrap();
        let mut c = open(&data, DbKind::Lifecycle).unwrap();
        assert_eq!(open_of(&c, 7).unwrap(), None);
        begin(&mut c, 7, "e1", Some("v1"), "approved", 10).unwrap();
        let a = open_of(&c, 7).unwrap().unwrap();
        assert_eq!(
            (a.state.as_str(), a.validation_id.as_deref()),
            ("applying", Some("v1"))
        );
        let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 1, "back to NORMAL after the FULL commit");
        applied(&mut c, 7, "e1", r#"{"status":"succeeded"}"#, 11).unwrap();
        let a = open_of(&c, 7).unwrap().unwrap();
        assert!(a.applied());
        assert_eq!(a.outcome.as_deref(), Some(r#"{"status":"succeeded"}"#));
        // Resumed (an approved re-ask): applying again, the validation kept.
        begin(&mut c, 7, "e1", None, "approved", 12).unwrap();
        let a = open_of(&c, 7).unwrap().unwrap();
        assert_eq!(
            (a.state.as_str(), a.validation_id.as_deref()),
            ("applying", Some("v1"))
        );
        begin(&mut c, 8, "e2", None, "auto", 10).unwrap();
        failed(&mut c, 8, "e2", "conflict", 11).unwrap();
        assert_eq!(open_of(&c, 8).unwrap(), None);
        let n = write_tx(&mut c, |tx| prune(tx, 100, 10)).unwrap();
        assert_eq!(n, 2, "no processed_log rows: both jobs are gone");
    }
}
