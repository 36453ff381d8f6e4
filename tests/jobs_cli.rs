//! Issue 56, "Jobs you can see", through the real binary: `brainloop jobs` (filters, limit,
//! newest first, `--json`), `brainloop result ID` (the stored result alone, exit code by
//! status), `enqueue --wait` (the result JSON alone on stdout, the id on stderr, `--json` both;
//! exit 0 / 1 / 4 / 5), `show` of a job that ran at once, and a schedule's firing read by its
//! negative id (`show -N`, `result -N`, `get_result` by the schedule's client only).

mod common;

use common::{cli_ok, job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `brainloop jobs --json ARGS`: the listed job ids, in order.
fn listed(env: &Env, args: &[&str]) -> Vec<i64> {
    let mut all = vec!["jobs", "--json"];
    all.extend_from_slice(args);
    let out = cli_ok(env, &all);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v.as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_i64().unwrap())
        .collect()
}

/// Jobs in every state a listing shows: (ping, blocked, pending, other client's, queued).
fn five_jobs(env: &Env) -> [i64; 5] {
    let ping = job(env, "local", "ping", &json!({}));
    assert_eq!(settled(env, ping).0, "succeeded");
    let blocked = job(
        env,
        "local",
        "execute_bash",
        &json!({"command": "rm -rf /"}),
    );
    assert_eq!(settled(env, blocked).0, "blocked");
    let pending = job(
        env,
        "local",
        "execute_bash",
        &json!({"command": "echo hi > a.txt"}),
    );
    assert_eq!(settled(env, pending).0, "pending_validation");
    let other = job(env, "other", "list_actions", &json!({}));
    settled(env, other);
    let (st, out, err) = env.cli(&["enqueue", "ping", "--not-before", "+1h"]);
    assert!(st.success(), "{out}{err}");
    [ping, blocked, pending, other, out.trim().parse().unwrap()]
}

#[test]
fn jobs_lists_newest_first_and_filters_by_status_action_client_and_time() {
    let env = Env::new();
    let _d = env.start(&[]);
    let [ping, blocked, pending, other, queued] = five_jobs(&env);
    assert_eq!(
        listed(&env, &[]),
        [queued, other, pending, blocked, ping],
        "newest first"
    );
    assert_eq!(listed(&env, &["--status", "blocked"]), [blocked]);
    assert_eq!(
        listed(&env, &["--status", "queued,pending_validation"]),
        [queued, pending]
    );
    assert_eq!(listed(&env, &["--action", "ping"]), [queued, ping]);
    assert_eq!(listed(&env, &["--client", "other"]), [other]);
    assert_eq!(listed(&env, &["--limit", "2"]), [queued, other]);
    assert_eq!(listed(&env, &["--since", "1h"]).len(), 5);
    assert!(listed(&env, &["--until", "1h"]).is_empty());
    let (st, _, err) = env.cli(&["jobs", "--status", "done"]);
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("not a job status"), "{err}");
    let (st, _, err) = env.cli(&["jobs", "--since", "soon"]);
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("30s, 10m, 2h, 3d"), "{err}");
    // The table: a header, one line per job with its status and command, escaped.
    let table = cli_ok(&env, &["jobs"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("STATUS") && lines[0].contains("CLIENT"),
        "{table}"
    );
    let row = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{blocked} ")))
        .unwrap_or_else(|| panic!("no line for job {blocked}: {table}"));
    assert!(row.contains("blocked") && row.contains("rm -rf /"), "{row}");
    assert!(lines.iter().any(|l| l.contains("pending_validation")));
    // An agent's command is shown escaped in the table, exact in --json.
    let raw = "echo \u{1b}]0;pwned\u{7}\u{202e}";
    env.input()
        .execute(
            "INSERT INTO jobs(action, params, not_before) VALUES ('execute_bash', ?1, ?2)",
            rusqlite::params![
                json!({"command": raw}).to_string(),
                common::now_ms() + 3_600_000
            ],
        )
        .unwrap();
    let table = cli_ok(&env, &["jobs", "-n", "1"]);
    assert!(table.contains("\\x1b]0;pwned\\x07\\u{202e}"), "{table}");
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{202e}'),
        "{table:?}"
    );
    let v: Value = serde_json::from_str(&cli_ok(&env, &["jobs", "--json", "-n", "1"])).unwrap();
    assert_eq!(v[0]["command"], raw);
    // JSON rows carry what the table shows.
    let v: Value = serde_json::from_str(&cli_ok(&env, &["jobs", "--json", "-n", "5"])).unwrap();
    let b = v
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == blocked)
        .unwrap();
    assert_eq!(b["status"], "blocked");
    assert_eq!(b["command"], "rm -rf /");
    assert_eq!(b["client"], "local");
    assert!(
        b["submitted_at"].is_i64() && b["finished_at"].is_i64(),
        "{b}"
    );
}

#[test]
fn result_prints_the_stored_result_alone_and_exits_by_status() {
    let env = Env::new();
    let _d = env.start(&[]);
    let [ping, blocked, pending, _, queued] = five_jobs(&env);
    let result = |id: i64, extra: &[&str]| {
        let id = id.to_string();
        let mut args = vec!["result", id.as_str()];
        args.extend_from_slice(extra);
        env.cli(&args)
    };
    let (st, out, _) = result(ping, &[]);
    assert_eq!(st.code(), Some(0));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["pong"], true, "stdout is the result itself: {v}");
    let (st, out, err) = result(blocked, &[]);
    assert_eq!(st.code(), Some(1));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "blocked", "{v}");
    assert!(err.contains(&format!("job {blocked} blocked")), "{err}");
    let (st, out, err) = result(pending, &[]);
    assert_eq!(st.code(), Some(5));
    let v: Value = serde_json::from_str(&out).unwrap();
    let vid = v["validation_id"].as_str().unwrap().to_string();
    assert!(err.contains(&format!("brainloop approve {vid}")), "{err}");
    let (st, out, err) = result(queued, &[]);
    assert_eq!(st.code(), Some(4), "{out}{err}");
    // A job held by --not-before stores when it may start.
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["waiting_until"].is_i64(), "{v}");
    assert!(err.contains(&format!("job {queued} is queued")), "{err}");
    let (st, _, err) = result(9999, &[]);
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("no job 9999"), "{err}");
    // --json: the envelope.
    let (st, out, _) = result(ping, &["--json"]);
    assert!(st.success());
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["job_id"].as_i64(), v["status"].as_str()),
        (Some(ping), Some("succeeded"))
    );
    assert_eq!(v["result"]["pong"], true);
    assert_eq!(v["action"], "ping");
    // A job no worker claimed yet has no results row: queued, exit 4, nothing on stdout.
    let idle = Env::new();
    cli_ok(&idle, &["init"]);
    let id = job(&idle, "local", "ping", &json!({})).to_string();
    let (st, out, err) = idle.cli(&["result", &id]);
    assert_eq!(st.code(), Some(4), "{out}{err}");
    assert!(
        out.is_empty() && err.contains(&format!("job {id} is queued")),
        "{out}{err}"
    );
    assert_eq!(listed(&idle, &["--status", "queued"]), [1]);
}

#[test]
fn enqueue_wait_prints_the_result_json_alone_and_exits_by_status() {
    let env = Env::new();
    let _d = env.start(&[]);
    let (st, out, err) = env.cli(&["enqueue", "ping", "--wait"]);
    assert_eq!(st.code(), Some(0), "{out}{err}");
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON alone ({e}): {out}"));
    assert_eq!(v["pong"], true, "{v}");
    assert!(err.contains("job 1 queued"), "the id goes to stderr: {err}");
    let (st, out, _) = env.cli(&["enqueue", "ping", "--wait", "--json"]);
    assert_eq!(st.code(), Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["job_id"], 2);
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["result"]["pong"], true);
    // Not succeeded: exit 1, still one JSON document on stdout.
    let (st, out, err) = env.cli(&[
        "enqueue",
        "execute_bash",
        "--params",
        r#"{"command": "rm -rf /"}"#,
        "--wait",
    ]);
    assert_eq!(st.code(), Some(1), "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "blocked");
    assert!(err.contains("recursive deletion"), "{err}");
    // Waiting for a human: exit 5 at once, the stored pending result on stdout.
    let (st, out, err) = env.cli(&[
        "enqueue",
        "execute_bash",
        "--params",
        r#"{"command": "echo hi > a.txt"}"#,
        "--wait",
    ]);
    assert_eq!(st.code(), Some(5), "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "pending_validation");
    assert!(v["validation_id"].is_string(), "{v}");
    // --timeout passed: exit 4, nothing on stdout; with --json the job as it stands.
    let t0 = Instant::now();
    let (st, out, err) = env.cli(&[
        "enqueue",
        "sleep",
        "--params",
        r#"{"ms": 8000}"#,
        "--wait",
        "--timeout",
        "1",
    ]);
    assert_eq!(st.code(), Some(4), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("--timeout") && err.contains("brainloop result 5"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(7), "waited for the job");
    let (st, out, err) = env.cli(&[
        "enqueue",
        "sleep",
        "--params",
        r#"{"ms": 8000}"#,
        "--wait",
        "--timeout",
        "1",
        "--json",
    ]);
    assert_eq!(st.code(), Some(4), "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["job_id"], 6);
    assert!(
        ["queued", "running"].contains(&v["status"].as_str().unwrap()),
        "{v}"
    );
    // Without --wait, --json gives the id as an object; plain, the bare id.
    let (_, out, _) = env.cli(&["enqueue", "ping", "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"job_id": 7})
    );
    assert_eq!(cli_ok(&env, &["enqueue", "ping"]), "8\n");
    let (_, help, _) = env.cli(&["enqueue", "--help"]);
    assert!(help.contains("4 --timeout passed"), "{help}");
}

#[test]
fn show_of_a_command_that_ran_at_once_says_how_it_ran() {
    common::require_sandbox();
    let env = Env::new();
    let _d = env.start(&[]);
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo at-once"}),
    );
    assert_eq!(settled(&env, id).0, "succeeded");
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(
        shown.contains("ran at once, asking no one: policy auto_approve")
            && shown.contains("exit 0"),
        "{shown}"
    );
    assert!(shown.contains("--- stdout\nat-once"), "{shown}");
    assert!(!shown.contains("no change set waits"), "{shown}");
    // Another action's answer: its result, nothing about change sets.
    let ping = job(&env, "local", "ping", &json!({}));
    settled(&env, ping);
    let shown = cli_ok(&env, &["show", &ping.to_string()]);
    assert!(
        shown.contains("\"pong\": true") && !shown.contains("change set"),
        "{shown}"
    );
}

#[test]
fn a_schedule_firing_is_read_by_its_negative_id() {
    let env = Env::new();
    let _d = env.start(&[]);
    env.input()
        .execute(
            "INSERT INTO schedules(name, cron, action, params, client_id) VALUES ('tick', '* * * * * *', 'ping', '{}', 'cron-client')",
            [],
        )
        .unwrap();
    let t0 = Instant::now();
    let firing: i64 = loop {
        let id: Option<i64> = env
            .output()
            .query_row(
                "SELECT max(job_id) FROM results WHERE job_id < 0 AND status = 'succeeded'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if let Some(id) = id {
            break id;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no firing");
        std::thread::sleep(Duration::from_millis(50));
    };
    let id = firing.to_string();
    // No `--` needed.
    let shown = cli_ok(&env, &["show", &id]);
    assert!(
        shown.starts_with(&format!("job {firing}  ping [succeeded]")),
        "{shown}"
    );
    assert!(shown.contains("client cron-client"), "{shown}");
    let (st, out, _) = env.cli(&["result", &id]);
    assert_eq!(st.code(), Some(0));
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["pong"], true);
    assert!(listed(&env, &["--client", "cron-client"]).contains(&firing));
    // get_result: the schedule's client reads its firing; another client is told "no job".
    let own = job(
        &env,
        "cron-client",
        "get_result",
        &json!({"job_id": firing}),
    );
    let (st, v, err) = settled(&env, own);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["result"]["pong"], true, "{v}");
    let theirs = job(&env, "local", "get_result", &json!({"job_id": firing}));
    let (st, _, err) = settled(&env, theirs);
    assert_eq!(st, "failed");
    assert!(err.contains(&format!("no job {firing}")), "{err}");
    // 0 is no job: refused by the params schema before any lookup.
    let zero = job(&env, "cron-client", "get_result", &json!({"job_id": 0}));
    let (st, _, err) = settled(&env, zero);
    assert_eq!(st, "failed");
    assert!(
        err.contains("/job_id") && err.contains("not allowed"),
        "{err}"
    );
}
