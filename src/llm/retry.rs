//! When to try again: exponential backoff with jitter, unless the server said how long to wait
//! (`retry-after-ms`, `retry-after`, or the reset time of an exhausted rate-limit quota), in
//! which case that wait is honoured (plus a little jitter so that concurrent jobs do not return
//! in lockstep), up to `max_retry_wait_ms`.

use super::wire::RateHints;
use super::{LlmConfig, LlmError};
use std::time::Duration;

/// A uniformly random fraction in [0, 1).
fn unit() -> f64 {
    let r = getrandom::u64().unwrap_or(0x9e37_79b9_7f4a_7c15);
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// Backoff before retry number `retry` (0-based): "equal jitter" — half the exponential step
/// fixed, half random — capped at `retry_max_ms`.
pub fn backoff(cfg: &LlmConfig, retry: u32) -> Duration {
    let step = cfg
        .retry_base_ms
        .saturating_mul(1u64 << retry.min(30))
        .min(cfg.retry_max_ms);
    let half = step as f64 / 2.0;
    Duration::from_millis((half + unit() * half) as u64)
}

/// The wait before the next attempt after `err`, or the error to give up with.
pub fn delay(
    cfg: &LlmConfig,
    retry: u32,
    err: &LlmError,
    hints: &RateHints,
) -> Result<Duration, LlmError> {
    if let Some(hint) = hints.wait() {
        let max = Duration::from_millis(cfg.max_retry_wait_ms);
        if hint > max {
            return Err(LlmError::RateLimited(format!(
                "{err}; the server asks to wait {:.1} s, more than max_retry_wait_ms ({} ms)",
                hint.as_secs_f64(),
                cfg.max_retry_wait_ms
            )));
        }
        let jitter = Duration::from_millis((unit() * 100.0) as u64);
        return Ok(hint + jitter);
    }
    Ok(backoff(cfg, retry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_within_bounds() {
        let cfg = LlmConfig {
            retry_base_ms: 100,
            retry_max_ms: 1_000,
            ..LlmConfig::default()
        };
        for retry in 0..10 {
            let step = (100u64 << retry).min(1_000);
            let d = backoff(&cfg, retry).as_millis() as u64;
            assert!(
                d >= step / 2 && d <= step,
                "retry {retry}: {d} not in [{}, {step}]",
                step / 2
            );
        }
    }

    #[test]
    fn hints_win_and_too_long_waits_give_up() {
        let cfg = LlmConfig {
            max_retry_wait_ms: 5_000,
            ..LlmConfig::default()
        };
        let err = LlmError::Api {
            status: 429,
            kind: None,
            message: "slow down".into(),
        };
        let h = RateHints {
            retry_after: Some(Duration::from_millis(1_500)),
            ..RateHints::default()
        };
        let d = delay(&cfg, 0, &err, &h).unwrap();
        assert!(d >= Duration::from_millis(1_500) && d < Duration::from_millis(1_600));
        let mut h = RateHints::default();
        h.set("remaining-requests-day", "0");
        h.set("reset-requests-day", "40000");
        let e = delay(&cfg, 0, &err, &h).unwrap_err();
        assert!(
            matches!(e, LlmError::RateLimited(ref m) if m.contains("40000.0 s")),
            "{e}"
        );
    }
}
