//! The worker's side of the fleet registry (issue 37): **the bridge between this worker's
//! requests and the operator queue in PostgreSQL**. One plain thread (the `postgres` client is
//! synchronous) connects with the worker's role, `LISTEN`s for decisions, and on each
//! notification — or every `[registry] poll_ms` when none comes — publishes this worker's new
//! and closed validations and takes the decisions made on them into the local decision rows
//! (`validations::take`), which wake the loop through command_security.db like a local
//! `approve`. Everything a decision must pass (pending, in time, the snapshot's hash) is still
//! `answers::collect`'s.
//!
//! Outages fail closed: while the registry cannot be reached the `registry` problem names the
//! cause (`brainloop status`), a job that needs a human waits `pending_validation` (its
//! validation is published once the registry is back), nothing is decided, and what needs no
//! decision runs on — except the fleet's learned rules: the bridge pulls them at each pass
//! (`ask::learned`) and drops them when the registry fails; a copy older than
//! `[registry] learned_fresh_ms` is not used (the worker asks) until the next pull.

use super::{learned, validations};
use crate::db::Stores;
use crate::registry::{self, Settings};
use crate::stats::Stats;
use anyhow::Result;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `status` problem while the registry cannot be reached.
pub const PROBLEM: &str = "registry";

/// How far back closed validations are published after a (re)connection.
const REPUBLISH_MS: i64 = 24 * 3600 * 1000;

/// Starts the bridge on its own thread; it stops when `stop` is cancelled.
pub fn spawn(
    settings: Settings,
    stores: Arc<Stores>,
    stats: Arc<Stats>,
    stop: CancellationToken,
) -> Result<std::thread::JoinHandle<()>> {
    Ok(std::thread::Builder::new()
        .name("registry".into())
        .spawn(move || run(&settings, &stores, &stats, &stop))?)
}

fn run(s: &Settings, stores: &Stores, stats: &Stats, stop: &CancellationToken) {
    let mut backoff = Duration::from_millis(200);
    while !stop.is_cancelled() {
        match session(s, stores, stats, stop) {
            Ok(()) => return,
            Err(e) => {
                // Fail closed: no fleet rule is used until the next successful pull.
                learned::forget();
                let why = format!(
                    "the fleet registry {} cannot be reached: {e:#} — requests wait pending (nothing unapproved runs) until it is back",
                    s.shown_url()
                );
                if !stats.has_problem(PROBLEM) {
                    tracing::warn!(error = %why, "registry unreachable");
                }
                stats.set_problem(PROBLEM, why);
            }
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(s.poll_ms.clamp(200, 5000)));
    }
}

/// One connection's life: returns Ok when stopped, Err when the registry failed.
fn session(s: &Settings, stores: &Stores, stats: &Stats, stop: &CancellationToken) -> Result<()> {
    let mut c = registry::connect(s)?;
    registry::check_version(&mut c)?;
    registry::listen(&mut c)?;
    // Decision rows are written through a connection of their own, as the operator's CLI does:
    // the loop's wake-up compares command_security.db's data_version, which a write through its
    // own connection (`stores.security`) would not move.
    let mut sec = crate::db::open(&stores.data_dir, crate::db::DbKind::Security)?;
    // What the registry already has of each validation (id → status), this connection.
    let mut published: HashMap<String, String> = HashMap::new();
    let mut since = crate::time::now_ms() - REPUBLISH_MS;
    let poll = Duration::from_millis(s.poll_ms.clamp(50, 60_000));
    // The copy of the fleet's rules must outlive one poll (and a slow pass) to be used at all.
    let fresh_ms = s.learned_fresh_ms.max(2 * poll.as_millis() as u64 + 500);
    loop {
        let now = crate::time::now_ms();
        // The fleet's learned rules first: a revocation made while this worker was cut off
        // is in the copy before the copy is fresh again (`ask::learned`).
        if learned::pull(&mut c, fresh_ms)? {
            tracing::info!("the fleet's learned rules changed (registry)");
        }
        sync(&mut c, &mut sec, stores, &mut published, since)?;
        since = now - 60_000;
        if stats.has_problem(PROBLEM) {
            tracing::info!("the fleet registry is reachable again");
            stats.clear_problem(PROBLEM);
        }
        if stop.is_cancelled() {
            return Ok(());
        }
        registry::wait(&mut c, poll)?;
    }
}

/// One pass: publish what changed, then take the new decisions.
fn sync(
    c: &mut registry::Client,
    sec: &mut rusqlite::Connection,
    stores: &Stores,
    published: &mut HashMap<String, String>,
    since: i64,
) -> Result<()> {
    let local = stores.output.with(|o| validations::to_publish(o, since))?;
    let changed: Vec<_> = local
        .into_iter()
        .filter(|v| published.get(&v.id) != Some(&v.status))
        .collect();
    // The signatures each job asked about on a change set (`bash::signatures`'
    // `job_signatures`, read only): what an operator's fleet-scoped `--learn` teaches.
    let sigs = |v: &validations::Validation| -> Option<String> {
        sec.query_row(
            "SELECT signatures FROM job_signatures WHERE job_id = ?1 AND overlay = 1",
            [v.job_id],
            |r| r.get::<_, String>(0),
        )
        .ok()
    };
    validations::publish(c, &changed, &sigs)?;
    for v in changed {
        published.insert(v.id, v.status);
    }
    if published.len() > 10_000 {
        published.retain(|_, st| st == "pending");
    }
    for d in validations::undelivered(c)? {
        validations::take(sec, c, &d)?;
        tracing::info!(validation_id = %d.row.validation_id, decided_by = %d.row.decided_by, "decision taken from the registry");
    }
    Ok(())
}
