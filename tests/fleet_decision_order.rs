//! A human's decision wins over a fleet reviewer's (issue 49), through the real binary, a real
//! PostgreSQL the harness starts (`common::pg`) and a worker that is stopped and restarted:
//! PostgreSQL serialises the two roles' decisions on one validation (both inserts lock its row),
//! so a reviewer's insert made while a human's decision is uncommitted fails once it commits; a
//! reviewer's approve held in an open transaction while the operator denies, the worker away
//! meanwhile, does not win by its lower id — the restarted worker takes the human's denial; and
//! a denial after the worker acted on a reviewer's approve is recorded, naming `brainloop undo`.

mod common;

use common::fleet::{self, brainloop, ok};
use common::pg::{self, Cluster};
use common::{final_result, submit, Daemon, Env, BIN};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
        "SELECT EXISTS (SELECT 1 FROM validations WHERE id = $1 AND detail IS NOT NULL)",
        vid,
    );
}

fn start_worker(env: &Env, url: &str) -> Daemon {
    env.start(&[("BRAINLOOP_REGISTRY_URL", url)])
}

fn read(env: &Env, rel: &str) -> String {
    std::fs::read_to_string(env.workspace.join(rel)).unwrap()
}

const REVIEWER_APPROVES: &str =
    "INSERT INTO decisions(validation_id, decision, reason, decided_by, created_at)
     VALUES ($1, 'approve', 'looks fine', 'reviewer: test', 1)";

#[test]
fn a_reviewers_approve_held_open_while_the_human_denies_loses_whatever_its_id() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "order", &["w"]);
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let url = c.url_as(&r.workers[0], &r.db);
    let d = start_worker(&env, &url);
    let op_url = c.url_as(&r.operator, &r.db);
    let operator = tempfile::tempdir().unwrap();
    let (job, vid) = asks(&env, "sed -i s/one/ONE/ a.txt");
    wait_published(c, &r.db, &vid);
    // The worker goes away from the registry (killed).
    drop(d);
    // The reviewer approves in a transaction it keeps open: the lower decision id.
    let mut rv = c.connect(&r.reviewer, &r.db);
    let mut tx = rv.transaction().unwrap();
    tx.execute(REVIEWER_APPROVES, &[&vid]).unwrap();
    // Meanwhile the operator denies.
    let deny = Command::new(BIN)
        .args(["deny", &vid])
        .env("BRAINLOOP_DATA_DIR", operator.path())
        .env("BRAINLOOP_REGISTRY_URL", &op_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    tx.commit().unwrap();
    let out = deny.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<(i64, String)> = c
        .connect("postgres", &r.db)
        .query(
            "SELECT id, decided_by FROM decisions WHERE validation_id = $1 ORDER BY id",
            &[&vid],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        ids[0].1.starts_with("reviewer:"),
        "the reviewer's has the lower id: {ids:?}"
    );
    // The worker comes back: it acts on the human's denial, never on the reviewer's approve.
    let _d = start_worker(&env, &url);
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "denied", "{v} {e}");
    assert_eq!(
        read(&env, "a.txt"),
        "one\n",
        "the change set was never applied"
    );
    wait_until(
        c,
        &r.db,
        "the reviewer's decision marked superseded",
        "SELECT EXISTS (SELECT 1 FROM deliveries x JOIN decisions d ON d.id = x.decision_id
                        WHERE d.validation_id = $1 AND x.refused LIKE 'superseded by the human%')",
        &vid,
    );
    let shown = ok(&op_url, operator.path(), &["show", &vid]);
    assert!(shown.contains("REFUSED by the worker"), "{shown}");
}

#[test]
fn a_reviewers_insert_while_a_humans_decision_is_uncommitted_waits_for_it_then_fails() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "lock", &["w"]);
    let env = Env::new();
    std::fs::write(env.workspace.join("b.txt"), "one\n").unwrap();
    let _d = start_worker(&env, &c.url_as(&r.workers[0], &r.db));
    let (job, vid) = asks(&env, "sed -i s/one/UNO/ b.txt");
    wait_published(c, &r.db, &vid);
    // The operator's role denies in a transaction of its own, not committed yet.
    let mut op = c.connect(&r.operator, &r.db);
    let mut tx = op.transaction().unwrap();
    tx.execute(
        "INSERT INTO decisions(validation_id, decision, decided_by, created_at)
         VALUES ($1, 'deny', 'operator:test', 1)",
        &[&vid],
    )
    .unwrap();
    let (rv, db, v2) = (r.reviewer.clone(), r.db.clone(), vid.clone());
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = started.clone();
    let reviewer = std::thread::spawn(move || {
        let mut cl = pg::shared().connect(&rv, &db);
        s2.store(true, std::sync::atomic::Ordering::SeqCst);
        cl.execute(REVIEWER_APPROVES, &[&v2]).map(|_| ())
    });
    while !started.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(700));
    tx.commit().unwrap();
    let res = reviewer.join().unwrap();
    let e = res.expect_err("the reviewer's approve after the human's denial must be refused");
    assert!(format!("{e:?}").contains("row-level security"), "{e:?}");
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "denied", "{v} {e}");
    assert_eq!(read(&env, "b.txt"), "one\n");
}

#[test]
fn a_denial_after_the_worker_applied_a_reviewers_approve_is_recorded_and_names_the_undo() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "late", &["w"]);
    let env = Env::new();
    std::fs::write(env.workspace.join("c.txt"), "one\n").unwrap();
    let _d = start_worker(&env, &c.url_as(&r.workers[0], &r.db));
    let op_url = c.url_as(&r.operator, &r.db);
    let operator = tempfile::tempdir().unwrap();
    let (job, vid) = asks(&env, "sed -i s/one/EINS/ c.txt");
    wait_published(c, &r.db, &vid);
    c.connect(&r.reviewer, &r.db)
        .execute(REVIEWER_APPROVES, &[&vid])
        .unwrap();
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(read(&env, "c.txt"), "EINS\n");
    wait_until(
        c,
        &r.db,
        "the validation closed and the change set published",
        "SELECT EXISTS (SELECT 1 FROM validations v JOIN applied_changes a ON a.validation_id = v.id
                        WHERE v.id = $1 AND v.status = 'approved')",
        &vid,
    );
    let (st, out, err) = brainloop(&op_url, operator.path(), &["deny", &vid]);
    assert!(st.success(), "{out}{err}");
    assert!(
        out.contains(&format!("`brainloop undo {job} --worker {}`", r.workers[0])),
        "{out}"
    );
    let n: i64 = c
        .connect("postgres", &r.db)
        .query_one(
            "SELECT count(*) FROM decisions WHERE validation_id = $1 AND decision = 'deny' AND decided_by NOT LIKE 'reviewer:%'",
            &[&vid],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1, "the human's denial is recorded");
    // A second human decision on it is refused (it is no longer the reviewer's alone).
    let (st, _, _) = brainloop(&op_url, operator.path(), &["deny", &vid]);
    assert!(!st.success());
}
