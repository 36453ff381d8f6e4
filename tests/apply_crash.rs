//! A kill -9 inside the apply window (issue 34 item 1), through the real daemon: an approved
//! change set is being applied (or was applied) when the worker dies, before the job's result is
//! committed. After the restart the job's final result, the workspace, the security journal and
//! `brainloop show` must agree: a job never ends `denied` (or "nothing ran") while its change set
//! is in the workspace, and an applied change set is never asked about again. The operator of
//! these tests denies whatever is asked after the restart — the answer that used to produce the
//! lie (a `denied` job with the file applied). Temp dirs only.

mod common;

use common::{cli_ok, settled, submit, Env};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// What the command changes: two files, so a kill can land between them.
const CMD: &str = "echo A >> a.txt && echo B >> b.txt";
const A0: &str = "one\n";
const B0: &str = "two\n";
const A1: &str = "one\nA\n";
const B1: &str = "two\nB\n";

fn workspace(env: &Env) -> (String, String) {
    let r = |f: &str| std::fs::read_to_string(env.workspace.join(f)).unwrap_or_default();
    (r("a.txt"), r("b.txt"))
}

fn journaled(env: &Env, id: i64) -> Option<Option<i64>> {
    use rusqlite::OptionalExtension;
    env.db("command_security.db")
        .query_row(
            "SELECT undone_at FROM journal WHERE job_id = ?1",
            [id],
            |r| r.get::<_, Option<i64>>(0),
        )
        .optional()
        .unwrap()
}

/// Whether the job's apply is recorded `applied` in lifecycle.db — the moment the after-apply
/// hook holds in. The journal row (command_security.db) says applied a moment before it, so a
/// kill on that alone can land between the two (the re-ask then rightly says "partly applied").
fn apply_done(env: &Env, id: i64) -> bool {
    use rusqlite::OptionalExtension;
    env.db("brainloop.lifecycle.db")
        .query_row(
            "SELECT state FROM applies WHERE job_id = ?1 ORDER BY rowid DESC LIMIT 1",
            [id],
            |r| r.get::<_, String>(0),
        )
        .optional()
        .unwrap()
        .as_deref()
        == Some("applied")
}

fn validations_of(env: &Env, id: i64) -> Vec<(String, String)> {
    let c = env.output();
    let mut s = c
        .prepare(
            "SELECT id, status FROM validations WHERE job_id = ?1 ORDER BY requested_at, rowid",
        )
        .unwrap();
    let rows = s
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    rows
}

/// Starts the worker with the test hook `knob` (a 60 s pause), submits [`CMD`], approves it,
/// waits until `at` holds (the worker is then held in the window), kills it -9 and restarts it
/// without the hook. Then denies every request that is asked after the restart, until the job
/// has a final result: (job id, status, result, error, validations denied after the restart).
fn crash_then_deny(
    knob: &str,
    at: impl Fn(&Env, &common::Daemon, i64) -> bool,
) -> (
    Env,
    common::Daemon,
    i64,
    String,
    serde_json::Value,
    String,
    usize,
) {
    let (env, d, id, st, v, err, denied, _) = crash_then_deny_in(knob, false, at);
    (env, d, id, st, v, err, denied)
}

/// [`crash_then_deny`] for an `execute_bash` job, or (`in_code`) a `run_code` job that runs
/// [`CMD`] through `mcp.brainloop.execute_bash`; also returns the reasons of every request asked
/// after the restart.
#[allow(clippy::type_complexity)]
fn crash_then_deny_in(
    knob: &str,
    in_code: bool,
    at: impl Fn(&Env, &common::Daemon, i64) -> bool,
) -> (
    Env,
    common::Daemon,
    i64,
    String,
    serde_json::Value,
    String,
    usize,
    Vec<String>,
) {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), A0).unwrap();
    std::fs::write(env.workspace.join("b.txt"), B0).unwrap();
    let d = env.start(&[(knob, "60000")]);
    let (id, st, v, err) = if in_code {
        let code =
            format!("await mcp.brainloop.execute_bash({{command: '{CMD}'}});\nreturn 'done';");
        let id = common::job(
            &env,
            "local",
            "run_code",
            &serde_json::json!({ "code": code }),
        );
        let (st, v, err) = settled(&env, id);
        (id, st, v, err)
    } else {
        submit(&env, CMD)
    };
    assert_eq!(st, "pending_validation", "{err} {v}");
    let first = common::vid(&v);
    assert!(cli_ok(&env, &["show", &first]).contains("+A"));
    cli_ok(&env, &["approve", &first]);
    let t0 = Instant::now();
    while !at(&env, &d, id) {
        assert!(
            t0.elapsed() < LONG,
            "the worker never reached the window of {knob}: {:?}; log:\n{}",
            workspace(&env),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before_kill = env.result(id).unwrap().0;
    assert!(
        ["running", "queued"].contains(&before_kill.as_str()),
        "the result must not be committed yet: {before_kill}"
    );
    d.kill9();
    let d = env.start(&[]);
    let mut denied = std::collections::HashSet::new();
    let mut reasons = Vec::new();
    let t0 = Instant::now();
    let (st, v, err) = loop {
        let (st, v, e) = settled(&env, id);
        if st != "pending_validation" {
            break (st, v, e);
        }
        let vid = common::vid(&v);
        if denied.insert(vid.clone()) {
            reasons.push(v["reasons"].to_string());
            cli_ok(&env, &["deny", &vid]);
        }
        assert!(t0.elapsed() < LONG, "job {id} still pending: {v}");
        std::thread::sleep(Duration::from_millis(20));
    };
    (env, d, id, st, v, err, denied.len(), reasons)
}

/// The job's result, the workspace, the journal and `show` all say "applied, once".
fn assert_applied_and_said(
    env: &Env,
    id: i64,
    st: &str,
    v: &serde_json::Value,
    err: &str,
    denied: usize,
) {
    assert_ne!(
        st,
        "denied",
        "a denied job while its change set is in the workspace ({:?}): {err} {v}",
        workspace(env)
    );
    assert_eq!(denied, 0, "an applied change set was asked about again");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        workspace(env),
        (A1.into(), B1.into()),
        "applied exactly once"
    );
    let applied: Vec<&str> = v["applied"]
        .as_array()
        .unwrap_or_else(|| panic!("the result lists what was applied: {v}"))
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert!(
        applied.contains(&"a.txt") && applied.contains(&"b.txt"),
        "{v}"
    );
    assert_eq!(v["policy_used"], "approved", "{v}");
    let said = v["recovered"].as_str().unwrap_or_default();
    assert!(
        said.contains("appl") && said.contains("stopped") && said.contains("restart"),
        "the result says the apply was cut off by the stop: {v}"
    );
    assert_eq!(journaled(env, id), Some(None), "journaled, not undone");
    assert_eq!(
        validations_of(env, id)
            .iter()
            .map(|(_, s)| s.as_str())
            .collect::<Vec<_>>(),
        vec!["approved"],
        "one request, approved; nothing denied"
    );
    let shown = cli_ok(env, &["show", &id.to_string()]);
    assert!(shown.contains("change set applied"), "{shown}");
    // Audited once as finished (besides the row of its wait for the human), like a job that
    // reached the finisher.
    let finals = || -> i64 {
        env.metadata()
            .query_row(
                "SELECT count(*) FROM audit WHERE job_id = ?1 AND status <> 'pending_validation'",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    };
    let t0 = Instant::now();
    while finals() == 0 {
        assert!(t0.elapsed() < LONG, "job {id} never audited as finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(finals(), 1, "one final audit row");
    // And it can be undone like any applied change set.
    cli_ok(env, &["undo", &id.to_string()]);
    assert_eq!(workspace(env), (A0.into(), B0.into()));
}

/// Killed after the whole change set landed, before the result: the job ends with the apply's
/// result (saying so); nobody is asked again. On main before issue 34 it was asked again with
/// the same diff and ended `denied` with both files changed.
#[test]
fn killed_after_the_apply_before_the_result_ends_succeeded_never_denied() {
    let (env, _d, id, st, v, err, denied) =
        crash_then_deny("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS", |env, _, id| {
            workspace(env) == (A1.into(), B1.into())
                && journaled(env, id).is_some()
                && apply_done(env, id)
        });
    assert_applied_and_said(&env, id, &st, &v, &err, denied);
}

/// Killed with part of the change set in the workspace (one of its two files written): the
/// restart completes the apply (nothing re-run, nobody asked) and the job ends with its result.
#[test]
fn killed_in_the_middle_of_the_apply_completes_it_at_restart() {
    let (env, _d, id, st, v, err, denied) =
        crash_then_deny("BRAINLOOP_TEST_PAUSE_MID_APPLY_MS", |env, d, _| {
            let (a, b) = workspace(env);
            d.log_text().contains("BRAINLOOP_TEST_PAUSE_MID_APPLY_MS") && ((a == A1) ^ (b == B1))
        });
    assert_applied_and_said(&env, id, &st, &v, &err, denied);
    let runs: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT execution_count FROM commands_registry WHERE command_text = ?1",
            [CMD],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 1, "the command ran once, on the overlay");
}

/// Killed after the approval, before the first byte of the apply (nothing recorded as
/// applying): asking again is right, and a denial then ends the job `denied` with the workspace
/// untouched, no journal row, and `show` saying nothing was applied.
#[test]
fn killed_before_the_first_byte_asks_again_and_a_deny_leaves_the_workspace_untouched() {
    let (env, _d, id, st, v, err, denied) =
        crash_then_deny("BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS", |_, d, _| {
            d.log_text()
                .contains("BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS")
        });
    assert_eq!(denied, 1, "asked again once: {v}");
    assert_eq!(st, "denied", "{err} {v}");
    assert_eq!(workspace(&env), (A0.into(), B0.into()), "nothing applied");
    assert_eq!(journaled(&env, id), None);
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(!shown.contains("change set applied"), "{shown}");
    let statuses: Vec<String> = validations_of(&env, id)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(statuses, vec!["approved", "denied"]);
}

/// A `run_code` job whose `execute_bash` call's change set was applied when the worker was
/// killed: the job is asked again (its script must go on), but the request says the change set
/// is ALREADY applied, and a denial ends the job `failed` saying the answer undid nothing —
/// never `denied` with the change set in the workspace. On main before issue 34 it was asked
/// again with the same diff, silently, and ended `denied`.
#[test]
fn a_code_job_killed_after_its_apply_is_asked_again_saying_so_and_a_deny_never_ends_denied() {
    let (env, _d, id, st, v, err, denied, reasons) =
        crash_then_deny_in("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS", true, |env, _, id| {
            workspace(env) == (A1.into(), B1.into())
                && journaled(env, id).is_some()
                && apply_done(env, id)
        });
    assert_ne!(
        st, "denied",
        "denied with the change set applied: {err} {v}"
    );
    assert_eq!(denied, 1, "asked again once: {v}");
    assert!(reasons[0].contains("ALREADY applied"), "{reasons:?}");
    assert_eq!(st, "failed", "{err} {v}");
    assert!(
        err.contains("undid nothing") && err.contains(&format!("brainloop undo {id}")),
        "{err}"
    );
    assert_eq!(workspace(&env), (A1.into(), B1.into()));
    assert_eq!(journaled(&env, id), Some(None));
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(shown.contains("change set applied"), "{shown}");
}
