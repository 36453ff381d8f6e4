//! The front-end's own audit rows in metadata.db `audit`: the calls it answers itself
//! (`list_actions`, `get_schema`) and the ones it refuses (bad arguments, unknown action,
//! invalid or oversized params, `force_execute` without the grant, worker down). Calls that
//! become jobs are audited by the worker when it runs them (with their job id); the front-end's
//! rows have no job id.
//!
//! metadata.db is the worker's database: the front-end is a second writer. It writes through
//! [`db::write_tx`] (`BEGIN IMMEDIATE`) on a connection with `busy_timeout`, so the two never
//! fail each other with SQLITE_BUSY; a row that still cannot be written is logged (stderr), and
//! the call is answered anyway.

use crate::db::metadata::{self, AuditRow};
use crate::db::{self, DbKind};
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Audit statuses of front-end rows (the worker's rows carry job statuses).
pub mod status {
    /// Answered by the front-end (list_actions, get_schema).
    pub const SUCCEEDED: &str = "succeeded";
    /// Refused: malformed arguments, unknown action, invalid or oversized params.
    pub const FAILED: &str = "failed";
    /// Refused for lack of a grant (`force_execute` without FORCE_EXECUTE).
    pub const DENIED: &str = "denied";
    /// Refused because no worker is running.
    pub const UNAVAILABLE: &str = "unavailable";
}

/// SHA-256 hex of the params text, as the worker records it.
pub use crate::db::metadata::params_hash;

/// The front-end's writer connection to metadata.db, opened on first use.
pub struct Auditor {
    data_dir: std::path::PathBuf,
    conn: Mutex<Option<Connection>>,
}

impl Auditor {
    pub fn new(data_dir: &Path) -> Arc<Auditor> {
        Arc::new(Auditor {
            data_dir: data_dir.to_path_buf(),
            conn: Mutex::new(None),
        })
    }

    /// Writes one row on the blocking pool; failures are logged, never returned.
    pub async fn record(self: &Arc<Self>, row: AuditRow) {
        let me = Arc::clone(self);
        let res = tokio::task::spawn_blocking(move || me.write(&row)).await;
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot write an audit row to metadata.db")
            }
            Err(e) => tracing::warn!(error = %e, "audit task failed"),
        }
    }

    fn write(&self, row: &AuditRow) -> anyhow::Result<()> {
        let mut guard = match self.conn.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.is_none() {
            *guard = Some(db::open(&self.data_dir, DbKind::Metadata)?);
        }
        match guard.as_mut() {
            Some(conn) => metadata::insert_audit(conn, std::slice::from_ref(row)),
            None => anyhow::bail!("metadata.db is not open"),
        }
    }
}
