//! lifecycle.db `sessions`: one row per session, its state as JSON, the client that owns it.
//! `loop` sessions (modes `blocks`, `agent`): a session of another client reads as missing (same
//! answer for both), like `get_result`. run_code's checkpoints share the table under mode
//! `run_code` (`load_run_code`, `save_run_code`), one row per job; the `loop` functions never
//! touch them.

use super::{write_tx, Db};
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
        read_one(
            c,
            "session_id = ?1 AND client_id = ?2 AND mode IN ('blocks', 'agent')",
            params![id, client],
        )
    })
    .await
}

/// The one session row matching `filter` (a WHERE clause over `sessions`), parsed.
fn read_one(
    c: &rusqlite::Connection,
    filter: &str,
    args: impl rusqlite::Params,
) -> Result<Option<Session>> {
    let row = c
        .query_row(
            &format!(
                "SELECT session_id, job_id, client_id, mode, status, state, created_at, updated_at
                 FROM sessions WHERE {filter} LIMIT 1"
            ),
            args,
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
}

/// The session of `mode` a job created (a propose job run again after a crash finds its own
/// session instead of generating a second one).
pub async fn load_by_job(
    db: &Arc<Db>,
    job_id: i64,
    client: &str,
    mode: &str,
) -> Result<Option<Session>> {
    let (client, mode) = (client.to_string(), mode.to_string());
    db.call(move |c| {
        read_one(
            c,
            "job_id = ?1 AND client_id = ?2 AND mode = ?3",
            params![job_id, client, mode],
        )
    })
    .await
}

/// Read-modify-write of one session in a single `BEGIN IMMEDIATE` transaction (short: never
/// spans an LLM call). `f` sees the transaction (to consult other lifecycle tables) and the
/// session as stored now; the session is written back only when `f` returns `Ok`. Returns None
/// when `client` owns no `loop` session `id` (a foreign session reads as missing).
pub async fn update<T, E>(
    db: &Arc<Db>,
    id: &str,
    client: &str,
    f: impl FnOnce(&rusqlite::Transaction<'_>, &mut Session) -> std::result::Result<T, E>
        + Send
        + 'static,
) -> Result<Option<std::result::Result<T, E>>>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let (id, client) = (id.to_string(), client.to_string());
    db.call(move |c| {
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let Some(mut s) = read_one(
            &tx,
            "session_id = ?1 AND client_id = ?2 AND mode IN ('blocks', 'agent')",
            params![id, client],
        )?
        else {
            return Ok(None);
        };
        let out = f(&tx, &mut s);
        if out.is_ok() {
            tx.execute(
                "UPDATE sessions SET status = ?2, state = ?3, updated_at = ?4 WHERE session_id = ?1",
                params![
                    s.session_id,
                    s.status,
                    serde_json::to_string(&s.state)?,
                    crate::time::now_ms()
                ],
            )?;
            tx.commit()?;
        }
        Ok(Some(out))
    })
    .await
    .context("updating the loop session")
}

/// Whether job `job_id` has not ended yet (claimed, running or waiting for a human): its
/// `processed_log` row exists and is not `done`.
pub fn job_live(c: &rusqlite::Connection, job_id: i64) -> rusqlite::Result<bool> {
    Ok(c.query_row(
        "SELECT status FROM processed_log WHERE job_id = ?1",
        [job_id],
        |r| r.get::<_, String>(0),
    )
    .optional()?
    .is_some_and(|s| s != "done"))
}

/// Marks `id` expired if it is an open session of `mode` untouched since `cutoff` (ms).
/// Returns whether it was.
pub async fn expire_one(db: &Arc<Db>, id: &str, mode: &str, cutoff: i64) -> Result<bool> {
    let (id, mode) = (id.to_string(), mode.to_string());
    db.call(move |c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "UPDATE sessions SET status = 'expired', updated_at = ?4
                 WHERE session_id = ?1 AND mode = ?2 AND status = 'open' AND updated_at < ?3",
                params![id, mode, cutoff, crate::time::now_ms()],
            )
        })? > 0)
    })
    .await
}

/// The retention pass's expiry: open sessions of `mode` untouched since `cutoff` (ms) become
/// `expired`. Returns how many did.
pub fn expire_idle(c: &mut rusqlite::Connection, mode: &str, cutoff: i64) -> Result<usize> {
    Ok(write_tx(c, |tx| {
        tx.execute(
            "UPDATE sessions SET status = 'expired', updated_at = ?3
             WHERE mode = ?1 AND status = 'open' AND updated_at < ?2",
            params![mode, cutoff, crate::time::now_ms()],
        )
    })?)
}

/// Agent sessions whose job ended outside the session — a human denied a step, its validation
/// expired, or the job ran out of attempts — end `closed`: the job will never resume them.
/// (A session the agent ended itself already holds its own end state.)
pub fn close_orphaned_agent_sessions(c: &mut rusqlite::Connection) -> Result<usize> {
    let active = ACTIVE
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(write_tx(c, |tx| {
        tx.execute(
            &format!(
                "UPDATE sessions SET status = 'closed', updated_at = ?1
                 WHERE mode = 'agent' AND status IN ({active})
                   AND job_id IN (SELECT job_id FROM processed_log WHERE status = 'done')"
            ),
            params![crate::time::now_ms()],
        )
    })?)
}

/// States of a `loop` session that has not ended; every other status is an end state (block
/// mode: committed, abandoned, expired; agent mode adds its own).
pub const ACTIVE: &[&str] = &["open", "running", "pending_validation", "paused"];

/// Ended `loop` sessions (what the heartbeat's `sessions_completed` reports).
pub async fn count_ended(db: &Arc<Db>) -> Result<i64> {
    let active = ACTIVE
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    db.call(move |c| {
        Ok(c.query_row(
            &format!(
                "SELECT count(*) FROM sessions WHERE mode IN ('blocks', 'agent') AND status NOT IN ({active})"
            ),
            [],
            |r| r.get(0),
        )?)
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

/// run_code's checkpoint session of a job.
fn run_code_id(job_id: i64) -> String {
    format!("run_code:{job_id}")
}

/// The stored run_code state (JSON text) of a job, if its session is open.
pub async fn load_run_code(db: &Arc<Db>, job_id: i64) -> Result<Option<String>> {
    let id = run_code_id(job_id);
    db.call(move |c| {
        Ok(c.query_row(
            "SELECT state FROM sessions WHERE session_id = ?1 AND status = 'open'",
            [id],
            |r| r.get(0),
        )
        .optional()?)
    })
    .await
}

/// Writes a job's run_code state (`open`), or marks its session `committed` when the job ended.
pub async fn save_run_code(
    db: &Arc<Db>,
    job_id: i64,
    client: &str,
    state: String,
    done: bool,
) -> Result<()> {
    let (id, client) = (run_code_id(job_id), client.to_string());
    let now = crate::time::now_ms();
    db.call(move |c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "INSERT INTO sessions(session_id, job_id, client_id, mode, status, state, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 'run_code', ?4, ?5, ?6, ?6)
                 ON CONFLICT(session_id) DO UPDATE SET status = excluded.status, state = excluded.state, updated_at = excluded.updated_at",
                params![id, job_id, client, if done { "committed" } else { "open" }, state, now],
            )
        })?)
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{migrate, DbKind};
    use serde_json::json;

    fn session(id: &str, client: &str, mode: &str, status: &str) -> Session {
        Session {
            session_id: id.into(),
            job_id: Some(1),
            client_id: client.into(),
            mode: mode.into(),
            status: status.into(),
            state: json!({"n": 0}),
            created_at: 0,
            updated_at: 0,
        }
    }

    #[tokio::test]
    async fn ownership_updates_expiry_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate::ensure_data_dir(&data).unwrap();
        migrate::migrate(&data, DbKind::Lifecycle).unwrap();
        let db = Db::open(&data, DbKind::Lifecycle).unwrap();
        for s in [
            session("s1", "a", "blocks", "open"),
            session("s2", "a", "blocks", "abandoned"),
            session("s3", "b", "agent", "open"),
            session("rc", "a", "run_code", "open"),
        ] {
            save(&db, &s).await.unwrap();
        }
        // Another client's session and run_code checkpoints read as missing.
        assert!(load(&db, "s1", "b").await.unwrap().is_none());
        assert!(load(&db, "rc", "a").await.unwrap().is_none());
        let none = update(&db, "s1", "b", |_, s| {
            s.status = "committed".into();
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
        assert!(none.is_none());
        // A refused update writes nothing; an accepted one does.
        let r = update(&db, "s1", "a", |_, s| {
            s.state = json!({"n": 1});
            Err::<(), _>("no")
        })
        .await
        .unwrap();
        assert_eq!(r, Some(Err("no")));
        assert_eq!(
            load(&db, "s1", "a").await.unwrap().unwrap().state,
            json!({"n": 0})
        );
        update(&db, "s1", "a", |_, s| {
            s.state = json!({"n": 2});
            Ok::<_, ()>(())
        })
        .await
        .unwrap()
        .unwrap()
        .unwrap();
        let s1 = load(&db, "s1", "a").await.unwrap().unwrap();
        assert_eq!(s1.state, json!({"n": 2}));
        assert!(s1.updated_at > 0, "an update touches the session");
        assert_eq!(
            load_by_job(&db, 1, "a", "blocks")
                .await
                .unwrap()
                .map(|s| s.mode),
            Some("blocks".to_string())
        );
        assert!(load_by_job(&db, 2, "a", "blocks").await.unwrap().is_none());
        // Counts: open loop sessions (s1, s3) and ended ones (s2); run_code is not a loop session.
        assert_eq!(count_open(&db).await.unwrap(), 2);
        assert_eq!(count_ended(&db).await.unwrap(), 1);
        // Expiry: only open sessions of the mode, idle before the cutoff.
        let cutoff = s1.updated_at + 1;
        assert!(!expire_one(&db, "s1", "agent", cutoff).await.unwrap());
        assert!(expire_one(&db, "s1", "blocks", cutoff).await.unwrap());
        assert!(!expire_one(&db, "s1", "blocks", cutoff).await.unwrap());
        save(&db, &session("s4", "a", "blocks", "open"))
            .await
            .unwrap();
        db.with(|c| {
            c.execute(
                "UPDATE sessions SET updated_at = 5 WHERE session_id = 's4'",
                [],
            )?;
            Ok(())
        })
        .unwrap();
        assert_eq!(db.with(|c| expire_idle(c, "blocks", 10)).unwrap(), 1);
        assert_eq!(db.with(|c| expire_idle(c, "blocks", 10)).unwrap(), 0);
        assert_eq!(count_open(&db).await.unwrap(), 1, "only the agent session");
        assert_eq!(count_ended(&db).await.unwrap(), 3);
        // An agent session whose job ended outside it is closed; one whose job still waits is not.
        save(&db, &session("s5", "a", "agent", "open"))
            .await
            .unwrap();
        let mut s6 = session("s6", "a", "agent", "open");
        s6.job_id = Some(6);
        save(&db, &s6).await.unwrap();
        db.with(|c| {
            c.execute_batch(
                "INSERT INTO processed_log(job_id, status) VALUES (1, 'done'), (6, 'pending_validation')",
            )?;
            assert_eq!(close_orphaned_agent_sessions(c)?, 2, "s3 and s5 (job 1 done)");
            assert_eq!(close_orphaned_agent_sessions(c)?, 0);
            c.execute("DELETE FROM processed_log", [])?;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            load(&db, "s5", "a").await.unwrap().unwrap().status,
            "closed"
        );
        assert_eq!(load(&db, "s6", "a").await.unwrap().unwrap().status, "open");
        // A job is live until its log row is done.
        db.with(|c| {
            c.execute_batch(
                "INSERT INTO processed_log(job_id, status) VALUES (7, 'pending_validation'), (8, 'done')",
            )?;
            assert!(job_live(c, 7)?);
            assert!(!job_live(c, 8)?);
            assert!(!job_live(c, 9)?);
            Ok(())
        })
        .unwrap();
    }
}
