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

/// Whether `e` (anywhere in its chain) says the database file cannot be written now — read-only
/// (`chattr +i`, a mode change, a read-only mount), an I/O error, a file that cannot be opened,
/// a full disk: a state of the machine the operator repairs, after which the same write
/// succeeds (issue 50), never a fault of the job.
pub fn is_unwritable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<rusqlite::Error>()
            .and_then(|e| e.sqlite_error_code())
            .is_some_and(|c| {
                matches!(
                    c,
                    rusqlite::ErrorCode::ReadOnly
                        | rusqlite::ErrorCode::SystemIoFailure
                        | rusqlite::ErrorCode::CannotOpen
                        | rusqlite::ErrorCode::PermissionDenied
                        | rusqlite::ErrorCode::DiskFull
                )
            })
    })
}

/// How long work that has changed nothing yet (a job's first reads and writes of the command
/// registry) keeps retrying a database another process keeps locked, [`BUSY_TIMEOUT`] at a
/// time, before it fails naming the lock: an operator's open `sqlite3` transaction delays jobs,
/// it does not fail them.
pub const LOCKED_RETRY_FOR: Duration = Duration::from_secs(30);

/// The pause between two attempts at a database that cannot be written ([`is_unwritable`]).
const UNWRITABLE_RETRY_EVERY: Duration = Duration::from_millis(500);

/// Runs `f` (which must change nothing when it fails: one transaction, or reads) again while it
/// fails with [`is_busy`], for up to [`LOCKED_RETRY_FOR`], and while it fails with
/// [`is_unwritable`] for as long as that lasts (the job waits, it does not fail: issue 50) —
/// never once shutdown was signalled. The error past that says how long the file was locked
/// and what to do.
pub fn retry_while_locked<T>(what: &str, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    let mut logged: Option<std::time::Instant> = None;
    loop {
        match f() {
            Err(e) if is_unwritable(&e) && !crate::shutdown::signalled() => {
                if logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(30)) {
                    tracing::warn!(what, waited_ms = start.elapsed().as_millis() as u64, error = format!("{e:#}"), "{what} cannot be written; the job waits until it can");
                    logged = Some(std::time::Instant::now());
                }
                std::thread::sleep(UNWRITABLE_RETRY_EVERY);
            }
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

/// Pages [`vacuum_step`] frees per write transaction: a writer waits at most one step.
pub const VACUUM_STEP_PAGES: i64 = 2048;

/// One bounded step of giving a database's free pages back to the file system (issue 50):
/// `PRAGMA incremental_vacuum(N)` for at most `max_pages`, in its own write transaction, every
/// row of the statement stepped (a single step frees a single page). Returns the free pages
/// left (0: done); Ok(None) when the file is not in `auto_vacuum = INCREMENTAL` (made before
/// that mode: only a full `VACUUM` can shrink it). The file itself shrinks at the next
/// checkpoint (WAL mode).
pub fn vacuum_step(conn: &mut Connection, max_pages: i64) -> rusqlite::Result<Option<i64>> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode != 2 {
        return Ok(None);
    }
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    if free == 0 {
        return Ok(Some(0));
    }
    write_tx(conn, |tx| {
        let mut st = tx.prepare(&format!(
            "PRAGMA incremental_vacuum({})",
            free.min(max_pages.max(1))
        ))?;
        let mut rows = st.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    })?;
    let left: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    Ok(Some(left))
}

/// [`vacuum_step`] until no free page is left or `max_steps` steps ran; the free pages left
/// (None: not an incremental-vacuum file). For a connection the caller owns alone (the CLI).
pub fn vacuum(conn: &mut Connection, max_steps: usize) -> rusqlite::Result<Option<i64>> {
    let mut left = Some(0);
    for _ in 0..max_steps {
        left = vacuum_step(conn, VACUUM_STEP_PAGES)?;
        if left.is_none_or(|n| n == 0) {
            break;
        }
    }
    Ok(left)
}

/// One database's single writer connection inside the worker.
///
/// Calls are short and synchronous; async code goes through [`Db::call`], which moves the work
/// to tokio's blocking pool so the runtime threads never wait on a disk sync.
pub struct Db {
    kind: DbKind,
    conn: Mutex<Connection>,
    /// The file's path and its (device, inode) when the connection opened it.
    path: PathBuf,
    file: Option<(u64, u64)>,
}

/// (device, inode) of the file at `p`.
fn file_id(p: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(p)?;
    Ok((md.dev(), md.ino()))
}

impl Db {
    pub fn open(data_dir: &Path, kind: DbKind) -> Result<Arc<Db>> {
        let conn = open(data_dir, kind)?;
        let path = kind.path(data_dir);
        Ok(Arc::new(Db {
            kind,
            conn: Mutex::new(conn),
            file: file_id(&path).ok(),
            path,
        }))
    }

    /// Whether the file at this database's path is no longer the one its connection opened
    /// (issue 50): Some(why, naming the file) when it was deleted or replaced under the running
    /// worker — its writes would go to a file nobody reads again. Checked on the heartbeat's
    /// cadence (`heartbeat`), before each group of results (`supervisor::finisher`) and on
    /// every failed call ([`Db::with`]).
    pub fn file_gone(&self) -> Option<String> {
        let name = self.kind.file_name();
        let path = self.path.display();
        match (file_id(&self.path), self.file) {
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
                "{name} was deleted under the running worker ({path} is missing): what the worker writes there is lost — stop the worker, put the file back or run `brainloop repair`, then start it"
            )),
            (Err(e), _) => Some(format!(
                "{name} cannot be checked ({path}: {e}) — the worker does not know whether its writes reach it"
            )),
            (Ok(now), Some(then)) if now != then => Some(format!(
                "{name} was replaced under the running worker ({path} is another file than the one it opened): its writes go to the old file — stop the worker, then start it (the start-up check compares the files)"
            )),
            _ => None,
        }
    }

    /// Whether the worker cannot write this database's file now (`access(W_OK)`: an immutable
    /// flag, its mode, a read-only mount): Some(why, naming the file). Never for input.db, which
    /// the worker only reads.
    pub fn file_unwritable(&self) -> Option<String> {
        if self.kind == DbKind::Input {
            return None;
        }
        let err = nix::unistd::access(&self.path, nix::unistd::AccessFlags::W_OK).err()?;
        Some(format!(
            "{} cannot be written ({}: {err}; an immutable flag — `lsattr` —, its mode or a read-only mount): what needs it waits — make it writable again",
            self.kind.file_name(),
            self.path.display()
        ))
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
        let out = f(&mut guard);
        drop(guard);
        match out {
            Ok(v) => Ok(v),
            // A write failure may come from a file deleted or replaced under the worker: say so.
            Err(e) => Err(match self.file_gone().or_else(|| self.file_unwritable()) {
                Some(why) => e.context(why),
                None => e.context(self.kind.file_name().to_string()),
            }),
        }
    }

    /// Runs `f` at once when no one holds the connection; `None` when someone does. For reads
    /// of the WAL index (`PRAGMA data_version`: shared memory, no disk), which a caller on an
    /// async thread may afford where a hop to the blocking pool would cost more, and for work
    /// that must never wait for a busy writer (`memory::release`).
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
    /// The databases deleted or replaced under the running worker ([`Db::file_gone`]): why,
    /// per file.
    pub fn files_gone(&self) -> Vec<String> {
        [
            &self.input,
            &self.lifecycle,
            &self.output,
            &self.metadata,
            &self.security,
        ]
        .iter()
        .filter_map(|d| d.file_gone())
        .collect()
    }

    /// The databases the worker writes that cannot be written now ([`Db::file_unwritable`]).
    pub fn files_unwritable(&self) -> Vec<String> {
        [
            &self.lifecycle,
            &self.output,
            &self.metadata,
            &self.security,
        ]
        .iter()
        .filter_map(|d| d.file_unwritable())
        .collect()
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vacuum_gives_every_free_page_back_in_bounded_steps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        let mut c = Connection::open(&p).unwrap();
        c.pragma_update(None, "auto_vacuum", "INCREMENTAL").unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.execute_batch("CREATE TABLE t(b BLOB)").unwrap();
        for _ in 0..2000 {
            c.execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                .unwrap();
        }
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let full = std::fs::metadata(&p).unwrap().len();
        c.execute("DELETE FROM t", []).unwrap();
        let free: i64 = c
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap();
        assert!(free > 1000, "{free}");
        // One bounded step frees at most its pages.
        assert_eq!(vacuum_step(&mut c, 100).unwrap(), Some(free - 100));
        assert_eq!(vacuum(&mut c, usize::MAX).unwrap(), Some(0));
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let after = std::fs::metadata(&p).unwrap().len();
        assert!(after * 20 < full, "{after} of {full} bytes left");
        // A file made without incremental vacuum says so.
        let mut n = Connection::open(dir.path().join("n.db")).unwrap();
        n.execute_batch("CREATE TABLE t(x)").unwrap();
        assert_eq!(vacuum_step(&mut n, 10).unwrap(), None);
    }
}
