//! command_security.db `journal`: one row per applied change set (its command, workspace, the
//! policy that applied it, the summary and the journaled entries that undo it), and when it was
//! undone. The files themselves (`data_dir/journal/<job>/`) belong to `bash::changes`.

use crate::db::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

/// An applied change set, as recorded.
pub struct Applied {
    pub job_id: i64,
    pub command: String,
    pub workspace: String,
    pub policy_used: String,
    pub summary: String,
    /// The journal's entries as JSON.
    pub entries: String,
}

/// Records (or replaces) a job's applied change set, not undone.
pub fn record(security: &mut Connection, a: &Applied, now: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "INSERT OR REPLACE INTO journal(job_id, command, workspace, policy_used, summary, entries, applied_at, undone_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
            params![a.job_id, a.command, a.workspace, a.policy_used, a.summary, a.entries, now],
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
        };
        record(&mut c, &a, 10).unwrap();
        assert_eq!(
            for_undo(&c, 7).unwrap(),
            Some(("/ws".into(), "[]".into(), None))
        );
        mark_undone(&mut c, 7, 11).unwrap();
        assert_eq!(for_undo(&c, 7).unwrap().unwrap().2, Some(11));
    }
}
