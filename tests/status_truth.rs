//! Issue 34 item 4: a status that tells the truth, with the real binary.
//!
//! - two producers inserting while the worker drains and a `status --json` loop runs: no false
//!   problem (no "inconsistent data dir", no "database locked" for input.db, which the worker
//!   only reads);
//! - a stopped (SIGSTOP) worker: exit 4, named stuck;
//! - an unwritable output.db (immutable as root, write-locked otherwise): exit 4, naming it —
//!   learned from the status file beside the databases, which does not depend on output.db;
//! - wall-clock steps under libfaketime (wall clock only): status stays right and names the step,
//!   a 10-minute approval does not expire at a forward step, a `not_before` job does not wait
//!   the size of a backward step, and a stopped worker is not "DEAD … −7168 s".

mod common;

use common::{job, now_ms, settled, Env, BIN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// The worker's and `status`'s view of liveness: a beat every 200 ms, stale after 1 s.
const FAST: [(&str, &str); 2] = [
    ("BRAINLOOP_DEAD_AFTER_MS", "1000"),
    ("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200"),
];

/// `brainloop status --json` (with `env` added): (exit code, report).
fn status_with(env: &Env, extra: &[(&str, &str)]) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(["status", "--json", "--data-dir"])
        .arg(&env.data)
        .envs(FAST)
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        json!({"unparsable": String::from_utf8_lossy(&out.stdout),
               "stderr": String::from_utf8_lossy(&out.stderr)})
    });
    (out.status.code().unwrap_or(-1), v)
}

fn status(env: &Env) -> (i32, Value) {
    status_with(env, &[])
}

/// Polls `status` until `pred` holds; returns the last report.
fn status_until(
    env: &Env,
    extra: &[(&str, &str)],
    within: Duration,
    what: &str,
    pred: impl Fn(i32, &Value) -> bool,
) -> (i32, Value) {
    let t0 = Instant::now();
    loop {
        let (code, v) = status_with(env, extra);
        if pred(code, &v) {
            return (code, v);
        }
        assert!(
            t0.elapsed() < within,
            "status never showed {what} within {within:?}: exit {code}, {v:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn problems(v: &Value) -> Vec<Value> {
    v["problems"].as_array().cloned().unwrap_or_default()
}

fn problem_text(v: &Value) -> String {
    problems(v)
        .iter()
        .map(|p| format!("{}: {}", p["cause"], p["detail"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn two_producers_a_draining_worker_and_a_status_loop_give_no_false_problem() {
    let env = Env::new();
    let d = env.start(&FAST);
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicI64::new(0));
    let producers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, inserted) = (Arc::clone(&stop), Arc::clone(&inserted));
            let c = env.input();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    c.execute(
                        "INSERT INTO jobs(action, params) VALUES ('sleep', '{\"ms\": 0}')",
                        [],
                    )
                    .unwrap();
                    inserted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // A third producer queues open MCP tasks (a job with its task id, as `brainloop mcp`
    // writes it) and withdraws every other one, as `tasks/cancel` does.
    let tasks = {
        let (stop, inserted) = (Arc::clone(&stop), Arc::clone(&inserted));
        let c = env.input();
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                c.execute(
                    "INSERT INTO jobs(action, params) VALUES ('sleep', '{\"ms\": 50}')",
                    [],
                )
                .unwrap();
                let id = c.last_insert_rowid();
                c.execute(
                    "UPDATE jobs SET task_id = ?2 WHERE id = ?1",
                    rusqlite::params![id, format!("bl-{id}-{k:016x}")],
                )
                .unwrap();
                if k % 2 == 0 {
                    c.execute(
                        "INSERT INTO withdrawals(job_id, client_id, requested_at) VALUES (?1, 'local', ?2)",
                        rusqlite::params![id, now_ms()],
                    )
                    .unwrap();
                }
                inserted.fetch_add(1, Ordering::Relaxed);
                k += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t0 = Instant::now();
    let (mut runs, mut false_alarms) = (0, Vec::new());
    let mut by_cause = std::collections::BTreeMap::<String, usize>::new();
    while t0.elapsed() < Duration::from_secs(10) {
        let (code, v) = status(&env);
        runs += 1;
        if code != 0 || !problems(&v).is_empty() {
            false_alarms.push(format!("exit {code}: {}", problem_text(&v)));
            for p in problems(&v) {
                *by_cause.entry(p["cause"].to_string()).or_default() += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().unwrap();
    }
    tasks.join().unwrap();
    let n = inserted.load(Ordering::Relaxed);
    env.wait_final(n, LONG);
    let withdrawn: i64 = env
        .output()
        .query_row(
            "SELECT count(*) FROM results WHERE status = 'cancelled'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(withdrawn > 0, "no withdrawn task was cancelled");
    println!(
        "FIGURES: {runs} status calls during {n} producer inserts, {} false problems {by_cause:?}",
        false_alarms.len()
    );
    assert!(
        false_alarms.is_empty(),
        "{} of {runs} status calls reported a problem under ordinary load (by cause {by_cause:?}), e.g.:\n{}",
        false_alarms.len(),
        false_alarms
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    d.sigterm();
    d.wait_exit(LONG);
}

#[test]
fn a_stopped_worker_is_stuck_with_exit_4_and_recovers_on_continue() {
    use nix::sys::signal::Signal;
    let env = Env::new();
    let d = env.start(&FAST);
    status_until(&env, &[], LONG, "a healthy worker", |c, _| c == 0);
    d.signal(Signal::SIGSTOP);
    let (code, v) = status_until(&env, &[], Duration::from_secs(20), "exit 4", |c, _| c == 4);
    d.signal(Signal::SIGCONT);
    assert_eq!(v["alive"], true, "{v:#}");
    assert!(
        v["state"].as_str().unwrap_or("").starts_with("STUCK"),
        "{v:#}"
    );
    let stuck = problems(&v)
        .into_iter()
        .find(|p| p["cause"] == "stuck")
        .unwrap_or_else(|| panic!("no `stuck` problem: {v:#}"));
    assert!(
        stuck["detail"]
            .as_str()
            .unwrap()
            .contains(&d.pid().to_string()),
        "{stuck:#}"
    );
    assert_eq!(code, 4);
    status_until(&env, &[], LONG, "recovery after SIGCONT", |c, _| c == 0);
    d.sigterm();
    d.wait_exit(LONG);
}

/// Makes output.db unwritable for the worker until dropped: immutable (`chattr +i`, the kernel
/// refuses writes even through the worker's open descriptors) when root, else its write lock
/// held by this process (SQLITE_BUSY past the worker's busy timeout).
enum Unwritable {
    Immutable(Vec<PathBuf>),
    Locked(rusqlite::Connection),
}

impl Unwritable {
    fn make(env: &Env) -> Unwritable {
        let files: Vec<PathBuf> = ["brainloop.output.db", "brainloop.output.db-wal"]
            .iter()
            .map(|f| env.data.join(f))
            .filter(|p| p.exists())
            .collect();
        let root = nix::unistd::geteuid().is_root();
        if root
            && files.iter().all(|p| {
                Command::new("chattr")
                    .arg("+i")
                    .arg(p)
                    .status()
                    .is_ok_and(|s| s.success())
            })
        {
            return Unwritable::Immutable(files);
        }
        for p in &files {
            let _ = Command::new("chattr").arg("-i").arg(p).status();
        }
        let c = env.output();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        Unwritable::Locked(c)
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        match self {
            Unwritable::Immutable(files) => {
                for p in files {
                    let _ = Command::new("chattr").arg("-i").arg(p).status();
                }
            }
            Unwritable::Locked(c) => {
                let _ = c.execute_batch("ROLLBACK");
            }
        }
    }
}

#[test]
fn an_unwritable_output_db_makes_status_exit_4_naming_it() {
    let env = Env::new();
    let d = env.start(&FAST);
    let id = env.insert_full("sleep", "{\"ms\": 1}", 0, Some(now_ms() + 1_000));
    env.wait_status(id, "queued", LONG);
    let guard = Unwritable::make(&env);
    let how = match &guard {
        Unwritable::Immutable(_) => "immutable",
        Unwritable::Locked(_) => "write-locked",
    };
    let names_output = |v: &Value| {
        problems(v).iter().any(|p| {
            p["cause"].as_str().unwrap_or("").starts_with("worker")
                && p["detail"].as_str().unwrap_or("").contains("output.db")
        })
    };
    let (code, v) = status_until(
        &env,
        &[],
        Duration::from_secs(30),
        "the worker's report that output.db cannot be written",
        |c, v| c == 4 && names_output(v),
    );
    assert_eq!(v["alive"], true, "{v:#}");
    println!(
        "FIGURES: output.db {how}: status exit {code}:\n{}",
        problem_text(&v)
    );
    drop(guard);
    let (_, _, _, attempts) = env.wait_status(id, "succeeded", LONG);
    assert_eq!(attempts, 1);
    status_until(&env, &[], LONG, "recovery", |c, _| c == 0);
    d.sigterm();
    d.wait_exit(LONG);
}

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that puts a process under libfaketime, wall clock only, with the offset read
/// from `offset_file` at every call (so it can be stepped while the process runs).
fn faked(offset_file: &Path) -> Vec<(String, String)> {
    assert!(
        Path::new(FAKETIME_LIB).exists(),
        "CANNOT RUN HERE: apt-get install faketime ({FAKETIME_LIB} is missing)"
    );
    vec![
        ("LD_PRELOAD".into(), FAKETIME_LIB.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset_file.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ]
}

fn step_to(offset_file: &Path, offset: &str) {
    std::fs::write(offset_file, format!("{offset}\n")).unwrap();
}

/// The wall clock a process under `env` sees, per SQLite (`julianday('now')`, through its VFS)
/// and per the worker's own clock (`SystemTime::now`, through `date`'s `clock_gettime`): ms.
fn faked_now(env: &[(String, String)]) -> (i64, i64) {
    let sqlite = Command::new("sqlite3")
        .args([
            ":memory:",
            "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect(
            "CANNOT RUN HERE: apt-get install sqlite3 (the test checks SQLite's clock with it)",
        );
    let date = Command::new("date")
        .arg("+%s%3N")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let p = |b: &[u8]| String::from_utf8_lossy(b).trim().parse::<i64>().unwrap();
    (p(&sqlite.stdout), p(&date.stdout))
}

/// The latest heartbeat row's wall-clock timestamp, as written (rowid order).
fn last_beat_ts(env: &Env) -> i64 {
    env.output()
        .query_row(
            "SELECT timestamp FROM heartbeat ORDER BY rowid DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// Long because it walks one worker through a backward step, a forward step and a stop, checking
/// status, a `not_before` job and a pending approval after each.
#[test]
fn wall_clock_steps_under_libfaketime_keep_status_expiry_and_not_before_right() {
    common::require_sandbox();
    let env = Env::new();
    let offset = env.root.path().join("faketime-offset");
    step_to(&offset, "+0");
    let fake = faked(&offset);
    let as_ref: Vec<(&str, &str)> = fake.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut worker_env = as_ref.clone();
    worker_env.extend(FAST);
    // A 10-minute approval; the overlay off, so the command runs only once approved.
    worker_env.push(("BRAINLOOP_VALIDATION_TTL_MS", "600000"));
    worker_env.push(("BRAINLOOP_OVERLAY", "0"));
    let d = env.start(&worker_env);
    // A job due in 4 s, claimed before the step (its `not_before` is armed on the real clock).
    let nb = env.insert_full("sleep", "{\"ms\": 1}", 0, Some(now_ms() + 4_000));
    env.wait_status(nb, "queued", LONG);
    // The offset file steers both clocks a faked process reads.
    step_to(&offset, "-2h");
    let (sq, rs) = faked_now(&fake);
    let real = now_ms();
    for (who, t) in [("SQLite", sq), ("clock_gettime", rs)] {
        assert!(
            (real - 7_200_000 - t).abs() < 60_000,
            "{who} under libfaketime does not see the -2h step: {t} vs real {real}"
        );
    }
    // The worker itself sees it: its heartbeats now carry times two hours back.
    let t0 = Instant::now();
    while last_beat_ts(&env) > now_ms() - 3_600_000 {
        assert!(t0.elapsed() < LONG, "the worker never saw the -2h step");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Every fault is collected, so one run on the old code shows them all.
    let mut wrong: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            wrong.push(what);
        }
    };
    // Backward step: status (on the same faked clock) is healthy, no DEAD/STUCK, and a heartbeat
    // written before the step (now "ahead") is not taken for the latest.
    std::thread::sleep(Duration::from_secs(2));
    let (code, v) = status_with(&env, &as_ref);
    let age = v["heartbeat_age_ms"].as_i64().unwrap_or(i64::MIN);
    check(
        code == 0 && v["state"] == "running" && (0..5_000).contains(&age),
        format!(
            "after a -2h step: exit {code}, state {}, heartbeat age {age} ms",
            v["state"]
        ),
    );
    let step = v["clock"]["step_ms"].as_i64();
    check(
        step.is_some_and(|s| s < -3_600_000),
        format!("the -2h step is not named: clock {}", v["clock"]),
    );
    // The job due in 4 s runs in about 4 s, not 2 h.
    let t0 = Instant::now();
    while env.result(nb).is_none_or(|r| r.0 != "succeeded")
        && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    check(
        env.result(nb).is_some_and(|r| r.0 == "succeeded"),
        format!(
            "a job due 4 s after its claim is still {:?} 20 s after a -2h step: it waits the size of the step",
            env.result(nb).map(|r| r.0)
        ),
    );

    // A pending approval asked on the stepped-back clock (expires_at = that clock + 10 min).
    let ask = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "touch approved-after-step.txt"}),
    );
    let (st, pending, _) = settled(&env, ask);
    assert_eq!(st, "pending_validation", "{pending:#}");
    let vid = common::vid(&pending);

    // Forward step of 4 h (to +2h): the 10-minute approval must not expire at once.
    step_to(&offset, "+2h");
    let t0 = Instant::now();
    while last_beat_ts(&env) < now_ms() + 3_600_000 {
        assert!(t0.elapsed() < LONG, "the worker never saw the +2h step");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Several poll rounds (poll_fallback_ms 2 s) that would expire it.
    std::thread::sleep(Duration::from_secs(5));
    let (st, _, err) = settled(&env, ask);
    check(
        st == "pending_validation",
        format!("a 10-minute approval is {st} 5 s after a forward clock step: {err}"),
    );
    let (code, v) = status_with(&env, &as_ref);
    check(
        code == 0 && v["state"] == "running",
        format!("after a +4h step: exit {code}, state {}", v["state"]),
    );
    check(
        v["clock"]["step_ms"]
            .as_i64()
            .is_some_and(|s| s > 3_600_000),
        format!("the +4h step is not named: clock {}", v["clock"]),
    );
    if st == "pending_validation" {
        // Approved on the same (stepped) clock: it counts, the command runs.
        let out = Command::new(BIN)
            .args(["approve", &vid])
            .env("BRAINLOOP_DATA_DIR", &env.data)
            .envs(fake.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let (st, _, err) = common::past(&env, ask, &vid);
        check(
            st == "succeeded" && env.workspace.join("approved-after-step.txt").exists(),
            format!("approved after a forward step, the job is {st}: {err}"),
        );
    }

    // Back to the real clock (heartbeats written at +2h are now "ahead"), then stopped: status
    // says "stopped", never DEAD with a negative age.
    step_to(&offset, "+0");
    let t0 = Instant::now();
    while last_beat_ts(&env) > now_ms() + 3_600_000 {
        assert!(t0.elapsed() < LONG, "the worker never saw the step back");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let (code, v) = status(&env);
    check(
        code == 0 && v["state"] == "running",
        format!("back on the real clock: exit {code}, state {}", v["state"]),
    );
    d.sigterm();
    d.wait_exit(LONG);
    let (code, v) = status(&env);
    check(
        code == 3 && v["state"] == "stopped",
        format!("stopped: exit {code}, state {}", v["state"]),
    );
    assert!(
        wrong.is_empty(),
        "under wall-clock steps:\n{}",
        wrong.join("\n")
    );
}
