//! Why the worker is not progressing, for `brainloop status` (issues 21, 34): what the worker
//! itself reports (its status file, `db::status_file`, or, from a worker older than the file, its
//! heartbeat's `problem`: results or claims it cannot record, output.db unwritable, since when),
//! a full disk under the data dir, a database whose write lock another process holds (pid and
//! command line, from `/proc/locks`), and a failed consistency check of the five files.
//!
//! Only what blocks the worker is a problem: a producer committing to input.db (which the worker
//! only reads, never waiting for its lock) is not; a disk is full when writes fail or would fail
//! ([`disk_full`]), not below a fixed threshold.

use crate::config::Config;
use crate::db::{identity, DbKind};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the worker's next write may need on the data dir's file system: one group commit's WAL
/// frames (16 pages of 4 KiB and the frame headers) plus the status file. With less free, the
/// next write would fail.
pub const NEXT_WRITE_BYTES: u64 = 80 * 1024;
/// What SQLite and the kernel say when a write finds no space.
const NO_SPACE: [&str; 3] = [
    "database or disk is full",
    "No space left on device",
    "os error 28",
];
/// SQLite's WAL write lock: byte 120 of the `-shm` file (`WAL_WRITE_LOCK`).
const WAL_WRITE_LOCK: u64 = 120;

/// Every problem found: `reported` — the worker's own problems by cause (`{"error", "since"}`);
/// `worker_pid` (the lock holder) is left out of the lock holders.
pub fn problems(
    config: &Config,
    reported: &serde_json::Map<String, Value>,
    worker_pid: Option<i64>,
) -> Vec<Value> {
    let mut out = Vec::new();
    out.extend(reported_by_worker(reported));
    let free = free_bytes(&config.data_dir);
    let errors: Vec<&str> = reported
        .values()
        .filter_map(|d| d["error"].as_str())
        .collect();
    if let Some(why) = disk_full(free, NEXT_WRITE_BYTES, &errors) {
        out.push(json!({"cause": "disk full", "detail": format!(
            "{why} on the file system of {} (results, claims and heartbeats cannot be written); free space there",
            config.data_dir.display())}));
    }
    out.extend(locked_databases(&config.data_dir, worker_pid));
    out.extend(spooled(&config.data_dir));
    out.extend(inconsistent(config));
    out
}

/// Results the last shutdown left in the results spool (`supervisor::spool`, its owner).
fn spooled(dir: &Path) -> Option<Value> {
    let (rows, groups) = crate::supervisor::spool::pending(dir).ok()?;
    (groups > 0).then(|| {
        json!({"cause": "results spooled", "detail": format!(
            "{rows} results spooled ({groups} groups) in {}: output.db could not take them at the last shutdown; \
             the next start writes them into output.db before claiming anything (make output.db writable, then start the worker)",
            crate::supervisor::spool::path(dir).display())})
    })
}

/// Bytes an unprivileged writer may still use on the file system of `dir` (statvfs).
// The casts are no-ops on 64-bit targets only (the field types are 32-bit on some).
#[allow(clippy::unnecessary_cast)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

/// The worker's problems as read from the heartbeat column (workers older than the status file).
pub fn parse_reported(reported: Option<&str>) -> serde_json::Map<String, Value> {
    reported
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

fn reported_by_worker(reported: &serde_json::Map<String, Value>) -> Vec<Value> {
    reported
        .iter()
        .map(|(cause, d)| {
            json!({"cause": format!("worker: {cause}"), "detail": d["error"], "since": d["since"]})
        })
        .collect()
}

/// Whether the data dir's disk is full, and why: the worker saw a write fail for lack of space
/// (`worker_errors`, what it reports), or fewer bytes are free (`free`, statvfs; `None`
/// unknown) than its next write needs (`need`). Plenty of space left is never "full", however
/// small the file system.
pub fn disk_full(free: Option<u64>, need: u64, worker_errors: &[&str]) -> Option<String> {
    let failed = worker_errors
        .iter()
        .find(|e| NO_SPACE.iter().any(|n| e.contains(n)));
    match (failed, free) {
        (Some(e), Some(f)) => Some(format!(
            "the worker's writes fail for lack of space ({}); {f} bytes free",
            crate::quote::prefix(e, 200)
        )),
        (Some(e), None) => Some(format!(
            "the worker's writes fail for lack of space ({})",
            crate::quote::prefix(e, 200)
        )),
        (None, Some(f)) if f < need => Some(format!(
            "{f} bytes free, less than the {need} bytes the worker's next write may need"
        )),
        _ => None,
    }
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

/// Databases the worker writes whose write lock another process holds. input.db is not one:
/// producers write it, and the worker only reads it (a WAL reader never waits for the writer).
fn locked_databases(dir: &Path, worker_pid: Option<i64>) -> Vec<Value> {
    let locks = write_locks();
    DbKind::ALL
        .iter()
        .filter(|k| **k != DbKind::Input)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_full_means_writes_fail_or_would_fail() {
        const NEED: u64 = NEXT_WRITE_BYTES;
        let enospc = "cannot record results: brainloop.output.db: database or disk is full";
        let errno = "cannot write /d/brainloop.status.json: No space left on device (os error 28)";
        let locked = "cannot record results: brainloop.output.db: database is locked";
        // (free bytes, the worker's errors, full?)
        let table: &[(Option<u64>, &[&str], bool)] = &[
            // A small file system with room for the next write is not full (was: < 16 MiB).
            (Some(15 * 1024 * 1024), &[], false),
            (Some(1024 * 1024), &[], false),
            (Some(NEED), &[], false),
            (Some(NEED - 1), &[], true),
            (Some(0), &[], true),
            // The worker saw a write fail for lack of space: full, whatever statvfs says now.
            (Some(10 << 30), &[enospc], true),
            (Some(10 << 30), &[errno], true),
            (None, &[enospc], true),
            // Other write failures are not a full disk.
            (Some(10 << 30), &[locked], false),
            (None, &[], false),
        ];
        for (free, errors, full) in table {
            let got = disk_full(*free, NEED, errors);
            assert_eq!(
                got.is_some(),
                *full,
                "free {free:?}, errors {errors:?}: {got:?}"
            );
        }
        assert!(disk_full(Some(0), NEED, &[])
            .unwrap()
            .contains("0 bytes free"));
    }

    #[test]
    fn spooled_results_are_counted_by_rows() {
        let d = tempfile::tempdir().unwrap();
        assert!(spooled(d.path()).is_none());
        std::fs::write(
            crate::supervisor::spool::path(d.path()),
            "{\"rows\":[{},{}]}\n",
        )
        .unwrap();
        let p = spooled(d.path()).unwrap();
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .starts_with("2 results spooled"),
            "{p}"
        );
    }
}
