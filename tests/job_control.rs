//! Job control (issue 36 item 2) through the real daemon: `brainloop cancel ID` (operator only)
//! for a job queued, running (its overlay discarded), waiting for a human, and not yet claimed;
//! a cancelled job never runs again, whatever kill -9 cuts. Temp dirs only.

mod common;

use common::{cli_ok, job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn cancel(env: &Env, id: i64, extra: &[&str]) -> (i32, String, String) {
    let ids = id.to_string();
    let mut args = vec!["cancel", ids.as_str()];
    args.extend_from_slice(extra);
    let (st, out, err) = env.cli(&args);
    (st.code().unwrap_or(-1), out, err)
}

fn result_json(env: &Env, id: i64) -> (String, Value, String, i64) {
    let (st, r, e, attempts) = env.result(id).expect("a results row");
    let v = r
        .and_then(|r| serde_json::from_str(&r).ok())
        .unwrap_or(Value::Null);
    (st, v, e.unwrap_or_default(), attempts)
}

fn lifecycle_row(env: &Env, id: i64) -> (String, i64) {
    env.lifecycle()
        .query_row(
            "SELECT status, attempts FROM processed_log WHERE job_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

fn wait_running(env: &Env, id: i64) {
    env.wait_status(id, "running", LONG);
}

fn audit_statuses(env: &Env, id: i64) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let v: Vec<String> = env
            .metadata()
            .prepare("SELECT status FROM audit WHERE job_id = ?1 ORDER BY id")
            .unwrap()
            .query_map([id], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        if !v.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_queued_job_is_cancelled_never_runs_and_stays_cancelled_after_kill_9() {
    let env = Env::new();
    let d = env.start(&[]);
    // Queued for an hour (not_before): claimed, waiting in the ready queue.
    let later = common::now_ms() + 3_600_000;
    let id = env.insert_full("sleep", r#"{"ms": 10}"#, 0, Some(later));
    env.wait_status(id, "queued", LONG);
    let (code, out, err) = cancel(&env, id, &["--reason", "not needed"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("job {id} cancelled")), "{out}");
    let (st, v, e, attempts) = result_json(&env, id);
    assert_eq!(st, "cancelled");
    assert_eq!(v["was"], "queued", "{v}");
    assert_eq!(v["reason"], "not needed", "{v}");
    assert!(
        v["cancelled_by"].as_str().unwrap().starts_with("operator:"),
        "{v}"
    );
    assert!(e.contains("never runs again"), "{e}");
    assert_eq!(attempts, 0, "it never started");
    assert_eq!(audit_statuses(&env, id), vec!["cancelled"], "recorded once");
    // A second cancel of an ended job is refused, naming its status.
    let (code, _, err) = cancel(&env, id, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("already ended `cancelled`"), "{err}");
    d.kill9();
    let _d = env.start(&[]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(result_json(&env, id).0, "cancelled");
    assert_eq!(lifecycle_row(&env, id), ("done".into(), 0), "never started");
}

#[test]
fn an_unknown_job_is_refused_and_nothing_is_recorded() {
    let env = Env::new();
    cli_ok(&env, &["init"]);
    let (code, _, err) = cancel(&env, 999, &[]);
    assert_eq!(code, 1);
    assert!(err.contains("no job 999"), "{err}");
    let n: i64 = env
        .db("command_security.db")
        .query_row("SELECT count(*) FROM cancellations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn a_job_cancelled_before_the_worker_claims_it_never_runs() {
    let env = Env::new();
    cli_ok(&env, &["init"]);
    let canary = env.root.path().join("canary");
    let id = env.insert("sleep", r#"{"ms": 10, "canary": true}"#);
    // An instant job is answered inside the claim itself: the claim must see the request.
    let instant = env.insert("ping", "{}");
    // No worker: the request is recorded, the job ends when a worker sees it.
    let (code, out, _) = cancel(&env, id, &["--timeout", "0"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("has not ended yet"), "{out}");
    assert_eq!(cancel(&env, instant, &["--timeout", "0"]).0, 4);
    let canary_s = canary.display().to_string();
    let _d = env.start(&[("BRAINLOOP_TEST_CANARY", canary_s.as_str())]);
    // A later job runs: the queue is not blocked.
    let next = env.insert("sleep", r#"{"ms": 10, "canary": true}"#);
    env.wait_status(next, "succeeded", LONG);
    let (st, v, _, attempts) = result_json(&env, id);
    assert_eq!((st.as_str(), attempts), ("cancelled", 0), "{v}");
    let (st, v, _, attempts) = result_json(&env, instant);
    assert_eq!((st.as_str(), attempts), ("cancelled", 0), "{v}");
    let ran = std::fs::read_to_string(&canary).unwrap_or_default();
    assert_eq!(ran.trim(), format!("{next} 1"), "only the other job ran");
}

#[test]
fn a_running_job_is_stopped_and_never_rerun_after_kill_9() {
    let env = Env::new();
    let canary = env.root.path().join("canary");
    let canary_s = canary.display().to_string();
    let vars = [("BRAINLOOP_TEST_CANARY", canary_s.as_str())];
    let d = env.start(&vars);
    let id = env.insert("sleep", r#"{"ms": 600000, "canary": true}"#);
    wait_running(&env, id);
    let t0 = Instant::now();
    let (code, out, err) = cancel(&env, id, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "stopped, not waited for"
    );
    let (st, v, e, attempts) = result_json(&env, id);
    assert_eq!((st.as_str(), attempts), ("cancelled", 1), "{v} {e}");
    assert_eq!(v["was"], "running", "{v}");
    // The worker goes on with other jobs.
    let next = env.insert("sleep", r#"{"ms": 1}"#);
    env.wait_status(next, "succeeded", LONG);
    d.kill9();
    let _d = env.start(&vars);
    let again = env.insert("sleep", r#"{"ms": 1}"#);
    env.wait_status(again, "succeeded", LONG);
    assert_eq!(result_json(&env, id).0, "cancelled");
    assert_eq!(
        lifecycle_row(&env, id),
        ("done".into(), 1),
        "one attempt, never again"
    );
    assert!(!canary.exists(), "the cancelled job never reached its end");
}

#[test]
fn a_cancel_written_while_the_worker_is_dead_stops_the_job_cut_by_kill_9() {
    let env = Env::new();
    let d = env.start(&[]);
    let id = env.insert("sleep", r#"{"ms": 600000}"#);
    wait_running(&env, id);
    d.kill9();
    // The job was running when the worker died; the operator cancels it meanwhile.
    let (code, out, _) = cancel(&env, id, &["--timeout", "0"]);
    assert_eq!(code, 4, "{out}");
    let _d = env.start(&[]);
    let (st, v, _, attempts) = result_json(&env, id);
    assert_eq!(
        st, "cancelled",
        "ended by recovery, before anything started"
    );
    assert_eq!(attempts, 1, "{v}");
    assert_eq!(lifecycle_row(&env, id), ("done".into(), 1), "not run again");
    assert_eq!(audit_statuses(&env, id), vec!["cancelled"]);
    let ended: Option<String> = env
        .db("command_security.db")
        .query_row(
            "SELECT outcome FROM cancellations WHERE job_id = ?1 AND consumed_at IS NOT NULL",
            [id],
            |r| r.get(0),
        )
        .ok();
    let t0 = Instant::now();
    let mut ended = ended;
    while ended.is_none() && t0.elapsed() < LONG {
        std::thread::sleep(Duration::from_millis(100));
        ended = env
            .db("command_security.db")
            .query_row(
                "SELECT outcome FROM cancellations WHERE job_id = ?1 AND consumed_at IS NOT NULL",
                [id],
                |r| r.get(0),
            )
            .ok();
    }
    assert_eq!(ended.as_deref(), Some("cancelled"), "the request is closed");
}

fn sandbox_enforcing() -> bool {
    std::process::Command::new(common::BIN)
        .args(["sandbox", "--json"])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn a_waiting_job_is_cancelled_its_change_set_discarded_and_a_late_approve_refused() {
    assert!(
        sandbox_enforcing(),
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine; run `brainloop sandbox`"
    );
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let d = env.start(&[]);
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo two >> a.txt && touch made.txt"}),
    );
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    let vid = common::vid(&v);
    let (code, out, err) = cancel(&env, id, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (st, r, _, _) = result_json(&env, id);
    assert_eq!(st, "cancelled");
    assert_eq!(r["was"], "waiting for a human", "{r}");
    let vst: String = env
        .output()
        .query_row(
            "SELECT status FROM validations WHERE id = ?1",
            [&vid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(vst, "cancelled");
    let (s, _, err) = env.cli(&["approve", &vid]);
    assert!(!s.success() && err.contains("already cancelled"), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!env.workspace.join("made.txt").exists());
    let t0 = Instant::now();
    while env.data.join("changes").join(id.to_string()).exists() {
        assert!(t0.elapsed() < LONG, "the change set is discarded");
        std::thread::sleep(Duration::from_millis(20));
    }
    // kill -9 and restart: still cancelled, never asked again.
    d.kill9();
    let _d = env.start(&[]);
    let next = env.insert("sleep", r#"{"ms": 1}"#);
    env.wait_status(next, "succeeded", LONG);
    assert_eq!(result_json(&env, id).0, "cancelled");
    assert_eq!(common::validations_count(&env, id), 1, "never asked again");
}

#[test]
fn a_cancel_of_a_waiting_job_cut_by_kill_9_is_never_asked_again() {
    assert!(
        sandbox_enforcing(),
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine; run `brainloop sandbox`"
    );
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let d = env.start(&[]);
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo two >> a.txt"}),
    );
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    // The worker is frozen when the request lands, then killed: it never acted on it.
    d.signal(nix::sys::signal::Signal::SIGSTOP);
    let (code, out, _) = cancel(&env, id, &["--timeout", "0"]);
    assert_eq!(code, 4, "{out}");
    d.kill9();
    let _d = env.start(&[]);
    let (st, r, _, _) = result_json(&env, id);
    assert_eq!(st, "cancelled", "{r}");
    assert_eq!(common::validations_count(&env, id), 1, "never asked again");
    let vst: String = env
        .output()
        .query_row(
            "SELECT status FROM validations WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(vst, "cancelled");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "one\n"
    );
}

#[test]
fn a_running_overlay_command_is_stopped_and_nothing_reaches_the_workspace() {
    assert!(
        sandbox_enforcing(),
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine; run `brainloop sandbox`"
    );
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let _d = env.start(&[]);
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo two >> a.txt && touch made.txt && sleep 120", "timeout_ms": 120000}),
    );
    wait_running(&env, id);
    // Let the command start and write into its overlay.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out, err) = cancel(&env, id, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (st, r, e, _) = result_json(&env, id);
    assert_eq!(st, "cancelled", "{r} {e}");
    assert!(e.contains("overlay discarded"), "{e}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!env.workspace.join("made.txt").exists());
    assert_eq!(common::validations_count(&env, id), 0, "nothing asked");
}

// ---- unique_key -------------------------------------------------------------------------

/// Inserts a job row as a producer would (raw INSERT), with a unique_key and/or a retry policy.
fn insert_ctl(
    env: &Env,
    client: &str,
    params: &str,
    key: Option<&str>,
    retry: Option<&str>,
) -> i64 {
    let c = env.input();
    c.execute(
        "INSERT INTO jobs(action, params, client_id, unique_key, retry) VALUES ('sleep', ?1, ?2, ?3, ?4)",
        rusqlite::params![params, client, key, retry],
    )
    .unwrap();
    c.last_insert_rowid()
}

#[test]
fn a_second_job_with_the_same_key_is_refused_with_the_first_ones_id() {
    let env = Env::new();
    let _d = env.start(&[]);
    let long = r#"{"ms": 600000}"#;
    let first: i64 = cli_ok(
        &env,
        &[
            "enqueue",
            "sleep",
            "--params",
            long,
            "--unique-key",
            "nightly",
        ],
    )
    .trim()
    .parse()
    .unwrap();
    wait_running(&env, first);
    // enqueue refuses at once, naming the first job; nothing is inserted.
    let (st, out, err) = env.cli(&[
        "enqueue",
        "sleep",
        "--params",
        long,
        "--unique-key",
        "nightly",
    ]);
    assert_eq!(st.code(), Some(6), "{out}{err}");
    assert!(err.contains(&format!("job {first} (running)")), "{err}");
    let rows: i64 = env
        .input()
        .query_row(
            "SELECT count(*) FROM jobs WHERE unique_key = 'nightly'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 1, "nothing enqueued");
    // A raw INSERT (a producer that skips the check) is refused by the worker's claim.
    let raw = insert_ctl(&env, "local", r#"{"ms": 1}"#, Some("nightly"), None);
    let (s, _, e) = settled(&env, raw);
    assert_eq!(s, "failed");
    assert!(e.contains(&format!("held by job {first} (running)")), "{e}");
    // The key is per client: another client's job with the same key runs.
    let other = insert_ctl(&env, "ops", r#"{"ms": 1}"#, Some("nightly"), None);
    assert_eq!(settled(&env, other).0, "succeeded");
    // Once the first has ended, the key is free again.
    assert_eq!(cancel(&env, first, &[]).0, 0);
    let again: i64 = cli_ok(
        &env,
        &[
            "enqueue",
            "sleep",
            "--params",
            r#"{"ms": 1}"#,
            "--unique-key",
            "nightly",
        ],
    )
    .trim()
    .parse()
    .unwrap();
    assert_eq!(settled(&env, again).0, "succeeded");
}

#[test]
fn a_key_held_by_a_job_cut_by_kill_9_still_refuses_after_restart() {
    let env = Env::new();
    let canary = env.root.path().join("canary");
    let canary_s = canary.display().to_string();
    let vars = [("BRAINLOOP_TEST_CANARY", canary_s.as_str())];
    let d = env.start(&vars);
    let first = insert_ctl(
        &env,
        "local",
        r#"{"ms": 3000, "canary": true}"#,
        Some("k"),
        None,
    );
    wait_running(&env, first);
    d.kill9();
    // While the worker is dead two more rows with the key land (one claim batch at restart).
    let second = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1, "canary": true}"#,
        Some("k"),
        None,
    );
    let third = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1, "canary": true}"#,
        Some("k"),
        None,
    );
    let _d = env.start(&vars);
    for id in [second, third] {
        let (s, _, e) = settled(&env, id);
        assert_eq!(s, "failed", "job {id}");
        assert!(e.contains(&format!("held by job {first}")), "{e}");
    }
    env.wait_status(first, "succeeded", LONG);
    let ran = std::fs::read_to_string(&canary).unwrap();
    assert_eq!(
        ran.trim(),
        format!("{first} 2"),
        "only the holder ran (its second attempt)"
    );
}

// ---- retry policy -----------------------------------------------------------------------

fn audit_count(env: &Env, id: i64, n: usize) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let v = audit_statuses(env, id);
        if v.len() >= n || t0.elapsed() > Duration::from_secs(20) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_failed_job_is_retried_with_back_off_visible_in_its_result_then_ends() {
    let env = Env::new();
    let canary = env.root.path().join("canary");
    let canary_s = canary.display().to_string();
    let _d = env.start(&[("BRAINLOOP_TEST_CANARY", canary_s.as_str())]);
    let retry = r#"{"max_attempts": 3, "backoff_ms": 1500, "jitter": 0.5}"#;
    let id: i64 = cli_ok(
        &env,
        &[
            "enqueue",
            "sleep",
            "--params",
            r#"{"ms": 1, "fail": true, "canary": true}"#,
            "--retry",
            retry,
        ],
    )
    .trim()
    .parse()
    .unwrap();
    // Between attempts: `queued`, saying which attempt failed and when the next one starts.
    let (_, r, e, attempts) = env.wait_status(id, "queued", LONG);
    let v: Value = serde_json::from_str(&r.unwrap()).unwrap();
    assert_eq!(attempts, 1);
    assert_eq!(v["status"], "retrying", "{v}");
    let delay = v["retry"]["delay_ms"].as_u64().unwrap();
    assert!((750..=1500).contains(&delay), "back-off with jitter: {v}");
    assert_eq!(v["retry"]["max_attempts"], 3);
    assert_eq!(v["retry"]["failure"], "error");
    assert!(e.unwrap().contains("attempt 1 of 3 failed"));
    let (st, v, e, attempts) = {
        env.wait_final(1, LONG);
        result_json(&env, id)
    };
    assert_eq!((st.as_str(), attempts), ("failed", 3), "{v} {e}");
    assert_eq!(v["retry"]["not_retried"], "no attempt left", "{v}");
    assert!(e.contains("attempt 3 of 3"), "{e}");
    let ran = std::fs::read_to_string(&canary).unwrap();
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        vec![format!("{id} 1"), format!("{id} 2"), format!("{id} 3")]
    );
    assert_eq!(
        audit_count(&env, id, 3),
        vec!["failed"; 3],
        "every attempt audited once"
    );
}

#[test]
fn an_action_policy_applies_and_on_filters_which_failures_retry() {
    let env = Env::new();
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(&cfg, "[retry.sleep]\nmax_attempts = 2\nbackoff_ms = 10\n").unwrap();
    let cfg_s = cfg.display().to_string();
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg_s.as_str())]);
    let by_action = insert_ctl(&env, "local", r#"{"ms": 1, "fail": true}"#, None, None);
    let only_timeouts = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1, "fail": true}"#,
        None,
        Some(r#"{"max_attempts": 5, "on": ["timeout"]}"#),
    );
    let bad = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1}"#,
        None,
        Some(r#"{"max_attempts": 0}"#),
    );
    env.wait_final(3, LONG);
    let (st, v, _, attempts) = result_json(&env, by_action);
    assert_eq!((st.as_str(), attempts), ("failed", 2), "{v}");
    let (st, v, _, attempts) = result_json(&env, only_timeouts);
    assert_eq!(
        (st.as_str(), attempts),
        ("failed", 1),
        "the job's own policy wins: {v}"
    );
    assert!(
        v["retry"]["not_retried"]
            .as_str()
            .unwrap()
            .contains("not among"),
        "{v}"
    );
    let (st, _, e, _) = result_json(&env, bad);
    assert_eq!(st, "failed");
    assert!(
        e.contains("between 1 and 100"),
        "a bad policy is refused, naming the bound: {e}"
    );
}

#[test]
fn a_retry_waiting_across_kill_9_keeps_its_attempts_and_back_off() {
    let env = Env::new();
    let canary = env.root.path().join("canary");
    let canary_s = canary.display().to_string();
    let vars = [("BRAINLOOP_TEST_CANARY", canary_s.as_str())];
    let d = env.start(&vars);
    let id = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1, "fail": true, "canary": true}"#,
        None,
        Some(r#"{"max_attempts": 3, "backoff_ms": 4000, "jitter": 0}"#),
    );
    let (_, r, _, _) = env.wait_status(id, "queued", LONG);
    let v: Value = serde_json::from_str(&r.unwrap()).unwrap();
    let next_at = v["retry"]["next_attempt_at"].as_i64().unwrap();
    d.kill9();
    let _d = env.start(&vars);
    if common::now_ms() < next_at - 500 {
        let ran = std::fs::read_to_string(&canary).unwrap();
        assert_eq!(
            ran.lines().count(),
            1,
            "the back-off holds across the restart"
        );
    }
    env.wait_final(1, LONG);
    let (st, _, _, attempts) = result_json(&env, id);
    assert_eq!((st.as_str(), attempts), ("failed", 3));
    let ran = std::fs::read_to_string(&canary).unwrap();
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        vec![format!("{id} 1"), format!("{id} 2"), format!("{id} 3")],
        "nothing lost, nothing repeated"
    );
    assert_eq!(audit_count(&env, id, 3), vec!["failed"; 3]);
}

#[test]
fn a_job_that_asked_a_human_is_never_retried_without_asking_again() {
    let env = Env::new();
    let _d = env.start(&[]);
    let cmd = "ls missing-dir";
    let first = job(&env, "local", "execute_bash", &json!({"command": cmd}));
    let (st, v, _) = settled(&env, first);
    assert_eq!(st, "failed", "{v}");
    let hash = v["command_hash"]
        .as_str()
        .expect("a command hash")
        .to_string();
    cli_ok(&env, &["override", &hash, "always_ask", "--reason", "test"]);
    std::thread::sleep(Duration::from_millis(2100)); // past the duplicate window
    let c = env.input();
    c.execute(
        "INSERT INTO jobs(action, params, retry) VALUES ('execute_bash', ?1, ?2)",
        rusqlite::params![
            json!({"command": cmd}).to_string(),
            r#"{"max_attempts": 3, "backoff_ms": 10, "on": ["exit_code"]}"#
        ],
    )
    .unwrap();
    let id = c.last_insert_rowid();
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    cli_ok(&env, &["approve", &common::vid(&v)]);
    let (st, v, e) = common::final_result(&env, id);
    assert_eq!(st, "failed", "{v} {e}");
    assert!(
        v["retry"]["not_retried"]
            .as_str()
            .unwrap()
            .contains("asked a human"),
        "{v}"
    );
    assert_eq!(
        env.result(id).unwrap().3,
        2,
        "the attempt that asked and the approved run; no retry"
    );
    assert_eq!(common::validations_count(&env, id), 1, "asked once");
}

#[test]
fn a_job_waiting_for_its_retry_is_cancelled_and_never_runs_again() {
    let env = Env::new();
    let canary = env.root.path().join("canary");
    let canary_s = canary.display().to_string();
    let d = env.start(&[("BRAINLOOP_TEST_CANARY", canary_s.as_str())]);
    let id = insert_ctl(
        &env,
        "local",
        r#"{"ms": 1, "fail": true, "canary": true}"#,
        None,
        Some(r#"{"max_attempts": 5, "backoff_ms": 60000}"#),
    );
    env.wait_status(id, "queued", LONG);
    let (code, out, err) = cancel(&env, id, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let (st, v, _, attempts) = result_json(&env, id);
    assert_eq!((st.as_str(), attempts), ("cancelled", 1), "{v}");
    d.kill9();
    let _d = env.start(&[("BRAINLOOP_TEST_CANARY", canary_s.as_str())]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(result_json(&env, id).0, "cancelled");
    let ran = std::fs::read_to_string(&canary).unwrap();
    assert_eq!(ran.trim(), format!("{id} 1"), "one attempt only");
}

#[test]
fn a_producer_uid_cannot_cancel_any_job_when_run_as_root_else_skipped_not_root() {
    if !nix::unistd::geteuid().is_root() {
        println!("SKIPPED: not root, cannot run a producer as another uid");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    cli_ok(&env, &["init"]);
    // The data dir's group is the producers' (here nogroup, gid 65534), as `init` documents.
    let nogroup = Some(nix::unistd::Gid::from_raw(65534));
    for e in std::fs::read_dir(&env.data).unwrap() {
        nix::unistd::chown(&e.unwrap().path(), None, nogroup).unwrap();
    }
    nix::unistd::chown(&env.data, None, nogroup).unwrap();
    let _d = env.start(&[]);
    let id = env.insert_full(
        "sleep",
        r#"{"ms": 600000}"#,
        0,
        Some(common::now_ms() + 3_600_000),
    );
    env.wait_status(id, "queued", LONG);
    let as_producer = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                common::BIN,
            ])
            .args(args)
            .env("BRAINLOOP_DATA_DIR", &env.data)
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .output()
            .expect("setpriv")
    };
    // It is a producer: it can enqueue.
    let out = as_producer(&["enqueue", "sleep", "--params", r#"{"ms": 1}"#]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids = id.to_string();
    let out = as_producer(&["cancel", &ids, "--timeout", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cancel is an operator command"), "{err}");
    let n: i64 = env
        .db("command_security.db")
        .query_row("SELECT count(*) FROM cancellations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "nothing recorded");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(result_json(&env, id).0, "queued", "the job is untouched");
}

#[test]
fn a_job_whose_policy_allows_more_attempts_survives_more_crashes() {
    let env = Env::new();
    let id = {
        let d = env.start(&[]);
        let id = insert_ctl(
            &env,
            "local",
            r#"{"ms": 600000}"#,
            None,
            Some(r#"{"max_attempts": 5}"#),
        );
        wait_running(&env, id);
        d.kill9();
        id
    };
    // The configuration's crash limit is 3 starts; the job's policy allows 5.
    for attempt in 2..=4 {
        let d = env.start(&[]);
        let t0 = Instant::now();
        while lifecycle_row(&env, id) != ("running".into(), attempt) {
            assert!(
                t0.elapsed() < LONG,
                "attempt {attempt}: {:?}",
                result_json(&env, id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d.kill9();
    }
    let _d = env.start(&[]);
    wait_running(&env, id);
    assert_eq!(
        lifecycle_row(&env, id),
        ("running".into(), 5),
        "a fifth start, not `interrupted`"
    );
    assert_eq!(cancel(&env, id, &[]).0, 0);
}
