//! The five files as one store (issue 21): the data dir's identity, written into every database,
//! and the start-up check that they still belong together.
//!
//! Each database's `store` table holds `data_dir_id`, a random id written by `init` / the first
//! start ([`stamp_if_new`]). [`check`] compares them and what the files know of each other:
//!
//! - a file without the id while others carry it was deleted and recreated (or emptied,
//!   truncated to nothing); a file with another id was replaced by another data dir's file;
//! - input.db's highest id ever (`sqlite_sequence`) below lifecycle.db's high-water mark: input.db
//!   was recreated or rolled back, and new jobs would reuse ids already claimed;
//! - jobs lifecycle.db shows done (within the results retention) without a final result in
//!   output.db: output.db (or its `-wal`) was lost or rolled back.
//!
//! Any problem makes `brainloop run` refuse to start, naming the file and the `brainloop repair`
//! flag that accepts it (`cli::repair` applies the fixes and records them as an event).

use super::{open, DbKind};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

pub const DIR_ID: &str = "data_dir_id";
/// lifecycle.db only: the id being stamped (a crash mid-stamping resumes with it).
pub const PENDING_ID: &str = "data_dir_id_pending";

/// How many of the most recent done jobs the start-up check looks up in output.db.
const RECENT_DONE: i64 = 2000;

/// The operator's explicit acceptance of one kind of loss (`brainloop repair --accept-…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accept {
    NewInput,
    LostResults,
    LostLifecycle,
    LostAudit,
    LostSecurity,
}

impl Accept {
    pub fn flag(self) -> &'static str {
        match self {
            Accept::NewInput => "--accept-new-input",
            Accept::LostResults => "--accept-lost-results",
            Accept::LostLifecycle => "--accept-lost-lifecycle",
            Accept::LostAudit => "--accept-lost-audit",
            Accept::LostSecurity => "--accept-lost-security",
        }
    }

    pub fn of(kind: DbKind) -> Accept {
        match kind {
            DbKind::Input => Accept::NewInput,
            DbKind::Output => Accept::LostResults,
            DbKind::Lifecycle => Accept::LostLifecycle,
            DbKind::Metadata => Accept::LostAudit,
            DbKind::Security => Accept::LostSecurity,
        }
    }
}

/// One inconsistency between the files.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub file: &'static str,
    pub what: String,
    pub accept: Accept,
}

/// Every problem as one error message: what is wrong and the command that accepts it.
pub fn refusal(data_dir: &Path, problems: &[Problem]) -> String {
    let mut flags: Vec<&str> = problems.iter().map(|p| p.accept.flag()).collect();
    flags.dedup();
    flags.sort_unstable();
    flags.dedup();
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("  - {}: {}", p.file, p.what))
        .collect();
    format!(
        "the data dir {} is inconsistent; refusing to start so that no job is lost, run twice or given another job's result:\n{}\n\
         Restore the file(s) from a backup, or accept the loss explicitly with\n  brainloop repair --data-dir {} {}\n\
         (it records what it accepted as a `repair` event in brainloop.metadata.db)",
        data_dir.display(),
        lines.join("\n"),
        data_dir.display(),
        flags.join(" ")
    )
}

pub fn read_key(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row("SELECT value FROM store WHERE key = ?1", [key], |r| {
            r.get(0)
        })
        .optional()?)
}

/// Sets `key` (insert or replace).
pub fn write_key(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO store(key, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        params![key, value, crate::time::now_ms()],
    )?;
    Ok(())
}

/// Sets `key` unless it exists; returns the value it has afterwards (race-free between processes).
fn claim_key(conn: &Connection, key: &str, value: &str) -> Result<String> {
    conn.execute(
        "INSERT OR IGNORE INTO store(key, value, updated_at) VALUES (?1, ?2, ?3)",
        params![key, value, crate::time::now_ms()],
    )?;
    read_key(conn, key)?.with_context(|| format!("store key {key} vanished after being written"))
}

fn new_id() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| anyhow::anyhow!("no randomness for the data-dir id: {e}"))?;
    Ok(hex::encode(b))
}

/// The `data_dir_id` of every database (`None`: the file has none).
pub fn ids(data_dir: &Path) -> Result<Vec<(DbKind, Option<String>)>> {
    DbKind::ALL
        .iter()
        .map(|&k| {
            let c = open(data_dir, k)?;
            let id = read_key(&c, DIR_ID)
                .with_context(|| format!("cannot read the identity of {}", k.file_name()))?;
            Ok((k, id))
        })
        .collect()
}

/// Gives a new data dir (or one upgraded from before identities) its id: only when no file has
/// one, or when a previous stamping was cut off (lifecycle.db holds the pending id). A data dir
/// where some files have the id and others not is left alone for [`check`] to report.
pub fn stamp_if_new(data_dir: &Path) -> Result<()> {
    let all = ids(data_dir)?;
    let life = open(data_dir, DbKind::Lifecycle)?;
    let pending = read_key(&life, PENDING_ID)?;
    let none_has_one = all.iter().all(|(_, id)| id.is_none());
    let resume = pending.is_some() && read_key(&life, DIR_ID)?.is_none();
    if !none_has_one && !resume {
        return Ok(());
    }
    let id = claim_key(&life, PENDING_ID, &new_id()?)?;
    for (kind, have) in &all {
        if *kind != DbKind::Lifecycle && have.is_none() {
            claim_key(&open(data_dir, *kind)?, DIR_ID, &id)
                .with_context(|| format!("cannot write the identity of {}", kind.file_name()))?;
        }
    }
    claim_key(&life, DIR_ID, &id)?;
    Ok(())
}

/// The id most files agree on (lifecycle.db's on a tie); `None` when no file has one.
pub fn reference_id(all: &[(DbKind, Option<String>)]) -> Option<String> {
    let mut votes: HashMap<&str, usize> = HashMap::new();
    for id in all.iter().filter_map(|(_, id)| id.as_deref()) {
        *votes.entry(id).or_default() += 1;
    }
    let best = votes.values().copied().max()?;
    let life = all
        .iter()
        .find(|(k, _)| *k == DbKind::Lifecycle)
        .and_then(|(_, id)| id.as_deref());
    match life {
        Some(l) if votes.get(l) == Some(&best) => Some(l.to_string()),
        _ => votes
            .into_iter()
            .filter(|(_, n)| *n == best)
            .map(|(id, _)| id.to_string())
            .min(),
    }
}

/// Every inconsistency between the five files (empty: they belong together).
pub fn check(data_dir: &Path, results_days: u64) -> Result<Vec<Problem>> {
    let all = ids(data_dir)?;
    let Some(reference) = reference_id(&all) else {
        return Ok(Vec::new());
    };
    let mut problems = identity_problems(&all, &reference);
    let ok = |k: DbKind| {
        all.iter()
            .any(|(kk, id)| *kk == k && id.as_deref() == Some(&reference))
    };
    if ok(DbKind::Input) && ok(DbKind::Lifecycle) {
        problems.extend(input_rolled_back(data_dir)?);
    }
    if ok(DbKind::Output) && ok(DbKind::Lifecycle) {
        problems.extend(results_lost(data_dir, results_days)?);
    }
    Ok(problems)
}

fn identity_problems(all: &[(DbKind, Option<String>)], reference: &str) -> Vec<Problem> {
    all.iter()
        .filter_map(|(k, id)| {
            let what = match id.as_deref() {
                Some(id) if id == reference => return None,
                Some(other) => format!(
                    "carries data-dir id {other}, the other files {reference}: it was replaced by another data dir's file"
                ),
                None => format!(
                    "has no data-dir id while the other files carry {reference}: it was deleted and recreated, emptied or truncated{}",
                    loss_of(*k)
                ),
            };
            Some(Problem {
                file: k.file_name(),
                what,
                accept: Accept::of(*k),
            })
        })
        .collect()
}

fn loss_of(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Input => " (new job ids would restart at 1 and be taken for finished jobs)",
        DbKind::Output => " (final results, validations and heartbeats are gone)",
        DbKind::Lifecycle => {
            " (claims, snapshots and the high-water mark are gone: finished jobs would run again)"
        }
        DbKind::Metadata => " (the audit trail and telemetry are gone)",
        DbKind::Security => " (command history, approvals, grants and overrides are gone)",
    }
}

/// The highest `jobs.id` input.db ever handed out (AUTOINCREMENT keeps it after deletes).
pub fn input_max_id(conn: &Connection) -> Result<i64> {
    let seq: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let max: Option<i64> = conn.query_row("SELECT max(id) FROM jobs", [], |r| r.get(0))?;
    Ok(seq.unwrap_or(0).max(max.unwrap_or(0)))
}

/// The high-water mark is read FIRST, input.db's highest id after: a job is claimed only after
/// it is in input.db, so whatever the worker claims between the two reads has an id already
/// counted in the second — a claim in between can never look like a rollback (read the other
/// way round, it did: `status` cried "inconsistent" under ordinary load, issue 34).
fn input_rolled_back(data_dir: &Path) -> Result<Option<Problem>> {
    let hwm = super::lifecycle::high_water_mark(&open(data_dir, DbKind::Lifecycle)?)?;
    let max = input_max_id(&open(data_dir, DbKind::Input)?)?;
    Ok((max < hwm).then(|| Problem {
        file: DbKind::Input.file_name(),
        what: format!(
            "its jobs reach id {max} but lifecycle.db has already claimed up to id {hwm}: it was rolled back or recreated, and new jobs would get ids already claimed (their rows would be skipped)"
        ),
        accept: Accept::NewInput,
    }))
}

/// Recent jobs lifecycle.db shows done whose final result output.db no longer has.
pub fn done_without_result(data_dir: &Path, since: i64, limit: i64) -> Result<Vec<i64>> {
    let life = open(data_dir, DbKind::Lifecycle)?;
    let mut stmt = life.prepare(
        "SELECT job_id FROM processed_log WHERE status = 'done' AND finished_at >= ?1
         ORDER BY finished_at DESC LIMIT ?2",
    )?;
    let done = stmt
        .query_map(params![since, limit], |r| r.get::<_, i64>(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    let finals = super::output::finals_among(&open(data_dir, DbKind::Output)?, &done)?;
    let mut missing: Vec<i64> = done.into_iter().filter(|id| !finals.contains(id)).collect();
    missing.sort_unstable();
    Ok(missing)
}

/// The start of the window in which output.db still holds every final result (retention prunes
/// older ones; an hour of margin for the two files' pruning passes).
pub fn retained_since(results_days: u64) -> i64 {
    crate::time::now_ms() - (results_days as i64 * 86_400_000) + 3_600_000
}

fn results_lost(data_dir: &Path, results_days: u64) -> Result<Option<Problem>> {
    let missing = done_without_result(data_dir, retained_since(results_days), RECENT_DONE)?;
    Ok((!missing.is_empty()).then(|| Problem {
        file: DbKind::Output.file_name(),
        what: format!(
            "{} job(s) lifecycle.db shows finished have no final result (e.g. job {}): it was deleted, truncated or rolled back (a -wal removed?)",
            missing.len(),
            missing[0]
        ),
        accept: Accept::LostResults,
    }))
}

/// For producers (`enqueue`, `mcp`): refuses to insert into an input.db the worker will refuse,
/// so a new job never gets the id (and so the result) of a finished one.
pub fn check_input_for_producer(data_dir: &Path) -> Result<()> {
    let out_id = match super::open_read_only(data_dir, DbKind::Output) {
        Ok(c) => read_key(&c, DIR_ID).ok().flatten(),
        Err(_) => None,
    };
    let Some(out_id) = out_id else { return Ok(()) };
    let in_id = super::open_read_only(data_dir, DbKind::Input)
        .and_then(|c| read_key(&c, DIR_ID))
        .ok()
        .flatten();
    if in_id.as_deref() != Some(out_id.as_str()) {
        anyhow::bail!(
            "{} does not belong to this data dir (its id is {}, output.db's {out_id}): it was recreated or replaced, \
             and its job ids would collide with finished jobs. Nothing was inserted; the operator must run \
             `brainloop repair --data-dir {} --accept-new-input` first",
            DbKind::Input.path(data_dir).display(),
            in_id.as_deref().unwrap_or("missing"),
            data_dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_dir_is_stamped_once_and_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d");
        super::super::migrate::migrate_all(&data).unwrap();
        let all = ids(&data).unwrap();
        let id = all[0].1.clone().unwrap();
        assert!(all.iter().all(|(_, i)| i.as_deref() == Some(id.as_str())));
        super::super::migrate::migrate_all(&data).unwrap();
        assert_eq!(ids(&data).unwrap()[0].1.as_deref(), Some(id.as_str()));
        assert!(check(&data, 30).unwrap().is_empty());
    }

    #[test]
    fn a_recreated_file_is_reported_not_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d");
        super::super::migrate::migrate_all(&data).unwrap();
        std::fs::remove_file(DbKind::Metadata.path(&data)).unwrap();
        super::super::migrate::migrate_all(&data).unwrap();
        let p = check(&data, 30).unwrap();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].accept, Accept::LostAudit);
    }
}
