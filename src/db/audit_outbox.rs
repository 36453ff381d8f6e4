//! Delivery of the audit trail (issue 19): **every audit row of a job lands in metadata.db
//! exactly once**, whatever metadata.db is doing and wherever the worker is killed.
//!
//! - An audit row is staged in lifecycle.db's `audit_outbox` ([`stage`]) inside the transaction
//!   that records its job's transition (done, pending_validation, requeued). The results and
//!   lifecycle writes never wait on metadata.db.
//! - The recorder task (`supervisor::recorder`) moves staged rows ([`move_batch`]): one
//!   metadata.db transaction inserts each row together with its random key into `audit_keys`
//!   (primary key) — a key already there means the row was moved before a crash and is skipped —
//!   then the moved keys are deleted from the outbox. A locked or failing metadata.db leaves the
//!   rows staged and the move is retried; rows left at shutdown move at the next start.
//! - A kill -9 between the job's results commit (output.db) and its lifecycle commit loses the
//!   staged row with the transaction; start-up recovery finds such jobs (final result, claim
//!   still open) and stages the row again from the result and the claim's snapshot
//!   ([`derive_for_done`]). No other window exists: the row is staged in the same lifecycle
//!   transaction that closes the claim.
//! - Power loss: lifecycle.db and metadata.db are `synchronous = NORMAL` (DESIGN §2), so the
//!   last few staged or moved rows may go with it.

use super::metadata::{self, AuditRow};
use super::write_tx;
use super::Stores;
use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, Transaction};

/// Stages `rows` in the lifecycle transaction `tx`, each under a fresh unique key: one random
/// 128-bit prefix per call, then the row's index (one `getrandom` per batch, not per row).
pub fn stage(tx: &Transaction<'_>, rows: &[AuditRow]) -> rusqlite::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut s = tx.prepare_cached(&format!(
        "INSERT INTO audit_outbox(key, {}) VALUES (?9, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        metadata::AUDIT_COLUMNS
    ))?;
    let prefix = new_key().map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    for (i, a) in rows.iter().enumerate() {
        let key = format!("{prefix}-{i}");
        let mut values = metadata::audit_values(a).to_vec();
        values.push(&key);
        s.execute(&values[..])?;
    }
    Ok(())
}

fn new_key() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness for an audit key: {e}"))?;
    Ok(hex::encode(b))
}

/// Moves up to `max` staged rows into metadata.db; returns how many were staged in that batch
/// (fewer than `max`: the outbox is empty now).
pub fn move_batch(stores: &Stores, max: usize) -> Result<usize> {
    let batch = stores.lifecycle.with(|c| staged(c, max))?;
    if batch.is_empty() {
        return Ok(0);
    }
    stores
        .metadata
        .with(|c| insert_once(c, &batch))
        .context("cannot move audit rows into metadata.db")?;
    stores.lifecycle.with(|c| {
        Ok(write_tx(c, |tx| {
            let mut s = tx.prepare_cached("DELETE FROM audit_outbox WHERE key = ?1")?;
            for (key, _) in &batch {
                s.execute([key])?;
            }
            Ok(())
        })?)
    })?;
    Ok(batch.len())
}

/// Rows still staged (for tests and diagnostics).
pub fn pending(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT count(*) FROM audit_outbox", [], |r| r.get(0))?)
}

fn staged(conn: &Connection, max: usize) -> Result<Vec<(String, AuditRow)>> {
    let mut s = conn.prepare_cached(
        "SELECT key, timestamp, job_id, client_id, action, params_hash, status, duration_ms,
                permission_set
         FROM audit_outbox ORDER BY timestamp, key LIMIT ?1",
    )?;
    let rows = s
        .query_map([max as i64], |r| {
            Ok((
                r.get(0)?,
                AuditRow {
                    timestamp: r.get(1)?,
                    job_id: r.get(2)?,
                    client_id: r.get(3)?,
                    action: r.get(4)?,
                    params_hash: r.get(5)?,
                    status: r.get(6)?,
                    duration_ms: r.get(7)?,
                    permission_set: r.get(8)?,
                },
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// One transaction: each row whose key metadata.db does not know yet, with its key.
fn insert_once(conn: &mut Connection, batch: &[(String, AuditRow)]) -> Result<()> {
    write_tx(conn, |tx| {
        let mut key = tx.prepare_cached("INSERT OR IGNORE INTO audit_keys(key) VALUES (?1)")?;
        for (k, row) in batch {
            if key.execute([k])? == 1 {
                metadata::insert_audit_in(tx, row)?;
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// The audit row of a job whose final result was committed but whose claim was not closed (a
/// kill between the two commits): rebuilt from its `results` row and its claim snapshot.
/// `permission_set` maps the action to the set its calls are audited with.
pub fn derive_for_done(
    output: &Connection,
    lifecycle: &Connection,
    job_id: i64,
    permission_set: impl Fn(Option<&str>) -> Option<String>,
) -> Result<Option<AuditRow>> {
    let row = output
        .query_row(
            "SELECT client_id, action, status, duration_ms,
                    coalesce(finished_at, started_at + coalesce(duration_ms, 0), 0)
             FROM results WHERE job_id = ?1",
            [job_id],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )
        .optional()?;
    let Some((client_id, action, status, duration_ms, finished_at)) = row else {
        return Ok(None);
    };
    let params: Option<Option<String>> = lifecycle
        .query_row(
            "SELECT params FROM queue WHERE job_id = ?1",
            [job_id],
            |r| r.get(0),
        )
        .optional()?;
    Ok(Some(AuditRow {
        timestamp: finished_at,
        job_id: Some(job_id),
        permission_set: permission_set(action.as_deref()),
        client_id,
        action,
        params_hash: params.map(|p| crate::db::metadata::params_hash(p.as_deref().unwrap_or(""))),
        status,
        duration_ms,
    }))
}
