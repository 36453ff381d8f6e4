//! `brainloop mcp` end to end: the real daemon (harness) plus `brainloop mcp` child processes
//! driven by a real MCP client (rmcp's client side over the child's stdio). Covers initialize,
//! tools/list, direct and queued calls, errors, a pending validation approved from the CLI and
//! polled, client isolation, force_execute, audit rows, worker-down fast failure, cancellation,
//! long lines — and the adversarial cases (impersonation, approving over MCP, smuggling
//! force_execute, reading another client's job).

mod common;

use common::{Env, BIN};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Clients of the test configuration: `agent` may run any program (so writes ask a human),
/// `ops` also holds FORCE_EXECUTE; any other name gets the minimal default.
const CONFIG: &str =
    "[clients.agent]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\n\n\
[clients.ops]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\nforce_execute = true\n";

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(&p, CONFIG).unwrap();
    p.display().to_string()
}

/// Starts the worker with the test configuration.
fn start(env: &Env) -> common::Daemon {
    let cfg = config(env);
    env.start(&[("BRAINLOOP_CONFIG", &cfg)])
}

/// The MCP client: declares a name of its choosing and records progress notifications.
#[derive(Clone)]
struct Recorder {
    info: ClientConfig,
    progress: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn new(declared: &str) -> Recorder {
        Recorder {
            info: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new(declared, "1.0"),
            ),
            progress: Arc::default(),
        }
    }
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

struct Mcp {
    service: RunningService<RoleClient, Recorder>,
    progress: Arc<Mutex<Vec<String>>>,
    log: PathBuf,
}

impl Mcp {
    /// Spawns `brainloop mcp --client CLIENT` and initializes it, declaring `declared` as the
    /// MCP client's own name.
    async fn connect(env: &Env, client: &str, declared: &str, extra: &[(&str, &str)]) -> Mcp {
        let log = env
            .root
            .path()
            .join(format!("mcp-{client}-{}.log", common::now_ms()));
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["mcp", "--client", client, "--data-dir"])
            .arg(&env.data)
            .env("BRAINLOOP_CONFIG", config(env))
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .env("BRAINLOOP_LOG", "info");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Mcp::over(transport, declared, log).await
    }

    async fn over(transport: TokioChildProcess, declared: &str, log: PathBuf) -> Mcp {
        let recorder = Recorder::new(declared);
        let progress = Arc::clone(&recorder.progress);
        let service = recorder.serve(transport).await.expect("MCP initialize");
        Mcp {
            service,
            progress,
            log,
        }
    }

    async fn raw(&self, args: Value) -> CallToolResult {
        let Value::Object(m) = args else {
            panic!("arguments must be an object")
        };
        // Bounded: a server that died mid-call must fail the test, not hang it.
        let call = self
            .service
            .call_tool(CallToolRequestParams::new("brainloop").with_arguments(m));
        match tokio::time::timeout(LONG, call).await {
            Ok(r) => r.expect("tools/call"),
            Err(_) => panic!(
                "no answer within {LONG:?}; server log:\n{}",
                self.log_text()
            ),
        }
    }

    /// Calls the tool; returns (is_error, structured content). Checks the text content is the
    /// same JSON.
    async fn call(&self, action: &str, params: Value) -> (bool, Value) {
        let r = self.raw(json!({"action": action, "params": params})).await;
        split(r)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

fn split(r: CallToolResult) -> (bool, Value) {
    let body = r.structured_content.clone().expect("structured content");
    let text = &r.content[0].as_text().expect("text content").text;
    let parsed: Value = serde_json::from_str(text).expect("text content is JSON");
    assert_eq!(parsed, body, "text and structured content differ");
    (r.is_error == Some(true), body)
}

/// Audit rows of `client`: (job_id, action, status).
fn audit(env: &Env, client: &str) -> Vec<(Option<i64>, Option<String>, String)> {
    let c = env.metadata();
    let mut s = c
        .prepare("SELECT job_id, action, status FROM audit WHERE client_id = ?1 ORDER BY id")
        .unwrap();
    s.query_map([client], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

fn jobs(env: &Env) -> Vec<(i64, String, String)> {
    let c = env.input();
    let mut s = c
        .prepare("SELECT id, action, client_id FROM jobs ORDER BY id")
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// Waits until `client` has `n` audit rows (the worker writes its rows just after the result).
fn wait_audit(env: &Env, client: &str, n: usize) -> Vec<(Option<i64>, Option<String>, String)> {
    let t0 = Instant::now();
    loop {
        let rows = audit(env, client);
        if rows.len() >= n {
            return rows;
        }
        assert!(
            t0.elapsed() < LONG,
            "{} audit rows for {client}, expected {n}: {rows:?}",
            rows.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tool_direct_answers_queued_jobs_errors_and_an_audit_row_per_call() {
    let env = Env::new();
    let _d = start(&env);
    // The MCP client declares itself "local" (the broad producer identity): ignored.
    let mcp = Mcp::connect(&env, "agent", "local", &[]).await;

    let server = mcp.service.peer_info().expect("server info");
    assert_eq!(server.server_info.as_ref().unwrap().name, "brainloop");
    assert!(!server.protocol_version.to_string().is_empty());

    // tools/list: `brainloop`, whose inline enum lists every action, then `brainloop_read`
    // (tests/mcp_tasks.rs checks the read tool and `--one-tool`).
    let tools = mcp.service.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!(tools[1].name, "brainloop_read");
    assert_eq!(tools[0].name, "brainloop");
    let schema = Value::Object((*tools[0].input_schema).clone());
    assert_eq!(schema["required"], json!(["action", "params"]));
    assert_eq!(schema["properties"]["params"]["type"], "object");
    assert!(!schema.to_string().contains("$ref"), "{schema}");
    let listed: Vec<String> = schema["properties"]["action"]["enum"]
        .as_array()
        .expect("inline enum")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();

    let mut calls = 0; // tools/call of the brainloop tool made by `agent`

    // list_actions, answered by the front-end: the same names as the enum, hidden ones absent.
    let (err, v) = mcp.call("list_actions", json!({})).await;
    calls += 1;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded");
    let names: Vec<String> = v["result"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, listed);
    for needed in ["execute_bash", "check_command", "get_result", "read_code"] {
        assert!(
            listed.contains(&needed.to_string()),
            "{needed} not in {listed:?}"
        );
    }
    assert!(
        !listed.contains(&"sleep".to_string()),
        "hidden test action listed"
    );

    let (err, v) = mcp
        .call("get_schema", json!({"action_name": "execute_bash"}))
        .await;
    calls += 1;
    assert!(!err, "{v}");
    assert_eq!(v["result"]["params_schema"]["required"], json!(["command"]));

    // Queued jobs: check_command (classification only) and a pure execute_bash.
    let (err, v) = mcp
        .call("check_command", json!({"command": "rm -rf /"}))
        .await;
    calls += 1;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["result"]["blocked"], true, "{v}");
    assert!(v["job_id"].as_i64().unwrap() > 0);

    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo hi | tr a-z A-Z"}))
        .await;
    calls += 1;
    assert!(!err, "{v}");
    assert_eq!(v["result"]["stdout"], "HI\n");
    assert_eq!(v["result"]["policy_used"], "auto_approve");

    // A blocked command: the job ends `blocked`, which is an error for the caller.
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "rm -rf ~"}))
        .await;
    calls += 1;
    assert!(err, "{v}");
    assert_eq!(v["status"], "blocked");

    // Errors: unknown action, invalid params, missing params, an unexpected argument.
    let (err, v) = mcp.call("no_such_action", json!({})).await;
    calls += 1;
    assert!(err);
    assert!(
        v["error"].as_str().unwrap().contains("unknown action"),
        "{v}"
    );
    let (err, v) = mcp.call("execute_bash", json!({"cmd": "echo"})).await;
    calls += 1;
    assert!(err);
    assert!(
        v["error"].as_str().unwrap().contains("invalid params"),
        "{v}"
    );
    let (err, v) = split(mcp.raw(json!({"action": "list_actions"})).await);
    calls += 1;
    assert!(
        err && v["error"].as_str().unwrap().contains("params"),
        "{v}"
    );
    let (err, v) = mcp.call("get_schema", json!({"action_name": "nope"})).await;
    calls += 1;
    assert!(
        err && v["error"].as_str().unwrap().contains("unknown action"),
        "{v}"
    );

    // A tool that does not exist is a protocol error, not a call.
    let bad = mcp
        .service
        .call_tool(CallToolRequestParams::new("shell").with_arguments(Default::default()))
        .await;
    assert!(bad.is_err(), "{bad:?}");

    // Impersonation: neither the declared MCP client name nor a client_id argument or param
    // changes the identity.
    let (err, v) = split(
        mcp.raw(json!({"action": "execute_bash", "params": {"command": "echo x"}, "client_id": "local"}))
            .await,
    );
    calls += 1;
    assert!(
        err && v["error"].as_str().unwrap().contains("client identity"),
        "{v}"
    );
    let (err, v) = mcp
        .call(
            "execute_bash",
            json!({"command": "echo x", "client_id": "local"}),
        )
        .await;
    calls += 1;
    assert!(
        err && v["error"].as_str().unwrap().contains("invalid params"),
        "{v}"
    );
    let all = jobs(&env);
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all.iter().all(|(_, _, c)| c == "agent"), "{all:?}");

    // The front-end really never executes: it queued exactly the three jobs above, and each
    // got its result from the worker.
    let actions: Vec<&str> = all.iter().map(|(_, a, _)| a.as_str()).collect();
    assert_eq!(actions, ["check_command", "execute_bash", "execute_bash"]);

    // One audit row per call: front-end rows (no job id) + worker rows (one per job).
    let rows = wait_audit(&env, "agent", calls);
    assert_eq!(rows.len(), calls, "{rows:#?}");
    let frontend: Vec<_> = rows.iter().filter(|r| r.0.is_none()).collect();
    assert_eq!(frontend.len(), calls - 3, "{rows:#?}");
    assert!(frontend.contains(&&(None, Some("list_actions".into()), "succeeded".into())));
    assert!(frontend.contains(&&(None, Some("get_schema".into()), "succeeded".into())));
    assert!(frontend.contains(&&(None, Some("no_such_action".into()), "failed".into())));
    for (id, action, _) in &all {
        assert!(
            rows.iter()
                .any(|r| r.0 == Some(*id) && r.1.as_deref() == Some(action.as_str())),
            "job {id} not audited: {rows:#?}"
        );
    }
    assert!(audit(&env, "local").is_empty(), "nothing ran as local");
    // stdout carried only the protocol: the client parsed every line. Logs went to stderr.
    assert!(
        mcp.log_text().contains("MCP client initialized"),
        "{}",
        mcp.log_text()
    );
    mcp.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_validation_is_approved_from_the_cli_polled_and_private_to_its_client() {
    let env = Env::new();
    let _d = start(&env);
    let agent = Mcp::connect(&env, "agent", "agent-app", &[]).await;

    let t0 = Instant::now();
    let (err, v) = agent
        .call("execute_bash", json!({"command": "touch approved.txt"}))
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "pending_validation");
    let job_id = v["job_id"].as_i64().unwrap();
    let vid = v["validation_id"].as_str().unwrap().to_string();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(&format!("brainloop approve {vid}")),
        "{v}"
    );
    assert_eq!(
        v["poll"],
        json!({"action": "get_result", "params": {"job_id": job_id}})
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "returned at once");
    assert!(!env.workspace.join("approved.txt").exists());

    // No approve path over MCP: there is no such action, under any of its names.
    for name in ["approve", "deny", "grant", "override"] {
        let (err, v) = agent
            .call(name, json!({"validation_id": vid, "id": vid}))
            .await;
        assert!(
            err && v["error"].as_str().unwrap().contains("unknown action"),
            "{v}"
        );
    }
    // Nor through a shell command: running the operator CLI (or writing its database) is a
    // side effect that itself waits for a human — it cannot approve anything.
    for cmd in [
        format!("brainloop approve {vid}"),
        format!("sqlite3 {}/command_security.db \"INSERT INTO approvals(validation_id, decision, decided_by, created_at) VALUES ('{vid}', 'approve', 'agent', 0)\"", env.data.display()),
    ] {
        let (_, v) = agent.call("execute_bash", json!({"command": cmd})).await;
        assert_ne!(v["status"], "succeeded", "{v}");
    }
    let (err, v) = agent.call("get_result", json!({"job_id": job_id})).await;
    assert!(!err, "{v}");
    assert_eq!(v["result"]["status"], "pending_validation");
    assert!(!env.workspace.join("approved.txt").exists());
    let approvals: i64 = env
        .db("command_security.db")
        .query_row("SELECT count(*) FROM approvals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(approvals, 0);

    // Another MCP client cannot read the job (same answer as for a job that does not exist).
    let other = Mcp::connect(&env, "other", "agent", &[]).await;
    let (err, v) = other.call("get_result", json!({"job_id": job_id})).await;
    assert!(err, "{v}");
    assert_eq!(v["status"], "failed");
    assert!(v["error"].as_str().unwrap().contains("no job"), "{v}");
    assert!(!v.to_string().contains("approved.txt"), "{v}");

    // The operator approves from the CLI; the agent polls until the job succeeded.
    let (st, out, errout) = env.cli(&["approve", &vid]);
    assert!(st.success(), "{out}{errout}");
    let t0 = Instant::now();
    let final_v = loop {
        let (err, v) = agent.call("get_result", json!({"job_id": job_id})).await;
        assert!(!err, "{v}");
        if v["result"]["final"] == true {
            break v;
        }
        assert!(t0.elapsed() < LONG, "job never finished: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(final_v["result"]["status"], "succeeded", "{final_v}");
    assert_eq!(final_v["result"]["result"]["policy_used"], "approved");
    assert!(env.workspace.join("approved.txt").exists());

    // Still private once final.
    let (err, v) = other.call("get_result", json!({"job_id": job_id})).await;
    assert!(err && !v.to_string().contains("approved"), "{v}");
    agent.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_execute_is_refused_unless_granted_whatever_the_spelling() {
    let env = Env::new();
    let _d = start(&env);
    let agent = Mcp::connect(&env, "agent", "ops", &[]).await;
    for force in [json!(true), json!("true"), json!(1), json!({"x": true})] {
        let (err, v) = agent
            .call(
                "execute_bash",
                json!({"command": "touch forced.txt", "force_execute": force}),
            )
            .await;
        assert!(err, "{v}");
        assert_eq!(v["status"], "denied", "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("FORCE_EXECUTE"),
            "{v}"
        );
        assert_eq!(v["queued"], false);
    }
    // Duplicate keys cannot smuggle it past the check: the last one wins for the check and
    // for what is queued (the params are re-serialised from the checked value).
    let raw = r#"{"action":"execute_bash","params":{"command":"touch forced.txt","force_execute":false,"force_execute":true}}"#;
    let args: Value = serde_json::from_str(raw).unwrap();
    let (err, v) = split(agent.raw(args).await);
    assert!(err && v["status"] == "denied", "{v}");
    assert!(jobs(&env).is_empty(), "nothing was queued");

    // Asking for the grant files a request and grants nothing.
    let (err, v) = agent
        .call(
            "request_permission",
            json!({"permission": "FORCE_EXECUTE", "pattern": "*"}),
        )
        .await;
    assert!(!err, "{v}");
    let (err, _) = agent
        .call(
            "execute_bash",
            json!({"command": "touch forced.txt", "force_execute": true}),
        )
        .await;
    assert!(err);
    assert!(!env.workspace.join("forced.txt").exists());
    let denied = audit(&env, "agent")
        .into_iter()
        .filter(|r| r.0.is_none() && r.2 == "denied")
        .count();
    assert_eq!(denied, 6);

    // `false` is not a request for force.
    let (err, v) = agent
        .call(
            "execute_bash",
            json!({"command": "echo ok", "force_execute": false}),
        )
        .await;
    assert!(!err, "{v}");

    // A client the operator granted FORCE_EXECUTE skips the question.
    let ops = Mcp::connect(&env, "ops", "ops", &[]).await;
    let (err, v) = ops
        .call(
            "execute_bash",
            json!({"command": "touch forced.txt", "force_execute": true}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded");
    assert!(env.workspace.join("forced.txt").exists());
    // And the operator can grant it at run time: the next call sees it.
    let (st, o, e) = env.cli(&["grant", "agent", "FORCE_EXECUTE", "*"]);
    assert!(st.success(), "{o}{e}");
    let (err, v) = agent
        .call(
            "execute_bash",
            json!({"command": "touch forced2.txt", "force_execute": true}),
        )
        .await;
    assert!(!err && v["status"] == "succeeded", "{v}");
    agent.close().await;
    ops.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_fast_when_the_worker_is_down_and_directs_still_answer() {
    let env = Env::new();
    let d = start(&env);
    let mcp = Mcp::connect(&env, "agent", "x", &[]).await;
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo up"}))
        .await;
    assert!(!err, "{v}");

    // Stopped (SIGTERM): heartbeat `stopped`.
    d.sigterm();
    d.wait_exit(LONG);
    let before = jobs(&env).len();
    let t0 = Instant::now();
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo down"}))
        .await;
    assert!(err, "{v}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "not fast: {:?}",
        t0.elapsed()
    );
    assert_eq!(v["status"], "unavailable");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("not running") && msg.contains("ago"), "{msg}");
    assert_eq!(jobs(&env).len(), before, "nothing queued");
    // What the front-end answers itself needs no worker.
    let (err, _) = mcp.call("list_actions", json!({})).await;
    assert!(!err);
    assert!(audit(&env, "agent")
        .iter()
        .any(|r| r.0.is_none() && r.2 == "unavailable"));
    mcp.close().await;

    // Dead (kill -9): the heartbeat just gets old. A short dead_after for the test.
    let d = start(&env);
    let mcp = Mcp::connect(
        &env,
        "agent",
        "x",
        &[
            ("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200"),
            ("BRAINLOOP_DEAD_AFTER_MS", "1000"),
        ],
    )
    .await;
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo up"}))
        .await;
    assert!(!err, "{v}");
    d.kill9();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo dead"}))
        .await;
    assert!(err, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("no heartbeat for"), "{msg}");
    mcp.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_timed_out_call_stops_waiting_and_the_job_stays_queued() {
    let env = Env::new();
    let _d = start(&env);
    let mcp = Mcp::connect(&env, "agent", "x", &[]).await;

    // The client gives up (dropping the request sends notifications/cancelled).
    let slow = mcp.call("sleep", json!({"ms": 1500}));
    assert!(tokio::time::timeout(Duration::from_millis(300), slow)
        .await
        .is_err());
    // The server stays responsive, and the job runs to the end anyway.
    let (err, _) = mcp.call("list_actions", json!({})).await;
    assert!(!err);
    let id = jobs(&env).last().unwrap().0;
    env.wait_status(id, "succeeded", LONG);
    let t0 = Instant::now();
    while !mcp.log_text().contains("cancelled by the client") {
        assert!(
            t0.elapsed() < LONG,
            "no cancellation log:\n{}",
            mcp.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mcp.close().await;

    // --timeout-s: the call returns an error naming the job, which then finishes; poll it.
    let log = env.root.path().join("mcp-timeout.log");
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["mcp", "--client", "agent", "--timeout-s", "2", "--data-dir"])
        .arg(&env.data)
        .env("BRAINLOOP_TEST_ACTIONS", "1");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let short = Mcp::over(transport, "x", log).await;
    let (err, v) = short.call("sleep", json!({"ms": 3500})).await;
    assert!(err, "{v}");
    let job_id = v["job_id"].as_i64().unwrap();
    // Progress told the client each status change of the job it waited for, with its id:
    // queued, then running (the call stopped waiting before it was done).
    let t0 = Instant::now();
    loop {
        let told = short.progress.lock().unwrap().clone();
        let at = |s: &str| {
            told.iter()
                .position(|m| m.starts_with(&format!("job {job_id} {s};")))
        };
        if let (Some(q), Some(r)) = (at("queued"), at("running")) {
            assert!(q < r, "{told:?}");
            assert!(
                told.iter()
                    .all(|m| m.contains(&format!("\"job_id\": {job_id}"))),
                "{told:?}"
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{told:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        v["error"].as_str().unwrap().contains("stays in the queue"),
        "{v}"
    );
    let t0 = Instant::now();
    loop {
        let (err, v) = short.call("get_result", json!({"job_id": job_id})).await;
        assert!(!err, "{v}");
        if v["result"]["status"] == "succeeded" {
            break;
        }
        assert!(t0.elapsed() < LONG, "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    short.close().await;

    // `[mcp] cancel_on_abandon = true`: abandoning the call also withdraws its job, which the
    // worker cancels as the client's own (the front-end reads its own configuration).
    let abandon = env.root.path().join("abandon.toml");
    std::fs::write(
        &abandon,
        format!("{CONFIG}\n[mcp]\ncancel_on_abandon = true\n"),
    )
    .unwrap();
    let abandon = abandon.display().to_string();
    let mcp = Mcp::connect(&env, "agent", "x", &[("BRAINLOOP_CONFIG", &abandon)]).await;
    let before = jobs(&env).last().unwrap().0;
    let slow = mcp.call("sleep", json!({"ms": 30000}));
    assert!(tokio::time::timeout(Duration::from_millis(500), slow)
        .await
        .is_err());
    let id = jobs(&env).last().unwrap().0;
    assert!(id > before, "the sleep was queued");
    env.wait_status(id, "cancelled", LONG);
    let by: String = env
        .db("command_security.db")
        .query_row(
            "SELECT requested_by FROM cancellations WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(by, "client:agent");
    assert!(
        mcp.log_text().contains("its job is withdrawn"),
        "{}",
        mcp.log_text()
    );
    mcp.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_params_cross_the_transport_and_oversized_ones_are_refused_clearly() {
    let env = Env::new();
    let _d = start(&env);
    let mcp = Mcp::connect(&env, "agent", "x", &[]).await;

    // ~1 MiB in one string parameter (a 1 MiB JSON line, just under params_max_bytes): read
    // whole, checked against the schema, answered; the server stays alive.
    let big = "a".repeat((1 << 20) - 64);
    let (err, v) = mcp.call("check_command", json!({"command": big})).await;
    assert!(err, "over the command's 4096-char limit");
    assert!(
        v["error"].as_str().unwrap().contains("invalid params"),
        "{}",
        &v.to_string()[..300]
    );
    assert!(
        v.to_string().len() < 20_000,
        "the error is bounded, not the whole param echoed"
    );
    // Over params_max_bytes (1 MiB): refused before the schema, nothing queued.
    let (err, v) = mcp
        .call("check_command", json!({"command": "a".repeat(2 << 20)}))
        .await;
    assert!(err);
    assert!(
        v["error"].as_str().unwrap().contains("params_max_bytes"),
        "{v}"
    );
    assert!(jobs(&env).is_empty());
    // Still serving.
    let (err, v) = mcp
        .call("execute_bash", json!({"command": "echo alive"}))
        .await;
    assert!(!err, "{v}");
    mcp.close().await;
}

/// Raw JSON lines on stdin, as a minimal client would write them: notifications (known and
/// unknown) get no answer, a 1 MiB line is fine, and every stdout line is a JSON-RPC message.
#[test]
fn raw_json_lines_notifications_are_never_answered_and_stdout_is_only_protocol() {
    use std::io::Write;
    let env = Env::new();
    let _d = start(&env);
    let mut child = std::process::Command::new(BIN)
        .args(["mcp", "--client", "agent", "--data-dir"])
        .arg(&env.data)
        .env("BRAINLOOP_CONFIG", config(&env))
        .env("BRAINLOOP_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let big = "b".repeat(1 << 20);
    let lines = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","method":"notifications/no_such_thing","params":{"x":1}}),
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"brainloop","arguments":{"action":"get_schema","params":{"action_name":big}}}}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"brainloop","arguments":{"action":"execute_bash","params":{"command":"echo raw"}}}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for l in &lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut out = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let v: Value = serde_json::from_str(&line).expect("stdout line is JSON");
            out.push(v);
            if (1..=3).all(|id| out.iter().any(|v| v["id"] == id)) {
                break;
            }
        }
        out
    });
    let out = reader.join().unwrap();
    drop(stdin); // EOF ends the server
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}");
    let ids: Vec<&Value> = out.iter().map(|v| &v["id"]).collect();
    assert_eq!(
        ids.len(),
        3,
        "one answer per request, none for notifications: {ids:?}"
    );
    assert!(out
        .iter()
        .all(|v| v["jsonrpc"] == "2.0" && v.get("id").is_some()));
    let by_id = |id: i64| out.iter().find(|v| v["id"] == id).unwrap();
    assert_eq!(by_id(2)["result"]["isError"], true);
    assert_eq!(by_id(3)["result"]["isError"], false);
    assert_eq!(
        by_id(3)["result"]["structuredContent"]["result"]["stdout"],
        "raw\n"
    );
}
