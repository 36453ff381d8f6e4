//! The `sessions` rows of `loop` (lifecycle.db): one row per session, its state as JSON, the
//! client that owns it. A session of another client reads as missing (same answer for both),
//! like `get_result`. run_code's checkpoints share the table under mode `run_code` and are not
//! touched here.

use crate::db::{write_tx, Db};
use anyhow::{Context, Result};
use rusqlite::{params, OptionalExtension};
use serde_json::Value;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Session {
    pub session_id: String,
    pub job_id: Option<i64>,
    pub client_id: String,
    pub mode: String,
    /// open | committed | abandoned | expired (block mode); agent mode adds its own end states.
    pub status: String,
    pub state: Value,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A new random session id (128 bits, hex), prefixed with the mode for readability.
pub fn new_id(mode: &str) -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("no randomness for a session id: {e}"))?;
    Ok(format!("{mode}-{}", hex::encode(bytes)))
}

/// Inserts a new session, or replaces the state and status of an existing one with that id.
pub async fn save(db: &Arc<Db>, s: &Session) -> Result<()> {
    let s = s.clone();
    let state = serde_json::to_string(&s.state)?;
    let now = crate::time::now_ms();
    db.call(move |c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "INSERT INTO sessions(session_id, job_id, client_id, mode, status, state, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(session_id) DO UPDATE SET status = excluded.status,
                     state = excluded.state, updated_at = excluded.updated_at",
                params![s.session_id, s.job_id, s.client_id, s.mode, s.status, state, s.created_at, now],
            )
        })?)
    })
    .await
    .context("saving the loop session")?;
    Ok(())
}

/// The session `id` if `client` owns it and it is a `loop` session; None otherwise.
pub async fn load(db: &Arc<Db>, id: &str, client: &str) -> Result<Option<Session>> {
    let (id, client) = (id.to_string(), client.to_string());
    db.call(move |c| {
        let row = c
            .query_row(
                "SELECT session_id, job_id, client_id, mode, status, state, created_at, updated_at
                 FROM sessions WHERE session_id = ?1 AND client_id = ?2 AND mode IN ('blocks', 'agent')",
                params![id, client],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<i64>>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, i64>(7)?,
                    ))
                },
            )
            .optional()?;
        let Some((session_id, job_id, client_id, mode, status, state, created_at, updated_at)) = row
        else {
            return Ok(None);
        };
        let state = serde_json::from_str(&state)
            .with_context(|| format!("session {session_id}: stored state is not JSON"))?;
        Ok(Some(Session {
            session_id,
            job_id,
            client_id,
            mode,
            status,
            state,
            created_at,
            updated_at,
        }))
    })
    .await
}

/// Open `loop` sessions (what the heartbeat's `sessions_active` reports).
pub async fn count_open(db: &Arc<Db>) -> Result<i64> {
    db.call(|c| {
        Ok(c.query_row(
            "SELECT count(*) FROM sessions WHERE status = 'open' AND mode IN ('blocks', 'agent')",
            [],
            |r| r.get(0),
        )?)
    })
    .await
}

/// The session a job runs (agent mode: one job, one session), any status.
pub async fn find_by_job(db: &Arc<Db>, job_id: i64, mode: &str) -> Result<Option<String>> {
    let mode = mode.to_string();
    db.call(move |c| {
        Ok(c.query_row(
            "SELECT session_id FROM sessions WHERE job_id = ?1 AND mode = ?2
             ORDER BY created_at DESC LIMIT 1",
            params![job_id, mode],
            |r| r.get(0),
        )
        .optional()?)
    })
    .await
}
