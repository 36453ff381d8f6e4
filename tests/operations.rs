//! Operating brainloop: HOROS registration, JSON logs carrying the job id, a log file.

mod common;

use common::Env;
use std::time::Duration;

#[test]
fn horos_registration_json_logs_and_log_file() {
    let env = Env::new();
    let registry = env.root.path().join("HOROS.db");
    let log_file = env.root.path().join("worker.log");
    let d = env.start(&[
        ("BRAINLOOP_HOROS_REGISTRY", registry.to_str().unwrap()),
        ("BRAINLOOP_LOG_FORMAT", "json"),
        ("BRAINLOOP_LOG_FILE", log_file.to_str().unwrap()),
    ]);
    let state = || -> (String, String, String) {
        rusqlite::Connection::open(&registry)
            .unwrap()
            .query_row(
                "SELECT type, pattern, state FROM projects WHERE name = 'brainloop'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    };
    assert_eq!(state(), ("worker".into(), "5-BDD".into(), "running".into()));
    let id = env.insert("sleep", "{\"ms\": 1, \"fail\": true}");
    env.wait_status(id, "failed", Duration::from_secs(30));
    d.sigterm();
    let log = d.log_text();
    assert!(d.wait_exit(Duration::from_secs(30)).0.success());
    assert_eq!(state().2, "stopped");
    // Every log line is JSON; the job's lines carry its id.
    let job_line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "job ended")
        .expect("a JSON line for the job");
    assert_eq!(job_line["span"]["job_id"], id, "{job_line}");
    assert!(log
        .lines()
        .all(|l| l.trim().is_empty() || serde_json::from_str::<serde_json::Value>(l).is_ok()));
    let file = std::fs::read_to_string(&log_file).unwrap();
    assert!(file.contains("brainloop worker ready") && file.contains("brainloop worker stopped"));
}
