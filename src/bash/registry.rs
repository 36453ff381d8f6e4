//! command_security.db `commands_registry`, `executions` and `policy_history`: one row per
//! command identity (SHA-256 of text + canonical workdir) with its statistics and policy, one
//! row per run, one row per policy change with its reason. Every read-modify-write is one
//! `BEGIN IMMEDIATE` transaction (the original's statistics never updated — ORIGIN.md).

use super::policy::{self, Change, Facts, Override, Policy};
use crate::db::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub command_hash: String,
    pub command_text: String,
    pub workdir: Option<String>,
    pub execution_count: i64,
    pub success_count: i64,
    pub failure_count: i64,
    pub avg_duration_ms: f64,
    pub last_executed: Option<i64>,
    pub current_policy: Policy,
    pub policy_reason: Option<String>,
    pub promoted_at: Option<i64>,
    pub user_override: Option<Override>,
    pub user_override_reason: Option<String>,
    pub risk_score: f64,
    pub permission_set: Option<String>,
    pub classifier_version: Option<String>,
    pub duplicate_check_enabled: bool,
    pub duplicate_threshold_ms: i64,
    #[serde(skip)]
    pub timestamps: Vec<i64>,
}

const COLUMNS: &str =
    "command_hash, command_text, workdir, execution_count, success_count, failure_count,
    avg_duration_ms, last_executed, current_policy, policy_reason, promoted_at, user_override,
    user_override_reason, risk_score, permission_set, classifier_version, duplicate_check_enabled,
    duplicate_threshold_ms, last_100_timestamps";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let ts: String = r.get(18)?;
    Ok(Entry {
        command_hash: r.get(0)?,
        command_text: r.get(1)?,
        workdir: r.get(2)?,
        execution_count: r.get(3)?,
        success_count: r.get(4)?,
        failure_count: r.get(5)?,
        avg_duration_ms: r.get(6)?,
        last_executed: r.get(7)?,
        current_policy: Policy::parse(&r.get::<_, String>(8)?),
        policy_reason: r.get(9)?,
        promoted_at: r.get(10)?,
        user_override: r
            .get::<_, Option<String>>(11)?
            .as_deref()
            .and_then(Override::parse),
        user_override_reason: r.get(12)?,
        risk_score: r.get(13)?,
        permission_set: r.get(14)?,
        classifier_version: r.get(15)?,
        duplicate_check_enabled: r.get(16)?,
        duplicate_threshold_ms: r.get(17)?,
        timestamps: ts
            .split(';')
            .filter_map(|t| t.trim().parse().ok())
            .collect(),
    })
}

pub fn get(conn: &Connection, hash: &str) -> Result<Option<Entry>> {
    // Read before every command (`bash::command::known`): the statement is kept prepared.
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM commands_registry WHERE command_hash = ?1"
        ))?
        .query_row([hash], row)
        .optional()?)
}

pub fn list(conn: &Connection) -> Result<Vec<Entry>> {
    let mut s = conn.prepare(&format!("SELECT {COLUMNS} FROM commands_registry ORDER BY last_executed DESC NULLS LAST, first_seen DESC"))?;
    let v = s
        .query_map([], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

pub(super) fn history(
    tx: &Transaction<'_>,
    hash: &str,
    old: Option<&str>,
    new: &str,
    reason: &str,
    now: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO policy_history(command_hash, old_policy, new_policy, reason, changed_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![hash, old, new, reason, now],
    )?;
    Ok(())
}

/// Turns the duplicate check of a command on or off (an evolution rule, `bash::evidence`).
pub(super) fn set_duplicate_check(
    tx: &Transaction<'_>,
    hash: &str,
    enabled: bool,
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE commands_registry SET duplicate_check_enabled = ?2 WHERE command_hash = ?1",
        params![hash, enabled as i64],
    )?;
    Ok(())
}

/// Sets the duplicate window of a command (an evolution rule, `bash::evidence`).
pub(super) fn set_duplicate_threshold(
    tx: &Transaction<'_>,
    hash: &str,
    ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE commands_registry SET duplicate_threshold_ms = ?2 WHERE command_hash = ?1",
        params![hash, ms],
    )?;
    Ok(())
}

/// The retention pass, inside its transaction: at most `batch` executions older than `before`
/// are deleted (the policy history is kept).
pub fn prune_executions(
    tx: &Transaction<'_>,
    before: i64,
    batch: usize,
) -> rusqlite::Result<usize> {
    tx.execute(
        "DELETE FROM executions WHERE id IN
             (SELECT id FROM executions WHERE executed_at < ?1 LIMIT ?2)",
        params![before, batch as i64],
    )
}

/// The command's entry, created on first sight with its starting policy, and re-evaluated when
/// the classifier version changed (DESIGN §5.8).
#[allow(clippy::too_many_arguments)]
pub fn get_or_create(
    conn: &mut Connection,
    hash: &str,
    command: &str,
    workdir: &str,
    facts: &Facts,
    classifier_version: &str,
    sandbox_enforcing: bool,
    now: i64,
) -> Result<Entry> {
    // The common case (a known command, same classifier) needs no write lock.
    if let Some(e) = get(conn, hash)? {
        if e.classifier_version.as_deref() == Some(classifier_version) {
            return Ok(e);
        }
    }
    write_tx(conn, |tx| {
        let existing = tx
            .query_row(&format!("SELECT {COLUMNS} FROM commands_registry WHERE command_hash = ?1"), [hash], row)
            .optional()?;
        let (start, reason) = policy::starting_policy(facts, sandbox_enforcing);
        match existing {
            None => {
                tx.execute(
                    "INSERT INTO commands_registry(command_hash, command_text, workdir, first_seen, current_policy,
                         policy_reason, risk_score, permission_set, classifier_version)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![hash, command, workdir, now, start.as_str(), reason, facts.risk, facts.permission_set.as_str(), classifier_version],
                )?;
                history(tx, hash, None, start.as_str(), &format!("created: {reason}"), now)?;
            }
            Some(e) if e.classifier_version.as_deref() != Some(classifier_version) => {
                // Keep a promotion only if the command is still eligible under the new classifier.
                let keep = e.current_policy == Policy::AutoApprove
                    && e.promoted_at.is_some()
                    && policy::never_promoted(facts, start).is_none()
                    && start != Policy::AskWarning;
                let new = if keep { Policy::AutoApprove } else { start };
                let why = format!(
                    "re-evaluated for classifier {classifier_version} (was {}): {}",
                    e.classifier_version.as_deref().unwrap_or("unknown"),
                    if keep { "promotion still valid".to_string() } else { reason.clone() }
                );
                tx.execute(
                    "UPDATE commands_registry SET current_policy = ?2, policy_reason = ?3, risk_score = ?4,
                         permission_set = ?5, classifier_version = ?6,
                         promoted_at = CASE WHEN ?2 = 'auto_approve' THEN promoted_at END
                     WHERE command_hash = ?1",
                    params![hash, new.as_str(), why, facts.risk, facts.permission_set.as_str(), classifier_version],
                )?;
                if new != e.current_policy {
                    history(tx, hash, Some(e.current_policy.as_str()), new.as_str(), &why, now)?;
                }
            }
            Some(_) => {}
        }
        tx.query_row(&format!("SELECT {COLUMNS} FROM commands_registry WHERE command_hash = ?1"), [hash], row)
    })
    .map_err(Into::into)
}

/// One run of a command, as the registry records it.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    pub hash: &'a str,
    pub job_id: i64,
    pub client_id: &'a str,
    pub exit_code: Option<i32>,
    pub success: bool,
    pub duration_ms: i64,
    pub sandbox: &'a str,
    /// Set only when a human decision or an operator override allowed this run
    /// (`bash::evidence`); everything else is counted in the statistics and teaches nothing.
    pub evidence: Option<super::evidence::Evidence>,
}

/// Records one run (executions, statistics) and applies learning from the evidence ledger in the
/// same transaction; returns the changes made.
///
/// Durability (issue 39): a run that carries evidence, or whose learning changes anything (a
/// promotion withdrawn, the duplicate check), commits with command_security.db's own
/// `synchronous = FULL`. A run that is only statistics — no evidence, nothing learnt — commits
/// `NORMAL`: its WAL frames are written before this returns, so a kill -9 of the worker loses
/// nothing (the next FULL commit of the file makes them durable too); a power loss can lose the
/// last few such rows, no approval, override, evidence or policy. The transaction is tried
/// `NORMAL` and, when its learning changed something, rolled back and done again `FULL`
/// (`synchronous` cannot change inside a transaction).
pub fn record_run(
    conn: &mut Connection,
    run: &Run<'_>,
    facts: &Facts,
    now: i64,
) -> Result<Vec<Change>> {
    if run.evidence.is_none() {
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let tried = (|| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let changes = record_in(&tx, run, facts, now)?;
            if !changes.is_empty() {
                return Ok(None); // rolled back on drop: done again FULL below
            }
            tx.commit()?;
            Ok::<_, rusqlite::Error>(Some(changes))
        })();
        // Back to the database's own setting (`db::DbKind::synchronous`), whatever happened.
        let back = conn.pragma_update(
            None,
            "synchronous",
            crate::db::DbKind::Security.synchronous(),
        );
        let tried = tried?;
        back?;
        if let Some(changes) = tried {
            return Ok(changes);
        }
    }
    Ok(write_tx(conn, |tx| record_in(tx, run, facts, now))?)
}

/// The statements of [`record_run`], inside its transaction.
fn record_in(
    tx: &Transaction<'_>,
    run: &Run<'_>,
    facts: &Facts,
    now: i64,
) -> rusqlite::Result<Vec<Change>> {
    let hash = run.hash;
    // Cached statements: every run of every command records through them (issue 39).
    tx.prepare_cached(
        "INSERT INTO executions(command_hash, job_id, exit_code, duration_ms, sandbox, executed_at, client_id, evidence)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![hash, run.job_id, run.exit_code, run.duration_ms, run.sandbox, now, run.client_id, run.evidence.is_some()])?;
    let e = tx
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM commands_registry WHERE command_hash = ?1"
        ))?
        .query_row([hash], row)?;
    let mut ts = e.timestamps.clone();
    ts.push(now);
    if ts.len() > 100 {
        ts.drain(..ts.len() - 100);
    }
    let ts_text = ts
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(";");
    let (success, duration_ms) = (run.success, run.duration_ms);
    tx.prepare_cached(
        "UPDATE commands_registry SET
            execution_count = execution_count + 1,
            success_count = success_count + ?2,
            failure_count = failure_count + ?3,
            total_duration_ms = total_duration_ms + ?4,
            avg_duration_ms = CAST(total_duration_ms + ?4 AS REAL) / (execution_count + 1),
            min_duration_ms = min(coalesce(min_duration_ms, ?4), ?4),
            max_duration_ms = max(coalesce(max_duration_ms, ?4), ?4),
            last_executed = ?5,
            last_100_timestamps = ?6
         WHERE command_hash = ?1",
    )?
    .execute(params![
        hash,
        success as i64,
        (!success) as i64,
        duration_ms,
        now,
        ts_text
    ])?;
    let new = match &run.evidence {
        Some(ev) => super::evidence::record(tx, ev, now)?.then_some(ev),
        None => None,
    };
    super::evidence::learn(tx, run.client_id, hash, facts, new, now)
}

/// Sets or clears the operator override (`brainloop override` / `approve --always` / `deny --always`).
pub fn set_override(
    conn: &mut Connection,
    hash: &str,
    ov: Option<Override>,
    reason: &str,
    now: i64,
) -> Result<bool> {
    Ok(write_tx(conn, |tx| {
        let cur: Option<String> = tx
            .query_row(
                "SELECT current_policy FROM commands_registry WHERE command_hash = ?1",
                [hash],
                |r| r.get(0),
            )
            .optional()?;
        let Some(cur) = cur else { return Ok(false) };
        tx.execute(
            "UPDATE commands_registry SET user_override = ?2, user_override_reason = ?3, user_override_at = ?4 WHERE command_hash = ?1",
            params![hash, ov.map(Override::as_str), reason, now],
        )?;
        let label = ov
            .map(|o| format!("override {}", o.as_str()))
            .unwrap_or_else(|| "override cleared".into());
        history(
            tx,
            hash,
            Some(&cur),
            &cur,
            &format!("{label}: {reason}"),
            now,
        )?;
        Ok(true)
    })?)
}

/// Finds a registry entry by a hash prefix (operators type prefixes); errors if ambiguous.
pub fn resolve_prefix(conn: &Connection, prefix: &str) -> Result<String> {
    let mut s = conn.prepare(
        "SELECT command_hash FROM commands_registry WHERE command_hash LIKE ?1 || '%' LIMIT 2",
    )?;
    let v = s
        .query_map([prefix.to_ascii_lowercase()], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    match v.len() {
        0 => anyhow::bail!("no command with hash {prefix} (see `brainloop commands`)"),
        1 => Ok(v.into_iter().next().unwrap_or_default()),
        _ => anyhow::bail!("hash prefix {prefix} is ambiguous; give more characters"),
    }
}

/// One policy change: (changed_at, old policy, new policy, reason).
pub type HistoryRow = (i64, Option<String>, String, String);

pub fn history_of(conn: &Connection, hash: &str) -> Result<Vec<HistoryRow>> {
    let mut s = conn.prepare("SELECT changed_at, old_policy, new_policy, reason FROM policy_history WHERE command_hash = ?1 ORDER BY id")?;
    let v = s
        .query_map([hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            blocked: false,
            pure: false,
            risk: 0.3,
            permission_set: crate::permset::PermissionSet::Filesystem,
            sandbox_auto_approvable: false,
            computed_program: false,
            runs_workspace_file: false,
        }
    }

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(crate::db::DbKind::Security.schema())
            .unwrap();
        c.execute_batch(include_str!("../../schema/command_security.2.sql"))
            .unwrap();
        c.execute_batch(include_str!("../../schema/command_security.3.sql"))
            .unwrap();
        c
    }

    fn row(c: &Connection, hash: &str) -> (bool, i64, i64) {
        c.query_row(
            "SELECT duplicate_check_enabled, duplicate_threshold_ms, execution_count FROM commands_registry WHERE command_hash = ?1",
            [hash],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    }

    fn approved(hash: &str, job_id: i64, client: &str) -> super::super::evidence::Evidence {
        super::super::evidence::Evidence {
            client_id: client.into(),
            command_hash: hash.into(),
            job_id,
            source: super::super::evidence::Source::HumanApproved,
            decided_by: Some("test".into()),
            mode: super::super::evidence::Mode::Direct,
            permission_set: "filesystem".into(),
            success: true,
        }
    }

    fn run_at(c: &mut Connection, hash: &str, job: i64, client: &str, ev: bool, now: i64) {
        let f = facts();
        let r = Run {
            hash,
            job_id: job,
            client_id: client,
            exit_code: Some(0),
            success: true,
            duration_ms: 5,
            sandbox: "none",
            evidence: ev.then(|| approved(hash, job, client)),
        };
        record_run(c, &r, &f, now).unwrap();
    }

    fn promoted(c: &Connection, hash: &str, client: &str) -> bool {
        super::super::evidence::promotion(c, client, hash, "filesystem")
            .unwrap()
            .is_some()
    }

    /// Every recorded run reads its command's last runs for the client (`evidence::stats`):
    /// with the migrated schema SQLite must answer from an index in id order, not read and sort
    /// every run of the command (3.5 ms at 10,000 runs, issue 39).
    #[test]
    fn a_runs_learning_reads_its_window_from_an_index_not_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        crate::db::migrate::ensure_data_dir(&data).unwrap();
        crate::db::migrate::migrate(&data, crate::db::DbKind::Security).unwrap();
        let c = crate::db::open(&data, crate::db::DbKind::Security).unwrap();
        let plan: Vec<String> = c
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                super::super::evidence::RECENT_RUNS
            ))
            .unwrap()
            .query_map(params!["h", "client", 20], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let plan = plan.join(" | ");
        assert!(
            plan.contains("executions_client") && !plan.contains("TEMP B-TREE"),
            "plan: {plan}"
        );
    }

    #[test]
    fn runs_nobody_approved_teach_nothing() {
        let mut c = db();
        get_or_create(&mut c, "h", "cmd", "/ws", &facts(), "v1", false, 0).unwrap();
        for i in 0..60 {
            run_at(&mut c, "h", i, "local", false, 1_000_000 + i * 1000);
        }
        assert_eq!(
            row(&c, "h"),
            (true, 2000, 60),
            "counted, but no monitoring rule"
        );
        assert!(
            !promoted(&c, "h", "local"),
            "60 unapproved runs promote nothing"
        );
        // Twenty runs of one job are one piece of evidence.
        for _ in 0..20 {
            run_at(&mut c, "h", 999, "local", true, 2_000_000);
        }
        assert!(!promoted(&c, "h", "local"));
        let n: i64 = c
            .query_row("SELECT count(*) FROM evidence", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn approved_runs_promote_per_client_and_drive_monitoring_and_rare_rules() {
        let mut c = db();
        get_or_create(&mut c, "mon", "watch-ish", "/ws", &facts(), "v1", false, 0).unwrap();
        for i in 0..19 {
            run_at(&mut c, "mon", i, "a", true, 1_000_000 + i * 1000);
        }
        assert!(!promoted(&c, "mon", "a"), "19 approvals are not enough");
        run_at(&mut c, "mon", 19, "a", true, 1_019_000);
        assert!(promoted(&c, "mon", "a"), "20 approvals at 100% promote");
        assert!(!promoted(&c, "mon", "b"), "another client learned nothing");
        assert!(
            super::super::evidence::promotion(&c, "a", "mon", "network-api")
                .unwrap()
                .is_none(),
            "a wider set than approved voids the promotion"
        );
        for i in 20..50 {
            run_at(&mut c, "mon", i, "a", true, 1_000_000 + i * 1000);
        }
        assert_eq!(
            row(&c, "mon"),
            (false, 2000, 50),
            "monitoring disables the duplicate check"
        );
        get_or_create(&mut c, "rare", "backup", "/ws", &facts(), "v1", false, 0).unwrap();
        for i in 0..3 {
            run_at(&mut c, "rare", i + 100, "a", true, i * 2 * 3_600_000);
        }
        assert_eq!(
            row(&c, "rare"),
            (true, 30_000, 3),
            "a rare command gets a 30 s threshold"
        );
        let reasons: Vec<String> = history_of(&c, "mon")
            .unwrap()
            .into_iter()
            .chain(history_of(&c, "rare").unwrap())
            .map(|h| h.3)
            .collect();
        assert!(
            reasons.iter().any(|r| r.starts_with("monitoring pattern")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.starts_with("rare command")),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("promoted for client \"a\"")),
            "{reasons:?}"
        );
    }

    #[test]
    fn a_denial_withdraws_the_promotion_and_resets_the_count() {
        let mut c = db();
        get_or_create(&mut c, "h", "cmd", "/ws", &facts(), "v1", false, 0).unwrap();
        for i in 0..20 {
            run_at(&mut c, "h", i, "a", true, 1000 + i);
        }
        assert!(promoted(&c, "h", "a"));
        let mut d = approved("h", 500, "a");
        d.source = super::super::evidence::Source::HumanDenied;
        d.success = false;
        super::super::evidence::record_and_learn(&mut c, &d, None, 5000).unwrap();
        assert!(!promoted(&c, "h", "a"), "a denial withdraws");
        for i in 0..19 {
            run_at(&mut c, "h", 600 + i, "a", true, 6000 + i);
        }
        assert!(
            !promoted(&c, "h", "a"),
            "approvals before the denial no longer count"
        );
        run_at(&mut c, "h", 700, "a", true, 7000);
        assert!(promoted(&c, "h", "a"), "twenty new approvals promote again");
    }

    #[test]
    fn demotion_after_failures_needs_new_evidence_to_promote_again() {
        let mut c = db();
        get_or_create(&mut c, "h", "cmd", "/ws", &facts(), "v1", false, 0).unwrap();
        for i in 0..20 {
            run_at(&mut c, "h", i, "a", true, 1000 + i);
        }
        assert!(promoted(&c, "h", "a"));
        let f = facts();
        for i in 0..5 {
            let r = Run {
                hash: "h",
                job_id: 100 + i,
                client_id: "a",
                exit_code: Some(1),
                success: false,
                duration_ms: 5,
                sandbox: "none",
                evidence: None,
            };
            record_run(&mut c, &r, &f, 3000 + i).unwrap();
        }
        assert!(!promoted(&c, "h", "a"), "75% over the last 20 runs demotes");
        // The demoting run changed a policy: its NORMAL try was rolled back and done again FULL,
        // once; the connection is back at the database's own setting.
        assert_eq!(row(&c, "h").2, 25, "every run counted once");
        let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 2, "back to FULL");
        run_at(&mut c, "h", 200, "a", true, 9000);
        assert!(
            !promoted(&c, "h", "a"),
            "one approval after a demotion is not twenty"
        );
    }
}
