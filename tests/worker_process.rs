//! Process-level tests of the worker core: the real binary, real SQLite files in temp dirs,
//! rows inserted by a separate connection, SIGTERM and kill -9.

mod common;

use common::{now_ms, Env};
use rusqlite::params;
use std::collections::HashMap;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

#[test]
fn rows_from_another_connection_run_in_priority_order_and_not_before_is_respected() {
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_CONCURRENCY", "1")]);
    // One transaction, so the worker sees all rows at once and must order them itself.
    let mut c = env.input();
    let tx = c.transaction().unwrap();
    let prios = [0i64, 5, -3, 5, 9, 0, 1, 9, -1, 2];
    for p in prios {
        tx.execute(
            "INSERT INTO jobs(action, params, priority) VALUES ('sleep', '{\"ms\": 30}', ?1)",
            [p],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    env.wait_final(prios.len() as i64, LONG);
    let mut order: Vec<(i64, i64, i64)> = {
        let lc = env.lifecycle();
        let mut s = lc
            .prepare("SELECT p.started_at, q.priority, q.job_id FROM processed_log p JOIN queue q USING(job_id)")
            .unwrap();
        let v = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        v.map(Result::unwrap).collect()
    };
    order.sort();
    let seen: Vec<(i64, i64)> = order.iter().map(|&(_, p, id)| (p, id)).collect();
    let mut want = seen.clone();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    assert_eq!(seen, want, "start order must be priority desc, then id asc");

    // not_before: a delayed job starts no earlier than asked; a later, undelayed one overtakes it.
    let at = now_ms() + 3000;
    let delayed = env.insert_full("sleep", "{\"ms\": 1}", 100, Some(at));
    let quick = env.insert("sleep", "{\"ms\": 1}");
    env.wait_status(quick, "succeeded", LONG);
    assert_ne!(
        env.result(delayed).map(|r| r.0).as_deref(),
        Some("succeeded")
    );
    env.wait_status(delayed, "succeeded", LONG);
    let started: i64 = env
        .output()
        .query_row(
            "SELECT started_at FROM results WHERE job_id = ?1",
            [delayed],
            |r| r.get(0),
        )
        .unwrap();
    assert!(started >= at, "started {started} before not_before {at}");
    drop(d);
}

#[test]
fn editing_a_row_after_its_claim_changes_nothing() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = env.insert_full("sleep", "{\"ms\": 50}", 0, Some(now_ms() + 1500));
    // Wait for the claim (the snapshot), then tamper with the producer's row.
    let t0 = std::time::Instant::now();
    loop {
        let n: i64 = env
            .lifecycle()
            .query_row("SELECT count(*) FROM queue WHERE job_id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        if n == 1 {
            break;
        }
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(10));
    }
    env.input()
        .execute(
            "UPDATE jobs SET action = 'get_stats', params = '{\"ms\": 1, \"fail\": true}', not_before = NULL WHERE id = ?1",
            [id],
        )
        .unwrap();
    let (status, result, _, _) = env.wait_status(id, "succeeded", LONG);
    assert_eq!(status, "succeeded");
    let v: serde_json::Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(
        v["slept_ms"], 50,
        "the claimed snapshot ran, not the edited row: {v}"
    );
}

#[test]
fn malformed_rows_fail_with_a_clear_error_and_later_rows_still_run() {
    let env = Env::new();
    let _d = env.start(&[("BRAINLOOP_PARAMS_MAX_BYTES", "2000")]);
    let c = env.input();
    let big = format!("{{\"k\": \"{}\"}}", "x".repeat(5000));
    let cases: Vec<(String, Vec<rusqlite::types::Value>, &str)> = {
        use rusqlite::types::Value as V;
        let t = |s: &str| V::Text(s.to_string());
        vec![
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("list_actions"), t("{not json")],
                "not valid JSON",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("no_such_action"), t("{}")],
                "unknown action \"no_such_action\"",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("list_actions"), t(&big)],
                "over the cap of 2000 bytes",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("list_actions"), t("{\"a\":\"\u{0}\"}")],
                "NUL",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("list_actions"), V::Blob(b"{}".to_vec())],
                "got blob",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("list_actions"), t("[]")],
                "JSON object",
            ),
            (
                "INSERT INTO jobs(action, params, priority) VALUES (?1, ?2, ?3)".into(),
                vec![t("list_actions"), t("{}"), t("urgent")],
                "priority must be an INTEGER",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![V::Blob(vec![0xff]), t("{}")],
                "action must be TEXT",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("get_schema"), t("{}")],
                "invalid params for get_schema",
            ),
            (
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)".into(),
                vec![t("sleep"), t("{\"ms\": \"soon\"}")],
                "/ms",
            ),
        ]
    };
    let mut ids = vec![];
    for (sql, vals, _) in &cases {
        c.execute(sql, rusqlite::params_from_iter(vals.iter()))
            .unwrap();
        ids.push(c.last_insert_rowid());
    }
    let good = env.insert("list_actions", "{}");
    env.wait_final(cases.len() as i64 + 1, LONG);
    for (id, (_, _, want)) in ids.iter().zip(&cases) {
        let (status, _, error, _) = env.result(*id).unwrap();
        assert_eq!(status, "failed", "job {id}");
        let error = error.unwrap_or_default();
        assert!(
            error.contains(want),
            "job {id}: error {error:?} should mention {want:?}"
        );
    }
    assert_eq!(env.result(good).unwrap().0, "succeeded");
    // Every call, refused ones included, is audited.
    let audited: i64 = env
        .metadata()
        .query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
        .unwrap();
    assert_eq!(audited, cases.len() as i64 + 1);
}

#[test]
fn wake_up_comes_from_the_input_file_changing_not_from_polling() {
    let env = Env::new();
    // With a 60 s poll fallback, only the file watcher can pick the job up quickly.
    let _d = env.start(&[("BRAINLOOP_POLL_FALLBACK_MS", "60000")]);
    std::thread::sleep(Duration::from_millis(300));
    let id = env.insert("list_actions", "{}");
    env.wait_status(id, "succeeded", Duration::from_secs(20));
    let id = env.insert("get_stats", "{}");
    env.wait_status(id, "succeeded", Duration::from_secs(20));
}

/// A 60 s poll fallback (only the file watches can wake the worker quickly), commands run
/// directly once approved (no overlay).
const WATCH_ONLY: [(&str, &str); 2] = [
    ("BRAINLOOP_POLL_FALLBACK_MS", "60000"),
    ("BRAINLOOP_OVERLAY", "0"),
];

/// Submits `command` (one that writes: asked up front) and returns its job and validation ids.
fn waits_for_a_human(env: &Env, command: &str) -> (i64, String) {
    let id = common::job(
        env,
        "local",
        "execute_bash",
        &serde_json::json!({ "command": command }),
    );
    let (st, v, _) = common::settled(env, id);
    assert_eq!(st, "pending_validation", "{v}");
    (id, v["validation_id"].as_str().unwrap().to_string())
}

#[test]
fn an_operators_approval_wakes_the_worker_not_the_poll() {
    let env = Env::new();
    // 60 s poll fallback: the approval must be seen through command_security.db's watch.
    let _d = env.start(&WATCH_ONLY);
    let (id, validation) = waits_for_a_human(&env, "touch approved.txt");
    let t0 = std::time::Instant::now();
    common::cli_ok(&env, &["approve", &validation]);
    env.wait_status(id, "succeeded", Duration::from_secs(20));
    assert!(env.workspace.join("approved.txt").exists());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "picked up by the poll, not the watch"
    );
}

#[test]
fn an_approval_given_during_a_backlog_drain_is_acted_on_before_the_drain_ends() {
    let env = Env::new();
    let total = 400_000i64;
    let d = env.start(&WATCH_ONLY);
    let (id, validation) = waits_for_a_human(&env, "touch during-drain.txt");
    d.sigterm();
    assert!(d.wait_exit(LONG).0.success());
    {
        let mut c = env.input();
        let tx = c.transaction().unwrap();
        for _ in 0..total {
            tx.execute("INSERT INTO jobs(action, params) VALUES ('ping', '{}')", [])
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let _d = env.start(&WATCH_ONLY);
    while env.final_count() < 1000 {
        std::thread::sleep(Duration::from_millis(1));
    }
    common::cli_ok(&env, &["approve", &validation]);
    env.wait_final(total + 1, LONG);
    let c = env.output();
    let approved_at: i64 = c
        .query_row(
            "SELECT finished_at FROM results WHERE job_id = ?1 AND status = 'succeeded'",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    let last_ping: i64 = c
        .query_row(
            "SELECT max(finished_at) FROM results WHERE job_id <> ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        approved_at < last_ping,
        "the approved job ran {} ms after the backlog's last job: it waited for the drain",
        approved_at - last_ping
    );
}

/// Final results before a crash, by job: (finished_at, attempts).
fn finals(env: &Env) -> HashMap<i64, (i64, i64)> {
    let c = env.output();
    let mut s = c
        .prepare("SELECT job_id, finished_at, attempts FROM results WHERE status NOT IN ('queued','running','pending_validation')")
        .unwrap();
    let rows = s
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn kill_9_during_a_batch_loses_nothing_and_runs_nothing_twice() {
    let env = Env::new();
    let total = 3000i64;
    let d = env.start(&[("BRAINLOOP_CONCURRENCY", "8")]);
    {
        let c = env.input();
        for i in 0..total {
            let (a, p) = if i % 10 == 0 {
                ("sleep", "{\"ms\": 5}")
            } else {
                ("list_actions", "{}")
            };
            c.execute(
                "INSERT INTO jobs(action, params) VALUES (?1, ?2)",
                params![a, p],
            )
            .unwrap();
        }
    }
    // Kill twice at arbitrary points of the batch, restarting in between.
    let mut d = Some(d);
    for kill_at in [total / 5, total / 2] {
        while env.final_count() < kill_at {
            std::thread::sleep(Duration::from_millis(2));
        }
        d.take().unwrap().kill9();
        let before = finals(&env);
        let before_attempts: HashMap<i64, i64> = {
            let c = env.lifecycle();
            let mut s = c
                .prepare("SELECT job_id, attempts FROM processed_log")
                .unwrap();
            let v = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            v.map(Result::unwrap).collect()
        };
        d = Some(env.start(&[("BRAINLOOP_CONCURRENCY", "8")]));
        env.wait_final(total, LONG);
        let after = finals(&env);
        let after_attempts: HashMap<i64, i64> = {
            let c = env.lifecycle();
            let mut s = c
                .prepare("SELECT job_id, attempts FROM processed_log")
                .unwrap();
            let v = s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            v.map(Result::unwrap).collect()
        };
        for (id, fin) in &before {
            assert_eq!(
                after.get(id),
                Some(fin),
                "job {id} had a final result before the crash and was changed"
            );
            assert_eq!(
                after_attempts.get(id),
                before_attempts.get(id),
                "job {id} had a final result and was started again"
            );
        }
        // Re-insert the remaining batch for the second kill.
        if kill_at == total / 5 {
            let c = env.input();
            for _ in 0..total {
                c.execute(
                    "INSERT INTO jobs(action, params) VALUES ('list_actions', '{}')",
                    [],
                )
                .unwrap();
            }
        }
        let want = if kill_at == total / 5 {
            total
        } else {
            2 * total
        };
        env.wait_final(want, LONG);
    }
    let n_rows: i64 = env
        .output()
        .query_row("SELECT count(*) FROM results", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n_rows, 2 * total, "exactly one results row per job");
    let not_ok: i64 = env
        .output()
        .query_row(
            "SELECT count(*) FROM results WHERE status <> 'succeeded'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(not_ok, 0, "every job ends succeeded");
    assert_eq!(
        lifecycle_settled(&env, "status <> 'done'"),
        0,
        "every job's lifecycle ends done"
    );
    drop(d);
}

/// The processed_log rows matching `open` once the lifecycle has caught up with the results: the
/// result writer commits a job's results row first and its lifecycle `done` right after (two
/// databases, two commits), so a check made the moment the last result appears can see the
/// second commit still in flight on a loaded machine. Polls up to `LONG`, then returns the
/// count, which the caller asserts.
fn lifecycle_settled(env: &Env, open: &str) -> i64 {
    let t0 = std::time::Instant::now();
    loop {
        let n: i64 = env
            .lifecycle()
            .query_row(
                &format!("SELECT count(*) FROM processed_log WHERE {open}"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        if n == 0 || t0.elapsed() > LONG {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Issue 24: a backlog of instant jobs (`ping`) is answered in claim batches without tasks. A
/// kill -9 in the middle of that drain must still lose nothing, run nothing twice and leave
/// exactly one audit row per job.
#[test]
fn kill_9_during_an_instant_backlog_drain_loses_nothing_and_audits_each_job_once() {
    let env = Env::new();
    let total = 60_000i64;
    {
        // Started once for its schema, stopped before the backlog is inserted.
        let d = env.start(&[]);
        d.sigterm();
        assert!(d.wait_exit(LONG).0.success());
    }
    {
        let mut c = env.input();
        let tx = c.transaction().unwrap();
        for i in 0..total {
            tx.execute(
                "INSERT INTO jobs(action, params) VALUES ('ping', ?1)",
                [format!("{{\"echo\": \"{i}\"}}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let d = env.start(&[]);
    while env.final_count() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    d.kill9();
    let before = finals(&env);
    assert!(
        !before.is_empty() && (before.len() as i64) < total,
        "the kill must land inside the drain: {} of {total} answered",
        before.len()
    );
    let d = env.start(&[]);
    env.wait_final(total, LONG);
    let after = finals(&env);
    for (id, fin) in &before {
        assert_eq!(after.get(id), Some(fin), "job {id} was answered twice");
    }
    let c = env.output();
    let (rows, ok, echoed): (i64, i64, i64) = c
        .query_row(
            "SELECT count(*), sum(status = 'succeeded'),
                    sum(json_extract(result, '$.echo') = CAST(job_id - 1 AS TEXT))
             FROM results",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (rows, ok, echoed),
        (total, total, total),
        "one right answer per job"
    );
    assert_eq!(
        lifecycle_settled(&env, "status <> 'done' OR attempts NOT IN (1, 2)"),
        0,
        "every job done after one or two attempts"
    );
    // The recorder moves the audit rows after the results: wait for all, then check each once.
    let t0 = std::time::Instant::now();
    loop {
        let (n, distinct): (i64, i64) = env
            .metadata()
            .query_row(
                "SELECT count(*), count(DISTINCT job_id) FROM audit",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(n, distinct, "a job was audited twice");
        if n == total {
            break;
        }
        assert!(t0.elapsed() < LONG, "only {n}/{total} audit rows");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(d);
}

#[test]
fn sigterm_with_slow_jobs_exits_zero_quickly_and_they_run_again_next_start() {
    let env = Env::new();
    let cfg = [
        ("BRAINLOOP_DRAIN_WINDOW_MS", "300"),
        ("BRAINLOOP_CANCEL_GRACE_MS", "300"),
    ];
    let d = env.start(&cfg);
    let slow = env.insert("sleep", "{\"ms\": 2000}");
    let stubborn = env.insert("sleep", "{\"ms\": 2000, \"ignore_cancel\": true}");
    let quick = env.insert("sleep", "{\"ms\": 100}");
    env.wait_status(slow, "running", LONG);
    env.wait_status(stubborn, "running", LONG);
    // The quick one must have been picked up too (running, or already done).
    let t0 = std::time::Instant::now();
    while env.result(quick).is_none() {
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(5));
    }
    d.sigterm();
    let (st, took) = d.wait_exit(Duration::from_secs(60));
    assert!(st.success(), "exit status {st:?}");
    assert!(took < Duration::from_secs(60));
    assert_eq!(env.last_heartbeat_status().as_deref(), Some("stopped"));
    let n: i64 = env
        .metadata()
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'shutdown'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        env.result(quick).unwrap().0,
        "succeeded",
        "a job shorter than the drain window finishes"
    );
    for id in [slow, stubborn] {
        let (status, _, error, _) = env.result(id).unwrap();
        assert_eq!(
            status, "queued",
            "job {id} cut off by shutdown is recorded to run again"
        );
        assert!(error.unwrap().contains("shutdown"));
    }
    let _d = env.start(&cfg);
    for id in [slow, stubborn] {
        let (_, result, _, attempts) = env.wait_status(id, "succeeded", LONG);
        assert_eq!(
            attempts, 1,
            "a shutdown cut-off is not counted as an attempt"
        );
        assert!(result.unwrap().contains("\"slept_ms\":2000"));
    }
}

#[test]
fn a_job_cut_off_by_crashes_ends_interrupted_after_max_attempts() {
    let env = Env::new();
    let cfg = [("BRAINLOOP_MAX_ATTEMPTS", "2")];
    let d = env.start(&cfg);
    let id = env.insert("sleep", "{\"ms\": 60000}");
    env.wait_status(id, "running", LONG);
    d.kill9();
    let d = env.start(&cfg);
    let t0 = std::time::Instant::now();
    while env.result(id).unwrap().3 < 2 {
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(20));
    }
    env.wait_status(id, "running", LONG);
    d.kill9();
    let _d = env.start(&cfg);
    let (_, _, error, attempts) = env.wait_status(id, "interrupted", LONG);
    assert_eq!(attempts, 2);
    assert!(error.unwrap().contains("max_attempts = 2"));
}

#[test]
fn a_write_lock_held_by_another_process_does_not_crash_the_worker() {
    let env = Env::new();
    let d = env.start(&[]);
    // Hold the input.db write lock for 3 s with rows inside the transaction.
    let mut c = env.input();
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .unwrap();
    tx.execute("INSERT INTO jobs(action) VALUES ('list_actions')", [])
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    tx.commit().unwrap();
    env.wait_final(1, LONG);
    // Hold output.db's write lock longer than the busy timeout (5 s): results wait, then land.
    let mut o = env.output();
    let tx = o
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let id = env.insert("list_actions", "{}");
    std::thread::sleep(Duration::from_secs(7));
    tx.commit().unwrap();
    env.wait_status(id, "succeeded", LONG);
    assert!(
        d.log_text().contains("retrying") || d.log_text().contains("cannot"),
        "the wait was noticed in the log"
    );
    d.sigterm();
    assert!(d.wait_exit(LONG).0.success());
}

#[test]
fn concurrent_init_and_run_on_a_fresh_dir_apply_the_schema_once() {
    let env = Env::new();
    let mut inits = vec![];
    for _ in 0..4 {
        inits.push(
            std::process::Command::new(common::BIN)
                .args(["init", "--data-dir"])
                .arg(&env.data)
                .output(),
        );
    }
    // Interleave for real: spawn in parallel threads.
    let data = env.data.clone();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let data = data.clone();
            std::thread::spawn(move || {
                std::process::Command::new(common::BIN)
                    .args(["init", "--data-dir"])
                    .arg(&data)
                    .output()
                    .unwrap()
            })
        })
        .collect();
    let d = env.start(&[]);
    for h in handles {
        let out = h.join().unwrap();
        assert!(
            out.status.success(),
            "init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for r in inits {
        assert!(r.unwrap().status.success());
    }
    for kind in brainloop::db::DbKind::ALL {
        let f = kind.file_name();
        let v: i64 = env
            .db(f)
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, brainloop::db::migrate::target_version(kind), "{f}");
    }
    let id = env.insert("list_actions", "{}");
    env.wait_status(id, "succeeded", LONG);
    assert!(!d.log_text().contains("ERROR"), "{}", d.log_text());
}

#[test]
fn status_reports_alive_stopped_and_dead() {
    let env = Env::new();
    let d = env.start(&[]);
    let (st, out, _) = env.cli(&["status", "--json"]);
    assert!(st.success(), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["alive"], true);
    assert_eq!(v["state"], "running");
    assert_eq!(v["files"].as_array().unwrap().len(), 5);
    let (_, table, _) = env.cli(&["status"]);
    assert!(
        table.contains("last heartbeat") && table.contains("brainloop.output.db"),
        "{table}"
    );
    d.kill9();
    let (st, out, _) = env.cli(&["status", "--json"]);
    assert_eq!(st.code(), Some(3));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["state"].as_str().unwrap().starts_with("DEAD"), "{v}");
    let d = env.start(&[]);
    d.sigterm();
    d.wait_exit(LONG);
    let (st, out, _) = env.cli(&["status"]);
    assert_eq!(st.code(), Some(3));
    assert!(out.contains("stopped"), "{out}");
}

#[test]
fn a_second_worker_on_the_same_data_dir_is_refused() {
    let env = Env::new();
    let d = env.start(&[]);
    let (st, _, err) = env.cli(&["run", "--workspace", env.workspace.to_str().unwrap()]);
    assert!(!st.success());
    assert!(err.contains(&format!("pid {}", d.pid())), "{err}");
}

#[test]
fn a_data_dir_inside_the_workspace_is_refused_with_the_fix_named() {
    let env = Env::new();
    let inside = env.workspace.join("data");
    let out = std::process::Command::new(common::BIN)
        .args(["run", "--data-dir"])
        .arg(&inside)
        .arg("--workspace")
        .arg(&env.workspace)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("inside the workspace") && err.contains("--data-dir"),
        "{err}"
    );
}

#[test]
fn enqueue_validates_early_and_wait_prints_the_result() {
    let env = Env::new();
    let (st, _, err) = env.cli(&["enqueue", "list_actions"]);
    assert!(!st.success() && err.contains("brainloop init"), "{err}");
    let _d = env.start(&[]);
    let (st, _, err) = env.cli(&["enqueue", "lst_actions"]);
    assert!(!st.success() && err.contains("known actions"), "{err}");
    let (st, _, err) = env.cli(&["enqueue", "get_schema", "--params", "{\"action_name\": 1}"]);
    assert!(!st.success() && err.contains("action_name"), "{err}");
    let (st, out, err) = env.cli(&[
        "enqueue",
        "get_schema",
        "--params",
        "{\"action_name\": \"get_stats\"}",
        "--wait",
    ]);
    assert!(st.success(), "{err}");
    // stdout is the result alone; the envelope with --json.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], "get_stats");
    let (st, out, _) = env.cli(&["enqueue", "get_stats", "--priority", "-5"]);
    assert!(st.success());
    let id: i64 = out.trim().parse().unwrap();
    let p: i64 = env
        .input()
        .query_row("SELECT priority FROM jobs WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(p, -5);
}

#[test]
fn heartbeat_metrics_and_get_stats_report_the_work_done() {
    let env = Env::new();
    let d = env.start(&[]);
    for _ in 0..5 {
        env.insert("list_actions", "{}");
    }
    env.insert("sleep", "{\"ms\": 1, \"fail\": true}");
    env.wait_final(6, LONG);
    // Counters are flushed with the heartbeat (every 200 ms here).
    let t0 = std::time::Instant::now();
    let sum = |name: &str| -> f64 {
        env.output()
            .query_row(
                "SELECT coalesce(sum(value), 0) FROM metrics WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
    };
    while sum("jobs_succeeded") < 5.0 || sum("jobs_failed") < 1.0 {
        assert!(t0.elapsed() < LONG, "metrics not flushed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = env.insert("get_stats", "{\"window_s\": 600}");
    let (_, result, _, _) = env.wait_status(id, "succeeded", LONG);
    let v: serde_json::Value = serde_json::from_str(&result.unwrap()).unwrap();
    let metrics = v["metrics"].as_array().unwrap();
    let succeeded = metrics
        .iter()
        .find(|m| m["name"] == "jobs_succeeded")
        .expect("jobs_succeeded");
    assert_eq!(succeeded["sum"], 5.0, "{v}");
    assert_eq!(v["results_by_status"]["failed"], 1, "{v}");
    assert_eq!(v["heartbeat"]["status"], "running");
    // The heartbeat keeps beating at the configured interval while idle.
    let beats = || -> i64 {
        env.output()
            .query_row(
                "SELECT count(*) FROM heartbeat WHERE pid = ?1",
                [d.pid()],
                |r| r.get(0),
            )
            .unwrap()
    };
    let b0 = beats();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        beats() >= b0 + 3,
        "heartbeat rows should accumulate every 200 ms"
    );
}

#[test]
fn ping_answers_through_the_queue_before_and_after_the_idle_memory_release() {
    let env = Env::new();
    let d = env.start(&[]);
    let beats = || -> i64 {
        env.output()
            .query_row("SELECT count(*) FROM heartbeat", [], |r| r.get(0))
            .unwrap()
    };
    for round in 0..2i64 {
        let ids: Vec<i64> = (0..20)
            .map(|i| env.insert("ping", &format!("{{\"echo\": \"r{round}-{i}\"}}")))
            .collect();
        env.wait_final(20 * (round + 1), LONG);
        for (i, id) in ids.iter().enumerate() {
            let (status, result, error, _) = env.result(*id).unwrap();
            assert_eq!(status, "succeeded", "{error:?}");
            let v: serde_json::Value = serde_json::from_str(&result.unwrap()).unwrap();
            assert_eq!(v["pong"], serde_json::json!(true));
            assert_eq!(v["echo"], serde_json::json!(format!("r{round}-{i}")));
        }
        // Let idle heartbeats pass: the first one after the burst releases memory (caches,
        // heap, the binary's code pages); the next round must run on re-faulted code.
        let b0 = beats();
        while beats() < b0 + 3 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let bad = env.insert("ping", "{\"echo\": 5}");
    env.wait_final(41, LONG);
    assert_eq!(env.result(bad).unwrap().0, "failed");
    assert!(!d.log_text().contains("panicked"), "{}", d.log_text());
}
