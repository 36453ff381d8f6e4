//! The raw SQLite floor of `scripts/bench_peers.sh` (issue 24): the least durable work a queue
//! consumer can do per job — read new rows of `jobs` in id order (512 at a time), parse the
//! params, write one small JSON result row each, and commit each batch once to a WAL database
//! with synchronous=FULL — as a minimal rusqlite loop with prepared statements. It is not part
//! of brainloop; it is what brainloop's drain is measured against.
//!
//! `sqlite_floor IN.db OUT.db N` exits after N results. Both databases must exist (the bench
//! creates `jobs(id, action, params)` and `results(job_id, status, result)`).

use rusqlite::{params, Connection};
use std::time::Duration;

fn open(path: &str, synchronous: &str) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(30))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", synchronous)?;
    Ok(c)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, n] = &args[..] else {
        return Err("usage: sqlite_floor IN.db OUT.db N".into());
    };
    let n: u64 = n.parse()?;
    let inp = open(input, "FULL")?;
    let mut out = open(output, "FULL")?;
    let mut read =
        inp.prepare("SELECT id, params FROM jobs WHERE id > ?1 ORDER BY id LIMIT 512")?;
    let (mut last, mut done) = (0i64, 0u64);
    while done < n {
        let rows: Vec<(i64, String)> = read
            .query_map([last], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        if rows.is_empty() {
            // Only while a producer is still inserting (the first table); a drain never waits.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let tx = out.transaction()?;
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO results(job_id, status, result) VALUES (?1, 'succeeded', ?2)",
            )?;
            for (id, p) in &rows {
                let v: serde_json::Value = serde_json::from_str(p)?;
                let result = serde_json::json!({"pong": true, "echo": v}).to_string();
                ins.execute(params![id, result])?;
                last = *id;
            }
        }
        tx.commit()?;
        done += rows.len() as u64;
    }
    Ok(())
}
