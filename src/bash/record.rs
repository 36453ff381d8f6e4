//! What a command's run leaves behind (issue 32): the one place that turns a run into registry
//! statistics (`registry::record_run`) and, when a human decision or an operator override allowed
//! it, into evidence (`bash::evidence`, which alone drives learning). What allowed the run is a
//! typed [`Happened`], decided by `bash::plan`; [`Happened::evidence`] is the one evidence
//! decision — no `policy_used` text is ever matched. Also the job's signature bookkeeping
//! (`signatures::remember_job`, `count_auto_applied`).

use super::command::Job;
use super::evidence::{self, Evidence, Mode, Source};
use super::executor::ExecResult;
use super::policy::{self, Allowed, Facts};
use super::registry;
use super::signatures::{self, Signature};

/// What allowed a run, or an applied change set, as learning sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Happened {
    /// A human approved this very job (the consumed approval was a human's).
    HumanApproved,
    /// The `[reviewer]` command approved it (issue 22): never evidence.
    ReviewerApproved,
    /// The operator's `always_allow` override.
    OperatorOverride,
    /// Nobody was asked: the policy (auto_approve, read-only confined) or a promotion.
    Unattended,
    /// `force_execute` by a client granted FORCE_EXECUTE.
    Forced,
    /// An overlay run nobody has seen yet.
    Unanswered,
}

impl Happened {
    /// What allowed a direct run (`allowed`), given who answered the job's approval.
    pub fn of(allowed: Allowed, by_human: bool) -> Happened {
        match allowed {
            Allowed::Approved if by_human => Happened::HumanApproved,
            Allowed::Approved => Happened::ReviewerApproved,
            Allowed::AlwaysAllow => Happened::OperatorOverride,
            Allowed::ForceExecute => Happened::Forced,
            Allowed::AutoApprove | Allowed::SandboxedReadonly | Allowed::Promoted => {
                Happened::Unattended
            }
        }
    }

    /// The `policy_used` a run or an applied change set allowed by `allowed` reports: a
    /// reviewer's approval is marked as such (`reviewer_approved`), in the job's result and the
    /// journal (`show`, `review`), never shown as a human's `approved`.
    pub fn policy_used(self, allowed: Allowed) -> &'static str {
        match self {
            Happened::ReviewerApproved => "reviewer_approved",
            _ => allowed.as_str(),
        }
    }

    /// The evidence it is: only a human's approval and the operator's override teach.
    pub fn evidence(self) -> Option<Source> {
        match self {
            Happened::HumanApproved => Some(Source::HumanApproved),
            Happened::OperatorOverride => Some(Source::OperatorOverride),
            Happened::ReviewerApproved
            | Happened::Unattended
            | Happened::Forced
            | Happened::Unanswered => None,
        }
    }
}

/// One run of a command, as recorded.
pub struct Ran<'a> {
    pub command_hash: &'a str,
    pub facts: &'a Facts,
    /// The sandbox label.
    pub label: &'a str,
    pub result: &'a ExecResult,
    pub happened: Happened,
    /// Where it ran, and in which set (the evidence's confinement).
    pub mode: Mode,
    pub permission_set: &'a str,
}

fn evidence_of(
    job: &Job<'_>,
    hash: &str,
    source: Source,
    mode: Mode,
    set: &str,
    ok: bool,
) -> Evidence {
    Evidence {
        client_id: job.client_id.to_string(),
        command_hash: hash.to_string(),
        job_id: job.job_id,
        source,
        decided_by: job
            .approval
            .as_ref()
            .map(|a| format!("validation {}", a.validation_id)),
        mode,
        permission_set: set.to_string(),
        success: ok,
    }
}

fn log_changes(res: anyhow::Result<Vec<policy::Change>>) {
    match res {
        Ok(ch) => {
            for c in ch {
                tracing::info!(change = ?c, "command policy changed");
            }
        }
        Err(e) => tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the run or its evidence"
        ),
    }
}

/// Counts a run in the registry (executions, statistics) and, when [`Happened::evidence`] says
/// so, as evidence — in one transaction with the learning it triggers.
pub async fn run(job: &Job<'_>, ran: &Ran<'_>) {
    job.stats.incr("bash_executions", 1.0);
    let r = ran.result;
    let evidence = ran.happened.evidence().map(|s| {
        evidence_of(
            job,
            ran.command_hash,
            s,
            ran.mode,
            ran.permission_set,
            r.success(),
        )
    });
    let (h, f, sandbox, code, ms, success, job_id, client) = (
        ran.command_hash.to_string(),
        ran.facts.clone(),
        ran.label.to_string(),
        r.exit_code,
        r.duration_ms as i64,
        r.success(),
        job.job_id,
        job.client_id.to_string(),
    );
    let now = crate::time::now_ms();
    let res = job
        .stores
        .security
        .call(move |c| {
            let run = registry::Run {
                hash: &h,
                job_id,
                client_id: &client,
                exit_code: code,
                success,
                duration_ms: ms,
                sandbox: &sandbox,
                evidence,
            };
            registry::record_run(c, &run, &f, now)
        })
        .await;
    log_changes(res);
}

/// An approved change set applied (no run of its own): evidence of the overlay, when
/// [`Happened::evidence`] says so.
pub async fn applied(job: &Job<'_>, hash: &str, facts: &Facts, happened: Happened, ok: bool) {
    let Some(source) = happened.evidence() else {
        return;
    };
    let ev = evidence_of(
        job,
        hash,
        source,
        Mode::Overlay,
        crate::permset::PermissionSet::Filesystem.as_str(),
        ok,
    );
    let f = facts.clone();
    let now = crate::time::now_ms();
    let res = job
        .stores
        .security
        .call(move |c| evidence::record_and_learn(c, &ev, Some(&f), now))
        .await;
    log_changes(res);
}

/// The job asks about these signatures: up front (`overlay` false) or as a change set.
pub async fn signatures_asked(job: &Job<'_>, sigs: &[Signature], overlay: bool) {
    if sigs.is_empty() {
        return;
    }
    let texts: Vec<String> = sigs.iter().map(|s| s.text.clone()).collect();
    let (id, client) = (job.job_id, job.client_id.to_string());
    let now = crate::time::now_ms();
    if let Err(e) = job
        .stores
        .security
        .call(move |c| signatures::remember_job(c, id, &client, overlay, &texts, now))
        .await
    {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the job's signatures"
        );
    }
}

/// A change set applied under these learned signatures.
pub async fn auto_applied(job: &Job<'_>, texts: Vec<String>) {
    let _ = job
        .stores
        .security
        .call(move |c| signatures::count_auto_applied(c, &texts))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one evidence decision, whole: a human's approval and the operator's override teach;
    /// the reviewer, the policy, a promotion, force and an unanswered overlay never do.
    #[test]
    fn what_is_evidence() {
        let cases = [
            (
                Allowed::Approved,
                true,
                Happened::HumanApproved,
                Some(Source::HumanApproved),
            ),
            (Allowed::Approved, false, Happened::ReviewerApproved, None),
            (
                Allowed::AlwaysAllow,
                false,
                Happened::OperatorOverride,
                Some(Source::OperatorOverride),
            ),
            (
                Allowed::AlwaysAllow,
                true,
                Happened::OperatorOverride,
                Some(Source::OperatorOverride),
            ),
            (Allowed::AutoApprove, true, Happened::Unattended, None),
            (Allowed::SandboxedReadonly, true, Happened::Unattended, None),
            (Allowed::Promoted, true, Happened::Unattended, None),
            (Allowed::ForceExecute, true, Happened::Forced, None),
        ];
        for (allowed, by_human, happened, source) in cases {
            assert_eq!(Happened::of(allowed, by_human), happened, "{allowed:?}");
            assert_eq!(happened.evidence(), source, "{happened:?}");
        }
        assert_eq!(Happened::Unanswered.evidence(), None);
    }
}
