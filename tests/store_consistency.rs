//! Issue 21, items 1–3: the five files as one store. Files are removed, replaced, rolled back
//! while the worker is stopped (or its `-wal` after a kill -9); the worker must refuse to start
//! naming what is inconsistent and the `brainloop repair` flag that accepts it, and after the
//! repair no job may run twice, vanish, or end with another job's result.

mod common;

use common::{Daemon, Env};
use rusqlite::OptionalExtension;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Starts `brainloop run` expecting a refusal; returns its stderr. Panics if the worker starts.
fn refused(env: &Env) -> String {
    let mut child = Command::new(common::BIN)
        .args(["run", "--data-dir"])
        .arg(&env.data)
        .arg("--workspace")
        .arg(&env.workspace)
        .env("BRAINLOOP_TEST_ACTIONS", "1")
        .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the worker started on an inconsistent data dir (still running after 20 s)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "the worker exited 0");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stop(d: Daemon) {
    d.sigterm();
    d.wait_exit(LONG);
}

fn remove_db(env: &Env, file: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(env.data.join(format!("{file}{suffix}")));
    }
}

/// Runs `n` sleep jobs to a final result; returns their ids.
fn run_jobs(env: &Env, n: usize, ms: u64) -> Vec<i64> {
    let before = env.final_count();
    let ids: Vec<i64> = (0..n)
        .map(|_| env.insert("sleep", &format!("{{\"ms\": {ms}}}")))
        .collect();
    env.wait_final(before + n as i64, LONG);
    ids
}

/// How many audit rows (one per run) each job has.
fn runs_of(env: &Env, id: i64) -> i64 {
    env.metadata()
        .query_row("SELECT count(*) FROM audit WHERE job_id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
}

fn slept(env: &Env, id: i64) -> Option<i64> {
    let (_, result, _, _) = env.result(id)?;
    let v: serde_json::Value = serde_json::from_str(&result?).ok()?;
    v["slept_ms"].as_i64()
}

#[test]
fn a_recreated_input_db_is_refused_and_new_jobs_never_take_a_finished_jobs_result() {
    let env = Env::new();
    let d = env.start(&[]);
    let old = run_jobs(&env, 3, 1);
    stop(d);
    remove_db(&env, "brainloop.input.db");
    let err = refused(&env);
    assert!(
        err.contains("brainloop.input.db") && err.contains("--accept-new-input"),
        "{err}"
    );
    // The refused start recreated an empty input.db; a producer inserts into it: id 1 again.
    let new = env.insert("sleep", "{\"ms\": 7}");
    assert_eq!(new, 1);
    let (st, _, e) = env.cli(&["enqueue", "sleep", "--params", "{\"ms\": 8}"]);
    assert!(
        !st.success() && e.contains("--accept-new-input"),
        "enqueue: {e}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-new-input"]);
    assert!(st.success(), "repair: {out}{e}");
    assert!(e.contains("job 1 is now job"), "{e}");
    let d = env.start(&[]);
    let moved: i64 = env
        .input()
        .query_row("SELECT id FROM jobs WHERE params LIKE '%7%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(moved > *old.last().unwrap(), "renumbered to {moved}");
    env.wait_status(moved, "succeeded", LONG);
    assert_eq!(slept(&env, moved), Some(7), "the new job ran itself");
    for id in &old {
        assert_eq!(slept(&env, *id), Some(1), "job {id} keeps its own result");
        assert_eq!(runs_of(&env, *id), 1, "job {id} ran once");
    }
    let repairs: i64 = env
        .metadata()
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'repair'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(repairs, 1);
    stop(d);
}

#[test]
fn a_deleted_output_db_is_refused_and_repair_ends_its_jobs_interrupted_without_rerunning() {
    let env = Env::new();
    let d = env.start(&[]);
    let ids = run_jobs(&env, 5, 1);
    stop(d);
    remove_db(&env, "brainloop.output.db");
    let err = refused(&env);
    assert!(
        err.contains("brainloop.output.db") && err.contains("--accept-lost-results"),
        "{err}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-lost-lifecycle"]);
    assert!(
        !st.success(),
        "a repair without the right flag must refuse: {out}{e}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-lost-results"]);
    assert!(st.success(), "repair: {out}{e}");
    let d = env.start(&[]);
    for id in &ids {
        let (status, _, error, _) = env.result(*id).expect("a result row");
        assert_eq!(status, "interrupted");
        assert!(error.unwrap_or_default().contains("lost"));
        assert_eq!(runs_of(&env, *id), 1, "job {id} not run again");
    }
    let more = run_jobs(&env, 2, 2);
    assert_eq!(slept(&env, more[1]), Some(2));
    stop(d);
}

#[test]
fn an_output_db_rolled_back_or_its_wal_removed_after_kill9_is_refused() {
    let env = Env::new();
    let d = env.start(&[]);
    run_jobs(&env, 3, 1);
    stop(d);
    // A backup taken while stopped.
    let backup = env.root.path().join("output.bak");
    std::fs::create_dir_all(&backup).unwrap();
    for s in ["", "-wal"] {
        let f = format!("brainloop.output.db{s}");
        if env.data.join(&f).exists() {
            std::fs::copy(env.data.join(&f), backup.join(&f)).unwrap();
        }
    }
    let d = env.start(&[]);
    let later = run_jobs(&env, 3, 1);
    d.kill9();
    // Rolled back to the backup.
    remove_db(&env, "brainloop.output.db");
    for e in std::fs::read_dir(&backup).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), env.data.join(e.file_name())).unwrap();
    }
    let err = refused(&env);
    assert!(
        err.contains("have no final result") && err.contains("--accept-lost-results"),
        "{err}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-lost-results"]);
    assert!(st.success(), "repair: {out}{e}");
    for id in &later {
        assert_eq!(env.result(*id).unwrap().0, "interrupted", "job {id}");
    }
    // A -wal removed after kill -9.
    let d = env.start(&[]);
    let last = run_jobs(&env, 3, 1);
    d.kill9();
    assert!(env.data.join("brainloop.output.db-wal").exists());
    let _ = std::fs::remove_file(env.data.join("brainloop.output.db-wal"));
    let _ = std::fs::remove_file(env.data.join("brainloop.output.db-shm"));
    let err = refused(&env);
    assert!(err.contains("--accept-lost-results"), "{err}");
    let (st, out, e) = env.cli(&["repair", "--accept-lost-results"]);
    assert!(st.success(), "repair: {out}{e}");
    let d = env.start(&[]);
    for id in &last {
        assert!(env.result(*id).is_some(), "job {id} has a result row");
        assert_eq!(runs_of(&env, *id), 1, "job {id} ran once");
    }
    stop(d);
}

#[test]
fn output_and_lifecycle_deleted_together_rerun_nothing_the_audit_shows_finished() {
    let env = Env::new();
    let d = env.start(&[]);
    let ids = run_jobs(&env, 4, 1);
    stop(d);
    remove_db(&env, "brainloop.output.db");
    remove_db(&env, "brainloop.lifecycle.db");
    let err = refused(&env);
    for f in [
        "brainloop.output.db",
        "brainloop.lifecycle.db",
        "--accept-lost-lifecycle",
    ] {
        assert!(err.contains(f), "{f} not named: {err}");
    }
    let (st, out, e) = env.cli(&["repair", "--accept-lost-results", "--accept-lost-lifecycle"]);
    assert!(st.success(), "repair: {out}{e}");
    let d = env.start(&[]);
    let new = run_jobs(&env, 1, 3);
    for id in &ids {
        assert_eq!(env.result(*id).unwrap().0, "interrupted", "job {id}");
        assert_eq!(runs_of(&env, *id), 1, "job {id} ran once");
    }
    assert_eq!(slept(&env, new[0]), Some(3));
    stop(d);
}

#[test]
fn deleted_metadata_or_security_db_is_refused_until_accepted() {
    let env = Env::new();
    let d = env.start(&[]);
    run_jobs(&env, 1, 1);
    stop(d);
    remove_db(&env, "brainloop.metadata.db");
    remove_db(&env, "command_security.db");
    let err = refused(&env);
    assert!(
        err.contains("--accept-lost-audit") && err.contains("--accept-lost-security"),
        "{err}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-lost-audit", "--accept-lost-security"]);
    assert!(st.success(), "repair: {out}{e}");
    let d = env.start(&[]);
    run_jobs(&env, 1, 1);
    stop(d);
}

#[test]
fn a_data_dir_from_before_identities_is_upgraded_and_nothing_reruns() {
    let env = Env::new();
    let d = env.start(&[]);
    let ids = run_jobs(&env, 3, 1);
    stop(d);
    // Make it look like a data dir written by the previous release: no `store` step.
    for (f, version) in [
        ("brainloop.input.db", 1),
        ("brainloop.lifecycle.db", 3),
        ("brainloop.output.db", 1),
        ("brainloop.metadata.db", 1),
        ("command_security.db", 3),
    ] {
        let c = env.db(f);
        c.execute_batch("DROP TABLE store").unwrap();
        if f == "brainloop.output.db" {
            c.execute_batch("ALTER TABLE heartbeat DROP COLUMN problem")
                .unwrap();
        }
        // Job control and the audited journal (issue 36) came later too, and MCP tasks (55).
        if f == "brainloop.input.db" {
            c.execute_batch(
                "DROP INDEX jobs_unique_key;
                 ALTER TABLE jobs DROP COLUMN unique_key;
                 ALTER TABLE jobs DROP COLUMN retry;
                 ALTER TABLE jobs DROP COLUMN task_id;
                 DROP TABLE withdrawals;",
            )
            .unwrap();
        }
        if f == "brainloop.lifecycle.db" {
            c.execute_batch(
                "DROP INDEX queue_unique_key;
                 ALTER TABLE queue DROP COLUMN unique_key;
                 ALTER TABLE queue DROP COLUMN retry;",
            )
            .unwrap();
        }
        if f == "command_security.db" {
            c.execute_batch(
                "DROP TABLE cancellations;
                 DROP INDEX signature_evidence_sig;
                 ALTER TABLE journal DROP COLUMN state;
                 ALTER TABLE journal DROP COLUMN applied_paths;
                 ALTER TABLE journal DROP COLUMN diff;
                 ALTER TABLE journal DROP COLUMN validation_id;
                 ALTER TABLE journal DROP COLUMN decided_by;",
            )
            .unwrap();
        }
        if f == "command_security.db" {
            // Steps 5 (issue 22), 7 (issue 33) and 8 (issue 35) came later than the version
            // this simulates.
            c.execute_batch(
                "DROP TABLE signature_examples;
                 ALTER TABLE signature_evidence DROP COLUMN denied_at;
                 ALTER TABLE signature_evidence DROP COLUMN denied_by;
                 ALTER TABLE signature_evidence DROP COLUMN denied_job;
                 ALTER TABLE signature_evidence DROP COLUMN denied_validation;
                 ALTER TABLE signature_evidence DROP COLUMN approvals_before_denial;
                 ALTER TABLE signature_evidence DROP COLUMN suspended;
                 ALTER TABLE signature_evidence DROP COLUMN suspended_at;
                 ALTER TABLE signature_evidence DROP COLUMN learned_at;
                 ALTER TABLE signature_evidence DROP COLUMN learned_by;
                 ALTER TABLE signature_evidence DROP COLUMN learned_job;
                 ALTER TABLE approvals DROP COLUMN learn;
                 ALTER TABLE egress_connections DROP COLUMN attempts;
                 ALTER TABLE egress_connections DROP COLUMN first_ms;",
            )
            .unwrap();
        }
        c.pragma_update(None, "user_version", version).unwrap();
    }
    let d = env.start(&[]);
    let more = run_jobs(&env, 1, 2);
    assert_eq!(slept(&env, more[0]), Some(2));
    for id in &ids {
        assert_eq!(runs_of(&env, *id), 1);
    }
    let ids_now: Vec<Option<String>> = [
        "brainloop.input.db",
        "brainloop.output.db",
        "command_security.db",
    ]
    .iter()
    .map(|f| {
        env.db(f)
            .query_row(
                "SELECT value FROM store WHERE key = 'data_dir_id'",
                [],
                |r| r.get(0),
            )
            .optional()
            .unwrap()
    })
    .collect();
    assert!(
        ids_now[0].is_some() && ids_now.iter().all(|i| i == &ids_now[0]),
        "{ids_now:?}"
    );
    stop(d);
}

#[test]
fn deleting_the_lock_file_never_lets_a_second_worker_run_beside_a_live_one() {
    let env = Env::new();
    let d = env.start(&[]);
    let long = env.insert("sleep", "{\"ms\": 3000}");
    env.wait_status(long, "running", LONG);
    std::fs::remove_file(env.data.join("brainloop.lock")).unwrap();
    let err = refused(&env);
    assert!(
        err.contains("already running") && err.contains("data directory itself"),
        "{err}"
    );
    // The first worker keeps running, finishes its job once and takes new ones.
    let (status, _, _, attempts) = env.wait_status(long, "succeeded", LONG);
    assert_eq!((status.as_str(), attempts), ("succeeded", 1));
    let more = run_jobs(&env, 5, 1);
    for id in more.iter().chain([long].iter()) {
        assert_eq!(runs_of(&env, *id), 1, "job {id} ran once");
    }
    // It put the lock file back with its pid (for status and scripts).
    let t0 = Instant::now();
    loop {
        let pid = std::fs::read_to_string(env.data.join("brainloop.lock")).unwrap_or_default();
        if pid.trim() == d.pid().to_string() {
            break;
        }
        assert!(t0.elapsed() < LONG, "lock file not restored: {pid:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, out, _) = env.cli(&["status", "--json"]);
    assert!(st.success(), "status must see the live worker: {out}");
    stop(d);
}

#[test]
fn a_deleted_lifecycle_db_leaves_one_question_per_waiting_job_and_reruns_nothing() {
    let env = Env::new();
    let d = env.start(&[]);
    let done = run_jobs(&env, 2, 1);
    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &serde_json::json!({"command": "touch notes.txt"}),
    );
    let (st, v, _) = common::settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    let old = v["validation_id"].as_str().unwrap().to_string();
    stop(d);
    remove_db(&env, "brainloop.lifecycle.db");
    let err = refused(&env);
    assert!(
        err.contains("brainloop.lifecycle.db") && err.contains("--accept-lost-lifecycle"),
        "{err}"
    );
    let (st, out, e) = env.cli(&["repair", "--accept-lost-lifecycle"]);
    assert!(st.success(), "repair: {out}{e}");
    let d = env.start(&[]);
    // The job asks again; the old question is expired: one pending question for the job.
    let t0 = Instant::now();
    let new = loop {
        if let Some((s, Some(r), _, _)) = env.result(id) {
            let v: serde_json::Value = serde_json::from_str(&r).unwrap_or_default();
            match v["validation_id"].as_str() {
                Some(vid) if s == "pending_validation" && vid != old => break vid.to_string(),
                _ => {}
            }
        }
        assert!(
            t0.elapsed() < LONG,
            "job {id} did not ask again: {:?}",
            env.result(id)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let pending: i64 = env
        .output()
        .query_row(
            "SELECT count(*) FROM validations WHERE job_id = ?1 AND status = 'pending'",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pending, 1);
    let (st, _, e) = env.cli(&["approve", &old]);
    assert!(
        !st.success(),
        "the expired question must not be approvable: {e}"
    );
    let (st, out, e) = env.cli(&["approve", &new]);
    assert!(st.success(), "{out}{e}");
    let (st, _, err) = common::final_result(&env, id);
    assert_eq!(st, "succeeded", "{err}");
    assert!(env.workspace.join("notes.txt").exists());
    for j in &done {
        assert_eq!(runs_of(&env, *j), 1, "job {j} ran once");
        assert_eq!(slept(&env, *j), Some(1), "job {j} keeps its result");
    }
    stop(d);
}
