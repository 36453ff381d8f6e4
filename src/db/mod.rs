//! The five SQLite databases: file names, how each is opened, and the per-database settings.
//!
//! | database | synchronous | why |
//! |---|---|---|
//! | input | (producer's choice; `enqueue` uses FULL) | the worker only reads it |
//! | lifecycle | NORMAL (FULL for the `applying` row of `db::applies`) | a claim lost to power failure is re-claimed; the claim path skips any job whose final result exists, so nothing runs twice (see `supervisor::claim`); an apply is on disk before its first byte reaches the workspace |
//! | output | FULL | a committed final result must survive power loss: it is the "done" proof |
//! | metadata | NORMAL | telemetry and audit rows; losing the last few on power loss breaks no guarantee |
//! | command_security | FULL (NORMAL for a run's statistics row with no evidence and no policy change: `bash::registry::record_run`) | approvals and overrides must never be lost or replayed; a statistics row survives a kill -9 in the WAL |
//!
//! Every database is in WAL mode (set once by [`migrate`]) with `busy_timeout`; every write
//! transaction is `BEGIN IMMEDIATE` ([`write_tx`]), since a deferred read-then-write transaction
//! gets SQLITE_BUSY whatever the timeout. Inside the worker each database has exactly one writer
//! connection ([`Db`]).

pub mod applies;
pub mod audit_outbox;
pub mod cancels;
pub mod identity;
pub mod input;
pub mod lifecycle;
pub mod metadata;
pub mod migrate;
pub mod output;
pub mod sessions;
pub mod status_file;

use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// When a file event about another process's commit finds `PRAGMA data_version` unchanged, the
/// commit is usually not visible yet: the event comes from its WAL write, before its fsync and
/// the wal-index update. These are the waits (µs) before each re-check every watcher makes, on
/// a plain thread or the blocking pool, since the runtime's timers tick in whole milliseconds:
/// the supervisor (`input::settled_data_version`, the first four — 1.85 ms in all —, then its
/// timers) and the MCP front-end waiting for results (`mcp::watch`, all of them).
pub const VISIBILITY_RECHECKS_US: [u64; 9] =
    [100, 250, 500, 1000, 2000, 4000, 16_000, 64_000, 256_000];

/// How long a connection waits on a lock held by another process before SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Input,
    Lifecycle,
    Output,
    Metadata,
    Security,
}

impl DbKind {
    pub const ALL: [DbKind; 5] = [
        DbKind::Input,
        DbKind::Lifecycle,
        DbKind::Output,
        DbKind::Metadata,
        DbKind::Security,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            DbKind::Input => "brainloop.input.db",
            DbKind::Lifecycle => "brainloop.lifecycle.db",
            DbKind::Output => "brainloop.output.db",
            DbKind::Metadata => "brainloop.metadata.db",
            DbKind::Security => "command_security.db",
        }
    }

    /// The schema file (embedded at build time).
    pub fn schema(self) -> &'static str {
        match self {
            DbKind::Input => include_str!("../../schema/input.sql"),
            DbKind::Lifecycle => include_str!("../../schema/lifecycle.sql"),
            DbKind::Output => include_str!("../../schema/output.sql"),
            DbKind::Metadata => include_str!("../../schema/metadata.sql"),
            DbKind::Security => include_str!("../../schema/command_security.sql"),
        }
    }

    /// `PRAGMA synchronous` for the worker's connections (see the table above).
    pub fn synchronous(self) -> &'static str {
        match self {
            DbKind::Output | DbKind::Security | DbKind::Input => "FULL",
            DbKind::Lifecycle | DbKind::Metadata => "NORMAL",
        }
    }

    /// File mode set by `init` (DESIGN §2): input group-writable so producers can insert,
    /// output group-readable, the rest private to the worker's user.
    pub fn file_mode(self) -> u32 {
        match self {
            DbKind::Input => 0o660,
            DbKind::Output => 0o640,
            _ => 0o600,
        }
    }

    pub fn path(self, data_dir: &Path) -> PathBuf {
        data_dir.join(self.file_name())
    }
}

/// Opens a read-write connection with brainloop's per-connection settings.
pub fn open(data_dir: &Path, kind: DbKind) -> Result<Connection> {
    let path = kind.path(data_dir);
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open {}", path.display()))?;
    configure(&conn, kind).with_context(|| format!("cannot configure {}", path.display()))?;
    Ok(conn)
}

/// Opens a read-only connection (status, readers). Fails if the file does not exist.
pub fn open_read_only(data_dir: &Path, kind: DbKind) -> Result<Connection> {
    let path = kind.path(data_dir);
    if !path.exists() {
        anyhow::bail!(
            "{} does not exist: run `brainloop init --data-dir {}` (or start `brainloop run`) first",
            path.display(),
            data_dir.display()
        );
    }
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open {} read-only", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

fn configure(conn: &Connection, kind: DbKind) -> rusqlite::Result<()> {
    conn.busy_handler(Some(wait_for_lock))?;
    conn.pragma_update(None, "synchronous", kind.synchronous())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    // Bounds the WAL file after each checkpoint (DESIGN §2 size bounds).
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    Ok(())
}

/// The busy handler of the worker's connections: waits for a lock held by another process up
/// to [`BUSY_TIMEOUT`] — or, once shutdown was requested, no longer than the shutdown budget
/// allows (`shutdown::lock_wait_limit`), so a locked database cannot hold the shutdown past it.
/// `n`: how many times SQLite already called it for this lock (0: the wait begins).
fn wait_for_lock(n: i32) -> bool {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local! {
        static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    // SQLite's own back-off (sqliteDefaultBusyCallback), then 100 ms steps.
    const STEPS_MS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];
    let now = Instant::now();
    let since = if n == 0 {
        SINCE.set(Some(now));
        now
    } else {
        SINCE.get().unwrap_or(now)
    };
    let limit = crate::shutdown::lock_wait_limit(since, BUSY_TIMEOUT);
    if now >= limit {
        return false;
    }
    let step = Duration::from_millis(STEPS_MS.get(n as usize).copied().unwrap_or(100));
    std::thread::sleep(step.min(limit - now));
    true
}

/// Whether `e` (anywhere in its chain) is SQLite's "database is locked" / "busy": another
/// process held a lock past our wait, nothing of ours was written.
pub fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<rusqlite::Error>()
            .and_then(|e| e.sqlite_error_code())
            .is_some_and(|c| {
                matches!(
                    c,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                )
            })
    })
}

/// How long work that has changed nothing yet (a job's first reads and writes of the command
/// registry) keeps retrying a database another process keeps locked, [`BUSY_TIMEOUT`] at a
/// time, before it fails naming the lock: an operator's open `sqlite3` transaction delays jobs,
/// it does not fail them.
pub const LOCKED_RETRY_FOR: Duration = Duration::from_secs(30);

/// Runs `f` (which must change nothing when it fails: one transaction, or reads) again while it
/// fails with [`is_busy`], for up to [`LOCKED_RETRY_FOR`], not once shutdown was signalled. The
/// error past that says how long the file was locked and what to do.
pub fn retry_while_locked<T>(what: &str, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    loop {
        match f() {
            Err(e)
                if is_busy(&e)
                    && start.elapsed() < LOCKED_RETRY_FOR
                    && !crate::shutdown::signalled() =>
            {
                tracing::warn!(what, waited_ms = start.elapsed().as_millis() as u64, "{what} is locked by another process; retrying");
            }
            Err(e) if is_busy(&e) => {
                return Err(e.context(format!(
                    "{what} stayed locked by another process for {} s: end that process's transaction (an open `sqlite3` shell, a backup tool) and re-submit the job",
                    start.elapsed().as_secs()
                )))
            }
            other => return other,
        }
    }
}

/// Runs `f` inside a `BEGIN IMMEDIATE` transaction and commits it.
pub fn write_tx<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// One database's single writer connection inside the worker.
///
/// Calls are short and synchronous; async code goes through [`Db::call`], which moves the work
/// to tokio's blocking pool so the runtime threads never wait on a disk sync.
pub struct Db {
    kind: DbKind,
    conn: Mutex<Connection>,
}

impl Db {
    pub fn open(data_dir: &Path, kind: DbKind) -> Result<Arc<Db>> {
        Ok(Arc::new(Db {
            kind,
            conn: Mutex::new(open(data_dir, kind)?),
        }))
    }

    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// Runs `f` with the connection on the current thread.
    pub fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        // A panic while holding the lock poisons it; the connection itself is still usable
        // (SQLite rolls back an unfinished transaction when the Transaction is dropped).
        let mut guard = match self.conn.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard).with_context(|| self.kind.file_name().to_string())
    }

    /// Runs `f` at once when no one holds the connection; `None` when someone does. For reads
    /// of the WAL index only (`PRAGMA data_version`: shared memory, no disk), which a caller on
    /// an async thread may afford where a hop to the blocking pool would cost more.
    pub fn try_with<T>(&self, f: impl FnOnce(&mut Connection) -> T) -> Option<T> {
        let mut guard = match self.conn.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(f(&mut guard))
    }

    /// Runs `f` on the blocking pool.
    pub async fn call<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = Arc::clone(self);
        tokio::task::spawn_blocking(move || db.with(f))
            .await
            .context("database task panicked")?
    }
}

/// The worker's connections: one writer per database it writes, one reader for input.db.
pub struct Stores {
    pub data_dir: PathBuf,
    /// Read-only by contract; a plain connection so `PRAGMA data_version` sees other writers.
    pub input: Arc<Db>,
    pub lifecycle: Arc<Db>,
    pub output: Arc<Db>,
    pub metadata: Arc<Db>,
    pub security: Arc<Db>,
    /// Readers of output.db (get_stats, status) that must not queue behind the writer.
    pub output_readers: r2d2::Pool<r2d2_sqlite::SqliteConnectionManager>,
    /// Telemetry events waiting for the recorder (`supervisor::recorder`), the task that writes
    /// events and audit rows into metadata.db.
    pub telemetry: crate::telemetry::Queue,
}

impl Stores {
    /// Opens every database. The schema must already be applied ([`migrate::migrate_all`]).
    pub fn open(data_dir: &Path) -> Result<Arc<Stores>> {
        let manager = r2d2_sqlite::SqliteConnectionManager::file(DbKind::Output.path(data_dir))
            .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .with_init(|c| c.busy_timeout(BUSY_TIMEOUT));
        let output_readers = r2d2::Pool::builder()
            .max_size(4)
            .min_idle(Some(0))
            .build(manager)
            .context("cannot open the output.db reader pool")?;
        Ok(Arc::new(Stores {
            data_dir: data_dir.to_path_buf(),
            input: Db::open(data_dir, DbKind::Input)?,
            lifecycle: Db::open(data_dir, DbKind::Lifecycle)?,
            output: Db::open(data_dir, DbKind::Output)?,
            metadata: Db::open(data_dir, DbKind::Metadata)?,
            security: Db::open(data_dir, DbKind::Security)?,
            output_readers,
            telemetry: crate::telemetry::Queue::default(),
        }))
    }
}
