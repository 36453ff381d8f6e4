//! command_security.db `journal`: one row per applied change set (its command, workspace, the
//! policy that applied it, the summary and the journaled entries that undo it), and when it was
//! undone. The files themselves (`data_dir/journal/<job>/`) belong to `bash::changes`.
//!
//! The row is also the audit of the apply (issue 36): the diff that was shown, the validation
//! it answered and who or what decided stay after the overlay is swept, so `brainloop show` and
//! `brainloop history` can say what changed the workspace; the diff alone is dropped by the
//! retention pass ([`prune_diffs`]), the rest of the row is kept.
//!
//! The row tells the truth about how far an apply got (issue 50): it is written `applying`
//! before the first byte reaches the workspace ([`state`]), then `applied`, or `partial` with
//! the paths that landed when the apply stopped on an error — so `undo` can take back what a
//! failed or cut-off apply wrote — or removed when nothing landed.

use crate::db::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

/// `journal.state` values.
pub mod state {
    /// Written before the first byte; a crash leaves it until start-up recovery.
    pub const APPLYING: &str = "applying";
    pub const APPLIED: &str = "applied";
    /// The apply stopped on an error: only `applied_paths` landed.
    pub const PARTIAL: &str = "partial";
}

/// An applied change set, as recorded.
pub struct Applied {
    pub job_id: i64,
    pub command: String,
    pub workspace: String,
    pub policy_used: String,
    pub summary: String,
    /// The journal's entries as JSON.
    pub entries: String,
    /// The change set's diff as shown (`ChangeSet::diff`).
    pub diff: String,
    /// The validation whose approval applied it (None: applied unasked).
    pub validation_id: Option<String>,
    /// Who or what decided: the approval's `decided_by`, or `worker: …`.
    pub decided_by: String,
    /// One of [`state`].
    pub state: &'static str,
    /// For a `partial` apply: the paths that landed, as a JSON array.
    pub applied_paths: Option<String>,
}

/// An applied change set as `show` and `history` read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub job_id: i64,
    pub command: String,
    pub workspace: String,
    pub policy_used: String,
    pub summary: String,
    pub applied_at: i64,
    pub undone_at: Option<i64>,
    /// None: dropped by retention, or applied before the diff was kept.
    pub diff: Option<String>,
    pub validation_id: Option<String>,
    pub decided_by: Option<String>,
    /// One of [`state`].
    pub state: String,
    /// For a `partial` apply: the paths that landed (JSON array).
    pub applied_paths: Option<String>,
}

const ROW_COLS: &str = "job_id, command, workspace, policy_used, summary, applied_at, undone_at, diff, validation_id, decided_by, state, applied_paths";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        job_id: r.get(0)?,
        command: r.get(1)?,
        workspace: r.get(2)?,
        policy_used: r.get(3)?,
        summary: r.get(4)?,
        applied_at: r.get(5)?,
        undone_at: r.get(6)?,
        diff: r.get(7)?,
        validation_id: r.get(8)?,
        decided_by: r.get(9)?,
        state: r.get(10)?,
        applied_paths: r.get(11)?,
    })
}

/// A job's applied change set, if it has one.
pub fn of_job(security: &Connection, job_id: i64) -> Result<Option<Row>> {
    Ok(security
        .query_row(
            &format!("SELECT {ROW_COLS} FROM journal WHERE job_id = ?1"),
            [job_id],
            row,
        )
        .optional()?)
}

/// The change sets applied or undone most recently (by the later of the two), newest first.
pub fn recent(security: &Connection, limit: usize) -> Result<Vec<Row>> {
    let mut st = security.prepare(&format!(
        "SELECT {ROW_COLS} FROM journal ORDER BY max(applied_at, coalesce(undone_at, 0)) DESC, job_id DESC LIMIT ?1"
    ))?;
    let rows = st
        .query_map([limit as i64], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The change sets applied (whole or in part) or undone at or after `since` (unix ms), oldest
/// first; an apply still `applying` is not among them (its row is rewritten when it ends).
pub fn since(security: &Connection, since: i64) -> Result<Vec<Row>> {
    let mut st = security.prepare_cached(&format!(
        "SELECT {ROW_COLS} FROM journal WHERE (applied_at >= ?1 OR undone_at >= ?1) AND state <> 'applying' ORDER BY applied_at"
    ))?;
    let rows = st
        .query_map([since], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Drops the kept diff of change sets applied before `before` (unix ms), at most `limit` rows;
/// the rest of each row (what was applied, when, by whom, undo) is kept. Returns how many.
pub fn prune_diffs(
    tx: &rusqlite::Transaction<'_>,
    before: i64,
    limit: usize,
) -> rusqlite::Result<usize> {
    tx.execute(
        "UPDATE journal SET diff = NULL WHERE job_id IN
           (SELECT job_id FROM journal WHERE diff IS NOT NULL AND applied_at < ?1 LIMIT ?2)",
        params![before, limit as i64],
    )
}

/// Records (or replaces) a job's change set in `a.state`, not undone: `applying` before the
/// apply's first byte, then `applied` or `partial`.
pub fn record(security: &mut Connection, a: &Applied, now: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "INSERT OR REPLACE INTO journal(job_id, command, workspace, policy_used, summary, entries, applied_at, undone_at, diff, validation_id, decided_by, state, applied_paths)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10, ?11, ?12)",
            params![a.job_id, a.command, a.workspace, a.policy_used, a.summary, a.entries, now, a.diff, a.validation_id, a.decided_by, a.state, a.applied_paths],
        )
    })?;
    Ok(())
}

/// Sets the row's state (an apply cut off by a stop whose change set is gone at restart: what
/// landed is `partial`).
pub fn settle(
    security: &mut Connection,
    job_id: i64,
    state: &str,
    applied_paths: Option<&str>,
) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "UPDATE journal SET state = ?2, applied_paths = ?3 WHERE job_id = ?1",
            params![job_id, state, applied_paths],
        )
    })?;
    Ok(())
}

/// Removes the row of a job whose apply wrote nothing after all (refused before its first
/// byte): there is nothing to undo.
pub fn forget(security: &mut Connection, job_id: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "DELETE FROM journal WHERE job_id = ?1 AND undone_at IS NULL",
            [job_id],
        )
    })?;
    Ok(())
}

/// What undoing a job's change set needs: (workspace, entries JSON, undone_at).
pub fn for_undo(
    security: &Connection,
    job_id: i64,
) -> Result<Option<(String, String, Option<i64>)>> {
    Ok(security
        .query_row(
            "SELECT workspace, entries, undone_at FROM journal WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?)
}

/// The row's [`state`] (None: no row).
fn state_of(security: &Connection, job_id: i64) -> Result<Option<String>> {
    Ok(security
        .query_row(
            "SELECT state FROM journal WHERE job_id = ?1",
            [job_id],
            |r| r.get(0),
        )
        .optional()?)
}

/// Marks a job's change set undone.
pub fn mark_undone(security: &mut Connection, job_id: i64, now: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "UPDATE journal SET undone_at = ?2 WHERE job_id = ?1",
            params![job_id, now],
        )
    })?;
    Ok(())
}

/// Undoes job `job_id`'s applied change set — all of it, or what a `partial` apply wrote — in
/// its workspace (`changes::undo`: refused, nothing written, when a later change touched a
/// path, naming each; an I/O error half-way marks nothing and a second undo resumes) and marks
/// it undone; the paths restored. Refused while the apply is `applying`. The
/// one undo of the operator's `undo`, `review` and of a fleet worker carrying out an undo
/// request (`ask::fleet`).
pub fn undo(
    security: &mut Connection,
    data_dir: &std::path::Path,
    job_id: i64,
) -> Result<Vec<String>> {
    let Some((ws, entries, undone)) = for_undo(security, job_id)? else {
        anyhow::bail!("job {job_id} has no applied change set (see `brainloop show {job_id}`)");
    };
    if let Some(t) = undone {
        anyhow::bail!("job {job_id}'s change set was already undone (at {t})");
    }
    if state_of(security, job_id)?.as_deref() == Some(state::APPLYING) {
        anyhow::bail!("job {job_id}'s change set is being applied, or its apply was cut off by a stop and the worker has not restarted since (start-up recovery completes or reports it): wait for the job's result (`brainloop show {job_id}`), then undo it");
    }
    let j = super::changes::Journal {
        job_id,
        workspace: ws.into(),
        entries: serde_json::from_str(&entries)?,
    };
    let restored = super::changes::undo(data_dir, &j)?;
    mark_undone(security, job_id, crate::time::now_ms())?;
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{migrate, open, DbKind};

    #[test]
    fn an_applied_change_set_is_recorded_then_marked_undone() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate::ensure_data_dir(&data).unwrap();
        migrate::migrate(&data, DbKind::Security).unwrap();
        let mut c = open(&data, DbKind::Security).unwrap();
        assert!(for_undo(&c, 7).unwrap().is_none());
        let a = Applied {
            job_id: 7,
            command: "sed -i s/a/b/ f".into(),
            workspace: "/ws".into(),
            policy_used: "ask".into(),
            summary: "1 modified".into(),
            entries: "[]".into(),
            diff: "--- a/f\n+++ b/f\n".into(),
            validation_id: Some("v1".into()),
            decided_by: "operator:uid 0".into(),
            state: state::APPLIED,
            applied_paths: None,
        };
        record(&mut c, &a, 10).unwrap();
        let r = of_job(&c, 7).unwrap().unwrap();
        assert_eq!(r.diff.as_deref(), Some("--- a/f\n+++ b/f\n"));
        assert_eq!(r.decided_by.as_deref(), Some("operator:uid 0"));
        // Retention drops the diff of older applies only, and keeps the row.
        let tx = c.transaction().unwrap();
        assert_eq!(prune_diffs(&tx, 10, 100).unwrap(), 0);
        assert_eq!(prune_diffs(&tx, 11, 100).unwrap(), 1);
        tx.commit().unwrap();
        let r = of_job(&c, 7).unwrap().unwrap();
        assert_eq!((r.diff, r.applied_at), (None, 10));
        assert_eq!(recent(&c, 5).unwrap().len(), 1);
        assert_eq!(
            for_undo(&c, 7).unwrap(),
            Some(("/ws".into(), "[]".into(), None))
        );
        mark_undone(&mut c, 7, 11).unwrap();
        assert_eq!(for_undo(&c, 7).unwrap().unwrap().2, Some(11));
    }
}
