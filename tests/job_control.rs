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
    assert!(v["cancelled_by"].as_str().unwrap().starts_with("operator:"), "{v}");
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
    // No worker: the request is recorded, the job ends when a worker sees it.
    let (code, out, _) = cancel(&env, id, &["--timeout", "0"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("has not ended yet"), "{out}");
    let canary_s = canary.display().to_string();
    let _d = env.start(&[("BRAINLOOP_TEST_CANARY", canary_s.as_str())]);
    // A later job runs: the queue is not blocked.
    let next = env.insert("sleep", r#"{"ms": 10, "canary": true}"#);
    env.wait_status(next, "succeeded", LONG);
    let (st, v, _, attempts) = result_json(&env, id);
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
    assert!(t0.elapsed() < Duration::from_secs(10), "stopped, not waited for");
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
    assert_eq!(lifecycle_row(&env, id), ("done".into(), 1), "one attempt, never again");
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
    assert_eq!(st, "cancelled", "ended by recovery, before anything started");
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
        .query_row("SELECT status FROM validations WHERE id = ?1", [&vid], |r| {
            r.get(0)
        })
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
