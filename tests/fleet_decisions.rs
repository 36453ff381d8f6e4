//! One decision per validation on the fleet registry (issue 50, finding 4), through the real
//! binary and a real PostgreSQL the harness starts (`common::pg`): two operators' `approve` and
//! `deny` of one validation at the same moment — the worker stopped, so neither is taken yet —
//! end with exactly one decision row; the other CLI exits non-zero saying who decided what and
//! when, and the job follows the decision that stood.

mod common;

use common::fleet;
use common::pg;
use common::{final_result, submit, Env, BIN};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_operators_deciding_at_once_leave_one_decision_and_the_second_is_told_who_decided() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "onedecision", &["a"]);
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_REGISTRY_URL", &c.url_as(&r.workers[0], &r.db))]);
    let op_url = c.url_as(&r.operator, &r.db);
    let operator = tempfile::tempdir().unwrap();
    let mut reg = c.connect("postgres", &r.db);
    let mut stood = Vec::new();
    for round in 0..8 {
        let (id, st, v, err) = submit(&env, &format!("echo {round} > f{round}"));
        assert_eq!(st, "pending_validation", "{err} {v}");
        let vid = common::vid(&v);
        let t0 = Instant::now();
        while reg
            .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
            .unwrap()
            .is_none()
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "never published");
            std::thread::sleep(Duration::from_millis(20));
        }
        d.signal(nix::sys::signal::Signal::SIGSTOP);
        let spawn = |verb: &str| {
            Command::new(BIN)
                .args([verb, &vid])
                .env("BRAINLOOP_DATA_DIR", operator.path())
                .env("BRAINLOOP_REGISTRY_URL", &op_url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn("approve"), spawn("deny"));
        let [a, b] = [a, b].map(|ch| {
            let o = ch.wait_with_output().unwrap();
            (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            )
        });
        let rows: i64 = reg
            .query_one(
                "SELECT count(*) FROM decisions WHERE validation_id = $1",
                &[&vid],
            )
            .unwrap()
            .get(0);
        d.signal(nix::sys::signal::Signal::SIGCONT);
        assert_eq!(rows, 1, "round {round}: one decision row ({a:?} {b:?})");
        assert!(
            a.0 != b.0,
            "round {round}: exactly one CLI succeeds: approve {a:?}, deny {b:?}"
        );
        let (won, lost) = if a.0 {
            ("approve", &b.1)
        } else {
            ("deny", &a.1)
        };
        assert!(
            lost.contains("already decided")
                && lost.contains(&format!(": {won} by "))
                && lost.contains("the first decision stands"),
            "round {round}: the refused CLI names the decision that stood: {lost}"
        );
        let (st, v, err) = final_result(&env, id);
        let expect = if won == "approve" {
            "succeeded"
        } else {
            "denied"
        };
        assert_eq!(st, expect, "round {round}: {err} {v}");
        stood.push(won);
    }
    eprintln!("decisions that stood: {stood:?}");
    d.kill9();
}

/// Issue 50, finding 12: a worker connected before the registry was migrated past its version
/// stops writing it at its next pass and says why (`status` exit 4), and writes again once the
/// registry is back at its version.
#[test]
fn a_registry_migrated_past_the_workers_version_mid_connection_stops_its_writes() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "newer", &["a"]);
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_REGISTRY_URL", &c.url_as(&r.workers[0], &r.db))]);
    let mut owner = c.connect("postgres", &r.db);
    let published = |owner: &mut postgres::Client, vid: &str| {
        owner
            .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
            .unwrap()
            .is_some()
    };
    let (_, st, v, err) = submit(&env, "echo a > a");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let first = common::vid(&v);
    let t0 = Instant::now();
    while !published(&mut owner, &first) {
        assert!(t0.elapsed() < Duration::from_secs(30), "never published");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A newer binary's migration, committed while the worker is connected.
    let next: i64 = owner
        .query_one("SELECT max(version) + 1 FROM registry_migrations", &[])
        .unwrap()
        .get(0);
    owner
        .execute(
            "INSERT INTO registry_migrations(version, applied_at) VALUES ($1, 0)",
            &[&next],
        )
        .unwrap();
    let t0 = Instant::now();
    loop {
        let out = Command::new(BIN)
            .args(["status", "--json", "--data-dir"])
            .arg(&env.data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.code() == Some(4) && text.contains(&format!("schema version {next}")) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "status never said the registry is newer: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, st, v, err) = submit(&env, "echo b > b");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let second = common::vid(&v);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !published(&mut owner, &second),
        "the worker wrote a registry newer than its schema"
    );
    owner
        .execute(
            "DELETE FROM registry_migrations WHERE version = $1",
            &[&next],
        )
        .unwrap();
    let t0 = Instant::now();
    while !published(&mut owner, &second) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never published once the registry was back at its version"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.kill9();
}
