//! Decision propagation on a fleet registry (issue 37): prints figures, asserts nothing
//! (`cargo bench --bench fleet_propagation`).
//!
//! Three workers (own data dirs) on one PostgreSQL registry the bench starts itself
//! (`tests/common/pg.rs`: initdb + postgres in a temp dir, as uid 65534 when run as root). Each
//! round, one worker (in turn) asks for a change set (`sed -i` on its own file); once the
//! request is in the registry, the operator's connection commits the decision, and the clock
//! runs until the job's final result is in that worker's output.db (polled every 2 ms): the
//! decision's way through NOTIFY, the worker's bridge, its loop, the approved run and the
//! apply. The same rounds on one worker without a registry (the decision row written into its
//! command_security.db, as `brainloop approve` does) give the local baseline.
//!
//! Env: BENCH_DECISIONS (default 60, split over the three workers).

#[path = "../tests/common/mod.rs"]
mod common;

use common::pg::Cluster;
use common::{Daemon, Env, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

fn final_status(env: &Env, job: i64) -> Option<String> {
    env.result(job)
        .map(|r| r.0)
        .filter(|s| !["queued", "running", "pending_validation"].contains(&s.as_str()))
}

fn pending(env: &Env, job: i64) -> String {
    let t0 = Instant::now();
    loop {
        if let Some((st, res, _, _)) = env.result(job) {
            if st == "pending_validation" {
                let v: serde_json::Value = serde_json::from_str(&res.unwrap()).unwrap();
                return v["validation_id"].as_str().unwrap().to_string();
            }
            assert!(st == "queued" || st == "running", "job {job}: {st}");
        }
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_final(env: &Env, job: i64) -> Duration {
    let t0 = Instant::now();
    loop {
        if let Some(st) = final_status(env, job) {
            assert_eq!(st, "succeeded", "job {job}");
            return t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn ask(env: &Env, k: usize) -> i64 {
    let f = format!("f{k}.txt");
    std::fs::write(env.workspace.join(&f), "one\n").unwrap();
    common::job(
        env,
        "local",
        "execute_bash",
        &serde_json::json!({ "command": format!("sed -i s/one/ONE{k}/ {f}") }),
    )
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99), *v.last().unwrap())
}

fn main() {
    let n: usize = std::env::var("BENCH_DECISIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    // Never learn from the rounds: every one asks.
    let quiet = [("BRAINLOOP_SIGNATURE_APPROVALS", "1000000")];

    let c = Cluster::start();
    c.create_db("bench");
    let admin = c.admin_url("bench");
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env("BRAINLOOP_DATA_DIR", tmp.path())
            .env("BRAINLOOP_REGISTRY_URL", &admin)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    run(&["registry", "migrate"]);
    run(&["registry", "add-role", "operator", "bench_op"]);
    let names = ["bench_w1", "bench_w2", "bench_w3"];
    for w in names {
        run(&["registry", "add-role", "worker", w]);
    }
    let envs: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let _d: Vec<Daemon> = envs
        .iter()
        .zip(names)
        .map(|(e, w)| {
            let url = c.url_as(w, "bench");
            e.start(&[quiet[0], ("BRAINLOOP_REGISTRY_URL", url.as_str())])
        })
        .collect();
    let mut op = c.connect("bench_op", "bench");
    let mut admin_c = c.connect("postgres", "bench");
    let mut fleet = Vec::new();
    for k in 0..n {
        let env = &envs[k % 3];
        let job = ask(env, k);
        let vid = pending(env, job);
        while admin_c
            .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
            .unwrap()
            .is_none()
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        op.execute(
            "INSERT INTO decisions(validation_id, decision, decided_by, created_at) VALUES ($1, 'approve', 'operator:bench', $2)",
            &[&vid, &common::now_ms()],
        )
        .unwrap();
        fleet.push(wait_final(env, job));
    }

    let local = Env::new();
    let _l = local.start(&quiet);
    let mut base = Vec::new();
    for k in 0..n {
        let job = ask(&local, k);
        let vid = pending(&local, job);
        local
            .db("command_security.db")
            .execute(
                "INSERT INTO approvals(validation_id, decision, reason, decided_by, created_at, learn) VALUES (?1, 'approve', NULL, 'operator:bench', ?2, 0)",
                rusqlite::params![vid, common::now_ms()],
            )
            .unwrap();
        base.push(wait_final(&local, job));
    }
    let (p50, p99, max) = percentiles(fleet);
    println!(
        "fleet registry, 3 workers: decision committed → job final on the worker that asked: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({n} decisions)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    let (p50, p99, max) = percentiles(base);
    println!(
        "local SQLite, 1 worker:    decision row committed → job final:                  p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({n} decisions)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    c.stop();
}
