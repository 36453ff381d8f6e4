//! The Rust side of `scripts/bench_peers.sh` (prints figures, asserts nothing):
//!
//! - `worker DB default|best`: an apalis worker on its SQLite backend (crates.io `apalis-sqlite`)
//!   whose job takes a `u64` and returns it (the cheapest real job with a small result, which
//!   apalis persists: `persist_results` is on by default);
//! - `produce DB N`: pushes N jobs through apalis' own `push`, one commit each, printing
//!   `seq<TAB>unix_ns` after each commit;
//!
//! (The raw SQLite floor is brainloop's `examples/sqlite_floor.rs`: plain rusqlite, not sqlx.)
//!
//! Every connection here is `journal_mode = WAL, synchronous = FULL` (the durability all rows of
//! the table share). apalis' `setup` switches the connection it runs on to `synchronous = OFF`,
//! so it runs on a throwaway pool and the worker opens a fresh one.

use apalis::prelude::*;
use apalis_sqlite::{Config, SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteStorage};
use sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn options(db: &str) -> Result<SqliteConnectOptions, BoxDynError> {
    Ok(SqliteConnectOptions::from_str(db)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(30)))
}

async fn pool(db: &str, max: u32) -> Result<SqlitePool, BoxDynError> {
    Ok(SqlitePoolOptions::new()
        .max_connections(max)
        .connect_with(options(db)?)
        .await?)
}

async fn setup(db: &str) -> Result<(), BoxDynError> {
    let p = pool(db, 1).await?;
    SqliteStorage::setup(&p).await?;
    p.close().await;
    Ok(())
}

async fn ping(n: u64) -> Result<u64, BoxDynError> {
    Ok(n)
}

async fn worker(db: &str, mode: &str) -> Result<(), BoxDynError> {
    setup(db).await?;
    match mode {
        // What the README shows: a pool, `SqliteStorage::new`, a worker with no extra layer.
        "default" => {
            let p = pool(db, 10).await?;
            let storage = SqliteStorage::<u64>::new(&p);
            WorkerBuilder::new("peer-default")
                .backend(storage)
                .build(ping)
                .run()
                .await?;
        }
        // Tuned: fetch up to 100 per query, 4 jobs in flight, poll every millisecond when idle.
        "best" => {
            let p = pool(db, 10).await?;
            let config = Config::default().batch_size(100).queue("u64");
            let storage = SqliteStorage::<u64>::new(&p)
                .with_config(config)
                .poll_with_interval(Duration::from_millis(1));
            WorkerBuilder::new("peer-best")
                .backend(storage)
                .concurrency(4)
                .build(ping)
                .run()
                .await?;
        }
        other => return Err(format!("unknown mode {other}").into()),
    }
    Ok(())
}

async fn produce(db: &str, n: u64) -> Result<(), BoxDynError> {
    setup(db).await?;
    let p = pool(db, 1).await?;
    let mut storage = SqliteStorage::<u64>::new(&p);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for i in 0..n {
        storage.push(i).await?;
        writeln!(out, "{i}\t{}", unix_ns())?;
    }
    out.flush()?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxDynError> {
    let args: Vec<String> = std::env::args().collect();
    let a = |k: usize| args.get(k).map(String::as_str).unwrap_or("");
    match a(1) {
        "worker" => worker(a(2), a(3)).await,
        "produce" => produce(a(2), a(3).parse()?).await,
        _ => Err("usage: apalis-peer worker DB default|best | produce DB N".into()),
    }
}
