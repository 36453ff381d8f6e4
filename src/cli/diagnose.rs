//! Why the worker is not progressing, for `brainloop status` (issue 21): what the worker itself
//! reports in its heartbeat (`problem`: results or claims it cannot record, since when), a full
//! disk under the data dir, a database whose write lock another process holds (pid and command
//! line, from `/proc/locks`), and a failed consistency check of the five files.

use crate::config::Config;
use crate::db::{identity, DbKind};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Below this many free bytes the data dir's file system counts as full.
const DISK_FULL_BELOW: u64 = 16 * 1024 * 1024;
/// SQLite's WAL write lock: byte 120 of the `-shm` file (`WAL_WRITE_LOCK`).
const WAL_WRITE_LOCK: u64 = 120;

/// Every problem found; `worker_pid` (the lock holder) is left out of the lock holders.
pub fn problems(config: &Config, reported: Option<&str>, worker_pid: Option<i64>) -> Vec<Value> {
    let mut out = Vec::new();
    out.extend(reported_by_worker(reported));
    out.extend(disk_full(&config.data_dir));
    out.extend(locked_databases(&config.data_dir, worker_pid));
    out.extend(inconsistent(config));
    out
}

fn reported_by_worker(reported: Option<&str>) -> Vec<Value> {
    let Some(v) = reported.and_then(|r| serde_json::from_str::<Value>(r).ok()) else {
        return Vec::new();
    };
    let Some(m) = v.as_object() else {
        return Vec::new();
    };
    m.iter()
        .map(|(cause, d)| {
            json!({"cause": format!("worker: {cause}"), "detail": d["error"], "since": d["since"]})
        })
        .collect()
}

fn disk_full(dir: &Path) -> Option<Value> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    let free = st.blocks_available() as u64 * st.fragment_size() as u64;
    (free < DISK_FULL_BELOW).then(|| {
        json!({"cause": "disk full", "detail": format!(
            "{free} bytes free on the file system of {} (results, claims and heartbeats cannot be written); free space there",
            dir.display())})
    })
}

/// (pid, inode, start) of every POSIX write lock in /proc/locks.
fn write_locks() -> Vec<(i64, u64, u64)> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // "1: POSIX ADVISORY WRITE 123 08:01:4567 120 120" (blocked waiters start with "->")
            if f.len() < 8 || f[1] != "POSIX" || f[3] != "WRITE" {
                return None;
            }
            let ino = f[5].rsplit(':').next()?.parse().ok()?;
            Some((f[4].parse().ok()?, ino, f[6].parse().ok()?))
        })
        .collect()
}

fn locked_databases(dir: &Path, worker_pid: Option<i64>) -> Vec<Value> {
    let locks = write_locks();
    DbKind::ALL
        .iter()
        .filter_map(|k| {
            let shm = std::fs::metadata(format!("{}-shm", k.path(dir).display())).ok()?;
            let (pid, _, _) = locks.iter().find(|(pid, ino, start)| {
                *ino == shm.ino() && *start == WAL_WRITE_LOCK && Some(*pid) != worker_pid
            })?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| crate::quote::prefix(&String::from_utf8_lossy(&b).replace('\0', " "), 200))
                .unwrap_or_default();
            Some(json!({"cause": "database locked", "file": k.file_name(), "pid": pid,
                "detail": format!("{}'s write lock is held by pid {pid} ({}); the worker waits for it", k.file_name(), cmd.trim())}))
        })
        .collect()
}

fn inconsistent(config: &Config) -> Vec<Value> {
    if !DbKind::ALL
        .iter()
        .all(|k| k.path(&config.data_dir).exists())
    {
        return Vec::new();
    }
    match identity::check(&config.data_dir, config.retention.results_days) {
        Ok(p) if p.is_empty() => Vec::new(),
        Ok(p) => vec![json!({"cause": "inconsistent data dir",
            "detail": identity::refusal(&config.data_dir, &p)})],
        Err(e) => vec![
            json!({"cause": "check failed", "detail": format!("cannot check the five files: {e:#}")}),
        ],
    }
}
