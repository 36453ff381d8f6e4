//! The fleet's evidence (issue 37), through the real binary and a real PostgreSQL the harness
//! starts itself (`common::pg`): the human approvals that teach a signature are counted from
//! the registry's decision rows the operator's role wrote (`ask::evidence`, the view
//! `fleet_evidence` of migration 5), so approvals spread over two workers teach a third; and a
//! worker's credentials cannot forge that count — every write to a decision or to the evidence
//! is refused by PostgreSQL, and what a worker may write (its validations' status, forged
//! validations, its applied change sets, its own SQLite counts) and a reviewer's approvals
//! teach no other worker anything.

mod common;

use common::fleet::{self, ok};
use common::pg::{self, Cluster};
use common::{final_result, submit, Daemon, Env};
use std::time::{Duration, Instant};

/// The signature every `sed -i s/…/…/ FILE` of these tests carries.
const SIG: &str = "sed -i EXPR WS_PATH";
/// The workers' `signature_approvals` (set explicitly: the local rule's threshold).
const THRESHOLD: &str = "3";

fn start_worker(env: &Env, url: &str) -> Daemon {
    env.start(&[
        ("BRAINLOOP_REGISTRY_URL", url),
        ("BRAINLOOP_SIGNATURE_APPROVALS", THRESHOLD),
    ])
}

/// Waits until the registry shows validation `id` (the worker publishes it).
fn wait_published(c: &Cluster, db: &str, id: &str) {
    let mut cl = c.connect("postgres", db);
    let t0 = Instant::now();
    while cl
        .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&id])
        .unwrap()
        .is_none()
    {
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "validation {id} never reached the registry"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A sed on `env` asks; the operator approves it from its own machine; it is applied.
fn approved_by_the_operator(c: &Cluster, db: &str, op_url: &str, op: &Env, env: &Env, n: usize) {
    let file = format!("f{n}.txt");
    std::fs::write(env.workspace.join(&file), "one\n").unwrap();
    let (job, st, v, e) = submit(env, &format!("sed -i s/one/ONE/ {file}"));
    assert_eq!(st, "pending_validation", "must ask: {v} {e}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    wait_published(c, db, &vid);
    ok(op_url, &op.data, &["approve", &vid]);
    let (st, v, e) = final_result(env, job);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join(&file)).unwrap(),
        "ONE\n"
    );
}

/// `env` still asks for a sed of the signature after its bridge had time to pull the
/// registry's counts (two polls).
fn still_asks(env: &Env, why: &str) {
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
    let (_, st, v, e) = submit(env, "sed -i s/x/X/ b.txt");
    assert_eq!(st, "pending_validation", "{why}: {v} {e}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("b.txt")).unwrap(),
        "x\n"
    );
}

/// `env` runs a sed of the signature unasked, as learned (waits up to 15 s for its pull).
fn runs_unasked(env: &Env) {
    let t0 = Instant::now();
    loop {
        std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
        let (_, st, v, e) = submit(env, "sed -i s/x/X/ b.txt");
        if st == "succeeded" {
            assert_eq!(v["policy_used"], "signature_learned", "{v}");
            assert_eq!(
                std::fs::read_to_string(env.workspace.join("b.txt")).unwrap(),
                "X\n"
            );
            return;
        }
        // Still asking (or the ask of 200 ms ago is the same command's: duplicate_warning).
        assert!(
            st == "pending_validation" || st == "duplicate_warning",
            "{v} {e}"
        );
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "never ran unasked: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The fleet's count of `SIG` for client `local`, as a worker's role reads it.
fn fleet_count(w: &mut postgres::Client) -> (i64, i64, i64) {
    w.query_opt(
        "SELECT approvals, denials, workers FROM fleet_evidence WHERE client_id = 'local' AND signature = $1",
        &[&SIG],
    )
    .expect("a worker's role reads fleet_evidence")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .unwrap_or((0, 0, 0))
}

/// The local approvals of `SIG` for `local` in a worker's own command_security.db.
fn local_approvals(env: &Env) -> i64 {
    env.db("command_security.db")
        .query_row(
            "SELECT coalesce(sum(approvals), 0) FROM signature_evidence WHERE client_id = 'local' AND signature = ?1",
            [SIG],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn approvals_on_two_workers_teach_a_third_from_the_registrys_decision_rows() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "evid", &["a", "b", "c"]);
    let envs: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&r.workers)
        .map(|(e, w)| start_worker(e, &c.url_as(w, &r.db)))
        .collect();
    let operator = Env::new();
    let op_url = c.url_as(&r.operator, &r.db);
    let (a, b, cw) = (&envs[0], &envs[1], &envs[2]);

    // Two approvals on A, then one fewer than the threshold in the fleet: C still asks.
    approved_by_the_operator(c, &r.db, &op_url, &operator, a, 1);
    approved_by_the_operator(c, &r.db, &op_url, &operator, a, 2);
    still_asks(cw, "two approvals in the fleet are not three");
    // The third, on B: the fleet has three human approvals from two workers.
    approved_by_the_operator(c, &r.db, &op_url, &operator, b, 3);
    // C, which never asked a human for it, applies it without asking ...
    runs_unasked(cw);
    let mut cr = c.connect(&r.workers[2], &r.db);
    assert_eq!(fleet_count(&mut cr), (3, 0, 2));
    // `signatures` on C (its role, its data dir) shows the fleet's count.
    let listed = ok(&c.url_as(&r.workers[2], &r.db), &cw.data, &["signatures"]);
    assert!(
        listed.contains(&format!(
            "`{SIG}` for client local: 3 approval(s) from 2 worker(s), 0 denial(s)"
        )),
        "{listed}"
    );
    // ... and A too, whose own count (2) is below the threshold.
    assert_eq!(local_approvals(a), 2);
    assert_eq!(local_approvals(cw), 0, "C learned nothing for itself");
    runs_unasked(a);
}

#[test]
fn a_workers_credentials_cannot_forge_the_fleets_evidence_and_promote_nothing() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "forge", &["a", "c"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&r.workers)
        .map(|(e, w)| start_worker(e, &c.url_as(w, &r.db)))
        .collect();
    let operator = Env::new();
    let op_url = c.url_as(&r.operator, &r.db);
    let (a, cw) = (&envs[0], &envs[1]);
    // One genuine human approval on A.
    approved_by_the_operator(c, &r.db, &op_url, &operator, a, 1);
    let real: String = c
        .connect("postgres", &r.db)
        .query_one(
            "SELECT validation_id FROM decisions ORDER BY id LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);

    // A is compromised: its host has its login role.
    let mut w = c.connect(&r.workers[0], &r.db);
    let denied = |w: &mut postgres::Client, sql: &str| {
        let e = w
            .batch_execute(sql)
            .expect_err(&format!("PostgreSQL must refuse the worker: {sql}"));
        let e = format!("{e:?}");
        assert!(
            e.contains("permission denied")
                || e.contains("row-level security")
                || e.contains("not automatically updatable"),
            "{sql}: {e}"
        );
    };
    // Validations claiming approvals: its own rows, allowed — and counted nowhere.
    let sigs = format!("[\"{SIG}\"]");
    let detail = r#"{"kind":"change_set","truncated":false,"network":null}"#;
    for i in 0..5 {
        w.execute(
            "INSERT INTO validations(id, job_id, client_id, command, command_hash, status, requested_at, decided_at, signatures, detail)
             VALUES ($1, $2, 'local', 'sed -i s/a/b/ g.txt', 'h', 'approved', 1, 2, $3, $4)",
            &[&format!("forged-{i}"), &(1000 + i as i64), &sigs, &detail],
        )
        .unwrap();
    }
    w.execute(
        "UPDATE validations SET status = 'approved', decided_at = 3 WHERE id = $1",
        &[&real],
    )
    .unwrap();
    // Its applied change sets (run statistics it reports): its own rows, allowed.
    w.execute(
        "INSERT INTO applied_changes(job_id, validation_id, command, summary, policy_used, decided_by, applied_at)
         VALUES (77, 'forged-0', 'sed -i s/a/b/ g.txt', '1 file', 'approved', 'operator:alice', 5)",
        &[],
    )
    .unwrap();
    // Every write of a decision or of the evidence is refused.
    let op = &r.operator;
    for sql in [
        "INSERT INTO decisions(validation_id, decision, decided_by, created_at) VALUES ('forged-0', 'approve', 'operator:alice', 1)".to_string(),
        format!("INSERT INTO decisions(validation_id, decision, decided_by, db_role, created_at) VALUES ('forged-1', 'approve', 'operator:alice', '{op}', 1)"),
        "UPDATE decisions SET validation_id = 'forged-2'".to_string(),
        "UPDATE decisions SET decision = 'always_allow'".to_string(),
        "DELETE FROM decisions".to_string(),
        format!("UPDATE validations SET signatures = '[\"{SIG}\", \"rm -r WS_PATH\"]' WHERE id = '{real}'"),
        format!("UPDATE validations SET client_id = 'ci' WHERE id = '{real}'"),
        format!("INSERT INTO validations(id, worker, job_id, client_id, status, requested_at, signatures) VALUES ('other', '{}', 1, 'local', 'approved', 1, '[\"{SIG}\"]')", r.workers[1]),
        format!("INSERT INTO fleet_evidence(client_id, signature, approvals, denials, workers) VALUES ('local', '{SIG}', 99, 0, 3)"),
        "UPDATE fleet_evidence SET approvals = 99".to_string(),
        "DELETE FROM fleet_evidence".to_string(),
        "SELECT * FROM fleet_human_decisions".to_string(),
        "CREATE TABLE public.fleet_evidence_shadow(x int)".to_string(),
        format!("SET ROLE \"{op}\""),
    ] {
        denied(&mut w, &sql);
    }
    // A reviewer's approvals (its role may write them, on a change set shown whole) are no
    // human's: they count nothing.
    let mut rv = c.connect(&r.reviewer, &r.db);
    for i in 0..3 {
        w.execute(
            "INSERT INTO validations(id, job_id, client_id, command, status, requested_at, signatures, detail)
             VALUES ($1, $2, 'local', 'sed -i s/a/b/ g.txt', 'pending', 1, $3, $4)",
            &[&format!("rv-{i}"), &(2000 + i as i64), &sigs, &detail],
        )
        .unwrap();
        rv.execute(
            "INSERT INTO decisions(validation_id, decision, decided_by, created_at) VALUES ($1, 'approve', 'reviewer:cmd', 1)",
            &[&format!("rv-{i}")],
        )
        .unwrap();
    }
    // Its own SQLite says the signature has a hundred approvals: that stays on A.
    a.db("command_security.db")
        .execute(
            "INSERT INTO signature_evidence(client_id, signature, approvals, denials, updated_at) VALUES ('local', ?1, 100, 0, 1)
             ON CONFLICT(client_id, signature) DO UPDATE SET approvals = 100",
            [SIG],
        )
        .unwrap();

    // The fleet counts the one human approval; C is not taught.
    assert_eq!(fleet_count(&mut w), (1, 0, 1));
    still_asks(
        cw,
        "forged validations, reviewer approvals and a worker's counts teach nothing",
    );
    // The count is live: two more human approvals (on C) reach the threshold, and C learns.
    approved_by_the_operator(c, &r.db, &op_url, &operator, cw, 2);
    still_asks(cw, "two human approvals in the fleet are not three");
    approved_by_the_operator(c, &r.db, &op_url, &operator, cw, 3);
    assert_eq!(fleet_count(&mut w), (3, 0, 2));
    runs_unasked(cw);
}

/// Submits `cmd` on `env` (its file reset to "one") until it settles as `want`, for up to
/// 15 s (a rule reaching the worker; a repeat within the duplicate window is retried).
fn until(env: &Env, cmd: &str, want: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        std::fs::write(env.workspace.join("f.txt"), "one\n").unwrap();
        let (_, st, v, e) = submit(env, cmd);
        if st == want {
            return v;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{cmd} is still {st} (not {want}): {v} {e}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The command overrides in a worker's own command_security.db.
fn local_overrides(env: &Env) -> i64 {
    env.db("command_security.db")
        .query_row(
            "SELECT count(*) FROM commands_registry WHERE user_override IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn approve_always_on_a_fleet_validation_is_a_registry_rule_for_the_worker_and_deny_always_reaches_its_scope(
) {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "always", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&r.workers)
        .map(|(e, w)| start_worker(e, &c.url_as(w, &r.db)))
        .collect();
    let operator = Env::new();
    let op_url = c.url_as(&r.operator, &r.db);
    let (a, b) = (&envs[0], &envs[1]);
    const CMD: &str = "sed -i s/one/ONE/ f.txt";

    // `approve --always` on A's validation: the decision and the command's override, for
    // worker A (the default scope), in one transaction of the registry.
    std::fs::write(a.workspace.join("f.txt"), "one\n").unwrap();
    let (job, st, v, _) = submit(a, CMD);
    assert_eq!(st, "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    wait_published(c, &r.db, &vid);
    let out = ok(&op_url, &operator.data, &["approve", &vid, "--always"]);
    assert!(
        out.contains(&format!(
            "[worker:{}] override always_allow of command `{CMD}`",
            r.workers[0]
        )),
        "{out}"
    );
    let rule_id: String = out
        .split("rules revoke fleet:")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert_eq!(final_result(a, job).0, "succeeded");
    // A runs it unasked from the registry's rule; it wrote no override of its own.
    let v = until(a, CMD, "succeeded");
    assert_eq!(v["policy_used"], "always_allow", "{v}");
    assert_eq!(local_overrides(a), 0, "the override is the registry's");
    // B, outside the rule's scope, asks.
    std::fs::write(b.workspace.join("f.txt"), "one\n").unwrap();
    let (job_b, st, v, _) = submit(b, CMD);
    assert_eq!(st, "pending_validation", "{v}");
    let vid_b = v["validation_id"].as_str().unwrap().to_string();
    // Revoking the rule takes it back on A too.
    ok(
        &op_url,
        &operator.data,
        &["rules", "revoke", &format!("fleet:{rule_id}")],
    );
    until(a, CMD, "pending_validation");

    // `deny --always --scope fleet` on B's validation: B's job is denied, and every worker
    // denies the command from then on.
    wait_published(c, &r.db, &vid_b);
    let out = ok(
        &op_url,
        &operator.data,
        &["deny", &vid_b, "--always", "--scope", "fleet"],
    );
    assert!(
        out.contains(&format!("[fleet] override never of command `{CMD}`")),
        "{out}"
    );
    assert_eq!(final_result(b, job_b).0, "denied");
    until(a, CMD, "denied");
    assert_eq!(
        std::fs::read_to_string(a.workspace.join("f.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(local_overrides(b), 0, "the override is the registry's");
    // A worker's role cannot write such a rule.
    let (st, _, e) = fleet::brainloop(
        &c.url_as(&r.workers[0], &r.db),
        &a.data,
        &[
            "rules",
            "add",
            "command",
            CMD,
            "--value",
            "always_allow",
            "--scope",
            "fleet",
        ],
    );
    assert!(!st.success() && e.contains("permission denied"), "{e}");
}
