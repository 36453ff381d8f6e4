//! Waking waiting calls when output.db changes (the same pattern as `supervisor::wakeup` for
//! input.db): an inotify watcher on the data dir fires on writes to `brainloop.output.db`,
//! `-wal` or `-journal`; a thread confirms with `PRAGMA data_version` on its own read-only
//! connection and, when the version moved, bumps a [`watch`] counter every waiting call
//! subscribes to. The inotify event can precede the commit becoming visible (the writer's
//! fsync sits between its WAL write and the wal-index update), so an event that finds the
//! version unchanged is re-checked from 100 µs to 256 ms later, on a plain thread (µs sleeps). A slow
//! poll (one PRAGMA per [`FALLBACK_POLL`]) covers missed notifications.

use crate::db::{self, DbKind};
use anyhow::{Context, Result};
use notify::{EventKind, RecursiveMode, Watcher};
use rusqlite::Connection;
use std::path::Path;
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::time::Duration;
use tokio::sync::watch;

/// The fallback check period when no notification arrives.
pub const FALLBACK_POLL: Duration = Duration::from_millis(1000);

/// Waits (µs) before each re-check when an event found `data_version` unchanged. A plain thread
/// sleeps with microsecond resolution (tokio timers have 1 ms), which keeps the wake-up latency
/// of a waiting call near the worker's commit.
const RECHECKS_US: [u64; 9] = db::VISIBILITY_RECHECKS_US;

fn is_output_file(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n == "brainloop.output.db"
            || n == "brainloop.output.db-wal"
            || n == "brainloop.output.db-journal"
    })
}

/// A running watch of output.db; dropping it stops the watcher and the confirming thread.
pub struct OutputWatch {
    _watcher: Option<notify::RecommendedWatcher>,
    // Held so the confirming thread sees a disconnect only when the watch is dropped.
    _events: SyncSender<()>,
    rx: watch::Receiver<u64>,
}

impl OutputWatch {
    /// Starts watching `data_dir`. A watcher that cannot start is logged and the slow poll
    /// alone remains.
    pub fn start(data_dir: &Path) -> Result<OutputWatch> {
        let conn = db::open_read_only(data_dir, DbKind::Output)?;
        // One pending event is enough: bursts coalesce.
        let (ev_tx, ev_rx) = sync_channel::<()>(1);
        let cb_tx = ev_tx.clone();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if matches!(ev.kind, EventKind::Modify(_) | EventKind::Create(_))
                    && ev.paths.iter().any(|p| is_output_file(p))
                {
                    let _ = cb_tx.try_send(());
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
        std::thread::Builder::new()
            .name("mcp-output-watch".into())
            .spawn(move || confirm_loop(conn, ev_rx, tx))
            .context("cannot start the output.db watch thread")?;
        Ok(OutputWatch {
            _watcher: watcher,
            _events: ev_tx,
            rx,
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

fn confirm_loop(conn: Connection, events: std::sync::mpsc::Receiver<()>, tx: watch::Sender<u64>) {
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
    let bump = |tx: &watch::Sender<u64>| tx.send_modify(|n| *n = n.wrapping_add(1));
    loop {
        let by_event = match events.recv_timeout(FALLBACK_POLL) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if changed(&conn) {
            bump(&tx);
            continue;
        }
        if by_event {
            for us in RECHECKS_US {
                std::thread::sleep(Duration::from_micros(us));
                if changed(&conn) {
                    bump(&tx);
                    break;
                }
            }
        }
    }
}
