//! `read_code` through the real daemon (issue 25), the model being a mock server on 127.0.0.1:
//! the digest is validated and cached by every prompt input (a second read of the same file sends
//! no request, counted at the mock; a copy under another name or a changed file does), token
//! use is recorded and the daily budget applies; a malformed or schema-violating answer gives the
//! extraction alone, saying why, and is never cached; without a key or the llm grant, the
//! extraction alone, saying so. Directory mode: .gitignore respected, per-file extraction and a
//! project digest, and symlinks planted by the agent (to an outside canary file and directory,
//! and the requested directory itself) never make the worker read outside the grant.

mod common;

use common::mock_llm::{MockLlm, Reply, Seen};
use common::{run, Env};
use serde_json::{json, Value};

fn digest_json(purpose: &str) -> String {
    json!({"purpose": purpose,
           "components": [{"name": "parse", "role": "reads numbers"}],
           "patterns": ["small pure functions"],
           "conventions": ["snake_case"],
           "entry_points": ["main"]})
    .to_string()
}

fn respond(req: &Seen) -> Reply {
    let p = req.prompt();
    if p.contains("MALFORMED_ANSWER") {
        Reply::text("I think this file parses numbers.")
    } else if p.contains("SCHEMA_VIOLATION") {
        Reply::text(&json!({"purpose": 42, "components": "many", "extra": true}).to_string())
    } else if p.contains("Summarise the project") {
        Reply::text(&format!(
            "```json\n{}\n```",
            digest_json("the whole project")
        ))
    } else {
        Reply::text_no_done(&digest_json("a file"))
    }
}

fn config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        r#"
[clients.agent]
file_read = ["{workspace}/**"]
llm = true

[clients.nollm]
file_read = ["{workspace}/**"]
"#,
    )
    .unwrap();
    p.display().to_string()
}

fn read(env: &Env, client: &str, params: Value) -> (String, Value, String) {
    run(env, client, "read_code", params)
}

fn chats(mock: &MockLlm) -> usize {
    mock.chats().len()
}

fn usage_requests(env: &Env) -> i64 {
    env.lifecycle()
        .query_row(
            "SELECT coalesce(sum(requests), 0) FROM llm_usage",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn the_digest_is_validated_cached_by_content_and_costs_no_tokens_twice() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, &config(&env), &mock, &[]);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sandbox/guarantees.rs");
    std::fs::copy(&src, env.workspace.join("guarantees.rs")).unwrap();

    let (st, v, err) = read(&env, "agent", json!({"path": "guarantees.rs"}));
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["parser"], "tree-sitter-rust", "{v}");
    assert_eq!(v["model_digest_status"], "generated", "{v}");
    assert_eq!(v["model_digest"]["purpose"], "a file");
    assert_eq!(v["llm"]["prompt_tokens"], 10);
    let fns = v["digest"]["functions"].to_string();
    for f in ["for_set", "unmet", "table"] {
        assert!(fns.contains(&format!("\"{f}\"")), "{f} in {fns}");
    }
    assert_eq!(chats(&mock), 1);
    assert_eq!(usage_requests(&env), 1, "token use recorded in llm_usage");
    let cached: i64 = env
        .lifecycle()
        .query_row("SELECT count(*) FROM code_digests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(cached, 1);

    // The same file again: no request.
    let (_, v, _) = read(&env, "agent", json!({"path": "guarantees.rs"}));
    assert_eq!(v["model_digest_status"], "cached", "{v}");
    assert_eq!(v["model_digest"]["purpose"], "a file");
    assert_eq!(chats(&mock), 1, "a cache hit sends nothing to the model");

    // The same content under another name is another prompt (issue 33: the key covers every
    // prompt input — the name and language the model reads too — so a digest seeded under one
    // name never answers for another), and is then cached in turn.
    std::fs::copy(&src, env.workspace.join("copy.rs")).unwrap();
    let (_, v, _) = read(&env, "agent", json!({"file_path": "copy.rs"}));
    assert_eq!(v["model_digest_status"], "generated", "{v}");
    assert_eq!(chats(&mock), 2);
    assert!(mock.chats()[1].prompt().contains("`copy.rs`"));
    let (_, v, _) = read(&env, "agent", json!({"file_path": "copy.rs"}));
    assert_eq!(v["model_digest_status"], "cached", "{v}");
    assert_eq!(chats(&mock), 2);

    // A changed file is summarised again.
    std::fs::write(env.workspace.join("copy.rs"), "pub fn changed() {}\n").unwrap();
    let (_, v, _) = read(&env, "agent", json!({"file_path": "copy.rs"}));
    assert_eq!(v["model_digest_status"], "generated", "{v}");
    assert_eq!(chats(&mock), 3);

    // digest: false asks nothing.
    std::fs::write(env.workspace.join("new.py"), "def f():\n    pass\n").unwrap();
    let (_, v, _) = read(&env, "agent", json!({"path": "new.py", "digest": false}));
    assert_eq!(v["model_digest"], Value::Null);
    assert_eq!(v["model_digest_status"], "skipped: not requested");
    assert_eq!(chats(&mock), 3);
}

#[test]
fn a_malformed_or_schema_violating_answer_gives_the_extraction_saying_why_and_is_not_cached() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, &config(&env), &mock, &[]);
    std::fs::write(
        env.workspace.join("m.py"),
        "# MALFORMED_ANSWER\ndef f():\n    pass\n",
    )
    .unwrap();
    std::fs::write(
        env.workspace.join("s.go"),
        "// SCHEMA_VIOLATION\npackage s\nfunc F() {}\n",
    )
    .unwrap();

    let asked = chats(&mock);
    let (st, v, err) = read(&env, "agent", json!({"path": "m.py"}));
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["model_digest"], Value::Null);
    // Asked with response_format: a reply that is no JSON object is asked again once, then
    // the digest is refused naming the field (here the whole reply, `/`).
    assert_eq!(
        v["model_digest_status"],
        "invalid: the model's answer violates the digest schema (asked twice): field /: the reply is not a JSON object"
    );
    assert_eq!(chats(&mock) - asked, 2, "asked once more, then refused");
    assert_eq!(
        v["digest"]["functions"][0]["name"], "f",
        "extraction kept: {v}"
    );

    let (st, v, err) = read(&env, "agent", json!({"path": "s.go"}));
    assert_eq!(st, "succeeded", "{err}");
    let why = v["model_digest_status"].as_str().unwrap();
    assert!(
        why.starts_with("invalid: the model's answer violates the digest schema")
            && why.contains("field /: \"patterns\" is a required property"),
        "{why}"
    );
    assert_eq!(v["parser"], "tree-sitter-go");

    // Not cached: asking again asks the model again.
    let before = chats(&mock);
    let (_, v, _) = read(&env, "agent", json!({"path": "s.go"}));
    assert!(v["model_digest_status"]
        .as_str()
        .unwrap()
        .starts_with("invalid"));
    assert_eq!(chats(&mock), before + 2, "asked, asked again once, refused");
    let cached: i64 = env
        .lifecycle()
        .query_row("SELECT count(*) FROM code_digests", [], |r| r.get(0))
        .unwrap();
    assert_eq!(cached, 0);
}

#[test]
fn without_a_key_or_the_llm_grant_the_extraction_alone_saying_so_and_the_daily_budget_applies() {
    let env = Env::new();
    let cfg = config(&env);
    std::fs::write(env.workspace.join("a.rs"), "fn main() {}\n").unwrap();
    {
        let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.as_str())]);
        let (st, v, err) = read(&env, "agent", json!({"path": "a.rs"}));
        assert_eq!(st, "succeeded", "{err}");
        let why = v["model_digest_status"].as_str().unwrap();
        assert!(why.starts_with("skipped: no LLM key configured"), "{why}");
        assert_eq!(v["digest"]["functions"][0]["name"], "main");
    }
    let mock = MockLlm::start(respond);
    {
        let _d = common::start_with_llm(&env, &cfg, &mock, &[]);
        let (st, v, _) = read(&env, "nollm", json!({"path": "a.rs"}));
        assert_eq!(st, "succeeded");
        assert_eq!(
            v["model_digest_status"],
            "skipped: the client has no llm grant: extraction only"
        );
        let (st, _, err) = read(&env, "nollm", json!({"path": "a.rs", "digest": true}));
        assert_eq!(st, "denied", "{err}");
        assert_eq!(chats(&mock), 0);
    }
    {
        let _d = common::start_with_llm(
            &env,
            &cfg,
            &mock,
            &[("BRAINLOOP_LLM_DAILY_TOKEN_BUDGET", "5")],
        );
        let (st, v, err) = read(&env, "agent", json!({"path": "a.rs"}));
        assert_eq!(st, "succeeded", "{err}");
        let why = v["model_digest_status"].as_str().unwrap();
        assert!(
            why.starts_with("failed:") && why.contains("budget"),
            "{why}"
        );
        assert_eq!(chats(&mock), 0, "over the daily budget nothing is sent");
    }
}

#[test]
fn directory_mode_respects_gitignore_gives_a_project_digest_and_never_follows_a_planted_symlink() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, &config(&env), &mock, &[]);
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(outside.join("pkg")).unwrap();
    let canary = "def CANARY_OUTSIDE_THE_GRANT():\n    pass\n";
    std::fs::write(outside.join("secret.py"), canary).unwrap();
    std::fs::write(outside.join("pkg/inner.py"), canary).unwrap();

    let proj = env.workspace.join("proj");
    std::fs::create_dir_all(proj.join("src/nested")).unwrap();
    std::fs::create_dir_all(proj.join("build")).unwrap();
    std::fs::create_dir_all(proj.join("node_modules/dep")).unwrap();
    std::fs::write(
        proj.join(".gitignore"),
        "build/\nnode_modules/\n*.gen.py\n!keep.gen.py\n",
    )
    .unwrap();
    std::fs::write(proj.join("src/nested/.gitignore"), "local_only.rs\n").unwrap();
    std::fs::write(
        proj.join("src/main.rs"),
        "fn main() {\n    run();\n}\nfn run() {}\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("src/nested/util.go"),
        "package nested\nfunc Util() {}\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("src/nested/local_only.rs"),
        "fn hidden_by_nested_gitignore() {}\n",
    )
    .unwrap();
    std::fs::write(proj.join("tool.gen.py"), "def generated(): pass\n").unwrap();
    std::fs::write(proj.join("keep.gen.py"), "def kept(): pass\n").unwrap();
    std::fs::write(proj.join("build/out.js"), "function built() {}\n").unwrap();
    std::fs::write(
        proj.join("node_modules/dep/index.js"),
        "function dep() {}\n",
    )
    .unwrap();
    std::fs::write(proj.join("notes.txt"), "not code\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.py"), proj.join("link.py")).unwrap();
    std::os::unix::fs::symlink(&outside, proj.join("src/linkdir")).unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace.join("projlink")).unwrap();

    let (st, v, err) = read(&env, "agent", json!({"path": "proj"}));
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["mode"], "directory");
    let paths: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["keep.gen.py", "src/main.rs", "src/nested/util.go"],
        "{v:#}"
    );
    assert_eq!(
        v["ignored_by_gitignore"], 4,
        "build/, node_modules/, tool.gen.py, local_only.rs: {v:#}"
    );
    assert_eq!(v["files"][1]["parser"], "tree-sitter-rust");
    assert_eq!(v["files"][1]["digest"]["functions"][1]["name"], "run");
    assert_eq!(
        v["files"][1].get("model_digest"),
        None,
        "one call per directory, not per file"
    );
    assert_eq!(v["model_digest"]["purpose"], "the whole project", "{v:#}");
    assert_eq!(v["truncated"], Value::Null);
    assert_eq!(v["limits"]["max_files"], 200);
    let skipped = v["skipped"].to_string();
    assert!(
        skipped.contains("link.py")
            && skipped.contains("src/linkdir")
            && skipped.contains("symlink (never followed)"),
        "{skipped}"
    );
    assert_eq!(chats(&mock), 1, "the project digest only");
    let everything_sent: String = mock.chats().iter().map(|s| s.prompt()).collect();
    for text in [v.to_string(), everything_sent] {
        assert!(
            !text.contains("CANARY_OUTSIDE_THE_GRANT"),
            "the canary leaked: {text}"
        );
    }

    // Unchanged project: its digest comes from the cache.
    let (_, v, _) = read(&env, "agent", json!({"path": "proj", "max_files": 2}));
    assert_eq!(v["file_count"], 2);
    assert_eq!(v["truncated"], "more than 2 files");
    assert_eq!(
        v["model_digest_status"], "generated",
        "another outline: {v:#}"
    );
    let (_, v, _) = read(&env, "agent", json!({"path": "proj"}));
    assert_eq!(v["model_digest_status"], "cached", "{v:#}");
    assert_eq!(chats(&mock), 2, "only the 2-file project outline was new");

    // The requested directory itself a symlink to outside the grant: refused, nothing read.
    let (st, v, err) = read(&env, "agent", json!({"path": "projlink", "digest": false}));
    assert_ne!(st, "succeeded", "{v}");
    assert!(!format!("{v}{err}").contains("CANARY"), "{v}{err}");
    assert!(outside.join("secret.py").exists() && outside.join("pkg/inner.py").exists());
}

#[test]
fn the_action_schema_describes_digest_and_directory_mode() {
    let env = Env::new();
    let _d = env.start(&[]);
    let (st, v, err) = run(&env, "local", "get_schema", json!({"action": "read_code"}));
    assert_eq!(st, "succeeded", "{err}");
    let s = v.to_string();
    for needed in [
        "\"digest\"",
        "\"max_files\"",
        "model_digest",
        "directory",
        "tree-sitter",
        "patterns",
    ] {
        assert!(s.contains(needed), "{needed} in {s}");
    }
}
