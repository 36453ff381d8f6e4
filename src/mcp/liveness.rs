//! Is the worker running? The front-end never executes anything, so a call queued while no
//! worker runs would just hang: it fails fast instead. The rule is `brainloop status`'s: the
//! latest heartbeat must exist, not say `stopped`, and be younger than `dead_after_ms` (at
//! least two heartbeat intervals; 30 s by default). A draining worker claims nothing new, so it
//! counts as down too.

use crate::config::Config;
use crate::db::output;
use anyhow::Result;
use rusqlite::Connection;

/// The verdict, with the sentence a caller reads when the worker is down.
#[derive(Debug, Clone, PartialEq)]
pub enum Liveness {
    Alive,
    Down(String),
}

/// After how long without a heartbeat the worker counts as down.
pub fn dead_after_ms(config: &Config) -> i64 {
    config
        .dead_after_ms
        .max(2 * config.heartbeat_interval_ms)
        .min(i64::MAX as u64) as i64
}

/// Reads the latest heartbeat and judges it at `now` (unix ms).
pub fn check(conn: &Connection, config: &Config, now: i64) -> Result<Liveness> {
    let hb = output::latest_heartbeat(conn)?;
    Ok(judge(hb.as_ref(), config, now))
}

/// The pure rule.
pub fn judge(hb: Option<&output::Heartbeat>, config: &Config, now: i64) -> Liveness {
    let dir = config.data_dir.display();
    let Some(hb) = hb else {
        return Liveness::Down(format!(
            "the brainloop worker has never run on data dir {dir} (no heartbeat): start it with `brainloop run --data-dir {dir}`"
        ));
    };
    let age_ms = now.saturating_sub(hb.timestamp);
    let age = format!("{:.1} s", age_ms as f64 / 1000.0);
    if hb.status == "stopped" {
        return Liveness::Down(format!(
            "the brainloop worker is not running: it stopped (last heartbeat {age} ago, state stopped); start it with `brainloop run --data-dir {dir}`"
        ));
    }
    if hb.status == "draining" {
        return Liveness::Down(format!(
            "the brainloop worker is shutting down (state draining, last heartbeat {age} ago) and claims no new job; retry once it is running again"
        ));
    }
    let limit = dead_after_ms(config);
    if age_ms > limit {
        return Liveness::Down(format!(
            "the brainloop worker is not running: no heartbeat for {age} (last state {}; a live worker beats at least every {} s); start it with `brainloop run --data-dir {dir}`",
            hb.status,
            limit / 1000
        ));
    }
    Liveness::Alive
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(status: &str, ts: i64) -> output::Heartbeat {
        output::Heartbeat {
            status: status.into(),
            timestamp: ts,
            ..Default::default()
        }
    }

    #[test]
    fn down_when_never_started_stopped_or_silent() {
        let c = Config::default();
        let now = 1_000_000;
        assert!(matches!(judge(None, &c, now), Liveness::Down(m) if m.contains("never run")));
        assert!(
            matches!(judge(Some(&hb("stopped", now)), &c, now), Liveness::Down(m) if m.contains("stopped"))
        );
        match judge(Some(&hb("running", now - 42_000)), &c, now) {
            Liveness::Down(m) => assert!(m.contains("42.0 s"), "{m}"),
            Liveness::Alive => panic!("a 42 s old heartbeat is dead"),
        }
        assert_eq!(
            judge(Some(&hb("running", now - 1_000)), &c, now),
            Liveness::Alive
        );
        assert!(
            matches!(judge(Some(&hb("draining", now - 1_000)), &c, now), Liveness::Down(m) if m.contains("draining"))
        );
    }
}
