//! A fleet on one PostgreSQL registry (issue 37), through the real binary and a real PostgreSQL
//! the harness starts itself (`common::pg`: initdb + postgres in a temp dir, as uid 65534 when
//! run as root). Three workers with their own data dirs share one registry; the operator's CLI,
//! from another data dir with the operator's role, lists every worker's validations and
//! decides; the worker that asked resumes. A worker's role cannot write a decision (PostgreSQL
//! refuses it). The registry stopped mid-run: nothing unapproved runs, the waiting job runs
//! once it is back, `status` names the cause.

mod common;

use common::fleet::{self, brainloop, ok};
use common::pg::{self, Cluster};
use common::{final_result, submit, Daemon, Env};
use std::time::{Duration, Instant};

/// A migrated registry of this test's own: (db, operator role, workers); migrating again does
/// nothing.
fn registry(c: &Cluster, tag: &str, workers: &[&str]) -> (String, String, Vec<String>) {
    let r = fleet::registry(c, tag, workers);
    let tmp = tempfile::tempdir().unwrap();
    let out = ok(&c.admin_url(&r.db), tmp.path(), &["registry", "migrate"]);
    assert!(out.contains(", nothing to do"), "{out}");
    (r.db, r.operator, r.workers)
}

fn setup_ws(env: &Env) {
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

/// The command asks; returns (job, validation id).
fn asks(env: &Env, cmd: &str) -> (i64, String) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {err} {v}");
    (id, v["validation_id"].as_str().unwrap().to_string())
}

/// Waits until the registry shows validation `id` (the worker publishes it).
fn wait_published(c: &Cluster, db: &str, id: &str) -> String {
    let mut cl = c.connect("postgres", db);
    let t0 = Instant::now();
    loop {
        if let Some(r) = cl
            .query_opt("SELECT worker FROM validations WHERE id = $1", &[&id])
            .unwrap()
        {
            return r.get(0);
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "validation {id} never reached the registry"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_worker(env: &Env, url: &str) -> Daemon {
    env.start(&[("BRAINLOOP_REGISTRY_URL", url)])
}

#[test]
fn a_workers_role_cannot_decide_and_sees_only_its_own_validations() {
    let c = pg::shared();
    let (db, op, ws) = registry(c, "roles", &["w1", "w2"]);
    let mut w1 = c.connect(&ws[0], &db);
    let mut w2 = c.connect(&ws[1], &db);
    let mut opc = c.connect(&op, &db);
    // The worker creates its validation (named after its role whatever it claims).
    w1.execute(
        "INSERT INTO validations(id, job_id, client_id, command, command_hash, status, requested_at)
         VALUES ('v1', 1, 'local', 'rm -rf x', 'h', 'pending', 1)",
        &[],
    )
    .unwrap();
    let e = w1
        .execute(
            "INSERT INTO validations(id, worker, job_id, client_id, status, requested_at)
             VALUES ('v2', $1, 1, 'local', 'pending', 1)",
            &[&ws[1]],
        )
        .unwrap_err();
    assert!(format!("{e:?}").contains("row-level security"), "{e:?}");
    // Another worker sees nothing of it.
    let n: i64 = w2
        .query_one("SELECT count(*) FROM validations", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // The operator decides; the worker may read that decision ...
    opc.execute(
        "INSERT INTO decisions(validation_id, decision, decided_by, created_at) VALUES ('v1', 'deny', 'operator:t', 1)",
        &[],
    )
    .unwrap();
    let d: String = w1
        .query_one(
            "SELECT decision FROM decisions WHERE validation_id = 'v1'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(d, "deny");
    // ... but PostgreSQL refuses it any write of one: turning the denial into an approval,
    // adding its own approval, deleting the denial.
    for sql in [
        "UPDATE decisions SET decision = 'approve' WHERE validation_id = 'v1'",
        "INSERT INTO decisions(validation_id, decision, decided_by, created_at) VALUES ('v1', 'approve', 'operator:forged', 2)",
        "DELETE FROM decisions",
    ] {
        let e = w1.execute(sql, &[]).unwrap_err();
        assert!(
            format!("{e:?}").contains("permission denied"),
            "{sql}: {e:?}"
        );
    }
    let d: String = w1
        .query_one("SELECT string_agg(decision, ',') FROM decisions", &[])
        .unwrap()
        .get(0);
    assert_eq!(d, "deny", "the decision is unchanged");
    // The worker's CLI with its own URL cannot approve either.
    let tmp = tempfile::tempdir().unwrap();
    w1.execute(
        "INSERT INTO validations(id, job_id, client_id, command, command_hash, status, requested_at)
         VALUES ('v3', 2, 'local', 'rm -rf y', 'h3', 'pending', 1)",
        &[],
    )
    .unwrap();
    let (st, o, e) = brainloop(&c.url_as(&ws[0], &db), tmp.path(), &["approve", "v3"]);
    assert!(!st.success(), "{o}{e}");
    assert!(e.contains("permission denied"), "{e}");
    let n: i64 = opc
        .query_one(
            "SELECT count(*) FROM decisions WHERE validation_id = 'v3'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // `registry status` names the role and its group.
    let out = ok(&c.url_as(&ws[0], &db), tmp.path(), &["registry", "status"]);
    assert!(
        out.contains("schema version ")
            && !out.contains("registry migrate")
            && out.contains("brainloop_worker"),
        "{out}"
    );
}

#[test]
fn three_workers_share_one_registry_and_the_operator_decides_from_another_machine() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "queue", &["a", "b", "c"]);
    let envs: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);

    // Worker B's job asks; its validation reaches the registry naming B.
    let (job_b, vid_b) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    assert_eq!(wait_published(c, &db, &vid_b), ws[1]);
    // Worker A's job asks too.
    let (job_a, vid_a) = asks(&envs[0], "sed -i s/one/UNO/ a.txt");
    assert_eq!(wait_published(c, &db, &vid_a), ws[0]);

    // The operator lists both, each naming its worker.
    let out = ok(&op_url, operator.path(), &["validations"]);
    assert!(out.contains(&vid_b) && out.contains(&vid_a), "{out}");
    assert!(out.contains(&format!("worker {}", ws[1])), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&op_url, operator.path(), &["validations", "--json"])).unwrap();
    let row = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == vid_b.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["worker"], ws[1].as_str(), "{row}");

    // Approve B's from the operator's machine: B's job resumes and applies its change set.
    let t0 = Instant::now();
    let out = ok(&op_url, operator.path(), &["approve", &vid_b]);
    assert!(out.contains(&format!("on worker {}", ws[1])), "{out}");
    let (st, v, e) = final_result(&envs[1], job_b);
    assert_eq!(st, "succeeded", "{v} {e}");
    eprintln!("approve → job done on worker B: {:?}", t0.elapsed());
    assert_eq!(read(&envs[1], "a.txt").as_deref(), Some("ONE\n"));
    // Deny A's: A's job ends denied, nothing applied.
    ok(
        &op_url,
        operator.path(),
        &["deny", &vid_a, "--reason", "no"],
    );
    let (st, v, e) = final_result(&envs[0], job_a);
    assert_eq!(st, "denied", "{v} {e}");
    assert!(e.contains("operator:"), "{e}");
    assert_eq!(read(&envs[0], "a.txt").as_deref(), Some("one\n"));
    // C saw nothing of either; its workspace is untouched.
    assert_eq!(read(&envs[2], "a.txt").as_deref(), Some("one\n"));
    let n: i64 = envs[2]
        .db("command_security.db")
        .query_row("SELECT count(*) FROM approvals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "worker C took no decision");
    // A second decision on the same validation is refused; the registry shows them decided.
    let (st, _, e) = brainloop(&op_url, operator.path(), &["approve", &vid_b]);
    assert!(!st.success() && e.contains("already"), "{e}");
    let t0 = Instant::now();
    loop {
        let out = ok(&op_url, operator.path(), &["validations", "--all"]);
        if out.contains("[approved]") && out.contains("[denied]") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn approve_learn_from_the_operator_teaches_the_worker_that_asked() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "learn", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            std::fs::write(e.workspace.join("b.txt"), "x\n").unwrap();
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    let out = ok(&op_url, operator.path(), &["approve", &vid, "--learn"]);
    assert!(out.contains("and learn its signatures"), "{out}");
    assert_eq!(final_result(&envs[1], job).0, "succeeded");
    // Worker B applies the next command of that signature without a human ...
    let (_, st, v, e) = submit(&envs[1], "sed -i s/x/X/ b.txt");
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(read(&envs[1], "b.txt").as_deref(), Some("X\n"));
    // ... and says who taught it: the operator's decision from the registry.
    let sigs: serde_json::Value =
        serde_json::from_str(&common::cli_ok(&envs[1], &["signatures", "--json"])).unwrap();
    let row = sigs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == "sed -i EXPR WS_PATH")
        .cloned()
        .unwrap_or_else(|| panic!("{sigs}"));
    assert!(
        row["clients"][0]["learned_by"]
            .as_str()
            .unwrap()
            .starts_with("operator:"),
        "{row}"
    );
    // The default scope is the worker that asked: worker A still asks for the same command
    // (`--scope fleet` shares it: `learn_fleet_wide_…`), and the registry holds no fleet rule.
    let (_, st, _, _) = submit(&envs[0], "sed -i s/x/X/ b.txt");
    assert_eq!(st, "pending_validation");
    let n: i64 = c
        .connect("postgres", &db)
        .query_one("SELECT count(*) FROM learned_rules", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // deny --learn is a usage error, nothing decided.
    let (_, vid2) = asks(&envs[0], "sed -i s/one/UNO/ a.txt");
    wait_published(c, &db, &vid2);
    let (st, _, e) = brainloop(&op_url, operator.path(), &["deny", &vid2, "--learn"]);
    assert!(!st.success(), "{e}");
}

#[test]
fn a_decision_made_while_the_worker_was_killed_is_taken_once_at_its_restart() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "restart", &["w"]);
    let env = Env::new();
    setup_ws(&env);
    let url = c.url_as(&ws[0], &db);
    let d = start_worker(&env, &url);
    let (job, vid) = asks(&env, "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    d.kill9();
    let operator = tempfile::tempdir().unwrap();
    ok(&c.url_as(&op, &db), operator.path(), &["approve", &vid]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.result(job).unwrap().0, "pending_validation");
    let _d = start_worker(&env, &url);
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\n"));
    // Taken once: one local decision row, one delivery.
    let n: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM approvals WHERE validation_id = ?1",
            [&vid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    let mut admin = c.connect("postgres", &db);
    let n: i64 = admin
        .query_one("SELECT count(*) FROM deliveries", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[test]
fn the_registry_stopped_mid_run_runs_nothing_unapproved_and_recovers() {
    common::require_sandbox();
    let c = Cluster::start();
    let (db, op, ws) = registry(&c, "outage", &["w"]);
    let env = Env::new();
    setup_ws(&env);
    std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
    let _d = start_worker(&env, &c.url_as(&ws[0], &db));
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);

    // One waits, published, when the registry goes away.
    let (job1, vid1) = asks(&env, "sed -i s/one/ONE/ a.txt");
    wait_published(&c, &db, &vid1);
    c.stop();
    // A job that needs a human waits (never runs); a pure one still runs.
    let (job2, vid2) = asks(&env, "sed -i s/x/X/ b.txt");
    let (_, st, v, e) = submit(&env, "echo still-fine");
    assert_eq!(st, "succeeded", "{v} {e}");
    // `status` names the cause.
    let t0 = Instant::now();
    loop {
        let (_, out, err) = env.cli(&["status"]);
        if out.contains("registry") && out.contains("cannot be reached") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "status never named the registry: {out}{err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The operator cannot decide meanwhile, and nothing ran.
    let (st, _, e) = brainloop(&op_url, operator.path(), &["approve", &vid1]);
    assert!(!st.success() && e.contains("registry"), "{e}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(env.result(job1).unwrap().0, "pending_validation");
    assert_eq!(env.result(job2).unwrap().0, "pending_validation");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\n"));
    assert_eq!(read(&env, "b.txt").as_deref(), Some("x\n"));

    // Back: the request made during the outage reaches the registry, both are decided and run.
    c.resume();
    wait_published(&c, &db, &vid2);
    ok(&op_url, operator.path(), &["approve", &vid1]);
    ok(&op_url, operator.path(), &["approve", &vid2]);
    assert_eq!(final_result(&env, job1).0, "succeeded");
    assert_eq!(final_result(&env, job2).0, "succeeded");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\n"));
    assert_eq!(read(&env, "b.txt").as_deref(), Some("X\n"));
    let t0 = Instant::now();
    loop {
        let (_, out, _) = env.cli(&["status"]);
        if !out.contains("cannot be reached") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    c.stop();
}

/// Submits `cmd` on `env` until it asks (a revocation reaching the worker), for up to 15 s;
/// returns how many ran unasked before.
fn until_it_asks(env: &Env, cmd: &str, file: &str) -> usize {
    let t0 = Instant::now();
    let mut ran = 0;
    loop {
        std::fs::write(env.workspace.join(file), "x\n").unwrap();
        let (_, st, v, e) = submit(env, cmd);
        if st == "pending_validation" {
            return ran;
        }
        assert_eq!(st, "succeeded", "{v} {e}");
        ran += 1;
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{cmd} still runs unasked {:?} after the revocation",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Worker `env` runs `cmd` unasked under a learned signature (waits up to 15 s for the rule).
fn runs_unasked(env: &Env, cmd: &str, file: &str) {
    let t0 = Instant::now();
    loop {
        std::fs::write(env.workspace.join(file), "x\n").unwrap();
        let (_, st, v, e) = submit(env, cmd);
        if st == "succeeded" {
            assert_eq!(v["policy_used"], "signature_learned", "{v}");
            assert_eq!(read(env, file).as_deref(), Some("X\n"));
            return;
        }
        assert_eq!(st, "pending_validation", "{v} {e}");
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{cmd} never ran unasked: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The fleet's rule `sig` as the registry has it.
fn fleet_rule(op_url: &str, operator: &std::path::Path, sig: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&ok(op_url, operator, &["signatures", "--fleet", "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == sig)
        .cloned()
        .unwrap_or_else(|| panic!("no fleet rule {sig}: {v}"))
}

#[test]
fn learn_fleet_wide_on_one_worker_is_used_by_the_others_and_revoke_stops_it_everywhere() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "fleetlearn", &["a", "b", "c"]);
    let envs: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    // Before: every worker asks for its own sed.
    std::fs::write(envs[0].workspace.join("d.txt"), "x\n").unwrap();
    let (_, st, _, _) = submit(&envs[0], "sed -i s/x/X/ d.txt");
    assert_eq!(st, "pending_validation");
    // Worker B's human teaches the fleet.
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    // The operator sees what a fleet-wide --learn would teach before deciding.
    let out = ok(&op_url, operator.path(), &["validations"]);
    assert!(
        out.contains("what --learn --scope fleet teaches every worker): `sed -i EXPR WS_PATH`"),
        "{out}"
    );
    let out = ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", "fleet"],
    );
    assert!(
        out.contains("on every worker of the fleet") && out.contains("sed -i EXPR WS_PATH"),
        "{out}"
    );
    assert_eq!(final_result(&envs[1], job).0, "succeeded");
    // A and C (and B) run the same signature unasked.
    for e in [&envs[0], &envs[2], &envs[1]] {
        runs_unasked(e, "sed -i s/x/X/ b.txt", "b.txt");
    }
    // Provenance: the registry's rule names the operator, its role, the validation, the scope;
    // `signatures` on a worker lists it.
    let rule = fleet_rule(&op_url, operator.path(), "sed -i EXPR WS_PATH");
    assert_eq!(rule["scope"], "fleet", "{rule}");
    assert_eq!(rule["db_role"], op.as_str(), "{rule}");
    assert_eq!(rule["validation_id"], vid.as_str(), "{rule}");
    assert!(
        rule["learned_by"]
            .as_str()
            .unwrap()
            .starts_with("operator:"),
        "{rule}"
    );
    let listed = ok(&c.url_as(&ws[2], &db), &envs[2].data, &["signatures"]);
    assert!(
        listed.contains("fleet rules") && listed.contains("[fleet] `sed -i EXPR WS_PATH`"),
        "{listed}"
    );
    // B did not learn it for itself: the fleet's rule is what applies there too.
    let n: i64 = envs[1]
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM signature_evidence WHERE learned_at IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);

    // A worker cannot revoke (its role may not write learned rules).
    let (st, _, e) = brainloop(
        &c.url_as(&ws[0], &db),
        &envs[0].data,
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    assert!(!st.success() && e.contains("permission denied"), "{e}");
    // The operator revokes: every worker asks again.
    let out = ok(
        &op_url,
        operator.path(),
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    assert!(out.contains("revoked fleet:"), "{out}");
    for e in &envs {
        until_it_asks(e, "sed -i s/x/X/ b.txt", "b.txt");
    }
    let rule = fleet_rule(&op_url, operator.path(), "sed -i EXPR WS_PATH");
    assert!(
        rule["revoked_at"].is_i64()
            && rule["revoked_by"]
                .as_str()
                .unwrap()
                .starts_with("operator:"),
        "{rule}"
    );
    // A second revoke finds nothing active.
    let (st, _, e) = brainloop(
        &op_url,
        operator.path(),
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    assert!(!st.success() && e.contains("no active fleet rule"), "{e}");
}

#[test]
fn a_workers_role_cannot_write_a_learned_rule() {
    let c = pg::shared();
    let (db, op, ws) = registry(c, "rules", &["w1"]);
    let mut w1 = c.connect(&ws[0], &db);
    let mut opc = c.connect(&op, &db);
    w1.execute(
        "INSERT INTO validations(id, job_id, client_id, command, status, requested_at, signatures)
         VALUES ('v1', 1, 'local', 'sed -i s/a/b/ f', 'pending', 1, '[\"sed -i EXPR WS_PATH\"]')",
        &[],
    )
    .unwrap();
    // The worker cannot learn anything for the fleet, nor forge the operator's name.
    for (sql, role) in [
        ("INSERT INTO learned_rules(rule, client_id, scope, learned_by, created_at) VALUES ('rm -r WS_PATH', 'local', 'fleet', 'operator:x', 1)", None),
        ("INSERT INTO learned_rules(rule, client_id, scope, learned_by, db_role, created_at) VALUES ('rm -r WS_PATH', 'local', 'fleet', 'operator:x', $1, 1)", Some(op.clone())),
    ] {
        let e = match &role {
            Some(r) => w1.execute(sql, &[r]),
            None => w1.execute(sql, &[]),
        }
        .unwrap_err();
        assert!(format!("{e:?}").contains("permission denied for table learned_rules"), "{e:?}");
    }
    // The worker cannot change the signatures it published once inserted.
    let e = w1
        .execute(
            "UPDATE validations SET signatures = '[\"rm -r WS_PATH\"]' WHERE id = 'v1'",
            &[],
        )
        .unwrap_err();
    assert!(format!("{e:?}").contains("permission denied"), "{e:?}");
    // The operator learns (under its own role only) ...
    let e = opc
        .execute(
            "INSERT INTO learned_rules(rule, client_id, scope, learned_by, db_role, created_at) VALUES ('x', 'local', 'fleet', 'operator:x', 'someone_else', 1)",
            &[],
        )
        .unwrap_err();
    assert!(format!("{e:?}").contains("row-level security"), "{e:?}");
    let id: i64 = opc
        .query_one(
            "INSERT INTO learned_rules(rule, client_id, scope, learned_by, created_at) VALUES ('sed -i EXPR WS_PATH', 'local', 'fleet', 'operator:t', 1) RETURNING id",
            &[],
        )
        .unwrap()
        .get(0);
    // ... which the worker reads but cannot revoke, widen or delete.
    let n: i64 = w1
        .query_one("SELECT count(*) FROM learned_rules", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    for sql in [
        "UPDATE learned_rules SET revoked_at = 1 WHERE id = $1",
        "UPDATE learned_rules SET rule = 'rm -r WS_PATH' WHERE id = $1",
        "DELETE FROM learned_rules WHERE id = $1",
    ] {
        let e = w1.execute(sql, &[&id]).unwrap_err();
        assert!(
            format!("{e:?}").contains("permission denied for table learned_rules"),
            "{sql}: {e:?}"
        );
    }
    // The operator may revoke, never rewrite what was learned.
    let e = opc
        .execute(
            "UPDATE learned_rules SET rule = 'rm -r WS_PATH' WHERE id = $1",
            &[&id],
        )
        .unwrap_err();
    assert!(format!("{e:?}").contains("permission denied"), "{e:?}");
    opc.execute(
        "UPDATE learned_rules SET revoked_at = 2, revoked_by = 'operator:t', revoked_role = current_user WHERE id = $1",
        &[&id],
    )
    .unwrap();
}

#[test]
fn a_revocation_made_while_a_worker_is_cut_off_applies_before_the_rule_is_used_again() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "cutoff", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", "fleet"],
    );
    assert_eq!(final_result(&envs[1], job).0, "succeeded");
    runs_unasked(&envs[0], "sed -i s/x/X/ b.txt", "b.txt");

    // Worker A is cut off from the registry (its login refused, its connection ended) ...
    let mut admin = c.connect("postgres", &db);
    let cut = format!(
        "ALTER ROLE \"{0}\" NOLOGIN; SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{0}'",
        ws[0]
    );
    admin.batch_execute(&cut).unwrap();
    // ... and the operator revokes meanwhile.
    ok(
        &op_url,
        operator.path(),
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    let t0 = Instant::now();
    loop {
        let (_, out, _) = envs[0].cli(&["status"]);
        if out.contains("cannot be reached") {
            break;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Cut off, A uses no fleet rule: the command asks (and waits, never runs unapproved).
    std::fs::write(envs[0].workspace.join("b.txt"), "x\n").unwrap();
    let (job_a, _) = asks(&envs[0], "sed -i s/x/X/ b.txt");
    // Back: the revocation is in A's copy before any fleet rule is used again.
    admin
        .batch_execute(&format!("ALTER ROLE \"{}\" LOGIN", ws[0]))
        .unwrap();
    let t0 = Instant::now();
    loop {
        let (_, out, _) = envs[0].cli(&["status"]);
        if !out.contains("cannot be reached") {
            break;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(envs[0].workspace.join("c.txt"), "x\n").unwrap();
    let (_, st, v, _) = submit(&envs[0], "sed -i s/x/X/ c.txt");
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(envs[0].result(job_a).unwrap().0, "pending_validation");
    assert_eq!(read(&envs[0], "b.txt").as_deref(), Some("x\n"));
    assert_eq!(read(&envs[0], "c.txt").as_deref(), Some("x\n"));
}

#[test]
fn a_worker_whose_registry_hangs_stops_using_fleet_rules_once_its_copy_is_stale() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "stale", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", "fleet"],
    );
    assert_eq!(final_result(&envs[1], job).0, "succeeded");
    runs_unasked(&envs[0], "sed -i s/x/X/ b.txt", "b.txt");

    // Worker A's registry connection hangs (its server process stopped): no error reaches the
    // bridge, no pull succeeds; the operator revokes meanwhile.
    let mut admin = c.connect("postgres", &db);
    let pids: Vec<i32> = admin
        .query(
            "SELECT pid FROM pg_stat_activity WHERE usename = $1",
            &[&ws[0]],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!pids.is_empty());
    for p in &pids {
        kill(Pid::from_raw(*p), Signal::SIGSTOP).unwrap();
    }
    ok(
        &op_url,
        operator.path(),
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    // Past `learned_fresh_ms` (5 s) without a pull, A uses no fleet rule: it asks.
    std::thread::sleep(Duration::from_millis(5500));
    std::fs::write(envs[0].workspace.join("c.txt"), "x\n").unwrap();
    let (_, st, v, _) = submit(&envs[0], "sed -i s/x/X/ c.txt");
    for p in &pids {
        kill(Pid::from_raw(*p), Signal::SIGCONT).unwrap();
    }
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(read(&envs[0], "c.txt").as_deref(), Some("x\n"));
    // Resumed: it has the revocation, it still asks.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(envs[0].workspace.join("d.txt"), "x\n").unwrap();
    let (_, st, v, _) = submit(&envs[0], "sed -i s/x/X/ d.txt");
    assert_eq!(st, "pending_validation", "{v}");
}

#[test]
fn a_fleet_rule_with_an_expiry_stops_applying_once_expired() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "expiry", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            setup_ws(e);
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    // --expires without a fleet scope is refused, nothing decided.
    let (st, _, e) = brainloop(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--expires", "1h"],
    );
    assert!(!st.success() && e.contains("--scope fleet"), "{e}");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    ok(
        &op_url,
        operator.path(),
        &[
            "approve",
            &vid,
            "--learn",
            "--scope",
            "fleet",
            "--expires",
            "1h",
        ],
    );
    assert_eq!(final_result(&envs[1], job).0, "succeeded");
    let rule = fleet_rule(&op_url, operator.path(), "sed -i EXPR WS_PATH");
    let exp = rule["expires_at"].as_i64().unwrap();
    assert!(
        exp >= before + 3_600_000 && exp < before + 3_700_000,
        "{rule}"
    );
    runs_unasked(&envs[0], "sed -i s/x/X/ b.txt", "b.txt");
    // Its expiry passes (moved into the past by the database's owner): every worker asks again.
    let mut admin = c.connect("postgres", &db);
    admin
        .execute(
            "UPDATE learned_rules SET expires_at = $1 WHERE id = $2",
            &[&(before - 1), &rule["id"].as_i64().unwrap()],
        )
        .unwrap();
    for e in &envs {
        until_it_asks(e, "sed -i s/x/X/ b.txt", "b.txt");
    }
    let listed = ok(&op_url, operator.path(), &["signatures", "--fleet"]);
    assert!(listed.contains("; expired at"), "{listed}");
}
