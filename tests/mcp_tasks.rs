//! MCP tasks and the read tool (issue 55), on the real binaries: `brainloop run` plus
//! `brainloop mcp` children driven by rmcp's client, which declares the Tasks extension. One
//! worker for the whole file (CI time): tools/list and the honest annotations of
//! `brainloop_read`, `--one-tool`, a read that needs no task, a command that becomes a task and
//! completes, a write that waits for the operator (`working`, the validation named) across a
//! restart of `brainloop mcp` and of the worker and completes after `brainloop approve`,
//! `tasks/cancel` of a queued and of a waiting job (the worker's own cancellation, requested by
//! `client:agent`), another client's task ids and withdrawals refused or ignored — and raw
//! lines: parse errors for lines that are not JSON, and messages (elicitation results,
//! `tasks/update`, custom methods) that never produce an approval.
//!
//! Then the official SDKs as the clients people run, each against its own worker:
//! `tests/mcp_clients/python_client.py` (the Python SDK, `mcp` from PyPI, with a Tasks client
//! built on its extension mechanism: the same scenarios as above but the restart) and
//! `tests/mcp_clients/ts_sdk_client.mjs` (the TypeScript SDK 1.x: tools/list, annotations, the
//! blocking call, an approval polled with get_result) and `ts_tasks_client.mjs` (the TypeScript
//! client 2.x with ext-tasks: a task that completes, one approved by the operator, tasks/cancel). `scripts/mcp-clients.sh` installs them
//! under `target/mcp-clients` (`.ci/run` calls it); missing, the tests fail saying CANNOT RUN HERE.

mod common;

use common::{Env, BIN};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, GetTaskResult, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// `concurrency = 1`: one running job keeps the next one of the same client queued.
const CONFIG: &str = "concurrency = 1\n\n[mcp]\npoll_interval_ms = 250\n\n\
[clients.agent]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\n\n\
[clients.other]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\n";

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(&p, CONFIG).unwrap();
    p.display().to_string()
}

fn start(env: &Env) -> common::Daemon {
    let cfg = config(env);
    env.start(&[("BRAINLOOP_CONFIG", &cfg)])
}

#[derive(Clone)]
struct TaskClient(ClientConfig);

impl rmcp::ClientHandler for TaskClient {
    fn get_info(&self) -> ClientConfig {
        self.0.clone()
    }
}

struct Mcp {
    service: RunningService<RoleClient, TaskClient>,
    log: PathBuf,
}

impl Mcp {
    /// `brainloop mcp --client CLIENT [args]`, initialized by a client declaring tasks.
    async fn connect(env: &Env, client: &str, args: &[&str]) -> Mcp {
        let log = env
            .root
            .path()
            .join(format!("mcp-{client}-{}.log", common::now_ms()));
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["mcp", "--client", client])
            .args(args)
            .arg("--data-dir")
            .arg(&env.data)
            .env("BRAINLOOP_CONFIG", config(env))
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .env("BRAINLOOP_LOG", "info");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let caps = ClientCapabilities::builder().enable_tasks().build();
        let info = ClientConfig::new(caps, Implementation::new("tasks-test", "1.0"));
        let service = TaskClient(info)
            .serve(transport)
            .await
            .expect("MCP initialize");
        Mcp { service, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One `tools/call`, answered either way (a result or a task).
    async fn call(&self, tool: &str, action: &str, params: Value) -> CallToolResponse {
        let Value::Object(args) = json!({"action": action, "params": params}) else {
            unreachable!()
        };
        let call = self
            .service
            .call_tool_once(CallToolRequestParams::new(tool.to_string()).with_arguments(args));
        match tokio::time::timeout(LONG, call).await {
            Ok(r) => r.expect("tools/call"),
            Err(_) => panic!("no answer within {LONG:?}; log:\n{}", self.log_text()),
        }
    }

    /// A call that must become a task: its id.
    async fn task(&self, action: &str, params: Value) -> String {
        match self.call("brainloop", action, params).await {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("not a task: {other:?}"),
        }
    }

    /// A call that must answer at once: (isError, structured content).
    async fn answer(&self, tool: &str, action: &str, params: Value) -> (bool, Value) {
        match self.call(tool, action, params).await {
            CallToolResponse::Complete(r) => (
                r.is_error == Some(true),
                r.structured_content.expect("structured content"),
            ),
            other => panic!("not a direct answer: {other:?}"),
        }
    }

    async fn get(&self, id: &str) -> Result<GetTaskResult, String> {
        self.service
            .get_task(GetTaskParams::new(id))
            .await
            .map_err(|e| e.to_string())
    }

    async fn cancel(&self, id: &str) -> Result<(), String> {
        self.service
            .cancel_task(CancelTaskParams::new(id))
            .await
            .map_err(|e| e.to_string())
    }

    /// Polls `tasks/get` until `done` holds.
    async fn until(
        &self,
        id: &str,
        what: &str,
        done: impl Fn(&GetTaskResult) -> bool,
    ) -> GetTaskResult {
        let t0 = Instant::now();
        loop {
            let t = self.get(id).await.expect("tasks/get");
            if done(&t) {
                return t;
            }
            assert!(
                t0.elapsed() < LONG,
                "task {id} never {what}: {t:?}\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The tool result of a completed task.
fn completed(t: &GetTaskResult) -> Value {
    match &t.task.payload {
        TaskPayload::Completed { result } => Value::Object(result.clone()),
        other => panic!("not completed: {other:?}"),
    }
}

fn job_of(task: &str) -> i64 {
    task.split('-').nth(1).unwrap().parse().unwrap()
}

fn message(t: &GetTaskResult) -> String {
    t.task.task.status_message.clone().unwrap_or_default()
}

fn one(env: &Env, sql: &str, id: i64) -> Option<String> {
    use rusqlite::OptionalExtension;
    let c = if sql.contains("cancellations") || sql.contains("validations") {
        env.db("command_security.db")
    } else {
        env.input()
    };
    c.query_row(sql, [id], |r| r.get(0)).optional().unwrap()
}

// One test on purpose: the scenario shares one worker (CI time), and its steps build on each
// other (the restart polls a task made before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_durable_tasks_a_client_withdraws_its_own_and_reads_prompt_nobody() {
    let env = Env::new();
    let d = start(&env);
    let agent = Mcp::connect(&env, "agent", &[]).await;

    // tools/list: brainloop (destructive, open world) and brainloop_read (honest reads).
    let tools = agent.service.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["brainloop", "brainloop_read"]);
    let ann = |i: usize| serde_json::to_value(tools[i].annotations.as_ref().unwrap()).unwrap();
    assert_eq!(
        (
            ann(0)["readOnlyHint"].clone(),
            ann(0)["destructiveHint"].clone()
        ),
        (json!(false), json!(true))
    );
    let r = ann(1);
    assert_eq!(
        (
            &r["readOnlyHint"],
            &r["destructiveHint"],
            &r["idempotentHint"],
            &r["openWorldHint"]
        ),
        (&json!(true), &json!(false), &json!(true), &json!(false)),
        "{r}"
    );
    let read_enum = &tools[1].input_schema["properties"]["action"]["enum"];
    assert!(
        !read_enum.to_string().contains("execute_bash"),
        "{read_enum}"
    );
    assert!(read_enum.to_string().contains("get_result"), "{read_enum}");
    let seed = Mcp::connect(&env, "agent", &["--one-tool"]).await;
    let only = seed.service.list_all_tools().await.unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "brainloop");
    seed.close().await;

    // A read that needs no task (answered by the front-end), and a refused non-read.
    let (err, v) = agent
        .answer("brainloop_read", "list_actions", json!({}))
        .await;
    assert!(!err && v["status"] == "succeeded", "{v}");
    let queued = env
        .input()
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get::<_, i64>(0))
        .unwrap();
    let (err, v) = agent
        .answer(
            "brainloop_read",
            "execute_bash",
            json!({"command": "touch nope.txt"}),
        )
        .await;
    assert!(err, "{v}");
    assert!(v["error"].as_str().unwrap().contains("only reads"), "{v}");
    let (err, v) = agent
        .answer(
            "brainloop_read",
            "read_code",
            json!({"path": ".", "digest": true}),
        )
        .await;
    assert!(err && v["error"].as_str().unwrap().contains("model"), "{v}");
    let after = env
        .input()
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get::<_, i64>(0))
        .unwrap();
    assert_eq!(queued, after, "nothing was queued");

    // A command becomes a task, created with its job row, and completes with the job's result.
    let t = agent
        .task("execute_bash", json!({"command": "echo hi"}))
        .await;
    let job = job_of(&t);
    assert!(
        t.starts_with(&format!("bl-{job}-")) && t.len() == format!("bl-{job}-").len() + 16,
        "{t}"
    );
    assert_eq!(
        one(&env, "SELECT task_id FROM jobs WHERE id = ?1", job).as_deref(),
        Some(t.as_str())
    );
    let done = agent
        .until(&t, "completed", |t| {
            t.task.status() == TaskStatus::Completed
        })
        .await;
    assert_eq!(done.task.task.poll_interval_ms, Some(250));
    assert_eq!(done.task.task.ttl_ms, Some(30 * 86_400_000));
    let res = completed(&done);
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(
        res["structuredContent"]["result"]["stdout"], "hi\n",
        "{res}"
    );

    // A write waits for the operator: working, the validation and the operator's line named.
    let w = agent
        .task("execute_bash", json!({"command": "touch approved.txt"}))
        .await;
    let waiting = agent
        .until(&w, "waiting for the operator", |t| {
            message(t).contains("brainloop approve")
        })
        .await;
    assert_eq!(waiting.task.status(), TaskStatus::Working);
    let wjob = job_of(&w);
    let vid: String = env
        .output()
        .query_row(
            "SELECT json_extract(result, '$.validation_id') FROM results WHERE job_id = ?1",
            [wjob],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        message(&waiting).contains(&format!("brainloop approve {vid}")),
        "{waiting:?}"
    );

    // Another client's task ids: the same "unknown task" as a made-up or malformed one.
    let other = Mcp::connect(&env, "other", &[]).await;
    let theirs = other.get(&w).await.unwrap_err();
    let made_up = other
        .get(&format!("bl-{wjob}-0000000000000000"))
        .await
        .unwrap_err();
    let garbage = other.get("x").await.unwrap_err();
    let cancel_theirs = other.cancel(&w).await.unwrap_err();
    assert!(theirs.contains("unknown task"), "{theirs}");
    assert_eq!(theirs, made_up);
    assert_eq!(theirs, garbage);
    assert_eq!(theirs, cancel_theirs);
    let n: i64 = env
        .input()
        .query_row("SELECT count(*) FROM withdrawals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "a refused tasks/cancel records nothing");
    other.close().await;

    // The task survives a restart of brainloop mcp and of the worker: it is the job.
    agent.close().await;
    d.sigterm();
    d.wait_exit(LONG);
    let d = start(&env);
    let agent = Mcp::connect(&env, "agent", &[]).await;
    let again = agent.get(&w).await.expect("tasks/get after restarts");
    assert_eq!(again.task.status(), TaskStatus::Working);
    assert!(message(&again).contains(&vid), "{again:?}");
    let (st, o, e) = env.cli(&["approve", &vid]);
    assert!(st.success(), "{o}{e}");
    let done = agent
        .until(&w, "completed", |t| {
            t.task.status() == TaskStatus::Completed
        })
        .await;
    assert_eq!(
        completed(&done)["structuredContent"]["status"],
        "succeeded",
        "{done:?}"
    );
    assert!(env.workspace.join("approved.txt").exists());

    // tasks/cancel of a queued job: a sleep holds the only slot, the next job stays queued.
    let sleeper = agent.task("sleep", json!({"ms": 30000})).await;
    agent
        .until(&sleeper, "running", |t| message(t).contains("running"))
        .await;
    let q = agent
        .task("execute_bash", json!({"command": "touch queued.txt"}))
        .await;
    let qjob = job_of(&q);
    // A raw withdrawal by another client (a producer's row) changes nothing; it is read first.
    env.input()
        .execute(
            "INSERT INTO withdrawals(job_id, client_id, requested_at) VALUES (?1, 'other', 0)",
            [qjob],
        )
        .unwrap();
    // Both withdrawn back to back (the queued one and, below, the running one): a second
    // withdrawal written while the worker reads the first is not lost.
    agent.cancel(&q).await.expect("tasks/cancel");
    agent.cancel(&sleeper).await.expect("tasks/cancel");
    let c = agent
        .until(&q, "cancelled", |t| {
            t.task.status() == TaskStatus::Cancelled
        })
        .await;
    assert!(message(&c).contains("client:agent"), "{c:?}");
    assert_eq!(
        one(
            &env,
            "SELECT requested_by FROM cancellations WHERE job_id = ?1",
            qjob
        )
        .as_deref(),
        Some("client:agent")
    );
    assert_eq!(env.result(qjob).unwrap().0, "cancelled");
    // The running one: stopped by the worker's own cancellation.
    agent
        .until(&sleeper, "cancelled", |t| {
            t.task.status() == TaskStatus::Cancelled
        })
        .await;
    assert!(!env.workspace.join("queued.txt").exists());

    // tasks/cancel of a job waiting for the operator: its validation is closed.
    let p = agent
        .task("execute_bash", json!({"command": "touch waiting.txt"}))
        .await;
    agent
        .until(&p, "waiting", |t| message(t).contains("brainloop approve"))
        .await;
    let pvid: String = env
        .output()
        .query_row(
            "SELECT json_extract(result, '$.validation_id') FROM results WHERE job_id = ?1",
            [job_of(&p)],
            |r| r.get(0),
        )
        .unwrap();
    agent.cancel(&p).await.expect("tasks/cancel");
    agent
        .until(&p, "cancelled", |t| {
            t.task.status() == TaskStatus::Cancelled
        })
        .await;
    let (st, o, e) = env.cli(&["approve", &pvid]);
    assert!(
        !st.success(),
        "a withdrawn job's validation is closed: {o}{e}"
    );
    assert!(!env.workspace.join("waiting.txt").exists());

    // A cancel of an ended task changes nothing.
    agent
        .cancel(&t)
        .await
        .expect("tasks/cancel of an ended task");
    assert_eq!(
        agent.get(&t).await.unwrap().task.status(),
        TaskStatus::Completed
    );
    agent.close().await;

    // No MCP message can produce an approval (raw lines, as a hostile client writes them).
    tokio::task::block_in_place(|| no_message_approves(&env));
    drop(d);
}

/// Raw JSON-RPC lines: a write queued as a task, then every message that could look like a
/// human's answer — an elicitation "accept" nobody asked for, `tasks/update` with accepting
/// input responses, a client-sent `elicitation/create`, custom `approve` methods, an `approve`
/// action on both tools — and the job is still waiting, no approval row, no file written.
fn no_message_approves(env: &Env) {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(BIN)
        .args(["mcp", "--client", "agent", "--data-dir"])
        .arg(&env.data)
        .env("BRAINLOOP_CONFIG", config(env))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let v: Value = serde_json::from_str(&line).expect("stdout line is JSON");
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    let mut line = move |l: &str| writeln!(stdin, "{l}").unwrap();
    // Answers may come out of order (requests run concurrently): keep the ones not asked yet.
    let seen = std::cell::RefCell::new(Vec::<Value>::new());
    let reply = |id: Value| -> Value {
        let t0 = Instant::now();
        loop {
            let at = seen.borrow().iter().position(|v| v["id"] == id);
            if let Some(i) = at {
                return seen.borrow_mut().remove(i);
            }
            let left = LONG.saturating_sub(t0.elapsed());
            let v = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {id}; others: {:?}", seen.borrow()));
            seen.borrow_mut().push(v);
        }
    };
    // A line that is not JSON gets a parse error (id null), not silence; the session goes on.
    line("this is not json");
    line("{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\":");
    for _ in 0..2 {
        let e = reply(Value::Null);
        assert_eq!(e["error"]["code"], -32700, "{e}");
        assert!(
            !e.to_string().contains("not json"),
            "the line is not echoed: {e}"
        );
    }
    let mut send = |v: Value| line(&v.to_string());
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}});
    send(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":tasks,"clientInfo":{"name":"raw","version":"0"}}}),
    );
    assert!(reply(json!(1)).get("result").is_some());
    send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    send(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"brainloop","arguments":{"action":"execute_bash","params":{"command":"touch elicited.txt"}}}}),
    );
    let created = reply(json!(2));
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_string();
    let job = job_of(&task);
    env.wait_status(job, "pending_validation", LONG);
    let vid: String = env
        .output()
        .query_row(
            "SELECT json_extract(result, '$.validation_id') FROM results WHERE job_id = ?1",
            [job],
            |r| r.get(0),
        )
        .unwrap();
    let accept = json!({"action": "accept", "content": {"decision": "approve", "approve": true, "validation_id": vid}});
    let hostile = [
        // Answers to elicitations the server never sent (by guessed ids).
        json!({"jsonrpc":"2.0","id":0,"result":accept}),
        json!({"jsonrpc":"2.0","id":"elicit-1","result":accept}),
        json!({"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":vid}}),
        json!({"jsonrpc":"2.0","id":10,"method":"tasks/update","params":{"taskId":task,"inputResponses":{"approval":accept}}}),
        json!({"jsonrpc":"2.0","id":11,"method":"elicitation/create","params":{"mode":"form","message":"approve?","requestedSchema":{"type":"object","properties":{}}}}),
        json!({"jsonrpc":"2.0","id":12,"method":"approve","params":{"validation_id":vid}}),
        json!({"jsonrpc":"2.0","id":13,"method":"validations/approve","params":{"id":vid}}),
        json!({"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"brainloop","arguments":{"action":"approve","params":{"validation_id":vid}}}}),
        json!({"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"brainloop_read","arguments":{"action":"approve","params":{"validation_id":vid}}}}),
        json!({"jsonrpc":"2.0","id":16,"method":"tasks/get","params":{"taskId":task}}),
        // Capabilities the server does not advertise are refused (rmcp 3.11), not empty lists.
        json!({"jsonrpc":"2.0","id":17,"method":"prompts/list","params":{}}),
        json!({"jsonrpc":"2.0","id":18,"method":"resources/list","params":{}}),
    ];
    for h in hostile {
        send(h);
    }
    for id in 10..=15 {
        let v = reply(json!(id));
        let refused = v.get("error").is_some() || v["result"]["isError"] == true;
        assert!(refused, "message {id} was not refused: {v}");
    }
    for id in [17, 18] {
        let v = reply(json!(id));
        assert_eq!(v["error"]["code"], -32601, "unadvertised method {id}: {v}");
    }
    let got = reply(json!(16));
    assert_eq!(got["result"]["status"], "working", "{got}");
    assert!(
        got["result"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains(&vid),
        "{got}"
    );
    drop(line); // EOF ends the server
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}");
    let approvals: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM approvals WHERE validation_id = ?1",
            [&vid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(approvals, 0, "no approval from any MCP message");
    assert_eq!(env.result(job).unwrap().0, "pending_validation");
    assert!(!env.workspace.join("elicited.txt").exists());
}

/// Where `scripts/mcp-clients.sh` installed the real clients (`BRAINLOOP_MCP_CLIENTS` to
/// override).
fn clients_dir() -> PathBuf {
    std::env::var_os("BRAINLOOP_MCP_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-clients"))
}

fn installed(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "CANNOT RUN HERE: {what} is not installed ({} is missing): run scripts/mcp-clients.sh \
         (.ci/run does; it needs python3 with venv, npm, and access to PyPI and the npm registry)",
        path.display()
    );
}

/// Runs a client program against `env`'s worker (killed after two minutes); its stdout.
fn run_client(env: &Env, d: &common::Daemon, program: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out_path = env.root.path().join("client.out");
    let err_path = env.root.path().join("client.err");
    let mut child = std::process::Command::new(program)
        .args(args)
        .env("BRAINLOOP_BIN", BIN)
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_CONFIG", config(env))
        .env("BRAINLOOP_TEST_ACTIONS", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("CANNOT RUN HERE: cannot start {}: {e}", program.display()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let ok = status.is_some_and(|s| s.success()) && out.trim_end().ends_with("ALL OK");
    assert!(
        ok,
        "{} {args:?}: {status:?} after {:?}\nstdout:\n{out}\nstderr:\n{err}\nworker log:\n{}",
        program.display(),
        t0.elapsed(),
        d.log_text()
    );
    eprintln!("{out}");
    out
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_clients")
        .join(name)
}

fn count(env: &Env, db: &str, sql: &str) -> i64 {
    env.db(db).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The official Python SDK, its Tasks client built on `mcp.client.extension`: tools and
/// annotations, a read with no task, a task that completes, one approved by the operator,
/// tasks/cancel of a queued, a running and a waiting job, another client's ids refused.
#[test]
fn the_official_python_sdk_lists_calls_awaits_approval_and_cancels_tasks() {
    let python = clients_dir().join("py/bin/python");
    installed(&python, "the MCP Python SDK");
    let env = Env::new();
    let d = start(&env);
    run_client(
        &env,
        &d,
        &python,
        &[
            script("python_client.py").as_os_str(),
            env.workspace.as_os_str(),
        ],
    );
    // What the user would see on disk and in the databases.
    assert!(env.workspace.join("approved.txt").exists());
    for never in ["queued.txt", "waiting.txt"] {
        assert!(!env.workspace.join(never).exists(), "{never}");
    }
    assert_eq!(
        count(
            &env,
            "command_security.db",
            "SELECT count(*) FROM cancellations WHERE requested_by = 'client:agent'"
        ),
        3,
        "the queued, the running and the waiting job, each withdrawn by its client"
    );
    assert!(
        count(
            &env,
            "brainloop.input.db",
            "SELECT count(*) FROM jobs WHERE task_id LIKE 'bl-%'"
        ) >= 5,
        "every queued call was a task"
    );
    drop(d);
}

/// The official TypeScript clients on one worker: the SDK 1.x (2025-11-25, no tasks) for
/// tools and annotations, the read tool's outputSchema checked by the SDK, the blocking call
/// and an approval polled; then the client 2.x with ext-tasks for tasks (completed, approved,
/// cancelled while queued and while running).
#[test]
fn the_official_typescript_clients_list_block_and_run_tasks() {
    let node_dir = clients_dir().join("node");
    for package in ["sdk", "client", "ext-tasks"] {
        installed(
            &node_dir.join(format!(
                "node_modules/@modelcontextprotocol/{package}/package.json"
            )),
            &format!("@modelcontextprotocol/{package}"),
        );
    }
    let env = Env::new();
    let d = start(&env);
    // ES modules resolve packages from the script's own directory: run a copy beside them.
    let node = |name: &str| {
        let copy = node_dir.join(name);
        std::fs::copy(script(name), &copy).unwrap();
        run_client(
            &env,
            &d,
            Path::new("node"),
            &[copy.as_os_str(), env.workspace.as_os_str()],
        );
    };
    node("ts_sdk_client.mjs");
    assert!(env.workspace.join("ts-approved.txt").exists());
    assert_eq!(
        count(
            &env,
            "brainloop.input.db",
            "SELECT count(*) FROM jobs WHERE task_id IS NOT NULL"
        ),
        0,
        "a client without the Tasks extension gets blocking calls, no tasks"
    );
    node("ts_tasks_client.mjs");
    assert!(env.workspace.join("ts-task.txt").exists());
    assert!(!env.workspace.join("ts-queued.txt").exists());
    assert_eq!(
        count(
            &env,
            "command_security.db",
            "SELECT count(*) FROM cancellations WHERE requested_by = 'client:agent'"
        ),
        2,
        "the queued and the running job, each withdrawn by its client"
    );
    drop(d);
}
