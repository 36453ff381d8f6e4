//! The queue side of a call: inserting it as a job in input.db (with the operator's `--client`
//! as `client_id`) and reading that job's row in output.db `results`, plus the heartbeat for
//! [`super::liveness`]. The front-end is one more producer of input.db (DESIGN §2); it only
//! reads output.db.

use super::liveness::{self, Liveness};
use crate::config::Config;
use crate::db::{self, input, output, DbKind};
use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A job's row in `results`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub status: String,
    pub result: Option<Value>,
    pub error: Option<String>,
    /// When the worker last moved it (finished, else started), unix ms.
    pub updated_at: Option<i64>,
}

impl JobRow {
    pub fn is_final(&self) -> bool {
        output::FINAL_SQL.contains(&format!("'{}'", self.status))
    }
}

type Pool = r2d2::Pool<r2d2_sqlite::SqliteConnectionManager>;

pub struct Queue {
    /// The one input.db writer of this process (synchronous=FULL, like `brainloop enqueue`).
    input: Mutex<Connection>,
    /// Read-only output.db connections, so concurrent calls do not queue behind one another.
    output: Pool,
}

impl Queue {
    /// Opens input.db (read-write) and output.db (read-only); both must already exist.
    pub fn open(data_dir: &Path) -> Result<Arc<Queue>> {
        for kind in [DbKind::Input, DbKind::Output, DbKind::Metadata] {
            let p = kind.path(data_dir);
            if !p.exists() {
                anyhow::bail!(
                    "{} does not exist: run `brainloop init --data-dir {dir}` and start `brainloop run --data-dir {dir}` first",
                    p.display(),
                    dir = data_dir.display()
                );
            }
        }
        db::identity::check_input_for_producer(data_dir)?;
        let input = db::open(data_dir, DbKind::Input)?;
        let manager = r2d2_sqlite::SqliteConnectionManager::file(DbKind::Output.path(data_dir))
            .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(|c| c.busy_timeout(db::BUSY_TIMEOUT));
        let output = r2d2::Pool::builder()
            .max_size(4)
            .min_idle(Some(1))
            .build(manager)
            .context("cannot open output.db for reading")?;
        Ok(Arc::new(Queue {
            input: Mutex::new(input),
            output,
        }))
    }

    /// Inserts the job; returns its id.
    pub async fn insert(
        self: &Arc<Self>,
        action: String,
        params_text: String,
        client: String,
    ) -> Result<i64> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut conn = match me.input.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            input::insert_job(&mut conn, &action, &params_text, &client, 0, None)
                .context("cannot insert the job into brainloop.input.db")
        })
        .await
        .context("insert task failed")?
    }

    /// Inserts the job as a task (issue 55): the task id is written in the job's own
    /// transaction; returns (job id, task id) once both are committed.
    pub async fn insert_task(
        self: &Arc<Self>,
        action: String,
        params_text: String,
        client: String,
    ) -> Result<(i64, String)> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut nonce = [0u8; 8];
            getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
            let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
            let mut conn = match me.input.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            input::insert_task_job(&mut conn, &action, &params_text, &client, &nonce)
                .context("cannot insert the job into brainloop.input.db")
        })
        .await
        .context("insert task failed")?
    }

    /// A job's (client_id, task_id, created_at) in input.db.
    pub async fn task(
        self: &Arc<Self>,
        job_id: i64,
    ) -> Result<Option<(String, Option<String>, i64)>> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let conn = match me.input.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            input::task_of(&conn, job_id).context("cannot read the job in brainloop.input.db")
        })
        .await
        .context("task lookup failed")?
    }

    /// Records that `client` withdraws job `job_id` (the worker decides what it changes).
    pub async fn withdraw(self: &Arc<Self>, job_id: i64, client: String) -> Result<bool> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut conn = match me.input.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            input::withdraw(&mut conn, job_id, &client, crate::time::now_ms())
                .context("cannot record the withdrawal in brainloop.input.db")
        })
        .await
        .context("withdrawal task failed")?
    }

    /// The job's current row, if the worker wrote one yet.
    pub async fn row(self: &Arc<Self>, job_id: i64) -> Result<Option<JobRow>> {
        let pool = self.output.clone();
        tokio::task::spawn_blocking(move || -> Result<Option<JobRow>> {
            let conn = pool.get()?;
            let row = conn
                .prepare_cached("SELECT status, result, error, coalesce(finished_at, started_at) FROM results WHERE job_id = ?1")?
                .query_row([job_id], |r| {
                    let result: Option<String> = r.get(1)?;
                    Ok(JobRow {
                        status: r.get(0)?,
                        result: result
                            .map(|s| serde_json::from_str::<Value>(&s).unwrap_or(Value::String(s))),
                        error: r.get(2)?,
                        updated_at: r.get(3)?,
                    })
                })
                .optional()?;
            Ok(row)
        })
        .await
        .context("result lookup task failed")?
    }

    /// Whether a worker is running, judged from its latest heartbeat.
    pub async fn liveness(self: &Arc<Self>, config: Arc<Config>) -> Result<Liveness> {
        let pool = self.output.clone();
        tokio::task::spawn_blocking(move || -> Result<Liveness> {
            let conn = pool.get()?;
            liveness::check(&conn, &config, crate::time::now_ms())
        })
        .await
        .context("heartbeat lookup task failed")?
    }
}
