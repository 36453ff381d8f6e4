//! The evidence ledger (issue 18) through the real daemon, tried as the agent would game it —
//! a producer with the default client `local`, never touching the operator CLI except where a
//! test plays the human. Only human decisions (and operator overrides) are evidence; evidence is
//! per client; a promotion keeps the confinement the human approved. Canary effects only, in the
//! test's temp dirs; each test checks the workspace it could have changed.

mod common;

use common::{final_result, job, run, Env};
use serde_json::{json, Value};
use std::time::Duration;

/// A config where `other` may run any program, like `local`, and `ops` may force_execute.
fn clients_config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        "[clients.other]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\n\
         [clients.ops]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\nforce_execute = true\n",
    )
    .unwrap();
    p.display().to_string()
}

fn bash(env: &Env, client: &str, cmd: &str) -> (i64, String, Value, String) {
    common::submit_as(env, client, cmd)
}

fn sec(env: &Env) -> rusqlite::Connection {
    env.db("command_security.db")
}

fn count(env: &Env, sql: &str) -> i64 {
    sec(env).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Plays the operator turning the 2 s duplicate check off for one command (there is no CLI
/// for it), so a test can repeat it quickly; it changes nothing about learning.
fn no_duplicate_check(env: &Env, hash: &str) {
    sec(env)
        .execute(
            "UPDATE commands_registry SET duplicate_check_enabled = 0 WHERE command_hash = ?1",
            [hash],
        )
        .unwrap();
}

fn hash_of(env: &Env, cmd: &str) -> String {
    sec(env)
        .query_row(
            "SELECT command_hash FROM commands_registry WHERE command_text = ?1",
            [cmd],
            |r| r.get(0),
        )
        .unwrap()
}

fn approve(env: &Env, vid: &str) {
    let (st, out, err) = env.cli(&["approve", vid]);
    assert!(st.success(), "approve {vid}: {out}{err}");
}

#[test]
fn twenty_five_never_answered_overlay_runs_never_promote() {
    let env = Env::new();
    let _d = env.start(&[]);
    let cmd = "echo x >> counter.txt";
    let (_, st, v, e) = bash(&env, "local", cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    no_duplicate_check(&env, &hash_of(&env, cmd));
    for i in 2..=25 {
        let (_, st, v, e) = bash(&env, "local", cmd);
        assert_eq!(st, "pending_validation", "run {i}: {e} {v}");
    }
    let hash = hash_of(&env, cmd);
    let runs = count(
        &env,
        &format!("SELECT count(*) FROM executions WHERE command_hash = '{hash}'"),
    );
    assert_eq!(
        runs, 25,
        "every run happened on the overlay and was recorded"
    );
    assert_eq!(
        count(&env, "SELECT count(*) FROM evidence"),
        0,
        "nobody decided anything"
    );
    assert_eq!(count(&env, "SELECT count(*) FROM promotions"), 0);
    // The 26th still asks, and the real workspace never saw the write.
    let (_, st, v, _) = bash(&env, "local", cmd);
    assert_eq!(st, "pending_validation", "{v}");
    assert!(
        !env.workspace.join("counter.txt").exists(),
        "an unapproved write reached the workspace"
    );
}

#[test]
fn one_run_code_job_repeating_a_command_never_promotes_it() {
    let env = Env::new();
    let _d = env.start(&[]);
    // A command with no workspace effect returns at once from the overlay: the laundering route
    // of the report (22 calls inside one job reached the old threshold in under 4 s).
    let cmd = "python3 -c 'print(40 + 2)'";
    let code = format!(
        "let n = 0;\nfor (let i = 0; i < 22; i++) {{ const r = await mcp.brainloop.execute_bash({{command: {}}}); if (r.stdout.trim() === '42') n++; }}\nreturn n;",
        serde_json::to_string(cmd).unwrap()
    );
    let id = job(&env, "local", "run_code", &json!({ "code": code }));
    let (st, v, e) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["value"], 22, "every call ran: {v}");
    assert_eq!(count(&env, "SELECT count(*) FROM evidence"), 0);
    assert_eq!(count(&env, "SELECT count(*) FROM promotions"), 0);
    // The same command from a plain job still runs confined on the overlay (no network), never
    // `auto_approve` in its registry set (mcp-standard, with network).
    no_duplicate_check(&env, &hash_of(&env, cmd));
    let (_, st, v, e) = bash(&env, "local", cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["policy_used"], "overlay_no_changes", "{v}");
    assert!(
        v["sandbox"].as_str().unwrap_or("").contains("overlay"),
        "{v}"
    );
}

#[test]
fn force_execute_runs_are_not_evidence() {
    let env = Env::new();
    let cfg = clients_config(&env);
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.as_str())]);
    let cmd = "ulimit -n";
    for i in 0..22 {
        let (st, v, e) = run(
            &env,
            "ops",
            "execute_bash",
            json!({"command": cmd, "force_execute": true}),
        );
        assert_eq!(st, "succeeded", "run {i}: {e} {v}");
        assert_eq!(v["policy_used"], "force_execute");
    }
    assert_eq!(count(&env, "SELECT count(*) FROM evidence"), 0);
    assert_eq!(count(&env, "SELECT count(*) FROM promotions"), 0);
    for client in ["ops", "local"] {
        let (_, st, v, _) = bash(&env, client, cmd);
        assert!(
            st == "pending_validation" || st == "duplicate_warning",
            "{client}: {st} {v}"
        );
    }
}

/// Plays the human: 20 approvals of a command asked up front (`ulimit` is process control: no
/// overlay can show its effects) by `local`.
fn approve_twenty(env: &Env, cmd: &str) -> String {
    let mut hash = String::new();
    for i in 0..20 {
        let (id, st, v, e) = bash(env, "local", cmd);
        assert_eq!(st, "pending_validation", "request {i}: {e} {v}");
        if i == 0 {
            hash = hash_of(env, cmd);
            no_duplicate_check(env, &hash);
        }
        approve(env, v["validation_id"].as_str().unwrap());
        let (st, v, e) = final_result(env, id);
        assert_eq!(st, "succeeded", "approved run {i}: {e} {v}");
        assert_eq!(v["policy_used"], "approved");
    }
    hash
}

#[test]
fn twenty_human_approvals_promote_for_that_client_only_in_the_approved_set() {
    let env = Env::new();
    let cfg = clients_config(&env);
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.as_str())]);
    let cmd = "ulimit -n";
    let hash = approve_twenty(&env, cmd);
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM evidence WHERE source = 'human_approved'"
        ),
        20
    );
    // Promoted for `local`, direct, in the set the human saw.
    let (mode, set, client): (String, String, String) = sec(&env)
        .query_row(
            "SELECT mode, permission_set, client_id FROM promotions WHERE command_hash = ?1 AND withdrawn_at IS NULL",
            [&hash],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (mode.as_str(), set.as_str(), client.as_str()),
        ("direct", "mcp-standard", "local")
    );
    let (_, st, v, e) = bash(&env, "local", cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["policy_used"], "promoted");
    assert_eq!(v["permission_set"], "mcp-standard");
    // Another client learned nothing from `local`'s approvals.
    let (_, st, v, _) = bash(&env, "other", cmd);
    assert_eq!(st, "pending_validation", "{v}");
    let (_, hist, _) = env.cli(&["commands", "--history", &hash]);
    assert!(hist.contains("promoted for client \"local\""), "{hist}");
    let (_, listing, _) = env.cli(&["commands"]);
    assert!(listing.contains("client local"), "{listing}");
}

#[test]
fn a_denial_resets_the_count_and_is_recorded() {
    let env = Env::new();
    let _d = env.start(&[]);
    let cmd = "ulimit -n";
    let (id, st, v, _) = bash(&env, "local", cmd);
    assert_eq!(st, "pending_validation");
    no_duplicate_check(&env, &hash_of(&env, cmd));
    let (ok, out, err) = env.cli(&["deny", v["validation_id"].as_str().unwrap()]);
    assert!(ok.success(), "{out}{err}");
    let (st, _, _) = final_result(&env, id);
    assert_eq!(st, "denied");
    let t0 = std::time::Instant::now();
    while count(
        &env,
        "SELECT count(*) FROM evidence WHERE source = 'human_denied'",
    ) == 0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the denial was never recorded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let client: String = sec(&env)
        .query_row("SELECT client_id FROM evidence", [], |r| r.get(0))
        .unwrap();
    assert_eq!(client, "local");
}

#[test]
fn past_the_pending_cap_a_request_fails_naming_it_and_leaves_no_validation() {
    let env = Env::new();
    let _d = env.start(&[]);
    for i in 0..50 {
        let (_, st, v, e) = bash(&env, "local", &format!("touch cap{i}.txt"));
        assert_eq!(st, "pending_validation", "request {i}: {e} {v}");
    }
    let (id, st, v, e) = bash(&env, "local", "touch cap50.txt");
    assert_eq!(st, "failed", "{v}");
    assert!(e.contains("50 validations waiting"), "{e}");
    let n = common::validations_count(&env, id);
    assert_eq!(n, 0, "no validation exists for the failed job");
    assert!(!env.workspace.join("cap50.txt").exists());
}

#[test]
fn a_signature_learned_from_one_clients_approvals_is_not_learned_for_another() {
    let env = Env::new();
    let cfg = clients_config(&env);
    std::fs::write(env.workspace.join("a.txt"), "v0\n").unwrap();
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.as_str())]);
    for i in 0..5 {
        let (id, st, v, e) = bash(&env, "local", &format!("sed -i 's/v{i}/v{}/' a.txt", i + 1));
        assert_eq!(st, "pending_validation", "edit {i}: {e} {v}");
        approve(&env, v["validation_id"].as_str().unwrap());
        let (st, v, e) = final_result(&env, id);
        assert_eq!(st, "succeeded", "edit {i}: {e} {v}");
    }
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "v5\n"
    );
    let (_, st, v, e) = bash(&env, "local", "sed -i 's/v5/v6/' a.txt");
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    let (_, st, v, _) = bash(&env, "other", "sed -i 's/v6/v7/' a.txt");
    assert_eq!(st, "pending_validation", "learned for local only: {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "v6\n"
    );
    let (_, listing, _) = env.cli(&["signatures"]);
    assert!(listing.contains("learned for local"), "{listing}");
}
