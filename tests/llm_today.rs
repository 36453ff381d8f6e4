//! Issue 51: brainloop against today's Cerebras API, through the real daemon with only
//! `CEREBRAS_API_KEY` and `BRAINLOOP_LLM_BASE_URL` set (the mock on 127.0.0.1 serving today's
//! model list and wire format): every LLM action end to end with reasoning in a separate field
//! and in `<think>` blocks that never reach a file, SQL, a digest or the agent's next request;
//! json_schema replies; a tool call split over chunks executed once; the request shape (the
//! integration header, reasoning parameters, strict tools, no refused parameter); the GenAI
//! metric rows; `show --reasoning`; and a model the API no longer serves, named with the served
//! list and the fix at start-up, in `status` and in the job's error.

mod common;

use common::mock_llm::{rate_headers, tool_call_pieces, MockLlm, Reply, Seen, MODEL, TODAY};
use common::{job, run, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const REASONING: &str = "REASONING-CANARY the user wants";
const THINK: &str = "THINK-CANARY";
/// Reasoning carrying a clipboard write and a bidi override: `show --reasoning` escapes it.
const HOSTILE_REASONING: &str = "HOSTILE-REASONING\x1b]52;c;cHduZWQ=\x07\u{202e}gnp.exe";

/// Parameters the API refuses with 400: never sent.
const REFUSED: &[&str] = &[
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "parallel_tool_calls",
    "service_tier",
    "disable_reasoning",
];

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        r#"
[clients.agent]
file_read = ["{workspace}/**"]
file_write = ["{workspace}/**"]
file_write_auto = ["{workspace}/gen/**"]
system_command = ["*"]
llm = true
"#,
    )
    .unwrap();
    p.display().to_string()
}

/// `delta.reasoning` pieces, then a tool call whose arguments are split over several chunks.
fn reasoned_tool_call(id: &str, name: &str, args: Value) -> Reply {
    let mut pieces = vec![format!(
        "data: {}\n\n",
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
               "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning": REASONING}}]})
    )];
    pieces.extend(tool_call_pieces(id, name, &args, 10, 5));
    Reply::Stream {
        pieces,
        stall: false,
        headers: vec![],
    }
}

/// What the mock answers, by what is asked: reasoning in the field and `<think>` in the content
/// of every plain and structured answer.
fn respond(req: &Seen) -> Reply {
    let schema = req.body["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let thought = |v: Value| {
        Reply::reasoning(REASONING, &format!("<think>{THINK}</think>{v}"))
            .with_headers(rate_headers(50_000, "30.5"))
    };
    if req.body.get("tools").is_some() {
        return match req.turns() {
            0 => reasoned_tool_call(
                "call_split",
                "write_file",
                json!({"path": "gen/agent.txt", "content": "written once\n"}),
            ),
            _ => Reply::tool_call("call_end", "finish", json!({"summary": "wrote agent.txt"})),
        };
    }
    match schema.as_str() {
        "sqlite_sql" => Reply::reasoning(
            HOSTILE_REASONING,
            &json!({"sql": "SELECT count(*) AS n FROM t;"}).to_string(),
        )
        .with_headers(rate_headers(50_000, "30.5")),
        "code_audit" => thought(json!({"summary": "Small and clear.", "findings": [
            {"severity": "medium", "category": "bug", "line": 2, "title": "division by zero",
             "detail": "h may be 0", "recommendation": "check h first"}]})),
        "code_digest" => thought(json!({"purpose": "computes areas",
            "components": [{"name": "area", "role": "multiplies"}], "patterns": ["pure functions"],
            "conventions": ["snake_case"], "entry_points": ["area"]})),
        "code_block" => thought(json!({"code": "print('block')\n"})),
        _ => Reply::reasoning(
            REASONING,
            &format!("<think>{THINK}</think>```python\nprint('generated')\n```"),
        ),
    }
}

fn assert_no_reasoning(what: &str, text: &str) {
    assert!(
        !text.contains("CANARY") && !text.contains("<think>"),
        "{what} carries reasoning: {text}"
    );
}

/// Long because it is the issue's one end-to-end story: each LLM action in turn against the
/// same daemon and mock, then the checks every request must pass.
#[test]
fn a_fresh_install_with_only_the_key_runs_every_llm_action_against_todays_api() {
    let env = Env::new();
    std::fs::write(
        env.workspace.join("area.py"),
        "def area(w, h):\n    return w / h\n",
    )
    .unwrap();
    let c = rusqlite::Connection::open(env.workspace.join("data.db")).unwrap();
    c.execute_batch("CREATE TABLE t(a INTEGER); INSERT INTO t VALUES (1), (2);")
        .unwrap();
    drop(c);
    std::fs::create_dir_all(env.workspace.join("gen")).unwrap();
    let mock = MockLlm::serving(TODAY, respond);
    let d = common::start_with_llm(&env, &config(&env), &mock, &[]);

    // generate_file: the file holds the code alone.
    let gen_job = job(
        &env,
        "agent",
        "generate_file",
        &json!({"prompt": "print something", "output_path": "gen/out.py"}),
    );
    let (st, v, err) = settled(&env, gen_job);
    assert_eq!(st, "succeeded", "{err} {v}");
    let file = std::fs::read_to_string(env.workspace.join("gen/out.py")).unwrap();
    assert_eq!(file, "print('generated')\n");
    assert_eq!(v["llm"]["reasoning_tokens"], 7, "{v}");

    // generate_sql: a json_schema reply; the SQL alone runs.
    let sql_job = job(
        &env,
        "agent",
        "generate_sql",
        &json!({"prompt": "count the rows", "db_path": "data.db"}),
    );
    let (st, v, err) = settled(&env, sql_job);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["sql"], "SELECT count(*) AS n FROM t;");
    assert_eq!(v["statements"][0]["rows"], json!([[2]]));

    // audit_code: structured findings and seed 001's Markdown from them.
    let (st, v, err) = run(&env, "agent", "audit_code", json!({"file_path": "area.py"}));
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["findings"][0]["line"], 2, "{v}");
    assert_no_reasoning("audit_code's audit", v["audit"].as_str().unwrap());
    assert!(v["audit"].as_str().unwrap().contains("division by zero"));

    // read_code with a digest.
    let (st, v, err) = run(&env, "agent", "read_code", json!({"path": "area.py"}));
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["model_digest_status"], "generated", "{v}");
    assert_eq!(v["model_digest"]["purpose"], "computes areas");
    assert_no_reasoning("the digest", &v["model_digest"].to_string());

    // loop, block mode: propose, the model's audit, the state.
    let (st, v, err) = run(
        &env,
        "agent",
        "loop",
        json!({"mode": "propose", "blocks": [{"description": "print block", "type": "python", "target": "gen/block.py"}]}),
    );
    assert_eq!(st, "succeeded", "{err} {v}");
    let sid = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(v["blocks"][0]["code"], "print('block')\n", "{v}");
    let (st, v, err) = run(
        &env,
        "agent",
        "loop",
        json!({"mode": "audit", "session_id": sid}),
    );
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["blocks"][0]["findings"][0]["severity"], "medium", "{v}");
    let (st, v, err) = run(
        &env,
        "agent",
        "loop",
        json!({"mode": "status", "session_id": sid}),
    );
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["blocks"][0]["code"], "print('block')\n");
    assert_no_reasoning("the block's code", &v.to_string());

    // loop, agent mode: a tool call split over chunks, executed once.
    let chats_before = mock.chats().len();
    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "agent", "goal": "write agent.txt", "max_iterations": 5}),
    );
    let t0 = Instant::now();
    let (st, v, err) = loop {
        let (st, v, e) = settled(&env, id);
        if st != "pending_validation" {
            break (st, v, e);
        }
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("gen/agent.txt")).unwrap(),
        "written once\n"
    );
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(
        steps.iter().filter(|s| s["tool"] == "write_file").count(),
        1,
        "{v}"
    );
    assert_eq!(
        v["reasoning"][0]["turn"], 1,
        "the session keeps each turn's reasoning: {v}"
    );
    assert!(v["reasoning"][0]["text"]
        .as_str()
        .unwrap()
        .contains(REASONING));
    let agent_chats: Vec<Seen> = mock.chats().into_iter().skip(chats_before).collect();
    assert_eq!(agent_chats.len(), 2, "two turns");
    let second = agent_chats[1].messages();
    let assistant: Vec<&Value> = second.iter().filter(|m| m["role"] == "assistant").collect();
    assert_eq!(assistant.len(), 1);
    assert_eq!(assistant[0]["tool_calls"][0]["id"], "call_split");
    assert_eq!(
        assistant[0]["tool_calls"][0]["function"]["arguments"],
        json!({"path": "gen/agent.txt", "content": "written once\n"}).to_string()
    );
    let tools: Vec<&Value> = second.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 1, "one tool message per call");
    assert_eq!(tools[0]["tool_call_id"], "call_split");
    assert_no_reasoning("the agent's next request", &agent_chats[1].body.to_string());
    for t in agent_chats[0].body["tools"].as_array().unwrap() {
        assert_eq!(t["function"]["strict"], true, "{t}");
    }

    // Every request: the integration header, the model's reasoning parameters, nothing refused.
    for c in mock.chats() {
        assert_eq!(
            c.header("x-cerebras-3rd-party-integration"),
            Some("brainloop")
        );
        assert_eq!(c.body["model"], "gpt-oss-120b");
        assert_eq!(c.body["reasoning_effort"], "medium");
        assert_eq!(c.body["reasoning_format"], "parsed");
        for k in REFUSED {
            assert!(c.body.get(*k).is_none(), "{k} sent: {}", c.body);
        }
        if let Some(t) = c.body.get("tool_choice") {
            assert_eq!(t, "auto");
        }
        if !c.body["response_format"].is_null() {
            assert_eq!(c.body["response_format"]["type"], "json_schema");
            assert_eq!(c.body["response_format"]["json_schema"]["strict"], true);
        }
    }
    assert!(mock
        .chats()
        .iter()
        .any(|c| c.body["response_format"]["json_schema"]["name"] == "sqlite_sql"));

    // The reasoning is kept apart: `show --reasoning` prints it.
    let (st, out, e) = env.cli(&["show", &gen_job.to_string(), "--reasoning"]);
    assert!(st.success(), "{out}{e}");
    assert!(out.contains(REASONING) && out.contains(THINK), "{out}");
    // Model text, printed through `shown`: the hostile reasoning escaped.
    let (st, out, e) = env.cli(&["show", &sql_job.to_string(), "--reasoning"]);
    assert!(st.success(), "{out}{e}");
    assert!(out.contains("HOSTILE-REASONING"), "{out}");
    assert!(
        !out.contains('\x1b') && !out.contains('\u{202e}') && !out.contains('\x07'),
        "{out:?}"
    );
    let (st, out, e) = env.cli(&["show", &id.to_string(), "--reasoning"]);
    assert!(st.success(), "{out}{e}");
    assert!(out.contains("turn 1") && out.contains(REASONING), "{out}");

    // GenAI metric rows beside the cerebras_* ones (written at the heartbeat).
    let t0 = Instant::now();
    let rows: Vec<(String, f64, String)> = loop {
        let o = env.output();
        let mut s = o
            .prepare("SELECT name, value, COALESCE(labels, '') FROM metrics WHERE name LIKE 'gen_ai.%' OR name LIKE 'brainloop.llm.%'")
            .unwrap();
        let rows: Vec<(String, f64, String)> = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        if rows
            .iter()
            .any(|(n, _, _)| n == "brainloop.llm.reasoning_tokens")
        {
            break rows;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no GenAI rows: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(d);
    let input = rows
        .iter()
        .find(|(n, _, l)| n == "gen_ai.client.token.usage" && l.contains("\"input\""))
        .unwrap_or_else(|| panic!("no input token row: {rows:?}"));
    assert!(
        input
            .2
            .contains("\"gen_ai.request.model\":\"gpt-oss-120b\""),
        "{input:?}"
    );
    assert!(
        input.2.contains("\"gen_ai.operation.name\":\"chat\""),
        "{input:?}"
    );
    assert!(rows
        .iter()
        .any(|(n, _, l)| n == "gen_ai.client.token.usage" && l.contains("\"output\"")));
    assert!(rows
        .iter()
        .any(|(n, v, _)| n == "gen_ai.client.operation.duration" && *v < 60.0));
    assert!(rows
        .iter()
        .any(|(n, v, _)| n == "brainloop.llm.reasoning_tokens" && *v == 7.0));
}

#[test]
fn a_model_the_api_no_longer_serves_is_named_with_the_served_models_and_the_fix() {
    let env = Env::new();
    std::fs::write(
        env.workspace.join("area.py"),
        "def area(w, h):\n    return w * h\n",
    )
    .unwrap();
    let mock = MockLlm::serving(TODAY, respond);
    let d = common::start_with_llm(
        &env,
        &config(&env),
        &mock,
        &[("BRAINLOOP_LLM_MODEL", "zai-glm-4.6")],
    );
    let fix = "set [llm] model = \"gpt-oss-120b\"";
    let served = "served: gpt-oss-120b, qwen-3.8-27b";
    // Start-up log.
    let t0 = Instant::now();
    while !d.log_text().contains(served) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no start-up warning: {}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log_text().contains(fix), "{}", d.log_text());
    // status.
    let t0 = Instant::now();
    loop {
        let (_, out, err) = env.cli(&["status"]);
        if out.contains(served) {
            assert!(out.contains(fix), "{out}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "status: {out}{err}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The job's error: the 404 maps to the same message, not a generic failure.
    let (st, _, err) = run(&env, "agent", "audit_code", json!({"file_path": "area.py"}));
    assert_eq!(st, "failed");
    assert!(
        err.contains("model \"zai-glm-4.6\" is not served")
            && err.contains(served)
            && err.contains(fix),
        "{err}"
    );
    // `brainloop llm models` lists what the key can use and exits 1.
    let out = std::process::Command::new(common::BIN)
        .args(["llm", "models"])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_LLM_BASE_URL", mock.base_url())
        .env("BRAINLOOP_LLM_MODEL", "zai-glm-4.6")
        .env("CEREBRAS_API_KEY", "test")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("gpt-oss-120b") && text.contains("qwen-3.8-27b") && text.contains(fix),
        "{text}"
    );
}
