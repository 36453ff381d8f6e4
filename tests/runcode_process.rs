//! run_code through the real daemon: seed 003 AC 1.2 / AC 1.5, pauses at the tool layer and
//! resumes after `brainloop approve`, actions that ask inside code, grants, limits, escapes,
//! and kill -9 after a side-effecting call (the call is not repeated).

mod common;

use common::{final_result, job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn code(env: &Env, client: &str, code: &str) -> i64 {
    job(env, client, "run_code", &json!({"code": code}))
}

/// Waits for a pending validation different from `not`; returns its id.
fn wait_pending(env: &Env, id: i64, not: Option<&str>) -> (String, Value) {
    let t0 = Instant::now();
    loop {
        let (st, v, e) = settled(env, id);
        assert!(
            ["pending_validation", "running", "queued"].contains(&st.as_str()),
            "job {id} ended {st}: {e} {v}"
        );
        if st == "pending_validation" {
            let vid = v["validation_id"].as_str().unwrap_or_default().to_string();
            if !vid.is_empty() && Some(vid.as_str()) != not {
                return (vid, v);
            }
        }
        assert!(t0.elapsed() < LONG, "job {id} never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn approve(env: &Env, vid: &str) {
    let (st, out, err) = env.cli(&["approve", vid]);
    assert!(st.success(), "{out}{err}");
}

fn validations(env: &Env) -> i64 {
    env.output()
        .query_row("SELECT count(*) FROM validations", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn pure_code_runs_with_zero_validations_ac_1_5() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = code(
        &env,
        "local",
        "const xs = [1, 2, 3, 4];\nconst even = xs.filter(x => x % 2 === 0);\nconsole.log('even', even.length);\nreturn even.map(x => x * 10);",
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["success"], true);
    assert_eq!(v["value"], json!([20, 40]));
    assert_eq!(v["logs"], json!(["even 2"]));
    let path: Vec<&str> = v["executed_path"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        path.contains(&"code:filter") && path.contains(&"code:map"),
        "{path:?}"
    );
    assert!(!v["layers_executed"].as_array().unwrap().is_empty());
    assert_eq!(validations(&env), 0, "pure layers never ask");
}

#[test]
fn filter_over_a_tool_result_returns_the_filtered_array_ac_1_2() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = code(
        &env,
        "local",
        "const r = await mcp.brainloop.execute_bash({command: `echo '[{\"name\":\"ann\",\"active\":true},{\"name\":\"bob\",\"active\":false}]'`});\nconst users = JSON.parse(r.stdout);\nreturn users.filter(u => u.active);",
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["value"], json!([{"name": "ann", "active": true}]));
    assert_eq!(v["calls"][0]["tool"], "brainloop");
    assert_eq!(v["calls"][0]["op"], "execute_bash");
    assert_eq!(v["calls"][0]["ok"], true);
    assert!(
        v["executed_path"].to_string().contains("code:filter"),
        "{v}"
    );
    assert_eq!(
        validations(&env),
        0,
        "a pure command inside code runs like a pure job"
    );
}

#[test]
fn mixed_code_pauses_at_the_tool_layer_and_resumes_after_approval() {
    let env = Env::new();
    let mapping = env.root.path().join("mcp.toml");
    std::fs::write(
        &mapping,
        "[tools.brainloop]\npermission_set = \"mcp-standard\"\napproval = \"hil\"\n",
    )
    .unwrap();
    let _d = env.start(&[("BRAINLOOP_MCP_PERMISSIONS", mapping.to_str().unwrap())]);
    let id = code(
        &env,
        "local",
        "const base = [3, 1, 2].sort();\nconsole.log('before');\nconst r = await mcp.brainloop.execute_bash({command: 'echo 7'});\nreturn base.concat([Number(r.stdout.trim())]);",
    );
    let (vid, v) = wait_pending(&env, id, None);
    assert!(v["layer"].is_u64(), "paused at a layer: {v}");
    assert_eq!(v["operations"], json!(["brainloop:execute_bash"]));
    assert!(
        v["reasons"]
            .to_string()
            .contains("mcp.brainloop.execute_bash"),
        "{v}"
    );
    let (_, listing, _) = env.cli(&["validations"]);
    assert!(listing.contains(&vid), "{listing}");
    let ran: i64 = env
        .db("command_security.db")
        .query_row("SELECT count(*) FROM executions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ran, 0, "nothing ran before the approval");
    approve(&env, &vid);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["value"], json!([1, 2, 3, 7]));
    assert_eq!(
        v["validated"],
        json!([format!("layer:{}", v["calls"][0]["layer"])])
    );
    assert_eq!(validations(&env), 1);
}

#[test]
fn a_command_that_asks_inside_code_pauses_the_job_until_approved() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = code(
        &env,
        "local",
        "const a = await mcp.brainloop.execute_bash({command: 'echo first'});\nawait mcp.brainloop.execute_bash({command: 'touch made.txt'});\nreturn a.stdout.trim();",
    );
    let (vid, v) = wait_pending(&env, id, None);
    assert_eq!(v["command"], "touch made.txt", "{v}");
    assert_eq!(v["paused_at"]["op"], "execute_bash");
    assert!(!env.workspace.join("made.txt").exists());
    approve(&env, &vid);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["value"], "first");
    assert!(env.workspace.join("made.txt").exists());
    assert_eq!(
        v["calls"][0]["replayed"], true,
        "the first call came from the checkpoint: {v}"
    );
}

#[test]
fn a_call_the_client_may_not_make_is_a_catchable_denial() {
    let env = Env::new();
    let _d = env.start(&[]);
    // `agent` is unlisted: the minimal default grants (read the workspace, run echo).
    let id = code(
        &env,
        "agent",
        "try { await mcp.brainloop.execute_bash({command: 'ls'}); return 'ran'; } catch (e) { return e.message; }",
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    let msg = v["value"].as_str().unwrap();
    assert!(
        msg.contains("denied") && msg.contains("brainloop grant"),
        "{msg}"
    );
    let id = code(
        &env,
        "agent",
        "await mcp.brainloop.execute_bash({command: 'ls'});",
    );
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "failed");
    assert!(err.contains("denied"), "{err}");
    // other tools are not connected; unknown tools fail clearly
    let id = code(
        &env,
        "agent",
        "try { await mcp.slack.send({text: 'hi'}); } catch (e) { return e.message; }",
    );
    let (st, v, _) = final_result(&env, id);
    assert_eq!(st, "succeeded");
    assert!(
        v["value"].as_str().unwrap().contains("no connection"),
        "{v}"
    );
}

#[test]
fn limits_and_escapes_end_the_job_failed_with_the_reason() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = job(
        &env,
        "local",
        "run_code",
        &json!({"code": "while (true) {}", "timeout_ms": 300}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "failed");
    assert!(err.contains("limit exceeded: cpu"), "{err}");
    assert_eq!(v["success"], false);
    let id = code(
        &env,
        "local",
        "const a = []; while (true) a.push(new Array(1e5).fill(1.5));",
    );
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "failed");
    assert!(err.contains("limit exceeded: memory"), "{err}");
    let id = code(
        &env,
        "local",
        "function f() { return f() + 1; } return f();",
    );
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "failed");
    assert!(err.contains("limit exceeded: stack"), "{err}");
    let id = code(
        &env,
        "local",
        "return [typeof fetch, typeof require, typeof process, typeof Deno, typeof setTimeout];",
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["value"], json!(vec!["undefined"; 5]));
    // import() is dynamic code: the whole program is asked for first; approved, it still fails.
    let id = code(&env, "local", "const m = await import('fs'); return 1;");
    let (vid, _) = wait_pending(&env, id, None);
    approve(&env, &vid);
    let (st, _, err) = final_result(&env, id);
    assert_eq!(st, "failed", "{err}");
    assert!(err.contains("threw"), "{err}");
    let id = job(
        &env,
        "local",
        "run_code",
        &json!({"code": "const x: number = 1; return x + 1;", "language": "ts"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["value"], 2);
}

#[test]
fn dynamic_code_asks_for_the_whole_program_first() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = code(
        &env,
        "local",
        "const k = ['execute', 'bash'].join('_');\nconst r = await mcp.brainloop[k]({command: 'echo dyn'});\nreturn r.stdout.trim();",
    );
    let (vid, v) = wait_pending(&env, id, None);
    assert!(
        v["command"].as_str().unwrap().contains("whole program"),
        "{v}"
    );
    approve(&env, &vid);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["value"], "dyn");
}

#[test]
fn kill9_after_a_side_effecting_call_does_not_repeat_it() {
    let env = Env::new();
    let d = env.start(&[]);
    let id = code(
        &env,
        "local",
        "await mcp.brainloop.execute_bash({command: 'echo x >> log.txt'});\nawait mcp.brainloop.sleep({ms: 2000});\nreturn 'done';",
    );
    let (vid, _) = wait_pending(&env, id, None);
    approve(&env, &vid);
    let log = env.workspace.join("log.txt");
    let t0 = Instant::now();
    loop {
        let checkpointed: i64 = env
            .lifecycle()
            .query_row(
                "SELECT count(*) FROM sessions WHERE session_id = ?1 AND state LIKE '%execute_bash%'",
                [format!("run_code:{id}")],
                |r| r.get(0),
            )
            .unwrap();
        if log.exists() && checkpointed == 1 {
            break;
        }
        assert!(t0.elapsed() < LONG, "the first call never completed");
        std::thread::sleep(Duration::from_millis(10));
    }
    d.kill9();
    let _d = env.start(&[]);
    // The approved run was cut off: it is asked again (never re-run unapproved).
    let (vid2, _) = wait_pending(&env, id, Some(&vid));
    approve(&env, &vid2);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["value"], "done");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "x\n",
        "the write ran once"
    );
    assert_eq!(v["calls"][0]["replayed"], true, "{v}");
}
