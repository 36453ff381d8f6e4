//! systemd integration: `READY=1` once recovery is done, `STOPPING=1` when draining, `STATUS=`
//! lines, and the watchdog ping from its own timer — sent only while the supervisor loop is
//! still going round, so a wedged worker is restarted. Everything is a no-op outside systemd.

use crate::stats::Stats;
use sd_notify::NotifyState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// Starts the watchdog timer if systemd asked for one (`WatchdogSec=`). The supervisor loop goes
/// round at least every `poll_fallback` while idle, so it counts as stalled only when its last
/// round is older than the watchdog period plus that interval.
pub fn spawn_watchdog(
    stats: Arc<Stats>,
    poll_fallback: std::time::Duration,
    stop: CancellationToken,
) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return;
    };
    let half = period / 2;
    tracing::info!(
        period_ms = period.as_millis() as u64,
        "systemd watchdog enabled"
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(half);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            let age = crate::time::now_ms() - stats.last_tick_ms.load(Ordering::Relaxed);
            if age < (period + poll_fallback).as_millis() as i64 {
                send(&[NotifyState::Watchdog]);
            } else {
                tracing::error!(
                    age_ms = age,
                    "supervisor loop stalled: withholding the watchdog ping"
                );
            }
        }
    });
}
