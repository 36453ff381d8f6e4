//! The operator's side (issue 22), through the real binary: `approve --learn` learns at once and
//! is refused (nothing decided) where the trust rules never learn; `signatures` says who learned
//! what, when, from which job; `override SIGNATURE clear` forgets. `[notify]` receives one JSON per
//! validation on stdin (a webhook with curl to a collector on 127.0.0.1), once more before expiry,
//! and an expired job's result says how to resubmit; a failing notify command blocks nothing.
//! `[reviewer]`: deny ends the job, approve applies only a learnable change set (ignored for a
//! protected path), a timeout asks, every answer is audited, and nothing a reviewer decides is
//! learning evidence. The shipped LLM reviewer (`examples/reviewer/llm_reviewer.py`) is run
//! against the local mock server. Canary files in temp dirs only; nothing leaves 127.0.0.1.

mod common;

use common::collector::Collector;
use common::mock_llm::{MockLlm, Reply};
use common::{cli_ok, final_result, submit, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn setup_ws(env: &Env) {
    let ws = &env.workspace;
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("b.txt"), "x\n").unwrap();
    std::fs::write(ws.join("c.txt"), "c\n").unwrap();
}

fn start_with(env: &Env, toml: &str, extra: &[(&str, &str)]) -> common::Daemon {
    let f = env.root.path().join("brainloop.toml");
    std::fs::write(&f, toml).unwrap();
    let mut vars = vec![("BRAINLOOP_CONFIG", f.to_str().unwrap())];
    vars.extend_from_slice(extra);
    env.start(&vars)
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

fn signature_row(env: &Env, sig: &str) -> Value {
    let rows: Value = serde_json::from_str(&cli_ok(env, &["signatures", "--json"])).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == sig)
        .cloned()
        .unwrap_or_else(|| panic!("{sig} not recorded: {rows}"))
}

/// The command asks; returns (job, validation id).
fn asks(env: &Env, cmd: &str) -> (i64, String) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {err} {v}");
    (id, v["validation_id"].as_str().unwrap().to_string())
}

fn validation_status(env: &Env, vid: &str) -> String {
    env.output()
        .query_row("SELECT status FROM validations WHERE id = ?1", [vid], |r| {
            r.get(0)
        })
        .unwrap()
}

#[test]
fn approve_learn_learns_at_once_and_is_refused_where_nothing_is_ever_learned() {
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let _d = env.start(&[]);

    // One answer teaches `sed -i EXPR WS_PATH` to client local.
    let (job, vid) = asks(&env, "sed -i s/one/ONE/ a.txt");
    let out = cli_ok(&env, &["approve", &vid, "--learn"]);
    assert!(out.contains("sed -i EXPR WS_PATH"), "{out}");
    assert_eq!(final_result(&env, job).0, "succeeded");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\ntwo\n"));
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert_eq!(row["state"], "learned for local", "{row}");
    let c = &row["clients"][0];
    assert_eq!(c["client_id"], "local", "{row}");
    assert_eq!(c["learned"], true, "{row}");
    assert_eq!(c["learned_job"], job, "{row}");
    assert!(
        c["learned_by"].as_str().unwrap().starts_with("operator:"),
        "{row}"
    );
    let text = cli_ok(&env, &["signatures"]);
    assert!(
        text.contains("learned with --learn by operator:")
            && text.contains(&format!("from job {job}")),
        "{text}"
    );

    // The next command of that signature is applied without a human.
    let (_, st, v, err) = submit(&env, "sed -i s/x/X/ b.txt");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(read(&env, "b.txt").as_deref(), Some("X\n"));

    // Refused, saying why, nothing decided: a protected path ...
    let (_, vid) = asks(&env, "echo hi > .envrc");
    let (st, o, e) = env.cli(&["approve", &vid, "--learn"]);
    assert!(!st.success(), "{o}{e}");
    assert!(e.contains("protected path .envrc"), "{e}");
    assert_eq!(validation_status(&env, &vid), "pending");
    assert!(read(&env, ".envrc").is_none());
    // ... network (asked up front: no change set) ...
    let (_, vid) = asks(&env, "curl -s http://127.0.0.1:9/");
    let (st, _, e) = env.cli(&["approve", &vid, "--learn"]);
    assert!(!st.success() && e.contains("there is no change set"), "{e}");
    // ... a script that writes a file its operands do not name (a never-learned construct) ...
    let (_, vid) = asks(&env, "sed -i 's/X/y/w out.txt' b.txt");
    let (st, _, e) = env.cli(&["approve", &vid, "--learn"]);
    assert!(
        !st.success() && e.contains("is never learned: script construct"),
        "{e}"
    );
    assert!(read(&env, "out.txt").is_none());
    // ... and with deny, which has no --learn (a usage error, nothing decided).
    let (st, _, e) = env.cli(&["deny", &vid, "--learn"]);
    assert!(
        st.code() == Some(2) && e.contains("unexpected argument '--learn'"),
        "{e}"
    );
    assert_eq!(validation_status(&env, &vid), "pending");

    // `override SIGNATURE clear` forgets: the signature asks again.
    let out = cli_ok(&env, &["override", "sed -i EXPR WS_PATH", "clear"]);
    assert!(out.contains("learning forgotten for 1 client(s)"), "{out}");
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert!(row["clients"].as_array().unwrap().is_empty(), "{row}");
    asks(&env, "sed -i s/c/C/ c.txt");
    assert_eq!(read(&env, "c.txt").as_deref(), Some("c\n"));
}

#[test]
fn a_denial_is_never_overridden_by_learn() {
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let _d = env.start(&[]);
    let (job, vid) = asks(&env, "sed -i s/one/1/ a.txt");
    cli_ok(&env, &["deny", &vid]);
    assert_eq!(final_result(&env, job).0, "denied");
    let (_, vid) = asks(&env, "sed -i s/two/2/ a.txt");
    let (st, _, e) = env.cli(&["approve", &vid, "--learn"]);
    assert!(!st.success(), "{e}");
    assert!(e.contains("--learn never overrides a denial"), "{e}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
}

#[test]
fn notify_gets_one_json_per_validation_then_one_before_expiry_and_the_result_says_how_to_resubmit()
{
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let hook = Collector::start();
    let cfg = format!(
        "validation_ttl_ms = 6000\n[notify]\ncommand = \"{}\"\ntimeout_ms = 10000\nbefore_expiry_ms = 3000\nhosts = [\"127.0.0.1\"]\n",
        hook.command().replace('"', "\\\"")
    );
    let _d = start_with(&env, &cfg, &[]);
    let (j1, v1) = asks(&env, "sed -i s/one/ONE/ a.txt");
    let (j2, v2) = asks(&env, "curl -s http://127.0.0.1:9/");
    let got = hook.wait_matching(2, "new validations", |_| true);
    let first: Vec<&Value> = got.iter().filter(|b| b["event"] == "validation").collect();
    assert_eq!(first.len(), 2, "{got:?}");
    let by_id = |id: &str| *first.iter().find(|b| b["id"] == id).unwrap();
    let b1 = by_id(&v1);
    assert_eq!(b1["job_id"], j1);
    assert_eq!(b1["client"], "local");
    assert_eq!(b1["command"], "sed -i s/one/ONE/ a.txt");
    assert!(b1["risk"].is_number(), "{b1}");
    assert_eq!(b1["change_set"]["paths"][0]["path"], "a.txt", "{b1}");
    assert!(
        b1["change_set"]["diff"].as_str().unwrap().contains("+ONE"),
        "{b1}"
    );
    assert!(b1["approve"]
        .as_str()
        .unwrap()
        .ends_with(&format!("approve {v1}")));
    assert!(b1["deny"]
        .as_str()
        .unwrap()
        .ends_with(&format!("deny {v1}")));
    let b2 = by_id(&v2);
    assert_eq!(b2["change_set"], Value::Null, "{b2}");

    // Nobody answers: one more notice each before the deadline, then `expired` with the hint.
    let got = hook.wait_matching(4, "expiry notices", |_| true);
    let again: Vec<&Value> = got.iter().filter(|b| b["event"] == "expiring").collect();
    assert_eq!(again.len(), 2, "{got:?}");
    for j in [j1, j2] {
        let (st, v, err) = final_result(&env, j);
        assert_eq!(st, "expired", "{v}");
        assert!(
            err.contains("To ask again, submit a new execute_bash job"),
            "{err}"
        );
        assert!(
            v["resubmit"]
                .as_str()
                .unwrap()
                .contains("brainloop enqueue execute_bash"),
            "{v}"
        );
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        hook.bodies.lock().unwrap().len(),
        4,
        "one notice per validation, one before expiry"
    );
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
}

#[test]
fn a_failing_or_hanging_notify_command_blocks_nothing() {
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let d = start_with(
        &env,
        "[notify]\ncommand = \"cat > /dev/null; sleep 60\"\ntimeout_ms = 1000\nhosts = [\"127.0.0.1\"]\n",
        &[],
    );
    let (job, vid) = asks(&env, "sed -i s/one/ONE/ a.txt");
    // Other jobs run meanwhile, and the approval goes through.
    let (_, st, v, _) = submit(&env, "echo still-running");
    assert_eq!(st, "succeeded", "{v}");
    // The hooks task polls pending validations every second: the validation stays pending
    // until its hook has run (and timed out), then the approval goes through.
    let t0 = Instant::now();
    while !d.log_text().contains("notify command failed") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(d.log_text().contains("timed_out=true"), "{}", d.log_text());
    cli_ok(&env, &["approve", &vid]);
    assert_eq!(final_result(&env, job).0, "succeeded");
}

/// A reviewer script: deny when the JSON mentions DENYME, hang on SLEEPME, else approve.
const REVIEWER: &str = r#"#!/bin/bash
input=$(cat)
case "$input" in
  *DENYME*) echo "deny the change renames what the purpose keeps" ;;
  *SLEEPME*) sleep 30 ;;
  *) echo '{"decision": "approve", "reason": "looks fine"}' ;;
esac
"#;

fn reviewer_events(env: &Env) -> Vec<Value> {
    let c = env.metadata();
    let mut s = c
        .prepare("SELECT detail FROM events WHERE kind = 'reviewer' ORDER BY id")
        .unwrap();
    let v: Vec<String> = s
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    v.iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

fn event_of(env: &Env, vid: &str) -> Value {
    let t0 = Instant::now();
    loop {
        if let Some(e) = reviewer_events(env)
            .into_iter()
            .find(|e| e["validation_id"] == vid)
        {
            return e;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no reviewer event for {vid}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reviewer_denies_approves_only_what_a_learned_signature_could_apply_and_asks_on_timeout() {
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let dir = env.root.path().join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("review.sh");
    std::fs::write(&script, REVIEWER).unwrap();
    let cfg = format!(
        "[reviewer]\ncommand = \"bash {}\"\nread = [\"{}\"]\ntimeout_ms = 1500\nhosts = [\"127.0.0.1\"]\n",
        script.display(),
        dir.display()
    );
    let _d = start_with(&env, &cfg, &[]);

    // deny: the job ends denied, nothing applied, audited with the reason.
    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "sed -i s/one/DENYME/ a.txt"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "denied", "{err} {v}");
    assert!(
        err.contains("reviewer:") && err.contains("renames what the purpose keeps"),
        "{err}"
    );
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
    let e = event_of(&env, v["validation_id"].as_str().unwrap());
    assert_eq!(
        (e["answer"].as_str(), e["applied"].as_str()),
        (Some("deny"), Some("deny")),
        "{e}"
    );

    // approve of a learnable change set: applied, audited; not evidence (nothing learned).
    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "sed -i s/two/TWO/ a.txt"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\nTWO\n"));
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert_eq!(
        row["approvals"], 0,
        "a reviewer's approval is not evidence: {row}"
    );
    assert!(row["clients"].as_array().unwrap().is_empty(), "{row}");
    let evidence: i64 = env
        .db("command_security.db")
        .query_row("SELECT count(*) FROM evidence", [], |r| r.get(0))
        .unwrap();
    assert_eq!(evidence, 0);

    // approve of a protected path: ignored, the human is asked, the refusal audited.
    let (_, vid) = asks(&env, "echo hi > .envrc");
    let e = event_of(&env, &vid);
    assert_eq!(
        (e["answer"].as_str(), e["applied"].as_str()),
        (Some("approve"), Some("ask")),
        "{e}"
    );
    assert!(
        e["refusals"].to_string().contains("protected path .envrc"),
        "{e}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(validation_status(&env, &vid), "pending");
    assert!(read(&env, ".envrc").is_none());

    // a hanging reviewer: timeout = ask.
    let (_, vid) = asks(&env, "echo SLEEPME > c.txt");
    let e = event_of(&env, &vid);
    assert_eq!(e["applied"], "ask", "{e}");
    assert_eq!(e["timed_out"], true, "{e}");
    assert_eq!(validation_status(&env, &vid), "pending");
    assert_eq!(read(&env, "c.txt").as_deref(), Some("c\n"));
}

#[test]
fn the_example_llm_reviewer_denies_a_mismatch_against_the_mock_server() {
    common::require_sandbox();
    let env = Env::new();
    setup_ws(&env);
    let mock = MockLlm::script(vec![
        Reply::text(
            r#"{"decision": "deny", "reason": "the purpose is a typo fix but the change rewrites a.txt"}"#,
        ),
        Reply::text(r#"{"decision": "approve", "reason": "matches the purpose"}"#),
    ]);
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviewer");
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        format!(
            "[reviewer]\ncommand = \"python3 {}/llm_reviewer.py\"\nread = [\"{}\"]\nllm = true\ntimeout_ms = 30000\nhosts = [\"127.0.0.1\"]\n",
            examples.display(),
            examples.display()
        ),
    )
    .unwrap();
    let _d = common::start_with_llm(&env, cfg.to_str().unwrap(), &mock, &[]);

    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "sed -i s/one/uno/ a.txt", "purpose": "fix the typo in b.txt"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "denied", "{err} {v}");
    assert!(err.contains("typo fix but the change rewrites"), "{err}");
    let chats = mock.chats();
    assert_eq!(chats.len(), 1, "one review, one call");
    let prompt = chats[0].prompt();
    assert!(
        prompt.contains("fix the typo in b.txt") && prompt.contains("+uno"),
        "{prompt}"
    );
    assert_eq!(chats[0].header("authorization"), Some("Bearer test"));

    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "sed -i s/x/y/ b.txt", "purpose": "replace x by y in b.txt"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(read(&env, "b.txt").as_deref(), Some("y\n"));
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
}
