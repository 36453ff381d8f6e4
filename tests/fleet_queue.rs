//! The operator queue from any machine and the reviewer's role (issue 37), through the real
//! binary and a real PostgreSQL the harness starts (`common::pg`). Workers with their own data
//! dirs share one registry; the operator's CLI runs from another data dir with the operator's
//! role: `show` prints a worker's validation with its diff and output, `history` every
//! worker's decisions and applications, `undo` is a request the worker that applied the change
//! set carries out (and, while that worker is down, says so and is carried out at its
//! restart). Each role's credentials are refused by PostgreSQL what it may not do: a worker
//! creating an undo request, a reviewer deciding as the operator, learning, overruling a human
//! or approving what a reviewer may not.

mod common;

use common::fleet::{self, brainloop, ok};
use common::pg::{self, Cluster};
use common::{final_result, submit, Daemon, Env, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

/// A migrated registry of this test's own: (db, operator, reviewer, workers).
fn registry(c: &Cluster, tag: &str, workers: &[&str]) -> (String, String, String, Vec<String>) {
    let r = fleet::registry(c, tag, workers);
    (r.db, r.operator, r.reviewer, r.workers)
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

fn asks(env: &Env, cmd: &str) -> (i64, String) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {err} {v}");
    (id, v["validation_id"].as_str().unwrap().to_string())
}

/// Waits until `sql` (one bool column, `$1` = `arg`) is true in the registry.
fn wait_until(c: &Cluster, db: &str, what: &str, sql: &str, arg: &str) {
    let mut cl = c.connect("postgres", db);
    let t0 = Instant::now();
    loop {
        if cl.query_one(sql, &[&arg]).unwrap().get::<_, bool>(0) {
            return;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "{what} never happened in the registry"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_published(c: &Cluster, db: &str, vid: &str) {
    wait_until(
        c,
        db,
        &format!("validation {vid} published"),
        "SELECT EXISTS (SELECT 1 FROM validations WHERE id = $1)",
        vid,
    );
}

fn start_worker(env: &Env, url: &str) -> Daemon {
    env.start(&[("BRAINLOOP_REGISTRY_URL", url)])
}

fn denied(e: &postgres::Error) -> bool {
    let t = format!("{e:?}");
    t.contains("permission denied") || t.contains("row-level security")
}

#[test]
fn show_history_and_undo_work_from_the_operators_machine() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, _, ws) = registry(c, "show", &["a", "b"]);
    let envs: Vec<Env> = (0..2).map(|_| Env::new()).collect();
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .map(|(e, w)| {
            std::fs::write(e.workspace.join("a.txt"), "one\n").unwrap();
            start_worker(e, &c.url_as(w, &db))
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);

    // Worker B asks; the operator's `show` on another machine prints what B's hooks get: the
    // command, its diff and output, naming B.
    let (job, vid) = asks(&envs[1], "sed -i s/one/ONE/ a.txt && echo edited-it");
    wait_published(c, &db, &vid);
    let out = ok(&op_url, operator.path(), &["show", &vid]);
    assert!(out.contains(&format!("on worker {}", ws[1])), "{out}");
    assert!(out.contains("sed -i s/one/ONE/ a.txt"), "{out}");
    assert!(
        out.contains("-one") && out.contains("+ONE"),
        "the diff: {out}"
    );
    assert!(out.contains("edited-it"), "the output: {out}");
    assert!(out.contains("signatures:"), "{out}");
    // `review --json` on the operator's machine: the payload B published, naming B.
    let rev: serde_json::Value =
        serde_json::from_str(&ok(&op_url, operator.path(), &["review", "--json"])).unwrap();
    let item = rev
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == vid.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{rev}"));
    assert_eq!(item["worker"], ws[1].as_str(), "{item}");
    assert_eq!(item["kind"], "change_set", "{item}");
    assert!(
        item["change_set"]["diff"]
            .as_str()
            .unwrap()
            .contains("+ONE"),
        "{item}"
    );
    // The same by job id, naming the worker.
    let out = ok(
        &op_url,
        operator.path(),
        &["show", &job.to_string(), "--worker", &ws[1]],
    );
    assert!(out.contains(&vid), "{out}");

    // Approved from the operator's machine: applied on B; `history` there says so.
    ok(&op_url, operator.path(), &["approve", &vid]);
    let (st, v, e) = final_result(&envs[1], job);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(read(&envs[1], "a.txt").as_deref(), Some("ONE\n"));
    wait_until(
        c,
        &db,
        "B's change set published",
        "SELECT EXISTS (SELECT 1 FROM applied_changes WHERE validation_id = $1)",
        &vid,
    );
    let hist: serde_json::Value =
        serde_json::from_str(&ok(&op_url, operator.path(), &["history", "--json"])).unwrap();
    let events: Vec<(String, String)> = hist
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap().to_string(),
                r["worker"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        events.contains(&("approve".into(), ws[1].clone())),
        "{hist}"
    );
    assert!(
        events.contains(&("applied".into(), ws[1].clone())),
        "{hist}"
    );
    let out = ok(&op_url, operator.path(), &["show", &vid]);
    assert!(out.contains("change set applied"), "{out}");

    // A worker's role may not ask for an undo, by SQL or by the CLI.
    let mut wb = c.connect(&ws[1], &db);
    let e = wb
        .execute(
            "INSERT INTO undo_requests(worker, job_id, requested_by, requested_at) VALUES ($1, $2, 'operator:forged', 1)",
            &[&ws[1], &job],
        )
        .unwrap_err();
    assert!(denied(&e), "{e:?}");
    let (st, o, e) = brainloop(
        &c.url_as(&ws[1], &db),
        operator.path(),
        &["undo", &job.to_string()],
    );
    assert!(!st.success(), "{o}{e}");
    assert_eq!(read(&envs[1], "a.txt").as_deref(), Some("ONE\n"));

    // The operator's undo from its machine: B carries it out on its own workspace.
    let out = ok(&op_url, operator.path(), &["undo", &job.to_string()]);
    assert!(out.contains("undid job") && out.contains("a.txt"), "{out}");
    assert_eq!(read(&envs[1], "a.txt").as_deref(), Some("one\n"));
    assert_eq!(
        read(&envs[0], "a.txt").as_deref(),
        Some("one\n"),
        "A untouched"
    );
    // Recorded on B as a local undo is, and published.
    let undone: Option<i64> = envs[1]
        .db("command_security.db")
        .query_row(
            "SELECT undone_at FROM journal WHERE job_id = ?1",
            [job],
            |r| r.get(0),
        )
        .unwrap();
    assert!(undone.is_some());
    wait_until(
        c,
        &db,
        "the undo published",
        "SELECT EXISTS (SELECT 1 FROM applied_changes WHERE validation_id = $1 AND undone_at IS NOT NULL)",
        &vid,
    );
    // A second undo is refused before any request.
    let (st, _, e) = brainloop(&op_url, operator.path(), &["undo", &job.to_string()]);
    assert!(!st.success() && e.contains("already undone"), "{e}");
    // An undo the worker's checks refuse (a later change touched the path) is reported.
    ok(&op_url, operator.path(), &["history"]);
}

#[test]
fn an_undo_requested_while_the_worker_is_down_waits_and_is_carried_out_at_its_restart() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, _, ws) = registry(c, "undo", &["w"]);
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let url = c.url_as(&ws[0], &db);
    let d = start_worker(&env, &url);
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let (job, vid) = asks(&env, "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &vid);
    ok(&op_url, operator.path(), &["approve", &vid]);
    assert_eq!(final_result(&env, job).0, "succeeded");
    wait_until(
        c,
        &db,
        "the change set published",
        "SELECT EXISTS (SELECT 1 FROM applied_changes WHERE validation_id = $1)",
        &vid,
    );
    d.kill9();
    // The worker is down: the request waits, and the CLI says where it stands (exit 3).
    let (st, o, e) = brainloop(
        &op_url,
        operator.path(),
        &["undo", &job.to_string(), "--wait", "1"],
    );
    assert_eq!(st.code(), Some(3), "{o}{e}");
    assert!(o.contains("still pending"), "{o}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\n"));
    let out = ok(&op_url, operator.path(), &["show", &job.to_string()]);
    assert!(out.contains("pending"), "{out}");
    // Back: it carries it out once and records the outcome.
    let _d = start_worker(&env, &url);
    wait_until(
        c,
        &db,
        "the undo carried out",
        "SELECT EXISTS (SELECT 1 FROM undo_requests WHERE job_id = $1::text::bigint AND status = 'done')",
        &job.to_string(),
    );
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\n"));
    let out = ok(&op_url, operator.path(), &["show", &job.to_string()]);
    assert!(out.contains(": done"), "{out}");
}

#[test]
fn each_roles_credentials_are_refused_what_it_may_not_do() {
    let c = pg::shared();
    let (db, op, rv, ws) = registry(c, "roles", &["w1", "w2"]);
    let mut w1 = c.connect(&ws[0], &db);
    let mut w2 = c.connect(&ws[1], &db);
    let mut opc = c.connect(&op, &db);
    let mut rvc = c.connect(&rv, &db);
    let shown = r#"{"kind":"change_set","truncated":false,"network":null,"generated":null}"#;
    let cut = r#"{"kind":"change_set","truncated":true,"network":null,"generated":null}"#;
    let sig = r#"["sed -i EXPR WS_PATH"]"#;
    let other_sig = r#"["touch WS_PATH"]"#;
    let mut put = |id: &str, detail: &str, sigs: &str, cmd: &str| {
        w1.execute(
            "INSERT INTO validations(id, job_id, client_id, command, command_hash, status, requested_at, signatures, detail)
             VALUES ($1, 1, 'local', $4, $4, 'pending', 1, $3, $2)",
            &[&id, &detail, &sigs, &cmd],
        )
        .unwrap();
    };
    put("ok1", shown, sig, "sed -i s/a/b/ f");
    put("cut", cut, other_sig, "touch x");
    put(
        "net",
        r#"{"kind":"change_set","truncated":false,"network":{"hosts":["x:443"]}}"#,
        other_sig,
        "touch y",
    );
    put("dn1", shown, sig, "sed -i s/c/d/ f");
    put("dn2", shown, sig, "sed -i s/e/f/ f");
    put("own", shown, other_sig, "touch z");
    let rv_insert = |c: &mut postgres::Client,
                     vid: &str,
                     d: &str,
                     by: &str,
                     learn: bool,
                     scope: &str| {
        c.execute(
            "INSERT INTO decisions(validation_id, decision, decided_by, created_at, learn, learn_scope) VALUES ($1, $2, $3, 1, $4, $5)",
            &[&vid, &d, &by, &learn, &scope],
        )
    };
    // The reviewer may approve a change set shown whole, local, no human denied ...
    rv_insert(&mut rvc, "ok1", "approve", "reviewer: r", false, "worker").unwrap();
    // ... never as the operator, never learning, never `always`, never twice.
    for (vid, d, by, learn, scope) in [
        ("own", "approve", "operator:forged", false, "worker"),
        ("own", "approve", "reviewer: r", true, "worker"),
        ("own", "approve", "reviewer: r", true, "fleet"),
        ("own", "always_allow", "reviewer: r", false, "worker"),
        ("own", "never", "reviewer: r", false, "worker"),
        ("ok1", "deny", "reviewer: r", false, "worker"),
        ("cut", "approve", "reviewer: r", false, "worker"),
        ("net", "approve", "reviewer: r", false, "worker"),
    ] {
        let e = rv_insert(&mut rvc, vid, d, by, learn, scope).unwrap_err();
        assert!(denied(&e), "{vid} {d} {by} {learn} {scope}: {e:?}");
    }
    // A reviewer may deny what it may not approve.
    rv_insert(&mut rvc, "cut", "deny", "reviewer: r", false, "worker").unwrap();
    // A human denied signature `sed -i EXPR WS_PATH` for client local: the reviewer may not
    // approve another command of it (but the operator may).
    rv_insert(&mut opc, "dn1", "deny", "operator:alice", false, "worker").unwrap();
    let e = rv_insert(&mut rvc, "dn2", "approve", "reviewer: r", false, "worker").unwrap_err();
    assert!(denied(&e), "{e:?}");
    rv_insert(
        &mut opc,
        "dn2",
        "approve",
        "operator:alice",
        false,
        "worker",
    )
    .unwrap();
    // A reviewer writes no learned rule, no undo request, changes no decision.
    for sql in [
        "INSERT INTO learned_rules(rule, client_id, scope, learned_by, created_at) VALUES ('x', 'local', 'fleet', 'reviewer: r', 1)",
        "INSERT INTO undo_requests(worker, job_id, requested_by, requested_at) VALUES ('w', 1, 'reviewer: r', 1)",
        "UPDATE decisions SET decision = 'approve'",
        "DELETE FROM decisions",
        "UPDATE validations SET status = 'approved'",
    ] {
        let e = rvc.execute(sql, &[]).unwrap_err();
        assert!(denied(&e), "{sql}: {e:?}");
    }
    // The operator's requests are its own; a worker answers only its own, once.
    let e = opc
        .execute(
            "INSERT INTO undo_requests(worker, job_id, requested_by, db_role, requested_at) VALUES ($1, 1, 'operator:x', 'someone', 1)",
            &[&ws[0]],
        )
        .unwrap_err();
    assert!(denied(&e), "{e:?}");
    let id: i64 = opc
        .query_one(
            "INSERT INTO undo_requests(worker, job_id, requested_by, requested_at) VALUES ($1, 1, 'operator:x', 1) RETURNING id",
            &[&ws[0]],
        )
        .unwrap()
        .get(0);
    let n = w2
        .execute(
            "UPDATE undo_requests SET status = 'done', outcome = 'forged' WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(n, 0, "another worker does not see it");
    let mut w1 = c.connect(&ws[0], &db);
    for sql in [
        "UPDATE undo_requests SET job_id = 2 WHERE id = $1",
        "UPDATE undo_requests SET worker = 'x' WHERE id = $1",
    ] {
        let e = w1.execute(sql, &[&id]).unwrap_err();
        assert!(denied(&e), "{sql}: {e:?}");
    }
    assert_eq!(
        w1.execute(
            "UPDATE undo_requests SET status = 'done', outcome = 'ok', done_at = 2 WHERE id = $1",
            &[&id]
        )
        .unwrap(),
        1
    );
    assert_eq!(
        w1.execute(
            "UPDATE undo_requests SET status = 'failed', outcome = 'again' WHERE id = $1",
            &[&id]
        )
        .unwrap(),
        0,
        "answered once"
    );
    // A worker publishes only its own applied change sets.
    let e = w1
        .execute(
            "INSERT INTO applied_changes(worker, job_id, command, summary, policy_used, applied_at) VALUES ($1, 1, 'x', 's', 'p', 1)",
            &[&ws[1]],
        )
        .unwrap_err();
    assert!(denied(&e), "{e:?}");
    // The worker may not change the detail it published.
    let e = w1
        .execute("UPDATE validations SET detail = '{}' WHERE id = 'own'", &[])
        .unwrap_err();
    assert!(denied(&e), "{e:?}");
}

#[test]
fn a_fleet_reviewer_decides_beside_the_operator_within_a_reviewers_limits() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, rv, ws) = registry(c, "reviewer", &["w"]);
    let env = Env::new();
    for f in ["a", "b", "c", "d"] {
        std::fs::write(env.workspace.join(format!("{f}.txt")), "one\n").unwrap();
    }
    let _d = start_worker(&env, &c.url_as(&ws[0], &db));
    let op_url = c.url_as(&op, &db);
    let rv_url = c.url_as(&rv, &db);
    let operator = tempfile::tempdir().unwrap();
    // The reviewer's machine: its own data dir and config, the reviewer's role.
    let rdir = tempfile::tempdir().unwrap();
    let script = rdir.path().join("rev.sh");
    std::fs::write(
        &script,
        "if grep -q DENYME; then echo 'deny told to'; else echo 'approve looks fine'; fi\n",
    )
    .unwrap();
    let cfg = rdir.path().join("reviewer.toml");
    std::fs::write(
        &cfg,
        format!(
            "[reviewer]\ncommand = \"bash {}\"\nread = [\"{}\"]\ntimeout_ms = 10000\n",
            script.display(),
            rdir.path().display()
        ),
    )
    .unwrap();
    let review_once = || {
        let out = Command::new(BIN)
            .args(["reviewer", "fleet", "--once"])
            .env("BRAINLOOP_DATA_DIR", rdir.path().join("data"))
            .env("BRAINLOOP_CONFIG", &cfg)
            .env("BRAINLOOP_REGISTRY_URL", &rv_url)
            .output()
            .unwrap();
        let o = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{o}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        o
    };

    // An approve of a local change set shown whole: the worker applies it, as the reviewer's.
    let (j1, v1) = asks(&env, "sed -i s/one/ONE/ a.txt");
    wait_published(c, &db, &v1);
    let out = review_once();
    assert!(
        out.contains(&format!("{v1} (worker {}): approve by the reviewer", ws[0])),
        "{out}"
    );
    let (st, v, e) = final_result(&env, j1);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\n"));
    let by: String = env
        .db("command_security.db")
        .query_row(
            "SELECT decided_by FROM approvals WHERE validation_id = ?1",
            [&v1],
            |r| r.get(0),
        )
        .unwrap();
    assert!(by.starts_with("reviewer:"), "{by}");

    // A deny.
    let (j2, v2) = asks(&env, "sed -i s/one/DENYME/ b.txt");
    wait_published(c, &db, &v2);
    let out = review_once();
    assert!(
        out.contains(&format!("{v2} (worker {}): deny", ws[0])),
        "{out}"
    );
    assert_eq!(final_result(&env, j2).0, "denied");

    // An approve PostgreSQL lets through but the worker's own limits refuse (a protected path,
    // which only the worker judges): not acted on, recorded, and the human decides it.
    std::fs::write(env.workspace.join(".vimrc"), "one\n").unwrap();
    let (j5, v5) = asks(&env, "sed -i s/one/VIM/ .vimrc");
    wait_published(c, &db, &v5);
    let out = review_once();
    assert!(
        out.contains(&format!("{v5} (worker {}): approve by the reviewer", ws[0])),
        "{out}"
    );
    wait_until(
        c,
        &db,
        "the worker's refusal",
        "SELECT EXISTS (SELECT 1 FROM deliveries x JOIN decisions d ON d.id = x.decision_id
                        WHERE d.validation_id = $1 AND x.refused LIKE '%protected%')",
        &v5,
    );
    assert_eq!(env.result(j5).unwrap().0, "pending_validation");
    assert_eq!(read(&env, ".vimrc").as_deref(), Some("one\n"));
    let out = ok(&op_url, operator.path(), &["show", &v5]);
    assert!(out.contains("REFUSED by the worker"), "{out}");
    let out = ok(&op_url, operator.path(), &["validations"]);
    assert!(out.contains(&v5) && out.contains("[pending]"), "{out}");
    ok(&op_url, operator.path(), &["approve", &v5]);
    assert_eq!(final_result(&env, j5).0, "succeeded");
    assert_eq!(read(&env, ".vimrc").as_deref(), Some("VIM\n"));

    // The human denies a command of signature `sed -i EXPR WS_PATH` for this client: the
    // reviewer's approve of another one is refused by PostgreSQL; the human decides it.
    let (j3, v3) = asks(&env, "sed -i s/one/UNO/ c.txt");
    wait_published(c, &db, &v3);
    ok(&op_url, operator.path(), &["deny", &v3]);
    assert_eq!(final_result(&env, j3).0, "denied");
    let (j4, v4) = asks(&env, "sed -i s/one/EINS/ d.txt");
    wait_published(c, &db, &v4);
    let out = review_once();
    assert!(
        out.contains(&format!(
            "{v4} (worker {}): the reviewer's approve is refused",
            ws[0]
        )),
        "{out}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.result(j4).unwrap().0, "pending_validation");
    assert_eq!(read(&env, "d.txt").as_deref(), Some("one\n"));
    ok(&op_url, operator.path(), &["approve", &v4]);
    assert_eq!(final_result(&env, j4).0, "succeeded");
    // Nothing a reviewer decided taught anything: no fleet rule, nothing learned.
    let n: i64 = c
        .connect("postgres", &db)
        .query_one("SELECT count(*) FROM learned_rules", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

/// Issue 49: what a worker's role may write in the registry — a validation's id, policy and
/// set (its insert), its status (its update) — reaches the operator's terminal through the
/// sanitiser in `validations`, `show` and `review --json` stays exact.
#[test]
fn what_a_worker_writes_in_the_registry_reaches_the_operators_terminal_inert() {
    let c = pg::shared();
    let (db, op, _, ws) = registry(c, "hostile", &["w"]);
    let mut w = c.connect(&ws[0], &db);
    // A clipboard write (OSC 52), a screen clear, a C1 CSI, a bidi override.
    let id = "v1\u{1b}]52;c;aGFjaw==\u{7}\u{1b}[2J";
    let policy = "ask\u{1b}[8m";
    let set = "minimal\u{9b}1A\u{202e}";
    w.execute(
        "INSERT INTO validations(id, job_id, client_id, command, command_hash, policy, risk_score,
                                 permission_set, reasons, status, requested_at)
         VALUES ($1, 7, 'local', 'echo hi', 'h', $2, 0.5, $3, '[]', 'pending', 1)",
        &[&id, &policy, &set],
    )
    .unwrap();
    let op_url = c.url_as(&op, &db);
    let operator = tempfile::tempdir().unwrap();
    let inert = |what: &str, out: &str| {
        for bad in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!out.contains(bad), "{what} printed {bad:?} raw: {out:?}");
        }
        assert!(out.contains("\\x1b]52;c;"), "{what}: {out:?}");
    };
    let out = ok(&op_url, operator.path(), &["validations"]);
    inert("validations", &out);
    assert!(
        out.contains("\\x1b[8m") && out.contains("\\x9b1A"),
        "{out:?}"
    );
    let out = ok(&op_url, operator.path(), &["show", id]);
    inert("show", &out);
    // The status a worker may update.
    let status = "pending\u{1b}]52;c;aGFjaw==\u{7}";
    w.execute(
        "UPDATE validations SET status = $1, decided_at = 2 WHERE id = $2",
        &[&status, &id],
    )
    .unwrap();
    let out = ok(&op_url, operator.path(), &["validations", "--all"]);
    inert("validations --all", &out);
    let out = ok(&op_url, operator.path(), &["show", id]);
    inert("show", &out);
    // --json: the exact values.
    let rows: serde_json::Value = serde_json::from_str(&ok(
        &op_url,
        operator.path(),
        &["validations", "--all", "--json"],
    ))
    .unwrap();
    let row = &rows.as_array().unwrap()[0];
    assert_eq!(row["id"], id);
    assert_eq!(row["status"], status);
    assert_eq!(row["permission_set"], set);
}
