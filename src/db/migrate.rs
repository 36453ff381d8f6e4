//! Creates and upgrades the databases: schema files in `schema/`, versioned with
//! `PRAGMA user_version`, applied under `BEGIN IMMEDIATE` with the version re-read inside the
//! transaction, so concurrent `init` / `run` / CLI processes apply each step exactly once.
//! Also sets WAL mode (once, persistent) and the file modes of DESIGN §2.

use super::{open, DbKind};
use anyhow::{bail, Context, Result};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Schema steps per database: step N brings `user_version` from N-1 to N. Append, never edit.
fn steps(kind: DbKind) -> Vec<&'static str> {
    match kind {
        // 2: inferred_permissions (code permission inference results)
        // 3: llm_usage (daily token budget), llm_pending (generated content awaiting approval)
        // 4: store (data-dir identity, issue 21)
        // 5: audit_outbox (audit rows staged with their job's transition, issue 19)
        // 6: code_digests (read_code's model digests by content, issue 25)
        // 7: applies (the apply journal of change sets, issue 34)
        // 8: queue.unique_key, queue.retry (job control, issue 36)
        DbKind::Lifecycle => vec![
            kind.schema(),
            include_str!("../../schema/lifecycle.2.sql"),
            include_str!("../../schema/lifecycle.3.sql"),
            STORE,
            include_str!("../../schema/lifecycle.5.sql"),
            include_str!("../../schema/lifecycle.6.sql"),
            include_str!("../../schema/lifecycle.7.sql"),
            include_str!("../../schema/lifecycle.8.sql"),
        ],
        // 2: signatures, job_signatures, journal (effects over commands, issue 14)
        // 3: evidence, promotions, signature_evidence (the evidence ledger, issue 18)
        // 4: store (data-dir identity, issue 21)
        // 5: signature_evidence.learned_at/by/job (`approve --learn`, issue 22)
        // 6: egress_connections, egress_hosts, egress_requests (egress by host, issue 23)
        // 7: egress_connections.attempts/first_ms (per-host aggregates, issue 33)
        // 8: signature_examples, signature_evidence.denied_*/suspended* (issue 35)
        // 9: cancellations (`brainloop cancel`, issue 36)
        // 10: journal.diff/validation_id/decided_by (applied change sets audited, issue 36)
        // 11: index executions(command_hash, client_id, id) (a run's learning step, issue 39)
        // 12: registry_copy (a fleet worker's saved copy of the registry's rules, issue 37)
        // 13: journal.state/applied_paths (the row written before an apply's first byte), index
        //     signature_evidence(signature) (`signatures` listed in linear time), issue 50
        // 14: registry_epoch (what a fleet worker last trusted of its registry, issue 50)
        DbKind::Security => vec![
            kind.schema(),
            include_str!("../../schema/command_security.2.sql"),
            include_str!("../../schema/command_security.3.sql"),
            STORE,
            include_str!("../../schema/command_security.5.sql"),
            include_str!("../../schema/command_security.6.sql"),
            include_str!("../../schema/command_security.7.sql"),
            include_str!("../../schema/command_security.8.sql"),
            include_str!("../../schema/command_security.9.sql"),
            include_str!("../../schema/command_security.10.sql"),
            include_str!("../../schema/command_security.11.sql"),
            include_str!("../../schema/command_security.12.sql"),
            include_str!("../../schema/command_security.13.sql"),
            include_str!("../../schema/command_security.14.sql"),
        ],
        // 2: store (data-dir identity, issue 21)
        // 3: heartbeat.problem (the worker's view of what blocks it, issue 21)
        // 4: validations by command (a command's last request read in O(1), issue 39)
        DbKind::Output => vec![
            kind.schema(),
            STORE,
            include_str!("../../schema/output.3.sql"),
            include_str!("../../schema/output.4.sql"),
        ],
        // 2: store (data-dir identity, issue 21)
        // 3: audit_keys (audit rows moved from lifecycle's outbox exactly once, issue 19)
        DbKind::Metadata => vec![
            kind.schema(),
            STORE,
            include_str!("../../schema/metadata.3.sql"),
        ],
        // 2: store (data-dir identity, issue 21)
        // 3: jobs.unique_key, jobs.retry (job control, issue 36)
        // 4: jobs.task_id, withdrawals (MCP tasks, a client withdrawing its own job, issue 55)
        DbKind::Input => vec![
            kind.schema(),
            STORE,
            include_str!("../../schema/input.3.sql"),
            include_str!("../../schema/input.4.sql"),
        ],
    }
}

/// The `store` table every database carries (identity, see `db::identity`).
const STORE: &str = include_str!("../../schema/store.sql");

/// The version a fully migrated database has.
pub fn target_version(kind: DbKind) -> i64 {
    steps(kind).len() as i64
}

/// Mode of the data directory: group may create files (producers' `-wal`/`-shm` for input.db),
/// sticky so nobody deletes another user's files, nothing for others.
pub const DATA_DIR_MODE: u32 = 0o1770;

/// Creates the data dir if needed and brings every database to the current schema.
pub fn migrate_all(data_dir: &Path) -> Result<()> {
    ensure_data_dir(data_dir)?;
    for kind in DbKind::ALL {
        migrate(data_dir, kind)?;
    }
    super::identity::stamp_if_new(data_dir)
}

/// Creates/upgrades every database without stamping an identity (tests, and `repair`, which
/// decides itself what to stamp).
pub fn migrate_all_unstamped(data_dir: &Path) -> Result<()> {
    ensure_data_dir(data_dir)?;
    for kind in DbKind::ALL {
        migrate(data_dir, kind)?;
    }
    Ok(())
}

pub fn ensure_data_dir(data_dir: &Path) -> Result<()> {
    if !data_dir.exists() {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(DATA_DIR_MODE))
            .with_context(|| format!("cannot set the mode of {}", data_dir.display()))?;
    } else if !data_dir.is_dir() {
        bail!(
            "data dir {} exists but is not a directory",
            data_dir.display()
        );
    }
    Ok(())
}

/// Brings one database to the current schema; returns the number of steps applied.
pub fn migrate(data_dir: &Path, kind: DbKind) -> Result<usize> {
    let mut conn = open(data_dir, kind)?;
    // Only takes effect on a brand-new file (before its first table): lets retention give freed
    // pages back to the file system with `incremental_vacuum`.
    let _ = conn.pragma_update(None, "auto_vacuum", "INCREMENTAL");
    set_wal(&conn).with_context(|| format!("cannot set WAL mode on {}", kind.file_name()))?;
    let applied = apply_steps(&mut conn, kind)
        .with_context(|| format!("cannot migrate {}", kind.file_name()))?;
    let path = kind.path(data_dir);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(kind.file_mode()))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(applied)
}

fn apply_steps(conn: &mut Connection, kind: DbKind) -> rusqlite::Result<usize> {
    let all = steps(kind);
    // Cheap check first: an up-to-date database takes no write lock at all.
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if v >= all.len() as i64 {
        return Ok(0);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Re-read inside the write lock: another process may have migrated meanwhile.
    let v: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut applied = 0;
    for (i, sql) in all.iter().enumerate().skip(v.max(0) as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        applied += 1;
    }
    tx.commit()?;
    Ok(applied)
}

/// `journal_mode=WAL` needs an exclusive lock and may report BUSY without waiting when another
/// process is opening the same fresh file; retry for up to the busy timeout.
fn set_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + super::BUSY_TIMEOUT;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The `user_version` of each database (for `status` and tests).
pub fn versions(data_dir: &Path) -> Vec<(DbKind, Option<i64>)> {
    DbKind::ALL
        .iter()
        .map(|&k| {
            let v = super::open_read_only(data_dir, k)
                .and_then(|c| Ok(c.query_row("PRAGMA user_version", [], |r| r.get(0))?))
                .ok();
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrate_is_idempotent_and_sets_versions_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        migrate_all(&data).unwrap();
        for (k, v) in versions(&data) {
            assert_eq!(v, Some(target_version(k)), "{k:?}");
            let mode = std::fs::metadata(k.path(&data))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777;
            assert_eq!(mode, k.file_mode(), "{k:?}");
        }
        for k in DbKind::ALL {
            assert_eq!(migrate(&data, k).unwrap(), 0, "second run applies nothing");
        }
        assert_eq!(target_version(DbKind::Lifecycle), 8);
        let c = open(&data, DbKind::Output).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_version_1_lifecycle_database_upgrades_to_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        ensure_data_dir(&data).unwrap();
        {
            let c = open(&data, DbKind::Lifecycle).unwrap();
            c.execute_batch(DbKind::Lifecycle.schema()).unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
        }
        assert_eq!(migrate(&data, DbKind::Lifecycle).unwrap(), 7);
        let c = open(&data, DbKind::Lifecycle).unwrap();
        let v: i64 = c
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 8);
        for t in [
            "llm_usage",
            "llm_pending",
            "audit_outbox",
            "code_digests",
            "applies",
        ] {
            let n: i64 = c
                .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 0);
        }
        let n: i64 = c
            .query_row("SELECT count(*) FROM inferred_permissions", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 0);
    }
}
