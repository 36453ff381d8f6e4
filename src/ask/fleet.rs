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
//! (`ask::learned`), saves them in command_security.db when they changed, and drops them when
//! the registry fails; a copy older than `[registry] learned_fresh_ms` is not used (the worker
//! asks) until the next pull. The restrictive ones (`never`, `always_ask`) stay in force, also
//! across a restart (the saved copy, loaded at start-up), until a pull lifts them. The same
//! freshness holds for the fleet's evidence (`ask::evidence`: the human approvals of a
//! signature counted from the registry's decision rows), which is never saved.

use super::{epoch, evidence, learned, validations};
use crate::ask::validations::{FleetApplied, Validation};
use crate::db::Stores;
use crate::registry::{self, Settings};
use crate::stats::Stats;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `status` problem while the registry cannot be reached.
pub const PROBLEM: &str = "registry";

/// How far back closed validations are published after a (re)connection.
const REPUBLISH_MS: i64 = 24 * 3600 * 1000;

/// What the bridge needs of the layers above `ask` — the payload a validation is shown with,
/// the journal of applied change sets, the undo, the reviewer's limits —, given by the
/// supervisor (`supervisor::fleet_local`).
pub trait Local: Send + Sync {
    /// What the operator's `show` / `review` read of a new validation on any machine: the
    /// payload this worker's hooks get (`hooks::payload`, capped as it is), JSON.
    fn detail(&self, v: &Validation) -> Option<String>;
    /// The change sets applied or undone since `since` (unix ms), for `history` and `undo`.
    fn applied(&self, since: i64) -> Result<Vec<FleetApplied>>;
    /// Carries out an operator's undo request on this worker's workspace: the local `undo`
    /// with its checks (`bash::journal::undo`); the paths restored.
    fn undo(&self, job_id: i64) -> Result<Vec<String>>;
    /// Why this worker does not act on a reviewer's approve of `v` (`hooks::reviewer`'s
    /// limits, with what only this worker knows: its protected paths, its human denials, the
    /// egress its runs tried); empty: it may.
    fn reviewer_refusals(&self, v: &Validation) -> Vec<String>;
}

/// Starts the bridge on its own thread; it stops when `stop` is cancelled.
pub fn spawn(
    settings: Settings,
    stores: Arc<Stores>,
    stats: Arc<Stats>,
    local: Arc<dyn Local>,
    stop: CancellationToken,
) -> Result<std::thread::JoinHandle<()>> {
    Ok(std::thread::Builder::new()
        .name("registry".into())
        .spawn(move || run(&settings, &stores, &stats, &local, &stop))?)
}

/// What the bridge's supervisor sees of the session it runs (issue 50, a registry that hangs):
/// whether a pass — the connection included — is under way and since when, and whether the
/// supervisor gave the session up.
#[derive(Default)]
struct Watch {
    /// `time::mono_ms()` when the current pass began; 0 while the session waits for a
    /// notification (no statement is under way then).
    busy_since: AtomicI64,
    /// Set when the supervisor gave the session up (past its deadline, or stopping): a session
    /// that comes back from a hang writes nothing more and ends.
    abandoned: AtomicBool,
}

impl Watch {
    fn begin(&self) {
        self.busy_since
            .store(crate::time::mono_ms().max(1), Ordering::SeqCst);
    }
    fn idle(&self) {
        self.busy_since.store(0, Ordering::SeqCst);
    }
    /// How long the current pass has run (ms); None while idle.
    fn busy_for(&self) -> Option<i64> {
        match self.busy_since.load(Ordering::SeqCst) {
            0 => None,
            t => Some(crate::time::mono_ms().saturating_sub(t)),
        }
    }
    /// Err once the session was given up: checked between the steps of a pass.
    fn live(&self) -> Result<()> {
        if self.abandoned.load(Ordering::SeqCst) {
            bail!("this registry session was given up (past its deadline)");
        }
        Ok(())
    }
}

/// The supervisor: runs one session at a time on a thread of its own and reconnects when it
/// fails — or when a pass outlives `[registry] pass_timeout_ms` (a stopped server or backend
/// answers nothing, and no socket error ever comes): that session is given up, left to end on
/// its own once its socket does, and a new one connects.
fn run(
    s: &Settings,
    stores: &Arc<Stores>,
    stats: &Arc<Stats>,
    local: &Arc<dyn Local>,
    stop: &CancellationToken,
) {
    let mut backoff = Duration::from_millis(200);
    while !stop.is_cancelled() {
        match supervise(s, stores, stats, local, stop) {
            Ok(()) => return,
            Err(e) => {
                // Fail closed: no fleet rule is used until the next successful pull.
                learned::forget();
                evidence::forget();
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

/// One session under its deadline: Ok when stopped, Err when it failed or hung.
fn supervise(
    s: &Settings,
    stores: &Arc<Stores>,
    stats: &Arc<Stats>,
    local: &Arc<dyn Local>,
    stop: &CancellationToken,
) -> Result<()> {
    let deadline = s.pass_timeout_ms.max(100) as i64;
    let watch = Arc::new(Watch::default());
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (s, stores, stats, local, stop, watch) = (
            s.clone(),
            Arc::clone(stores),
            Arc::clone(stats),
            Arc::clone(local),
            stop.clone(),
            Arc::clone(&watch),
        );
        std::thread::Builder::new()
            .name("registry-session".into())
            .spawn(move || {
                let r = session(&s, &stores, &stats, &*local, &stop, &watch);
                let _ = tx.send(r);
            })
            .context("starting the registry session's thread")?;
    }
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => return r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                bail!("the registry session ended without a result (it panicked)")
            }
        }
        match watch.busy_for() {
            Some(ms) if ms > deadline => {
                watch.abandoned.store(true, Ordering::SeqCst);
                bail!(
                    "a pass has not finished after {ms} ms ([registry] pass_timeout_ms = {deadline}): the registry, or this worker's backend, hangs — reconnecting"
                );
            }
            None if stop.is_cancelled() => {
                watch.abandoned.store(true, Ordering::SeqCst);
                return Ok(());
            }
            _ => {}
        }
    }
}

/// One connection's life: returns Ok when stopped, Err when the registry failed.
fn session(
    s: &Settings,
    stores: &Stores,
    stats: &Stats,
    local: &dyn Local,
    stop: &CancellationToken,
    watch: &Watch,
) -> Result<()> {
    watch.begin();
    let mut c = registry::connect(s)?;
    registry::check_version(&mut c)?;
    registry::listen(&mut c)?;
    // Decision rows are written through a connection of their own, as the operator's CLI does:
    // the loop's wake-up compares command_security.db's data_version, which a write through its
    // own connection (`stores.security`) would not move.
    let mut sec = crate::db::open(&stores.data_dir, crate::db::DbKind::Security)?;
    // What the registry already has of each validation (id → status), this connection.
    let mut published: HashMap<String, String> = HashMap::new();
    // What the registry already has of each applied change set (job → undone), this connection.
    let mut applied: HashMap<i64, (i64, Option<i64>)> = HashMap::new();
    let mut since = crate::time::now_ms() - REPUBLISH_MS;
    let poll = Duration::from_millis(s.poll_ms.clamp(50, 60_000));
    // The copy of the fleet's rules must outlive one poll (and a slow pass) to be used at all.
    let fresh_ms = s.learned_fresh_ms.max(2 * poll.as_millis() as u64 + 500);
    loop {
        watch.begin();
        let now = crate::time::now_ms();
        // A registry migrated past this binary's schema while connected (issue 50): nothing is
        // written from this pass on; the session ends and the `registry` problem says why.
        registry::check_version(&mut c)?;
        watch.live()?;
        // A registry restored from a backup (issue 50) before any rule is pulled: its
        // permissive rules stop at once, and what it lost is published again.
        if restore_noticed(&mut c, &sec, stats, s)? {
            published.clear();
            applied.clear();
            since = now - REPUBLISH_MS;
        }
        watch.live()?;
        // The fleet's learned rules first: a revocation made while this worker was cut off
        // is in the copy before the copy is fresh again (`ask::learned`).
        if learned::pull(&mut c, &mut sec, fresh_ms)? {
            tracing::info!("the fleet's learned rules changed (registry)");
        }
        watch.live()?;
        // The fleet's evidence (human decisions counted in the registry, `ask::evidence`).
        if evidence::pull(&mut c, fresh_ms)? {
            tracing::info!("the fleet's evidence changed (registry)");
        }
        watch.live()?;
        sync(
            &mut c,
            &mut sec,
            stores,
            local,
            &mut published,
            since,
            fresh_ms,
            watch,
        )?;
        watch.live()?;
        sync_applied(&mut c, local, &mut applied, since)?;
        watch.live()?;
        undo_requested(&mut c, local)?;
        watch.live()?;
        since = now - 60_000;
        if stats.has_problem(PROBLEM) {
            tracing::info!("the fleet registry is reachable again");
            stats.clear_problem(PROBLEM);
        }
        if stop.is_cancelled() {
            return Ok(());
        }
        watch.idle();
        registry::wait(&mut c, poll)?;
    }
}

/// Checks the registry's epoch (`ask::epoch`) and sets or clears its `status` problem; true
/// when a restore is noticed at this pass (the bridge then publishes everything again).
fn restore_noticed(
    c: &mut registry::Client,
    sec: &rusqlite::Connection,
    stats: &Stats,
    s: &Settings,
) -> Result<bool> {
    let problem = |why: &str| {
        format!(
            "the fleet registry {} went back in time: {why} — check its rules (revoke again what was revoked after the backup), then run `brainloop registry accept-restore` (operator's role); until then its permissive rules (learned signatures, always_allow, hosts, shared grants, the fleet's approvals) are not used, its and this worker's restrictive ones hold, and this worker's requests were published again",
            s.shown_url()
        )
    };
    match epoch::check(c, sec)? {
        epoch::Verdict::NewlyRestored(why) => {
            tracing::warn!(why = %why, "the registry went back in time: its permissive rules are not used until `brainloop registry accept-restore`");
            learned::forget();
            evidence::forget();
            stats.set_problem(epoch::PROBLEM, problem(&why));
            Ok(true)
        }
        epoch::Verdict::StillRestored(why) => {
            stats.set_problem(epoch::PROBLEM, problem(&why));
            Ok(false)
        }
        epoch::Verdict::Accepted => {
            if stats.has_problem(epoch::PROBLEM) {
                tracing::info!(
                    "the operator accepted the registry's restore: its rules are used again"
                );
            }
            stats.clear_problem(epoch::PROBLEM);
            Ok(false)
        }
        epoch::Verdict::Trusted { .. } => {
            stats.clear_problem(epoch::PROBLEM);
            Ok(false)
        }
    }
}

/// One pass: publish what changed, then take the new decisions.
#[allow(clippy::too_many_arguments)]
fn sync(
    c: &mut registry::Client,
    sec: &mut rusqlite::Connection,
    stores: &Stores,
    local: &dyn Local,
    published: &mut HashMap<String, String>,
    since: i64,
    fresh_ms: u64,
    watch: &Watch,
) -> Result<()> {
    let mine = stores.output.with(|o| validations::to_publish(o, since))?;
    let changed: Vec<_> = mine
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
    validations::publish(c, &changed, &sigs, &|v| local.detail(v))?;
    for v in changed {
        published.insert(v.id, v.status);
    }
    if published.len() > 10_000 {
        published.retain(|_, st| st == "pending");
    }
    let decided = validations::undelivered(c)?;
    if !decided.is_empty() {
        // A rule written with a decision (`approve --always`'s override) is in the copy
        // before the decision is taken: the two were committed together.
        learned::pull(c, sec, fresh_ms)?;
    }
    for (d, superseded) in human_first(decided) {
        watch.live()?;
        if let Some(why) = superseded {
            validations::take(sec, c, &d, Some(&why))?;
            tracing::info!(validation_id = %d.row.validation_id, decided_by = %d.row.decided_by, "a reviewer's decision from the registry is superseded by a human's");
            continue;
        }
        // A reviewer's approve (the registry let its role write it) is held to this worker's
        // own limits too: refused, the human is asked.
        let refusals = match (super::By::of(&d.row.decided_by), d.row.decision) {
            (super::By::Reviewer, Some(x)) if x.runs() => {
                match stores
                    .output
                    .with(|o| validations::get(o, &d.row.validation_id))?
                {
                    Some(v) if v.status == "pending" => local.reviewer_refusals(&v),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        let refused = (!refusals.is_empty()).then(|| refusals.join("; "));
        validations::take(sec, c, &d, refused.as_deref())?;
        match &refused {
            None => {
                tracing::info!(validation_id = %d.row.validation_id, decided_by = %d.row.decided_by, "decision taken from the registry")
            }
            Some(why) => {
                tracing::warn!(validation_id = %d.row.validation_id, decided_by = %d.row.decided_by, refused = %why, "a reviewer's approve from the registry is refused here: the human is asked")
            }
        }
    }
    Ok(())
}

/// The decisions not taken yet, in the order they are taken, a human's before a reviewer's on
/// the same validation whatever their ids (issue 49): a reviewer's decision on a validation that
/// also has a human's comes with why it is not acted on (recorded as its delivery's refusal),
/// so a worker back from an outage, finding both, acts on the human's.
fn human_first(
    decided: Vec<validations::FleetDecision>,
) -> Vec<(validations::FleetDecision, Option<String>)> {
    let human: HashMap<String, i64> = decided
        .iter()
        .filter(|d| super::By::of(&d.row.decided_by) == super::By::Human)
        .fold(HashMap::new(), |mut m, d| {
            m.entry(d.row.validation_id.clone()).or_insert(d.id);
            m
        });
    decided
        .into_iter()
        .map(|d| {
            let why = match (super::By::of(&d.row.decided_by), human.get(&d.row.validation_id)) {
                (super::By::Reviewer, Some(h)) => Some(format!(
                    "superseded by the human's decision #{h} on the same validation (a human's decision wins over a reviewer's)"
                )),
                _ => None,
            };
            (d, why)
        })
        .collect()
}

/// Publishes the change sets applied or undone since `since` that the registry has not seen.
fn sync_applied(
    c: &mut registry::Client,
    local: &dyn Local,
    seen: &mut HashMap<i64, (i64, Option<i64>)>,
    since: i64,
) -> Result<()> {
    let list: Vec<FleetApplied> = local
        .applied(since)?
        .into_iter()
        .filter(|a| seen.get(&a.job_id) != Some(&(a.applied_at, a.undone_at)))
        .collect();
    validations::publish_applied(c, &list)?;
    for a in list {
        seen.insert(a.job_id, (a.applied_at, a.undone_at));
    }
    if seen.len() > 10_000 {
        seen.clear();
    }
    Ok(())
}

/// Carries out the operator's undo requests addressed to this worker and records each outcome
/// (the change set's new state is published at the next pass).
fn undo_requested(c: &mut registry::Client, local: &dyn Local) -> Result<()> {
    for r in validations::pending_undos(c)? {
        let (done, outcome) = match local.undo(r.job_id) {
            Ok(paths) => (
                true,
                format!("{} path(s) restored: {}", paths.len(), paths.join(", ")),
            ),
            Err(e) => (false, format!("{e:#}")),
        };
        tracing::info!(job_id = r.job_id, requested_by = %r.requested_by, done, outcome = %outcome, "undo requested through the registry");
        validations::answer_undo(c, r.id, done, &crate::quote::prefix(&outcome, 4000))?;
    }
    Ok(())
}
