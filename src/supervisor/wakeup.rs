//! Wake-up: the supervisor sleeps until input.db changes. A file watcher (inotify) on the data
//! dir signals writes to `brainloop.input.db`, `-wal` or `-journal`; bursts coalesce into one
//! wake-up (a [`Notify`] holds at most one permit). The supervisor then confirms with
//! `PRAGMA data_version` before scanning, and falls back to that same cheap check every
//! `poll_fallback_ms` in case a notification is missed (network filesystems, watcher limits).

use notify::{EventKind, RecursiveMode, Watcher};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Notify;

pub struct InputWatcher {
    // Dropping the watcher stops it.
    _watcher: Option<notify::RecommendedWatcher>,
    pub wake: Arc<Notify>,
    /// command_security.db changed (an operator approved or denied something).
    pub approvals: Arc<Notify>,
}

fn is_security_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "command_security.db" || n == "command_security.db-wal")
}

fn is_input_file(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n == "brainloop.input.db"
            || n == "brainloop.input.db-wal"
            || n == "brainloop.input.db-journal"
    })
}

impl InputWatcher {
    /// Starts watching; on failure logs a warning and relies on the poll fallback.
    pub fn start(data_dir: &Path) -> InputWatcher {
        let wake = Arc::new(Notify::new());
        let approvals = Arc::new(Notify::new());
        let w = Arc::clone(&wake);
        let a = Arc::clone(&approvals);
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if matches!(ev.kind, EventKind::Modify(_) | EventKind::Create(_)) {
                    if ev.paths.iter().any(|p| is_input_file(p)) {
                        w.notify_one();
                    }
                    if ev.paths.iter().any(|p| is_security_file(p)) {
                        a.notify_one();
                    }
                }
            }
        })
        .and_then(|mut watcher| {
            watcher.watch(data_dir, RecursiveMode::NonRecursive)?;
            Ok(watcher)
        });
        match watcher {
            Ok(w) => InputWatcher {
                _watcher: Some(w),
                wake,
                approvals,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the data dir; relying on the poll fallback");
                InputWatcher {
                    _watcher: None,
                    wake,
                    approvals,
                }
            }
        }
    }

    pub fn is_watching(&self) -> bool {
        self._watcher.is_some()
    }
}
