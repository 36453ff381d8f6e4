//! `brainloop reviewer eval` (issue 35): this module owns *how a reviewer is measured against the
//! operator's own decisions*. It replays the validations a human decided through the configured
//! `[reviewer]` command and compares what the worker would have done with each answer with what
//! the human did.
//!
//! - **Which validations**: `approved` or `denied` ones whose deciding row (the first decision row
//!   written for it, the one the worker consumed) is a human's (`ask::By::Human`) — never one the
//!   reviewer decided itself. Filtered by `--client` and `--since` (asked since), then the latest
//!   `--limit`, replayed oldest first.
//! - **The same payload**: built by `payload::build_with` from what is stored — the validation
//!   row, the job's row (action, purpose), and the change set the human was shown: the copy kept
//!   when the human decided (`bash::changes::keep_decided`), or the overlay still on disk. A
//!   validation whose change set is gone, or whose job row is gone, is **not rebuilt**: it is
//!   listed with why and not replayed (a reviewer shown less than the human says nothing).
//! - **Run exactly as the worker runs it**: `Runner::run` (confined, `network-api`, its `hosts`,
//!   its timeout, its `read` dirs, the payload on stdin). The eval opens every database read-only
//!   and writes nothing: no decision row, no evidence, no audit event.
//! - **What the worker would have done**: the answer passes through `reviewer::applied` with the
//!   refusals of `reviewer::approve_refusals` (`reviewer::facts_of`, `When::AsAsked`): an
//!   `approve` the worker would refuse counts as `ask`. The human denials it counts are those
//!   written before the validation was asked (never the replayed decision itself); the rules,
//!   overrides and protected paths are today's.
//!
//! Each replayed validation is one of (the worker's answer → the human's decision):
//! - **agreement**: approve → approved, or deny → denied;
//! - **false approval**: approve → denied;
//! - **needless escalation**: ask or deny → approved (the human had to decide, or the job was
//!   denied, where the human approved; both counted, and apart: `asked`, `denied`);
//! - **escalated denial**: ask → denied (the human was asked and denied: right, not agreement).
//!
//! Counted in all and per operation signature (a validation counts once under each of its
//! signatures; one without a signature under `(no signature)`).

use super::reviewer::{self, Answer, When};
use super::{HookConfig, Runner};
use crate::ask::validations::{self, Validation};
use crate::ask::By;
use anyhow::Result;
use rusqlite::Connection;
use serde::Serialize;
use std::collections::BTreeMap;

/// Which decided validations to replay.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The latest this many (0: all).
    pub limit: usize,
    /// Only those asked at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    pub client: Option<String>,
}

/// The read-only connections the eval reads.
pub struct Dbs<'a> {
    pub output: &'a Connection,
    pub security: &'a Connection,
    pub lifecycle: &'a Connection,
}

/// How one replayed validation compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Agreement,
    FalseApproval,
    NeedlessEscalation,
    EscalatedDenial,
}

/// Counts, in all or for one signature.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub replayed: usize,
    /// Agreements: `approved_agreed` + `denied_agreed`.
    pub agreement: usize,
    pub approved_agreed: usize,
    /// The reviewer denied where the human denied.
    pub denied_agreed: usize,
    /// The reviewer approved (and the worker would have applied it) where the human denied.
    pub false_approvals: usize,
    /// `needless_asks` + `needless_denials`: where the human approved.
    pub needless_escalations: usize,
    pub needless_asks: usize,
    pub needless_denials: usize,
    /// The reviewer asked the human, who denied.
    pub escalated_denials: usize,
}

impl Tally {
    fn add(&mut self, r: &Replayed) {
        self.replayed += 1;
        match r.verdict {
            Verdict::Agreement => {
                self.agreement += 1;
                if r.human == "approve" {
                    self.approved_agreed += 1;
                } else {
                    self.denied_agreed += 1;
                }
            }
            Verdict::FalseApproval => self.false_approvals += 1,
            Verdict::NeedlessEscalation => {
                self.needless_escalations += 1;
                if r.applied == "deny" {
                    self.needless_denials += 1;
                } else {
                    self.needless_asks += 1;
                }
            }
            Verdict::EscalatedDenial => self.escalated_denials += 1,
        }
    }
}

/// One validation replayed.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub validation_id: String,
    pub job_id: i64,
    pub client: String,
    pub command: Option<String>,
    pub signatures: Vec<String>,
    /// `approve` or `deny`.
    pub human: &'static str,
    pub decided_by: String,
    /// What the reviewer answered, and why.
    pub answer: &'static str,
    pub reason: String,
    /// What the worker would have done with it (`approve` refused → `ask`).
    pub applied: &'static str,
    pub refusals: Vec<String>,
    pub verdict: Verdict,
}

/// A decided validation that could not be rebuilt as it was asked.
#[derive(Debug, Clone, Serialize)]
pub struct NotRebuilt {
    pub validation_id: String,
    pub job_id: i64,
    pub client: String,
    pub command: Option<String>,
    pub why: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub reviewer: String,
    /// Human-decided validations selected (replayed + not rebuilt).
    pub selected: usize,
    pub total: Tally,
    pub per_signature: BTreeMap<String, Tally>,
    pub validations: Vec<Replayed>,
    pub not_rebuilt: Vec<NotRebuilt>,
}

/// The signature a validation without one is counted under.
pub const NO_SIGNATURE: &str = "(no signature)";

/// The validations a human decided, per `o`, oldest first, with the human's decision (`true`:
/// approved) and who decided.
pub fn human_decided(db: &Dbs, o: &Options) -> Result<Vec<(Validation, bool, String)>> {
    let mut out = Vec::new();
    for v in validations::list(db.output, false)? {
        let approved = match v.status.as_str() {
            "approved" => true,
            "denied" => false,
            _ => continue,
        };
        if o.client.as_deref().is_some_and(|c| c != v.client_id) {
            continue;
        }
        if o.since_ms.is_some_and(|t| v.requested_at < t) {
            continue;
        }
        let Some(first) = validations::decisions_of(db.security, &v.id)?
            .into_iter()
            .next()
        else {
            continue;
        };
        if By::of(&first.decided_by) != By::Human {
            continue;
        }
        out.push((v, approved, first.decided_by));
    }
    if o.limit > 0 && out.len() > o.limit {
        out.drain(..out.len() - o.limit);
    }
    Ok(out)
}

/// The payload the reviewer would have received for `v`, and its change set; Err: why it cannot
/// be rebuilt.
fn rebuild(
    db: &Dbs,
    data_dir: &std::path::Path,
    v: &Validation,
) -> std::result::Result<(serde_json::Value, Option<crate::bash::changes::Manifest>), String> {
    use crate::bash::changes;
    let overlay = crate::bash::signatures::of_job(db.security, v.job_id)
        .map_err(|e| format!("cannot read its signatures: {e:#}"))?
        .is_some_and(|j| j.overlay);
    let m = match changes::load_manifest(data_dir, v.job_id) {
        Ok(Some(m)) => Some(m),
        Ok(None) => changes::load_decided(data_dir, v.job_id)
            .map_err(|e| format!("its kept change set cannot be read: {e:#}"))?,
        Err(e) => return Err(format!("its change set cannot be read: {e:#}")),
    };
    let m = match m {
        Some(m) if v.command_hash.as_deref() == Some(m.effect_hash.as_str()) => Some(m),
        Some(_) => {
            return Err("the change set kept for its job is not the one this validation showed".into())
        }
        None if overlay => {
            return Err(format!(
                "its change set is no longer on disk (a copy is kept only for decisions made by this version on, the newest {})",
                changes::DECIDED_KEEP
            ))
        }
        None => None,
    };
    let mut p = super::payload::build_with(db.lifecycle, data_dir, v, "validation", m.clone());
    let request = crate::egress::store::request(db.security, &v.id)
        .map_err(|e| format!("its host request cannot be read: {e:#}"))?;
    super::payload::add_network(&mut p, request.as_ref());
    if p["action"].is_null() {
        return Err(
            "its job's row is gone (pruned or repaired): its action and purpose are unknown".into(),
        );
    }
    Ok((p, m))
}

/// The verdict of the worker's answer `applied` where the human `approved` (or denied).
pub fn verdict(applied: Answer, approved: bool) -> Verdict {
    match (applied, approved) {
        (Answer::Approve, true) | (Answer::Deny, false) => Verdict::Agreement,
        (Answer::Approve, false) => Verdict::FalseApproval,
        (_, true) => Verdict::NeedlessEscalation,
        (Answer::Ask, false) => Verdict::EscalatedDenial,
    }
}

/// Replays the human-decided validations (`o`) through `reviewer` (run by `runner`), reading
/// only `db`. Long because: every step is said once here — select, rebuild, run, judge, count.
pub async fn run(
    runner: &Runner<'_>,
    reviewer: &HookConfig,
    db: &Dbs<'_>,
    o: &Options,
) -> Result<Report> {
    let data_dir = runner.config.data_dir.clone();
    let mut rep = Report {
        reviewer: reviewer.command.clone(),
        ..Report::default()
    };
    let decided = human_decided(db, o)?;
    rep.selected = decided.len();
    for (v, approved, decided_by) in decided {
        let (p, m) = match rebuild(db, &data_dir, &v) {
            Ok(x) => x,
            Err(why) => {
                rep.not_rebuilt.push(NotRebuilt {
                    validation_id: v.id.clone(),
                    job_id: v.job_id,
                    client: v.client_id.clone(),
                    command: v.command.clone(),
                    why,
                });
                continue;
            }
        };
        let run = runner.run(reviewer, &p, v.job_id).await;
        let (answer, reason) = reviewer::answer_of(&run);
        let refusals = match answer {
            Answer::Approve => reviewer::approve_refusals(&reviewer::facts_of(
                db.security,
                db.output,
                &runner.config.paths,
                &v,
                &p,
                m.as_ref(),
                When::AsAsked,
            )?),
            _ => Vec::new(),
        };
        let applied = reviewer::applied(answer, &refusals);
        let signatures = reviewer::signatures_of(db.security, &v, m.as_ref())?;
        let r = Replayed {
            validation_id: v.id.clone(),
            job_id: v.job_id,
            client: v.client_id.clone(),
            command: v.command.clone(),
            signatures: signatures.clone(),
            human: if approved { "approve" } else { "deny" },
            decided_by,
            answer: answer.as_str(),
            reason,
            applied: applied.as_str(),
            refusals,
            verdict: verdict(applied, approved),
        };
        rep.total.add(&r);
        if signatures.is_empty() {
            rep.per_signature
                .entry(NO_SIGNATURE.to_string())
                .or_default()
                .add(&r);
        }
        for s in &signatures {
            rep.per_signature.entry(s.clone()).or_default().add(&r);
        }
        rep.validations.push(r);
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_against_each_decision_has_one_verdict() {
        use Answer::*;
        assert_eq!(verdict(Approve, true), Verdict::Agreement);
        assert_eq!(verdict(Deny, false), Verdict::Agreement);
        assert_eq!(verdict(Approve, false), Verdict::FalseApproval);
        assert_eq!(verdict(Ask, true), Verdict::NeedlessEscalation);
        assert_eq!(verdict(Deny, true), Verdict::NeedlessEscalation);
        assert_eq!(verdict(Ask, false), Verdict::EscalatedDenial);
    }
}
