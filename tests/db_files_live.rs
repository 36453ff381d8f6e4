//! Database files deleted, replaced or made unwritable under a live worker (issue 50, findings
//! 6 and 7), through the real daemon: the worker notices on its heartbeat's cadence, `status`
//! exits 4 naming the file (also when output.db itself is gone), nothing new is claimed, a
//! result finished meanwhile goes to the fsynced results spool instead of a deleted file, and a
//! command job that meets an unwritable command_security.db waits and then succeeds once the
//! file is writable again — never failed. Temp dirs only; `chattr +i` needs root.

mod common;

use common::{Env, BIN};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// `brainloop status --json`: (exit code, report).
fn status(env: &Env) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(["status", "--json", "--data-dir"])
        .arg(&env.data)
        .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        json!({"unparsable": String::from_utf8_lossy(&out.stdout),
               "stderr": String::from_utf8_lossy(&out.stderr)})
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Polls `status` until it exits 4 with a problem whose text contains every one of `words`.
fn problem_named(env: &Env, words: &[&str]) -> Value {
    let t0 = Instant::now();
    loop {
        let (code, v) = status(env);
        let named = v["problems"].as_array().into_iter().flatten().any(|p| {
            let t = p.to_string();
            words.iter().all(|w| t.contains(w))
        });
        if code == 4 && named {
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "status never named {words:?} with exit 4: exit {code} {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn claimed(env: &Env, id: i64) -> bool {
    env.lifecycle()
        .query_row(
            "SELECT count(*) FROM processed_log WHERE job_id = ?1",
            [id],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        > 0
}

#[test]
fn output_db_deleted_under_the_worker_is_a_problem_and_results_go_to_the_spool() {
    let env = Env::new();
    let d = env.start(&[]);
    let first = env.insert("ping", "{}");
    env.wait_status(first, "succeeded", Duration::from_secs(20));
    let sleeping = env.insert("sleep", "{\"ms\": 1500}");
    env.wait_status(sleeping, "running", Duration::from_secs(20));
    std::fs::remove_file(env.data.join("brainloop.output.db")).unwrap();
    let v = problem_named(&env, &["brainloop.output.db", "deleted"]);
    assert_eq!(v["alive"], true, "{v}");
    // The job that was running ends meanwhile: its result is spooled, not written into the
    // deleted file.
    let spool = env.data.join("brainloop.results.spool");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&spool)
        .unwrap_or_default()
        .contains(&format!("\"job_id\":{sleeping}"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "job {sleeping}'s result never reached the spool; log:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing new is claimed while it lasts.
    let later = env.insert("ping", "{}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !claimed(&env, later),
        "a job was claimed with output.db gone"
    );
    d.kill9();
}

#[test]
fn lifecycle_db_deleted_under_the_worker_is_a_problem_status_names() {
    let env = Env::new();
    let d = env.start(&[]);
    let first = env.insert("ping", "{}");
    env.wait_status(first, "succeeded", Duration::from_secs(20));
    std::fs::remove_file(env.data.join("brainloop.lifecycle.db")).unwrap();
    let v = problem_named(&env, &["brainloop.lifecycle.db", "deleted"]);
    assert_eq!(v["alive"], true, "{v}");
    let later = env.insert("ping", "{}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        env.result(later),
        None,
        "no job runs while lifecycle.db is gone"
    );
    d.kill9();
}

/// `chattr` on `file`, which must work here (root on a file system with attributes).
fn chattr(flag: &str, file: &std::path::Path) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "CANNOT RUN HERE: chattr +i needs root"
    );
    let st = Command::new("chattr").arg(flag).arg(file).status().unwrap();
    assert!(st.success(), "CANNOT RUN HERE: chattr {flag} failed");
}

/// Removes the immutable flag even when the test fails.
struct Mutable(std::path::PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn an_unwritable_command_security_db_makes_command_jobs_wait_not_fail_as_root() {
    common::require_sandbox();
    let env = Env::new();
    let d = env.start(&[]);
    let (_, st, v, err) = common::submit(&env, "true");
    assert_eq!(st, "succeeded", "{err} {v}");
    // The file and its WAL (where the worker's open connection writes first).
    let db = env.data.join("command_security.db");
    let wal = env.data.join("command_security.db-wal");
    chattr("+i", &db);
    let guard = Mutable(db.clone());
    chattr("+i", &wal);
    let wal_guard = Mutable(wal.clone());
    let v = problem_named(&env, &["command_security.db", "cannot be written"]);
    assert_eq!(v["alive"], true, "{v}");
    // A command never seen before (its registry row must be written).
    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo waited"}),
    );
    std::thread::sleep(Duration::from_secs(3));
    let (st, _, error, _) = env.result(id).unwrap_or_default();
    assert!(
        ["running", "queued", ""].contains(&st.as_str()),
        "the job waits while the file is unwritable, it does not end: {st} {error:?}"
    );
    chattr("-i", &wal);
    chattr("-i", &db);
    drop((guard, wal_guard));
    let (st, v, err) = common::settled(&env, id);
    assert_eq!(st, "succeeded", "once writable, the job runs: {err} {v}");
    assert!(v["stdout"].as_str().unwrap_or("").contains("waited"), "{v}");
    let t0 = Instant::now();
    while status(&env).0 != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the problem never cleared: {}",
            status(&env).1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    d.kill9();
}
