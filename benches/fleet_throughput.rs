//! execute_bash throughput on a fleet registry (issue 37): prints figures, asserts nothing
//! (`cargo bench --bench fleet_throughput`).
//!
//! Three workers (own data dirs, own workspaces, on this machine) share one PostgreSQL registry
//! the bench starts itself (`tests/common/pg.rs`), against the local-SQLite default — the same
//! three workers without `[registry]` —, and one local worker alone, all in the same run. Each
//! case: the workers started and ready, then N pure `true` commands (no human: auto-approved,
//! confined, recorded, published) inserted in one transaction per worker (N/3 each; N for the
//! worker alone); the clock runs from the inserts until every job has its final result. With a
//! registry each worker's bridge is connected, LISTENing and polling throughout (what the
//! registry costs a worker that needs no decision). Ratios are against the local three workers
//! measured in the same run.
//!
//! Env: BENCH_COMMANDS (default 600, split over the workers).

#[path = "../tests/common/mod.rs"]
mod common;

use common::pg::Cluster;
use common::{Daemon, Env, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

fn done(env: &Env) -> i64 {
    env.output()
        .query_row(
            "SELECT count(*) FROM results WHERE status = 'succeeded'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0)
}

/// Inserts `n` jobs into each worker's input.db (one transaction each), then waits until all
/// succeeded: the elapsed time.
fn run(envs: &[Env], n: usize) -> Duration {
    let t0 = Instant::now();
    for e in envs {
        let mut c = e.input();
        let tx = c.transaction().unwrap();
        for _ in 0..n {
            tx.execute(
                "INSERT INTO jobs(action, params) VALUES ('execute_bash', '{\"command\": \"true\"}')",
                [],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    loop {
        if envs.iter().all(|e| done(e) >= n as i64) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1800),
            "jobs never finished"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn start(envs: &[Env], extra: &[Vec<(String, String)>]) -> Vec<Daemon> {
    envs.iter()
        .zip(extra)
        .map(|(e, x)| {
            let x: Vec<(&str, &str)> = x.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut all = vec![("BRAINLOOP_LOG", "warn")];
            all.extend(x);
            e.start(&all)
        })
        .collect()
}

fn main() {
    let n: usize = std::env::var("BENCH_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let per = (n / 3).max(1);

    // The local default: three workers, no registry.
    let local: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let d = start(&local, &vec![Vec::new(); 3]);
    let base = run(&local, per);
    drop(d);

    // One local worker alone, all N.
    let one = vec![Env::new()];
    let d = start(&one, &[Vec::new()]);
    let alone = run(&one, per * 3);
    drop(d);

    // Three workers on one registry.
    let c = Cluster::start();
    c.create_db("bench");
    let admin = c.admin_url("bench");
    let tmp = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env("BRAINLOOP_DATA_DIR", tmp.path())
            .env("BRAINLOOP_REGISTRY_URL", &admin)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    cli(&["registry", "migrate"]);
    let names = ["tp_w1", "tp_w2", "tp_w3"];
    for w in names {
        cli(&["registry", "add-role", "worker", w]);
    }
    let fleet: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    let extra: Vec<Vec<(String, String)>> = names
        .iter()
        .map(|w| vec![("BRAINLOOP_REGISTRY_URL".to_string(), c.url_as(w, "bench"))])
        .collect();
    let d = start(&fleet, &extra);
    let reg = run(&fleet, per);
    drop(d);
    c.stop();

    let rate = |d: Duration, jobs: usize| jobs as f64 / d.as_secs_f64();
    let b = rate(base, per * 3);
    println!(
        "local SQLite, 3 workers (baseline): {} jobs in {:.2} s = {:.1} jobs/s (1.00)",
        per * 3,
        base.as_secs_f64(),
        b
    );
    let a = rate(alone, per * 3);
    println!(
        "local SQLite, 1 worker:             {} jobs in {:.2} s = {:.1} jobs/s ({:.2} of the baseline)",
        per * 3,
        alone.as_secs_f64(),
        a,
        a / b
    );
    let r = rate(reg, per * 3);
    println!(
        "fleet registry, 3 workers:          {} jobs in {:.2} s = {:.1} jobs/s ({:.2} of the baseline)",
        per * 3,
        reg.as_secs_f64(),
        r,
        r / b
    );
}
