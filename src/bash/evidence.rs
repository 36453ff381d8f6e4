//! The evidence ledger (issue 18): the one place that decides what learning may count and what
//! it has taught. Learning — a command's promotion, the duplicate-check evolution of seed 001 —
//! reads only rows written here; operation signatures count decisions the same way
//! (`signatures::count_decision`, per client).
//!
//! **Evidence is a human decision.** A row is written only for
//! - `human_approved`: a run (or an applied change set) a human approved for this very job —
//!   the consumed approval matched the job's snapshot;
//! - `human_denied`: a human denied the job's request (it resets the count and withdraws a
//!   promotion);
//! - `operator_override`: a run the operator's `always_allow` override allowed.
//!
//! Never evidence: an overlay run nobody answered, a run that failed to start or was refused, a
//! change set applied because its signatures were learned, a promoted run, `force_execute`, and a
//! second run of the same command inside the same job (`UNIQUE(job_id, command_hash, source)`).
//!
//! **Evidence is per client**: one client's approvals never promote a command for another (the
//! operator shares with `override` / `approve --always`, which are global).
//!
//! **A promotion never widens confinement**: it is "this command, for this client, under the
//! confinement the human approved" — `mode` overlay (keeps running on the overlay, its change set
//! applied automatically only within `bash::effects`' bounds, else asked) or direct (runs in the
//! permission set the human saw, and only while the classifier still gives that set). Only
//! evidence of one (mode, set) counts toward it, so network needs approved runs that had it.

use super::policy::{self, Change, Facts, Override, Policy, Stats};
use super::registry::{self, history};
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    HumanApproved,
    HumanDenied,
    OperatorOverride,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::HumanApproved => "human_approved",
            Source::HumanDenied => "human_denied",
            Source::OperatorOverride => "operator_override",
        }
    }
}

/// The confinement a human saw: a change set on the overlay, or the command itself up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Overlay,
    Direct,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Overlay => "overlay",
            Mode::Direct => "direct",
        }
    }
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "overlay" => Some(Mode::Overlay),
            "direct" => Some(Mode::Direct),
            _ => None,
        }
    }
}

/// One piece of evidence about a command.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub client_id: String,
    pub command_hash: String,
    pub job_id: i64,
    pub source: Source,
    pub decided_by: Option<String>,
    pub mode: Mode,
    pub permission_set: String,
    pub success: bool,
}

/// What a client may run of a command without a human, learned from evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Promotion {
    pub client_id: String,
    pub command_hash: String,
    pub mode: Mode,
    pub permission_set: String,
    pub reason: String,
    pub promoted_at: i64,
}

/// The client's active promotion of a command, if its set is still the one approved.
pub fn promotion(
    conn: &Connection,
    client: &str,
    hash: &str,
    current_set: &str,
) -> Result<Option<Promotion>> {
    let p = conn
        .prepare_cached(
            "SELECT mode, permission_set, reason, promoted_at FROM promotions
             WHERE client_id = ?1 AND command_hash = ?2 AND withdrawn_at IS NULL",
        )?
        .query_row(params![client, hash], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .optional()?;
    Ok(p.and_then(|(mode, set, reason, at)| {
        // A classifier that now sees a different set (e.g. network) voids the promotion.
        (set == current_set).then_some(())?;
        Some(Promotion {
            client_id: client.to_string(),
            command_hash: hash.to_string(),
            mode: Mode::parse(&mode)?,
            permission_set: set,
            reason,
            promoted_at: at,
        })
    }))
}

/// Every active promotion (for `brainloop commands`).
pub fn promotions(conn: &Connection) -> Result<Vec<Promotion>> {
    let mut s = conn.prepare(
        "SELECT client_id, command_hash, mode, permission_set, reason, promoted_at FROM promotions
         WHERE withdrawn_at IS NULL ORDER BY promoted_at",
    )?;
    let v = s
        .query_map([], |r| {
            Ok(Promotion {
                client_id: r.get(0)?,
                command_hash: r.get(1)?,
                mode: Mode::parse(&r.get::<_, String>(2)?).unwrap_or(Mode::Direct),
                permission_set: r.get(3)?,
                reason: r.get(4)?,
                promoted_at: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// Records a piece of evidence (once per job, command and source); a denial withdraws the
/// client's promotion. Returns whether it was new.
pub fn record(tx: &Transaction<'_>, e: &Evidence, now: i64) -> rusqlite::Result<bool> {
    let n = tx.execute(
        "INSERT OR IGNORE INTO evidence(client_id, command_hash, job_id, source, decided_by, mode,
             permission_set, success, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            e.client_id,
            e.command_hash,
            e.job_id,
            e.source.as_str(),
            e.decided_by,
            e.mode.as_str(),
            e.permission_set,
            e.success,
            now
        ],
    )?;
    if n > 0 && e.source == Source::HumanDenied {
        withdraw(
            tx,
            &e.client_id,
            &e.command_hash,
            &format!("denied by a human (job {})", e.job_id),
            now,
        )?;
    }
    Ok(n > 0)
}

/// Records evidence and applies learning in one transaction (an approved change set applied,
/// a denial): the path that has no run row of its own.
pub fn record_and_learn(
    conn: &mut Connection,
    e: &Evidence,
    facts: Option<&Facts>,
    now: i64,
) -> Result<Vec<Change>> {
    Ok(crate::db::write_tx(conn, |tx| {
        let new = record(tx, e, now)?;
        match facts {
            Some(f) if new => learn(tx, &e.client_id, &e.command_hash, f, Some(e), now),
            _ => Ok(Vec::new()),
        }
    })?)
}

fn withdraw(
    tx: &Transaction<'_>,
    client: &str,
    hash: &str,
    why: &str,
    now: i64,
) -> rusqlite::Result<()> {
    let n = tx.execute(
        "UPDATE promotions SET withdrawn_at = ?3 WHERE client_id = ?1 AND command_hash = ?2
             AND withdrawn_at IS NULL",
        params![client, hash, now],
    )?;
    if n > 0 {
        history(
            tx,
            hash,
            Some("auto_approve"),
            "ask",
            &format!("promotion for client {client:?} withdrawn: {why}"),
            now,
        )?;
    }
    Ok(())
}

/// The statistics learning reads for (client, command): evidence of one (mode, set) since the
/// last denial or withdrawal; recent successes of all the client's runs (demotion only narrows).
/// The last runs of (command, client), newest first: read for every recorded run, answered by
/// the index `executions_client` (command_security step 11) with the window's rows only.
pub(super) const RECENT_RUNS: &str =
    "SELECT exit_code FROM executions WHERE command_hash = ?1 AND client_id = ?2
     ORDER BY id DESC LIMIT ?3";

fn stats(
    tx: &Transaction<'_>,
    client: &str,
    hash: &str,
    of: Option<(Mode, &str)>,
) -> rusqlite::Result<(Stats, bool)> {
    // Cached statements: this runs for every recorded run (issue 39).
    let (dup_enabled, dup_ms): (bool, i64) = tx
        .prepare_cached(
            "SELECT duplicate_check_enabled, duplicate_threshold_ms FROM commands_registry WHERE command_hash = ?1",
        )?
        .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let since: i64 = tx.prepare_cached(
        "SELECT max(coalesce((SELECT max(id) FROM evidence WHERE client_id = ?1 AND command_hash = ?2
                                 AND source = 'human_denied'), 0),
                    coalesce((SELECT max(e.id) FROM evidence e JOIN promotions p
                                 ON p.client_id = e.client_id AND p.command_hash = e.command_hash
                              WHERE e.client_id = ?1 AND e.command_hash = ?2
                                 AND p.withdrawn_at IS NOT NULL AND e.created_at <= p.withdrawn_at), 0))",
    )?
    .query_row(params![client, hash], |r| r.get(0))?;
    let (mode, set) = of.map(|(m, s)| (m.as_str(), s)).unwrap_or(("", ""));
    let mut s = tx.prepare_cached(
        "SELECT success, created_at FROM evidence WHERE client_id = ?1 AND command_hash = ?2
             AND id > ?3 AND source IN ('human_approved','operator_override')
             AND (?4 = '' OR (mode = ?4 AND permission_set = ?5)) ORDER BY id",
    )?;
    let rows: Vec<(bool, i64)> = s
        .query_map(params![client, hash, since, mode, set], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut recent: Vec<bool> = {
        let mut s = tx.prepare_cached(RECENT_RUNS)?;
        let v = s
            .query_map(params![hash, client, policy::DEMOTION_WINDOW as i64], |r| {
                r.get::<_, Option<i64>>(0)
            })?
            .map(|x| x.map(|c| c == Some(0)))
            .collect::<rusqlite::Result<Vec<bool>>>()?;
        v
    };
    recent.reverse();
    let ts: Vec<i64> = rows.iter().rev().take(100).rev().map(|r| r.1).collect();
    let promoted: bool = tx
        .prepare_cached(
            "SELECT 1 FROM promotions WHERE client_id = ?1 AND command_hash = ?2 AND withdrawn_at IS NULL",
        )?
        .query_row(params![client, hash], |_| Ok(()))
        .optional()?
        .is_some();
    Ok((
        Stats {
            execution_count: rows.len() as i64,
            success_count: rows.iter().filter(|r| r.0).count() as i64,
            timestamps: ts,
            recent_success: recent,
            duplicate_check_enabled: dup_enabled,
            duplicate_threshold_ms: dup_ms,
        },
        promoted,
    ))
}

/// Applies seed 001's evolution rules to (client, command) from the ledger. A promotion can only
/// follow new evidence (`new`), in the mode and set of that evidence; a demotion follows any run.
pub fn learn(
    tx: &Transaction<'_>,
    client: &str,
    hash: &str,
    f: &Facts,
    new: Option<&Evidence>,
    now: i64,
) -> rusqlite::Result<Vec<Change>> {
    let (policy_now, ov): (String, Option<String>) = tx
        .prepare_cached(
            "SELECT current_policy, user_override FROM commands_registry WHERE command_hash = ?1",
        )?
        .query_row([hash], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let ov = ov.as_deref().and_then(Override::parse);
    let of = new.map(|e| (e.mode, e.permission_set.as_str()));
    let (st, promoted) = stats(tx, client, hash, of)?;
    let policy = if promoted {
        Policy::AutoApprove
    } else {
        Policy::parse(&policy_now)
    };
    let mut out = Vec::new();
    for c in policy::evolve(f, policy, ov, promoted, &st) {
        match &c {
            Change::Policy {
                to: Policy::AutoApprove,
                reason,
            } => {
                let Some(e) = new else { continue };
                if policy != Policy::Ask {
                    continue; // pure/read-only commands start auto-approved: nothing to learn
                }
                tx.execute(
                    "INSERT INTO promotions(client_id, command_hash, mode, permission_set, reason, promoted_at, withdrawn_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL)
                     ON CONFLICT(client_id, command_hash) DO UPDATE SET mode = ?3, permission_set = ?4,
                         reason = ?5, promoted_at = ?6, withdrawn_at = NULL",
                    params![client, hash, e.mode.as_str(), e.permission_set, reason, now],
                )?;
                let why = format!(
                    "promoted for client {client:?} ({}, set {}): {reason}",
                    e.mode.as_str(),
                    e.permission_set
                );
                history(tx, hash, Some("ask"), "auto_approve", &why, now)?;
            }
            Change::Policy { to: _, reason } => {
                if promoted {
                    withdraw(tx, client, hash, reason, now)?;
                }
            }
            Change::DuplicateCheck { enabled, reason } => {
                registry::set_duplicate_check(tx, hash, *enabled)?;
                history(tx, hash, Some(&policy_now), &policy_now, reason, now)?;
            }
            Change::DuplicateThreshold { ms, reason } => {
                registry::set_duplicate_threshold(tx, hash, *ms)?;
                history(tx, hash, Some(&policy_now), &policy_now, reason, now)?;
            }
        }
        out.push(c);
    }
    Ok(out)
}
