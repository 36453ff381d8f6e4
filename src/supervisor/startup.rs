//! Start-up, before the loop: the open-file limit raised ([`raise_nofile`]), the background
//! tasks (heartbeat, recorder, watchdog, retention, result writer, LLM model check, hooks), the
//! recovery of the previous run (its leftover processes, private tmp dirs, egress socket dirs
//! and cgroups, its claims, its finished change sets), the ready
//! queue that recovery refills, then `READY`. The order is the one the drain undoes
//! (`drain.rs`): the recorder and the heartbeat start first so start-up's own events and state
//! are recorded, and stop last.

use super::ready::{Job, ReadyQueue};
use super::{event, finisher, recorder, recovery, wakeup, Loop};
use crate::actions::Registry;
use crate::config::Config;
use crate::db::{lifecycle, Stores};
use crate::stats::{Stats, WorkerState};
use crate::{heartbeat, retention, systemd};
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// What runs beside the loop, for the drain to stop in order.
pub(super) struct Background {
    /// The worker state the heartbeat reports.
    pub state: watch::Sender<WorkerState>,
    pub heartbeat: JoinHandle<()>,
    /// Stops the watchdog, retention, the LLM model check and the hooks.
    pub background: CancellationToken,
    pub recorder_stop: CancellationToken,
    pub recorder: JoinHandle<()>,
    /// The result writer (its sender is the loop's `fin_tx`).
    pub finisher: JoinHandle<()>,
    pub watcher: wakeup::InputWatcher,
    /// Kept for the worker's lifetime (dropping it does not stop the hooks; `background` does).
    pub _hooks: Option<JoinHandle<()>>,
}

/// A started worker: the loop's job bookkeeping, where its first claim starts, what runs beside.
pub(super) struct Started {
    pub jobs: Loop,
    /// lifecycle.db's high-water mark after recovery.
    pub hwm: i64,
    pub background: Background,
}

/// Starts the worker up to `READY`. An error (recovery failed) stops the worker before it
/// claims anything.
pub(super) async fn start(
    config: Arc<Config>,
    stores: Arc<Stores>,
    registry: Arc<Registry>,
    sandbox: Arc<crate::sandbox::detect::Level>,
    shutdown: &crate::shutdown::Shutdown,
) -> Result<Started> {
    raise_nofile();
    let stats = Arc::new(Stats::default());
    stats.tick();
    let (state, state_rx) = watch::channel(WorkerState::Starting);
    let heartbeat = tokio::spawn(heartbeat::run(
        Arc::clone(&stores),
        Arc::clone(&stats),
        Arc::clone(&config),
        sandbox.status_line(),
        state_rx,
    ));
    let background = CancellationToken::new();
    let recorder_stop = CancellationToken::new();
    let recorder = recorder::spawn(Arc::clone(&stores), recorder_stop.clone());
    systemd::spawn_watchdog(
        Arc::clone(&stats),
        Duration::from_millis(config.poll_fallback_ms),
        background.clone(),
    );
    startup_event(&config, &stores).await;

    replay_spool(&stores).await?;
    let ready = recover(&config, &stores, &registry, &stats).await?;
    check_signature_examples(&stores).await;
    let hwm = stores.lifecycle.with(|c| lifecycle::high_water_mark(c))?;

    let watcher = wakeup::InputWatcher::start(&config.data_dir);
    tokio::spawn(retention::run(
        Arc::clone(&stores),
        Arc::clone(&config),
        background.clone(),
    ));
    let (fin_tx, finisher) =
        finisher::spawn(Arc::clone(&stores), Arc::clone(&stats), shutdown.clone());

    announce_ready(&config, &state, &watcher, hwm);

    // The LLM client: without a key it still exists and LLM actions fail with a clear error.
    let llm = Arc::new(crate::llm::Llm::from_env(
        &config.llm,
        Some(Arc::clone(&stores.lifecycle)),
    ));
    for w in llm.reasoning_warnings() {
        tracing::warn!("{w}");
    }
    spawn_model_check(&llm, &stores, &background, config.llm.check_models);

    // `[notify]` / `[reviewer]`: off the dispatch path (issue 22).
    let hooks = crate::hooks::spawn(
        Arc::new(config.hooks()),
        Arc::clone(&stores),
        Arc::clone(&sandbox),
        background.clone(),
    );

    // `[registry]`: the bridge to the fleet's operator queue (issue 37), on its own thread.
    if let Some(reg) = &config.registry {
        // The project whose registry rules apply here: the one this worker registers as.
        crate::ask::learned::set_project(&config.horos_name);
        // The restrictive rules of the copy saved by the last pull, before any job runs: a
        // worker restarted while the registry is down still refuses what the fleet forbade.
        let kept = stores
            .security
            .call(|c| crate::ask::learned::load(c))
            .await?;
        // A registry restore noticed before this restart and not accepted yet still holds
        // (issue 50): none of its permissive rules is used from the first job on.
        if stores.security.call(|c| crate::ask::epoch::load(c)).await? {
            tracing::warn!("the fleet registry was restored from a backup and the operator has not accepted it yet (`brainloop registry accept-restore`): its permissive rules are not used");
        }
        if kept > 0 {
            tracing::info!(
                rules = kept,
                "the fleet's restrictive rules restored from the saved copy until the registry's next pull"
            );
        }
        let local = Arc::new(super::fleet_local::FleetLocal {
            stores: Arc::clone(&stores),
            paths: config.hooks().paths,
        });
        crate::ask::fleet::spawn(
            reg.clone(),
            Arc::clone(&stores),
            Arc::clone(&stats),
            local,
            background.clone(),
        )
        .context("starting the registry bridge")?;
    }

    let jobs = Loop {
        llm,
        config,
        stores,
        registry,
        stats,
        sandbox,
        tasks: JoinSet::new(),
        running: HashMap::new(),
        fin_tx,
        job_cancel: CancellationToken::new(),
        approved: HashMap::new(),
        ready,
        start_log: crate::stats::Every::default(),
        cancelling: Default::default(),
        ended: Default::default(),
        withdrawn: 0,
    };
    Ok(Started {
        jobs,
        hwm,
        background: Background {
            state,
            heartbeat,
            background,
            recorder_stop,
            recorder,
            finisher,
            watcher,
            _hooks: hooks,
        },
    })
}

/// Records the `startup` event (this process, its version and worker id).
async fn startup_event(config: &Config, stores: &Arc<Stores>) {
    let detail = json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "worker_id": config.worker_id(),
        "concurrency": config.concurrency,
    });
    event(stores, "startup", None, detail).await;
}

/// `READY`: the heartbeat's state, horos, systemd and the log line.
fn announce_ready(
    config: &Config,
    state: &watch::Sender<WorkerState>,
    watcher: &wakeup::InputWatcher,
    hwm: i64,
) {
    let _ = state.send(WorkerState::Running);
    crate::horos::register(&config.horos(), "running");
    systemd::ready("running");
    tracing::info!(
        data_dir = %config.data_dir.display(),
        concurrency = config.concurrency,
        slots_per_client = config.slots_per_client(),
        watching = watcher.is_watching(),
        poll_fallback_ms = config.poll_fallback_ms,
        high_water_mark = hwm,
        "brainloop worker ready"
    );
}

/// The recovery of the previous run: what it left running or on disk, then its claims (their
/// jobs fill the ready queue returned), then its finished change sets.
/// Replays the results the last shutdown spooled (`spool`) into output.db and lifecycle.db,
/// before recovery reads them and before anything is claimed; an error stops the start-up.
async fn replay_spool(stores: &Arc<Stores>) -> Result<()> {
    let st = Arc::clone(stores);
    let rows = tokio::task::spawn_blocking(move || {
        super::spool::replay(&st.data_dir, |g| finisher::write_group(&st, g))
    })
    .await
    .context("the spool replay task panicked")??;
    if rows > 0 {
        tracing::info!(
            rows,
            "replayed the results spooled at the last shutdown into output.db"
        );
        let detail = json!({"rows": rows});
        event(stores, "results_spool_replayed", None, detail).await;
    }
    Ok(())
}

async fn recover(
    config: &Arc<Config>,
    stores: &Arc<Stores>,
    registry: &Arc<Registry>,
    stats: &Stats,
) -> Result<ReadyQueue> {
    remove_leftovers(config).await?;
    let st = Arc::clone(stores);
    let reg = Arc::clone(registry);
    let (max_attempts, ttl) = (config.max_attempts, config.validation_ttl_ms);
    let rec = tokio::task::spawn_blocking(move || recovery::recover(&st, &reg, max_attempts, ttl))
        .await
        .context("recovery task panicked")?
        .context("start-up recovery failed")?;
    sweep_change_sets(config, stores).await;
    let now = crate::time::mono_ms();
    let mut ready = ReadyQueue::new(config.slots_per_client());
    for c in &rec.requeue {
        let not_before = c.not_before.map(crate::time::mono_deadline);
        ready.push(Job::new(c.id, c.priority, &c.client_id), not_before, now);
    }
    // A re-ask is a request to a human like any other (`ask::answers::reask`).
    stats.incr("hil_requests", rec.asked_again as f64);
    if rec.requeued
        + rec.interrupted
        + rec.already_done
        + rec.asked_again
        + rec.finished_applies
        + rec.cancelled
        > 0
    {
        tracing::info!(
            requeued = rec.requeued,
            retried_after_crash = rec.retried_after_crash,
            interrupted = rec.interrupted,
            already_done = rec.already_done,
            asked_again = rec.asked_again,
            finished_applies = rec.finished_applies,
            cancelled = rec.cancelled,
            "recovered the previous run's jobs"
        );
        event(stores, "recovery", None, json!(rec)).await;
    }
    Ok(ready)
}

/// The soft RLIMIT_NOFILE raised to the hard limit (systemd's default soft limit is 1,024; every
/// egress connection holds two descriptors of the worker), the figure logged. Commands get
/// their own limit from the sandbox helper (`[sandbox.limits] max_open_files`).
pub(super) fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            return;
        }
    };
    if soft >= hard {
        tracing::info!(open_files = soft, "open-file limit (soft = hard)");
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => tracing::info!(
            open_files = hard,
            was = soft,
            "raised the open-file limit to the hard limit"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            open_files = soft,
            hard,
            "cannot raise the open-file limit; set LimitNOFILE= in the unit"
        ),
    }
}

/// Kills the commands the previous run left running, removes its private tmp dirs, its egress
/// socket dirs (and makes this run's) and the job cgroups of workers no longer running.
async fn remove_leftovers(config: &Config) -> Result<()> {
    let dd = config.data_dir.clone();
    let (killed, swept, cgroups, sockdir) = tokio::task::spawn_blocking(move || {
        let killed = crate::bash::leftovers::reap_previous(&dd);
        let swept = crate::sandbox::sweep_private_tmp(&dd);
        let sockdir = crate::egress::sockdir::prepare(&dd);
        (killed, swept, crate::sandbox::cgroup::sweep_dead(), sockdir)
    })
    .await
    .context("recovery task panicked")?;
    let (dir, swept_sockets) = sockdir?;
    tracing::info!(dir = %dir.display(), removed_leftovers = swept_sockets, "egress proxy socket directory");
    if cgroups > 0 {
        tracing::info!(
            cgroups,
            "removed job cgroups left by workers no longer running"
        );
    }
    if swept > 0 {
        tracing::info!(
            dirs = swept,
            "removed private tmp dirs left by the previous run"
        );
    }
    if killed > 0 {
        tracing::warn!(
            processes = killed,
            "killed commands left running by the previous run"
        );
    }
    Ok(())
}

/// The learned rules load: each learned signature's approved examples are re-signed with this
/// classifier (`bash::explain::check`); one that no longer signs the same is suspended (its
/// commands ask again) and logged as a warning (`status` and `signatures` show it too).
async fn check_signature_examples(stores: &Arc<Stores>) {
    let st = Arc::clone(stores);
    let checked = tokio::task::spawn_blocking(move || {
        st.security
            .with(|c| crate::bash::explain::check(c, crate::time::now_ms()))
    })
    .await;
    match checked {
        Ok(Ok(list)) => {
            for c in list.iter().filter(|c| c.suspended.is_some()) {
                tracing::warn!(
                    client = %c.client_id,
                    signature = %c.signature,
                    why = c.suspended.as_deref().unwrap_or_default(),
                    "learned signature suspended: its approved example no longer signs as it (the classifier changed); its commands ask again"
                );
            }
            if !list.is_empty() {
                tracing::info!(
                    checked = list.len(),
                    suspended = list.iter().filter(|c| c.suspended.is_some()).count(),
                    "approved examples of learned signatures re-signed"
                );
            }
        }
        Ok(Err(e)) => tracing::warn!(
            error = format!("{e:#}"),
            "cannot check the learned signatures' examples"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot check the learned signatures' examples"),
    }
}

/// Change sets of jobs that ended (denied or expired while the worker was down, or applied
/// before a crash cut the clean-up) are discarded; waiting ones survive the restart.
async fn sweep_change_sets(config: &Config, stores: &Arc<Stores>) {
    let (st, dd) = (Arc::clone(stores), config.data_dir.clone());
    let swept = tokio::task::spawn_blocking(move || {
        crate::bash::changes::sweep_finished(&dd, |ids| {
            st.output.with(|c| crate::db::output::finals_among(c, ids))
        })
    })
    .await;
    if let Ok(Ok(n)) = swept {
        if n > 0 {
            tracing::info!(change_sets = n, "discarded change sets of finished jobs");
        }
    }
}

/// Checks the configured models in the background when asked to (`llm.check_models`) or when
/// no key is available, and records what it found (`llm_check`).
fn spawn_model_check(
    llm: &Arc<crate::llm::Llm>,
    stores: &Arc<Stores>,
    stop: &CancellationToken,
    check: bool,
) {
    let (llm, stores, stop) = (Arc::clone(llm), Arc::clone(stores), stop.clone());
    tokio::spawn(async move {
        let report = if check || llm.available().is_err() {
            llm.check_models(&stop).await
        } else {
            return;
        };
        event(&stores, "llm_check", None, json!(report)).await;
    });
}
