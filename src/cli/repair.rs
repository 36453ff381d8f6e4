//! `brainloop repair --accept-…`: the operator's explicit acceptance of a data-dir inconsistency
//! found by `db::identity::check` (a file recreated, replaced, emptied or rolled back). Runs only
//! with no worker (it takes the instance lock), changes nothing unless every problem found is
//! accepted, and records what it accepted and did as a `repair` event in metadata.db.
//!
//! What each acceptance does (never re-runs a job any surviving file shows finished or started,
//! never lets a new job take a finished job's id):
//!
//! | flag | fix |
//! |---|---|
//! | `--accept-new-input` | input.db's next id is moved above every id any file knows; rows already in it at or below that are renumbered above it (printed) |
//! | `--accept-lost-results` | jobs lifecycle.db shows done, or waiting for a validation output.db lost, end `interrupted` ("result lost") |
//! | `--accept-lost-lifecycle` | claims restart above the oldest job output.db still knows; pending validations are expired (the jobs ask again) |
//! | `--accept-lost-audit` / `--accept-lost-security` | the new file is adopted (history, grants and approvals are gone) |
//!
//! After a loss of output.db or lifecycle.db, a job metadata.db (audit) or command_security.db
//! (executions, job signatures) shows as run, with no final result, ends `interrupted`.

use crate::ask::validations;
use crate::config::Config;
use crate::db::identity::{self, Accept, Problem, DIR_ID};
use crate::db::output::{self, JobStatus, ResultRow};
use crate::db::{input, lifecycle, migrate, open, write_tx, DbKind};
use crate::lockfile::InstanceLock;
use anyhow::{Context, Result};
use rusqlite::Connection;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;

#[derive(clap::Args, Debug, Default)]
pub struct RepairArgs {
    /// Accept a recreated, replaced or rolled-back brainloop.input.db (its ids move above every known job).
    #[arg(long)]
    pub accept_new_input: bool,
    /// Accept lost final results (output.db recreated, truncated or rolled back): those jobs end `interrupted`.
    #[arg(long)]
    pub accept_lost_results: bool,
    /// Accept a lost lifecycle.db: claims are rebuilt, finished jobs are not run again.
    #[arg(long)]
    pub accept_lost_lifecycle: bool,
    /// Accept a lost metadata.db (audit trail and telemetry).
    #[arg(long)]
    pub accept_lost_audit: bool,
    /// Accept a lost command_security.db (command history, approvals, grants, overrides).
    #[arg(long)]
    pub accept_lost_security: bool,
}

impl RepairArgs {
    fn accepts(&self, a: Accept) -> bool {
        match a {
            Accept::NewInput => self.accept_new_input,
            Accept::LostResults => self.accept_lost_results,
            Accept::LostLifecycle => self.accept_lost_lifecycle,
            Accept::LostAudit => self.accept_lost_audit,
            Accept::LostSecurity => self.accept_lost_security,
        }
    }
}

pub fn run(config: &Config, args: &RepairArgs) -> Result<i32> {
    let dir = &config.data_dir;
    let _lock = InstanceLock::acquire(dir)
        .context("repair needs the worker stopped (it takes the instance lock)")?;
    migrate::migrate_all(dir)?;
    let days = config.retention.results_days;
    let problems = identity::check(dir, days)?;
    if problems.is_empty() {
        println!(
            "{}: the five databases are consistent; nothing to repair",
            dir.display()
        );
        return Ok(0);
    }
    let refused: Vec<Problem> = problems
        .iter()
        .filter(|p| !args.accepts(p.accept))
        .cloned()
        .collect();
    if !refused.is_empty() {
        eprintln!(
            "nothing changed: not every problem is accepted.\n{}",
            identity::refusal(dir, &refused)
        );
        return Ok(1);
    }
    let report = apply(dir, &problems, days)?;
    let left = identity::check(dir, days)?;
    if !left.is_empty() {
        anyhow::bail!("repair left problems:\n{}", identity::refusal(dir, &left));
    }
    println!("{}", crate::shown::json(&report)?);
    Ok(0)
}

/// Applies the fixes of every (accepted) problem, stamps the files, records the event.
fn apply(dir: &Path, problems: &[Problem], results_days: u64) -> Result<Value> {
    let all = identity::ids(dir)?;
    let reference = identity::reference_id(&all).context("no file carries a data-dir id")?;
    let has = |a: Accept| problems.iter().any(|p| p.accept == a);
    let replaced = |k: DbKind| {
        all.iter()
            .any(|(kk, id)| *kk == k && id.as_deref().is_some_and(|i| i != reference))
    };
    let mut actions = serde_json::Map::new();
    let mut reasked = Vec::new();
    if has(Accept::LostLifecycle) {
        let (done, asked) = fix_lifecycle(dir, replaced(DbKind::Lifecycle))?;
        actions.insert("lifecycle".into(), done);
        reasked = asked;
    }
    if has(Accept::LostResults) {
        actions.insert("output".into(), fix_output(dir, replaced(DbKind::Output))?);
    }
    if has(Accept::LostLifecycle) || has(Accept::LostResults) {
        let since = identity::retained_since(results_days);
        actions.insert("traces".into(), end_traced_jobs(dir, since, &reasked)?);
    }
    if has(Accept::NewInput) {
        actions.insert("input".into(), fix_input(dir)?);
    }
    for p in problems {
        let kind = kind_of(p.file)?;
        identity::write_key(&open(dir, kind)?, DIR_ID, &reference)?;
    }
    let detail = json!({
        "accepted": problems.iter().map(|p| p.accept.flag()).collect::<BTreeSet<_>>(),
        "problems": problems,
        "actions": actions,
        "operator": super::operator(),
    });
    crate::db::metadata::insert_event(&mut open(dir, DbKind::Metadata)?, "repair", None, &detail)
        .context("cannot record the repair event in metadata.db")?;
    Ok(detail)
}

fn kind_of(file: &str) -> Result<DbKind> {
    DbKind::ALL
        .into_iter()
        .find(|k| k.file_name() == file)
        .with_context(|| format!("unknown database {file}"))
}

/// The highest job id any file knows (claimed, with a result, audited, executed).
fn max_known_job_id(dir: &Path) -> Result<i64> {
    let q = |kind: DbKind, sql: &str| -> Result<i64> {
        let c = open(dir, kind)?;
        let v: Option<i64> = c.query_row(sql, [], |r| r.get(0))?;
        Ok(v.unwrap_or(0))
    };
    let hwm = lifecycle::high_water_mark(&open(dir, DbKind::Lifecycle)?)?;
    Ok(hwm
        .max(q(
            DbKind::Lifecycle,
            "SELECT max(job_id) FROM processed_log",
        )?)
        .max(q(DbKind::Output, "SELECT max(job_id) FROM results")?)
        .max(q(DbKind::Output, "SELECT max(job_id) FROM validations")?)
        .max(q(DbKind::Metadata, "SELECT max(job_id) FROM audit")?)
        .max(q(DbKind::Security, "SELECT max(job_id) FROM executions")?)
        .max(q(
            DbKind::Security,
            "SELECT max(job_id) FROM job_signatures",
        )?))
}

/// New input.db: ids continue above every known job; rows already inserted at or below that
/// are renumbered above it (their producers are told the new ids by this command's output).
fn fix_input(dir: &Path) -> Result<Value> {
    let floor = max_known_job_id(dir)?;
    let mut c = open(dir, DbKind::Input)?;
    let renumbered = input::renumber_above(&mut c, floor)
        .context("cannot move input.db's ids above the known jobs")?;
    for (old, new) in &renumbered {
        eprintln!("input.db: job {old} is now job {new} (its id belonged to an earlier job)");
    }
    Ok(json!({"ids_continue_above": floor, "renumbered": renumbered}))
}

/// Lost lifecycle.db: a replaced file's foreign claims are dropped; claims restart above the
/// oldest job output.db still has (older ones are past retention, never re-run); validations
/// left pending are expired and their jobs (returned) are claimed again and ask again, so one job
/// never has two questions of which only one would be acted on.
fn fix_lifecycle(dir: &Path, replaced: bool) -> Result<(Value, Vec<i64>)> {
    let out = open(dir, DbKind::Output)?;
    let oldest: Option<i64> = out.query_row("SELECT min(job_id) FROM results", [], |r| r.get(0))?;
    let now = crate::time::now_ms();
    let reasked: Vec<i64> = out
        .prepare("SELECT DISTINCT job_id FROM validations WHERE status = 'pending'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let expired = validations::expire_all_pending(&out, now)?;
    let mut life = open(dir, DbKind::Lifecycle)?;
    let hwm = oldest.map(|o| o - 1).unwrap_or(0).max(0);
    write_tx(&mut life, |tx| {
        lifecycle::restart_claims(tx, replaced, hwm, now)
    })?;
    let done = json!({"claims_restart_above": hwm, "validations_expired": expired,
                      "jobs_asking_again": reasked, "foreign_rows_dropped": replaced});
    Ok((done, reasked))
}

/// Lost output.db: done jobs and jobs waiting on a lost validation end `interrupted`.
fn fix_output(dir: &Path, replaced: bool) -> Result<Value> {
    let mut out = open(dir, DbKind::Output)?;
    if replaced {
        write_tx(&mut out, |tx| {
            output::clear_results(tx)?;
            validations::clear(tx)
        })?;
    }
    let life = open(dir, DbKind::Lifecycle)?;
    let done = identity::done_without_result(dir, 0, i64::MAX)?;
    let waiting: Vec<i64> = life
        .prepare("SELECT job_id FROM processed_log WHERE status = 'pending_validation'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let orphans: Vec<i64> = waiting
        .into_iter()
        .filter(|id| !has_pending_validation(&out, *id).unwrap_or(false))
        .collect();
    let why = "its final result was lost (brainloop.output.db was recreated, truncated or rolled back; accepted with `brainloop repair --accept-lost-results`); it ran and is not run again";
    let why_waiting = "its validation was lost with brainloop.output.db (accepted with `brainloop repair --accept-lost-results`); nothing ran; enqueue it again";
    let mut rows = interrupted_rows(&life, &done, why)?;
    rows.extend(interrupted_rows(&life, &orphans, why_waiting)?);
    write_results(dir, &rows)?;
    Ok(json!({"results_lost": done, "validations_lost": orphans}))
}

fn has_pending_validation(out: &Connection, job_id: i64) -> Result<bool> {
    Ok(out
        .prepare_cached("SELECT 1 FROM validations WHERE job_id = ?1 AND status = 'pending'")?
        .exists([job_id])?)
}

/// Jobs metadata.db or command_security.db shows as run since `since`, with no final result and
/// not open in lifecycle.db: they end `interrupted`, never run again (except those in `asking`:
/// they were waiting for a human, nothing of them was applied, and they ask again).
fn end_traced_jobs(dir: &Path, since: i64, asking: &[i64]) -> Result<Value> {
    let ids = |kind: DbKind, sql: &str| -> Result<Vec<i64>> {
        let c = open(dir, kind)?;
        let v = c
            .prepare(sql)?
            .query_map([since], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        Ok(v)
    };
    let mut traced: BTreeSet<i64> = BTreeSet::new();
    traced.extend(ids(
        DbKind::Metadata,
        "SELECT DISTINCT job_id FROM audit WHERE job_id IS NOT NULL AND timestamp >= ?1",
    )?);
    traced.extend(ids(
        DbKind::Security,
        "SELECT DISTINCT job_id FROM executions WHERE job_id IS NOT NULL AND executed_at >= ?1",
    )?);
    traced.extend(ids(
        DbKind::Security,
        "SELECT job_id FROM job_signatures WHERE created_at >= ?1",
    )?);
    let all: Vec<i64> = traced.into_iter().collect();
    let finals = output::finals_among(&open(dir, DbKind::Output)?, &all)?;
    let life = open(dir, DbKind::Lifecycle)?;
    let mut open_stmt =
        life.prepare("SELECT 1 FROM processed_log WHERE job_id = ?1 AND status <> 'done'")?;
    let mut ended = Vec::new();
    for id in all {
        if !finals.contains(&id) && !asking.contains(&id) && !open_stmt.exists([id])? {
            ended.push(id);
        }
    }
    let why = "it ran (recorded in brainloop.metadata.db / command_security.db) but its claim or result was lost (accepted with `brainloop repair`); it is not run again";
    let rows = interrupted_rows(&life, &ended, why)?;
    write_results(dir, &rows)?;
    Ok(json!({"ended_interrupted": ended}))
}

fn interrupted_rows(life: &Connection, ids: &[i64], why: &str) -> Result<Vec<ResultRow>> {
    let mut stmt = life.prepare_cached("SELECT action, client_id FROM queue WHERE job_id = ?1")?;
    let now = crate::time::now_ms();
    ids.iter()
        .map(|&id| {
            let (action, client_id) = stmt
                .query_row([id], |r| {
                    Ok((r.get::<_, Option<String>>(0)?, r.get::<_, String>(1)?))
                })
                .unwrap_or((None, "local".to_string()));
            Ok(ResultRow {
                job_id: id,
                action,
                client_id,
                status: JobStatus::Interrupted,
                result: None,
                error: Some(why.to_string()),
                attempts: 0,
                duration_ms: None,
                started_at: None,
                finished_at: Some(now),
            })
        })
        .collect()
}

fn write_results(dir: &Path, rows: &[ResultRow]) -> Result<()> {
    let mut out = open(dir, DbKind::Output)?;
    write_tx(&mut out, |tx| output::upsert_results(tx, rows))
        .context("cannot write the interrupted results to output.db")?;
    let ids: Vec<i64> = rows.iter().map(|r| r.job_id).collect();
    let mut l = open(dir, DbKind::Lifecycle)?;
    write_tx(&mut l, |tx| {
        lifecycle::finish(tx, &ids, crate::time::now_ms())
    })?;
    Ok(())
}
