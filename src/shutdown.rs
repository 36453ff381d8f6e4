//! Shutdown signalling, and **the shutdown budget** (issue 34): the first SIGTERM/SIGINT asks
//! the worker to stop claiming and drain, and starts one [`BUDGET`] of 55 s on the monotonic
//! clock, taken at the signal, that every phase draws from — the time the loop still spends
//! in a call it was making (a locked database), the drain window, the cancel grace, the result
//! flush, the recorder, the heartbeat and the exit. A second signal asks it to hurry (cancel
//! running jobs now instead of waiting for the drain window).
//!
//! This module owns the budget: its length, the order of the phases and the share each later
//! phase keeps ([`LATER_PHASES`]); the drain (`supervisor::drain`) asks it when each phase ends
//! ([`Shutdown::phase_end`]), the configuration check asks it how much the drain window and the
//! cancel grace may take together ([`DRAIN_AND_GRACE`]), and the databases' lock waits ask it how
//! long they may still wait ([`lock_wait_limit`]), so that no blocking call holds the shutdown
//! past its budget.
//!
//! Like mini-redis, the signal is a token every long-running task watches; nothing is torn down
//! from outside.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// From the first signal to the exit of the process: systemd's `TimeoutStopSec=60` minus 5 s
/// of margin (process start-up of the stop, scheduling on a loaded machine).
pub const BUDGET: Duration = Duration::from_secs(55);
/// Results of the jobs that ended (output.db, else the spool beside it: `supervisor::spool`).
pub const FLUSH_SHARE: Duration = Duration::from_secs(4);
/// The recorder's last write of telemetry events and audit rows into metadata.db.
pub const RECORDER_SHARE: Duration = Duration::from_secs(3);
/// The heartbeat's `stopped` row.
pub const HEARTBEAT_SHARE: Duration = Duration::from_secs(2);
/// Idle sandbox helpers, the runtime's shutdown, the exit.
pub const EXIT_SHARE: Duration = Duration::from_secs(1);
/// What the phases after the cancel grace keep, in their order.
pub const LATER_PHASES: Duration = Duration::from_secs(4 + 3 + 2 + 1);
/// What the drain window and the cancel grace may take together: the budget minus the later
/// phases. The configuration check (`Config::validate`) holds `drain_window_ms +
/// cancel_grace_ms` to it.
pub const DRAIN_AND_GRACE: Duration = Duration::from_secs(55 - 10);
/// After the signal, one wait for a SQLite lock held by another process lasts at most this
/// (before it, `db::BUSY_TIMEOUT`): a call the loop was making when the signal came ends
/// within it, and so does each write the later phases try before they fall back.
pub const LOCK_WAIT_AFTER_SIGNAL: Duration = Duration::from_secs(1);

/// When the first signal came, for the databases' lock waits ([`lock_wait_limit`]). Process-wide
/// like the signal itself; set only by [`Shutdown::request`].
static SIGNALLED_AT: OnceLock<Instant> = OnceLock::new();

#[derive(Clone, Default)]
pub struct Shutdown {
    /// Fired by the first signal: stop claiming, drain.
    pub requested: CancellationToken,
    /// Fired by a second signal: skip the rest of the drain window.
    pub hurry: CancellationToken,
    /// The first signal's instant (the budget's start).
    at: Arc<OnceLock<Instant>>,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// The first signal: the budget starts now (if it has not started), then `requested` fires.
    pub fn request(&self) {
        let now = Instant::now();
        let at = *self.at.get_or_init(|| now);
        let _ = SIGNALLED_AT.set(at);
        self.requested.cancel();
    }

    /// When the budget ends: the first signal + [`BUDGET`]. Without a signal (the loop ended for
    /// another reason) the budget starts now.
    pub fn deadline(&self) -> Instant {
        *self.at.get_or_init(Instant::now) + BUDGET
    }

    /// When a phase ends: after `share` from now, or earlier if the phases after it would not
    /// keep `later` of the budget.
    pub fn phase_end(&self, share: Duration, later: Duration) -> Instant {
        let by_budget = self
            .deadline()
            .checked_sub(later)
            .unwrap_or_else(Instant::now);
        (Instant::now() + share).min(by_budget)
    }

    /// How long the budget has run.
    pub fn elapsed(&self) -> Duration {
        (self.deadline() - BUDGET).elapsed()
    }

    /// Listens for SIGTERM and SIGINT in a background task.
    pub fn listen_for_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let me = self.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                seen += 1;
                if seen == 1 {
                    // The budget starts here, not when the loop gets round to it.
                    me.request();
                    tracing::info!(
                        signal = name,
                        budget_ms = BUDGET.as_millis() as u64,
                        "shutdown requested: draining running jobs"
                    );
                } else {
                    tracing::warn!(signal = name, "second signal: cancelling running jobs now");
                    me.hurry.cancel();
                }
            }
        });
        Ok(())
    }
}

/// Whether a first signal came (the process-wide instant [`lock_wait_limit`] reads): work that
/// would otherwise wait longer for a lock gives up.
pub fn signalled() -> bool {
    SIGNALLED_AT.get().is_some()
}

/// Until when a wait for a lock that began at `since` may go on, given `normal` (the wait
/// without a shutdown): after the first signal, at most [`LOCK_WAIT_AFTER_SIGNAL`] past the
/// later of `since` and the signal, and never past the budget's [`EXIT_SHARE`].
pub fn lock_wait_limit(since: Instant, normal: Duration) -> Instant {
    let limit = since + normal;
    match SIGNALLED_AT.get() {
        None => limit,
        Some(&at) => limit
            .min(since.max(at) + LOCK_WAIT_AFTER_SIGNAL)
            .min(at + BUDGET - EXIT_SHARE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_phases_and_the_drain_fill_the_budget_exactly() {
        assert_eq!(
            FLUSH_SHARE + RECORDER_SHARE + HEARTBEAT_SHARE + EXIT_SHARE,
            LATER_PHASES
        );
        assert_eq!(DRAIN_AND_GRACE + LATER_PHASES, BUDGET);
        assert!(BUDGET < Duration::from_secs(60), "systemd kills at 60 s");
    }

    #[test]
    fn a_phase_ends_where_the_later_phases_keep_their_share() {
        let s = Shutdown::new();
        s.at.get_or_init(|| Instant::now() - Duration::from_secs(50));
        // 5 s left: a 4 s share that must leave 3 s ends in about 2 s.
        let end = s.phase_end(FLUSH_SHARE, Duration::from_secs(3));
        let left = end.saturating_duration_since(Instant::now());
        assert!(left <= Duration::from_secs(2), "{left:?}");
        assert!(left > Duration::from_millis(1500), "{left:?}");
        // Past the budget: the phase ends now.
        let late = Shutdown::new();
        late.at
            .get_or_init(|| Instant::now() - Duration::from_secs(70));
        assert!(late.phase_end(FLUSH_SHARE, LATER_PHASES) <= Instant::now());
    }
}
