//! `brainloop.metadata.db`: telemetry `events` (startup, shutdown, recovery, errors) and the
//! `audit` trail of action calls (the worker's rows arrive through `db::audit_outbox`). Written by the worker and, for the audit rows of the calls it
//! answers or refuses itself, by `brainloop mcp` (a second writer: `BEGIN IMMEDIATE` + busy_timeout).

use anyhow::Result;
use rusqlite::{params, Connection, Transaction};

pub fn insert_event(
    conn: &mut Connection,
    kind: &str,
    job_id: Option<i64>,
    detail: &serde_json::Value,
) -> Result<()> {
    let e = crate::telemetry::Event::now(kind, job_id, detail.clone());
    insert_events(conn, std::slice::from_ref(&e))
}

/// The details of one job's events of `kind`, oldest first (e.g. the reviewer's answers).
pub fn events_of(conn: &Connection, kind: &str, job_id: i64) -> Result<Vec<serde_json::Value>> {
    let mut st = conn
        .prepare_cached("SELECT detail FROM events WHERE kind = ?1 AND job_id = ?2 ORDER BY id")?;
    let rows = st
        .query_map(params![kind, job_id], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect())
}

/// Writes telemetry events in one transaction, each with the time it was recorded.
pub fn insert_events(conn: &mut Connection, events: &[crate::telemetry::Event]) -> Result<()> {
    super::write_tx(conn, |tx| {
        let mut s = tx.prepare_cached(
            "INSERT INTO events(timestamp, kind, job_id, detail) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for e in events {
            s.execute(params![e.timestamp, e.kind, e.job_id, e.detail.to_string()])?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The `params_hash` of an audit row: SHA-256 hex of the params text as submitted.
pub fn params_hash(params_text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(params_text.as_bytes()))
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

/// The columns of an audit row, in the order of [`audit_values`] (`?1` … `?8`).
pub const AUDIT_COLUMNS: &str =
    "timestamp, job_id, client_id, action, params_hash, status, duration_ms, permission_set";

/// The values of an audit row for [`AUDIT_COLUMNS`].
pub fn audit_values(a: &AuditRow) -> [&dyn rusqlite::ToSql; 8] {
    [
        &a.timestamp,
        &a.job_id,
        &a.client_id,
        &a.action,
        &a.params_hash,
        &a.status,
        &a.duration_ms,
        &a.permission_set,
    ]
}

/// Inserts one audit row inside the caller's transaction.
pub fn insert_audit_in(tx: &Transaction<'_>, a: &AuditRow) -> rusqlite::Result<()> {
    tx.prepare_cached(&format!(
        "INSERT INTO audit({AUDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    ))?
    .execute(&audit_values(a)[..])?;
    Ok(())
}

pub fn insert_audit(conn: &mut Connection, rows: &[AuditRow]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    super::write_tx(conn, |tx| {
        rows.iter().try_for_each(|a| insert_audit_in(tx, a))
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
