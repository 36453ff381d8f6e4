//! The bookkeeping floor of `scripts/bench_peers.sh` (issue 24): the rows brainloop must write
//! for every trivial job — and nothing else — as one minimal single-threaded rusqlite loop over
//! a data dir made by `brainloop init` (the same tables, indexes and per-database `synchronous`):
//!
//! - read 512 new `jobs` rows of input.db, and which of them already have a final result;
//! - lifecycle (NORMAL): the `queue` snapshot and the `processed_log` row (started), one commit;
//! - output (FULL): the `results` row, one commit;
//! - lifecycle: `processed_log` done and the audit row staged in `audit_outbox`, one commit;
//! - metadata (NORMAL): `audit_keys` + `audit`, one commit; lifecycle: the outbox rows deleted.
//!
//! Where brainloop's drain stands against this floor is what its own code costs; where this
//! floor stands against `sqlite_floor` (one result row per job) is what the guarantees cost
//! (the snapshot, the transitions, the exactly-once audit trail). It is not part of brainloop.
//!
//! `bookkeeping_floor DATA_DIR N` exits after N jobs.

use rusqlite::{params, Connection};
use sha2::{Digest, Sha256};
use std::time::Duration;

fn open(dir: &str, name: &str, synchronous: &str) -> rusqlite::Result<Connection> {
    let c = Connection::open(format!("{dir}/brainloop.{name}.db"))?;
    c.busy_timeout(Duration::from_secs(30))?;
    c.pragma_update(None, "synchronous", synchronous)?;
    Ok(c)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct Job {
    id: i64,
    action: String,
    params: String,
    client: String,
    created_at: i64,
}

struct Dbs {
    input: Connection,
    lifecycle: Connection,
    output: Connection,
    metadata: Connection,
}

/// One batch: the same statements, in the same transactions, as brainloop's claim, answer,
/// result commit, lifecycle finish and audit move.
fn batch(d: &mut Dbs, jobs: &[Job], key_prefix: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (lo, hi) = (jobs[0].id, jobs[jobs.len() - 1].id);
    let finals: Vec<i64> = d
        .output
        .prepare_cached(
            "SELECT job_id FROM results WHERE job_id BETWEEN ?1 AND ?2 AND status = 'succeeded'",
        )?
        .query_map([lo, hi], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if !finals.is_empty() {
        return Err("a fresh drain has no final results: the data dir was used before".into());
    }
    let now = now_ms();
    let tx = d.lifecycle.transaction()?;
    {
        let mut q = tx.prepare_cached(
            "INSERT OR IGNORE INTO queue(job_id, action, params, client_id, priority, not_before,
                                         created_at, claimed_at, reject_reason)
             VALUES (?1, ?2, ?3, ?4, 0, NULL, ?5, ?6, NULL)",
        )?;
        let mut p = tx.prepare_cached(
            "INSERT OR IGNORE INTO processed_log(job_id, status, attempts, started_at, finished_at)
             VALUES (?1, 'running', 1, ?2, NULL)",
        )?;
        for j in jobs {
            q.execute(params![
                j.id,
                j.action,
                j.params,
                j.client,
                j.created_at,
                now
            ])?;
            p.execute(params![j.id, now])?;
        }
    }
    tx.commit()?;
    let mut answers = Vec::with_capacity(jobs.len());
    for j in jobs {
        let v: serde_json::Value = serde_json::from_str(&j.params).unwrap_or_default();
        let result = serde_json::json!({"pong": true, "echo": v}).to_string();
        let hash = hex::encode(Sha256::digest(j.params.as_bytes()));
        answers.push((result, hash));
    }
    let tx = d.output.transaction()?;
    {
        let mut r = tx.prepare_cached(
            "INSERT INTO results(job_id, action, client_id, status, result, error, attempts,
                                 duration_ms, started_at, finished_at)
             VALUES (?1, ?2, ?3, 'succeeded', ?4, NULL, 1, 0, ?5, ?5)",
        )?;
        for (j, (result, _)) in jobs.iter().zip(&answers) {
            r.execute(params![j.id, j.action, j.client, result, now])?;
        }
    }
    tx.commit()?;
    let tx = d.lifecycle.transaction()?;
    {
        let mut p = tx.prepare_cached(
            "UPDATE processed_log SET status = 'done', finished_at = ?2 WHERE job_id = ?1",
        )?;
        let mut o = tx.prepare_cached(
            "INSERT INTO audit_outbox(key, timestamp, job_id, client_id, action, params_hash,
                                      status, duration_ms, permission_set)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'succeeded', 0, NULL)",
        )?;
        for (i, (j, (_, hash))) in jobs.iter().zip(&answers).enumerate() {
            p.execute(params![j.id, now])?;
            o.execute(params![
                format!("{key_prefix}-{i}"),
                now,
                j.id,
                j.client,
                j.action,
                hash
            ])?;
        }
    }
    tx.commit()?;
    Ok(move_audit(d, jobs.len())?)
}

/// The outbox's rows into metadata.db (keys remembered), then out of the outbox.
fn move_audit(d: &mut Dbs, n: usize) -> rusqlite::Result<()> {
    type Staged = (String, i64, i64, String, String, String, String, i64);
    let rows: Vec<Staged> = d
        .lifecycle
        .prepare_cached(
            "SELECT key, timestamp, job_id, client_id, action, params_hash, status, duration_ms
             FROM audit_outbox LIMIT ?1",
        )?
        .query_map([n as i64], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let tx = d.metadata.transaction()?;
    {
        let mut k = tx.prepare_cached("INSERT OR IGNORE INTO audit_keys(key) VALUES (?1)")?;
        let mut a = tx.prepare_cached(
            "INSERT INTO audit(timestamp, job_id, client_id, action, params_hash, status,
                               duration_ms, permission_set)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
        )?;
        for (key, ts, job, client, action, hash, status, ms) in &rows {
            if k.execute([key])? == 1 {
                a.execute(params![ts, job, client, action, hash, status, ms])?;
            }
        }
    }
    tx.commit()?;
    let tx = d.lifecycle.transaction()?;
    {
        let mut del = tx.prepare_cached("DELETE FROM audit_outbox WHERE key = ?1")?;
        for r in &rows {
            del.execute([&r.0])?;
        }
    }
    tx.commit()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, n] = &args[..] else {
        return Err("usage: bookkeeping_floor DATA_DIR N".into());
    };
    let n: u64 = n.parse()?;
    let mut d = Dbs {
        input: open(dir, "input", "FULL")?,
        lifecycle: open(dir, "lifecycle", "NORMAL")?,
        output: open(dir, "output", "FULL")?,
        metadata: open(dir, "metadata", "NORMAL")?,
    };
    let (mut last, mut done) = (0i64, 0u64);
    while done < n {
        let jobs: Vec<Job> = d
            .input
            .prepare_cached(
                "SELECT id, action, params, client_id, created_at FROM jobs
                 WHERE id > ?1 ORDER BY id LIMIT 512",
            )?
            .query_map([last], |r| {
                Ok(Job {
                    id: r.get(0)?,
                    action: r.get(1)?,
                    params: r.get(2)?,
                    client: r.get(3)?,
                    created_at: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let Some(tail) = jobs.last() else {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        };
        last = tail.id;
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).map_err(|e| format!("getrandom: {e}"))?;
        batch(&mut d, &jobs, &hex::encode(key))?;
        done += jobs.len() as u64;
    }
    Ok(())
}
