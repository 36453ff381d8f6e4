//! Learning in one answer (issue 22). This module owns *which change sets a human may teach at
//! once, and a reviewer may approve*: [`refusals`] says why no learned signature could ever apply
//! a validation's change set (empty: one could). It is the one gate of `brainloop approve ID
//! --learn` (checked by the CLI, and again by the worker before it learns) and of a `[reviewer]`
//! command's `approve` (`crate::hooks`). It composes the rules that already exist, never a copy:
//!
//! - the change set comes from an overlay run and is the one the validation shows (its effect
//!   hash): commands asked up front (network, process or system control, effects the overlay
//!   cannot capture) and other actions' requests have none, so they are refused;
//! - every operation signature of the command is learnable (`signatures::of_report`: never for
//!   writes outside the workspace, computed program names, inline code, scripts or flags that
//!   write or run elsewhere — and the stored verdict, which only ever narrows), has no `never` /
//!   `always_ask` override, and no denial by this client (a human denial retires a learned
//!   signature, and is never overridden here; `override SIGNATURE clear` forgets);
//! - `effects::auto_apply_refusals` accepts the change set: every path it touches is named by the
//!   command, and none is protected (`protected::judge`).
//!
//! `signatures::mark_learned` then marks the signatures learned for the job's client: who,
//! when, which job.

use crate::ask::validations::Validation;
use crate::bash::effects;
use crate::bash::protected::{self, Table};
use crate::bash::{changes, signatures};
use crate::classify::{check, Context};
use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;

/// Why no learned signature could apply this validation's change set (empty: one could).
pub fn refusals(
    security: &Connection,
    data_dir: &Path,
    v: &Validation,
    table: &Table,
) -> Result<Vec<String>> {
    let m = changes::load_manifest(data_dir, v.job_id)?;
    refusals_with(security, m.as_ref(), v, table, true)
}

/// [`refusals`] of the change set `m` (the one on disk, or the copy `brainloop reviewer eval`
/// replays: `changes::load_decided`). `count_denials`: whether this client's stored denials of a
/// signature refuse (false only for the eval, which judges the human denials as they stood
/// when the validation was asked, not the one being replayed).
pub fn refusals_with(
    security: &Connection,
    m: Option<&changes::Manifest>,
    v: &Validation,
    table: &Table,
    count_denials: bool,
) -> Result<Vec<String>> {
    let Some(m) = m else {
        return Ok(vec![
            "there is no change set: the command was asked up front (network, process or system control, or effects the overlay cannot capture) or the request is not a command's; only change sets of learnable signatures are learned".into(),
        ]);
    };
    if v.command_hash.as_deref() != Some(m.effect_hash.as_str()) {
        return Ok(vec![
            "the change set on disk is not the one this validation shows".into(),
        ]);
    }
    if m.action() != "execute_bash" {
        return Ok(vec![format!(
            "the change set is content {} generated: generated content is never learned (each write is asked)",
            m.action()
        )]);
    }
    let report = check(
        &m.command,
        &Context {
            workdir: Some(m.workdir.clone()),
        },
    );
    if report.command_hash != m.command_hash {
        return Ok(vec![
            "the classifier now reads this command differently from when it ran".into(),
        ]);
    }
    let sigs = signatures::of_report(&report, &m.workdir, &m.workspace);
    let mut out = Vec::new();
    if sigs.is_empty() {
        out.push("the command has no operation signature to learn".into());
    }
    for s in &sigs {
        if let Some(why) = s.why_not.as_ref().filter(|_| !s.learnable) {
            out.push(format!("`{}` is never learned: {why}", s.text));
        }
        out.extend(stored_refusals(
            security,
            &v.client_id,
            &s.text,
            count_denials,
        )?);
    }
    let judged = protected::judge(
        table,
        &m.change_set,
        &m.workspace,
        Some((&report, &m.workdir)),
    );
    out.extend(effects::auto_apply_refusals(
        &report,
        &m.workdir,
        &m.workspace,
        &m.change_set,
        &judged,
    ));
    Ok(out)
}

/// What the security database says against learning `sig` for `client`.
fn stored_refusals(
    security: &Connection,
    client: &str,
    sig: &str,
    count_denials: bool,
) -> Result<Vec<String>> {
    struct Stored {
        id: i64,
        learnable: bool,
        why_not: Option<String>,
        ov: Option<String>,
        denials: i64,
    }
    let row: Option<Stored> = security
        .query_row(
            "SELECT s.id, s.learnable, s.why_not, s.user_override, coalesce(e.denials, 0)
             FROM signatures s LEFT JOIN signature_evidence e
               ON e.signature = s.signature AND e.client_id = ?2
             WHERE s.signature = ?1",
            params![sig, client],
            |r| {
                Ok(Stored {
                    id: r.get(0)?,
                    learnable: r.get(1)?,
                    why_not: r.get(2)?,
                    ov: r.get(3)?,
                    denials: r.get(4)?,
                })
            },
        )
        .optional()?;
    let Some(Stored {
        id,
        learnable,
        why_not,
        ov,
        denials,
    }) = row
    else {
        return Ok(vec![format!(
            "`{sig}` was never recorded for this job (nothing to learn)"
        )]);
    };
    let mut out = Vec::new();
    if !learnable {
        out.push(format!(
            "`{sig}` is never learned: {}",
            why_not.unwrap_or_else(|| "an earlier command of it was not learnable".into())
        ));
    }
    if let Some(o) = ov.filter(|o| o != "always_allow") {
        out.push(format!("the operator set signature {id} `{sig}` to {o}"));
    }
    if count_denials && denials > 0 {
        out.push(format!(
            "client {client} had {denials} change set(s) of `{sig}` denied: --learn never overrides a denial (`brainloop override sig:{id} clear` forgets)"
        ));
    }
    Ok(out)
}

/// The signatures a validation's change set carries (its manifest's), for `signatures::mark_learned`.
pub fn signatures_of(data_dir: &Path, job_id: i64) -> Result<Vec<String>> {
    Ok(changes::load_manifest(data_dir, job_id)?
        .map(|m| m.signatures)
        .unwrap_or_default())
}
