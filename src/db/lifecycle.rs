//! `brainloop.lifecycle.db`: the claim high-water mark and the schedules' id counter (`config`),
//! the immutable job snapshots (`queue`, plus what a request for a human binds to them), each
//! job's progress (`processed_log`: claim, start, wait for a validation, resume, finish,
//! requeue), scheduled firings, the LLM's daily usage (`llm_usage`) and generated content awaiting
//! approval (`llm_pending`), and their pruning. Every write to those tables is a function here.

use super::input::NewJob;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

pub const HWM_KEY: &str = "high_water_mark";

/// `processed_log.status` values.
pub mod status {
    pub const CLAIMED: &str = "claimed";
    pub const RUNNING: &str = "running";
    pub const PENDING_VALIDATION: &str = "pending_validation";
    pub const DONE: &str = "done";
}

/// The highest `jobs.id` already claimed (0 on a fresh database).
pub fn high_water_mark(conn: &Connection) -> Result<i64> {
    let v: Option<String> = conn
        .query_row("SELECT value FROM config WHERE key = ?1", [HWM_KEY], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(v.and_then(|s| s.parse().ok()).unwrap_or(0))
}

/// Claims `jobs` in one transaction: snapshot into `queue`, a `processed_log` row each, and the
/// high-water mark moved past them. Jobs in `already_final` (a final result exists, e.g. after a
/// claim was lost to power failure) are recorded as done and never run. Jobs in `start` are
/// claimed and started in this same transaction (`running`, attempt 1, `started_at` = `now`:
/// the state `claimed` then `start` would leave, with nothing in between to see); the returned
/// set holds those whose row was new — only they may run (supervisor::instant).
pub fn claim(
    tx: &Transaction<'_>,
    jobs: &[NewJob],
    already_final: &std::collections::HashSet<i64>,
    start: &std::collections::HashSet<i64>,
    now: i64,
) -> rusqlite::Result<std::collections::HashSet<i64>> {
    let mut ins_q = tx.prepare_cached(
        "INSERT OR IGNORE INTO queue(job_id, action, params, client_id, priority, not_before,
                                     created_at, claimed_at, reject_reason, unique_key, retry)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    let mut ins_p = tx.prepare_cached(
        "INSERT OR IGNORE INTO processed_log(job_id, status, attempts, started_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut started = std::collections::HashSet::new();
    let mut max_id = 0;
    for j in jobs {
        ins_q.execute(params![
            j.id,
            j.action,
            j.params,
            j.client_id,
            j.priority,
            j.not_before,
            j.created_at,
            now,
            j.reject,
            j.unique_key,
            j.retry
        ])?;
        let none = Option::<i64>::None;
        if already_final.contains(&j.id) {
            ins_p.execute(params![j.id, status::DONE, 0, none, now])?;
        } else if start.contains(&j.id) {
            if ins_p.execute(params![j.id, status::RUNNING, 1, now, none])? == 1 {
                started.insert(j.id);
            }
        } else {
            ins_p.execute(params![j.id, status::CLAIMED, 0, none, none])?;
        }
        max_id = max_id.max(j.id);
    }
    tx.execute(
        "INSERT INTO config(key, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
         WHERE CAST(config.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        params![HWM_KEY, max_id.to_string(), now],
    )?;
    Ok(started)
}

/// The claimed snapshot a job runs from.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub job_id: i64,
    pub action: Option<String>,
    pub params: Option<String>,
    pub client_id: String,
    pub reject_reason: Option<String>,
    /// Including the attempt being started.
    pub attempts: u32,
    pub started_at: i64,
    /// The job's own retry policy (JSON, `retry::Policy`), if it has one.
    pub retry: Option<String>,
}

/// A job's snapshot as the worker took it at its claim, as `brainloop show` tells it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub action: Option<String>,
    pub params: Option<String>,
    pub client_id: String,
    /// `jobs.created_at` as the producer wrote it.
    pub created_at: Option<i64>,
    pub claimed_at: i64,
}

/// Job `job_id`'s snapshot, if it was claimed.
pub fn snapshot_of(conn: &Connection, job_id: i64) -> Result<Option<Claimed>> {
    Ok(conn
        .query_row(
            "SELECT action, params, client_id, created_at, claimed_at FROM queue WHERE job_id = ?1",
            [job_id],
            |r| {
                Ok(Claimed {
                    action: r.get(0)?,
                    params: r.get(1)?,
                    client_id: r.get(2)?,
                    created_at: r.get(3)?,
                    claimed_at: r.get(4)?,
                })
            },
        )
        .optional()?)
}

/// Marks jobs running (one more attempt each) and returns their snapshots.
pub fn start(tx: &Transaction<'_>, ids: &[i64], now: i64) -> rusqlite::Result<Vec<Snapshot>> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'running', attempts = attempts + 1, started_at = ?2
         WHERE job_id = ?1 RETURNING attempts",
    )?;
    let mut sel = tx.prepare_cached(
        "SELECT action, params, client_id, reject_reason, retry FROM queue WHERE job_id = ?1",
    )?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        let attempts: Option<i64> = upd.query_row(params![id, now], |r| r.get(0)).optional()?;
        let Some(attempts) = attempts else { continue };
        let snap = sel
            .query_row([id], |r| {
                Ok(Snapshot {
                    job_id: id,
                    action: r.get(0)?,
                    params: r.get(1)?,
                    client_id: r.get(2)?,
                    reject_reason: r.get(3)?,
                    attempts: attempts as u32,
                    started_at: now,
                    retry: r.get(4)?,
                })
            })
            .optional()?;
        if let Some(s) = snap {
            out.push(s);
        }
    }
    Ok(out)
}

/// The open job (claimed, running or waiting) of `client_id` holding `unique_key`, other than
/// `except`: (its id, its status). Uniqueness is per client: one client's key never refuses
/// another client's job.
pub fn unique_holder(
    conn: &Connection,
    client_id: &str,
    unique_key: &str,
    except: i64,
) -> Result<Option<(i64, String)>> {
    Ok(conn
        .query_row(
            "SELECT q.job_id, p.status FROM queue q JOIN processed_log p USING(job_id)
             WHERE q.client_id = ?1 AND q.unique_key = ?2 AND p.status <> 'done' AND q.job_id <> ?3
             ORDER BY q.job_id LIMIT 1",
            params![client_id, unique_key, except],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// What a retry decision needs of a job's snapshot: whether it ever asked a human (its request
/// was bound to the snapshot, `bind_request`) and its priority.
pub fn asked_and_priority(conn: &Connection, job_id: i64) -> Result<Option<(bool, i64)>> {
    Ok(conn
        .query_row(
            "SELECT command_hash IS NOT NULL, priority FROM queue WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// A failed attempt the retry policy retries: the job is `claimed` again, due at `not_before`
/// (unix ms) — recovery requeues it for then if the worker stops meanwhile. Only a `running`
/// job moves (its attempt stays counted).
pub fn retry_later(conn: &mut Connection, job_id: i64, not_before: i64) -> Result<bool> {
    Ok(super::write_tx(conn, |tx| {
        let n = tx.execute(
            "UPDATE processed_log SET status = 'claimed' WHERE job_id = ?1 AND status = 'running'",
            [job_id],
        )?;
        if n == 1 {
            tx.execute(
                "UPDATE queue SET not_before = ?2 WHERE job_id = ?1",
                params![job_id, not_before],
            )?;
        }
        Ok(n == 1)
    })?)
}

/// Marks jobs done (their final result is already committed in output.db).
pub fn finish(tx: &Transaction<'_>, ids: &[i64], now: i64) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'done', finished_at = ?2 WHERE job_id = ?1",
    )?;
    for &id in ids {
        upd.execute(params![id, now])?;
    }
    Ok(())
}

/// Puts jobs cut off by a graceful shutdown back to `claimed`; the cut-off attempt is not counted.
pub fn requeue(tx: &Transaction<'_>, ids: &[i64]) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'claimed', attempts = max(attempts - 1, 0)
         WHERE job_id = ?1 AND status = 'running'",
    )?;
    for &id in ids {
        upd.execute([id])?;
    }
    Ok(())
}

/// Binds a job's snapshot to what its request for a human was about (the command hash, the
/// permission set, and the workdir when one is given).
pub fn bind_request(
    conn: &mut Connection,
    job_id: i64,
    hash: &str,
    set: &str,
    workdir: Option<&str>,
) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "UPDATE queue SET command_hash = ?2, permission_set = ?3,
                 workdir = coalesce(?4, workdir) WHERE job_id = ?1",
            params![job_id, hash, set, workdir],
        )
    })?;
    Ok(())
}

/// Jobs now wait for a human (`pending_validation`), inside the caller's transaction (the
/// finisher's group commit).
pub fn pending_validation(tx: &Transaction<'_>, ids: &[i64]) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'pending_validation' WHERE job_id = ?1",
    )?;
    for &id in ids {
        upd.execute([id])?;
    }
    Ok(())
}

/// One job now waits for a human (`pending_validation`), in its own transaction.
pub fn wait_for_validation(conn: &mut Connection, job_id: i64) -> Result<()> {
    super::write_tx(conn, |tx| pending_validation(tx, &[job_id]))?;
    Ok(())
}

/// Recovery at start-up, inside its transaction: jobs a crash left `running` are `claimed`
/// again (their attempt stays counted, unlike [`requeue`]).
pub fn reclaim_running(tx: &Transaction<'_>, ids: &[i64]) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE processed_log SET status = 'claimed' WHERE job_id = ?1 AND status = 'running'",
    )?;
    for &id in ids {
        upd.execute([id])?;
    }
    Ok(())
}

/// A job a human approved is claimed again (only if it was still waiting).
pub fn resume_validated(conn: &mut Connection, job_id: i64) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "UPDATE processed_log SET status = 'claimed' WHERE job_id = ?1 AND status = 'pending_validation'",
            [job_id],
        )
    })?;
    Ok(())
}

/// What a schedule's firing runs.
pub struct Firing<'a> {
    pub action: &'a str,
    /// None when `reject` is set.
    pub params: Option<&'a str>,
    pub client_id: &'a str,
    pub reject: Option<String>,
}

/// Claims one scheduled firing inside the caller's transaction: the next negative job id
/// (`config` `schedule_seq`), its snapshot and a `claimed` progress row. Returns the id.
pub fn claim_firing(tx: &Transaction<'_>, f: &Firing<'_>, now_ms: i64) -> rusqlite::Result<i64> {
    let last: i64 = tx
        .query_row(
            "SELECT CAST(value AS INTEGER) FROM config WHERE key = 'schedule_seq'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let id = last.min(0) - 1;
    tx.execute(
        "INSERT INTO config(key, value, updated_at) VALUES ('schedule_seq', ?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![id.to_string(), now_ms],
    )?;
    tx.execute(
        "INSERT INTO queue(job_id, action, params, client_id, priority, created_at, claimed_at, reject_reason)
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?5, ?6)",
        params![id, f.action, f.params, f.client_id, now_ms, f.reject],
    )?;
    tx.execute(
        "INSERT INTO processed_log(job_id, status, attempts) VALUES (?1, 'claimed', 0)",
        [id],
    )?;
    Ok(id)
}

/// Repair of a lost lifecycle.db (`cli::repair`), inside the caller's transaction: a replaced
/// file's claims, progress and settings are dropped (`clear`), and claims restart above `hwm`.
pub fn restart_claims(
    tx: &Transaction<'_>,
    clear: bool,
    hwm: i64,
    now: i64,
) -> rusqlite::Result<()> {
    if clear {
        tx.execute_batch("DELETE FROM queue; DELETE FROM processed_log; DELETE FROM config;")?;
    }
    tx.execute(
        "INSERT INTO config(key, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![HWM_KEY, hwm.to_string(), now],
    )?;
    Ok(())
}

/// Tokens persisted for the UTC `day` (prompt + completion).
pub fn llm_usage_of(conn: &Connection, day: &str) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM llm_usage WHERE day = ?1",
        [day],
        |r| r.get::<_, i64>(0),
    )?)
}

/// Adds one LLM request's tokens to the day's usage.
pub fn record_llm_usage(
    conn: &mut Connection,
    day: &str,
    prompt_tokens: i64,
    completion_tokens: i64,
    now: i64,
) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO llm_usage(day, prompt_tokens, completion_tokens, requests, updated_at)
             VALUES (?1, ?2, ?3, 1, ?4)
             ON CONFLICT(day) DO UPDATE SET
                prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                completion_tokens = completion_tokens + excluded.completion_tokens,
                requests = requests + 1,
                updated_at = excluded.updated_at",
            params![day, prompt_tokens, completion_tokens, now],
        )
    })?;
    Ok(())
}

/// Generated content awaiting a human's approval (`llm_pending`), one row per job.
pub struct PendingContent {
    pub job_id: i64,
    pub action: String,
    pub target: String,
    pub content: String,
    pub content_hash: String,
}

/// Stores (or replaces) a job's generated content.
pub fn store_pending(conn: &mut Connection, p: &PendingContent, now: i64) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT OR REPLACE INTO llm_pending(job_id, action, target, content, content_hash, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![p.job_id, p.action, p.target, p.content, p.content_hash, now],
        )
    })?;
    Ok(())
}

/// A job's stored content for `action`: (target, content, content_hash).
pub fn pending_of(
    conn: &Connection,
    job_id: i64,
    action: &str,
) -> Result<Option<(String, String, String)>> {
    Ok(conn
        .query_row(
            "SELECT target, content, content_hash FROM llm_pending WHERE job_id = ?1 AND action = ?2",
            params![job_id, action],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?)
}

/// Forgets a job's stored content.
pub fn forget_pending(conn: &mut Connection, job_id: i64) -> Result<()> {
    super::write_tx(conn, |tx| {
        tx.execute("DELETE FROM llm_pending WHERE job_id = ?1", [job_id])
    })?;
    Ok(())
}

/// A claimed job that is not done yet (for recovery at start-up).
#[derive(Debug, Clone)]
pub struct OpenJob {
    pub job_id: i64,
    pub status: String,
    pub attempts: u32,
    pub priority: i64,
    pub not_before: Option<i64>,
    pub action: Option<String>,
    pub client_id: String,
    /// The job's own retry policy (JSON, `retry::Policy`).
    pub retry: Option<String>,
}

pub fn open_jobs(conn: &Connection) -> Result<Vec<OpenJob>> {
    let mut stmt = conn.prepare(
        "SELECT p.job_id, p.status, p.attempts, q.priority, q.not_before, q.action, q.client_id, q.retry
         FROM processed_log p JOIN queue q ON q.job_id = p.job_id
         WHERE p.status <> 'done' ORDER BY p.job_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(OpenJob {
                job_id: r.get(0)?,
                status: r.get(1)?,
                attempts: r.get::<_, i64>(2)?.max(0) as u32,
                priority: r.get(3)?,
                not_before: r.get(4)?,
                action: r.get(5)?,
                client_id: r.get(6)?,
                retry: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Deletes snapshots and progress rows of jobs finished before `before`; returns rows deleted.
pub fn prune(conn: &mut Connection, before: i64, batch: usize) -> Result<usize> {
    Ok(super::write_tx(conn, |tx| {
        let ids: Vec<i64> = {
            let mut s = tx.prepare(
                "SELECT job_id FROM processed_log WHERE status = 'done' AND finished_at < ?1 LIMIT ?2",
            )?;
            let v = s
                .query_map(params![before, batch as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            v
        };
        for id in &ids {
            tx.execute("DELETE FROM queue WHERE job_id = ?1", [id])?;
            tx.execute("DELETE FROM processed_log WHERE job_id = ?1", [id])?;
        }
        // Generated content of jobs that ended (written, denied, expired) is of no further use.
        let stale = tx.execute(
            "DELETE FROM llm_pending WHERE job_id IN
                 (SELECT l.job_id FROM llm_pending l LEFT JOIN processed_log p USING(job_id)
                  WHERE p.job_id IS NULL OR p.status = 'done' LIMIT ?1)",
            [batch as i64],
        )?;
        // Daily LLM usage is kept a year (the budget needs only today).
        let old = tx.execute(
            "DELETE FROM llm_usage WHERE updated_at < ?1 - 365 * 86400000",
            [crate::time::now_ms()],
        )?;
        // The apply journal of jobs that are done (`db::applies`).
        let applies = super::applies::prune(tx, before, batch)?;
        Ok(ids.len() + stale + old + applies)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{migrate, open, write_tx, DbKind};

    fn lifecycle_db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate::ensure_data_dir(&data).unwrap();
        migrate::migrate(&data, DbKind::Lifecycle).unwrap();
        let c = open(&data, DbKind::Lifecycle).unwrap();
        (dir, c)
    }

    fn status_of(c: &Connection, id: i64) -> (String, i64) {
        c.query_row(
            "SELECT status, attempts FROM processed_log WHERE job_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    #[test]
    fn firings_waits_resumes_and_reclaims() {
        let (_d, mut c) = lifecycle_db();
        let firing = Firing {
            action: "ping",
            params: Some("{}"),
            client_id: "local",
            reject: None,
        };
        let a = write_tx(&mut c, |tx| claim_firing(tx, &firing, 5)).unwrap();
        let b = write_tx(&mut c, |tx| claim_firing(tx, &firing, 6)).unwrap();
        assert_eq!((a, b), (-1, -2), "scheduled ids count down from -1");
        assert_eq!(status_of(&c, a), ("claimed".into(), 0));
        // A crash left `a` running: recovery claims it again, its attempt still counted; `b`
        // (not running) is untouched.
        write_tx(&mut c, |tx| start(tx, &[a], 7)).unwrap();
        write_tx(&mut c, |tx| reclaim_running(tx, &[a, b])).unwrap();
        assert_eq!(status_of(&c, a), ("claimed".into(), 1));
        assert_eq!(status_of(&c, b), ("claimed".into(), 0));
        // Waiting for a human, then approved: claimed again; a second resume changes nothing.
        write_tx(&mut c, |tx| pending_validation(tx, &[a])).unwrap();
        wait_for_validation(&mut c, b).unwrap();
        assert_eq!(status_of(&c, a).0, "pending_validation");
        assert_eq!(status_of(&c, b).0, "pending_validation");
        resume_validated(&mut c, a).unwrap();
        assert_eq!(status_of(&c, a).0, "claimed");
        write_tx(&mut c, |tx| finish(tx, &[a], 8)).unwrap();
        resume_validated(&mut c, a).unwrap();
        assert_eq!(status_of(&c, a).0, "done");
        // Repair of a replaced file: everything dropped, claims restart above the mark.
        write_tx(&mut c, |tx| restart_claims(tx, true, 41, 9)).unwrap();
        assert_eq!(high_water_mark(&c).unwrap(), 41);
        let left: i64 = c
            .query_row("SELECT count(*) FROM queue", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn llm_usage_adds_up_and_pending_content_is_replaced_then_forgotten() {
        let (_d, mut c) = lifecycle_db();
        record_llm_usage(&mut c, "2026-01-01", 10, 5, 1).unwrap();
        record_llm_usage(&mut c, "2026-01-01", 1, 2, 2).unwrap();
        assert_eq!(llm_usage_of(&c, "2026-01-01").unwrap(), 18);
        assert_eq!(llm_usage_of(&c, "2026-01-02").unwrap(), 0);
        let mut p = PendingContent {
            job_id: 3,
            action: "generate_file".into(),
            target: "/ws/a".into(),
            content: "x".into(),
            content_hash: "h1".into(),
        };
        store_pending(&mut c, &p, 1).unwrap();
        p.content = "y".into();
        store_pending(&mut c, &p, 2).unwrap();
        assert_eq!(
            pending_of(&c, 3, "generate_file").unwrap(),
            Some(("/ws/a".into(), "y".into(), "h1".into()))
        );
        assert_eq!(pending_of(&c, 3, "generate_sql").unwrap(), None);
        forget_pending(&mut c, 3).unwrap();
        assert_eq!(pending_of(&c, 3, "generate_file").unwrap(), None);
    }
}
