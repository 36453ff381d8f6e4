//! `brainloop cancel ID`: the operator stops a job — queued: it never runs; running: stopped,
//! its overlay discarded; waiting for a human: its validation closed. The job ends `cancelled`
//! and never runs again, also after a crash or restart. The request is a row of
//! command_security.db (`db::cancels`, the owner), which only the operator's user can write: no
//! producer or MCP client can cancel a job.

use crate::config::Config;
use crate::db::{self, cancels, output, DbKind};
use anyhow::{bail, Context, Result};
use rusqlite::OptionalExtension;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// The job id (as printed by `enqueue`, shown by `validations` and `status`).
    #[arg(allow_hyphen_values = true)]
    pub id: i64,
    /// Why (kept with the request and shown in the job's result).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// How long to wait for the worker to end the job before returning (seconds; 0: do not wait).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub timeout: u64,
}

/// Exit code when the request is recorded but the job has not ended within `--timeout` (the
/// worker ends it when it next runs).
pub const NOT_YET: i32 = 4;
/// Exit code when the job finished on its own before the worker saw the request.
pub const TOO_LATE: i32 = 5;

pub fn run(config: &Config, args: &CancelArgs) -> Result<i32> {
    for kind in [DbKind::Output, DbKind::Security] {
        if !kind.path(&config.data_dir).exists() {
            bail!(
                "{} does not exist: run `brainloop init` first (data dir {})",
                kind.path(&config.data_dir).display(),
                config.data_dir.display()
            );
        }
    }
    let id = args.id;
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    if let Some(st) = final_status(&out, id)? {
        bail!("job {id} already ended `{st}`: nothing to cancel (`brainloop show {id}` for its result)");
    }
    if !known(config, id)? {
        bail!(
            "no job {id} in {} (see `brainloop status`, or the id `enqueue` printed)",
            config.data_dir.display()
        );
    }
    let mut sec = db::open(&config.data_dir, DbKind::Security).with_context(operator_only)?;
    let (c, new) = cancels::request(
        &mut sec,
        id,
        &super::operator(),
        args.reason.as_deref(),
        crate::time::now_ms(),
    )
    .with_context(operator_only)?;
    if new {
        println!(
            "cancel requested for job {id} by {}",
            crate::shown::line(&c.requested_by)
        );
    } else {
        println!(
            "cancel already requested for job {id} by {} at {} ms",
            crate::shown::line(&c.requested_by),
            c.created_at
        );
    }
    let t0 = Instant::now();
    loop {
        if let Some(st) = final_status(&out, id)? {
            if st == "cancelled" {
                println!("job {id} cancelled: it never runs again");
                return Ok(0);
            }
            println!("job {id} ended `{st}` before the cancel reached it (its result stands)");
            return Ok(TOO_LATE);
        }
        if t0.elapsed() >= Duration::from_secs(args.timeout) {
            println!(
                "job {id} has not ended yet: the worker ends it `cancelled` as soon as it sees the request (at its next start if it is not running — `brainloop status`); it never runs again"
            );
            return Ok(NOT_YET);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Why a producer's `cancel` fails: the request lives in a file only the operator writes.
fn operator_only() -> &'static str {
    "cancel is an operator command: its request is written to command_security.db, which only the worker's user can write (producers and MCP clients cannot cancel jobs); run it as that user"
}

fn final_status(out: &rusqlite::Connection, id: i64) -> Result<Option<String>> {
    Ok(out
        .query_row(
            &format!(
                "SELECT status FROM results WHERE job_id = ?1 AND status IN {}",
                output::FINAL_SQL
            ),
            [id],
            |r| r.get(0),
        )
        .optional()?)
}

/// Whether job `id` exists: a row of input.db, or a claimed one (a schedule's firing, negative).
fn known(config: &Config, id: i64) -> Result<bool> {
    let input = db::open_read_only(&config.data_dir, DbKind::Input)?;
    let row: Option<i64> = input
        .query_row("SELECT id FROM jobs WHERE id = ?1", [id], |r| r.get(0))
        .optional()?;
    if row.is_some() {
        return Ok(true);
    }
    let lc = db::open_read_only(&config.data_dir, DbKind::Lifecycle).with_context(operator_only)?;
    Ok(lc
        .query_row("SELECT 1 FROM queue WHERE job_id = ?1", [id], |_| Ok(()))
        .optional()?
        .is_some())
}
