//! The `[reviewer]` command (issue 22): this module owns *what a reviewer may decide*. It reads
//! the validation JSON on stdin and answers on stdout `deny`, `ask` or `approve` — a first line
//! `WORD [reason]`, or `{"decision": WORD, "reason": "..."}`. Then:
//!
//! - `deny` ends the job `denied` (a decision row like an operator's, `decided_by` naming the
//!   reviewer);
//! - `approve` is accepted only for a change set a learned signature could apply
//!   (`bash::learn::refusals`: workspace only, every path named, no protected path, no network,
//!   nothing dynamic); anything else still asks the human;
//! - `ask`, anything unrecognised, a non-zero exit, an error or a timeout: the human is asked.
//!
//! Every answer is audited (metadata `events`, kind `reviewer`) with its reason and what was
//! done with it. A reviewer's decision is never learning evidence (`ask::By::Reviewer`).

use super::Hooks;
use crate::ask::validations::{self, Decision, Validation};
use crate::ask::REVIEWER_PREFIX;
use crate::bash::executor::ExecResult;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Deny,
    Ask,
    Approve,
}

impl Answer {
    fn as_str(self) -> &'static str {
        match self {
            Answer::Deny => "deny",
            Answer::Ask => "ask",
            Answer::Approve => "approve",
        }
    }
}

/// The reviewer's answer and its reason, from its output.
pub fn parse(stdout: &str) -> (Answer, String) {
    let t = stdout.trim();
    let (word, reason) = match serde_json::from_str::<Value>(t) {
        Ok(v) if v.is_object() => (
            v["decision"].as_str().unwrap_or("").to_string(),
            v["reason"].as_str().unwrap_or("").to_string(),
        ),
        _ => {
            let mut it = t.splitn(2, char::is_whitespace);
            (
                it.next().unwrap_or("").to_string(),
                it.next().unwrap_or("").trim().to_string(),
            )
        }
    };
    match word.to_ascii_lowercase().as_str() {
        "deny" => (Answer::Deny, reason),
        "approve" => (Answer::Approve, reason),
        "ask" => (Answer::Ask, reason),
        _ => (
            Answer::Ask,
            format!(
                "unrecognised answer {:?}",
                crate::quote::prefix(t, crate::quote::VALUE_MAX)
            ),
        ),
    }
}

/// What the run of the reviewer says (`Ask` on any failure).
fn answer_of(r: &anyhow::Result<ExecResult>) -> (Answer, String) {
    match r {
        Err(e) => (Answer::Ask, format!("the reviewer could not run: {e:#}")),
        Ok(r) if r.timed_out => (Answer::Ask, "the reviewer timed out".into()),
        Ok(r) if !r.success() => (
            Answer::Ask,
            format!(
                "the reviewer failed (exit {:?}): {}",
                r.exit_code,
                crate::quote::prefix(r.stderr.trim(), crate::quote::VALUE_MAX)
            ),
        ),
        Ok(r) => parse(&r.stdout),
    }
}

impl Hooks {
    /// Consults the reviewer about a new validation; true when it settled it (deny, or an
    /// accepted approve), so the human need not be notified.
    pub(super) async fn review(&self, v: &Validation, p: &Value) -> bool {
        let Some(h) = &self.config.reviewer else {
            return false;
        };
        let run = self.run_hook(h, p, v.job_id).await;
        let (answer, reason) = answer_of(&run);
        let refusals = match answer {
            Answer::Approve => self.approve_refusals(v).await,
            _ => Vec::new(),
        };
        let applied = match answer {
            Answer::Approve if !refusals.is_empty() => Answer::Ask,
            a => a,
        };
        let by = format!(
            "{REVIEWER_PREFIX} {}",
            crate::quote::prefix(&h.command, crate::quote::VALUE_MAX)
        );
        let recorded = match applied {
            Answer::Ask => Ok(()),
            a => self.record(v, a, &reason, &by).await,
        };
        let detail = json!({
            "validation_id": v.id,
            "answer": answer.as_str(),
            "applied": applied.as_str(),
            "reason": reason,
            "refusals": refusals,
            "exit_code": run.as_ref().ok().and_then(|r| r.exit_code),
            "timed_out": run.as_ref().is_ok_and(|r| r.timed_out),
            "recorded": recorded.as_ref().map(|_| true).unwrap_or(false),
        });
        tracing::info!(validation_id = %v.id, answer = answer.as_str(), applied = applied.as_str(), reason = %reason, "reviewer");
        let (stores, job) = (Arc::clone(&self.stores), v.job_id);
        if let Err(e) = stores
            .metadata
            .call(move |c| crate::db::metadata::insert_event(c, "reviewer", Some(job), &detail))
            .await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot audit the reviewer's decision"
            );
        }
        if let Err(e) = &recorded {
            tracing::warn!(error = format!("{e:#}"), validation_id = %v.id, "cannot record the reviewer's decision; asking the human");
            return false;
        }
        applied != Answer::Ask
    }

    /// Why the reviewer may not approve this validation (`bash::learn`; empty: it may).
    async fn approve_refusals(&self, v: &Validation) -> Vec<String> {
        let (dd, pp, v2) = (
            self.config.data_dir.clone(),
            self.config.paths.clone(),
            v.clone(),
        );
        let res = self
            .stores
            .security
            .call(move |c| {
                let p = crate::bash::protected::Table::shared(&pp)?;
                crate::bash::learn::refusals(c, &dd, &v2, &p)
            })
            .await;
        res.unwrap_or_else(|e| vec![format!("cannot check the change set: {e:#}")])
    }

    async fn record(
        &self,
        v: &Validation,
        a: Answer,
        reason: &str,
        by: &str,
    ) -> anyhow::Result<()> {
        let d = match a {
            Answer::Deny => Decision::Deny,
            _ => Decision::Approve,
        };
        let (id, reason, by) = (v.id.clone(), reason.to_string(), by.to_string());
        self.stores
            .security
            .call(move |c| validations::record(c, &id, d, false, Some(&reason), &by))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly_and_anything_else_asks() {
        assert_eq!(parse("deny the diff edits .bashrc\n").0, Answer::Deny);
        assert_eq!(
            parse("deny the diff edits .bashrc\n").1,
            "the diff edits .bashrc"
        );
        assert_eq!(parse("APPROVE\n").0, Answer::Approve);
        assert_eq!(
            parse(r#"{"decision": "approve", "reason": "matches"}"#),
            (Answer::Approve, "matches".to_string())
        );
        assert_eq!(parse("ask").0, Answer::Ask);
        assert_eq!(parse("").0, Answer::Ask);
        assert_eq!(parse("approved!").0, Answer::Ask);
        assert_eq!(parse(r#"{"decision": 1}"#).0, Answer::Ask);
    }
}
