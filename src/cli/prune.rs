//! `brainloop prune-input [--days N]`: input.db belongs to the producers and the worker never
//! writes it, so its `jobs` table only shrinks when an operator (a producer too) prunes it. Only
//! rows the worker has already claimed (id ≤ the high-water mark: their snapshot lives in
//! lifecycle.db) and older than N days are deleted; the file is then checkpointed and its free
//! pages given back to the disk (`db::vacuum`: incremental vacuum run to completion in bounded
//! steps).

use crate::config::Config;
use crate::db::{self, input, lifecycle, DbKind};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct PruneArgs {
    /// Keep jobs younger than this many days (default: retention.results_days).
    #[arg(long)]
    pub days: Option<u64>,
}

pub fn run(config: &Config, a: &PruneArgs) -> Result<i32> {
    let days = a.days.unwrap_or(config.retention.results_days);
    let hwm =
        lifecycle::high_water_mark(&db::open_read_only(&config.data_dir, DbKind::Lifecycle)?)?;
    let cutoff = crate::time::now_ms() - days as i64 * 86_400_000;
    let mut conn = db::open(&config.data_dir, DbKind::Input)?;
    let mut total = 0;
    loop {
        let n = input::prune_claimed(&mut conn, hwm, cutoff, 5000)?;
        total += n;
        if n == 0 {
            break;
        }
    }
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    // Every free page back to the disk, in bounded steps (producers wait at most one), then
    // the checkpoint that shrinks the file.
    let left = db::vacuum(&mut conn, usize::MAX)?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    println!("deleted {total} claimed jobs older than {days} days from input.db (claimed up to id {hwm})");
    if left.is_none() {
        println!("input.db was created without incremental vacuum: its free pages stay in the file until a full `VACUUM` (sqlite3 brainloop.input.db VACUUM, with no producer writing)");
    }
    Ok(0)
}
