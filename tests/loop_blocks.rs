//! `loop` block mode through the real daemon, with a scripted mock LLM on 127.0.0.1 whose
//! answers differ per call (`MARK:word` in a block description, `FIX:word` in a feedback):
//! propose → refine twice → commit writes exactly the refined code with no LLM request; the
//! commit's approval flow (pending_validation → approve → written once; deny → nothing); another
//! client sees the session as missing; a committed block refuses refinement; abandon; expiry
//! (on use and by the retention pass); heartbeat counts; a sql block committed in one
//! transaction; targets outside the grants refused before any LLM call.

mod common;

use common::mock_llm::{MockLlm, Reply, Seen};
use common::{final_result, job, run, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn word_after(p: &str, tag: &str) -> Option<String> {
    p.split(tag)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .map(str::to_string)
}

fn system(req: &Seen) -> String {
    req.body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Propose answers `print('<MARK>')`, refine answers `print('<FIX>')`; SQL by keyword. Asked
/// with `response_format` (the default model takes json_schema), the code comes as `{"code"}`.
fn respond(req: &Seen) -> Reply {
    let text = answer(req);
    if req.body["response_format"]["type"] == "json_schema" {
        return Reply::json(&serde_json::json!({ "code": text }));
    }
    match text.strip_prefix("ERROR:") {
        Some(e) => Reply::error(400, e),
        None => Reply::text(&text),
    }
}

fn answer(req: &Seen) -> String {
    let sys = system(req);
    let user = req.body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let sql = sys.contains("SQLite SQL");
    if sys.contains("You improve one block") {
        let feedback = user.split("Feedback to apply:").nth(1).unwrap_or_default();
        let fix = word_after(feedback, "FIX:").unwrap_or_else(|| "fixed".into());
        if sql && fix.starts_with("attach=") {
            let path = fix.trim_start_matches("attach=");
            return format!(
                "```sql\nATTACH DATABASE '{path}' AS e;\nCREATE TABLE e.stolen(a);\n```"
            );
        }
        if sql {
            return String::from(
                "```sql\nINSERT INTO t(a, b) VALUES (10, 'ten');\nINSERT INTO t(a, b) VALUES (11, 'eleven');\n```",
            );
        }
        return format!("```python\nprint('{fix}')\n```");
    }
    if sys.contains("You write one block") {
        if sql {
            // The second statement fails at run time: the transaction must roll back.
            return String::from(
                "```sql\nINSERT INTO t(a, b) VALUES (10, 'ten');\nINSERT INTO missing_table(a) VALUES (1);\n```",
            );
        }
        let mark = word_after(&user, "MARK:").unwrap_or_else(|| "generated".into());
        return format!("```python\nprint('{mark}')\n```");
    }
    "ERROR:unexpected prompt".into()
}

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        r#"
[clients.agent]
file_read = ["{workspace}/**"]
file_write = ["{workspace}/gen/**"]
file_write_auto = ["{workspace}/auto/**", "{workspace}/data/app.db"]
llm = true

[clients.other]
file_read = ["{workspace}/**"]
file_write = ["{workspace}/gen/**"]
file_write_auto = ["{workspace}/auto/**"]
llm = true
"#,
    )
    .unwrap();
    p.display().to_string()
}

fn start(env: &Env, mock: &MockLlm, extra: &[(&str, &str)]) -> common::Daemon {
    for d in ["auto", "gen", "data"] {
        std::fs::create_dir_all(env.workspace.join(d)).unwrap();
    }
    common::start_with_llm(env, &config(env), mock, extra)
}

fn lp(env: &Env, client: &str, params: Value) -> (String, Value, String) {
    run(env, client, "loop", params)
}

fn ok(r: (String, Value, String)) -> Value {
    assert_eq!(r.0, "succeeded", "{} {}", r.2, r.1);
    r.1
}

fn propose(env: &Env, client: &str, blocks: Value) -> Value {
    ok(lp(
        env,
        client,
        json!({"mode": "propose", "blocks": blocks}),
    ))
}

fn refine(env: &Env, sid: &str, block: &str, feedback: &str) -> (String, Value, String) {
    lp(
        env,
        "agent",
        json!({"mode": "refine", "session_id": sid, "block_id": block, "feedback": feedback}),
    )
}

fn events(env: &Env, kind: &str) -> Vec<Value> {
    let c = env.metadata();
    let mut s = c
        .prepare("SELECT detail FROM events WHERE kind = ?1 ORDER BY id")
        .unwrap();
    let rows = s
        .query_map([kind], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|r| serde_json::from_str(&r.unwrap()).unwrap())
        .collect();
    rows
}

fn session_status(env: &Env, sid: &str) -> String {
    env.lifecycle()
        .query_row(
            "SELECT status FROM sessions WHERE session_id = ?1",
            [sid],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn proposed_refined_twice_committed_writes_the_refined_code_without_asking_the_model() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([
            {"description": "greet MARK:alpha", "type": "python", "target": "auto/a.py"},
            {"description": "bye MARK:beta", "type": "python", "target": "auto/b.py"}
        ]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(v["status"], "open");
    assert_eq!(v["blocks"][0]["id"], "b1");
    assert_eq!(v["blocks"][0]["code"], "print('alpha')\n", "{v}");
    assert_eq!(v["blocks"][1]["code"], "print('beta')\n", "{v}");
    assert_eq!(v["blocks"][0]["iterations"], 0);
    assert_eq!(v["usage"]["calls"], 2, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 20, "{v}");
    assert_eq!(mock.chats().len(), 2);
    for c in mock.chats() {
        assert!((c.body["temperature"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    }
    assert!(
        !env.workspace.join("auto/a.py").exists(),
        "propose writes nothing"
    );

    let r = ok(refine(&env, &sid, "b1", "use logging FIX:one"));
    assert_eq!(r["block"]["code"], "print('one')\n");
    assert_eq!(r["block"]["iterations"], 1);
    // The model saw the current code and the feedback.
    let p = mock.chats()[2].prompt();
    assert!(p.contains("print('alpha')") && p.contains("FIX:one"), "{p}");
    let r = ok(refine(&env, &sid, "b1", "shorter FIX:two"));
    assert_eq!(r["block"]["iterations"], 2);
    let p = mock.chats()[3].prompt();
    assert!(
        p.contains("print('one')") && !p.contains("print('alpha')"),
        "the second refinement starts from the first one's code: {p}"
    );

    let a = ok(lp(
        &env,
        "agent",
        json!({"mode": "status", "session_id": sid, "block_id": "b1"}),
    ));
    let b1 = &a["blocks"][0];
    assert_eq!(b1["code"], "print('two')\n");
    assert_eq!(b1["iterations"], 2);
    assert_eq!(b1["status"], "open");
    let h = b1["history"].as_array().unwrap();
    assert_eq!(h.len(), 3, "{a}");
    assert_eq!(h[0]["code"], "print('alpha')\n");
    assert_eq!(h[0]["feedback"], Value::Null);
    assert_eq!(h[1]["code"], "print('one')\n");
    assert_eq!(h[1]["feedback"], "use logging FIX:one");
    assert_eq!(h[2]["feedback"], "shorter FIX:two");
    assert_eq!(events(&env, "session_audit").len(), 1);
    assert_eq!(events(&env, "session_audit")[0]["session_id"], sid);

    let before = mock.chats().len();
    let c = ok(lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
    ));
    assert_eq!(c["policy_used"], "auto_grant", "{c}");
    assert_eq!(c["session_status"], "open", "b2 is still open");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("auto/a.py")).unwrap(),
        "print('two')\n",
        "the committed file is exactly the refined code"
    );
    assert_eq!(
        mock.chats().len(),
        before,
        "commit never asks the model (no regeneration)"
    );
    // A committed block refuses refinement (and costs no token).
    let (st, _, err) = refine(&env, &sid, "b1", "again FIX:three");
    assert_eq!(st, "failed");
    assert!(err.contains("committed"), "{err}");
    // Committing it again is refused too.
    let (st, _, err) = lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
    );
    assert_eq!(st, "failed");
    assert!(err.contains("already committed"), "{err}");
    // Commit without block_id: every open block; the session ends committed.
    let c = ok(lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid}),
    ));
    assert_eq!(c["session_status"], "committed", "{c}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("auto/b.py")).unwrap(),
        "print('beta')\n"
    );
    assert_eq!(mock.chats().len(), before);
    assert_eq!(session_status(&env, &sid), "committed");
    let commits = events(&env, "session_commit");
    assert_eq!(commits.len(), 2, "{commits:?}");
    assert_eq!(commits[0]["blocks"], json!(["b1"]));
    assert_eq!(commits[1]["blocks"], json!(["b2"]));
    // An ended session refuses changes.
    let (st, _, err) = lp(&env, "agent", json!({"mode": "abandon", "session_id": sid}));
    assert_eq!(st, "failed");
    assert!(err.contains("committed"), "{err}");
}

#[test]
fn a_commit_asks_a_human_writes_once_on_approval_and_nothing_on_denial() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([
            {"description": "x MARK:xray", "type": "python", "target": "gen/x.py"},
            {"description": "y MARK:yankee", "type": "python", "target": "gen/y.py"}
        ]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    ok(refine(&env, &sid, "b1", "FIX:xfixed"));
    let calls = mock.chats().len();

    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
    );
    let (st, p, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {p}");
    let vid = p["validation_id"].as_str().unwrap().to_string();
    assert!(
        p["preview"].as_str().unwrap().contains("+print('xfixed')"),
        "{p}"
    );
    assert!(!env.workspace.join("gen/x.py").exists());
    let (_, listing, _) = env.cli(&["validations"]);
    assert!(
        listing.contains(&vid) && listing.contains("gen/x.py"),
        "{listing}"
    );
    // While the commit waits, the block cannot be refined (what the human sees stays true).
    let (st, _, err) = refine(&env, &sid, "b1", "FIX:sneaky");
    assert_eq!(st, "failed");
    assert!(err.contains("being committed"), "{err}");
    let (ok_, out, e) = env.cli(&["approve", &vid]);
    assert!(ok_.success(), "{out}{e}");
    let (st, r, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {r}");
    assert_eq!(r["policy_used"], "approved");
    assert_eq!(r["validation_id"], vid);
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("gen/x.py")).unwrap(),
        "print('xfixed')\n"
    );
    assert_eq!(mock.chats().len(), calls, "approval never regenerates");
    let commits = events(&env, "session_commit");
    assert_eq!(commits.len(), 1, "written once: {commits:?}");
    let a = ok(lp(
        &env,
        "agent",
        json!({"mode": "status", "session_id": sid, "block_id": "b1"}),
    ));
    assert_eq!(a["blocks"][0]["status"], "committed");
    assert_eq!(a["blocks"][0]["committed"]["job_id"], id);

    // Deny: nothing written, the block stays open and can be refined again.
    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "commit", "session_id": sid, "block_id": "b2"}),
    );
    let (st, p, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {p}");
    let vid = p["validation_id"].as_str().unwrap().to_string();
    let (ok_, out, e) = env.cli(&["deny", &vid]);
    assert!(ok_.success(), "{out}{e}");
    let (st, _, _) = final_result(&env, id);
    assert_eq!(st, "denied");
    assert!(!env.workspace.join("gen/y.py").exists());
    assert_eq!(events(&env, "session_commit").len(), 1);
    let a = ok(lp(
        &env,
        "agent",
        json!({"mode": "status", "session_id": sid, "block_id": "b2"}),
    ));
    assert_eq!(a["blocks"][0]["status"], "open");
    let r = ok(refine(&env, &sid, "b2", "FIX:yfixed"));
    assert_eq!(r["block"]["code"], "print('yfixed')\n");
    assert_eq!(session_status(&env, &sid), "open");
}

#[test]
fn another_client_cannot_audit_refine_commit_or_abandon_the_session() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([{"description": "MARK:mine", "type": "python", "target": "auto/mine.py"}]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    let calls = mock.chats().len();
    let bogus = "blocks-00000000000000000000000000000000";
    let (st, _, missing) = lp(
        &env,
        "other",
        json!({"mode": "status", "session_id": bogus}),
    );
    assert_eq!(st, "failed");
    let expected = missing.replace(bogus, &sid);
    for params in [
        json!({"mode": "status", "session_id": sid}),
        json!({"mode": "refine", "session_id": sid, "block_id": "b1", "feedback": "FIX:theirs"}),
        json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
        json!({"mode": "commit", "session_id": sid}),
        json!({"mode": "abandon", "session_id": sid}),
    ] {
        let (st, r, err) = lp(&env, "other", params.clone());
        assert_eq!(st, "failed", "{params} {r}");
        assert_eq!(
            err, expected,
            "a foreign session reads exactly as a missing one"
        );
    }
    assert_eq!(
        mock.chats().len(),
        calls,
        "no token spent for the other client"
    );
    assert!(!env.workspace.join("auto/mine.py").exists());
    assert_eq!(session_status(&env, &sid), "open");
    assert!(events(&env, "session_audit").is_empty());
    // The owner still can.
    ok(lp(
        &env,
        "agent",
        json!({"mode": "status", "session_id": sid}),
    ));
}

#[test]
fn abandon_expiry_and_heartbeat_counts() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(
        &env,
        &mock,
        &[
            ("BRAINLOOP_LOOP_SESSION_TTL_MS", "3600000"),
            ("BRAINLOOP_RETENTION_INTERVAL_MS", "300"),
        ],
    );
    let mut sids = Vec::new();
    for i in 0..4 {
        let v = propose(
            &env,
            "agent",
            json!([{"description": format!("MARK:s{i}"), "type": "python", "target": format!("auto/s{i}.py")}]),
        );
        sids.push(v["session_id"].as_str().unwrap().to_string());
    }
    // Abandon.
    let v = ok(lp(
        &env,
        "agent",
        json!({"mode": "abandon", "session_id": sids[0]}),
    ));
    assert_eq!(v["status"], "abandoned");
    let calls = mock.chats().len();
    let (st, _, err) = refine(&env, &sids[0], "b1", "FIX:late");
    assert_eq!(st, "failed");
    assert!(err.contains("abandoned"), "{err}");
    let (st, _, err) = lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sids[0]}),
    );
    assert_eq!(st, "failed");
    assert!(err.contains("abandoned"), "{err}");
    assert!(!env.workspace.join("auto/s0.py").exists());
    // Two sessions left untouched for two hours (TTL one hour).
    env.lifecycle()
        .execute(
            "UPDATE sessions SET updated_at = updated_at - 7200000 WHERE session_id IN (?1, ?2)",
            [&sids[1], &sids[2]],
        )
        .unwrap();
    // sids[1] is used: refused as expired, and marked so.
    for params in [
        json!({"mode": "refine", "session_id": sids[1], "block_id": "b1", "feedback": "FIX:late"}),
        json!({"mode": "status", "session_id": sids[1]}),
        json!({"mode": "commit", "session_id": sids[1]}),
    ] {
        let (st, _, err) = lp(&env, "agent", params);
        assert_eq!(st, "failed");
        assert!(err.contains("expired"), "{err}");
    }
    assert_eq!(mock.chats().len(), calls, "an ended session costs no token");
    assert!(!env.workspace.join("auto/s1.py").exists());
    // sids[2] is never used again: the retention pass expires it.
    let t0 = Instant::now();
    while session_status(&env, &sids[2]) != "expired" {
        assert!(
            t0.elapsed() < LONG,
            "the retention pass did not expire the idle session"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(session_status(&env, &sids[1]), "expired");
    assert_eq!(
        session_status(&env, &sids[3]),
        "open",
        "a fresh session stays open"
    );
    // The heartbeat counts open sessions as active and ended ones as completed.
    let t0 = Instant::now();
    loop {
        let (active, completed): (i64, i64) = env
            .output()
            .query_row(
                "SELECT sessions_active, sessions_completed FROM heartbeat ORDER BY timestamp DESC, rowid DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        if (active, completed) == (1, 3) {
            break;
        }
        assert!(
            t0.elapsed() < LONG,
            "heartbeat shows active {active}, completed {completed}; want 1, 3"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sql_block_commits_in_one_transaction_to_a_granted_database() {
    let env = Env::new();
    std::fs::create_dir_all(env.workspace.join("data")).unwrap();
    let db = env.workspace.join("data/app.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x');")
            .unwrap();
    }
    let count = || -> i64 {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    };
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([{"description": "add the rows ten and eleven", "type": "sql", "target": "data/app.db"}]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    assert_eq!(v["blocks"][0]["sql"]["writes"], true, "{v}");
    assert!(
        mock.chats()[0].prompt().contains("CREATE TABLE t"),
        "the schema is in the prompt"
    );
    // The proposed script fails on its second statement: nothing is kept.
    let (st, r, err) = lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
    );
    assert_eq!(st, "failed", "{r}");
    assert!(err.contains("rolled back"), "{err}");
    assert_eq!(count(), 1, "the first INSERT was rolled back");
    let a = ok(lp(
        &env,
        "agent",
        json!({"mode": "status", "session_id": sid}),
    ));
    assert_eq!(a["blocks"][0]["status"], "open");
    // A refinement that tries to reach another database through ATTACH is refused at commit.
    let evil = env.root.path().join("evil.db");
    let r = ok(refine(
        &env,
        &sid,
        "b1",
        &format!("FIX:attach={}", evil.display()),
    ));
    assert!(r["block"]["sql"]["error"].is_string(), "{r}");
    let (st, _, err) = lp(&env, "agent", json!({"mode": "commit", "session_id": sid}));
    assert_eq!(st, "failed");
    assert!(err.contains("refused or invalid"), "{err}");
    assert!(!evil.exists(), "ATTACH never ran");
    assert_eq!(count(), 1);
    // Refined into a valid script, committed: both rows, one transaction, no model call.
    ok(refine(
        &env,
        &sid,
        "b1",
        "the second table does not exist FIX:sql",
    ));
    let calls = mock.chats().len();
    let c = ok(lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid, "block_id": "b1"}),
    ));
    assert_eq!(c["committed"][0]["changes"], 2, "{c}");
    assert_eq!(c["committed"][0]["read_only"], false);
    assert_eq!(c["session_status"], "committed");
    assert_eq!(count(), 3);
    let names: Vec<String> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut s = conn.prepare("SELECT b FROM t ORDER BY a").unwrap();
        let v = s
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        v
    };
    assert_eq!(names, ["x", "ten", "eleven"]);
    assert_eq!(mock.chats().len(), calls);
}

#[test]
fn targets_outside_the_grants_are_refused_before_any_llm_call() {
    let env = Env::new();
    std::fs::create_dir_all(env.workspace.join("auto")).unwrap();
    std::fs::write(env.workspace.join("auto/exists.py"), "keep\n").unwrap();
    let outside = env.root.path().join("outside.db");
    rusqlite::Connection::open(&outside)
        .unwrap()
        .execute_batch("CREATE TABLE t(a)")
        .unwrap();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let good = json!({"description": "MARK:fine", "type": "python", "target": "auto/fine.py"});
    for (bad, want) in [
        (
            json!({"description": "MARK:x", "type": "python", "target": "../escape.py"}),
            "denied",
        ),
        (
            json!({"description": "MARK:x", "type": "python", "target": "/etc/brainloop-test.py"}),
            "denied",
        ),
        (
            json!({"description": "MARK:x", "type": "python", "target": "src/not-writable.py"}),
            "denied",
        ),
        (
            json!({"description": "MARK:x", "type": "sql", "target": outside.display().to_string()}),
            "denied",
        ),
        (
            json!({"description": "MARK:x", "type": "python", "target": "auto/exists.py"}),
            "failed",
        ),
    ] {
        let (st, r, err) = lp(
            &env,
            "agent",
            json!({"mode": "propose", "blocks": [good.clone(), bad.clone()]}),
        );
        assert_eq!(st, want, "{bad}: {err} {r}");
        assert!(err.contains("block 2"), "{err}");
        assert!(err.contains("nothing was generated"), "{err}");
    }
    assert!(mock.chats().is_empty(), "no LLM call for a refused target");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("auto/exists.py")).unwrap(),
        "keep\n"
    );
    let n: i64 = env
        .lifecycle()
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "no session created");
    // With overwrite declared, the same existing target is accepted.
    let v = propose(
        &env,
        "agent",
        json!([{"description": "MARK:over", "type": "python", "target": "auto/exists.py", "overwrite": true}]),
    );
    let sid = v["session_id"].as_str().unwrap();
    let c = ok(lp(
        &env,
        "agent",
        json!({"mode": "commit", "session_id": sid}),
    ));
    assert_eq!(c["committed"][0]["overwrite"], true, "{c}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("auto/exists.py")).unwrap(),
        "print('over')\n"
    );
}

#[test]
fn an_approved_commit_writes_nothing_if_the_stored_block_was_tampered_with() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([{"description": "MARK:honest", "type": "python", "target": "gen/t.py"}]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "commit", "session_id": sid}),
    );
    let (st, p, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {p}");
    let vid = p["validation_id"].as_str().unwrap().to_string();
    // The session's code is changed behind the human's back (direct write to lifecycle.db).
    env.lifecycle()
        .execute(
            "UPDATE sessions SET state = replace(state, 'honest', 'evil') WHERE session_id = ?1",
            [&sid],
        )
        .unwrap();
    let (ok_, out, e) = env.cli(&["approve", &vid]);
    assert!(ok_.success(), "{out}{e}");
    let (st, r, err) = final_result(&env, id);
    assert_ne!(st, "succeeded", "{r}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!env.workspace.join("gen/t.py").exists());
    assert!(events(&env, "session_commit").is_empty());
}

#[test]
fn a_session_and_a_waiting_commit_survive_a_kill_9_and_resume_after_approval() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let d = start(&env, &mock, &[]);
    let v = propose(
        &env,
        "agent",
        json!([{"description": "MARK:durable", "type": "python", "target": "gen/d.py"}]),
    );
    let sid = v["session_id"].as_str().unwrap().to_string();
    let id = job(
        &env,
        "agent",
        "loop",
        &json!({"mode": "commit", "session_id": sid}),
    );
    let (st, p, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {p}");
    let vid = p["validation_id"].as_str().unwrap().to_string();
    d.kill9();
    let _d = start(&env, &mock, &[]);
    let (ok_, out, e) = env.cli(&["approve", &vid]);
    assert!(ok_.success(), "{out}{e}");
    let (st, r, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {r}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("gen/d.py")).unwrap(),
        "print('durable')\n"
    );
    assert_eq!(events(&env, "session_commit").len(), 1);
    assert_eq!(session_status(&env, &sid), "committed");
    assert_eq!(mock.chats().len(), 1, "only the propose asked the model");
}
