//! Retention: old rows are pruned from every database, recent ones and the audit trail are kept,
//! and WAL files are truncated by the checkpoint.

use brainloop::config::Config;
use brainloop::db::{migrate, Stores};
use rusqlite::params;
use tokio_util::sync::CancellationToken;

#[test]
fn a_pass_prunes_old_rows_keeps_recent_ones_and_truncates_wal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    migrate::migrate_all(&data).unwrap();
    let now = brainloop::time::now_ms();
    let old = now - 400 * 86_400_000;
    {
        let o = rusqlite::Connection::open(data.join("brainloop.output.db")).unwrap();
        for t in [old, now] {
            o.execute(
                "INSERT INTO heartbeat(worker_id, timestamp, status) VALUES ('w', ?1, 'running')",
                [t],
            )
            .unwrap();
            o.execute(
                "INSERT INTO metrics(timestamp, name, value) VALUES (?1, 'm', 1)",
                [t],
            )
            .unwrap();
        }
        o.execute(
            "INSERT INTO results(job_id, status, finished_at) VALUES (1, 'succeeded', ?1)",
            [old],
        )
        .unwrap();
        o.execute(
            "INSERT INTO results(job_id, status, finished_at) VALUES (2, 'succeeded', ?1)",
            [now],
        )
        .unwrap();
        // A non-final row is never pruned, however old.
        o.execute(
            "INSERT INTO results(job_id, status, started_at) VALUES (3, 'running', ?1)",
            [old],
        )
        .unwrap();
        let l = rusqlite::Connection::open(data.join("brainloop.lifecycle.db")).unwrap();
        for (id, fin) in [(1, old), (2, now)] {
            l.execute(
                "INSERT INTO queue(job_id, action, claimed_at) VALUES (?1, 'x', ?2)",
                params![id, fin],
            )
            .unwrap();
            l.execute(
                "INSERT INTO processed_log(job_id, status, finished_at) VALUES (?1, 'done', ?2)",
                params![id, fin],
            )
            .unwrap();
        }
        let m = rusqlite::Connection::open(data.join("brainloop.metadata.db")).unwrap();
        m.execute(
            "INSERT INTO events(timestamp, kind) VALUES (?1, 'startup')",
            [old],
        )
        .unwrap();
        m.execute(
            "INSERT INTO audit(timestamp, client_id, status) VALUES (?1, 'local', 'succeeded')",
            [old],
        )
        .unwrap();
        let s = rusqlite::Connection::open(data.join("command_security.db")).unwrap();
        s.execute(
            "INSERT INTO executions(command_hash, executed_at) VALUES ('h', ?1)",
            [old],
        )
        .unwrap();
    }
    let stores = Stores::open(&data).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = rt
        .block_on(brainloop::retention::pass(
            &stores,
            &Config::default(),
            &CancellationToken::new(),
        ))
        .unwrap();
    assert_eq!(
        n, 6,
        "one each: heartbeat, metric, result, lifecycle job, event, execution"
    );
    let count = |file: &str, sql: &str| -> i64 {
        rusqlite::Connection::open(data.join(file))
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        count("brainloop.output.db", "SELECT count(*) FROM heartbeat"),
        1
    );
    assert_eq!(
        count("brainloop.output.db", "SELECT count(*) FROM metrics"),
        1
    );
    let ids: String = rusqlite::Connection::open(data.join("brainloop.output.db"))
        .unwrap()
        .query_row(
            "SELECT group_concat(job_id) FROM (SELECT job_id FROM results ORDER BY job_id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        ids, "2,3",
        "old final result pruned; recent and unfinished kept"
    );
    assert_eq!(
        count(
            "brainloop.lifecycle.db",
            "SELECT count(*) FROM processed_log"
        ),
        1
    );
    assert_eq!(
        count("brainloop.lifecycle.db", "SELECT count(*) FROM queue"),
        1
    );
    assert_eq!(
        count("brainloop.metadata.db", "SELECT count(*) FROM events"),
        0
    );
    assert_eq!(
        count("brainloop.metadata.db", "SELECT count(*) FROM audit"),
        1,
        "the audit trail is kept"
    );
    assert_eq!(
        count("command_security.db", "SELECT count(*) FROM executions"),
        0
    );
    for f in [
        "brainloop.output.db",
        "brainloop.lifecycle.db",
        "brainloop.metadata.db",
    ] {
        let wal = std::fs::metadata(data.join(format!("{f}-wal")))
            .map(|m| m.len())
            .unwrap_or(0);
        assert_eq!(wal, 0, "{f}-wal truncated by the checkpoint");
    }
}

#[test]
fn prune_input_deletes_only_old_claimed_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    migrate::migrate_all(&data).unwrap();
    let old = brainloop::time::now_ms() - 40 * 86_400_000;
    let i = rusqlite::Connection::open(data.join("brainloop.input.db")).unwrap();
    for created in [old, old, brainloop::time::now_ms(), old] {
        i.execute(
            "INSERT INTO jobs(action, created_at) VALUES ('list_actions', ?1)",
            [created],
        )
        .unwrap();
    }
    // The worker has claimed ids 1..=3 (job 4 is old but not yet claimed).
    rusqlite::Connection::open(data.join("brainloop.lifecycle.db"))
        .unwrap()
        .execute(
            "INSERT INTO config(key, value, updated_at) VALUES ('high_water_mark', '3', 0)",
            [],
        )
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brainloop"))
        .args(["prune-input", "--days", "30", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: String = i
        .query_row(
            "SELECT group_concat(id) FROM (SELECT id FROM jobs ORDER BY id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        left, "3,4",
        "old claimed jobs pruned; recent and unclaimed kept"
    );
}
