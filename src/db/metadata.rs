//! `brainloop.metadata.db`: telemetry `events` (startup, shutdown, recovery, errors) and the
//! `audit` trail of action calls. Written by the worker and, for the audit rows of the calls it
//! answers or refuses itself, by `brainloop mcp` (a second writer: `BEGIN IMMEDIATE` + busy_timeout).

use anyhow::Result;
use rusqlite::{params, Connection};

pub fn insert_event(
    conn: &mut Connection,
    kind: &str,
    job_id: Option<i64>,
    detail: &serde_json::Value,
) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO events(timestamp, kind, job_id, detail) VALUES (?1, ?2, ?3, ?4)",
            params![crate::time::now_ms(), kind, job_id, detail.to_string()],
        )?;
        Ok(())
    })?;
    Ok(())
}

/// One audited action call.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub timestamp: i64,
    pub job_id: Option<i64>,
    pub client_id: String,
    pub action: Option<String>,
    pub params_hash: Option<String>,
    pub status: String,
    pub duration_ms: Option<i64>,
    pub permission_set: Option<String>,
}

pub fn insert_audit(conn: &mut Connection, rows: &[AuditRow]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    super::write_tx(conn, |tx| {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO audit(timestamp, job_id, client_id, action, params_hash, status,
                               duration_ms, permission_set)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for a in rows {
            stmt.execute(params![
                a.timestamp,
                a.job_id,
                a.client_id,
                a.action,
                a.params_hash,
                a.status,
                a.duration_ms,
                a.permission_set
            ])?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Deletes telemetry events older than `before` (bounded batch).
pub fn prune(conn: &mut Connection, before: i64, batch: usize) -> Result<usize> {
    Ok(super::write_tx(conn, |tx| {
        // The audit trail is not pruned: it is the security record (DESIGN §6).
        tx.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE timestamp < ?1 LIMIT ?2)",
            params![before, batch as i64],
        )
    })?)
}
