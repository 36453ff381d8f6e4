//! `loop {mode: "agent"}` through the real daemon and a scripted mock of the Cerebras API on
//! 127.0.0.1 speaking the streamed tool-call wire format. The mock answers by the number of
//! assistant turns already in the conversation, so a resumed session gets the same script.
//! Destructive commands are only classified (blocked before anything runs); what runs touches
//! only the test's temp workspace.

mod common;

use common::mock_llm::{MockLlm, Reply, Seen};
use common::{job, settled, Env};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        r#"
[clients.agent]
file_read = ["{workspace}/**"]
file_write = ["{workspace}/**"]
system_command = ["*"]
llm = true
"#,
    )
    .unwrap();
    p.display().to_string()
}

fn start(env: &Env, mock: &MockLlm, extra: &[(&str, &str)]) -> common::Daemon {
    common::start_with_llm(env, &config(env), mock, extra)
}

fn approve(env: &Env, id: &str) {
    let (st, out, err) = env.cli(&["approve", id]);
    assert!(st.success(), "{out}{err}");
}

fn agent(env: &Env, params: Value) -> i64 {
    let mut p = params;
    p["mode"] = json!("agent");
    job(env, "agent", "loop", &p)
}

/// Waits until the job is final, or pending with a validation other than `not`.
fn next_state(env: &Env, id: i64, not: Option<&str>) -> (String, Value, String) {
    let t0 = Instant::now();
    loop {
        let (st, v, e) = settled(env, id);
        let same = st == "pending_validation" && v["validation_id"].as_str() == not;
        if !same {
            return (st, v, e);
        }
        assert!(t0.elapsed() < LONG, "job {id} did not move on");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tool_messages(s: &Seen) -> Vec<String> {
    s.messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn run_cmd(turn: usize, cmd: &str) -> Reply {
    Reply::tool_call(
        &format!("call_{turn}"),
        "run_command",
        json!({"command": cmd}),
    )
}

fn finish(turn: usize, summary: &str) -> Reply {
    Reply::tool_call(
        &format!("call_{turn}"),
        "finish",
        json!({"summary": summary}),
    )
}

#[test]
fn a_session_runs_pauses_twice_survives_kill9_and_finishes_without_repeating_a_step() {
    let env = Env::new();
    let release = Arc::new(AtomicBool::new(false));
    let r2 = Arc::clone(&release);
    let mock = MockLlm::start(move |req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        match req.turns() {
            0 => run_cmd(0, "echo hello-agent"),
            1 => run_cmd(1, "ls"),
            2 => Reply::tool_call(
                "call_2",
                "write_file",
                json!({"path": "notes.txt", "content": "v1\n"}),
            ),
            3 => run_cmd(3, "echo step >> counter.txt"),
            4 => {
                // Held until the test has killed the worker that sent this request.
                let t0 = Instant::now();
                while !r2.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Reply::tool_call("call_4", "read_file", json!({"path": "counter.txt"}))
            }
            _ => finish(5, "counter written once"),
        }
    });
    let d = start(&env, &mock, &[]);
    let id = agent(
        &env,
        json!({"goal": "write notes and count", "max_iterations": 10}),
    );

    // Pure commands ran; the write_file step waits for a human.
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert_eq!(v["paused_at"]["tool"], "write_file", "{v}");
    assert_eq!(v["steps_done"], 2, "{v}");
    let session = v["session_id"].as_str().unwrap().to_string();
    assert!(session.starts_with("agent-"), "{v}");
    assert!(
        !env.workspace.join("notes.txt").exists(),
        "written before approval"
    );
    let vid1 = v["validation_id"].as_str().unwrap().to_string();
    approve(&env, &vid1);

    // The approved write happened; the counter command asks next.
    let (st, v, err) = next_state(&env, id, Some(&vid1));
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert_eq!(v["paused_at"]["tool"], "run_command", "{v}");
    assert_eq!(
        v["paused_at"]["arguments"]["command"],
        "echo step >> counter.txt"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("notes.txt")).unwrap(),
        "v1\n"
    );
    assert!(
        !env.workspace.join("counter.txt").exists(),
        "ran before approval"
    );
    let vid2 = v["validation_id"].as_str().unwrap().to_string();
    approve(&env, &vid2);

    // The worker is killed -9 while it waits for the model's answer after the approved step.
    let t0 = Instant::now();
    while !mock.chats().iter().any(|s| s.turns() == 4) {
        assert!(t0.elapsed() < LONG, "turn 4 never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("counter.txt")).unwrap(),
        "step\n"
    );
    d.kill9();
    release.store(true, Ordering::SeqCst);

    // Restarted: an approved job cut off is asked again (never re-run unapproved); approving
    // it resumes the session at turn 4, the approved command is not run again.
    let _d = start(&env, &mock, &[]);
    let (st, v, err) = next_state(&env, id, Some(&vid2));
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(v["reasons"].to_string().contains("asked again"), "{v}");
    let vid3 = v["validation_id"].as_str().unwrap().to_string();
    approve(&env, &vid3);
    let (st, v, err) = next_state(&env, id, Some(&vid3));
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["status"], "finished", "{v}");
    assert_eq!(v["session_id"], session.as_str());
    assert_eq!(v["summary"], "counter written once");
    let outcomes: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "ok", "ok", "ok", "ok", "ok"], "{v}");
    assert_eq!(
        v["steps"][4]["observation"]
            .as_str()
            .unwrap()
            .lines()
            .last(),
        Some("step")
    );

    // The side effect happened exactly once.
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("counter.txt")).unwrap(),
        "step\n"
    );
    // The request log: every turn asked once, except turn 4 (cut off by the kill, asked again).
    let chats = mock.chats();
    for turn in 0..=5 {
        let n = chats.iter().filter(|s| s.turns() == turn).count();
        let want = if turn == 4 { 2 } else { 1 };
        assert_eq!(n, want, "turn {turn} asked {n} times");
    }
    // The last request carries each observation once, in order, answering each call's id.
    let last = chats.iter().find(|s| s.turns() == 5).unwrap();
    let obs = tool_messages(last);
    assert_eq!(obs.len(), 5, "{obs:?}");
    assert!(obs[0].contains("hello-agent"), "{obs:?}");
    assert!(obs[2].contains("wrote 3 bytes"), "{obs:?}");
    assert!(obs[3].contains("exit_code: 0"), "{obs:?}");
    assert!(obs[4].contains("counter.txt"), "{obs:?}");
    let ids: Vec<String> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["call_0", "call_1", "call_2", "call_3", "call_4"]);
    assert!(last.body["tools"].as_array().unwrap().len() == 4);
    assert_eq!(last.body["tool_choice"], "auto");
    // The session row is closed with its status.
    let status: String = env
        .lifecycle()
        .query_row(
            "SELECT status FROM sessions WHERE session_id = ?1 AND mode = 'agent'",
            [&session],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "finished");
}

#[test]
fn a_blocked_command_and_a_self_forced_one_are_refused_reported_and_never_run() {
    let env = Env::new();
    std::fs::write(env.workspace.join("canary.txt"), "alive").unwrap();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        match req.turns() {
            0 => run_cmd(0, "rm -rf /"),
            1 => Reply::tool_call(
                "call_1",
                "run_command",
                json!({"command": "touch forced.txt", "force_execute": true}),
            ),
            _ => finish(2, "refused twice"),
        }
    });
    let _d = start(&env, &mock, &[]);
    let id = agent(&env, json!({"goal": "clean everything"}));
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["steps"][0]["outcome"], "blocked", "{v}");
    assert_eq!(v["steps"][1]["outcome"], "invalid", "{v}");
    // The refusal is in the next request's messages, answering the call.
    let chats = mock.chats();
    let second = chats.iter().find(|s| s.turns() == 1).unwrap();
    let obs = tool_messages(second);
    assert_eq!(obs.len(), 1);
    assert!(
        obs[0].contains("REFUSED") && obs[0].contains("blocked"),
        "{obs:?}"
    );
    assert!(obs[0].contains("recursive deletion"), "{obs:?}");
    let third = chats.iter().find(|s| s.turns() == 2).unwrap();
    assert!(
        tool_messages(third)[1].contains("force_execute"),
        "{:?}",
        tool_messages(third)
    );
    assert!(env.workspace.join("canary.txt").exists());
    assert!(!env.workspace.join("forced.txt").exists());
    // No validation was ever requested for either.
    let n: i64 = env
        .output()
        .query_row(
            "SELECT count(*) FROM validations WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn the_iteration_cap_and_the_token_budget_stop_the_session_with_their_status() {
    let env = Env::new();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        let t = req.turns();
        if req.prompt().contains("Goal: spend") {
            Reply::tool_call_with_usage(
                &format!("c{t}"),
                "run_command",
                json!({"command": "echo hi"}),
                400,
                200,
            )
        } else {
            run_cmd(t, "echo hi")
        }
    });
    let _d = start(&env, &mock, &[]);
    let id = agent(&env, json!({"goal": "loop forever", "max_iterations": 3}));
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "failed", "{v}");
    assert_eq!(v["status"], "iteration_limit", "{v}");
    assert!(err.contains("iteration_limit"), "{err}");
    assert_eq!(v["iterations"], 3);
    assert_eq!(v["steps"].as_array().unwrap().len(), 3);
    let forever = mock
        .chats()
        .iter()
        .filter(|s| s.prompt().contains("Goal: loop forever"))
        .count();
    assert_eq!(forever, 3);

    let id = agent(&env, json!({"goal": "spend tokens", "token_budget": 1000}));
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "failed", "{v}");
    assert_eq!(v["status"], "token_budget", "{v} {err}");
    assert_eq!(v["tokens_used"], 1200);
    let spend: Vec<Seen> = mock
        .chats()
        .into_iter()
        .filter(|s| s.prompt().contains("Goal: spend"))
        .collect();
    assert_eq!(spend.len(), 2);
    // The second request may not ask for more than what is left of the budget.
    assert!(spend[1].body["max_completion_tokens"].as_u64().unwrap() <= 400);
}

#[test]
fn strict_json_fallback_when_the_server_refuses_tools_and_malformed_answers_are_fed_back() {
    let env = Env::new();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        if req.body.get("tools").is_some() {
            return Reply::error(400, "tools are not supported by this model");
        }
        match req.turns() {
            0 => Reply::text(r#"{"tool": "run_command", "arguments": {"command": "echo fallback-ok"}}"#),
            1 => Reply::text("I think I should run ls now."),
            _ => Reply::text("```json\n{\"tool\": \"finish\", \"arguments\": {\"summary\": \"done in json\"}}\n```"),
        }
    });
    let _d = start(&env, &mock, &[]);
    let id = agent(&env, json!({"goal": "json please"}));
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["strict_json_fallback"], true);
    assert_eq!(v["summary"], "done in json");
    let outcomes: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "invalid", "ok"]);
    let chats = mock.chats();
    assert!(chats[0].body.get("tools").is_some());
    assert!(chats[1..].iter().all(|s| s.body.get("tools").is_none()));
    let last = chats.last().unwrap();
    let p = last.prompt();
    assert!(p.contains("exactly one JSON object"), "{p}");
    assert!(p.contains("fallback-ok"), "{p}");
    assert!(
        p.contains("ERROR: the answer is not exactly one JSON object"),
        "{p}"
    );
}

#[test]
fn three_answers_without_a_step_end_the_session_at_the_failure_limit() {
    let env = Env::new();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        Reply::text("I would rather chat.")
    });
    let _d = start(&env, &mock, &[("BRAINLOOP_LLM_TOOL_CALLING", "1")]);
    let id = agent(&env, json!({"goal": "do something"}));
    let (st, v, _) = next_state(&env, id, None);
    assert_eq!(st, "failed");
    assert_eq!(v["status"], "failure_limit", "{v}");
    assert_eq!(v["iterations"], 3);
    assert!(v["steps"][0]["observation"]
        .as_str()
        .unwrap()
        .contains("no tool call"));
}

#[test]
fn an_approval_covers_only_the_step_that_waited_for_it() {
    let env = Env::new();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        match req.turns() {
            0 => run_cmd(0, "echo once >> c.txt"),
            1 => {
                // Past the command's duplicate threshold (2 s), so only the approval's scope
                // decides whether it runs.
                std::thread::sleep(Duration::from_millis(2500));
                run_cmd(1, "echo once >> c.txt")
            }
            _ => finish(2, "done"),
        }
    });
    // Without the overlay an approval binds to the command's hash (with it, to the change
    // set): the case where handing the approval on would let the same command run again.
    let _d = start(&env, &mock, &[("BRAINLOOP_OVERLAY", "0")]);
    let id = agent(&env, json!({"goal": "append twice"}));
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    approve(&env, &vid);
    // The same command proposed again after the approved one ran: not covered by it.
    let (st, v, err) = next_state(&env, id, Some(&vid));
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("c.txt")).unwrap(),
        "once\n"
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert_eq!(v["paused_at"]["step"], 2, "{v}");
    let vid2 = v["validation_id"].as_str().unwrap().to_string();
    let (s, o, e) = env.cli(&["deny", &vid2]);
    assert!(s.success(), "{o}{e}");
    let (st, _, _) = next_state(&env, id, Some(&vid2));
    assert_eq!(st, "denied");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("c.txt")).unwrap(),
        "once\n"
    );
}

#[test]
fn a_step_cut_off_by_kill9_is_reported_interrupted_not_run_again() {
    let env = Env::new();
    let mock = MockLlm::start(|req| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        match req.turns() {
            0 => run_cmd(0, "sleep 20"),
            _ => finish(1, "gave up after the interruption"),
        }
    });
    let d = start(&env, &mock, &[]);
    let id = agent(&env, json!({"goal": "wait a while"}));
    // The step's intent is recorded before it runs; kill the worker while it runs.
    let t0 = Instant::now();
    loop {
        let state: Option<String> = env
            .lifecycle()
            .query_row(
                "SELECT state FROM sessions WHERE job_id = ?1 AND mode = 'agent'",
                [id],
                |r| r.get(0),
            )
            .ok();
        let started = state
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .is_some_and(|v| v["pending"]["phase"] == "started");
        if started {
            break;
        }
        assert!(t0.elapsed() < LONG, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    d.kill9();
    let _d = start(&env, &mock, &[]);
    let (st, v, err) = next_state(&env, id, None);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["steps"][0]["outcome"], "interrupted", "{v}");
    let chats = mock.chats();
    assert_eq!(chats.iter().filter(|s| s.turns() == 0).count(), 1);
    let second = chats.iter().find(|s| s.turns() == 1).unwrap();
    let obs = tool_messages(second);
    assert_eq!(obs.len(), 1);
    assert!(
        obs[0].contains("INTERRUPTED") && obs[0].contains("outcome is unknown"),
        "{obs:?}"
    );
    // Only the one (killed) run of the command: the resumed session did not start it again.
    let runs: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT coalesce(sum(execution_count), 0) FROM commands_registry WHERE command_text = 'sleep 20'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 0, "the command was run again after the restart");
}
