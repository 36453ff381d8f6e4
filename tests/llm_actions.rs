//! The LLM actions through the real daemon, with `BRAINLOOP_LLM_BASE_URL` pointing at a mock
//! server on 127.0.0.1 and `CEREBRAS_API_KEY=test`: generate_file asks and then writes exactly
//! the approved content (never regenerated), never overwrites unasked, skips the ask under an
//! auto FILE_WRITE grant, and cannot be steered outside its grant (`..`, absolute paths,
//! symlinks, a swap after the ask, tampered content); generate_sql runs reads at once and asks
//! before writing; audit_code reads only granted files and writes nothing; explore's schema;
//! metrics; no key.

mod common;

use common::mock_llm::{MockLlm, Reply, Seen};
use common::{final_result, job, run, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Answers by kind of request; `MARK:word` in a prompt shows up in the generated code.
fn respond(req: &Seen) -> Reply {
    let p = req.prompt();
    let mark = p
        .split("MARK:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("generated")
        .to_string();
    // Asked with response_format (the default model takes json_schema): a JSON answer.
    let structured = req.body["response_format"]["type"] == "json_schema";
    if p.contains("precise code generator") {
        Reply::text(&format!("```python\nprint('{mark}')\n```"))
    } else if p.contains("You write SQLite SQL") {
        let sql = if p.contains("COUNT_ROWS") {
            "SELECT count(*) AS n FROM t;"
        } else if p.contains("ADD_ROW") {
            "INSERT INTO t(a, b) VALUES (3, 'z');"
        } else if p.contains("ATTACH_IT") {
            "ATTACH DATABASE '/tmp/brainloop-llm-test-evil.db' AS e;"
        } else {
            "SELECT 1;"
        };
        if structured {
            Reply::json(&json!({"sql": sql}))
        } else {
            Reply::text(&format!("```sql\n{sql}\n```"))
        }
    } else if p.contains("code reviewer") {
        if structured {
            Reply::json(&json!({"summary": "A one-line script.", "findings": [
                {"severity": "low", "category": "practice", "line": 1, "title": "prints instead of logging",
                 "detail": "print() goes to stdout", "recommendation": "use logging"}]}))
        } else {
            Reply::text("# Code Audit Report\n\n## Problems\n- line 1: prints instead of logging\n")
        }
    } else {
        Reply::text_no_done(
            &json!({"patterns": [{"name": "printing", "evidence": [{"path": "src/app.py", "line": 1}, {"path": "elsewhere.py", "line": 1}], "summary": "prints"}], "summary": "a tiny script"}).to_string(),
        )
    }
}

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        r#"
[clients.agent]
file_read = ["{workspace}/**"]
file_write = ["{workspace}/gen/**"]
file_write_auto = ["{workspace}/auto/**"]
llm = true

[clients.reader]
file_read = ["{workspace}/src/**"]
llm = true
"#,
    )
    .unwrap();
    p.display().to_string()
}

fn start(env: &Env, mock: &MockLlm) -> common::Daemon {
    common::start_with_llm(env, &config(env), mock, &[])
}

fn approve(env: &Env, id: &str) {
    let (st, out, err) = env.cli(&["approve", id]);
    assert!(st.success(), "{out}{err}");
}

fn gen(env: &Env, client: &str, params: Value) -> (i64, String, Value, String) {
    let id = job(env, client, "generate_file", &params);
    let (st, v, e) = settled(env, id);
    (id, st, v, e)
}

#[test]
fn generate_file_asks_then_writes_exactly_the_approved_content() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    let (id, st, v, err) = gen(
        &env,
        "local",
        json!({"verified_prompt": "A greeting. MARK:one", "output_path": "hello.py", "code_type": "python"}),
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    assert!(
        v["preview"].as_str().unwrap().contains("+print('one')"),
        "{v}"
    );
    assert!(v["command"].as_str().unwrap().contains("hello.py"), "{v}");
    assert!(
        !env.workspace.join("hello.py").exists(),
        "nothing written before approval"
    );
    let (_, listing, _) = env.cli(&["validations"]);
    assert!(
        listing.contains(&vid) && listing.contains("hello.py"),
        "{listing}"
    );
    // The producer edits the row after the ask: the snapshot is what runs.
    env.input()
        .execute(
            "UPDATE jobs SET params = '{\"prompt\": \"x\", \"output_path\": \"evil.py\"}' WHERE id = ?1",
            [id],
        )
        .unwrap();
    approve(&env, &vid);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["policy_used"], "approved");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("hello.py")).unwrap(),
        "print('one')\n"
    );
    assert!(!env.workspace.join("evil.py").exists());
    assert_eq!(
        mock.chats().len(),
        1,
        "approval writes the stored content, never regenerates"
    );
    let req = &mock.chats()[0];
    assert!((req.body["temperature"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    assert_eq!(req.header("authorization"), Some("Bearer test"));
    // Nothing of the key in any database.
    for f in [
        "brainloop.lifecycle.db",
        "brainloop.output.db",
        "brainloop.metadata.db",
        "command_security.db",
    ] {
        let bytes = std::fs::read(env.data.join(f)).unwrap();
        let wal = std::fs::read(env.data.join(format!("{f}-wal"))).unwrap_or_default();
        for b in [bytes, wal] {
            assert!(!b.windows(11).any(|w| w == b"Bearer test"), "{f}");
        }
    }
    // The start-up model check was recorded and status shows it.
    let (_, out, _) = env.cli(&["status", "--json"]);
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["llm"]["ok"], true, "{out}");
    // Metrics rows appear.
    let t0 = Instant::now();
    loop {
        let n: i64 = env
            .output()
            .query_row(
                "SELECT count(*) FROM metrics WHERE name IN ('cerebras_tokens_prompt', 'cerebras_tokens_completion', 'cerebras_latency_ms')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if n >= 3 {
            break;
        }
        assert!(t0.elapsed() < LONG, "no cerebras metrics");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, v, err) = run(&env, "local", "get_stats", json!({}));
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["llm"]["tokens_today_utc"], 15, "{v}");
    assert_eq!(
        v["llm"]["last_hour"]["cerebras_tokens_prompt"]["sum"], 10.0,
        "{v}"
    );
    let used: i64 = env
        .lifecycle()
        .query_row(
            "SELECT sum(prompt_tokens + completion_tokens) FROM llm_usage",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(used, 15, "daily usage persisted");
}

#[test]
fn a_different_content_than_the_approved_one_is_never_written() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    let (id, st, v, _) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:two", "output_path": "two.py"}),
    );
    assert_eq!(st, "pending_validation");
    env.lifecycle()
        .execute(
            "UPDATE llm_pending SET content = 'import os; os.system(\"rm -rf ~\")' WHERE job_id = ?1",
            [id],
        )
        .unwrap();
    approve(&env, v["validation_id"].as_str().unwrap());
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "denied", "{err}");
    assert!(!env.workspace.join("two.py").exists());
}

#[test]
fn generate_file_never_overwrites_unasked() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    std::fs::write(env.workspace.join("keep.py"), "print('old')\n").unwrap();
    let (_, st, _, err) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:new", "output_path": "keep.py"}),
    );
    assert_eq!(st, "failed");
    assert!(
        err.contains("already exists") && err.contains("overwrite"),
        "{err}"
    );
    assert!(
        mock.chats().is_empty(),
        "no token spent on a refused target"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("keep.py")).unwrap(),
        "print('old')\n"
    );
    // With overwrite: asks, showing a diff, then replaces.
    let (id, st, v, _) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:new", "output_path": "keep.py", "overwrite": true}),
    );
    assert_eq!(st, "pending_validation");
    let preview = v["preview"].as_str().unwrap();
    assert!(
        preview.contains("-print('old')") && preview.contains("+print('new')"),
        "{preview}"
    );
    assert!(v["command"].as_str().unwrap().contains("REPLACES"), "{v}");
    approve(&env, v["validation_id"].as_str().unwrap());
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("keep.py")).unwrap(),
        "print('new')\n"
    );
    // A file that appears between the ask and the approval is not replaced either.
    let (id, st, v, _) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:late", "output_path": "late.py"}),
    );
    assert_eq!(st, "pending_validation");
    std::fs::write(env.workspace.join("late.py"), "mine\n").unwrap();
    approve(&env, v["validation_id"].as_str().unwrap());
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "failed", "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("late.py")).unwrap(),
        "mine\n"
    );
}

#[test]
fn an_auto_write_grant_skips_the_ask_and_paths_outside_the_grant_are_denied() {
    let env = Env::new();
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(env.workspace.join("gen/sub")).unwrap();
    std::fs::create_dir_all(env.workspace.join("auto")).unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace.join("gen/link")).unwrap();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    let (_, st, v, err) = gen(
        &env,
        "agent",
        json!({"prompt": "MARK:auto", "output_path": "auto/x/y.py"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["policy_used"], "auto_grant");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("auto/x/y.py")).unwrap(),
        "print('auto')\n"
    );

    let chats = mock.chats().len();
    let abs_outside = outside.join("abs.py").display().to_string();
    for p in [
        "../outside/rel.py",
        abs_outside.as_str(),
        "gen/../escape.py",
        "gen/link/through_link.py",
        "src/not_granted.py",
        "/etc/brainloop-test.py",
    ] {
        let (_, st, _, err) = gen(
            &env,
            "agent",
            json!({"prompt": "MARK:evil", "output_path": p}),
        );
        assert_eq!(st, "denied", "{p}: {err}");
    }
    assert_eq!(mock.chats().len(), chats, "no token spent on a denied path");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(!env.workspace.join("escape.py").exists());

    // A swap after the ask: the approved write lands nowhere.
    let (id, st, v, _) = gen(
        &env,
        "agent",
        json!({"prompt": "MARK:swap", "output_path": "gen/sub/a.py"}),
    );
    assert_eq!(st, "pending_validation");
    std::fs::remove_dir(env.workspace.join("gen/sub")).unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace.join("gen/sub")).unwrap();
    approve(&env, v["validation_id"].as_str().unwrap());
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "denied", "{err}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // A client without FILE_WRITE at all is refused before anything.
    let (_, st, _, err) = gen(
        &env,
        "reader",
        json!({"prompt": "x", "output_path": "src/x.py"}),
    );
    assert_eq!(st, "denied", "{err}");
    assert!(err.contains("FILE_WRITE"), "{err}");
}

fn make_db(env: &Env) -> std::path::PathBuf {
    let p = env.workspace.join("data.db");
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch("CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
        .unwrap();
    p
}

#[test]
fn generate_sql_reads_at_once_and_asks_before_writing() {
    let env = Env::new();
    let db = make_db(&env);
    std::fs::create_dir_all(env.workspace.join("src")).unwrap();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    let (st, v, err) = run(
        &env,
        "local",
        "generate_sql",
        json!({"verified_prompt": "COUNT_ROWS", "db_path": "data.db"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["read_only"], true);
    assert_eq!(v["statements"][0]["rows"], json!([[2]]));
    assert!(
        mock.chats()[0].prompt().contains("CREATE TABLE t"),
        "the schema is in the prompt"
    );

    let id = job(
        &env,
        "local",
        "generate_sql",
        &json!({"prompt": "ADD_ROW", "database": "data.db"}),
    );
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    assert!(
        v["preview"].as_str().unwrap().contains("INSERT INTO t"),
        "{v}"
    );
    let count = || -> i64 {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(count(), 2);
    approve(&env, v["validation_id"].as_str().unwrap());
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["changes"], 1);
    assert_eq!(count(), 3);

    let (st, _, err) = run(
        &env,
        "local",
        "generate_sql",
        json!({"prompt": "ATTACH_IT", "database": "data.db"}),
    );
    assert_eq!(st, "failed", "{err}");
    assert!(!std::path::Path::new("/tmp/brainloop-llm-test-evil.db").exists());

    // Writing needs FILE_WRITE on the database: the agent can read it but not write it.
    let (st, _, err) = run(
        &env,
        "agent",
        "generate_sql",
        json!({"prompt": "ADD_ROW", "database": "data.db"}),
    );
    assert_eq!(st, "denied", "{err}");
    assert!(err.contains("FILE_WRITE"), "{err}");
    assert_eq!(count(), 3);
    // Never brainloop's own databases.
    let own = env.data.join("brainloop.output.db").display().to_string();
    let (st, _, err) = run(
        &env,
        "local",
        "generate_sql",
        json!({"prompt": "COUNT_ROWS", "database": own}),
    );
    assert_eq!(st, "denied", "{err}");
}

#[test]
fn audit_code_reads_only_granted_files_and_writes_nothing_and_explore_has_its_schema() {
    let env = Env::new();
    std::fs::create_dir_all(env.workspace.join("src")).unwrap();
    let file = env.workspace.join("src/app.py");
    std::fs::write(&file, "print('hi')\n").unwrap();
    std::fs::write(env.workspace.join("secret.py"), "KEY = 1\n").unwrap();
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock);
    let (st, v, err) = run(
        &env,
        "reader",
        "audit_code",
        json!({"file_path": "src/app.py", "audit_prompt": "security"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    // Structured: the findings, and seed 001's Markdown rendered from them.
    assert_eq!(v["findings"][0]["line"], 1, "{v}");
    assert_eq!(v["findings"][0]["severity"], "low", "{v}");
    let audit = v["audit"].as_str().unwrap();
    assert!(
        audit.starts_with("## Summary") && audit.contains("prints instead of logging"),
        "{v}"
    );
    assert_eq!(
        mock.chats().last().unwrap().body["response_format"]["json_schema"]["name"],
        "code_audit"
    );
    assert!(v["message"].as_str().unwrap().contains("no files modified"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "print('hi')\n");
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        before
    );
    let req = mock.chats().last().unwrap().clone();
    assert!((req.body["temperature"].as_f64().unwrap() - 0.3).abs() < 1e-6);
    let chats = mock.chats().len();
    for p in ["secret.py", "src/../secret.py", "/etc/passwd"] {
        let (st, _, err) = run(&env, "reader", "audit_code", json!({"file_path": p}));
        assert_eq!(st, "denied", "{p}: {err}");
    }
    assert_eq!(
        mock.chats().len(),
        chats,
        "a denied file is never sent to the model"
    );

    let (st, v, err) = run(
        &env,
        "reader",
        "explore",
        json!({"description": "output habits", "type": "code", "sources": ["src/app.py"]}),
    );
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(
        v["patterns"],
        json!([{"name": "printing", "evidence": [{"path": "src/app.py", "line": 1}], "summary": "prints"}])
    );
    assert_eq!(v["summary"], "a tiny script");
    assert!(
        (mock.chats().last().unwrap().body["temperature"]
            .as_f64()
            .unwrap()
            - 0.6)
            .abs()
            < 1e-6
    );
    let (st, _, _) = run(
        &env,
        "reader",
        "explore",
        json!({"topic": "t", "sources": ["secret.py"]}),
    );
    assert_eq!(st, "denied");
}

#[test]
fn without_a_key_llm_actions_fail_clearly_and_the_rest_keeps_working() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = env.start(&[("BRAINLOOP_LLM_BASE_URL", &mock.base_url())]);
    let (st, _, err) = run(
        &env,
        "local",
        "generate_file",
        json!({"prompt": "x", "output_path": "x.py"}),
    );
    assert_eq!(st, "failed");
    assert!(err.contains("CEREBRAS_API_KEY"), "{err}");
    let (st, v, err) = run(
        &env,
        "local",
        "execute_bash",
        json!({"command": "echo still here"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["stdout"], "still here\n");
    assert!(mock.seen().is_empty(), "nothing sent without a key");
    let t0 = Instant::now();
    loop {
        let (_, out, _) = env.cli(&["status", "--json"]);
        let s: Value = serde_json::from_str(&out).unwrap();
        if !s["llm"].is_null() {
            assert_eq!(s["llm"]["ok"], false);
            assert!(s["llm"]["error"]
                .as_str()
                .unwrap()
                .contains("CEREBRAS_API_KEY"));
            break;
        }
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(50));
    }
}
