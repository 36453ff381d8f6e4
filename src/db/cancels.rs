//! `cancellations` (command_security.db): the operator's `brainloop cancel ID` requests — every
//! write to the table is a function here. Owns **which jobs are cancelled**: a job with a row
//! here and no final result never runs again (claim, recovery and the loop ask [`among`] /
//! [`open`]); the row is consumed only once the job's final result is committed.
//!
//! Only the operator's CLI and the worker write command_security.db (DESIGN §2): only the
//! operator cancels another client's job. A client withdraws its own (issue 55): its row in
//! input.db `withdrawals` becomes, in the worker (`supervisor::cancels::adopt`), a request here
//! with `requested_by = client:NAME` when the job's claimed client is the row's.

use super::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashSet;

/// One cancel request.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancel {
    pub job_id: i64,
    pub requested_by: String,
    pub reason: Option<String>,
    pub created_at: i64,
    pub consumed_at: Option<i64>,
    pub outcome: Option<String>,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Cancel> {
    Ok(Cancel {
        job_id: r.get(0)?,
        requested_by: r.get(1)?,
        reason: r.get(2)?,
        created_at: r.get(3)?,
        consumed_at: r.get(4)?,
        outcome: r.get(5)?,
    })
}

const COLS: &str = "job_id, requested_by, reason, created_at, consumed_at, outcome";

/// Operator side: records a cancel request. Returns the request as stored: an earlier one for
/// the same job is kept (and returned) unchanged.
pub fn request(
    security: &mut Connection,
    job_id: i64,
    requested_by: &str,
    reason: Option<&str>,
    now: i64,
) -> Result<(Cancel, bool)> {
    Ok(write_tx(security, |tx| {
        let n = tx.execute(
            "INSERT OR IGNORE INTO cancellations(job_id, requested_by, reason, created_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![job_id, requested_by, reason, now],
        )?;
        let c = tx.query_row(
            &format!("SELECT {COLS} FROM cancellations WHERE job_id = ?1"),
            [job_id],
            row,
        )?;
        Ok((c, n == 1))
    })?)
}

/// The request for `job_id`, if any.
pub fn get(security: &Connection, job_id: i64) -> Result<Option<Cancel>> {
    Ok(security
        .query_row(
            &format!("SELECT {COLS} FROM cancellations WHERE job_id = ?1"),
            [job_id],
            row,
        )
        .optional()?)
}

/// Requests whose job has not ended yet (as far as this table knows), oldest first.
pub fn open(security: &Connection) -> Result<Vec<Cancel>> {
    let mut s = security.prepare_cached(&format!(
        "SELECT {COLS} FROM cancellations WHERE consumed_at IS NULL ORDER BY job_id"
    ))?;
    let v = s.query_map([], row)?.collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

/// Which of `ids` have a cancel request (consumed or not).
pub fn among(security: &Connection, ids: &[i64]) -> Result<HashSet<i64>> {
    let (Some(&lo), Some(&hi)) = (ids.iter().min(), ids.iter().max()) else {
        return Ok(HashSet::new());
    };
    let wanted: HashSet<i64> = ids.iter().copied().collect();
    let mut s = security
        .prepare_cached("SELECT job_id FROM cancellations WHERE job_id BETWEEN ?1 AND ?2")?;
    let found = s.query_map([lo, hi], |r| r.get::<_, i64>(0))?;
    let mut out = HashSet::new();
    for id in found {
        let id = id?;
        if wanted.contains(&id) {
            out.insert(id);
        }
    }
    Ok(out)
}

/// The job has its final result (`outcome`: its status): the request is closed.
pub fn consume(security: &mut Connection, job_id: i64, outcome: &str, now: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "UPDATE cancellations SET consumed_at = ?2, outcome = ?3
             WHERE job_id = ?1 AND consumed_at IS NULL",
            params![job_id, now, outcome],
        )
    })?;
    Ok(())
}

/// The result JSON of a job ended by `c` (`was`: what the job was doing).
pub fn result_json(c: &Cancel, was: &str) -> serde_json::Value {
    serde_json::json!({
        "status": "cancelled",
        "cancelled_by": c.requested_by,
        "requested_at": c.created_at,
        "reason": c.reason,
        "was": was,
    })
}

/// The error line of a job ended by `c`.
pub fn error_line(c: &Cancel, was: &str) -> String {
    format!(
        "cancelled by {} while {was}{}; it never runs again (resubmit it to run it)",
        c.requested_by,
        c.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{migrate, open as open_db, DbKind};

    #[test]
    fn a_request_is_kept_once_and_closed_once() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate::ensure_data_dir(&data).unwrap();
        migrate::migrate(&data, DbKind::Security).unwrap();
        let mut c = open_db(&data, DbKind::Security).unwrap();
        let (a, new) = request(&mut c, 7, "operator:a", Some("why"), 1).unwrap();
        assert!(new);
        let (b, again) = request(&mut c, 7, "operator:b", None, 2).unwrap();
        assert!(!again);
        assert_eq!(a, b, "the first request stands");
        request(&mut c, 9, "operator:a", None, 3).unwrap();
        assert_eq!(among(&c, &[1, 7, 8]).unwrap(), HashSet::from([7]));
        assert_eq!(open(&c).unwrap().len(), 2);
        consume(&mut c, 7, "cancelled", 4).unwrap();
        consume(&mut c, 7, "succeeded", 5).unwrap();
        let got = get(&c, 7).unwrap().unwrap();
        assert_eq!(got.outcome.as_deref(), Some("cancelled"));
        assert_eq!(open(&c).unwrap().len(), 1);
        assert_eq!(
            among(&c, &[7, 9]).unwrap().len(),
            2,
            "consumed still counts"
        );
    }
}
