//! Waking waiting calls when output.db changes (the same pattern as `supervisor::wakeup` for
//! input.db): an inotify watcher on the data dir fires on writes to `brainloop.output.db`,
//! `-wal` or `-journal`; a task confirms with `PRAGMA data_version` on its own read-only
//! connection and, when the version moved, bumps a [`watch`] counter every waiting call
//! subscribes to. The inotify event can precede the commit becoming visible (the writer's
//! fsync sits between its WAL write and the wal-index update), so an event that finds the
//! version unchanged is re-checked after 1, 4, 16, 64 and 256 ms. A slow poll (one PRAGMA per
//! [`FALLBACK_POLL`]) covers missed notifications.

use crate::db::{self, DbKind};
use anyhow::Result;
use notify::{EventKind, RecursiveMode, Watcher};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The fallback check period when no notification arrives.
pub const FALLBACK_POLL: Duration = Duration::from_millis(1000);

/// Re-checks after an event that found `data_version` unchanged.
const RECHECKS_MS: [u64; 5] = [1, 4, 16, 64, 256];

fn is_output_file(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n == "brainloop.output.db"
            || n == "brainloop.output.db-wal"
            || n == "brainloop.output.db-journal"
    })
}

/// A running watch of output.db; dropping it stops the watcher and the confirming task.
pub struct OutputWatch {
    _watcher: Option<notify::RecommendedWatcher>,
    rx: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl OutputWatch {
    /// Starts watching `data_dir` (must be called inside a tokio runtime). A watcher that
    /// cannot start is logged and the slow poll alone remains.
    pub fn start(data_dir: &Path) -> Result<OutputWatch> {
        let conn = db::open_read_only(data_dir, DbKind::Output)?;
        let raw = Arc::new(Notify::new());
        let r = Arc::clone(&raw);
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if matches!(ev.kind, EventKind::Modify(_) | EventKind::Create(_))
                    && ev.paths.iter().any(|p| is_output_file(p))
                {
                    r.notify_one();
                }
            }
        })
        .and_then(|mut w| {
            w.watch(data_dir, RecursiveMode::NonRecursive)?;
            Ok(w)
        });
        let watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the data dir; waiting calls poll output.db every second");
                None
            }
        };
        let (tx, rx) = watch::channel(0u64);
        let task = tokio::spawn(confirm_loop(conn, raw, tx));
        Ok(OutputWatch {
            _watcher: watcher,
            rx,
            task,
        })
    }

    /// A receiver that resolves `changed()` after the next confirmed change of output.db.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rx.clone()
    }

    pub fn is_watching(&self) -> bool {
        self._watcher.is_some()
    }
}

impl Drop for OutputWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `PRAGMA data_version`: changes whenever another connection commits to the database.
fn data_version(conn: &Connection) -> Option<i64> {
    match conn.query_row("PRAGMA data_version", [], |r| r.get(0)) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read output.db data_version");
            None
        }
    }
}

async fn confirm_loop(conn: Connection, raw: Arc<Notify>, tx: watch::Sender<u64>) {
    let mut last = data_version(&conn);
    let mut changed = |conn: &Connection| {
        let v = data_version(conn);
        // An unreadable version counts as a change: waiters re-read and see for themselves.
        if v != last || v.is_none() {
            last = v;
            true
        } else {
            false
        }
    };
    loop {
        let by_event = tokio::select! {
            _ = raw.notified() => true,
            _ = tokio::time::sleep(FALLBACK_POLL) => false,
            _ = tx.closed() => return,
        };
        if changed(&conn) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
            continue;
        }
        if by_event {
            for ms in RECHECKS_MS {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if changed(&conn) {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                    break;
                }
            }
        }
    }
}
