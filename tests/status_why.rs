//! Issue 21 item 6: `brainloop status` says why the worker does not progress — a database whose
//! write lock another process holds (with its pid), a full disk — and never reports DEAD a worker
//! that is alive and holds the data-dir lock. Failed writes log one line per cause per period.
//! (Stuck workers, unwritable output.db and clock steps: tests/status_truth.rs.)

mod common;

use common::{now_ms, Env, BIN};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
const FAST: [(&str, &str); 1] = [("BRAINLOOP_DEAD_AFTER_MS", "1000")];

/// `brainloop status --json` with a 1 s dead_after: (exit code, report).
fn status(env: &Env) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(["status", "--json", "--data-dir"])
        .arg(&env.data)
        .envs(FAST)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

/// Polls `status` until `pred` holds; returns the last report.
fn status_until(env: &Env, what: &str, pred: impl Fn(i32, &Value) -> bool) -> (i32, Value) {
    let t0 = Instant::now();
    loop {
        let (code, v) = status(env);
        if pred(code, &v) {
            return (code, v);
        }
        assert!(
            t0.elapsed() < LONG,
            "status never showed {what}: exit {code}, {v:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn has_cause(v: &Value, cause: &str) -> bool {
    v["problems"]
        .as_array()
        .is_some_and(|p| p.iter().any(|x| x["cause"] == cause))
}

#[test]
fn a_held_output_db_lock_is_named_with_its_pid_and_by_the_worker_which_is_blocked_not_dead() {
    let env = Env::new();
    let d = env.start(&FAST);
    let mut c = env.output();
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let id = env.insert("sleep", "{\"ms\": 1}");
    let (code, v) = status_until(&env, "the held lock", |_, v| {
        has_cause(v, "database locked")
    });
    let lock = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["cause"] == "database locked")
        .unwrap();
    assert_eq!(lock["file"], "brainloop.output.db", "{v:#}");
    assert_eq!(lock["pid"], std::process::id() as i64, "{v:#}");
    assert_eq!(v["alive"], true, "{v:#}");
    assert!(!v["state"].as_str().unwrap().starts_with("DEAD"), "{v:#}");
    assert_eq!(code, 4, "alive but blocked: {v:#}");
    // The worker itself says so, through its status file (issue 34: before, its heartbeat —
    // in the locked file — went stale and status said STUCK with exit 0).
    let (code, v) = status_until(&env, "the worker's own report", |_, v| {
        has_cause(v, "worker: output")
    });
    assert_eq!(code, 4, "{v:#}");
    assert_eq!(
        v["state"], "running",
        "alive and beating, only blocked: {v:#}"
    );
    assert_eq!(v["heartbeat"]["pid"], d.pid(), "{v:#}");
    tx.rollback().unwrap();
    drop(c);
    env.wait_status(id, "succeeded", LONG);
    status_until(&env, "recovery", |code, _| code == 0);
    d.sigterm();
    d.wait_exit(LONG);
}

/// A small tmpfs the test mounts (root only); unmounted on drop.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(at: &std::path::Path, size: &str) -> SmallFs {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "CANNOT MOUNT A SMALL TMPFS HERE (needs root): the disk-full test cannot run"
        );
        SmallFs(at.to_path_buf())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` with one file; returns its path.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.flush();
    p
}

#[test]
fn a_full_disk_is_named_and_logged_once_per_period_and_the_job_lands_after() {
    let env = Env::new();
    let mnt = env.root.path().join("small");
    let _fs = SmallFs::mount(&mnt, "24m");
    let env = Env {
        data: mnt.join("data"),
        ..env
    };
    let d = env.start(&FAST);
    let id = env.insert_full("sleep", "{\"ms\": 1}", 0, Some(now_ms() + 1_500));
    env.wait_status(id, "queued", LONG);
    let filler = fill(&mnt);
    let (code, v) = status_until(&env, "disk full", |_, v| has_cause(v, "disk full"));
    assert_eq!(code, 4, "{v:#}");
    assert_eq!(v["alive"], true, "{v:#}");
    assert!(
        !v["state"].as_str().unwrap_or("").starts_with("DEAD"),
        "{v:#}"
    );
    // Let the worker hit the full disk for a while (its job is due), then free it.
    std::thread::sleep(Duration::from_secs(4));
    std::fs::remove_file(&filler).unwrap();
    let (status, _, _, attempts) = env.wait_status(id, "succeeded", LONG);
    assert_eq!((status.as_str(), attempts), ("succeeded", 1));
    status_until(&env, "recovery", |code, _| code == 0);
    d.sigterm();
    let log = d.log_text();
    let per_cause = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    for needle in [
        "cannot record results",
        "heartbeat write failed",
        "cannot claim new jobs",
    ] {
        assert!(
            per_cause(needle) <= 2,
            "{needle}: {} lines\n{log}",
            per_cause(needle)
        );
    }
    println!(
        "FIGURES: log lines during ~4 s of full disk: results {}, heartbeat {}, claim {}",
        per_cause("cannot record results"),
        per_cause("heartbeat write failed"),
        per_cause("cannot claim new jobs")
    );
}

/// lifecycle.db's view of a job: (status, attempts), if claimed.
fn progress(env: &Env, id: i64) -> Option<(String, i64)> {
    use rusqlite::OptionalExtension;
    env.lifecycle()
        .query_row(
            "SELECT status, attempts FROM processed_log WHERE job_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .unwrap()
}

#[test]
fn no_job_starts_while_results_cannot_be_recorded_and_it_runs_once_after() {
    let env = Env::new();
    let d = env.start(&FAST);
    let mut c = env.output();
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    // The first job's `running` row cannot be written: past the 5 s busy timeout the finisher
    // fails, records the problem and retries with back-off.
    let first = env.insert("sleep", "{\"ms\": 1}");
    let t0 = Instant::now();
    while !d.log_text().contains("cannot record results") {
        assert!(
            t0.elapsed() < LONG,
            "the finisher never failed:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = env.insert("sleep", "{\"ms\": 1}");
    while progress(&env, second).is_none() {
        assert!(t0.elapsed() < LONG, "job {second} never claimed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Several supervisor rounds (poll_fallback_ms 2 s) while results still cannot be recorded.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        progress(&env, second),
        Some(("claimed".to_string(), 0)),
        "a job started while its run could not be recorded"
    );
    tx.rollback().unwrap();
    drop(c);
    for id in [first, second] {
        let (_, _, _, attempts) = env.wait_status(id, "succeeded", LONG);
        assert_eq!(attempts, 1, "job {id}");
    }
    let lines = d
        .log_text()
        .lines()
        .filter(|l| l.contains("cannot record results"))
        .count();
    assert!(lines <= 2, "{lines} lines for one cause:\n{}", d.log_text());
    d.sigterm();
    d.wait_exit(LONG);
}
