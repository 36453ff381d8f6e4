//! A job's result row as the benchmarks read it (output.db, by a separate connection), shared by
//! `agent_session` and `learn_corpus` (`#[path]`-included: benches are separate crates).

use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The job's status and result JSON, if it has a row.
pub fn result(out: &Connection, id: i64) -> Option<(String, Value)> {
    out.query_row(
        "SELECT status, result FROM results WHERE job_id = ?1",
        [id],
        |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)),
    )
    .optional()
    .ok()
    .flatten()
    .map(|(s, r)| {
        (
            s,
            r.and_then(|r| serde_json::from_str(&r).ok())
                .unwrap_or(Value::Null),
        )
    })
}

/// Waits (at most `limit`) for the job's status to be none of `not`.
pub fn wait(out: &Connection, id: i64, not: &[&str], limit: Duration) -> (String, Value) {
    let t0 = Instant::now();
    loop {
        if let Some((s, v)) = result(out, id) {
            if !not.contains(&s.as_str()) {
                return (s, v);
            }
        }
        assert!(t0.elapsed() < limit, "job {id} stuck");
        std::thread::sleep(Duration::from_millis(5));
    }
}
