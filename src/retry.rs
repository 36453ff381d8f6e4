//! **The retry policy of a failed job** (issue 36): how many attempts, the exponential back-off
//! with jitter between them, and which failures retry. A job's own policy (input.db
//! `jobs.retry`, JSON) wins over its action's (`[retry.ACTION]` in the configuration); without
//! either a failed job is final at once (a crash is another matter: `max_attempts` of the
//! configuration, `supervisor::recovery`). Pure: the supervisor decides with it
//! (`supervisor::retrying`), which also never retries a job that asked a human.

use serde::{Deserialize, Serialize};

/// A failure the policy may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Any of the three below.
    Failed,
    /// A command that ran past its timeout (`timed_out` in its result).
    Timeout,
    /// A command that exited non-zero (or was killed by a signal).
    ExitCode,
    /// Any other failure of the action (an unreachable model, a read error, …).
    Error,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Failed => "failed",
            Kind::Timeout => "timeout",
            Kind::ExitCode => "exit_code",
            Kind::Error => "error",
        }
    }
}

/// Longest back-off between two attempts (ms): one day.
pub const MAX_BACKOFF_MS: u64 = 86_400_000;
/// Most attempts a policy may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// A retry policy (`{"max_attempts": 3, "backoff_ms": 1000, "max_backoff_ms": 60000,
/// "jitter": 0.5, "on": ["failed"]}`; only `max_attempts` is required in JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Attempts in all, the first included (1: never retried).
    pub max_attempts: u32,
    /// The delay before the second attempt (ms); doubled for each later one.
    pub backoff_ms: u64,
    /// The delay never exceeds this (ms).
    pub max_backoff_ms: u64,
    /// Share of the delay drawn at random (0: exact; 0.5: between half and all of it).
    pub jitter: f64,
    /// Which failures retry.
    pub on: Vec<Kind>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            max_attempts: 1,
            backoff_ms: 1000,
            max_backoff_ms: 300_000,
            jitter: 0.5,
            on: vec![Kind::Failed],
        }
    }
}

impl Policy {
    /// Parses and checks a job's policy (JSON text); the error names the field and its bounds.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("retry is not valid JSON: {e}"))?;
        if !v.is_object() || v.get("max_attempts").is_none() {
            return Err(
                "retry must be a JSON object with max_attempts, e.g. {\"max_attempts\": 3, \"backoff_ms\": 1000}"
                    .into(),
            );
        }
        let p: Policy = serde_json::from_value(v).map_err(|e| {
            format!("retry: {e} (fields: max_attempts, backoff_ms, max_backoff_ms, jitter, on: failed|timeout|exit_code|error)")
        })?;
        p.check()?;
        Ok(p)
    }

    /// The bounds every policy keeps (job or configuration).
    pub fn check(&self) -> Result<(), String> {
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            return Err(format!(
                "retry max_attempts is {}: it must be between 1 and {MAX_ATTEMPTS}",
                self.max_attempts
            ));
        }
        if self.backoff_ms > MAX_BACKOFF_MS || self.max_backoff_ms > MAX_BACKOFF_MS {
            return Err(format!(
                "retry backoff_ms and max_backoff_ms must be at most {MAX_BACKOFF_MS} (one day)"
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(format!(
                "retry jitter is {}: it must be between 0 and 1",
                self.jitter
            ));
        }
        if self.on.is_empty() {
            return Err(
                "retry on is empty: name at least one of failed, timeout, exit_code, error".into(),
            );
        }
        Ok(())
    }

    /// The delay before attempt `next` (2 = the first retry), given `random` in [0, 1):
    /// `backoff_ms · 2^(next − 2)`, capped at `max_backoff_ms`, less up to `jitter` of it.
    pub fn delay_ms(&self, next: u32, random: f64) -> u64 {
        let exp = next.saturating_sub(2).min(40);
        let base = self
            .backoff_ms
            .saturating_mul(1u64 << exp)
            .min(self.max_backoff_ms);
        let cut = (base as f64 * self.jitter * random.clamp(0.0, 1.0)) as u64;
        base - cut.min(base)
    }

    /// Whether a failure of kind `k` retries under this policy.
    pub fn retries(&self, k: Kind) -> bool {
        self.on.iter().any(|&o| o == k || o == Kind::Failed)
    }
}

/// The kind of a failed job's failure, from its result (`timed_out`, `exit_code`, `signal`).
pub fn kind_of(result: Option<&serde_json::Value>) -> Kind {
    let Some(r) = result else {
        return Kind::Error;
    };
    if r.get("timed_out").and_then(|v| v.as_bool()) == Some(true) {
        return Kind::Timeout;
    }
    let code = r.get("exit_code").and_then(|v| v.as_i64());
    let signal = r.get("signal").is_some_and(|s| !s.is_null());
    if code.is_some_and(|c| c != 0) || signal {
        return Kind::ExitCode;
    }
    Kind::Error
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn back_off_doubles_up_to_the_cap_and_jitter_only_shortens() {
        let p = Policy::parse(
            r#"{"max_attempts": 6, "backoff_ms": 100, "max_backoff_ms": 350, "jitter": 0.5}"#,
        )
        .unwrap();
        let exact: Vec<u64> = (2..=6).map(|n| p.delay_ms(n, 0.0)).collect();
        assert_eq!(exact, vec![100, 200, 350, 350, 350]);
        assert_eq!(p.delay_ms(3, 0.999), 101, "less than half cut");
        assert_eq!(p.delay_ms(2, 0.5), 75);
        let q = Policy::parse(
            r#"{"max_attempts": 100, "backoff_ms": 86400000, "max_backoff_ms": 86400000}"#,
        )
        .unwrap();
        assert_eq!(q.delay_ms(100, 0.0), MAX_BACKOFF_MS, "no overflow");
    }

    #[test]
    fn bad_policies_are_refused_naming_the_field() {
        for (text, want) in [
            ("[]", "max_attempts"),
            ("{}", "max_attempts"),
            (r#"{"max_attempts": 0}"#, "between 1 and 100"),
            (r#"{"max_attempts": 2, "jitter": 2}"#, "jitter"),
            (r#"{"max_attempts": 2, "on": []}"#, "on is empty"),
            (
                r#"{"max_attempts": 2, "on": ["sometimes"]}"#,
                "unknown variant",
            ),
            (r#"{"max_attempts": 2, "tries": 1}"#, "unknown field"),
            (
                r#"{"max_attempts": 2, "backoff_ms": 99999999999}"#,
                "one day",
            ),
        ] {
            let e = Policy::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn failures_are_told_apart() {
        assert_eq!(kind_of(None), Kind::Error);
        assert_eq!(
            kind_of(Some(&json!({"timed_out": true, "exit_code": null}))),
            Kind::Timeout
        );
        assert_eq!(
            kind_of(Some(&json!({"timed_out": false, "exit_code": 2}))),
            Kind::ExitCode
        );
        assert_eq!(
            kind_of(Some(&json!({"exit_code": null, "signal": 9}))),
            Kind::ExitCode
        );
        let p = Policy::parse(r#"{"max_attempts": 2, "on": ["timeout"]}"#).unwrap();
        assert!(p.retries(Kind::Timeout) && !p.retries(Kind::ExitCode) && !p.retries(Kind::Error));
        assert!(Policy::parse(r#"{"max_attempts": 2}"#)
            .unwrap()
            .retries(Kind::Error));
    }
}
