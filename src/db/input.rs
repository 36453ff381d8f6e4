//! Reading `brainloop.input.db`: new job rows above the high-water mark, validated row by row.
//!
//! The worker never writes this file; every write to `jobs` is a function here (`enqueue`'s and
//! the MCP front-end's insert, `prune-input`, `repair`'s renumbering). Rows are read with their SQLite types checked, and params
//! over the size cap are measured with `octet_length()` and never loaded. A malformed row becomes
//! a [`NewJob`] with a `reject` reason, so it still gets claimed and ends `failed` with that
//! reason instead of blocking the queue.

use anyhow::Result;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection};

/// A row of `jobs` as the claimer sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub id: i64,
    pub action: Option<String>,
    /// The params text exactly as the producer wrote it (`None` when rejected).
    pub params: Option<String>,
    pub client_id: String,
    pub priority: i64,
    pub not_before: Option<i64>,
    pub created_at: Option<i64>,
    /// Why this row cannot run; it ends `failed` with this message.
    pub reject: Option<String>,
    /// An open job of the same client with the same key refuses this one (issue 36).
    pub unique_key: Option<String>,
    /// The job's own retry policy, checked and normalised (`retry::Policy` as JSON).
    pub retry: Option<String>,
}

/// Longest `action` / `client_id` loaded (bytes); longer ones are rejected unread.
pub const NAME_MAX: i64 = 1024;

/// Rows with `id > after_id`, in id order, at most `limit`.
pub fn scan(
    conn: &Connection,
    after_id: i64,
    limit: usize,
    params_cap: u64,
) -> Result<Vec<NewJob>> {
    Ok(scan_budget(conn, after_id, limit, params_cap, u64::MAX)?.0)
}

/// Like [`scan`], but stops before the loaded text (params, action, client) would exceed
/// `max_bytes` (always returning at least one row); the flag says it stopped for the budget.
pub fn scan_budget(
    conn: &Connection,
    after_id: i64,
    limit: usize,
    params_cap: u64,
    max_bytes: u64,
) -> Result<(Vec<NewJob>, bool)> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, CASE WHEN octet_length(action) <= ?4 THEN action END,
                typeof(params), octet_length(params),
                CASE WHEN octet_length(params) <= ?3 THEN params END,
                CASE WHEN octet_length(client_id) <= ?4 THEN client_id END,
                priority, not_before, created_at,
                octet_length(action), octet_length(client_id),
                CASE WHEN octet_length(unique_key) <= ?4 THEN unique_key END, octet_length(unique_key),
                CASE WHEN octet_length(retry) <= ?4 THEN retry END, octet_length(retry)
         FROM jobs WHERE id > ?1 ORDER BY id LIMIT ?2",
    )?;
    let mut rows = stmt.query(params![after_id, limit as i64, params_cap as i64, NAME_MAX])?;
    let mut out = Vec::new();
    let mut used: u64 = 0;
    while let Some(row) = rows.next()? {
        let size = row_bytes(row, params_cap)?;
        if !out.is_empty() && used.saturating_add(size) > max_bytes {
            return Ok((out, true));
        }
        used = used.saturating_add(size);
        out.push(parse_row(row, params_cap)?);
    }
    Ok((out, false))
}

/// The bytes a row's loaded text takes (params over the cap are not loaded).
fn row_bytes(row: &rusqlite::Row<'_>, params_cap: u64) -> rusqlite::Result<u64> {
    let len = |i: usize| -> rusqlite::Result<u64> {
        Ok(row.get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64)
    };
    let params = len(3)?;
    let params = if params <= params_cap { params } else { 0 };
    Ok(params + len(9)?.min(NAME_MAX as u64) + len(10)?.min(NAME_MAX as u64) + 64)
}

/// A name column over [`NAME_MAX`] bytes: the problem, without quoting it.
fn too_long(
    row: &rusqlite::Row<'_>,
    col: usize,
    len_col: usize,
    what: &str,
) -> rusqlite::Result<Option<String>> {
    let len: Option<i64> = row.get(len_col)?;
    Ok(match len {
        Some(n) if n > NAME_MAX && matches!(row.get_ref(col)?, ValueRef::Null) => Some(format!(
            "{what} is {n} bytes, over {NAME_MAX}; it was not loaded"
        )),
        _ => None,
    })
}

/// Validates one row (columns of [`scan_budget`]'s query).
/// Long because every column of a producer's row is checked here, in one place, each with the
/// problem it names; split, the row's problems would be gathered across functions.
fn parse_row(row: &rusqlite::Row<'_>, params_cap: u64) -> Result<NewJob> {
    {
        let id: i64 = row.get(0)?;
        let mut problems: Vec<String> = Vec::new();
        let action_long = too_long(row, 1, 9, "action")?;
        let client_long = too_long(row, 5, 10, "client_id")?;

        let action = match row.get_ref(1)? {
            ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(s) if s.trim().is_empty() => {
                    problems.push(
                        "action is empty: it must name an action (see `list_actions`)".into(),
                    );
                    None
                }
                Ok(s) if s.contains('\0') => {
                    problems.push("action contains a NUL byte".into());
                    None
                }
                Ok(s) => Some(s.to_string()),
                Err(_) => {
                    problems.push("action is not valid UTF-8".into());
                    None
                }
            },
            _ if action_long.is_some() => {
                problems.extend(action_long);
                None
            }
            other => {
                problems.push(format!(
                    "action must be TEXT naming an action (got {})",
                    type_name(other)
                ));
                None
            }
        };

        let params_type: String = row.get(2)?;
        let params_len: Option<i64> = row.get(3)?;
        let params = match params_type.as_str() {
            "null" => Some("{}".to_string()),
            "text" => match row.get_ref(4)? {
                ValueRef::Null => {
                    problems.push(format!(
                        "params are {} bytes, over the cap of {params_cap} bytes (params_max_bytes); they were not loaded",
                        params_len.unwrap_or(-1)
                    ));
                    None
                }
                ValueRef::Text(b) => check_params(b, &mut problems),
                other => {
                    problems.push(format!(
                        "params could not be read (got {})",
                        type_name(other)
                    ));
                    None
                }
            },
            t => {
                problems.push(format!(
                    "params must be TEXT holding a JSON object (got {t})"
                ));
                None
            }
        };

        let client_id = match row.get_ref(5)? {
            ValueRef::Null if client_long.is_some() => {
                problems.extend(client_long);
                "local".to_string()
            }
            ValueRef::Null => "local".to_string(),
            ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(s) if !s.is_empty() && !s.contains('\0') => s.to_string(),
                _ => {
                    problems.push("client_id must be non-empty UTF-8 TEXT without NUL".into());
                    "local".to_string()
                }
            },
            other => {
                problems.push(format!("client_id must be TEXT (got {})", type_name(other)));
                "local".to_string()
            }
        };

        let priority = match row.get_ref(6)? {
            ValueRef::Null => 0,
            ValueRef::Integer(i) => i,
            other => {
                problems.push(format!(
                    "priority must be an INTEGER (got {})",
                    type_name(other)
                ));
                0
            }
        };
        let not_before = match row.get_ref(7)? {
            ValueRef::Null => None,
            ValueRef::Integer(i) => Some(i),
            other => {
                problems.push(format!(
                    "not_before must be NULL or INTEGER unix milliseconds (got {})",
                    type_name(other)
                ));
                None
            }
        };
        let created_at = match row.get_ref(8)? {
            ValueRef::Integer(i) => Some(i),
            _ => None,
        };
        let unique_key = match row.get_ref(11)? {
            ValueRef::Null => {
                problems.extend(too_long(row, 11, 12, "unique_key")?);
                None
            }
            ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(s) if !s.is_empty() && !s.contains('\0') => Some(s.to_string()),
                _ => {
                    problems.push("unique_key must be non-empty UTF-8 TEXT without NUL".into());
                    None
                }
            },
            other => {
                problems.push(format!(
                    "unique_key must be NULL or TEXT (got {})",
                    type_name(other)
                ));
                None
            }
        };
        let retry = match row.get_ref(13)? {
            ValueRef::Null => {
                problems.extend(too_long(row, 13, 14, "retry")?);
                None
            }
            ValueRef::Text(b) => match std::str::from_utf8(b)
                .map_err(|e| format!("retry is not valid UTF-8 ({e})"))
                .and_then(crate::retry::Policy::parse)
            {
                Ok(p) => serde_json::to_string(&p).ok(),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            other => {
                problems.push(format!(
                    "retry must be NULL or TEXT holding a JSON object (got {})",
                    type_name(other)
                ));
                None
            }
        };

        let reject = if problems.is_empty() {
            None
        } else {
            Some(format!("invalid job row {id}: {}", problems.join("; ")))
        };
        Ok(NewJob {
            id,
            action,
            params: if reject.is_some() { None } else { params },
            client_id,
            priority,
            not_before: if reject.is_some() { None } else { not_before },
            created_at,
            reject,
            unique_key,
            retry,
        })
    }
}

/// Params must be UTF-8 text without NUL holding a JSON object.
fn check_params(bytes: &[u8], problems: &mut Vec<String>) -> Option<String> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            problems.push(format!("params are not valid UTF-8 ({e})"));
            return None;
        }
    };
    if text.contains('\0') {
        problems.push("params contain a NUL byte".into());
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Some(text.to_string()),
        Ok(other) => {
            problems.push(format!(
                "params must be a JSON object (got {})",
                json_kind(&other)
            ));
            None
        }
        Err(e) => {
            problems.push(format!("params are not valid JSON: {e}"));
            None
        }
    }
}

pub fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn type_name(v: ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "INTEGER",
        ValueRef::Real(_) => "REAL",
        ValueRef::Text(_) => "TEXT",
        ValueRef::Blob(_) => "BLOB",
    }
}

/// `PRAGMA data_version`: changes whenever another connection commits to this database.
pub fn data_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

/// When a file event woke the worker, the producer's commit may not be visible yet (see
/// [`super::VISIBILITY_RECHECKS_US`]). With `settle`, while the version still equals `prev` it
/// is read again after each of the first waits, up to [`SETTLE_MAX_US`] in all (on the blocking
/// pool), before the caller gives up and leaves it to its millisecond timers: a job is picked up
/// a fraction of a millisecond after its commit becomes visible instead of one to two.
pub fn settled_data_version(db: &super::Db, prev: Option<i64>, settle: bool) -> Result<i64> {
    let mut dv = db.with(|c| data_version(c))?;
    let mut slept = 0;
    for &wait in super::VISIBILITY_RECHECKS_US.iter() {
        if !settle || Some(dv) != prev || slept + wait > SETTLE_MAX_US {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(wait));
        slept += wait;
        dv = db.with(|c| data_version(c))?;
    }
    Ok(dv)
}

/// The longest [`settled_data_version`] waits (the first four re-checks).
pub const SETTLE_MAX_US: u64 = 2000;

/// Number of rows above the mark (for `status`).
pub fn count_after(conn: &Connection, after_id: i64) -> Result<i64> {
    Ok(
        conn.query_row("SELECT count(*) FROM jobs WHERE id > ?1", [after_id], |r| {
            r.get(0)
        })?,
    )
}

/// Inserts a job (used by `brainloop enqueue` and tests); returns its id.
pub fn insert_job(
    conn: &mut Connection,
    action: &str,
    params: &str,
    client_id: &str,
    priority: i64,
    not_before: Option<i64>,
) -> Result<i64> {
    Ok(super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO jobs(action, params, client_id, priority, not_before, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                action,
                params,
                client_id,
                priority,
                not_before,
                crate::time::now_ms()
            ],
        )?;
        Ok(tx.last_insert_rowid())
    })?)
}

/// Inserts a job of the MCP front-end as a task (issue 55): the row and its task id
/// `bl-<job id>-<nonce>` in one transaction, so the task exists only once the job row is
/// committed. `nonce`: 64 random bits, hex. Returns (job id, task id).
pub fn insert_task_job(
    conn: &mut Connection,
    action: &str,
    params: &str,
    client_id: &str,
    nonce: &str,
) -> Result<(i64, String)> {
    Ok(super::write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO jobs(action, params, client_id, priority, created_at) VALUES (?1, ?2, ?3, 0, ?4)",
            params![action, params, client_id, crate::time::now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        let task_id = format!("bl-{id}-{nonce}");
        tx.execute(
            "UPDATE jobs SET task_id = ?2 WHERE id = ?1",
            params![id, task_id],
        )?;
        Ok((id, task_id))
    })?)
}

/// A job's producer-side facts a task lookup needs: (client_id, task_id, created_at).
pub fn task_of(conn: &Connection, job_id: i64) -> Result<Option<(String, Option<String>, i64)>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(
            "SELECT client_id, task_id, coalesce(created_at, 0) FROM jobs WHERE id = ?1",
        )?
        .query_row([job_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?)
}

/// A client's request to withdraw its own job (`withdrawals`, issue 55).
#[derive(Debug, Clone, PartialEq)]
pub struct Withdrawal {
    pub id: i64,
    pub job_id: i64,
    pub client_id: String,
    pub requested_at: i64,
}

/// Producer side (`tasks/cancel`): records that `client_id` withdraws job `job_id`. A second
/// request for the same job and client adds nothing; returns whether this one was new.
pub fn withdraw(conn: &mut Connection, job_id: i64, client_id: &str, now: i64) -> Result<bool> {
    Ok(super::write_tx(conn, |tx| {
        let n = tx.execute(
            "INSERT INTO withdrawals(job_id, client_id, requested_at)
             SELECT ?1, ?2, ?3 WHERE NOT EXISTS
               (SELECT 1 FROM withdrawals WHERE job_id = ?1 AND client_id = ?2)",
            params![job_id, client_id, now],
        )?;
        Ok(n == 1)
    })?)
}

/// Worker side: withdrawals with `id > after`, in id order, at most `limit`. Rows whose
/// columns are not what the schema says (a producer's raw row) are skipped, not fatal.
pub fn withdrawals_after(conn: &Connection, after: i64, limit: usize) -> Result<Vec<Withdrawal>> {
    let mut s = conn.prepare_cached(
        "SELECT id, job_id, client_id, requested_at FROM withdrawals WHERE id > ?1
         AND typeof(job_id) = 'integer' AND typeof(client_id) = 'text'
         AND octet_length(client_id) <= ?3 ORDER BY id LIMIT ?2",
    )?;
    let rows = s
        .query_map(params![after, limit as i64, NAME_MAX], |r| {
            Ok(Withdrawal {
                id: r.get(0)?,
                job_id: r.get(1)?,
                client_id: r.get(2)?,
                requested_at: r.get::<_, Option<i64>>(3)?.unwrap_or(0),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The highest withdrawal id (0 when none): a skipped malformed row must not be read forever.
pub fn last_withdrawal(conn: &Connection) -> Result<i64> {
    Ok(
        conn.query_row("SELECT coalesce(max(id), 0) FROM withdrawals", [], |r| {
            r.get(0)
        })?,
    )
}

/// What a producer adds to a job beyond [`insert_job`]'s columns (issue 36).
#[derive(Debug, Default, Clone)]
pub struct JobControl<'a> {
    /// Refused while a job of the same client with the same key is open.
    pub unique_key: Option<&'a str>,
    /// The job's retry policy (JSON, `retry::Policy`; checked by the caller).
    pub retry: Option<&'a str>,
}

/// What [`insert_unique`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Inserted {
    New(i64),
    /// Refused: job `by` of the same client holds the key (`status`: what it is doing).
    Held {
        by: i64,
        status: String,
    },
}

/// Inserts a job unless an open job of the same client holds its `unique_key` (checked and
/// inserted in one `BEGIN IMMEDIATE` transaction, so two producers cannot both get in).
/// `open_status(id, created_at)` says whether job `id` is still open and how (the caller reads
/// output.db, which producers may read; the worker's claim is the final judge).
#[allow(clippy::too_many_arguments)]
pub fn insert_unique(
    conn: &mut Connection,
    action: &str,
    params: &str,
    client_id: &str,
    priority: i64,
    not_before: Option<i64>,
    ctl: &JobControl<'_>,
    open_status: &dyn Fn(i64, i64) -> Option<String>,
) -> Result<Inserted> {
    Ok(super::write_tx(conn, |tx| {
        if let Some(key) = ctl.unique_key {
            let mut s = tx.prepare(
                "SELECT id, coalesce(created_at, 0) FROM jobs WHERE client_id = ?1 AND unique_key = ?2
                 ORDER BY id DESC LIMIT 100",
            )?;
            let holders = s
                .query_map(params![client_id, key], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (id, created) in holders.into_iter().rev() {
                if let Some(status) = open_status(id, created) {
                    return Ok(Inserted::Held { by: id, status });
                }
            }
        }
        tx.execute(
            "INSERT INTO jobs(action, params, client_id, priority, not_before, created_at, unique_key, retry)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                action,
                params,
                client_id,
                priority,
                not_before,
                crate::time::now_ms(),
                ctl.unique_key,
                ctl.retry
            ],
        )?;
        Ok(Inserted::New(tx.last_insert_rowid()))
    })?)
}

/// `brainloop prune-input`: deletes at most `batch` jobs already claimed (id ≤ `hwm`) and
/// created before `cutoff`; returns how many.
pub fn prune_claimed(conn: &mut Connection, hwm: i64, cutoff: i64, batch: usize) -> Result<usize> {
    Ok(super::write_tx(conn, |tx| {
        tx.execute(
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE id <= ?1 AND created_at < ?2 LIMIT ?3)",
            params![hwm, cutoff, batch as i64],
        )
    })?)
}

/// `brainloop repair --accept-new-input`, in one transaction: ids continue above `floor` (the
/// highest id any file knows; `sqlite_sequence` moved there), and rows at or below it are
/// renumbered above it. Returns the (old, new) ids.
pub fn renumber_above(conn: &mut Connection, floor: i64) -> Result<Vec<(i64, i64)>> {
    Ok(super::write_tx(conn, |tx| {
        let max: i64 = tx.query_row("SELECT coalesce(max(id), 0) FROM jobs", [], |r| r.get(0))?;
        let offset = max.max(floor);
        let old: Vec<i64> = tx
            .prepare("SELECT id FROM jobs WHERE id <= ?1 ORDER BY id")?
            .query_map([floor], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        tx.execute(
            "UPDATE jobs SET id = id + ?1 WHERE id <= ?2",
            params![offset, floor],
        )?;
        let top: i64 = tx.query_row("SELECT coalesce(max(id), 0) FROM jobs", [], |r| r.get(0))?;
        let seq = top.max(floor);
        let n = tx.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'jobs'",
            [seq],
        )?;
        if n == 0 {
            tx.execute(
                "INSERT INTO sqlite_sequence(name, seq) VALUES ('jobs', ?1)",
                [seq],
            )?;
        }
        Ok(old.into_iter().map(|id| (id, id + offset)).collect())
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(super::super::DbKind::Input.schema())
            .unwrap();
        c.execute_batch(include_str!("../../schema/input.3.sql"))
            .unwrap();
        c.execute_batch(include_str!("../../schema/input.4.sql"))
            .unwrap();
        c
    }

    #[test]
    fn a_task_job_carries_its_id_and_a_withdrawal_is_recorded_once() {
        let mut c = db();
        let (id, task) = insert_task_job(&mut c, "sleep", "{}", "agent", "00ff").unwrap();
        assert_eq!(task, format!("bl-{id}-00ff"));
        let (client, t, _) = task_of(&c, id).unwrap().unwrap();
        assert_eq!(
            (client.as_str(), t.as_deref()),
            ("agent", Some(task.as_str()))
        );
        assert!(task_of(&c, id + 1).unwrap().is_none());
        assert!(withdraw(&mut c, id, "agent", 5).unwrap());
        assert!(!withdraw(&mut c, id, "agent", 6).unwrap(), "once");
        c.execute(
            "INSERT INTO withdrawals(job_id, client_id, requested_at) VALUES ('x', 1, 0)",
            [],
        )
        .unwrap();
        let w = withdrawals_after(&c, 0, 10).unwrap();
        assert_eq!(w.len(), 1, "the malformed raw row is skipped: {w:?}");
        assert_eq!(
            (w[0].job_id, w[0].client_id.as_str(), w[0].requested_at),
            (id, "agent", 5)
        );
        assert_eq!(last_withdrawal(&c).unwrap(), 2);
    }

    #[test]
    fn every_malformed_shape_is_rejected_with_a_named_reason() {
        let c = db();
        let cases: &[(&str, &str)] = &[
            ("INSERT INTO jobs(action, params) VALUES ('list_actions', '{}')", ""),
            ("INSERT INTO jobs(action, params) VALUES ('x', '{nope')", "not valid JSON"),
            ("INSERT INTO jobs(action, params) VALUES ('x', '[1,2]')", "an array"),
            ("INSERT INTO jobs(action, params) VALUES ('x', x'7b7d')", "got blob"),
            ("INSERT INTO jobs(action, params) VALUES ('x', 42)", "a number"),
            ("INSERT INTO jobs(action, params) VALUES ('x', '{\"a\":\"' || char(0) || '\"}')", "NUL"),
            ("INSERT INTO jobs(action, params) VALUES ('x', CAST(x'7b22223a22ff227d' AS TEXT))", "UTF-8"),
            ("INSERT INTO jobs(action, params) VALUES (x'00', '{}')", "action must be TEXT"),
            ("INSERT INTO jobs(action, params) VALUES ('', '{}')", "action is empty"),
            ("INSERT INTO jobs(action, params, priority) VALUES ('x', '{}', 'high')", "priority"),
            ("INSERT INTO jobs(action, params, not_before) VALUES ('x', '{}', 1.5)", "not_before"),
            ("INSERT INTO jobs(action, params, retry) VALUES ('x', '{}', '{\"max_attempts\": 0}')", "between 1 and 100"),
            ("INSERT INTO jobs(action, params, retry) VALUES ('x', '{}', 3)", "JSON object with max_attempts"),
            ("INSERT INTO jobs(action, params, unique_key) VALUES ('x', '{}', x'01')", "unique_key must be NULL or TEXT"),
            ("INSERT INTO jobs(action, params, unique_key) VALUES ('x', '{}', '')", "unique_key must be non-empty"),
            ("INSERT INTO jobs(action, params, client_id) VALUES ('x', '{}', x'01')", "client_id"),
            ("INSERT INTO jobs(action, params) VALUES ('x', '{\"k\":\"' || hex(zeroblob(600)) || '\"}')", "over the cap"),
        ];
        for (sql, _) in cases {
            c.execute(sql, []).unwrap();
        }
        let rows = scan(&c, 0, 100, 1000).unwrap();
        assert_eq!(rows.len(), cases.len());
        for (row, (sql, want)) in rows.iter().zip(cases) {
            if want.is_empty() {
                assert_eq!(row.reject, None, "{sql}");
                assert_eq!(row.params.as_deref(), Some("{}"));
            } else {
                let r = row
                    .reject
                    .as_deref()
                    .unwrap_or_else(|| panic!("accepted: {sql}"));
                assert!(r.contains(want), "{sql}: {r}");
                assert!(row.params.is_none());
            }
        }
    }

    #[test]
    fn scan_starts_above_the_mark_and_respects_the_limit() {
        let c = db();
        for _ in 0..5 {
            c.execute("INSERT INTO jobs(action) VALUES ('list_actions')", [])
                .unwrap();
        }
        let rows = scan(&c, 2, 2, 1 << 20).unwrap();
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(rows[0].client_id, "local");
    }
}
