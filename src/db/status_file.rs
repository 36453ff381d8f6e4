//! `brainloop.status.json`, beside the databases: the worker's live state for `brainloop
//! status`, on a channel that does not depend on any database (issue 34). Written by the
//! heartbeat (`heartbeat::status_file_loop`, its only writer) every second and at each state
//! change, atomically (a temp file renamed over it, so a reader sees a whole file or the
//! previous one); read by `cli::status`.
//!
//! It carries what a stuck or failing worker must still be able to say: its pid and boot, the
//! monotonic clock at the write (`mono_ms`, so a reader of the same boot computes the file's age
//! without trusting the wall clock), the wall clock at the write and at start (a step between
//! them is `clock_step_ms`), the live counters, and the problems that keep it from progressing —
//! including "results cannot be written to output.db", which the heartbeat row, itself in
//! output.db, could never carry. Not synced to disk: after a power loss it may be missing or
//! stale, which `status` reads as "not running" when the instance lock is free anyway.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE: &str = "brainloop.status.json";

/// How often the worker rewrites the file (the heartbeat interval when shorter).
pub const EVERY_MS: u64 = 1000;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatusFile {
    pub pid: i64,
    pub worker_id: String,
    pub version: String,
    /// `time::boot_id` of the writer.
    pub boot_id: String,
    /// `starting`, `running`, `draining`, `stopped`.
    pub state: String,
    /// Wall clock (unix ms) and monotonic clock (`time::mono_ms`) at this write.
    pub wall_ms: i64,
    pub mono_ms: i64,
    /// Monotonic time since the start.
    pub uptime_ms: i64,
    /// The wall-clock steps seen since the start, added up (ms; > 0 forward): each write compares
    /// the wall time elapsed since the previous write with the monotonic time elapsed.
    pub clock_step_ms: i64,
    /// The latest step: (wall time after it, its size in ms).
    pub last_clock_step: Option<(i64, i64)>,
    pub jobs_running: i64,
    pub queue_depth: i64,
    pub jobs_done_total: i64,
    pub sessions_active: i64,
    pub sessions_completed: i64,
    pub cache_hit_rate: f64,
    pub sandbox_level: Option<String>,
    /// What keeps the worker from progressing, by cause: `{"error": …, "since": unix ms}`.
    pub problems: serde_json::Map<String, serde_json::Value>,
}

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// Replaces the file atomically (temp file in the same directory, then rename).
pub fn write(data_dir: &Path, s: &StatusFile) -> Result<()> {
    let dest = path(data_dir);
    let tmp = data_dir.join(format!(".{FILE}.{}.tmp", std::process::id()));
    let body = serde_json::to_vec(s).context("cannot encode the status file")?;
    let res = (|| -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        // Readable like output.db (0640): the operator's group runs `status`.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o640)
            .open(&tmp)?;
        f.write_all(&body)?;
        std::fs::rename(&tmp, &dest)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.with_context(|| format!("cannot write {}", dest.display()))
}

/// The file's content; `None` when there is none (a worker older than the file, or none ever
/// started); an error when it cannot be read or parsed.
pub fn read(data_dir: &Path) -> Result<Option<StatusFile>> {
    let p = path(data_dir);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .with_context(|| format!("{} is not a status file", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
}

impl StatusFile {
    /// Milliseconds since this write, read by another process at (`now_wall`, `now_mono`,
    /// `boot`): on the monotonic clock when written in this boot, else on the wall clock (never
    /// negative).
    pub fn age_ms(&self, now_wall: i64, now_mono: i64, boot: &str) -> i64 {
        let age = if !boot.is_empty() && boot == self.boot_id {
            now_mono - self.mono_ms
        } else {
            now_wall - self.wall_ms
        };
        age.max(0)
    }

    /// The wall-clock steps since the worker started, up to the reader's own reading (a step
    /// after the last write counts too, when the reader is in the same boot).
    pub fn step_ms(&self, now_wall: i64, now_mono: i64, boot: &str) -> i64 {
        let since_write = if !boot.is_empty() && boot == self.boot_id {
            crate::time::wall_step_ms((self.wall_ms, self.mono_ms), (now_wall, now_mono))
        } else {
            0
        };
        self.clock_step_ms + crate::time::significant_step(since_write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_atomically_read_back_and_aged_on_the_monotonic_clock() {
        let d = tempfile::tempdir().unwrap();
        assert!(read(d.path()).unwrap().is_none());
        let s = StatusFile {
            pid: 7,
            boot_id: "b".into(),
            state: "running".into(),
            wall_ms: 10_000,
            mono_ms: 500,
            clock_step_ms: 5_000,
            ..Default::default()
        };
        write(d.path(), &s).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(s.clone()));
        // Same boot: the wall clock stepped back 2 h changes nothing.
        assert_eq!(s.age_ms(10_000 - 7_200_000 + 300, 800, "b"), 300);
        assert_eq!(
            s.step_ms(10_000 - 7_200_000 + 300, 800, "b"),
            5_000 - 7_200_000
        );
        assert_eq!(
            s.step_ms(10_300, 800, "b"),
            5_000,
            "no step since the write"
        );
        // Another boot: the wall clock, never negative.
        assert_eq!(s.age_ms(9_000, 800, "c"), 0);
        let leftovers: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file left");
    }
}
