//! Effects over commands (DESIGN §5.12), carried out: the overlay run of a capturable command
//! (its byte cap within the client's budget for waiting change sets, its layers under the data
//! dir), the change set captured and shown to `plan::after_run`, then the result at once (no
//! change), the change set applied (learned signatures or an overlay promotion, within
//! `bash::effects`' bounds), or kept for a human; and [`apply_recorded`], the one way a change set
//! reaches the workspace (recorded `applying` in `db::applies` before the first byte, journaled,
//! `applied` with the job's outcome after; nothing re-run), whose record [`recover_apply`]
//! finishes a job from after a crash — never asking again about what is in the workspace.

use super::changes::{self, Manifest};
use super::command::{self, Asked, Cmd, HostAsk, Job};
use super::confined::{self, Egress, Ended, Report};
use super::evidence::Mode;
use super::executor::{self, ExecResult};
use super::journal;
use super::plan::{self, Effects, Next, Plan};
use super::record::{self, Happened, Ran};
use super::result;
use super::Outcome;
use crate::db::applies;
use crate::db::output::JobStatus;
use crate::db::Stores;
use crate::egress::job::Scope;
use crate::permset::PermissionSet;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

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
    let s = &job.settings;
    // Build output and caches go to the client's runner cache, not the workspace (`runners`).
    let (env, cache) = super::runners::for_overlay(
        executor::filtered_env(|k| std::env::var(k).ok()),
        s.data_dir,
        job.client_id,
        &cmd.workspace,
        &s.sandbox.toolchains,
    );
    let run = confined::Run {
        command: c.text,
        workdir: c.workdir,
        workspace: &cmd.workspace,
        set: crate::permset::PermissionSet::Filesystem,
        timeout: c.timeout,
        env,
        tag: job.job_id,
        read: s.sandbox.toolchains.clone(),
        write: cache.into_iter().collect(),
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

/// Test hooks (only with `test_actions`, like every `BRAINLOOP_TEST_*` knob): a pause of that
/// many milliseconds so process-level tests can kill the worker there —
/// `BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS` between a job's overlay run (recorded in the registry) and
/// its validation; `BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS` between an approval (or an automatic
/// apply's decision) and the apply's `applying` record (nothing applied yet);
/// `BRAINLOOP_TEST_PAUSE_MID_APPLY_MS` after the first path of the change set was written, before
/// the rest; `BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS` between the applied change set and the job's
/// result. Each pause is logged with the knob's name.
async fn test_pause(job: &Job<'_>, var: &'static str) {
    if let Some(ms) = test_ms(job, var) {
        tracing::info!(
            hook = var,
            ms,
            job_id = job.job_id,
            "test hook: holding the job"
        );
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

fn test_ms(job: &Job<'_>, var: &str) -> Option<u64> {
    test_knob(job.settings.test_actions, var)
}

/// The milliseconds of the test hook `var` ([`test_pause`]'s knobs), only with `test_actions`;
/// another action's apply (`generate_file`) holds on the same knobs.
pub fn test_knob(test_actions: bool, var: &str) -> Option<u64> {
    if !test_actions {
        return None;
    }
    std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok())
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
        action: None,
        result: None,
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

/// Applies a change set to the real workspace (refused on conflict), journals it, and keeps its
/// overlay layers until the job's result is committed. Nothing is re-run. The work is
/// [`apply_recorded`], on the blocking pool.
pub(super) async fn apply(
    job: &Job<'_>,
    m: Manifest,
    policy_used: &str,
) -> Result<Outcome, Outcome> {
    test_pause(job, "BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS").await;
    let mid = test_ms(job, "BRAINLOOP_TEST_PAUSE_MID_APPLY_MS");
    let (stores, policy, job_id) = (Arc::clone(job.stores), policy_used.to_string(), job.job_id);
    let validation = job.approval.as_ref().map(|a| a.validation_id.clone());
    let out = tokio::task::spawn_blocking(move || {
        let mut hold = |n: usize| {
            if let (1, Some(ms)) = (n, mid) {
                let hook = "BRAINLOOP_TEST_PAUSE_MID_APPLY_MS";
                tracing::info!(
                    hook,
                    ms,
                    job_id,
                    "test hook: holding the apply after its first path"
                );
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
        };
        apply_recorded(&stores, &m, &policy, validation.as_deref(), &mut hold)
    })
    .await
    .map_err(|e| Outcome::failed(format!("apply: {e}")))?;
    // The change set stays until the job's final result is committed (swept at start-up and by
    // the retention pass): a crash before that commit finds it, with the apply's record in
    // `db::applies`, and [`recover_apply`] finishes the job from them — without the manifest
    // the command would run again on the already-changed workspace and its effect be applied
    // twice (found by scripts/soak.sh).
    if out.is_ok() {
        test_pause(job, "BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS").await;
    }
    out
}

/// The one way a change set reaches the workspace (blocking): `applying` committed durably in
/// `db::applies` before the first byte, the resumable apply (`changes::apply_with`: the journal
/// of previous contents, then the `journal` row `applying` — both before the first byte —, then
/// `written` after each path), the row `applied`, then `applies` `applied` with the outcome the
/// job ends with. An apply that stops on any error (a conflict before the first byte, or disk
/// full, a permission, any I/O error half-way) ends in [`failed_apply`]: the result names what
/// landed, what did not and why, and the journal row lets `undo` take back what landed. A crash
/// anywhere in between leaves a record [`recover_apply`] finishes from.
pub fn apply_recorded(
    stores: &Stores,
    m: &Manifest,
    policy_used: &str,
    validation_id: Option<&str>,
    written: &mut dyn FnMut(usize),
) -> Result<Outcome, Outcome> {
    let (data_dir, job_id, effect) = (&stores.data_dir, m.job_id, m.effect_hash.as_str());
    let began = stores.lifecycle.with(|c| {
        applies::begin(
            c,
            job_id,
            effect,
            validation_id,
            policy_used,
            crate::time::now_ms(),
        )
    });
    if let Err(e) = began {
        changes::discard(data_dir, job_id);
        return Err(Outcome::failed(format!(
            "cannot record the apply in the lifecycle database, so nothing was applied: {e:#} — make the data dir writable, then submit the job again"
        )));
    }
    let row = |j: &changes::Journal, state: &'static str, paths: Option<String>| {
        journal_row(stores, m, policy_used, validation_id, j, state, paths)
    };
    let applied = changes::apply_with(
        data_dir,
        m,
        &mut |j| {
            row(j, journal::state::APPLYING, None)
                .map_err(|e| e.context("cannot record the journal row, so nothing was applied"))
        },
        written,
    );
    let journal = match applied {
        Ok(j) => j,
        Err(f) => return Err(failed_apply(stores, m, policy_used, validation_id, f)),
    };
    if let Err(e) = row(&journal, journal::state::APPLIED, None) {
        tracing::error!(
            error = format!("{e:#}"),
            job_id,
            "applied, but cannot record the journal row as applied (journal/{job_id}/entries.json has it)"
        );
    }
    let out = result::on_overlay(
        m,
        policy_used,
        m.change_set.paths_json(),
        Some(format!("brainloop undo {job_id}")),
    );
    let stored = applies::encode_outcome(&out);
    let now = crate::time::now_ms();
    if let Err(e) = stores
        .lifecycle
        .with(|c| applies::applied(c, job_id, effect, &stored, now))
    {
        // Still `applying`: a crash before the result completes the apply again (a no-op).
        tracing::error!(
            error = format!("{e:#}"),
            job_id,
            "applied, but cannot record it as applied"
        );
    }
    Ok(out)
}

/// The outcome of an apply that stopped (`f`): the change set discarded; the journal row
/// `partial` with the paths that landed (or removed when none did: nothing to undo); the
/// apply's record `failed`; the job `failed` with a result naming what was applied, what was not
/// and why — `"status": "conflict"` only for a refusal before the first byte.
fn failed_apply(
    stores: &Stores,
    m: &Manifest,
    policy_used: &str,
    validation_id: Option<&str>,
    f: changes::ApplyError,
) -> Outcome {
    let (data_dir, job_id) = (&stores.data_dir, m.job_id);
    changes::discard(data_dir, job_id);
    let cs = &m.change_set.changes;
    let landed: std::collections::BTreeSet<usize> = f.landed.iter().copied().collect();
    let list = |on: bool| -> Vec<serde_json::Value> {
        (0..cs.len())
            .filter(|i| landed.contains(i) == on)
            .map(|i| json!({"path": cs[i].path, "kind": cs[i].kind}))
            .collect()
    };
    let (applied, not_applied) = (list(true), list(false));
    let why = format!("{:#}", f.error);
    let kept = match (&f.journal, landed.is_empty()) {
        (_, true) => stores.security.with(|c| journal::forget(c, job_id)),
        (Some(j), false) => {
            let paths: Vec<&str> = landed.iter().map(|&i| cs[i].path.as_str()).collect();
            let paths = serde_json::to_string(&paths).unwrap_or_else(|_| "[]".into());
            journal_row(
                stores,
                m,
                policy_used,
                validation_id,
                j,
                journal::state::PARTIAL,
                Some(paths),
            )
        }
        (None, false) => Err(anyhow::anyhow!("no journal of the paths that landed")),
    };
    if let Err(e) = kept {
        tracing::error!(
            error = format!("{e:#}"),
            job_id,
            "cannot record how far the stopped apply got"
        );
    }
    let msg = if landed.is_empty() {
        why.clone()
    } else {
        format!(
            "the apply stopped after {} of {} path(s): {why} — the paths in `applied` are in the workspace, those in `not_applied` are not; `brainloop undo {job_id}` takes back the applied part",
            landed.len(),
            cs.len()
        )
    };
    let now = crate::time::now_ms();
    let effect = m.effect_hash.as_str();
    if let Err(e) = stores
        .lifecycle
        .with(|c| applies::failed(c, job_id, effect, &msg, now))
    {
        tracing::warn!(
            error = format!("{e:#}"),
            job_id,
            "cannot record the stopped apply"
        );
    }
    let status = if f.conflict && landed.is_empty() {
        "conflict"
    } else {
        "apply_failed"
    };
    let mut result = json!({
        "status": status,
        "command": m.command,
        "policy_used": policy_used,
        "effects": result::effects_json(m),
        "applied": applied,
        "not_applied": not_applied,
        "error": msg,
    });
    if !landed.is_empty() {
        result["undo"] = json!(format!("brainloop undo {job_id}"));
    }
    Outcome {
        status: JobStatus::Failed,
        result: Some(result),
        error: Some(msg),
    }
}

/// Start-up recovery's answer for an `execute_bash` job the worker stopped in (no final result):
/// the outcome of its journaled apply, saying what happened in `recovered` — an `applied` change
/// set ends the job with the outcome stored with it; an `applying` one is completed now (the
/// resumed apply: paths already written are kept, the rest written; nothing re-run) or, refused,
/// reported; one the operator undid meanwhile (`brainloop undo`) is not applied again. Never a
/// new request to a human: a denial cannot take back what is in the workspace. None: the job
/// has no apply that may have reached the workspace. Err: a database could not be read.
pub fn recover_apply(stores: &Stores, job_id: i64) -> anyhow::Result<Option<Outcome>> {
    let Some(a) = stores.lifecycle.with(|c| applies::open_of(c, job_id))? else {
        return Ok(None);
    };
    let undone = stores
        .security
        .with(|c| journal::for_undo(c, job_id))?
        .and_then(|(_, _, undone)| undone);
    let by = a
        .validation_id
        .as_deref()
        .map(|v| format!(" (approved in validation {v})"))
        .unwrap_or_default();
    let undone_note = |t: i64| {
        format!("; it was undone at {t} (`brainloop undo`) while the worker was stopped, and not applied again")
    };
    if a.applied() {
        if let Some(mut out) = a.outcome() {
            let mut said = format!("the change set{by} was applied before the worker stopped; this result was completed at restart and nothing ran again");
            if let Some(t) = undone {
                said.push_str(&undone_note(t));
            }
            say(&mut out, said);
            return Ok(Some(out));
        }
    }
    let m = changes::load_manifest(&stores.data_dir, job_id)
        .ok()
        .flatten()
        .filter(|m| m.effect_hash == a.effect_hash);
    let Some(m) = m else {
        let landed = settle_cut_off(stores, job_id);
        let msg = format!(
            "the worker stopped while applying the change set{by}, and its record is gone, so the apply cannot be completed at restart: {landed} (`brainloop show {job_id}`; previous contents in the data dir's journal/{job_id}/)"
        );
        let mut out = Outcome::failed(msg.clone());
        say(&mut out, msg);
        return Ok(Some(out));
    };
    if let Some(t) = undone {
        let mut out = result::on_overlay(&m, &a.policy_used, m.change_set.paths_json(), None);
        say(
            &mut out,
            format!(
                "the change set{by} was applied before the worker stopped{}",
                undone_note(t)
            ),
        );
        return Ok(Some(out));
    }
    let out = apply_recorded(
        stores,
        &m,
        &a.policy_used,
        a.validation_id.as_deref(),
        &mut |_| {},
    );
    Ok(Some(match out {
        Ok(mut out) => {
            say(&mut out, format!("the worker stopped while applying the change set{by}; the apply was completed at restart and nothing ran again"));
            out
        }
        Err(mut out) => {
            let why = out.error.clone().unwrap_or_default();
            let msg = format!("the worker stopped while applying the change set{by}; completing the apply at restart was refused ({why}); previous contents in the data dir's journal/{job_id}/");
            out.error = Some(msg.clone());
            say(&mut out, msg);
            out
        }
    }))
}

/// An apply cut off by a stop whose change set is gone at restart: its temp files removed and
/// its journal row (`applying`) made `partial` with the paths that landed, so `undo` takes them
/// back; what to say about them.
fn settle_cut_off(stores: &Stores, job_id: i64) -> String {
    let data_dir = &stores.data_dir;
    if let Err(e) = changes::remove_temps(data_dir, job_id) {
        tracing::warn!(
            error = format!("{e:#}"),
            job_id,
            "cannot remove the temp files of the cut-off apply"
        );
    }
    let j = match changes::load_journal(data_dir, job_id) {
        Ok(Some(j)) => j,
        Ok(None) => return "nothing of it reached the workspace (no journal was written)".into(),
        Err(e) => {
            return format!("part of it may be in the workspace (its journal is unreadable: {e:#})")
        }
    };
    let landed = match changes::landed_in(&j) {
        Ok(l) => l,
        Err(e) => return format!("part of it may be in the workspace ({e:#})"),
    };
    let paths = serde_json::to_string(&landed).unwrap_or_else(|_| "[]".into());
    let state = if landed.len() == j.entries.len() {
        journal::state::APPLIED
    } else {
        journal::state::PARTIAL
    };
    let settled = stores.security.with(|c| {
        if landed.is_empty() {
            journal::forget(c, job_id)
        } else {
            journal::settle(c, job_id, state, Some(&paths))
        }
    });
    if let Err(e) = settled {
        tracing::warn!(
            error = format!("{e:#}"),
            job_id,
            "cannot record how far the cut-off apply got"
        );
    }
    match landed.len() {
        0 => "nothing of it reached the workspace".into(),
        n => format!(
            "{n} of {} path(s) reached the workspace ({}); `brainloop undo {job_id}` takes them back",
            j.entries.len(),
            crate::quote::prefix(&landed.join(", "), 500)
        ),
    }
}

/// Adds what recovery did to an outcome's result (`recovered`).
fn say(out: &mut Outcome, said: String) {
    match out.result.as_mut().and_then(|r| r.as_object_mut()) {
        Some(r) => {
            r.insert("recovered".into(), json!(said));
        }
        None => out.result = Some(json!({ "recovered": said })),
    }
}

/// The `journal` row of a change set in `state` (`bash::journal::state`: written `applying`
/// before the apply's first byte, then `applied` or `partial` with the paths that landed):
/// `brainloop undo` reads it (the entries are also in `journal/<job>/entries.json`), with what
/// `show` and `history` audit: the diff, the validation and who or what decided.
fn journal_row(
    stores: &Stores,
    m: &Manifest,
    policy_used: &str,
    validation_id: Option<&str>,
    journal: &changes::Journal,
    state: &'static str,
    applied_paths: Option<String>,
) -> anyhow::Result<()> {
    let job_id = m.job_id;
    let entries = serde_json::to_string(&journal.entries)?;
    let decided_by = match validation_id {
        Some(v) => stores
            .security
            .with(|c| crate::ask::validations::decisions_of(c, v))
            .ok()
            .and_then(|ds| {
                // The first decision that runs is the one the worker consumed.
                ds.into_iter()
                    .find(|d| d.decision.is_some_and(|d| d.runs()))
            })
            .map(|a| a.decided_by)
            .unwrap_or_else(|| format!("the approval of validation {v}")),
        None => match policy_used {
            "signature_learned" => format!(
                "worker: every signature learned ({})",
                m.signatures.join(" | ")
            ),
            "promoted" => "worker: the client's overlay promotion".to_string(),
            "auto_grant" => "worker: the client's FILE_WRITE auto grant".to_string(),
            p => format!("worker: {p}"),
        },
    };
    let summary = match (state, &applied_paths) {
        (journal::state::PARTIAL, Some(p)) => {
            let n = serde_json::from_str::<Vec<String>>(p).map_or(0, |v| v.len());
            format!(
                "partly applied, {n} of {} path(s) (the apply stopped on an error): {}",
                m.change_set.changes.len(),
                m.change_set.summary()
            )
        }
        _ => m.change_set.summary(),
    };
    let applied = journal::Applied {
        job_id,
        command: m.command.clone(),
        workspace: m.workspace.display().to_string(),
        policy_used: policy_used.to_string(),
        summary,
        entries,
        diff: m.change_set.diff(),
        validation_id: validation_id.map(str::to_string),
        decided_by,
        state,
        applied_paths,
    };
    let now = crate::time::now_ms();
    stores.security.with(|c| journal::record(c, &applied, now))
}
