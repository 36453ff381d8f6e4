//! What a new operator trips on (issue 36, items 1, 7 and 8), with the real binary: `enqueue
//! --wait` never blocks on what cannot come (a human's decision, a worker that is not there),
//! errors name the limit or the fix, and the papercuts (`--params @FILE`/`-`, per-command
//! `--help`, arrays as arrays, live counters in `status`).

mod common;

use common::Env;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `brainloop <args>` with the data dir set (and optional stdin); the whole output.
fn cli(env: &Env, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(common::BIN);
    c.args(args)
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_TEST_ACTIONS", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run brainloop");
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON object `enqueue --wait` prints after the job id.
/// What `enqueue --wait` printed on stdout: one JSON document (the result, or with `--json`
/// the envelope), the job id on stderr.
fn waited_json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn jobs_in_input(env: &Env) -> i64 {
    env.input()
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn enqueue_wait_returns_at_once_with_the_validation_when_the_job_waits_for_a_human() {
    let env = Env::new();
    let _d = env.start(&[]);
    let t0 = Instant::now();
    // --timeout 60: the old code blocked until it and then exited 1.
    let o = cli(
        &env,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            r#"{"command":"echo hi > a.txt"}"#,
            "--wait",
            "--json",
            "--timeout",
            "60",
        ],
        None,
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(5), "{out}{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "returned only after {:?}",
        t0.elapsed()
    );
    let v = waited_json(&out);
    let job = v["job_id"].as_i64().unwrap();
    assert!(err.contains(&format!("job {job} queued")), "{err}");
    assert_eq!(v["status"], "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    // The validation row the worker wrote: pending, for this job.
    let (row_job, row_status): (i64, String) = env
        .output()
        .query_row(
            "SELECT job_id, status FROM validations WHERE id = ?1",
            [&vid],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((row_job, row_status.as_str()), (job, "pending"));
    assert!(
        v["reasons"].as_array().is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    // Typed as printed (the data dir is not the default one: it is named).
    let dd = format!(" --data-dir {}", env.data.display());
    assert_eq!(v["approve"], format!("brainloop approve {vid}{dd}"));
    assert_eq!(v["show"], format!("brainloop show {vid}{dd}"));
    let show_line: Vec<&str> = v["show"].as_str().unwrap().split(' ').skip(1).collect();
    let o = Command::new(common::BIN).args(&show_line).output().unwrap();
    assert!(
        o.status.success() && text(&o.stdout).contains("+hi"),
        "the printed show line does not work: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    // The person reads the same on stderr: id, why, the lines to type.
    for want in [
        format!("job {job} waits for a human: validation {vid}"),
        format!("brainloop approve {vid}"),
        format!("brainloop show {vid}"),
        format!("brainloop deny {vid}"),
        "echo hi > a.txt".to_string(),
    ] {
        assert!(err.contains(&want), "{want:?} not in:\n{err}");
    }
    assert!(!env.workspace.join("a.txt").exists());

    // --wait-for-human keeps waiting, and ends with the decided result.
    let mut waiter = Command::new(common::BIN)
        .args([
            "enqueue",
            "execute_bash",
            "--params",
            r#"{"command":"echo bye > b.txt"}"#,
            "--wait-for-human",
            "--json",
            "--timeout",
            "60",
        ])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let vid2: String = loop {
        let r: Option<String> = env
            .output()
            .query_row(
                "SELECT id FROM validations WHERE command = 'echo bye > b.txt' AND status = 'pending'",
                [],
                |r| r.get(0),
            )
            .ok();
        if let Some(r) = r {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no validation");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "--wait-for-human returned before the decision"
    );
    let o = cli(&env, &["approve", &vid2], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = waiter.wait_with_output().unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert_eq!(waited_json(&out)["status"], "succeeded", "{out}");
    assert!(err.contains(&format!("brainloop approve {vid2}")), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("b.txt")).unwrap(),
        "bye\n"
    );
}

#[test]
fn enqueue_wait_without_a_worker_fails_at_once_naming_the_data_dir() {
    let env = Env::new();
    let o = cli(&env, &["init"], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t0 = Instant::now();
    let o = cli(
        &env,
        &["enqueue", "ping", "--wait", "--timeout", "60"],
        None,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{}{err}", text(&o.stdout));
    assert!(t0.elapsed() < Duration::from_secs(50));
    assert!(
        err.contains(&env.data.display().to_string()),
        "data dir not named: {err}"
    );
    assert!(err.contains("brainloop run --data-dir"), "{err}");
    assert!(err.contains("nothing was queued"), "{err}");
    assert_eq!(jobs_in_input(&env), 0, "a job was queued for nobody");
    // Without --wait the job is queued for later, as before.
    let o = cli(&env, &["enqueue", "ping"], None);
    assert!(o.status.success());
    assert_eq!(jobs_in_input(&env), 1);
}

#[test]
fn enqueue_wait_stops_when_the_worker_dies_and_the_job_stays_queued() {
    let env = Env::new();
    let d = env.start(&[]);
    let waiter = Command::new(common::BIN)
        .args([
            "enqueue",
            "sleep",
            "--params",
            r#"{"ms": 120000}"#,
            "--wait",
            "--timeout",
            "100",
        ])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_TEST_ACTIONS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while jobs_in_input(&env) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    }
    env.wait_status(1, "running", Duration::from_secs(30));
    d.kill9();
    let t0 = Instant::now();
    let o = waiter.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{}{err}", text(&o.stdout));
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert!(err.contains("stays queued"), "{err}");
    assert!(err.contains(&env.data.display().to_string()), "{err}");
    // Nothing final was written for it: a restarted worker runs it again.
    assert_eq!(env.final_count(), 0);
}

#[test]
fn a_command_over_the_limit_is_refused_naming_the_limit() {
    let env = Env::new();
    assert!(cli(&env, &["init"], None).status.success());
    let long = format!("echo {}", "a".repeat(5000));
    let params = serde_json::json!({ "command": long }).to_string();
    let o = cli(
        &env,
        &["enqueue", "execute_bash", "--params", &params],
        None,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("longer than 4096 characters"),
        "limit not named: {err}"
    );
    assert!(err.contains("5005 characters"), "size not named: {err}");
    assert!(
        err.len() < 700,
        "the value is quoted whole: {} bytes",
        err.len()
    );
    assert_eq!(jobs_in_input(&env), 0);
    // A producer that inserts the row itself gets the same sentence in the job's result.
    let id = env.insert("execute_bash", &params);
    let _d = env.start(&[]);
    let (status, _, error, _) = env.wait_status(id, "failed", Duration::from_secs(30));
    assert_eq!(status, "failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("longer than 4096 characters"), "{error}");
}

#[test]
fn review_without_a_terminal_points_at_json() {
    let env = Env::new();
    assert!(cli(&env, &["init"], None).status.success());
    let o = cli(&env, &["review"], None);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("brainloop review --json"), "{err}");
    assert!(!err.contains("os error"), "{err}");
    let o = cli(&env, &["review", "--json"], None);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "[]");
}

#[test]
fn an_mcp_server_that_cannot_start_tells_the_client_why() {
    use rmcp::ServiceExt;
    let env = Env::new(); // no data dir: never initialized
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(common::BIN);
        cmd.args(["mcp", "--client", "agent", "--data-dir"])
            .arg(&env.data);
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(60), ().serve(transport))
            .await
            .expect("the server neither answered nor closed")
        {
            Ok(_) => panic!("a server without a data dir initialized"),
            Err(e) => e.to_string(),
        }
    });
    assert!(err.contains("cannot start"), "{err}");
    assert!(err.contains(&env.data.display().to_string()), "{err}");
    assert!(err.contains("brainloop init"), "{err}");
    // A configuration error reaches the client too.
    let bad = env.root.path().join("bad.toml");
    std::fs::write(&bad, "[clients.agent\n").unwrap();
    let err = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(common::BIN);
        cmd.args(["mcp", "--client", "agent", "--config"]).arg(&bad);
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(60), ().serve(transport))
            .await
            .expect("the server neither answered nor closed")
        {
            Ok(_) => panic!("a server with a broken configuration initialized"),
            Err(e) => e.to_string(),
        }
    });
    assert!(err.contains("configuration error"), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
}

#[test]
fn grants_from_the_readme_directory_warns_about_nothing() {
    let root = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(common::BIN)
            .args(args)
            .current_dir(root.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap()
    };
    assert!(run(&["init"]).status.success());
    let o = run(&["grants"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("invalid path grant"), "{err}");
    assert!(err.trim().is_empty(), "grants warned: {err}");
    assert!(out.contains("FILE_READ"), "{out}");
}

#[test]
fn run_refuses_a_missing_workspace_unless_create() {
    let env = Env::new();
    let missing = env.root.path().join("no-such-ws");
    let refused = Command::new(common::BIN)
        .args(["run", "--data-dir"])
        .arg(&env.data)
        .arg("--workspace")
        .arg(&missing)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed on drop: on the old code it starts and runs.
    let mut refused = common::Daemon {
        child: refused,
        log: env.root.path().join("none.log"),
    };
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = refused.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the worker started on a missing workspace"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut refused.child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!st.success(), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(err.contains("--create"), "{err}");
    assert!(!missing.exists());
    assert!(!env.data.exists(), "a refused start left a data dir behind");
    // With --create it starts there and a command works in it.
    let log = env.root.path().join("created.log");
    let logf = std::fs::File::create(&log).unwrap();
    let child = Command::new(common::BIN)
        .args(["run", "--create", "--data-dir"])
        .arg(&env.data)
        .arg("--workspace")
        .arg(&missing)
        .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .unwrap();
    let worker = common::Daemon { child, log }; // killed on drop, even on a failed assertion
    let t0 = Instant::now();
    while !cli(&env, &["status"], None).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(missing.is_dir());
    std::fs::write(missing.join("seen.txt"), "x").unwrap();
    let o = cli(
        &env,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            r#"{"command":"ls"}"#,
            "--wait",
            "--timeout",
            "60",
        ],
        None,
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("seen.txt"),
        "the command did not run in it: {out}"
    );
    worker.sigterm();
    let (st, _) = worker.wait_exit(Duration::from_secs(60));
    assert!(st.success());
}

#[test]
fn deny_help_lists_only_what_a_denial_takes() {
    let env = Env::new();
    let o = cli(&env, &["deny", "--help"], None);
    let out = text(&o.stdout);
    assert!(o.status.success());
    for approve_only in ["--learn", "--host", "--allow-private-hosts"] {
        assert!(!out.contains(approve_only), "{approve_only} in:\n{out}");
    }
    assert!(
        out.contains("--always") && out.contains("--reason"),
        "{out}"
    );
    let o = cli(&env, &["approve", "--help"], None);
    let out = text(&o.stdout);
    assert!(out.contains("--learn") && out.contains("--host"), "{out}");
}

#[test]
fn params_come_from_a_file_or_stdin_and_json_arrays_stay_arrays() {
    let env = Env::new();
    let _d = env.start(&[]);
    let file = env.root.path().join("params.json");
    std::fs::write(&file, r#"{"command": "echo from-file > f.txt"}"#).unwrap();
    let at = format!("@{}", file.display());
    let o = cli(
        &env,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            &at,
            "--wait",
            "--timeout",
            "60",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    let o = cli(
        &env,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            "-",
            "--wait",
            "--timeout",
            "60",
        ],
        Some(r#"{"command": "echo from-stdin > s.txt"}"#),
    );
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    let commands: Vec<String> = {
        let c = env.input();
        let mut st = c.prepare("SELECT params FROM jobs ORDER BY id").unwrap();
        st.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|p| {
                let v: serde_json::Value = serde_json::from_str(&p.unwrap()).unwrap();
                v["command"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(
        commands,
        ["echo from-file > f.txt", "echo from-stdin > s.txt"]
    );
    let o = cli(
        &env,
        &["enqueue", "ping", "--params", "@/no/such/file"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/no/such/file"));
    // An endless file is cut at the limit, which the error names.
    let o = cli(&env, &["enqueue", "ping", "--params", "@/dev/zero"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("over 16 MiB"),
        "{}",
        text(&o.stderr)
    );
    // `validations --json`: reasons are an array, not the text of one.
    let o = cli(&env, &["validations", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 2, "{v}");
    for row in list {
        assert!(
            row["reasons"].as_array().is_some_and(|r| !r.is_empty()),
            "reasons not an array: {row}"
        );
    }
}

#[test]
fn status_counts_jobs_done_live_not_at_the_next_heartbeat() {
    let env = Env::new();
    // A heartbeat row once a minute: a count within seconds comes from the live status file.
    let _d = env.start(&[("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "60000")]);
    for _ in 0..3 {
        let o = cli(
            &env,
            &["enqueue", "ping", "--wait", "--timeout", "60"],
            None,
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    }
    let t0 = Instant::now();
    loop {
        let o = cli(&env, &["status", "--json"], None);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let done = v["heartbeat"]["jobs_done_total"].as_i64();
        if done == Some(3) {
            assert!(v["heartbeat"]["uptime_ms"].as_i64().unwrap_or(0) > 0, "{v}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "status still says {done:?} jobs done: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_validation_wait_prints_shows_agent_text_escaped() {
    let env = Env::new();
    let _d = env.start(&[]);
    // An agent's command that would retitle the terminal and reverse the text around it.
    let params =
        serde_json::json!({"command": "echo \u{1b}]0;pwned\u{7}\u{202e} > t.txt"}).to_string();
    let o = cli(
        &env,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            &params,
            "--wait",
            "--timeout",
            "60",
        ],
        None,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!err.contains(raw), "raw {raw:?} on the terminal: {err:?}");
        assert!(!text(&o.stdout).contains(raw), "raw {raw:?} in the JSON");
    }
    assert!(err.contains("\\x1b]0;pwned\\x07\\u{202e}"), "{err}");
    let v = waited_json(&text(&o.stdout));
    assert_eq!(
        v["command"].as_str().unwrap(),
        "echo \u{1b}]0;pwned\u{7}\u{202e} > t.txt",
        "the JSON keeps the exact text"
    );
}
