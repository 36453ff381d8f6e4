//! The reviewer works as documented (issue 36, item 4), through the real binary:
//!
//! - the documented LLM reviewer recipe (`llm = true`, no `hosts` line) reaches a local model on
//!   127.0.0.1 through its own egress proxy (before: `HTTP 403` from that proxy, and a silent
//!   fall-back to asking), and its `deny` is applied; `status` says the model is reached;
//! - a model that cannot be reached is said at start-up (log) and in `status`;
//! - the reviewer sees every kind of validation — generated content (`generate_file`) with the
//!   content itself, a network command asked up front with the hosts it names — and may deny
//!   them; its `approve` of them is never applied (the human is asked).
//!
//! The model is a mock on 127.0.0.1; nothing leaves the machine.

mod common;

use common::mock_llm::{MockLlm, Reply, Seen};
use common::{job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn write(env: &Env, rel: &str, text: &str) -> std::path::PathBuf {
    let p = env.root.path().join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

/// The documented recipe (docs/security.md): no `hosts` line.
fn documented_llm_reviewer(env: &Env) -> String {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviewer");
    write(
        env,
        "brainloop.toml",
        &format!(
            "[reviewer]\ncommand = \"python3 {}/llm_reviewer.py\"\nread = [\"{}\"]\nllm = true\ntimeout_ms = 30000\n",
            examples.display(),
            examples.display()
        ),
    )
    .display()
    .to_string()
}

/// `status` (text) once `pred` holds for it.
fn status_until(env: &Env, config: &str, pred: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let out = std::process::Command::new(common::BIN)
            .arg("status")
            .env("BRAINLOOP_DATA_DIR", &env.data)
            .env("BRAINLOOP_CONFIG", config)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if pred(&text) {
            return text;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "status never said it: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn reviewer_event(env: &Env, vid: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let c = env.metadata();
        let mut s = c
            .prepare("SELECT detail FROM events WHERE kind = 'reviewer' ORDER BY id")
            .unwrap();
        let found = s
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|d| serde_json::from_str::<Value>(&d.unwrap()).unwrap())
            .find(|e| e["validation_id"] == vid);
        if let Some(e) = found {
            return e;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(40)),
            "no reviewer event for {vid}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for job `id` to reach a final status.
fn final_status(env: &Env, id: i64) -> (String, Value, String) {
    let t0 = Instant::now();
    loop {
        let (st, v, e) = settled(env, id);
        if st != "pending_validation" {
            return (st, v, e);
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(40)),
            "job {id} still waits: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_documented_llm_reviewer_reaches_a_local_model_and_its_deny_is_applied() {
    common::require_sandbox();
    let env = Env::new();
    let mock = MockLlm::start(|req: &Seen| {
        if req.method == "GET" {
            return Reply::models(&["gpt-oss-120b"]);
        }
        Reply::text(r#"{"decision": "deny", "reason": "MODEL-SAYS-NO"}"#)
    });
    let cfg = documented_llm_reviewer(&env);
    let _d = common::start_with_llm(&env, &cfg, &mock, &[]);
    let host = mock
        .base_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "printf 'x\\n' > note.txt", "purpose": "write a note"}),
    );
    let (st, v, e) = final_status(&env, id);
    assert_eq!(st, "denied", "the reviewer did not decide: {e} {v}");
    let vid = v["validation_id"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            env.output()
                .query_row("SELECT id FROM validations WHERE job_id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap()
        });
    let ev = reviewer_event(&env, &vid);
    assert_eq!(ev["applied"], "deny", "{ev}");
    assert!(
        ev["reason"].as_str().unwrap().contains("MODEL-SAYS-NO"),
        "{ev}"
    );
    assert!(!mock.chats().is_empty(), "the model was never asked");
    assert!(!env.workspace.join("note.txt").exists());
    let status = status_until(&env, &cfg, |s| s.contains("reviewer model"));
    assert!(
        status.lines().any(|l| l.starts_with("reviewer model ")
            && l.ends_with(&format!(" {host} (startup): reached"))),
        "{status}"
    );
}

#[test]
fn a_reviewer_model_that_cannot_be_reached_is_said_at_start_up_and_in_status() {
    common::require_sandbox();
    let env = Env::new();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let cfg = documented_llm_reviewer(&env);
    let d = env.start(&[
        ("BRAINLOOP_CONFIG", cfg.as_str()),
        ("BRAINLOOP_LLM_BASE_URL", url.as_str()),
        ("CEREBRAS_API_KEY", "test"),
    ]);
    let status = status_until(&env, &cfg, |s| s.contains("reviewer model"));
    assert!(
        status.lines().any(|l| l.starts_with("reviewer model ")
            && l.contains(&format!(" 127.0.0.1:{port} (startup): UNREACHABLE"))),
        "{status}"
    );
    assert!(status.contains("did not answer"), "{status}");
    let json = std::process::Command::new(common::BIN)
        .args(["status", "--json"])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_CONFIG", &cfg)
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(j["reviewer_model"]["ok"], false, "{j}");
    let t0 = Instant::now();
    while !d.log_text().contains("the reviewer cannot reach its model") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A reviewer (Python, no model) that says what it saw in its reason: it denies generated
/// content containing DENYME and every network command, and approves everything else.
const SEEING_REVIEWER: &str = r#"
import json, sys
v = json.load(sys.stdin)
g = v.get("generated") or {}
n = v.get("network") or {}
seen = "kind=%s path=%s hosts=%s" % (v.get("kind"), g.get("path"), ",".join(n.get("hosts") or []))
if "DENYME" in (g.get("content") or ""):
    print("deny generated " + seen)
elif n.get("hosts"):
    print("deny network " + seen)
else:
    print("approve " + seen)
"#;

fn respond(req: &Seen) -> Reply {
    if req.method == "GET" {
        return Reply::models(&["gpt-oss-120b"]);
    }
    let p = req.prompt();
    // The agent loop: one write, then finish.
    if p.contains("LOOPWRITE") {
        return match req.turns() {
            0 => Reply::tool_call(
                "call_0",
                "write_file",
                json!({"path": "loop.txt", "content": "DENYME\n"}),
            ),
            n => Reply::tool_call(&format!("call_{n}"), "finish", json!({"summary": "done"})),
        };
    }
    let mark = if p.contains("MARK:DENYME") {
        "DENYME"
    } else {
        "fine"
    };
    Reply::text(&format!("```python\nprint('{mark}')\n```"))
}

#[test]
fn the_reviewer_sees_generated_content_and_network_commands_and_may_deny_but_never_approve_them() {
    common::require_sandbox();
    let env = Env::new();
    let script = write(&env, "rev/seeing.py", SEEING_REVIEWER);
    let cfg = write(
        &env,
        "brainloop.toml",
        &format!(
            "[clients.agent]\nfile_read = [\"{{workspace}}/**\"]\nfile_write = [\"{{workspace}}/**\"]\nsystem_command = [\"*\"]\nllm = true\n\n[reviewer]\ncommand = \"python3 {}\"\nread = [\"{}\"]\ntimeout_ms = 20000\n",
            script.display(),
            script.parent().unwrap().display()
        ),
    );
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, cfg.to_str().unwrap(), &mock, &[]);
    // Generated content the reviewer reads and denies.
    let id = job(
        &env,
        "local",
        "generate_file",
        &json!({"verified_prompt": "A greeting. MARK:DENYME", "output_path": "bad.py", "code_type": "python"}),
    );
    let (st, v, e) = final_status(&env, id);
    assert_eq!(st, "denied", "{e} {v}");
    let vid: String = env
        .output()
        .query_row("SELECT id FROM validations WHERE job_id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    let ev = reviewer_event(&env, &vid);
    let reason = ev["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("generated kind=generated path=") && reason.contains("bad.py"),
        "{ev}"
    );
    assert!(!env.workspace.join("bad.py").exists());
    // Generated content it approves: not applied, the human is asked.
    let id = job(
        &env,
        "local",
        "generate_file",
        &json!({"verified_prompt": "A greeting. MARK:fine", "output_path": "ok.py", "code_type": "python"}),
    );
    let (st, v, e) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{e} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    let ev = reviewer_event(&env, &vid);
    assert_eq!(
        (ev["answer"].as_str(), ev["applied"].as_str()),
        (Some("approve"), Some("ask")),
        "{ev}"
    );
    assert!(
        ev["refusals"].to_string().contains("generated content"),
        "{ev}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(settled(&env, id).0, "pending_validation");
    assert!(!env.workspace.join("ok.py").exists());
    // A loop's write: generated content too, whatever the job's action (`loop`).
    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "agent", "goal": "LOOPWRITE a file", "max_iterations": 4}),
    );
    let t0 = Instant::now();
    let vid: String = loop {
        let found = env
            .output()
            .query_row("SELECT id FROM validations WHERE job_id = ?1", [id], |r| {
                r.get(0)
            })
            .ok();
        if let Some(v) = found {
            break v;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(40)),
            "{:?}",
            settled(&env, id)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let ev = reviewer_event(&env, &vid);
    let reason = ev["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("generated kind=generated path=") && reason.contains("loop.txt"),
        "{ev}"
    );
    assert_eq!(ev["applied"], "deny", "{ev}");
    assert!(!env.workspace.join("loop.txt").exists());
    // A network command asked up front: the reviewer sees the hosts it names and denies it.
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "curl -sS -m 5 http://127.0.0.1:9/x"}),
    );
    let (st, v, e) = final_status(&env, id);
    assert_eq!(st, "denied", "{e} {v}");
    let vid: String = env
        .output()
        .query_row("SELECT id FROM validations WHERE job_id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    let ev = reviewer_event(&env, &vid);
    assert_eq!(
        ev["reason"], "network kind=command path=None hosts=127.0.0.1:9",
        "{ev}"
    );
}
