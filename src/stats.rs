//! Live counters shared by the supervisor (which updates them) and the heartbeat (which
//! publishes them): gauges for the heartbeat row and metric counters flushed to `metrics`.

use crate::db::output::Metric;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

/// Lifecycle state published in the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    Starting,
    Running,
    Draining,
    Stopped,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Draining => "draining",
            WorkerState::Stopped => "stopped",
        }
    }
}

/// The problem cause of a database deleted or replaced under the running worker
/// (`db::Db::file_gone`): while it lasts nothing is claimed and results go to the spool.
pub const DATABASE_FILES: &str = "database files";

/// The problem cause of a database the worker writes that cannot be written now
/// (`db::Db::file_unwritable`): the jobs that need it wait (`db::retry_while_locked`).
pub const DATABASE_UNWRITABLE: &str = "database unwritable";

#[derive(Default)]
pub struct Stats {
    pub jobs_running: AtomicI64,
    /// Claimed jobs waiting for a slot or for their `not_before`.
    pub queue_depth: AtomicI64,
    pub jobs_done_total: AtomicI64,
    pub sessions_active: AtomicI64,
    pub sessions_completed: AtomicI64,
    /// Last time the supervisor loop went round (unix ms); the watchdog pings only while it moves.
    pub last_tick_ms: AtomicI64,
    cache_hits: AtomicI64,
    cache_misses: AtomicI64,
    counters: Mutex<BTreeMap<&'static str, f64>>,
    samples: Mutex<Vec<Metric>>,
    /// What keeps the worker from progressing, by cause: (error, since unix ms). Published in
    /// the heartbeat's `problem` column for `brainloop status` (issue 21).
    problems: Mutex<BTreeMap<&'static str, (String, i64)>>,
    /// Rate limit of the "heartbeat write failed" line.
    pub heartbeat_log: Mutex<Every>,
}

/// At most one log line per cause per period: `due` says whether to log now and how many
/// occurrences were left unlogged since the last line.
#[derive(Debug, Default)]
pub struct Every {
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl Every {
    pub fn due(&mut self, period: std::time::Duration) -> Option<u64> {
        match self.last {
            Some(t) if t.elapsed() < period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(std::time::Instant::now());
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// The cause went away: the next occurrence logs at once.
    pub fn reset(&mut self) {
        *self = Every::default();
    }
}

impl Stats {
    /// Records that `cause` blocks progress (keeps the first `since`).
    pub fn set_problem(&self, cause: &'static str, error: String) {
        let mut p = match self.problems.lock() {
            Ok(p) => p,
            Err(e) => e.into_inner(),
        };
        let since = p
            .get(cause)
            .map(|(_, s)| *s)
            .unwrap_or_else(crate::time::now_ms);
        p.insert(cause, (crate::quote::prefix(&error, 500), since));
    }

    pub fn has_problem(&self, cause: &'static str) -> bool {
        match self.problems.lock() {
            Ok(p) => p.contains_key(cause),
            Err(e) => e.into_inner().contains_key(cause),
        }
    }

    pub fn clear_problem(&self, cause: &'static str) {
        let mut p = match self.problems.lock() {
            Ok(p) => p,
            Err(e) => e.into_inner(),
        };
        p.remove(cause);
    }

    /// The current problems as JSON (`None` when there are none).
    pub fn problems_json(&self) -> Option<String> {
        let p = match self.problems.lock() {
            Ok(p) => p,
            Err(e) => e.into_inner(),
        };
        if p.is_empty() {
            return None;
        }
        let m: serde_json::Map<String, serde_json::Value> = p
            .iter()
            .map(|(k, (e, s))| (k.to_string(), serde_json::json!({"error": e, "since": s})))
            .collect();
        Some(serde_json::Value::Object(m).to_string())
    }

    pub fn incr(&self, name: &'static str, by: f64) {
        match name {
            "reader_cache_hit" => {
                self.cache_hits.fetch_add(by as i64, Ordering::Relaxed);
            }
            "reader_cache_miss" => {
                self.cache_misses.fetch_add(by as i64, Ordering::Relaxed);
            }
            _ => {}
        }
        let mut c = match self.counters.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        *c.entry(name).or_insert(0.0) += by;
    }

    /// Records one sample (e.g. a latency) to be written as its own metrics row.
    pub fn sample(&self, name: &str, value: f64, labels: Option<String>) {
        let mut s = match self.samples.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        // Bounded: a stuck writer must not grow memory without limit.
        if s.len() < 100_000 {
            s.push(Metric {
                timestamp: crate::time::now_ms(),
                name: name.to_string(),
                value,
                labels,
            });
        }
    }

    /// Counter deltas since the last call, plus the samples, as metric rows.
    pub fn take_metrics(&self, now: i64) -> Vec<Metric> {
        let counters = {
            let mut c = match self.counters.lock() {
                Ok(c) => c,
                Err(p) => p.into_inner(),
            };
            std::mem::take(&mut *c)
        };
        let mut out: Vec<Metric> = counters
            .into_iter()
            .map(|(name, value)| Metric {
                timestamp: now,
                name: name.to_string(),
                value,
                labels: None,
            })
            .collect();
        let mut s = match self.samples.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        out.append(&mut s);
        out
    }

    /// Puts metric rows back after a failed write so they are not lost.
    pub fn restore_metrics(&self, rows: Vec<Metric>) {
        let mut s = match self.samples.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if s.len() + rows.len() <= 100_000 {
            s.extend(rows);
        }
    }

    pub fn cache_hit_rate(&self) -> f64 {
        let h = self.cache_hits.load(Ordering::Relaxed) as f64;
        let m = self.cache_misses.load(Ordering::Relaxed) as f64;
        if h + m > 0.0 {
            h / (h + m)
        } else {
            0.0
        }
    }

    pub fn tick(&self) {
        self.last_tick_ms
            .store(crate::time::now_ms(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_flushed_as_deltas() {
        let s = Stats::default();
        s.incr("jobs_succeeded", 1.0);
        s.incr("jobs_succeeded", 2.0);
        s.incr("reader_cache_hit", 3.0);
        s.incr("reader_cache_miss", 1.0);
        s.sample("cerebras_latency_ms", 12.0, None);
        let m = s.take_metrics(5);
        let get = |n: &str| m.iter().find(|x| x.name == n).map(|x| x.value);
        assert_eq!(get("jobs_succeeded"), Some(3.0));
        assert_eq!(get("cerebras_latency_ms"), Some(12.0));
        assert!(s.take_metrics(6).is_empty(), "deltas reset after a flush");
        assert!((s.cache_hit_rate() - 0.75).abs() < 1e-9);
    }
}
