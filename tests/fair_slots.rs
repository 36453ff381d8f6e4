//! Fair slots (issue 18 item 6), on the real binary: one client cannot hold every concurrency
//! slot, a lone client still uses its whole share, `concurrency = 1` runs one job at a time in
//! order, and a SIGTERM drain with jobs held back at their client's share loses nothing.
//! Everything is asserted by ordering (start/finish intervals from `results`), never by timing.

mod common;

use common::{job, Env};
use serde_json::json;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

/// `n` sleep jobs of `ms` for `client`, in one transaction (the worker sees them all at once).
fn spinners(env: &Env, client: &str, n: usize, ms: u64) -> Vec<i64> {
    let mut c = env.input();
    let tx = c.transaction().unwrap();
    let ids = (0..n)
        .map(|_| {
            tx.execute(
                "INSERT INTO jobs(action, params, client_id) VALUES ('sleep', ?1, ?2)",
                rusqlite::params![json!({ "ms": ms }).to_string(), client],
            )
            .unwrap();
            tx.last_insert_rowid()
        })
        .collect();
    tx.commit().unwrap();
    ids
}

/// (job_id, started_at, finished_at, status, attempts) of `client`'s results, by job id.
fn runs(env: &Env, client: &str) -> Vec<(i64, i64, i64, String, i64)> {
    let c = env.output();
    let mut s = c
        .prepare(
            "SELECT job_id, started_at, coalesce(finished_at, 0), status, attempts FROM results
             WHERE client_id = ?1 ORDER BY job_id",
        )
        .unwrap();
    let rows = s
        .query_map([client], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// The most jobs of `runs` that were running at the same moment ([start, finish) intervals).
fn max_overlap(runs: &[(i64, i64, i64, String, i64)]) -> usize {
    runs.iter()
        .map(|&(_, s, ..)| runs.iter().filter(|r| r.1 <= s && s < r.2).count())
        .max()
        .unwrap_or(0)
}

fn running_count(env: &Env, client: &str) -> i64 {
    env.output()
        .query_row(
            "SELECT count(*) FROM results WHERE client_id = ?1 AND status = 'running'",
            [client],
            |r| r.get(0),
        )
        .unwrap()
}

fn wait_running(env: &Env, client: &str, n: i64) {
    let t0 = Instant::now();
    while running_count(env, client) < n {
        assert!(t0.elapsed() < LONG, "{client}: fewer than {n} jobs running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// All succeeded, exactly once each (one attempt), with the given ids.
fn all_succeeded_once(runs: &[(i64, i64, i64, String, i64)], ids: &[i64]) {
    let got: Vec<i64> = runs.iter().map(|r| r.0).collect();
    assert_eq!(got, ids, "every job has exactly one result row");
    for r in runs {
        assert_eq!((r.3.as_str(), r.4), ("succeeded", 1), "job {}", r.0);
    }
}

fn stop_cleanly(env: &Env, d: common::Daemon) {
    d.sigterm();
    let (st, _) = d.wait_exit(Duration::from_secs(60));
    assert!(st.success(), "exit status {st:?}");
    assert_eq!(env.last_heartbeat_status().as_deref(), Some("stopped"));
}

#[test]
fn another_clients_job_is_not_stuck_behind_a_spinner_holding_every_slot() {
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_CONCURRENCY", "4")]);
    let spin = spinners(&env, "spinner", 6, 4000);
    wait_running(&env, "spinner", 3);
    let (st, out, err) = env.cli(&["status", "--json"]);
    assert!(st.success(), "{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    let held = status["running_by_client"]["spinner"].as_i64().unwrap_or(0);
    assert!(
        (1..=3).contains(&held),
        "status running_by_client: {status}"
    );
    let other = job(&env, "other", "ping", &json!({}));
    env.wait_status(other, "succeeded", LONG);
    let other_done = runs(&env, "other")[0].2;
    assert!(other_done > 0);
    env.wait_final(7, LONG);

    let spun = runs(&env, "spinner");
    all_succeeded_once(&spun, &spin);
    for r in &spun {
        assert!(
            other_done < r.2,
            "the other client's ping ({other_done}) finished after spinner job {} ({})",
            r.0,
            r.2
        );
    }
    assert_eq!(
        max_overlap(&spun),
        3,
        "one client holds at most concurrency - 1 slots, and uses all of them: {spun:?}"
    );
    // Within the client, jobs started in their order (same priority: id order).
    let mut by_start = spun.clone();
    by_start.sort_by_key(|r| (r.1, r.0));
    assert_eq!(by_start.iter().map(|r| r.0).collect::<Vec<_>>(), spin);
    stop_cleanly(&env, d);
}

#[test]
fn a_lone_client_uses_its_whole_configured_share() {
    let env = Env::new();
    let d = env.start(&[
        ("BRAINLOOP_CONCURRENCY", "4"),
        ("BRAINLOOP_MAX_SLOTS_PER_CLIENT", "2"),
    ]);
    let ids = spinners(&env, "solo", 5, 1500);
    env.wait_final(5, LONG);
    let spun = runs(&env, "solo");
    all_succeeded_once(&spun, &ids);
    assert_eq!(max_overlap(&spun), 2, "{spun:?}");
    stop_cleanly(&env, d);

    // Share = concurrency turns the limit off: a lone client gets every slot.
    let d = env.start(&[
        ("BRAINLOOP_CONCURRENCY", "3"),
        ("BRAINLOOP_MAX_SLOTS_PER_CLIENT", "3"),
    ]);
    let ids = spinners(&env, "all", 3, 1500);
    env.wait_final(8, LONG);
    let spun = runs(&env, "all");
    all_succeeded_once(&spun, &ids);
    assert_eq!(max_overlap(&spun), 3, "{spun:?}");
    stop_cleanly(&env, d);
}

#[test]
fn the_share_defaults_to_concurrency_minus_one_and_above_concurrency_is_refused() {
    let env = Env::new();
    let out = std::process::Command::new(common::BIN)
        .args(["run", "--print-config"])
        .current_dir(env.root.path())
        .env("BRAINLOOP_CONCURRENCY", "8")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("max_slots_per_client = 7"), "{text}");
    let out = std::process::Command::new(common::BIN)
        .args(["run", "--print-config"])
        .current_dir(env.root.path())
        .env("BRAINLOOP_CONCURRENCY", "2")
        .env("BRAINLOOP_MAX_SLOTS_PER_CLIENT", "3")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_slots_per_client"), "{err}");
}

#[test]
fn concurrency_one_runs_one_job_at_a_time_in_priority_then_id_order() {
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_CONCURRENCY", "1")]);
    let spin = spinners(&env, "spinner", 2, 800);
    wait_running(&env, "spinner", 1);
    let other = job(&env, "other", "sleep", &json!({"ms": 1}));
    env.wait_final(3, LONG);
    let mut all = runs(&env, "spinner");
    all.extend(runs(&env, "other"));
    assert_eq!(max_overlap(&all), 1, "{all:?}");
    all.sort_by_key(|r| (r.1, r.0));
    // The only slot cannot be reserved: the next job by priority then id gets it, whoever
    // its client is (documented for max_slots_per_client).
    let order: Vec<i64> = all.iter().map(|r| r.0).collect();
    assert_eq!(order, vec![spin[0], spin[1], other]);
    stop_cleanly(&env, d);
}

#[test]
fn sigterm_with_jobs_held_back_at_their_share_loses_nothing_and_runs_nothing_twice() {
    let env = Env::new();
    let cfg = [
        ("BRAINLOOP_CONCURRENCY", "4"),
        ("BRAINLOOP_DRAIN_WINDOW_MS", "300"),
        ("BRAINLOOP_CANCEL_GRACE_MS", "300"),
    ];
    let d = env.start(&cfg);
    let spin = spinners(&env, "spinner", 6, 2000);
    wait_running(&env, "spinner", 3);
    let other = job(&env, "other", "sleep", &json!({"ms": 2000}));
    wait_running(&env, "other", 1);
    stop_cleanly(&env, d);
    let cut: Vec<String> = runs(&env, "spinner").into_iter().map(|r| r.3).collect();
    assert_eq!(
        cut.iter().filter(|s| *s == "queued").count(),
        3,
        "the three running spinner jobs are recorded to run again; the held-back ones never started: {cut:?}"
    );
    assert_eq!(env.result(other).unwrap().0, "queued");

    let d = env.start(&cfg);
    env.wait_final(7, LONG);
    let spun = runs(&env, "spinner");
    all_succeeded_once(&spun, &spin);
    assert!(max_overlap(&spun) <= 3, "{spun:?}");
    all_succeeded_once(&runs(&env, "other"), &[other]);
    stop_cleanly(&env, d);
}
