//! Claim pacing (issue 24): a stream of jobs committed one by one is claimed in groups, a
//! client waiting for each answer is never held up, and a backlog is never paced (the
//! supervisor claims again at once while claims come back full).

use super::wakeup;
use std::time::Duration;

/// After a claim that found several rows (a producer committing faster than the worker
/// claims), the next claim waits until [`ClaimPace::SEVERAL`] after it: one claim, one answer
/// batch and one result commit then serve many jobs, and the producer keeps the CPU and the disk
/// it shares with the worker. A client waiting for each answer before sending the next finds
/// one row per claim and is never held up; neither is the first claim after a quiet spell.
#[derive(Debug, Default)]
pub(super) struct ClaimPace {
    /// When the last claim that found several rows ran.
    last: Option<tokio::time::Instant>,
    /// A check held back: when it runs.
    pub(super) deferred: Option<tokio::time::Instant>,
}

impl ClaimPace {
    /// The watcher holds its wake-ups as long (`wakeup::HOLD`) while the supervisor waits.
    const SEVERAL: Duration = wakeup::HOLD;

    pub(super) fn claimed(&mut self, rows: usize, now: tokio::time::Instant) {
        self.last = (rows > 1).then_some(now);
    }

    /// Whether a check may claim now; if not, it is deferred until it may.
    pub(super) fn allows(&mut self, now: tokio::time::Instant) -> bool {
        let until = self.last.map_or(now, |t| t + Self::SEVERAL);
        self.deferred = (now < until).then_some(until);
        self.deferred.is_none()
    }

    /// A deferred check whose time has come (taken once).
    pub(super) fn due(&mut self, now: tokio::time::Instant) -> bool {
        let due = self.deferred.is_some_and(|t| now >= t);
        if due {
            self.deferred = None;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_check_is_held_back_only_after_a_claim_that_found_several_rows() {
        let t0 = Instant::now();
        // (rows the last claim found, ms after it the check comes, allowed, deferred until ms)
        let table: &[(Option<usize>, u64, bool, Option<u64>)] = &[
            (None, 0, true, None),
            (Some(0), 0, true, None),
            (Some(1), 0, true, None),
            (Some(2), 0, false, Some(5)),
            (Some(2), 1, false, Some(5)),
            (Some(512), 4, false, Some(5)),
            (Some(2), 5, true, None),
            (Some(2), 50, true, None),
        ];
        for &(rows, after, allowed, until) in table {
            let mut p = ClaimPace::default();
            if let Some(r) = rows {
                p.claimed(r, t0);
            }
            let now = t0 + MS * after as u32;
            assert_eq!(
                p.allows(now),
                allowed,
                "{rows:?} rows, check {after} ms after"
            );
            assert_eq!(
                p.deferred,
                until.map(|u| t0 + MS * u as u32),
                "{rows:?} {after}"
            );
        }
    }

    #[test]
    fn a_deferred_check_comes_due_once() {
        let t0 = Instant::now();
        let mut p = ClaimPace::default();
        p.claimed(3, t0);
        assert!(!p.allows(t0 + MS));
        assert!(!p.due(t0 + MS * 4), "not before its time");
        assert!(p.due(t0 + MS * 5));
        assert!(!p.due(t0 + MS * 6), "taken once");
        assert!(p.allows(t0 + MS * 5));
        // The stream pace is the watcher's hold: neither waits longer than the other.
        assert_eq!(ClaimPace::SEVERAL, wakeup::HOLD);
    }
}
