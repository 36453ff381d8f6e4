//! Human validation (DESIGN §3 "Approvals"): `validations` in output.db (written by the worker,
//! readable by anyone) and `approvals` in command_security.db (written only by the operator CLI).
//!
//! A job that needs a human gets a validation with a random 128-bit id and waits
//! (`pending_validation`). `brainloop approve|deny ID [--always]` writes an approval row. The
//! worker consumes each approval row exactly once, and acts on it only if the validation is still
//! pending, unexpired, and names the same command hash as the job's claimed snapshot — so a
//! replayed approval, an approval of an expired request, or a producer editing `jobs.params`
//! after approval changes nothing. Unanswered validations expire closed.
//!
//! Expiry runs on the monotonic clock (issue 34): `expires_at` is stored (wall clock) for people
//! and for a later worker, but this worker counts each validation's TTL from when it saw it — the
//! creation, or the first expiry pass after a start for one created by an earlier worker (the
//! time left then, `expires_at - now`, capped to the TTL) — as a deadline on `time::mono_ms`
//! ([`deadline`]). A wall-clock step forward never expires a validation at once, nor does a step
//! back keep one past its TTL. A decision counts when made before the deadline by either clock
//! ([`too_late`]).
//!
//! With a fleet registry (`[registry]`, issue 37) the same two tables also live in PostgreSQL
//! (`crate::registry`): the worker publishes its validations there ([`publish`], naming itself
//! by its login role), the operator decides there ([`fleet_decide`]; only the operator's role
//! may write `decisions`), and the worker takes each decision on its own validations into its
//! local decision rows ([`take`]) — which `answers::collect` consumes exactly as on one
//! machine, with every check (pending, in time, the snapshot's hash). Every statement on those
//! tables, local or in the registry, is here.

use crate::db::write_tx;
use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// This process's monotonic deadline (`time::mono_ms`) of every pending validation it has seen.
static DEADLINES: Mutex<BTreeMap<String, i64>> = Mutex::new(BTreeMap::new());

fn deadlines() -> std::sync::MutexGuard<'static, BTreeMap<String, i64>> {
    match DEADLINES.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// When `v` expires on the monotonic clock (`None`: never), armed the first time this process
/// sees it: the wall-clock time left then, capped to its TTL (`expires_at - requested_at`).
pub fn deadline(v: &Validation) -> Option<i64> {
    let expires = v.expires_at?;
    let ttl = (expires - v.requested_at).max(0);
    let left = (expires - crate::time::now_ms()).clamp(0, ttl);
    Some(
        *deadlines()
            .entry(v.id.clone())
            .or_insert_with(|| crate::time::mono_ms() + left),
    )
}

/// Whether a decision made at `decided_at` (the deciding process's wall clock) comes too late
/// for `v`: past its deadline on this worker's monotonic clock AND, by the wall clock, after
/// `expires_at`. Either clock saying "in time" is enough: a decision seen late (the worker
/// stopped meanwhile) counts, and so does one whose clock was stepped forward.
pub fn too_late(v: &Validation, decided_at: i64) -> bool {
    let Some(expires) = v.expires_at else {
        return false;
    };
    let mono_passed = deadline(v).is_some_and(|d| d <= crate::time::mono_ms());
    mono_passed && expires <= decided_at
}

/// Pending validations one client may have at once; beyond, new requests fail.
pub const MAX_PENDING_PER_CLIENT: i64 = 50;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Validation {
    pub id: String,
    pub job_id: i64,
    pub client_id: String,
    pub command: Option<String>,
    pub command_hash: Option<String>,
    pub policy: Option<String>,
    pub risk_score: Option<f64>,
    pub permission_set: Option<String>,
    /// JSON array of strings (serialized as the array itself, not as its text).
    #[serde(serialize_with = "json_text")]
    pub reasons: Option<String>,
    pub status: String,
    pub requested_at: i64,
    pub decided_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// A column holding JSON text, serialized as the JSON it holds (text that does not parse stays
/// a string): `validations --json` gives arrays as arrays.
fn json_text<S: serde::Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    match v.as_deref().map(serde_json::from_str::<serde_json::Value>) {
        Some(Ok(parsed)) => parsed.serialize(s),
        _ => v.serialize(s),
    }
}

/// 128 random bits, hex.
pub fn new_id() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| anyhow::anyhow!("no randomness for a validation id: {e}"))?;
    Ok(hex::encode(b))
}

const COLS: &str = "id, job_id, client_id, command, command_hash, policy, risk_score, permission_set, reasons, status, requested_at, decided_at, expires_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Validation> {
    Ok(Validation {
        id: r.get(0)?,
        job_id: r.get(1)?,
        client_id: r.get(2)?,
        command: r.get(3)?,
        command_hash: r.get(4)?,
        policy: r.get(5)?,
        risk_score: r.get(6)?,
        permission_set: r.get(7)?,
        reasons: r.get(8)?,
        status: r.get(9)?,
        requested_at: r.get(10)?,
        decided_at: r.get(11)?,
        expires_at: r.get(12)?,
    })
}

/// Creates a pending validation (output.db); refuses past the per-client cap.
pub fn create(output: &mut Connection, v: &Validation) -> Result<()> {
    let capped = write_tx(output, |tx| {
        let n: i64 = tx.query_row(
            "SELECT count(*) FROM validations WHERE client_id = ?1 AND status = 'pending'",
            [&v.client_id],
            |r| r.get(0),
        )?;
        if n >= MAX_PENDING_PER_CLIENT {
            return Ok(true);
        }
        tx.execute(
            &format!("INSERT INTO validations({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending', ?10, NULL, ?11)"),
            params![v.id, v.job_id, v.client_id, v.command, v.command_hash, v.policy, v.risk_score, v.permission_set, v.reasons, v.requested_at, v.expires_at],
        )?;
        Ok(false)
    })?;
    if !capped {
        // Its TTL runs from now on the monotonic clock.
        deadline(v);
    }
    if capped {
        bail!(
            "client {:?} already has {MAX_PENDING_PER_CLIENT} validations waiting for a human; wait for them to be decided",
            v.client_id
        );
    }
    Ok(())
}

pub fn get(output: &Connection, id: &str) -> Result<Option<Validation>> {
    Ok(output
        .query_row(
            &format!("SELECT {COLS} FROM validations WHERE id = ?1"),
            [id],
            row,
        )
        .optional()?)
}

pub fn list(output: &Connection, only_pending: bool) -> Result<Vec<Validation>> {
    let mut s = output.prepare(&format!(
        "SELECT {COLS} FROM validations WHERE (?1 = 0 OR status = 'pending') ORDER BY requested_at"
    ))?;
    let v = s
        .query_map([only_pending as i64], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// The latest validation of a job with a given status.
pub fn of_job(output: &Connection, job_id: i64, status: &str) -> Result<Option<Validation>> {
    Ok(output
        .query_row(
            &format!("SELECT {COLS} FROM validations WHERE job_id = ?1 AND status = ?2 ORDER BY requested_at DESC LIMIT 1"),
            params![job_id, status],
            row,
        )
        .optional()?)
}

/// The most recent validation of a job, whatever its status.
pub fn latest_of_job(output: &Connection, job_id: i64) -> Result<Option<Validation>> {
    Ok(output
        .query_row(
            &format!("SELECT {COLS} FROM validations WHERE job_id = ?1 ORDER BY requested_at DESC, rowid DESC LIMIT 1"),
            [job_id],
            row,
        )
        .optional()?)
}

/// When another job than `job_id` of the same client last asked for this command (for the
/// duplicate check, which is per client: another client's request never makes this one's run
/// nothing, issue 49; a job's own earlier attempt, cut off by a crash, is not a duplicate of
/// it). A change set's validation binds to the effect hash, so the command text finds those too.
pub fn last_requested(
    output: &Connection,
    hash: &str,
    command: &str,
    job_id: i64,
    client: &str,
) -> Result<Option<i64>> {
    // The newest of each index's newest row (output.db step 4), never a scan of them all.
    Ok(output
        .prepare_cached(
            "SELECT max(t) FROM (
           SELECT (SELECT requested_at FROM validations WHERE command_hash = ?1 AND job_id <> ?2
                   AND client_id = ?4 ORDER BY requested_at DESC LIMIT 1) AS t
           UNION ALL
           SELECT (SELECT requested_at FROM validations WHERE command = ?3 AND job_id <> ?2
                   AND client_id = ?4 ORDER BY requested_at DESC LIMIT 1))",
        )?
        .query_row(rusqlite::params![hash, job_id, command, client], |r| {
            r.get(0)
        })?)
}

/// When another job than `job_id` of the same client last ran this command (same reasons as
/// `last_requested`).
pub fn last_executed(
    security: &Connection,
    hash: &str,
    job_id: i64,
    client: &str,
) -> Result<Option<i64>> {
    // Newest first along `executions_hash`: the first row of another job, not every run's.
    Ok(security
        .prepare_cached(
            "SELECT executed_at FROM executions WHERE command_hash = ?1 AND (job_id IS NULL OR job_id <> ?2)
             AND client_id = ?3 ORDER BY executed_at DESC LIMIT 1",
        )?
        .query_row(rusqlite::params![hash, job_id, client], |r| r.get(0))
        .optional()?)
}

pub fn set_status(output: &mut Connection, id: &str, status: &str, now: i64) -> Result<bool> {
    let n = write_tx(output, |tx| {
        tx.execute(
            "UPDATE validations SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'",
            params![id, status, now],
        )
    })?;
    Ok(n == 1)
}

/// Repair of a lost lifecycle.db (`cli::repair`): every pending validation is expired (its job
/// asks again). Returns how many were.
pub fn expire_all_pending(output: &Connection, now: i64) -> Result<usize> {
    Ok(output.execute(
        "UPDATE validations SET status = 'expired', decided_at = ?1 WHERE status = 'pending'",
        [now],
    )?)
}

/// Start-up recovery, inside its transaction: pending validations whose job never reached
/// waiting for them (a crash between creating one and writing the job's result) are expired —
/// the job runs again and asks anew.
pub fn expire_orphans(
    tx: &rusqlite::Transaction<'_>,
    ids: &[String],
    now: i64,
) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE validations SET status = 'expired', decided_at = ?2 WHERE id = ?1 AND status = 'pending'",
    )?;
    for id in ids {
        upd.execute(params![id, now])?;
    }
    Ok(())
}

/// Start-up recovery, inside its transaction: the pending validations of jobs the operator
/// cancelled (`db::cancels`) are closed `cancelled` (an answer to them is then ignored).
pub fn cancel_pending_of(
    tx: &rusqlite::Transaction<'_>,
    job_ids: &[i64],
    now: i64,
) -> rusqlite::Result<()> {
    let mut upd = tx.prepare_cached(
        "UPDATE validations SET status = 'cancelled', decided_at = ?2 WHERE job_id = ?1 AND status = 'pending'",
    )?;
    for id in job_ids {
        upd.execute(params![id, now])?;
    }
    Ok(())
}

/// Repair of a replaced output.db (`cli::repair`), inside the caller's transaction: its foreign
/// validations are dropped.
pub fn clear(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch("DELETE FROM validations;")
}

/// Marks pending validations past their monotonic [`deadline`] `expired`; returns them. `now`
/// (wall clock) is what `decided_at` records.
pub fn expire(output: &mut Connection, now: i64) -> Result<Vec<Validation>> {
    let mono = crate::time::mono_ms();
    Ok(write_tx(output, |tx| {
        let pending = {
            let mut s = tx.prepare(&format!(
                "SELECT {COLS} FROM validations WHERE status = 'pending' AND expires_at IS NOT NULL"
            ))?;
            let v = s
                .query_map([], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            v
        };
        let mut expired = Vec::new();
        for mut v in pending.iter().cloned() {
            if deadline(&v).is_some_and(|d| d <= mono) {
                tx.execute(
                    "UPDATE validations SET status = 'expired', decided_at = ?2
                     WHERE id = ?1 AND status = 'pending'",
                    params![v.id, now],
                )?;
                v.status = "expired".to_string();
                v.decided_at = Some(now);
                expired.push(v);
            }
        }
        // Only pending validations keep a deadline (the map stays as small as they are few).
        let keep: std::collections::HashSet<&str> = pending
            .iter()
            .filter(|v| v.status == "pending")
            .map(|v| v.id.as_str())
            .collect();
        let gone: Vec<&str> = expired.iter().map(|v| v.id.as_str()).collect();
        deadlines().retain(|id, _| keep.contains(id.as_str()) && !gone.contains(&id.as_str()));
        Ok(expired)
    })?)
}

/// An operator decision as written by the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
    AlwaysAllow,
    AlwaysAsk,
    Never,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
            Decision::AlwaysAllow => "always_allow",
            Decision::AlwaysAsk => "always_ask",
            Decision::Never => "never",
        }
    }
    pub fn parse(s: &str) -> Option<Decision> {
        Some(match s {
            "approve" => Decision::Approve,
            "deny" => Decision::Deny,
            "always_allow" => Decision::AlwaysAllow,
            "always_ask" => Decision::AlwaysAsk,
            "never" => Decision::Never,
            _ => return None,
        })
    }
    /// Whether the job runs.
    pub fn runs(self) -> bool {
        matches!(
            self,
            Decision::Approve | Decision::AlwaysAllow | Decision::AlwaysAsk
        )
    }
}

/// Operator side: records a decision for a pending validation. Refused (Err naming who decided
/// what and when, nothing written) when it already has a decision: the first committed one
/// wins (issue 50).
pub fn decide(
    security: &mut Connection,
    output: &Connection,
    id: &str,
    d: Decision,
    learn: bool,
    reason: Option<&str>,
    by: &str,
) -> Result<Validation> {
    let Some(v) = get(output, id)? else {
        bail!("no validation {id} (see `brainloop validations`)");
    };
    if v.status != "pending" {
        // Said with the decision that stands, when it is a decision's.
        let first = first_decision(security, id)?
            .map(|a| format!(": {}", decided_line(&a)))
            .unwrap_or_default();
        bail!("validation {id} is already {}{first}", v.status);
    }
    ensure_undecided(security, id)?;
    record(security, id, d, learn, reason, by)?;
    Ok(v)
}

/// Err naming the decision validation `id` already has (who decided what, and when), if any:
/// what a second `approve` / `deny` is told before it writes anything (the host rules of an
/// approve come before its decision row).
pub fn ensure_undecided(security: &Connection, id: &str) -> Result<()> {
    match first_decision(security, id)? {
        Some(a) => Err(already_decided(id, &a)),
        None => Ok(()),
    }
}

/// The first decision row written for validation `id` (consumed or not): the one that stands
/// and that the worker acted on, and who decided (a reviewer's `decided_by` starts with
/// `ask::REVIEWER_PREFIX`) — what `validations` and `show` mark.
pub fn first_decision(security: &Connection, id: &str) -> Result<Option<ApprovalRow>> {
    Ok(security
        .query_row(
            "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals WHERE validation_id = ?1 ORDER BY id LIMIT 1",
            [id],
            approval_row,
        )
        .optional()?)
}

/// `DECISION by WHO at WHEN` of a decision row.
fn decided_line(a: &ApprovalRow) -> String {
    format!(
        "{} by {} at {}",
        a.decision.map_or("?", |d| d.as_str()),
        crate::shown::line(&a.decided_by),
        crate::time::local(a.created_at)
    )
}

fn already_decided(id: &str, a: &ApprovalRow) -> anyhow::Error {
    anyhow::anyhow!(
        "validation {id} was already decided: {} — the first decision stands, nothing recorded (`brainloop show {id}`)",
        decided_line(a)
    )
}

/// Writes one decision row for the worker to consume (`decide` checks the validation first).
/// `learn`: `approve --learn` (the worker learns the change set's signatures for the client,
/// `bash::learn`). Refused when the validation already has a decision: the check and the
/// insert are one `BEGIN IMMEDIATE` transaction, so of two decisions at once the first
/// committed wins and the second is told who decided what and when.
pub fn record(
    security: &mut Connection,
    id: &str,
    d: Decision,
    learn: bool,
    reason: Option<&str>,
    by: &str,
) -> Result<()> {
    match record_at(security, id, d, learn, reason, by, crate::time::now_ms())? {
        Some(first) => Err(already_decided(id, &first)),
        None => Ok(()),
    }
}

/// [`record`] with the time the decision was made (a registry decision keeps the operator's);
/// Some(the decision that stands) when there already is one (nothing written).
fn record_at(
    security: &mut Connection,
    id: &str,
    d: Decision,
    learn: bool,
    reason: Option<&str>,
    by: &str,
    at: i64,
) -> Result<Option<ApprovalRow>> {
    let first = write_tx(security, |tx| {
        let first = tx
            .query_row(
                "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals WHERE validation_id = ?1 ORDER BY id LIMIT 1",
                [id],
                approval_row,
            )
            .optional()?;
        if first.is_none() {
            tx.execute(
                "INSERT INTO approvals(validation_id, decision, reason, decided_by, created_at, learn) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, d.as_str(), reason, by, at, learn],
            )?;
        }
        Ok(first)
    })?;
    Ok(first)
}

/// An unconsumed approval row.
#[derive(Debug, Clone)]
pub struct ApprovalRow {
    pub row_id: i64,
    pub validation_id: String,
    pub decision: Option<Decision>,
    pub reason: Option<String>,
    pub decided_by: String,
    pub created_at: i64,
    /// `approve --learn`.
    pub learn: bool,
}

/// One `approvals` row, selected as `id, validation_id, decision, reason, decided_by,
/// created_at, learn`.
fn approval_row(r: &rusqlite::Row) -> rusqlite::Result<ApprovalRow> {
    Ok(ApprovalRow {
        row_id: r.get(0)?,
        validation_id: r.get(1)?,
        decision: Decision::parse(&r.get::<_, String>(2)?),
        reason: r.get(3)?,
        decided_by: r.get(4)?,
        created_at: r.get(5)?,
        learn: r.get(6)?,
    })
}

pub fn unconsumed(security: &Connection) -> Result<Vec<ApprovalRow>> {
    let mut s = security.prepare_cached(
        "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals WHERE consumed_at IS NULL ORDER BY id",
    )?;
    let v = s
        .query_map([], approval_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// The newest decision rows (any validation, consumed or not), newest first: what
/// `brainloop history` lists.
pub fn recent_decisions(security: &Connection, limit: usize) -> Result<Vec<ApprovalRow>> {
    let mut s = security.prepare_cached(
        "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals ORDER BY created_at DESC, id DESC LIMIT ?1",
    )?;
    let rows = s
        .query_map([limit as i64], approval_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The validations that expired most recently (unanswered), newest first.
pub fn recent_expired(output: &Connection, limit: usize) -> Result<Vec<Validation>> {
    let mut s = output.prepare_cached(&format!(
        "SELECT {COLS} FROM validations WHERE status = 'expired' ORDER BY decided_at DESC LIMIT ?1"
    ))?;
    let rows = s
        .query_map([limit as i64], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Every decision row written for validation `id` (consumed or not), oldest first: the first
/// one the worker consumed decided it.
pub fn decisions_of(security: &Connection, id: &str) -> Result<Vec<ApprovalRow>> {
    let mut s = security.prepare_cached(
        "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals WHERE validation_id = ?1 ORDER BY id",
    )?;
    let v = s
        .query_map([id], approval_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// The denial rows (`deny`, `never`) a human wrote (not a reviewer: `decided_by` without
/// `ask::REVIEWER_PREFIX`), oldest first.
pub fn human_denials(security: &Connection) -> Result<Vec<ApprovalRow>> {
    let mut s = security.prepare_cached(
        "SELECT id, validation_id, decision, reason, decided_by, created_at, learn FROM approvals
         WHERE decision IN ('deny', 'never') ORDER BY id",
    )?;
    let v = s
        .query_map([], approval_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v.into_iter()
        .filter(|r| crate::ask::By::of(&r.decided_by) == crate::ask::By::Human)
        .collect())
}

/// The `limit` latest validations of `client`, newest first.
pub fn of_client(output: &Connection, client: &str, limit: usize) -> Result<Vec<Validation>> {
    let mut s = output.prepare(&format!(
        "SELECT {COLS} FROM validations WHERE client_id = ?1 ORDER BY requested_at DESC LIMIT ?2"
    ))?;
    let v = s
        .query_map(params![client, limit as i64], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Every client that has a validation.
pub fn clients(output: &Connection) -> Result<Vec<String>> {
    let mut s = output.prepare("SELECT DISTINCT client_id FROM validations ORDER BY client_id")?;
    let v = s
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Marks an approval row consumed (it is never looked at again, whatever it said).
pub fn consume(security: &mut Connection, row_id: i64, now: i64) -> Result<()> {
    write_tx(security, |tx| {
        tx.execute(
            "UPDATE approvals SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL",
            params![row_id, now],
        )
    })?;
    Ok(())
}

/// The retention pass, inside its transaction: at most `batch` approval rows consumed before
/// `before` are deleted (they are kept as long as executions, for their audit value).
pub fn prune_approvals(
    tx: &rusqlite::Transaction<'_>,
    before: i64,
    batch: usize,
) -> rusqlite::Result<usize> {
    tx.execute(
        "DELETE FROM approvals WHERE id IN
             (SELECT id FROM approvals WHERE consumed_at IS NOT NULL AND consumed_at < ?1 LIMIT ?2)",
        params![before, batch as i64],
    )
}

// ---- The fleet registry (issue 37): the same requests and decisions in PostgreSQL ----

/// The local validations the registry must hear of: every pending one, and those closed since
/// `since` (their status).
pub fn to_publish(output: &Connection, since: i64) -> Result<Vec<Validation>> {
    let mut s = output.prepare_cached(&format!(
        "SELECT {COLS} FROM validations WHERE status = 'pending' OR decided_at >= ?1 ORDER BY requested_at"
    ))?;
    let v = s
        .query_map([since], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Worker side: puts `list` in the registry under this worker's name (its login role): a new
/// validation is inserted with the signatures its change set carries (`sigs`, JSON, what an
/// operator's `approve --learn --scope fleet` would teach) and its `detail` (the payload the
/// worker's hooks get, `hooks::payload`: what `show` and `review` print on any machine) —
/// both fixed once inserted: a worker may update only the status —, a known pending one
/// takes the local status once it is closed.
pub fn publish(
    reg: &mut crate::registry::Client,
    list: &[Validation],
    sigs: &dyn Fn(&Validation) -> Option<String>,
    detail: &dyn Fn(&Validation) -> Option<String>,
) -> Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let mut tx = reg.transaction()?;
    let st = tx.prepare(
        "INSERT INTO validations(id, job_id, client_id, command, command_hash, policy, risk_score,
                                 permission_set, reasons, status, requested_at, decided_at, expires_at, signatures, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
         ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, decided_at = EXCLUDED.decided_at
         WHERE validations.status = 'pending' AND EXCLUDED.status <> 'pending'",
    )?;
    for v in list {
        let s = sigs(v);
        // The detail only with a new pending validation (a worker cannot change it later).
        let d = if v.status == "pending" {
            detail(v)
        } else {
            None
        };
        tx.execute(
            &st,
            &[
                &v.id,
                &v.job_id,
                &v.client_id,
                &v.command,
                &v.command_hash,
                &v.policy,
                &v.risk_score,
                &v.permission_set,
                &v.reasons,
                &v.status,
                &v.requested_at,
                &v.decided_at,
                &v.expires_at,
                &s,
                &d,
            ],
        )
        .with_context(|| format!("publishing validation {} to the registry", v.id))?;
    }
    tx.commit()?;
    Ok(())
}

/// A decision row in the registry.
#[derive(Debug, Clone)]
pub struct FleetDecision {
    /// `decisions.id` in the registry.
    pub id: i64,
    pub row: ApprovalRow,
    /// What `--learn` teaches: `worker` (the worker that asked learns, checking the gate
    /// itself) or `fleet` (the operator wrote the rules in the registry, `ask::learned`).
    pub learn_scope: String,
}

const FLEET_DECISION_COLS: &str =
    "d.id, d.validation_id, d.decision, d.reason, d.decided_by, d.created_at, d.learn, d.learn_scope";

fn fleet_decision(r: &postgres::Row) -> Result<FleetDecision> {
    let id: i64 = r.try_get(0)?;
    Ok(FleetDecision {
        id,
        row: ApprovalRow {
            row_id: id,
            validation_id: r.try_get(1)?,
            decision: Decision::parse(&r.try_get::<_, String>(2)?),
            reason: r.try_get(3)?,
            decided_by: r.try_get(4)?,
            created_at: r.try_get(5)?,
            learn: r.try_get(6)?,
        },
        learn_scope: r.try_get(7)?,
    })
}

/// Worker side: the registry's decisions on this worker's validations it has not taken yet,
/// oldest first (row security shows a worker only its own).
pub fn undelivered(reg: &mut crate::registry::Client) -> Result<Vec<FleetDecision>> {
    reg.query(
        &format!(
            "SELECT {FLEET_DECISION_COLS} FROM decisions d JOIN validations v ON v.id = d.validation_id
             WHERE v.worker = current_user
               AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.decision_id = d.id AND x.worker = current_user)
             ORDER BY d.id"
        ),
        &[],
    )
    .context("reading the registry's decisions")?
    .iter()
    .map(fleet_decision)
    .collect()
}

/// Worker side: takes registry decision `d` — its local decision row first (what
/// `answers::collect` consumes, with the operator's time and name), then its delivery in the
/// registry. A crash between the two writes the local row twice: the second is ignored as a
/// replay (the validation is no longer pending). A fleet-scoped `--learn` is not learned here
/// (the local row says no `learn`): the rules the operator wrote reach this worker as every
/// other, through `ask::learned`, and are revoked with them. `refused`: the worker does not act
/// on it (a reviewer's approve its own checks refuse): only the delivery is recorded, with why.
pub fn take(
    security: &mut Connection,
    reg: &mut crate::registry::Client,
    d: &FleetDecision,
    refused: Option<&str>,
) -> Result<()> {
    let r = &d.row;
    let decision = r.decision.unwrap_or(Decision::Deny);
    if let Some(why) = refused {
        // Not acted on: the human is asked (the validation stays pending here, and the
        // operator may decide it: `fleet_decide` counts only decisions not refused).
        reg.execute(
            "INSERT INTO deliveries(decision_id, delivered_at, refused) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&d.id, &crate::time::now_ms(), &why],
        )
        .context("recording the refusal in the registry")?;
        return Ok(());
    }
    if let Some(first) = record_at(
        security,
        &r.validation_id,
        decision,
        r.learn && d.learn_scope == "worker",
        r.reason.as_deref(),
        &r.decided_by,
        r.created_at,
    )? {
        // Already decided here (the first decision stands): delivered, not acted on again.
        tracing::warn!(
            validation_id = %r.validation_id,
            decision_id = d.id,
            first = %crate::shown::line(&first.decided_by),
            "a second decision from the registry for a validation already decided on this worker; the first stands"
        );
    }
    reg.execute(
        "INSERT INTO deliveries(decision_id, delivered_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&d.id, &crate::time::now_ms()],
    )
    .context("recording the delivery in the registry")?;
    Ok(())
}

/// Whether validation `v` has a decision its worker did not refuse (the reviewer's approve a
/// worker's own checks refused leaves it to the human).
const DECIDED: &str = "EXISTS (SELECT 1 FROM decisions d WHERE d.validation_id = v.id
    AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.decision_id = d.id AND x.refused IS NOT NULL))";

/// Whether validation `v` has a human's decision (not a reviewer's) its worker did not refuse.
const HUMAN_DECIDED: &str = "EXISTS (SELECT 1 FROM decisions d WHERE d.validation_id = v.id
    AND d.decided_by NOT LIKE 'reviewer:%'
    AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.decision_id = d.id AND x.refused IS NOT NULL))";

/// Whether validation `v` has a reviewer's decision its worker did not refuse.
const REVIEWER_DECIDED: &str = "EXISTS (SELECT 1 FROM decisions d WHERE d.validation_id = v.id
    AND d.decided_by LIKE 'reviewer:%'
    AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.decision_id = d.id AND x.refused IS NOT NULL))";

const FLEET_COLS: &str = "v.worker, v.id, v.job_id, v.client_id, v.command, v.command_hash, v.policy, v.risk_score, v.permission_set, v.reasons, v.status, v.requested_at, v.decided_at, v.expires_at, v.signatures";

/// A validation in the registry and the worker that asked.
#[derive(Debug, Clone, Serialize)]
pub struct FleetValidation {
    pub worker: String,
    #[serde(flatten)]
    pub validation: Validation,
    /// The signatures the worker published for its change set: what `approve --learn --scope
    /// fleet` would teach every worker.
    pub signatures: Vec<String>,
}

fn fleet_row(r: &postgres::Row) -> Result<FleetValidation> {
    Ok(FleetValidation {
        worker: r.try_get(0)?,
        validation: Validation {
            id: r.try_get(1)?,
            job_id: r.try_get(2)?,
            client_id: r.try_get(3)?,
            command: r.try_get(4)?,
            command_hash: r.try_get(5)?,
            policy: r.try_get(6)?,
            risk_score: r.try_get(7)?,
            permission_set: r.try_get(8)?,
            reasons: r.try_get(9)?,
            status: r.try_get(10)?,
            requested_at: r.try_get(11)?,
            decided_at: r.try_get(12)?,
            expires_at: r.try_get(13)?,
        },
        signatures: r
            .try_get::<_, Option<String>>(14)?
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default(),
    })
}

/// Operator side: the registry's validations (every worker's), pending only or all, oldest
/// first. A pending one already decided (the worker has not taken the decision yet) shows
/// `decided`.
pub fn fleet_list(
    reg: &mut crate::registry::Client,
    only_pending: bool,
) -> Result<Vec<FleetValidation>> {
    let rows = reg.query(
        &format!(
            "SELECT {FLEET_COLS}, {DECIDED}
             FROM validations v WHERE (NOT $1 OR v.status = 'pending') ORDER BY v.requested_at"
        ),
        &[&only_pending],
    )?;
    rows.iter()
        .map(|r| {
            let mut f = fleet_row(r)?;
            if f.validation.status == "pending" && r.try_get::<_, bool>(15)? {
                f.validation.status = "decided".into();
            }
            Ok(f)
        })
        .collect()
}

/// Operator side: one validation of the registry.
pub fn fleet_get(reg: &mut crate::registry::Client, id: &str) -> Result<Option<FleetValidation>> {
    reg.query_opt(
        &format!("SELECT {FLEET_COLS} FROM validations v WHERE v.id = $1"),
        &[&id],
    )?
    .as_ref()
    .map(fleet_row)
    .transpose()
}

/// How far an operator's `approve --learn` through the registry teaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LearnScope {
    /// The worker that asked (it checks the gate and learns for the job's client).
    Worker,
    /// Every worker of a scope (the fleet, a project, one worker): rules in the registry
    /// (`ask::learned`), for the job's client, until revoked or expired.
    Shared {
        scope: super::learned::Scope,
        expires_at: Option<i64>,
    },
}

/// Operator side: decides validation `id` in the registry (the operator's role; a worker's is
/// refused by PostgreSQL). Refused unless it is pending and not decided yet. The insert's
/// trigger notifies the worker that asked. `learn` with a fleet scope also writes the fleet's
/// learned rules for the signatures the worker published with the validation, in the same
/// transaction (refused when it published none). Returns the validation and the signatures
/// learned fleet-wide.
pub fn fleet_decide(
    reg: &mut crate::registry::Client,
    id: &str,
    d: Decision,
    learn: Option<LearnScope>,
    reason: Option<&str>,
    by: &str,
) -> Result<(FleetValidation, Vec<String>)> {
    let (f, taught, _) = fleet_decide_in(reg, id, d, learn, None, reason, by)?;
    Ok((f, taught))
}

/// [`fleet_decide`], and for `approve --always` / `deny --always` (`always_allow`,
/// `always_ask`, `never`) the command's override in the registry, written in the same
/// transaction (`ask::learned::learn_command`): for `scope`, by default the worker that asked
/// (`worker:ROLE`). Returns the override rule too.
pub fn fleet_decide_in(
    reg: &mut crate::registry::Client,
    id: &str,
    d: Decision,
    learn: Option<LearnScope>,
    override_scope: Option<&super::learned::Scope>,
    reason: Option<&str>,
    by: &str,
) -> Result<(
    FleetValidation,
    Vec<String>,
    Option<super::learned::LearnedRule>,
)> {
    let mut tx = reg.transaction()?;
    let Some(row) = tx.query_opt(
        &format!(
            "SELECT {FLEET_COLS}, {HUMAN_DECIDED}, {REVIEWER_DECIDED}
             FROM validations v WHERE v.id = $1"
        ),
        &[&id],
    )?
    else {
        bail!("no validation {id} in the registry (see `brainloop validations`)");
    };
    let f = fleet_row(&row)?;
    // A human's decision wins over a reviewer's (issue 49): a reviewer's decision does not
    // stop this one; until the worker acted on it, the worker takes this one instead. Once it
    // did (the validation is closed), a denial is still recorded: the caller names the undo.
    let by_reviewer = row.try_get::<_, bool>(16)?;
    let late_denial = f.validation.status == "approved" && by_reviewer && !d.runs();
    if f.validation.status != "pending" && !late_denial {
        bail!("validation {id} is already {}", f.validation.status);
    }
    if row.try_get::<_, bool>(15)? {
        let first = fleet_first_decision(&mut tx, id)?;
        bail!(
            "validation {id} is already decided{} (worker {} has not taken the decision yet) — the first decision stands, nothing recorded",
            first,
            crate::shown::line(&f.worker)
        );
    }
    let now = crate::time::now_ms();
    let scope = match &learn {
        Some(LearnScope::Shared { scope, .. }) => scope.text(),
        _ => "worker".to_string(),
    };
    let inserted = tx.query_one(
        "INSERT INTO decisions(validation_id, decision, reason, decided_by, created_at, learn, learn_scope)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        &[&id, &d.as_str(), &reason, &by, &now, &learn.is_some(), &scope],
    );
    let decision_id: i64 = match inserted {
        Ok(r) => r.get(0),
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => {
            // Another operator's decision committed first (the unique key of migration 8).
            drop(tx);
            let first = fleet_first_decision(reg, id)?;
            bail!("validation {id} was already decided{first} — the first decision stands, nothing recorded");
        }
        Err(e) => {
            return Err(anyhow::Error::from(e)
                .context("writing the decision in the registry (is this the operator's role?)"))
        }
    };
    let mut taught = Vec::new();
    if let Some(LearnScope::Shared { scope, expires_at }) = &learn {
        taught = f.signatures.clone();
        if taught.is_empty() {
            bail!("validation {id} has no change set signatures to learn (asked up front, or not a command): approve it without --learn, nothing decided");
        }
        super::learned::learn(
            &mut tx,
            id,
            decision_id,
            &f.validation.client_id,
            &taught,
            scope,
            by,
            now,
            *expires_at,
        )?;
    }
    let value = match d {
        Decision::AlwaysAllow => Some("always_allow"),
        Decision::AlwaysAsk => Some("always_ask"),
        Decision::Never => Some("never"),
        Decision::Approve | Decision::Deny => None,
    };
    let mut rule = None;
    if let (Some(value), Some(command)) = (value, f.validation.command.as_deref()) {
        let default = super::learned::Scope::Worker(f.worker.clone());
        rule = Some(super::learned::learn_command(
            &mut tx,
            id,
            decision_id,
            command,
            value,
            override_scope.unwrap_or(&default),
            by,
            now,
        )?);
    } else if override_scope.is_some() {
        bail!("validation {id} is not a command's (or not --always): --scope has no override to write, nothing decided");
    }
    tx.commit()?;
    Ok((f, taught, rule))
}

/// `: DECISION by WHO at WHEN` of the first decision of validation `id` that its worker did not
/// refuse (the one that stands), or "" when none can be read.
fn fleet_first_decision(c: &mut impl postgres::GenericClient, id: &str) -> Result<String> {
    let row = c.query_opt(
        "SELECT d.decision, d.decided_by, d.created_at FROM decisions d WHERE d.validation_id = $1
           AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.decision_id = d.id AND x.refused IS NOT NULL)
         ORDER BY d.id LIMIT 1",
        &[&id],
    )?;
    Ok(match row {
        Some(r) => format!(
            ": {} by {} at {}",
            crate::shown::line(&r.try_get::<_, String>(0)?),
            crate::shown::line(&r.try_get::<_, String>(1)?),
            crate::time::local(r.try_get(2)?)
        ),
        None => String::new(),
    })
}

/// A fleet reviewer's decision (`brainloop reviewer fleet`, the reviewer's role): approve or
/// deny, never learning. PostgreSQL refuses what a reviewer may not decide
/// (`brainloop_reviewer_may`: not the first decision, an approve of anything but a local change
/// set shown whole, of a command or signature a human denied for that client); Err then.
pub fn fleet_review(
    reg: &mut crate::registry::Client,
    id: &str,
    d: Decision,
    reason: Option<&str>,
    by: &str,
) -> Result<()> {
    reg.execute(
        "INSERT INTO decisions(validation_id, decision, reason, decided_by, created_at, learn, learn_scope)
         VALUES ($1, $2, $3, $4, $5, false, 'worker')",
        &[&id, &d.as_str(), &reason, &by, &crate::time::now_ms()],
    )
    .with_context(|| format!("the registry refused the reviewer's {} of validation {id}", d.as_str()))?;
    Ok(())
}

/// The last decision written in the registry for validation `id`.
pub fn fleet_last_decision(
    reg: &mut crate::registry::Client,
    id: &str,
) -> Result<Option<FleetDecision>> {
    reg.query_opt(
        &format!(
            "SELECT {FLEET_DECISION_COLS} FROM decisions d WHERE d.validation_id = $1 ORDER BY d.id DESC LIMIT 1"
        ),
        &[&id],
    )?
    .as_ref()
    .map(fleet_decision)
    .transpose()
}

/// Operator side: what the worker published with validation `id` for people to read (the
/// payload its hooks get, capped as they are; None: published by an older worker, or none).
pub fn fleet_detail(
    reg: &mut crate::registry::Client,
    id: &str,
) -> Result<Option<serde_json::Value>> {
    let d: Option<Option<String>> = reg
        .query_opt("SELECT detail FROM validations WHERE id = $1", &[&id])?
        .map(|r| r.try_get(0))
        .transpose()?;
    Ok(d.flatten().and_then(|t| serde_json::from_str(&t).ok()))
}

/// Every decision row of validation `id` in the registry, oldest first, with the worker's
/// refusal of it if any.
pub fn fleet_decisions_of(
    reg: &mut crate::registry::Client,
    id: &str,
) -> Result<Vec<(FleetDecision, Option<String>)>> {
    reg.query(
        &format!(
            "SELECT {FLEET_DECISION_COLS},
                    (SELECT x.refused FROM deliveries x WHERE x.decision_id = d.id AND x.refused IS NOT NULL LIMIT 1)
             FROM decisions d WHERE d.validation_id = $1 ORDER BY d.id"
        ),
        &[&id],
    )?
    .iter()
    .map(|r| Ok((fleet_decision(r)?, r.try_get(8)?)))
    .collect()
}

/// A change set a worker applied (and maybe undid), as published in the registry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetApplied {
    pub worker: String,
    pub job_id: i64,
    pub validation_id: Option<String>,
    pub command: String,
    pub summary: String,
    pub policy_used: String,
    pub decided_by: Option<String>,
    pub applied_at: i64,
    pub undone_at: Option<i64>,
    /// As applied, capped at the payload's cap; None once dropped by the worker's retention.
    pub diff: Option<String>,
}

const APPLIED_COLS: &str = "worker, job_id, validation_id, command, summary, policy_used, decided_by, applied_at, undone_at, diff";

fn applied_row(r: &postgres::Row) -> Result<FleetApplied> {
    Ok(FleetApplied {
        worker: r.try_get(0)?,
        job_id: r.try_get(1)?,
        validation_id: r.try_get(2)?,
        command: r.try_get(3)?,
        summary: r.try_get(4)?,
        policy_used: r.try_get(5)?,
        decided_by: r.try_get(6)?,
        applied_at: r.try_get(7)?,
        undone_at: r.try_get(8)?,
        diff: r.try_get(9)?,
    })
}

/// Worker side: publishes the change sets this worker applied or undid (its own rows; the
/// `worker` field is ignored: the registry names the login role).
pub fn publish_applied(reg: &mut crate::registry::Client, list: &[FleetApplied]) -> Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let mut tx = reg.transaction()?;
    let st = tx.prepare(
        "INSERT INTO applied_changes(job_id, validation_id, command, summary, policy_used, decided_by, applied_at, undone_at, diff)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (worker, job_id) DO UPDATE SET validation_id = EXCLUDED.validation_id,
           command = EXCLUDED.command, summary = EXCLUDED.summary, policy_used = EXCLUDED.policy_used,
           decided_by = EXCLUDED.decided_by, applied_at = EXCLUDED.applied_at,
           undone_at = EXCLUDED.undone_at, diff = EXCLUDED.diff",
    )?;
    for a in list {
        tx.execute(
            &st,
            &[
                &a.job_id,
                &a.validation_id,
                &a.command,
                &a.summary,
                &a.policy_used,
                &a.decided_by,
                &a.applied_at,
                &a.undone_at,
                &a.diff,
            ],
        )
        .with_context(|| format!("publishing job {}'s change set to the registry", a.job_id))?;
    }
    tx.commit()?;
    Ok(())
}

/// Operator side: the change sets applied or undone most recently on any worker, newest first.
pub fn fleet_applied(reg: &mut crate::registry::Client, limit: usize) -> Result<Vec<FleetApplied>> {
    reg.query(
        &format!(
            "SELECT {APPLIED_COLS} FROM applied_changes
             ORDER BY greatest(applied_at, coalesce(undone_at, 0)) DESC, job_id DESC LIMIT $1"
        ),
        &[&(limit as i64)],
    )?
    .iter()
    .map(applied_row)
    .collect()
}

/// Operator side: job `job_id`'s applied change set on each worker that has one (a job id is
/// each worker's own: several may), or only on `worker`.
pub fn fleet_applied_of(
    reg: &mut crate::registry::Client,
    job_id: i64,
    worker: Option<&str>,
) -> Result<Vec<FleetApplied>> {
    reg.query(
        &format!(
            "SELECT {APPLIED_COLS} FROM applied_changes
             WHERE job_id = $1 AND ($2::text IS NULL OR worker = $2) ORDER BY worker"
        ),
        &[&job_id, &worker],
    )?
    .iter()
    .map(applied_row)
    .collect()
}

/// Operator side: the validations of `job_id` in the registry (every worker's or `worker`'s),
/// newest first.
pub fn fleet_of_job(
    reg: &mut crate::registry::Client,
    job_id: i64,
    worker: Option<&str>,
) -> Result<Vec<FleetValidation>> {
    reg.query(
        &format!(
            "SELECT {FLEET_COLS} FROM validations v
             WHERE v.job_id = $1 AND ($2::text IS NULL OR v.worker = $2) ORDER BY v.requested_at DESC"
        ),
        &[&job_id, &worker],
    )?
    .iter()
    .map(fleet_row)
    .collect()
}

/// Operator side: the decisions written most recently, newest first, each with its validation.
pub fn fleet_recent_decisions(
    reg: &mut crate::registry::Client,
    limit: usize,
) -> Result<Vec<(FleetDecision, FleetValidation)>> {
    reg.query(
        &format!(
            "SELECT {FLEET_DECISION_COLS}, {FLEET_COLS} FROM decisions d JOIN validations v ON v.id = d.validation_id
             ORDER BY d.created_at DESC, d.id DESC LIMIT $1"
        ),
        &[&(limit as i64)],
    )?
    .iter()
    .map(|r| {
        let d = fleet_decision(r)?;
        // The validation's columns follow the decision's eight.
        let f = FleetValidation {
            worker: r.try_get(8)?,
            validation: Validation {
                id: r.try_get(9)?,
                job_id: r.try_get(10)?,
                client_id: r.try_get(11)?,
                command: r.try_get(12)?,
                command_hash: r.try_get(13)?,
                policy: r.try_get(14)?,
                risk_score: r.try_get(15)?,
                permission_set: r.try_get(16)?,
                reasons: r.try_get(17)?,
                status: r.try_get(18)?,
                requested_at: r.try_get(19)?,
                decided_at: r.try_get(20)?,
                expires_at: r.try_get(21)?,
            },
            signatures: Vec::new(),
        };
        Ok((d, f))
    })
    .collect()
}

/// Operator side: the validations that expired most recently (unanswered), newest first.
pub fn fleet_recent_expired(
    reg: &mut crate::registry::Client,
    limit: usize,
) -> Result<Vec<FleetValidation>> {
    reg.query(
        &format!(
            "SELECT {FLEET_COLS} FROM validations v WHERE v.status = 'expired'
             ORDER BY v.decided_at DESC LIMIT $1"
        ),
        &[&(limit as i64)],
    )?
    .iter()
    .map(fleet_row)
    .collect()
}

/// An operator's request that a worker undo one of its applied change sets, and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UndoRequest {
    pub id: i64,
    pub worker: String,
    pub job_id: i64,
    pub requested_by: String,
    pub requested_at: i64,
    /// `pending`, `done` or `failed`.
    pub status: String,
    /// The paths restored (done) or why not (failed).
    pub outcome: Option<String>,
    pub done_at: Option<i64>,
}

const UNDO_COLS: &str = "id, worker, job_id, requested_by, requested_at, status, outcome, done_at";

fn undo_row(r: &postgres::Row) -> Result<UndoRequest> {
    Ok(UndoRequest {
        id: r.try_get(0)?,
        worker: r.try_get(1)?,
        job_id: r.try_get(2)?,
        requested_by: r.try_get(3)?,
        requested_at: r.try_get(4)?,
        status: r.try_get(5)?,
        outcome: r.try_get(6)?,
        done_at: r.try_get(7)?,
    })
}

/// Operator side: asks `worker` to undo job `job_id`'s applied change set (the operator's role
/// only: a worker's or a reviewer's is refused by PostgreSQL). The insert's trigger wakes the
/// worker. Returns the request's id.
pub fn request_undo(
    reg: &mut crate::registry::Client,
    worker: &str,
    job_id: i64,
    by: &str,
) -> Result<i64> {
    Ok(reg
        .query_one(
            "INSERT INTO undo_requests(worker, job_id, requested_by, requested_at)
             VALUES ($1, $2, $3, $4) RETURNING id",
            &[&worker, &job_id, &by, &crate::time::now_ms()],
        )
        .context("writing the undo request in the registry (is this the operator's role?)")?
        .get(0))
}

/// One undo request.
pub fn undo_request(reg: &mut crate::registry::Client, id: i64) -> Result<Option<UndoRequest>> {
    reg.query_opt(
        &format!("SELECT {UNDO_COLS} FROM undo_requests WHERE id = $1"),
        &[&id],
    )?
    .as_ref()
    .map(undo_row)
    .transpose()
}

/// The undo requests of job `job_id` (every worker's, or `worker`'s), newest first.
pub fn undo_requests_of(
    reg: &mut crate::registry::Client,
    job_id: i64,
    worker: Option<&str>,
) -> Result<Vec<UndoRequest>> {
    reg.query(
        &format!(
            "SELECT {UNDO_COLS} FROM undo_requests
             WHERE job_id = $1 AND ($2::text IS NULL OR worker = $2) ORDER BY id DESC"
        ),
        &[&job_id, &worker],
    )?
    .iter()
    .map(undo_row)
    .collect()
}

/// The undo requests made most recently (every worker's), newest first.
pub fn recent_undo_requests(
    reg: &mut crate::registry::Client,
    limit: usize,
) -> Result<Vec<UndoRequest>> {
    reg.query(
        &format!(
            "SELECT {UNDO_COLS} FROM undo_requests ORDER BY requested_at DESC, id DESC LIMIT $1"
        ),
        &[&(limit as i64)],
    )?
    .iter()
    .map(undo_row)
    .collect()
}

/// Worker side: the undo requests addressed to this worker still pending, oldest first (row
/// security shows a worker only its own).
pub fn pending_undos(reg: &mut crate::registry::Client) -> Result<Vec<UndoRequest>> {
    reg.query(
        &format!(
            "SELECT {UNDO_COLS} FROM undo_requests WHERE worker = current_user AND status = 'pending' ORDER BY id"
        ),
        &[],
    )
    .context("reading the registry's undo requests")?
    .iter()
    .map(undo_row)
    .collect()
}

/// Worker side: records the outcome of undo request `id` (once: only a pending one changes).
pub fn answer_undo(
    reg: &mut crate::registry::Client,
    id: i64,
    done: bool,
    outcome: &str,
) -> Result<()> {
    reg.execute(
        "UPDATE undo_requests SET status = $2, outcome = $3, done_at = $4 WHERE id = $1 AND status = 'pending'",
        &[&id, &if done { "done" } else { "failed" }, &outcome, &crate::time::now_ms()],
    )
    .context("recording the undo's outcome in the registry")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_128_bit_hex() {
        let a = new_id().unwrap();
        let b = new_id().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    /// The last request and run of a command by another job, read along their indexes (one
    /// row each, never a scan that grows with every validation and run): same answers as the
    /// plain `max(...)` over every row.
    #[test]
    fn last_requested_and_executed_read_one_row_and_agree_with_max() {
        use crate::db::{migrate, open, DbKind};
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        migrate::migrate(data, DbKind::Output).unwrap();
        migrate::migrate(data, DbKind::Security).unwrap();
        let out = open(data, DbKind::Output).unwrap();
        let sec = open(data, DbKind::Security).unwrap();
        for i in 0..200i64 {
            let (cmd, hash) = (format!("cmd{}", i % 3), format!("h{}", i % 5));
            out.execute(
                "INSERT INTO validations(id, job_id, client_id, command, command_hash, status, requested_at)
                 VALUES (?1, ?2, ?6, ?3, ?4, 'denied', ?5)",
                params![format!("v{i}"), i % 7, cmd, hash, (i * 37) % 1000, if i % 4 == 0 { "d" } else { "c" }],
            )
            .unwrap();
            sec.execute(
                "INSERT INTO executions(command_hash, job_id, executed_at, client_id) VALUES (?1, ?2, ?3, ?4)",
                params![
                    hash,
                    if i % 11 == 0 { None } else { Some(i % 7) },
                    (i * 53) % 1000,
                    if i % 4 == 0 { "d" } else { "c" }
                ],
            )
            .unwrap();
        }
        for (hash, cmd) in [
            ("h0", "cmd0"),
            ("h1", "cmd2"),
            ("none", "cmd1"),
            ("none", "none"),
        ] {
            for (job, client) in (0..8).flat_map(|j| [(j, "c"), (j, "d"), (j, "e")]) {
                let want: Option<i64> = out
                    .query_row(
                        "SELECT max(requested_at) FROM validations
                         WHERE (command_hash = ?1 OR command = ?3) AND job_id <> ?2 AND client_id = ?4",
                        params![hash, job, cmd, client],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(
                    last_requested(&out, hash, cmd, job, client).unwrap(),
                    want,
                    "{hash} {cmd} {job} {client}"
                );
                let want: Option<i64> = sec
                    .query_row(
                        "SELECT max(executed_at) FROM executions
                         WHERE command_hash = ?1 AND (job_id IS NULL OR job_id <> ?2) AND client_id = ?3",
                        params![hash, job, client],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(
                    last_executed(&sec, hash, job, client).unwrap(),
                    want,
                    "{hash} {job} {client}"
                );
            }
        }
        let plan = |c: &Connection, sql: &str| -> String {
            let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = st
                .query_map(params!["h0", 1, "cmd0"], |r| r.get::<_, String>(3))
                .unwrap();
            rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("\n")
        };
        let requested = plan(
            &out,
            "SELECT (SELECT requested_at FROM validations WHERE command_hash = ?1 AND job_id <> ?2
               ORDER BY requested_at DESC LIMIT 1), ?3",
        );
        assert!(
            requested.contains("USING INDEX validations_hash"),
            "{requested}"
        );
        assert!(!requested.contains("TEMP B-TREE"), "{requested}");
    }
}
