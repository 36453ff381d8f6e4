//! Cron schedules through the real daemon: second-level firing, no overlap, missed-firing
//! catch-up at start-up, invalid expressions reported, the schedule's client grants applied.

mod common;

use common::Env;
use rusqlite::params;
use std::time::{Duration, Instant};

fn schedule(env: &Env, name: &str, cron: &str, action: &str, p: &str, client: &str) {
    env.input()
        .execute(
            "INSERT INTO schedules(name, cron, action, params, client_id) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![name, cron, action, p, client],
        )
        .unwrap();
}

fn fired(env: &Env) -> Vec<(i64, String, Option<String>)> {
    let c = env.output();
    let mut s = c
        .prepare("SELECT job_id, status, error FROM results WHERE job_id < 0 ORDER BY job_id DESC")
        .unwrap();
    let v = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    v.map(Result::unwrap).collect()
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_level_schedule_fires_jobs_through_the_daemon() {
    let env = Env::new();
    let _d = env.start(&[]);
    schedule(&env, "tick", "* * * * * *", "list_actions", "{}", "local");
    wait_for("two firings", || {
        fired(&env).iter().filter(|f| f.1 == "succeeded").count() >= 2
    });
    let f = fired(&env);
    assert!(
        f.iter().all(|(id, _, _)| *id < 0),
        "scheduled jobs get negative ids: {f:?}"
    );
    let (_, out, _) = env.cli(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["schedules"][0];
    assert_eq!(s["name"], "tick");
    assert!(s["next_fire_ms"].as_i64().unwrap() > 0);
    assert!(s["last_fired_ms"].as_i64().is_some());
}

#[test]
fn a_running_schedule_is_not_started_twice() {
    let env = Env::new();
    let _d = env.start(&[]);
    schedule(
        &env,
        "slow",
        "* * * * * *",
        "sleep",
        "{\"ms\": 2500}",
        "local",
    );
    std::thread::sleep(Duration::from_millis(4500));
    let f = fired(&env);
    assert!(!f.is_empty() && f.len() <= 2, "{f:?}");
    let running = f.iter().filter(|x| x.1 == "running").count();
    assert!(running <= 1, "two firings ran at once: {f:?}");
    let skipped: i64 = env
        .metadata()
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'schedule_skipped'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(skipped >= 1, "overlaps are recorded");
}

#[test]
fn a_firing_missed_while_down_runs_once_at_start_up() {
    let env = Env::new();
    let d = env.start(&[]);
    schedule(&env, "hourly", "0 * * * *", "list_actions", "{}", "local");
    d.sigterm();
    assert!(d.wait_exit(Duration::from_secs(30)).0.success());
    // The worker was "down" since two hours before the last firing.
    let two_hours_ago = common::now_ms() - 2 * 3_600_000 - 60_000;
    env.lifecycle()
        .execute(
            "INSERT INTO schedule_state(name, last_fired_at) VALUES ('hourly', ?1)
             ON CONFLICT(name) DO UPDATE SET last_fired_at = excluded.last_fired_at",
            [two_hours_ago],
        )
        .unwrap();
    let _d = env.start(&[]);
    wait_for("the catch-up firing", || !fired(&env).is_empty());
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        fired(&env).len(),
        1,
        "two missed firings run once, not twice"
    );
}

#[test]
fn invalid_expressions_are_reported_and_grants_still_apply() {
    let env = Env::new();
    let d = env.start(&[]);
    schedule(
        &env,
        "broken",
        "0 9 * * funday",
        "list_actions",
        "{}",
        "local",
    );
    schedule(
        &env,
        "stranger",
        "* * * * * *",
        "execute_bash",
        "{\"command\": \"ls\"}",
        "stranger",
    );
    wait_for("the stranger's firing", || {
        fired(&env).iter().any(|f| f.1 == "denied")
    });
    let f = fired(&env);
    assert!(
        f[0].2.as_deref().unwrap_or("").contains("SYSTEM_COMMAND"),
        "{f:?}"
    );
    let n: i64 = env
        .metadata()
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'schedule_invalid'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    let (_, out, _) = env.cli(&["status"]);
    assert!(out.contains("INVALID") && out.contains("funday"), "{out}");
    assert!(d.log_text().contains("invalid schedule"));
}

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Issue 50: an every-5-s schedule keeps firing right after the worker's wall clock steps two
/// hours back (libfaketime, wall clock only; the offset file is read at every call) and after a
/// step forward — it used to stop for the size of a backward step.
#[test]
fn a_schedule_keeps_firing_across_backward_and_forward_clock_steps() {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "CANNOT RUN HERE: apt-get install faketime ({FAKETIME_LIB} is missing)"
    );
    let env = Env::new();
    let offset = env.root.path().join("faketime-offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let off = offset.display().to_string();
    let d = env.start(&[
        ("LD_PRELOAD", FAKETIME_LIB),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("FAKETIME_TIMESTAMP_FILE", off.as_str()),
        ("FAKETIME_NO_CACHE", "1"),
    ]);
    schedule(&env, "every5", "*/5 * * * * *", "ping", "{}", "local");
    let done = |env: &Env| fired(env).iter().filter(|f| f.1 == "succeeded").count();
    wait_for("a first firing", || done(&env) >= 1);
    for (step, name) in [("-2h", "back two hours"), ("+0", "forward again")] {
        std::fs::write(&offset, format!("{step}\n")).unwrap();
        let before = done(&env);
        let t0 = Instant::now();
        while done(&env) < before + 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no two firings within 20 s after the clock stepped {name} (had {before}); log:\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("stepped {name}: two more firings in {:?}", t0.elapsed());
    }
    d.kill9();
}
