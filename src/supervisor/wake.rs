//! The loop's wake-up state: what the supervisor's next pass must do (claim from input.db, re-read
//! the schedules, collect approvals) and when its wait ends at the latest. `serve.rs` feeds it
//! the file watcher's notifications (`wakeup.rs`), its timer and each claim's outcome; the
//! methods only set and read flags and deadlines (no I/O), so each one is unit-tested here.
//!
//! Why a check re-checks: the file watcher fires when a producer writes the WAL, which can be well
//! before its commit becomes visible (a FULL fsync lies in between, slow on a busy disk), and
//! events of several producers coalesce into one wake-up. So after a wake-up the supervisor
//! re-checks data_version with doubling delays (1, 2, 4 … 1024 ms: about 2 s, when the poll
//! fallback takes over), whether or not that check found rows.

use super::pace::ClaimPace;
use crate::stats::Every;
use std::time::Duration;
use tokio::time::Instant;

pub(super) const RECHECK_FIRST: Duration = Duration::from_millis(1);
pub(super) const RECHECK_LAST: Duration = Duration::from_millis(1024);

/// What the loop keeps between passes (the loose variables of the loop before issue 32).
pub(super) struct Wake {
    /// The poll fallback's period (`poll_fallback_ms`).
    poll: Duration,
    next_poll: Instant,
    /// input.db's data_version at the last claim.
    last_dv: Option<i64>,
    /// The lifecycle high-water mark the next claim starts from.
    hwm: i64,
    /// The last claim came back full (a backlog): claim again at once, whatever data_version
    /// says. True at start: the first pass claims.
    more: bool,
    /// A data_version check of input.db is due.
    check: bool,
    /// The pending check was asked for by a file event (not a poll or a re-check): it waits
    /// briefly for the commit to become visible.
    woken: bool,
    /// A re-check series to (re)start at the next wait, with this first delay.
    recheck: Option<Duration>,
    /// When the next re-check of the running series is due.
    recheck_at: Option<Instant>,
    /// The delay after that one.
    recheck_next: Duration,
    pace: ClaimPace,
    /// The schedules are to be re-read.
    schedules_check: bool,
    /// Approvals are to be collected from command_security.db.
    approvals_check: bool,
    security: SecurityWatch,
    /// command_security.db's data_version at the last confirmed change.
    security_dv: Option<i64>,
    /// Claims failed in a row.
    claim_errors: u32,
    /// Rate limit of the "cannot claim" line.
    claim_log: Every,
}

/// What one claim is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimAsk {
    /// Claim whatever data_version says (a backlog, or the first pass).
    pub force: bool,
    /// data_version at the last claim.
    pub prev: Option<i64>,
    /// Wait briefly for a file event's commit to become visible.
    pub settle: bool,
    /// The high-water mark to claim from.
    pub mark: i64,
}

/// How a failed claim is reported.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ClaimFailure {
    /// The first of a series: recorded as an `error` event.
    pub first: bool,
    /// Logged (with how many failures were not) or, within 30 s of the last line, not.
    pub log: Option<u64>,
}

impl Wake {
    /// At start: claim, read the schedules and collect approvals at the first pass.
    pub(super) fn new(poll: Duration, hwm: i64, now: Instant) -> Wake {
        Wake {
            poll,
            next_poll: now + poll,
            last_dv: None,
            hwm,
            more: true,
            check: true,
            woken: false,
            recheck: None,
            recheck_at: None,
            recheck_next: RECHECK_FIRST,
            pace: ClaimPace::default(),
            schedules_check: true,
            approvals_check: true,
            security: SecurityWatch::default(),
            security_dv: None,
            claim_errors: 0,
            claim_log: Every::default(),
        }
    }

    /// Catching up with a backlog: the pass claims again without waiting.
    pub(super) fn backlog(&self) -> bool {
        self.more
    }

    /// Whether this pass claims, and how. A backlog always claims; a check does unless the
    /// pace holds it back, and it is then deferred (`ClaimPace`) and ends the wait when due.
    pub(super) fn claim_now(&mut self, now: Instant) -> Option<ClaimAsk> {
        if self.check && !self.more && !self.pace.allows(now) {
            self.check = false;
        }
        if !(self.more || self.check) {
            return None;
        }
        let settle = self.woken && !self.more;
        self.woken = false;
        Some(ClaimAsk {
            force: self.more,
            prev: self.last_dv,
            settle,
            mark: self.hwm,
        })
    }

    /// A claim ran: `rows` found (ready and answered), `full` — more are waiting.
    pub(super) fn claimed(&mut self, dv: i64, rows: usize, full: bool, mark: i64, now: Instant) {
        self.pace.claimed(rows, now);
        self.last_dv = Some(dv);
        self.hwm = mark;
        self.more = full;
        self.claim_errors = 0;
        self.claim_log.reset();
        self.check = false;
    }

    /// A claim failed: retried at the next poll (or file event).
    pub(super) fn claim_failed(&mut self) -> ClaimFailure {
        self.more = false;
        self.check = false;
        self.claim_errors += 1;
        // One line per period, not per wake-up: producers keep inserting meanwhile.
        let log = self.claim_log.due(Duration::from_secs(30));
        ClaimFailure {
            first: self.claim_errors == 1,
            log,
        }
    }

    /// The claim task panicked: as a failure, without its reporting.
    pub(super) fn claim_panicked(&mut self) {
        self.more = false;
        self.check = false;
    }

    /// Whether the schedules are to be re-read now (taken once).
    pub(super) fn take_schedules_check(&mut self) -> bool {
        std::mem::take(&mut self.schedules_check)
    }

    /// Whether command_security.db's data_version is to be read now: a change was notified and
    /// no collection is due anyway (taken once).
    pub(super) fn security_to_confirm(&mut self) -> bool {
        if self.security.notified && !self.approvals_check {
            self.security.notified = false;
            return true;
        }
        false
    }

    /// command_security.db's data_version read after a notification (`None`: unreadable):
    /// approvals are collected if it moved.
    pub(super) fn security_version(&mut self, dv: Option<i64>) {
        if dv.is_some() && dv != self.security_dv {
            self.security_dv = dv;
            self.approvals_check = true;
        }
    }

    /// Whether approvals are to be collected now (taken once; a notification pending meanwhile
    /// is covered by this collection).
    pub(super) fn take_approvals_check(&mut self) -> bool {
        if !self.approvals_check {
            return false;
        }
        self.approvals_check = false;
        self.security.notified = false;
        true
    }

    /// input.db's files changed. A producer committing job by job wakes the loop once per job:
    /// the pace holds the claim back while claims keep finding rows.
    pub(super) fn input_changed(&mut self) {
        self.check = true;
        self.woken = true;
        self.recheck = Some(RECHECK_FIRST);
    }

    /// command_security.db's files changed (an operator approved or denied something).
    pub(super) fn approvals_changed(&mut self, now: Instant) {
        self.security.noticed(now);
        self.recheck = Some(RECHECK_FIRST);
    }

    /// Between two claims of a backlog. It does not hold up an operator's decision, nor the
    /// schedules: a stored approvals notification (`approvals_notified`) or a due poll is taken
    /// here too, and the security file is re-checked once per batch meanwhile. input.db is
    /// claimed again anyway.
    pub(super) fn backlog_pass(&mut self, now: Instant, approvals_notified: bool) {
        if approvals_notified {
            self.approvals_changed(now);
        }
        self.security.recheck(now);
        if now >= self.next_poll {
            self.approvals_check = true;
            self.schedules_check = true;
            self.next_poll = now + self.poll;
        }
    }

    /// When the wait ends at the latest: the next poll, re-check, deferred claim, or `due_ms`
    /// (ms on the clock of `now_ms`, the monotonic one in the loop: a waiting job's
    /// `not_before`, a schedule's next time). Starts the re-check
    /// series a notification asked for.
    pub(super) fn deadline(
        &mut self,
        now: Instant,
        now_ms: i64,
        due_ms: impl IntoIterator<Item = Option<i64>>,
    ) -> Instant {
        self.arm_recheck(now);
        let mut deadline = self.next_poll;
        for t in [self.recheck_at, self.pace.deferred].into_iter().flatten() {
            deadline = deadline.min(t);
        }
        for t in due_ms.into_iter().flatten() {
            let in_ms = (t - now_ms).max(0) as u64;
            deadline = deadline.min(now + Duration::from_millis(in_ms));
        }
        deadline
    }

    fn arm_recheck(&mut self, now: Instant) {
        if let Some(delay) = self.recheck.take() {
            if delay <= RECHECK_LAST {
                self.recheck_at = Some(now + delay);
                self.recheck_next = delay * 2;
            } else {
                self.recheck_at = None;
            }
        }
    }

    /// The wait's timer fired: whatever is due at `now` is asked for.
    pub(super) fn timer(&mut self, now: Instant) {
        if now >= self.next_poll {
            self.check = true;
            self.approvals_check = true;
            self.schedules_check = true;
            self.next_poll = now + self.poll;
        }
        if self.pace.due(now) {
            self.check = true;
        }
        if self.recheck_at.is_some_and(|t| now >= t) {
            self.check = true;
            self.security.recheck(now);
            self.recheck_at = None;
            self.recheck = Some(self.recheck_next);
        }
    }
}

/// Set by a change notification on command_security.db; confirmed with data_version, which
/// moves only when *another* connection (the operator's CLI) commits — the worker's own registry
/// writes do not trigger a scan. The WAL write that notified comes before its commit is visible
/// (as on the input side), so the input's re-checks re-check it for a while.
#[derive(Debug, Default)]
struct SecurityWatch {
    /// A data_version check is due.
    notified: bool,
    recheck_until: Option<Instant>,
}

impl SecurityWatch {
    fn noticed(&mut self, now: Instant) {
        self.notified = true;
        self.recheck_until = Some(now + RECHECK_LAST * 2);
    }

    /// At a re-check: another data_version check while the last notification is recent.
    fn recheck(&mut self, now: Instant) {
        if self.recheck_until.is_some_and(|u| now <= u) {
            self.notified = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const POLL: Duration = Duration::from_secs(60);

    fn ms(n: u64) -> Duration {
        MS * n as u32
    }

    /// A state past its first pass: nothing due until the poll.
    fn idle(t0: Instant) -> Wake {
        let mut w = Wake::new(POLL, 0, t0);
        assert!(w.claim_now(t0).is_some());
        w.claimed(1, 0, false, 0, t0);
        assert!(w.take_schedules_check() && w.take_approvals_check());
        w
    }

    #[test]
    fn the_first_pass_claims_reads_schedules_and_collects_approvals() {
        let t0 = Instant::now();
        let mut w = Wake::new(POLL, 42, t0);
        let ask = w.claim_now(t0);
        assert_eq!(
            ask,
            Some(ClaimAsk {
                force: true,
                prev: None,
                settle: false,
                mark: 42
            })
        );
        assert!(w.take_schedules_check() && !w.take_schedules_check());
        assert!(w.take_approvals_check() && !w.take_approvals_check());
        w.claimed(7, 1, false, 50, t0);
        assert!(!w.backlog());
        assert_eq!(w.claim_now(t0), None, "nothing asked for since");
        assert_eq!(w.deadline(t0, 0, [None, None]), t0 + POLL);
    }

    #[test]
    fn what_a_pass_claims() {
        // (last claim: rows, full; then a file event?; the pass comes ms after the claim)
        // → (claims: force, settle) or None; a deferred check's time in ms.
        type Row = (usize, bool, bool, u64, Option<(bool, bool)>, Option<u64>);
        let table: &[Row] = &[
            // Nothing asked for: no claim.
            (0, false, false, 0, None, None),
            // A file event after a quiet claim: claims at once, settling.
            (0, false, true, 0, Some((false, true)), None),
            (1, false, true, 0, Some((false, true)), None),
            // After a claim that found several rows: held back until the pace allows.
            (2, false, true, 1, None, Some(5)),
            (2, false, true, 5, Some((false, true)), None),
            // A backlog claims at once whatever the pace, and forced (no settling).
            (512, true, false, 0, Some((true, false)), None),
            (512, true, true, 0, Some((true, false)), None),
        ];
        for (i, &(rows, full, event, after, claims, deferred)) in table.iter().enumerate() {
            let t0 = Instant::now();
            let mut w = idle(t0);
            w.claimed(9, rows, full, 100, t0);
            if event {
                w.input_changed();
            }
            let ask = w.claim_now(t0 + ms(after));
            assert_eq!(ask.map(|a| (a.force, a.settle)), claims, "row {i}");
            if let Some(a) = ask {
                assert_eq!((a.prev, a.mark), (Some(9), 100), "row {i}");
            }
            assert_eq!(w.pace.deferred, deferred.map(|d| t0 + ms(d)), "row {i}");
        }
    }

    #[test]
    fn a_deferred_check_keeps_its_file_event_and_ends_the_wait() {
        let t0 = Instant::now();
        let mut w = idle(t0);
        w.claimed(1, 3, false, 0, t0);
        w.input_changed();
        assert_eq!(w.claim_now(t0 + MS), None);
        // The file event's re-checks (at 2 and 4 ms) are held back too; the wait then ends at
        // the pace's time, 5 ms after the claim.
        let mut now = t0 + MS;
        let mut ends = Vec::new();
        let ask = loop {
            if let Some(a) = w.claim_now(now) {
                break a;
            }
            now = w.deadline(now, 0, [None, None]);
            ends.push((now - t0).as_millis() as u64);
            w.timer(now);
        };
        assert_eq!(ends, [2, 4, 5]);
        assert!(!ask.force && ask.settle, "still the file event's check");
        w.claimed(1, 0, false, 0, t0 + ms(5));
        w.timer(t0 + ms(6));
        assert_eq!(w.claim_now(t0 + ms(6)), None, "taken once");
    }

    #[test]
    fn a_file_event_is_rechecked_with_doubling_delays_until_the_poll_takes_over() {
        let t0 = Instant::now();
        let mut w = idle(t0);
        w.input_changed();
        let mut now = t0;
        let mut delays = Vec::new();
        loop {
            let _ = w.claim_now(now).map(|_| w.claimed(1, 0, false, 0, now));
            let d = w.deadline(now, 0, [None, None]);
            if d == t0 + POLL {
                break;
            }
            delays.push((d - now).as_millis() as u64);
            w.timer(d);
            assert!(w.claim_now(d).is_some(), "a re-check claims");
            now = d;
        }
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]);
        // A new event restarts the series from 1 ms.
        w.input_changed();
        assert_eq!(w.deadline(now, 0, [None, None]), now + MS);
    }

    #[test]
    fn the_wait_ends_at_the_earliest_deadline() {
        let t0 = Instant::now();
        let at = |ms_| Some(t0 + ms(ms_));
        // (ready's next not_before, schedule's next time, in ms from now_ms=1000) → ends at
        let table: &[(Option<i64>, Option<i64>, Option<Instant>)] = &[
            (None, None, Some(t0 + POLL)),
            (Some(1500), None, at(500)),
            (Some(1500), Some(1200), at(200)),
            (None, Some(999), at(0)),
            (Some(100_000), None, Some(t0 + POLL)),
        ];
        for &(ready, sched, end) in table {
            let mut w = idle(t0);
            assert_eq!(Some(w.deadline(t0, 1000, [ready, sched])), end);
        }
    }

    #[test]
    fn the_timer_asks_for_what_is_due() {
        let t0 = Instant::now();
        // The poll: a check, the schedules and the approvals; then the next poll a period on.
        let mut w = idle(t0);
        w.timer(t0 + POLL - MS);
        assert_eq!(
            w.claim_now(t0 + POLL - MS),
            None,
            "before the poll: nothing"
        );
        w.timer(t0 + POLL);
        assert!(w
            .claim_now(t0 + POLL)
            .is_some_and(|a| !a.force && !a.settle));
        assert!(w.take_schedules_check() && w.take_approvals_check());
        assert_eq!(w.deadline(t0 + POLL, 0, [None, None]), t0 + POLL * 2);
    }

    #[test]
    fn an_operators_decision_is_confirmed_then_collected_once() {
        let t0 = Instant::now();
        let mut w = idle(t0);
        w.security_version(Some(3)); // as seen at start-up's collection
        assert!(w.take_approvals_check());
        assert!(!w.security_to_confirm(), "nothing notified");
        // The worker's own write: data_version unmoved, nothing collected.
        w.approvals_changed(t0);
        assert!(w.security_to_confirm() && !w.security_to_confirm());
        w.security_version(Some(3));
        assert!(!w.take_approvals_check());
        // Unreadable: nothing collected either.
        w.approvals_changed(t0);
        assert!(w.security_to_confirm());
        w.security_version(None);
        assert!(!w.take_approvals_check());
        // The operator's commit moves it: collected once.
        w.approvals_changed(t0);
        assert!(w.security_to_confirm());
        w.security_version(Some(4));
        assert!(w.take_approvals_check() && !w.take_approvals_check());
        // A notification while a collection is due anyway needs no confirming, and the
        // collection takes it.
        w.timer(t0 + POLL);
        w.approvals_changed(t0 + POLL);
        assert!(!w.security_to_confirm());
        assert!(w.take_approvals_check());
        assert!(!w.security_to_confirm());
    }

    #[test]
    fn the_input_rechecks_recheck_a_recent_security_notification() {
        // (ms after the notification a re-check comes) → security confirmed again
        let table: &[(u64, bool)] = &[(1, true), (1024, true), (2048, true), (2049, false)];
        for &(after, again) in table {
            let t0 = Instant::now();
            let mut w = idle(t0);
            w.approvals_changed(t0);
            assert!(w.security_to_confirm());
            w.security_version(None);
            // A re-check of the input side comes `after` ms later.
            w.recheck = None;
            w.recheck_at = Some(t0 + ms(after));
            w.timer(t0 + ms(after));
            assert_eq!(w.security_to_confirm(), again, "re-check {after} ms after");
        }
    }

    #[test]
    fn a_backlog_takes_approvals_and_the_poll_but_keeps_claiming() {
        let t0 = Instant::now();
        let mut w = idle(t0);
        w.claimed(1, 512, true, 512, t0);
        assert!(w.backlog());
        w.backlog_pass(t0 + MS, false);
        assert!(!w.security_to_confirm() && !w.take_approvals_check());
        assert!(!w.take_schedules_check());
        // A stored approvals notification: confirmed at the next pass.
        w.backlog_pass(t0 + MS, true);
        assert!(w.security_to_confirm());
        w.security_version(None);
        // The poll comes due during the backlog: schedules and approvals, not a second claim.
        w.backlog_pass(t0 + POLL, false);
        assert!(w.take_schedules_check() && w.take_approvals_check());
        let ask = w.claim_now(t0 + POLL);
        assert!(ask.is_some_and(|a| a.force && a.mark == 512));
        // The security notification's re-check series starts once the backlog is over.
        w.claimed(2, 1, false, 513, t0 + POLL);
        assert_eq!(w.deadline(t0 + POLL, 0, [None, None]), t0 + POLL + MS);
    }

    #[test]
    fn claim_failures_are_reported_once_per_series() {
        let t0 = Instant::now();
        let mut w = Wake::new(POLL, 0, t0);
        let first = w.claim_failed();
        assert_eq!(
            first,
            ClaimFailure {
                first: true,
                log: Some(0)
            }
        );
        assert!(!w.backlog(), "a failed claim ends the backlog");
        let second = w.claim_failed();
        assert_eq!(
            second,
            ClaimFailure {
                first: false,
                log: None
            }
        );
        w.claimed(1, 0, false, 0, t0);
        assert!(w.claim_failed().first, "a success ends the series");
        w.claim_panicked();
        assert_eq!(w.claim_now(t0), None);
    }
}
