//! What a human's answer about a command means for the command path (issue 32: the action's
//! `on_decision`, called by `ask::answers::collect` for `execute_bash` jobs and for the jobs that
//! run commands on their behalf — `run_code`, `loop`): the registry override of
//! `approve --always` / `--never` / `--always-ask`, the decision counted toward the job's
//! operation signatures, `approve --learn`, a denial as evidence, and the change set discarded
//! when it will never be applied (denied or expired). Only a human's decision teaches: a
//! reviewer's (`ask::By::Reviewer`) sets overrides it was allowed but counts nothing.

use crate::ask::answers::{Answer, Answered};
use crate::ask::validations::{Decision, Validation};
use crate::ask::By;
use crate::bash::evidence;
use crate::bash::policy::Override;
use crate::bash::registry;
use crate::db::Stores;
use anyhow::Result;
use std::path::Path;

/// The command path's consequences of an answer. Err: the override could not be written (the
/// answer is then processed again on the next pass).
pub fn on_decision(stores: &Stores, a: &Answer) -> Result<()> {
    let v = a.validation;
    let Answered::Decided {
        decision,
        by,
        decided_by,
        learn: wants_learn,
    } = &a.what
    else {
        // Expired or cancelled: nothing ran and nothing will; the change set goes.
        crate::bash::changes::discard(a.data_dir, v.job_id);
        return Ok(());
    };
    set_override(stores, a, *decision, decided_by)?;
    let human = *by == By::Human;
    if human {
        // What the human was shown, for `brainloop reviewer eval` (before apply or discard).
        crate::bash::changes::keep_decided(a.data_dir, v.job_id);
    }
    let runs = decision.runs();
    // Approvals and denials accrue to the job's operation signatures (once per job); a human
    // denial retires what the client learned of them.
    if human {
        if let Err(e) = stores
            .security
            .with(|c| crate::bash::signatures::count_decision(c, v.job_id, runs, decided_by, &v.id))
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot count the decision toward signatures"
            );
        }
        if runs {
            record_example(stores, a, decided_by, *wants_learn);
        } else if let Ok(Some(m)) = crate::bash::changes::load_manifest(a.data_dir, v.job_id) {
            if !m.signatures.is_empty() {
                tracing::info!(validation_id = %v.id, client = %v.client_id, signatures = m.signatures.join(" | "),
                    "denied by a human: these signatures are retired for the client (its commands ask again) if they were learned");
            }
        }
    } else if !runs {
        // Only a human's decision is evidence: a reviewer's denial ends this job and retires nothing.
        tracing::info!(validation_id = %v.id, client = %v.client_id, decided_by = %decided_by,
            "denied by the reviewer: not a human denial, no signature is retired (a human's `deny` retires a learned one)");
    }
    if runs && human && *wants_learn {
        learn(stores, a.data_dir, a.protected, v, decided_by, a.now);
    }
    if !runs {
        // A denial is evidence (it resets the client's count and withdraws its promotion).
        if human && a.action == Some("execute_bash") {
            record_denial(stores, a, decided_by);
        }
        // A denied change set is discarded: the workspace was never touched.
        crate::bash::changes::discard(a.data_dir, v.job_id);
    }
    Ok(())
}

/// `approve --always` / `deny --never` / `--always-ask`: the command's registry override.
fn set_override(stores: &Stores, a: &Answer, decision: Decision, decided_by: &str) -> Result<()> {
    let ov = match decision {
        Decision::AlwaysAllow => Override::AlwaysAllow,
        Decision::AlwaysAsk => Override::AlwaysAsk,
        Decision::Never => Override::Never,
        _ => return Ok(()),
    };
    let v = a.validation;
    // Decided on a fleet registry, the override is the registry's rule written with the
    // decision (`ask::learned::learn_command`, for this worker's scope by default): this worker
    // applies it from there, so `rules revoke` takes it back here too.
    if crate::ask::learned::written_with("command", &v.client_id, &v.id, a.now) {
        tracing::info!(validation_id = %v.id, decision = decision.as_str(), "the command's override is the fleet registry's rule written with the decision");
        return Ok(());
    }
    // An approval of a change set binds to command + effects; the override is the command's.
    let hash = command_hash_of(a.data_dir, v.job_id, a.bound_hash);
    let reason = format!(
        "{} by {} (validation {})",
        decision.as_str(),
        decided_by,
        v.id
    );
    stores
        .security
        .with(|c| registry::set_override(c, &hash, Some(ov), &reason, a.now))?;
    Ok(())
}

/// The command a validation is about: an approval of a change set binds to command + effects.
fn command_hash_of(data_dir: &Path, job_id: i64, bound: &str) -> String {
    match crate::bash::changes::load_manifest(data_dir, job_id) {
        Ok(Some(m)) if m.effect_hash == bound => m.command_hash,
        _ => bound.to_string(),
    }
}

fn record_denial(stores: &Stores, a: &Answer, decided_by: &str) {
    let v = a.validation;
    let overlay = crate::bash::changes::load_manifest(a.data_dir, v.job_id)
        .ok()
        .flatten()
        .is_some_and(|m| m.effect_hash == a.bound_hash);
    let e = evidence::Evidence {
        client_id: v.client_id.clone(),
        command_hash: command_hash_of(a.data_dir, v.job_id, a.bound_hash),
        job_id: v.job_id,
        source: evidence::Source::HumanDenied,
        decided_by: Some(format!("{decided_by} (validation {})", v.id)),
        mode: if overlay {
            evidence::Mode::Overlay
        } else {
            evidence::Mode::Direct
        },
        permission_set: v.permission_set.clone().unwrap_or_default(),
        success: false,
    };
    if let Err(e) = stores
        .security
        .with(|c| evidence::record_and_learn(c, &e, None, a.now))
    {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the denial as evidence"
        );
    }
}

/// A human-approved change set is an example of each of its signatures (`bash::explain`).
fn record_example(stores: &Stores, a: &Answer, by: &str, learn: bool) {
    let v = a.validation;
    let m = match crate::bash::changes::load_manifest(a.data_dir, v.job_id) {
        Ok(Some(m)) if m.effect_hash == a.bound_hash && !m.signatures.is_empty() => m,
        _ => return,
    };
    if let Err(e) = stores
        .security
        .with(|c| crate::bash::explain::record(c, &m, &v.client_id, &v.id, by, learn, a.now))
    {
        tracing::warn!(error = format!("{e:#}"), validation_id = %v.id, "cannot keep the approved example");
    }
}

/// `approve --learn`: the worker checks the gate again (`bash::learn`, the same function the CLI
/// used) and learns the change set's signatures for the job's client. A refusal here leaves the
/// approval an ordinary one (logged).
fn learn(
    stores: &Stores,
    data_dir: &Path,
    protected: &crate::permset::PathLists,
    v: &Validation,
    by: &str,
    now: i64,
) {
    let res = (|| -> Result<()> {
        let p = crate::bash::protected::Table::shared(protected)?;
        let why = stores
            .security
            .with(|c| crate::bash::learn::refusals(c, data_dir, v, &p))?;
        if !why.is_empty() {
            tracing::warn!(validation_id = %v.id, reasons = why.join("; "), "approve --learn: approved once, nothing learned");
            return Ok(());
        }
        let sigs = crate::bash::learn::signatures_of(data_dir, v.job_id)?;
        stores.security.with(|c| {
            crate::bash::explain::relearned(c, &v.client_id, &sigs)?;
            crate::bash::signatures::mark_learned(c, &v.client_id, &sigs, v.job_id, by, now)
        })?;
        tracing::info!(validation_id = %v.id, client = %v.client_id, signatures = sigs.join(" | "), "learned with approve --learn");
        Ok(())
    })();
    if let Err(e) = res {
        tracing::warn!(error = format!("{e:#}"), validation_id = %v.id, "approve --learn: cannot learn");
    }
}
