//! Whether a failed job runs again (issue 36): the job's own retry policy (queue snapshot), else
//! its action's (`[retry.ACTION]`), decides with `retry::Policy` — attempts left, the back-off
//! with jitter, which failures retry. Never retried: a job stopped by `brainloop cancel` or a
//! shutdown, a row rejected at claim, any status but `failed`, and a job that asked a human
//! (its approval was for one run: a retry would need a new answer, so the result says to
//! resubmit instead). What was decided is written into the result, retried or final
//! (`retry` object: attempt, max_attempts, delay_ms, next_attempt_at, failure kind).

use crate::config::Config;
use crate::db::lifecycle::{self, Snapshot};
use crate::db::output::{JobStatus, Outcome};
use crate::db::Stores;
use crate::retry::{self, Policy};
use serde_json::{json, Value};

/// A failed attempt to run again.
pub(super) struct Again {
    pub delay_ms: u64,
    /// Wall-clock time of the next attempt (unix ms).
    pub next_at: i64,
    pub priority: i64,
    /// What the `queued` results row says until then.
    pub result: Value,
    pub error: String,
}

/// The policy that applies to `snap`: its own, else its action's.
fn policy(config: &Config, snap: &Snapshot) -> Option<Policy> {
    if let Some(p) = snap.retry.as_deref().and_then(|t| Policy::parse(t).ok()) {
        return Some(p);
    }
    config.retry.get(snap.action.as_deref()?).cloned()
}

/// Decides for a job whose attempt ended with `outcome` (not cut by a shutdown nor cancelled):
/// `Some(Again)` when it runs again (the outcome untouched; the caller moves the job), else
/// None, with the final outcome marked with what the policy said (if the job had one).
pub(super) fn decide(
    config: &Config,
    stores: &Stores,
    snap: &Snapshot,
    outcome: &mut Outcome,
) -> Option<Again> {
    if outcome.status != JobStatus::Failed || snap.reject_reason.is_some() {
        return None;
    }
    let p = policy(config, snap)?;
    let kind = retry::kind_of(outcome.result.as_ref());
    let asked = stores
        .lifecycle
        .with(|c| lifecycle::asked_and_priority(c, snap.job_id));
    let (asked, priority) = match asked {
        Ok(Some(v)) => v,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(
                job_id = snap.job_id,
                error = format!("{e:#}"),
                "cannot read the job's snapshot: not retried"
            );
            mark(
                outcome,
                &p,
                snap.attempts,
                kind,
                "the job's snapshot could not be read",
            );
            return None;
        }
    };
    let why_not = if asked {
        Some("it asked a human: an approval is for one run, so a retry would need a new answer — resubmit the job to ask again")
    } else if !p.retries(kind) {
        Some("this failure is not among the policy's `on`")
    } else if snap.attempts >= p.max_attempts {
        Some("no attempt left")
    } else {
        None
    };
    if let Some(why) = why_not {
        mark(outcome, &p, snap.attempts, kind, why);
        return None;
    }
    let next = snap.attempts + 1;
    let random = getrandom::u64().unwrap_or(0) as f64 / u64::MAX as f64;
    let delay_ms = p.delay_ms(next, random.min(0.999_999));
    let next_at = crate::time::now_ms() + delay_ms as i64;
    let info = json!({
        "attempt": snap.attempts,
        "max_attempts": p.max_attempts,
        "failure": kind.as_str(),
        "delay_ms": delay_ms,
        "next_attempt_at": next_at,
        "last_error": outcome.error,
        "last_result": outcome.result,
    });
    Some(Again {
        delay_ms,
        next_at,
        priority,
        result: json!({"status": "retrying", "retry": info}),
        error: format!(
            "attempt {} of {} failed ({}): {}; retrying in {delay_ms} ms",
            snap.attempts,
            p.max_attempts,
            kind.as_str(),
            outcome.error.as_deref().unwrap_or("no error message")
        ),
    })
}

/// The final outcome of a job with a policy says what the policy decided.
fn mark(outcome: &mut Outcome, p: &Policy, attempts: u32, kind: retry::Kind, why: &str) {
    let info = json!({
        "attempt": attempts,
        "max_attempts": p.max_attempts,
        "failure": kind.as_str(),
        "not_retried": why,
    });
    match &mut outcome.result {
        Some(Value::Object(o)) => {
            o.insert("retry".into(), info);
        }
        None => outcome.result = Some(json!({ "retry": info })),
        Some(_) => {}
    }
    outcome.error = Some(format!(
        "{} (attempt {attempts} of {}; not retried: {why})",
        outcome.error.as_deref().unwrap_or("failed"),
        p.max_attempts
    ));
}
