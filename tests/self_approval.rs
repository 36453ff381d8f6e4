//! Adversarial: an agent must never approve its own request (DESIGN §2 trust model). The MCP
//! front-end has no approve path (tests/mcp_e2e.rs); here the agent tries through commands, and
//! the operator is careless: even commands a human approved run confined, so they cannot write
//! the worker's databases — directly, through `brainloop approve`, by replacing a database
//! file, or through a symlink planted in the workspace. Everything runs against the test's
//! temp data dir; the test checks the pending request survives untouched.

mod common;

use common::{final_result, job, settled, Env, BIN};
use serde_json::{json, Value};

fn approve(env: &Env, id: &str) {
    let (st, out, err) = env.cli(&["approve", id]);
    assert!(st.success(), "{out}{err}");
}

/// Submits a command; if it asks, approves it (the careless human); waits for its end. (Some
/// run at once on the overlay of the workspace, confined, and only their workspace effects
/// would ask.)
fn approved_run(env: &Env, cmd: &str) -> (String, Value, String) {
    let id = job(env, "local", "execute_bash", &json!({"command": cmd}));
    let (st, v, err) = settled(env, id);
    if st != "pending_validation" {
        return (st, v, err);
    }
    approve(env, v["validation_id"].as_str().unwrap());
    final_result(env, id)
}

fn approvals(env: &Env) -> Vec<(String, String)> {
    let c = env.db("command_security.db");
    let mut s = c
        .prepare("SELECT validation_id, decided_by FROM approvals ORDER BY id")
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn approved_commands_still_cannot_approve_the_agents_own_request() {
    let env = Env::new();
    let _d = env.start(&[]);
    let data = env.data.display().to_string();

    // The request the agent wants approved.
    let target = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "touch notes.txt"}),
    );
    let (st, v, _) = settled(&env, target);
    assert_eq!(st, "pending_validation");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    let sec_before = std::fs::read(env.data.join("command_security.db")).unwrap();

    let insert = format!(
        "INSERT INTO approvals(validation_id, decision, decided_by, created_at) VALUES ('{vid}', 'approve', 'agent', 0)"
    );
    std::fs::write(env.workspace.join("evil.sql"), format!("{insert};\n")).unwrap();
    let attempts = [
        // Write the approvals table directly.
        format!("sqlite3 {data}/command_security.db \"{insert}\""),
        format!("sqlite3 {data}/command_security.db < evil.sql"),
        format!("python3 -c \"import sqlite3; c = sqlite3.connect('{data}/command_security.db'); c.execute(\\\"{insert}\\\"); c.commit()\""),
        // Run the operator CLI from inside a job.
        format!("{BIN} approve {vid}"),
        format!("BRAINLOOP_DATA_DIR={data} {BIN} approve {vid}"),
        // Replace the database file, or its WAL, wholesale.
        format!("cp evil.sql {data}/command_security.db"),
        format!("cp evil.sql {data}/command_security.db-wal"),
        format!("mv {data}/command_security.db {data}/old.db"),
        // Plant a symlink to the data dir in the workspace, then write through it.
        format!("ln -s {data} datalink && sqlite3 datalink/command_security.db \"{insert}\""),
    ];
    for cmd in &attempts {
        let (st, v, err) = approved_run(&env, cmd);
        assert_ne!(v["success"], true, "{cmd} succeeded: {st} {v} {err}");
    }
    // The symlink may have been applied to the workspace (it is only a link): writing through
    // it later, in a separate approved command, must fail too.
    if env.workspace.join("datalink").exists() {
        let (_, v, _) = approved_run(
            &env,
            &format!("sqlite3 datalink/command_security.db \"{insert}\""),
        );
        assert_ne!(v["success"], true, "{v}");
    }

    // Only the operator's own approvals exist; the agent's request is still pending; nothing
    // of the requested effect happened; the worker's databases are where they were.
    let rows = approvals(&env);
    assert!(
        rows.iter().all(|(id, by)| id != &vid && by != "agent"),
        "{rows:?}"
    );
    let (st, _, _) = settled(&env, target);
    assert_eq!(st, "pending_validation");
    assert!(!env.workspace.join("notes.txt").exists());
    assert!(env.data.join("command_security.db").exists());
    assert!(!env.data.join("old.db").exists());
    assert!(!sec_before.is_empty());
    let (st, out, err) = env.cli(&["validations"]);
    assert!(st.success() && out.contains(&vid), "{out}{err}");
}
