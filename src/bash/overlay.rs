//! Effects over commands (DESIGN §5.12), carried out: the overlay run of a capturable command
//! (its byte cap within the client's budget for waiting change sets, its layers under the data
//! dir), the change set captured and shown to `plan::after_run`, then the result at once (no
//! change), the change set applied (learned signatures or an overlay promotion, within
//! `bash::effects`' bounds), or kept for a human; and [`apply`], the one way a change set reaches
//! the workspace (journaled first, nothing re-run).

use super::changes::{self, Manifest};
use super::command::{self, Asked, Cmd, HostAsk, Job};
use super::confined::{self, Egress, Ended, Report};
use super::evidence::Mode;
use super::executor::{self, ExecResult};
use super::plan::{self, Effects, Next, Plan};
use super::record::{self, Happened, Ran};
use super::result;
use super::Outcome;
use crate::db::output::JobStatus;
use crate::egress::job::Scope;
use crate::permset::PermissionSet;
use serde_json::json;
use std::path::PathBuf;

/// This run's byte cap and the key that names it: at most what is left of the client's budget
/// for change sets waiting for a human (issue 18). Err: the client is at or over that budget.
async fn cap(job: &Job<'_>) -> Result<(u64, &'static str), Outcome> {
    let s = &job.settings;
    let pending_bytes = {
        let (dd, client) = (s.data_dir.to_path_buf(), job.client_id.to_string());
        tokio::task::spawn_blocking(move || changes::pending_bytes(&dd, &client))
            .await
            .map_err(|e| Outcome::failed(format!("overlay: {e}")))?
            .map_err(|e| Outcome::failed(format!("overlay: {e:#}")))?
    };
    let budget = s.pending_max_bytes_per_client;
    if pending_bytes >= budget {
        return Err(Outcome::failed(format!(
            "client {} already has {pending_bytes} bytes of change sets waiting for a human, at or over pending_max_bytes_per_client ({budget}); nothing ran — answer or deny its pending validations (`brainloop validations`), or raise pending_max_bytes_per_client",
            job.client_id
        )));
    }
    Ok(if budget - pending_bytes < s.overlay_max_bytes {
        (budget - pending_bytes, "pending_max_bytes_per_client")
    } else {
        (s.overlay_max_bytes, "overlay_max_bytes")
    })
}

/// Runs the command on an overlay of the workspace, then what `after_run` says.
pub(super) async fn run(job: &Job<'_>, cmd: &Cmd<'_>) -> Result<Outcome, Outcome> {
    let (c, s, job_id) = (cmd.c, &job.settings, job.job_id);
    let (max_bytes, cap_key) = cap(job).await?;
    let (upper, work) = {
        let dd = s.data_dir.to_path_buf();
        tokio::task::spawn_blocking(move || changes::create_layers(&dd, job_id))
            .await
            .map_err(|e| Outcome::failed(format!("overlay: {e}")))?
            .map_err(|e| Outcome::failed(format!("cannot create the overlay layers: {e:#}")))?
    };
    let discard = || changes::discard(s.data_dir, job_id);
    let overlay = crate::sandbox::OverlaySpec {
        workspace: cmd.workspace.clone(),
        upper: upper.clone(),
        work,
        max_bytes: Some(max_bytes),
        max_entries: Some(s.overlay_max_inodes),
        over_cap_file: Some(changes::job_dir(s.data_dir, job_id).join(changes::OVER_CAP_FILE)),
    };
    let report = on_overlay(job, cmd, overlay).await;
    let next = plan::after_run(&cmd.plan, &report, None);
    if !next.keeps_layers() {
        discard();
    }
    let r = match &report.ended {
        Ended::Ran(r) => Some(r),
        _ => None,
    };
    if let (true, Some(r)) = (next.records_run(), r) {
        // An overlay run is never evidence: nobody has seen its effects yet.
        let ran = Ran {
            command_hash: &c.report.command_hash,
            facts: &cmd.facts,
            label: &report.label,
            result: r,
            happened: Happened::Unanswered,
            mode: Mode::Overlay,
            permission_set: PermissionSet::Filesystem.as_str(),
        };
        record::run(job, &ran).await;
    }
    match (next, r) {
        (Next::Cancelled, _) => Ok(Outcome::cancelled()),
        (Next::Fail(m), _) => Err(Outcome::failed(m)),
        (Next::OverCap(what), _) => Err(Outcome::failed(result::over_cap_message(
            &what,
            max_bytes,
            cap_key,
            s.overlay_max_inodes,
        ))),
        (Next::AskCommand { force_refused }, _) => {
            // No overlay here (e.g. the data dir's file system cannot hold an upper layer):
            // nothing ran; ask about the command up front, as without the overlay.
            if let Ended::NotRun(n) = &report.ended {
                tracing::warn!(error = n.message, "overlay unavailable; asking up front");
            }
            record::signatures_asked(job, &cmd.sigs, false).await;
            command::ask(job, c, "ask", force_refused, Vec::new(), Asked::Command).await
        }
        (
            Next::AskHosts {
                hosts,
                force_refused,
            },
            Some(r),
        ) => {
            // Approving the hosts re-runs it on the overlay.
            let h = HostAsk::of(hosts, report.connections.clone(), r);
            record::signatures_asked(job, &cmd.sigs, false).await;
            command::ask(job, c, "ask", force_refused, Vec::new(), Asked::Hosts(&h)).await
        }
        (Next::Capture, Some(r)) => captured(job, cmd, &report, r, upper).await,
        (next, _) => {
            discard();
            Err(Outcome::failed(format!(
                "internal error: {next:?} after an overlay run"
            )))
        }
    }
}

/// The confined run on `overlay`, in set `filesystem`.
async fn on_overlay(job: &Job<'_>, cmd: &Cmd<'_>, overlay: crate::sandbox::OverlaySpec) -> Report {
    let c = cmd.c;
    let run = confined::Run {
        command: c.text,
        workdir: c.workdir,
        workspace: &cmd.workspace,
        set: crate::permset::PermissionSet::Filesystem,
        timeout: c.timeout,
        env: executor::filtered_env(|k| std::env::var(k).ok()),
        tag: job.job_id,
        read: Vec::new(),
        stdin: None,
        overlay: Some(overlay),
        leftovers: true,
        // The overlay run reaches only the hosts a human approved for it (issue 23).
        egress: Egress::Job {
            who: job.who(),
            command_hash: &c.report.command_hash,
            scope: Scope::ApprovedOnly,
        },
    };
    confined::run(&job.confinement(), run).await
}

/// Test hooks (only with `test_actions`): `BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS` holds a job between
/// its apply and its result, `BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS` between its overlay run (recorded
/// in the registry) and its validation, so process-level tests can kill the worker there.
async fn test_pause(job: &Job<'_>, var: &str) {
    if !job.settings.test_actions {
        return;
    }
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// The overlay run's change set captured, then applied, returned as is (no change) or kept for
/// a human, as `after_run` says.
async fn captured(
    job: &Job<'_>,
    cmd: &Cmd<'_>,
    report: &Report,
    r: &ExecResult,
    upper: PathBuf,
) -> Result<Outcome, Outcome> {
    let (c, s, job_id) = (cmd.c, &job.settings, job.job_id);
    let discard = || changes::discard(s.data_dir, job_id);
    test_pause(job, "BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS").await;
    let m = match capture(job, cmd, report, r, upper).await {
        Ok(m) => m,
        Err(e) => {
            discard();
            return Err(Outcome::failed(e));
        }
    };
    let effects = effects_of(job, cmd, &m).await;
    match plan::after_run(&cmd.plan, report, Some(&effects)) {
        Next::NoChanges(policy_used) => {
            discard();
            Ok(result::on_overlay(&m, policy_used, json!([]), None))
        }
        Next::Apply(auto) => {
            let texts = m.signatures.clone();
            let out = apply(job, m, auto.as_str()).await;
            if out.is_ok() {
                record::auto_applied(job, texts).await;
            }
            out
        }
        Next::AskEffects {
            reasons,
            force_refused,
        } => {
            let saved = {
                let (dd, m2) = (s.data_dir.to_path_buf(), m.clone());
                tokio::task::spawn_blocking(move || changes::save_manifest(&dd, &m2))
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))
                    .and_then(|r| r)
            };
            if let Err(e) = saved {
                discard();
                return Err(Outcome::failed(format!(
                    "cannot keep the change set: {e:#}"
                )));
            }
            record::signatures_asked(job, &cmd.sigs, true).await;
            command::ask(job, c, "ask", force_refused, reasons, Asked::Effects(&m)).await
        }
        next => {
            discard();
            Err(Outcome::failed(format!(
                "internal error: {next:?} after capturing a change set"
            )))
        }
    }
}

/// Reads the overlay's upper layer against the workspace: the run's manifest. Err: the error.
async fn capture(
    job: &Job<'_>,
    cmd: &Cmd<'_>,
    report: &Report,
    r: &ExecResult,
    upper: PathBuf,
) -> Result<Manifest, String> {
    let c = cmd.c;
    let w = cmd.workspace.clone();
    let cs = tokio::task::spawn_blocking(move || {
        changes::compute(&upper, &w).map(|cs| (cs, changes::upper_bytes(&upper)))
    })
    .await
    .map_err(|e| format!("overlay: {e}"))?;
    let (cs, upper_bytes) = cs.map_err(|e| {
        format!("cannot capture the command's effects, so nothing was applied: {e:#}")
    })?;
    Ok(Manifest {
        job_id: job.job_id,
        command: c.text.to_string(),
        command_hash: c.report.command_hash.clone(),
        effect_hash: changes::effect_hash(&c.report.command_hash, &cs.hash),
        workspace: cmd.workspace.clone(),
        workdir: c.workdir.to_path_buf(),
        exit_code: r.exit_code,
        success: r.success(),
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        truncated: r.truncated,
        duration_ms: r.duration_ms,
        sandbox: report.label.clone(),
        signatures: cmd.sigs.iter().map(|s| s.text.clone()).collect(),
        change_set: cs,
        created_at: crate::time::now_ms(),
        client_id: job.client_id.to_string(),
        upper_bytes,
        signal: r.signal,
        timed_out: r.timed_out,
        timeout_ms: c.timeout.as_millis() as u64,
    })
}

/// What `after_run` reads of a change set: whether it is empty, why learned signatures do not
/// cover it (only looked at when the plan would apply it unasked), the protected paths it
/// touches (`protected::judge`, which reads the workspace's repositories: off the async
/// threads).
async fn effects_of(job: &Job<'_>, cmd: &Cmd<'_>, m: &Manifest) -> Effects {
    use super::{effects, protected};
    let auto = matches!(cmd.plan, Plan::Overlay { auto: Some(_), .. });
    let lists = crate::permset::PathLists {
        protected: job.settings.protected_paths.to_vec(),
        data: job.settings.data_paths.to_vec(),
    };
    let (report, workdir, workspace, cs) = (
        cmd.c.report.clone(),
        cmd.c.workdir.to_path_buf(),
        cmd.workspace.clone(),
        m.change_set.clone(),
    );
    let empty = cs.is_empty();
    let judged = tokio::task::spawn_blocking(move || {
        let t = protected::Table::shared(&lists)?;
        let j = protected::judge(&t, &cs, &workspace, Some((&report, &workdir)));
        let auto_refusals = if auto {
            effects::auto_apply_refusals(&report, &workdir, &workspace, &cs, &j)
        } else {
            Vec::new()
        };
        anyhow::Ok((auto_refusals, j.reasons()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))
    .and_then(|r| r);
    let (auto_refusals, protected) = match judged {
        Ok(r) => r,
        Err(e) => {
            let why = vec![format!("the protected-path table is unusable: {e:#}")];
            (why.clone(), why)
        }
    };
    Effects {
        empty,
        auto_refusals,
        protected,
    }
}

/// Applies a change set to the real workspace (refused on conflict), journals it, and removes
/// its overlay layers. Nothing is re-run.
pub(super) async fn apply(
    job: &Job<'_>,
    m: Manifest,
    policy_used: &str,
) -> Result<Outcome, Outcome> {
    let data_dir = job.settings.data_dir.to_path_buf();
    let job_id = job.job_id;
    let applied = {
        let (dd, m2) = (data_dir.clone(), m.clone());
        tokio::task::spawn_blocking(move || changes::apply(&dd, &m2))
            .await
            .map_err(|e| Outcome::failed(format!("apply: {e}")))?
    };
    let journal = match applied {
        Ok(j) => j,
        Err(e) => {
            changes::discard(&data_dir, job_id);
            let msg = format!("{e:#}");
            return Err(Outcome {
                status: JobStatus::Failed,
                result: Some(json!({
                    "status": "conflict",
                    "command": m.command,
                    "policy_used": policy_used,
                    "effects": result::effects_json(&m),
                    "applied": [],
                    "error": msg,
                })),
                error: Some(msg),
            });
        }
    };
    journal_row(job, &m, policy_used, &journal).await;
    // The change set stays until the job's final result is committed (swept at start-up and by
    // the retention pass): a crash before that commit asks again, and the approved re-ask must
    // find this manifest to resume the apply — without it the command would run again on the
    // already-changed workspace and its effect be applied twice (found by scripts/soak.sh).
    test_pause(job, "BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS").await;
    let paths = m.change_set.paths_json();
    Ok(result::on_overlay(
        &m,
        policy_used,
        paths,
        Some(format!("brainloop undo {job_id}")),
    ))
}

/// The `journal` row of an applied change set (`brainloop undo` reads it; the entries are also
/// in `journal/<job>/entries.json`).
async fn journal_row(job: &Job<'_>, m: &Manifest, policy_used: &str, journal: &changes::Journal) {
    let job_id = job.job_id;
    let entries = serde_json::to_string(&journal.entries).unwrap_or_else(|_| "[]".into());
    let applied = crate::bash::journal::Applied {
        job_id,
        command: m.command.clone(),
        workspace: m.workspace.display().to_string(),
        policy_used: policy_used.to_string(),
        summary: m.change_set.summary(),
        entries,
    };
    let now = crate::time::now_ms();
    let stored = job
        .stores
        .security
        .call(move |c| crate::bash::journal::record(c, &applied, now))
        .await;
    if let Err(e) = stored {
        tracing::error!(
            error = format!("{e:#}"),
            job_id,
            "applied, but cannot record the journal row (journal/{job_id}/entries.json has it)"
        );
    }
}
