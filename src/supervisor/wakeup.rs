//! Wake-up: the supervisor sleeps until input.db changes. An inotify watch on each of
//! `brainloop.input.db`, `-wal` and `-journal` signals writes to them, and one on
//! `command_security.db` and its `-wal` signals operator decisions; bursts coalesce into one
//! wake-up (a [`Notify`] holds at most one permit). The supervisor then confirms with
//! `PRAGMA data_version` before scanning, and falls back to that same cheap check every
//! `poll_fallback_ms` in case a notification is missed (network filesystems, watcher limits).
//!
//! The files are watched one by one, not the data dir's every write (issue 24): the worker's
//! own commits to output, lifecycle and metadata would otherwise wake the watcher thread
//! hundreds of times per second under load. The data dir itself is watched only for files
//! appearing (created or moved in), so a `-wal` or `-journal` created later — or replaced — gets
//! its watch then, and its creation is itself a wake-up.

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

const INPUT_FILES: [&str; 3] = [
    "brainloop.input.db",
    "brainloop.input.db-wal",
    "brainloop.input.db-journal",
];
const SECURITY_FILES: [&str; 2] = ["command_security.db", "command_security.db-wal"];

pub struct InputWatcher {
    /// The data dir's watch and the thread's stop flag: removing that watch at drop wakes the
    /// thread (with IN_IGNORED), which then stops.
    watching: Option<(Watches, WatchDescriptor, Arc<AtomicBool>)>,
    pub wake: Arc<Notify>,
    /// command_security.db changed (an operator approved or denied something).
    pub approvals: Arc<Notify>,
}

const FILE_MASK: WatchMask = WatchMask::MODIFY;
const DIR_MASK: WatchMask = WatchMask::CREATE.union(WatchMask::MOVED_TO);

struct Thread {
    inotify: Inotify,
    dir: WatchDescriptor,
    data_dir: std::path::PathBuf,
    /// Each file watch and the notification its changes go to.
    files: HashMap<WatchDescriptor, Arc<Notify>>,
    wake: Arc<Notify>,
    approvals: Arc<Notify>,
    stop: Arc<AtomicBool>,
}

impl Thread {
    /// The notification for changes to the data dir's file `name`, if it is one of ours.
    fn notify_of(&self, name: &str) -> Option<Arc<Notify>> {
        if INPUT_FILES.contains(&name) {
            Some(Arc::clone(&self.wake))
        } else if SECURITY_FILES.contains(&name) {
            Some(Arc::clone(&self.approvals))
        } else {
            None
        }
    }

    /// Watches `name` if it is one of ours and exists (a second watch of the same inode is the
    /// same descriptor); returns its notification.
    fn arm(&mut self, name: &str) -> Option<Arc<Notify>> {
        let notify = self.notify_of(name)?;
        let path = self.data_dir.join(name);
        if let Ok(wd) = self.inotify.watches().add(path, FILE_MASK) {
            self.files.insert(wd, Arc::clone(&notify));
        }
        Some(notify)
    }

    fn run(mut self) {
        let mut buf = [0u8; 4096];
        while !self.stop.load(Ordering::SeqCst) {
            // The events borrow `buf` only, so new watches can be added while reading them.
            let events = match self.inotify.read_events_blocking(&mut buf) {
                Ok(evs) => evs,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "input watcher stopped; relying on the poll fallback");
                    return;
                }
            };
            for e in events {
                if e.mask.contains(EventMask::IGNORED) {
                    self.files.remove(&e.wd);
                } else if e.wd == self.dir {
                    // A file of ours appeared: watch it, and it is itself a change.
                    let name = e.name.map(|n| n.to_string_lossy().into_owned());
                    if let Some(n) = name.and_then(|n| self.arm(&n)) {
                        n.notify_one();
                    }
                } else if let Some(n) = self.files.get(&e.wd) {
                    n.notify_one();
                }
            }
        }
    }
}

impl InputWatcher {
    /// Starts watching; on failure logs a warning and relies on the poll fallback.
    pub fn start(data_dir: &Path) -> InputWatcher {
        let wake = Arc::new(Notify::new());
        let approvals = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let started = Inotify::init().and_then(|inotify| {
            let dir = inotify.watches().add(data_dir, DIR_MASK)?;
            let mut t = Thread {
                inotify,
                dir,
                data_dir: data_dir.to_path_buf(),
                files: HashMap::new(),
                wake: Arc::clone(&wake),
                approvals: Arc::clone(&approvals),
                stop: Arc::clone(&stop),
            };
            for name in INPUT_FILES.iter().chain(SECURITY_FILES.iter()) {
                t.arm(name);
            }
            let (watches, dir) = (t.inotify.watches(), t.dir.clone());
            std::thread::Builder::new()
                .name("input-watch".into())
                .spawn(move || t.run())?;
            Ok((watches, dir))
        });
        match started {
            Ok((w, dir)) => InputWatcher {
                watching: Some((w, dir, stop)),
                wake,
                approvals,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the data dir; relying on the poll fallback");
                InputWatcher {
                    watching: None,
                    wake,
                    approvals,
                }
            }
        }
    }

    pub fn is_watching(&self) -> bool {
        self.watching.is_some()
    }
}

impl Drop for InputWatcher {
    fn drop(&mut self) {
        if let Some((mut watches, dir, stop)) = self.watching.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = watches.remove(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woke(n: &Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(500), n.notified())
            .await
            .is_ok()
    }

    fn commit(path: &Path, sql: &str) {
        let c = rusqlite::Connection::open(path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.execute_batch(sql).unwrap();
        // The connection stays open so the -wal stays (as the worker's own does).
        std::mem::forget(c);
    }

    #[tokio::test]
    async fn a_producers_commits_wake_it_and_other_files_do_not() {
        let d = tempfile::tempdir().unwrap();
        // Nothing exists yet: the input files appear later (the dir watch arms them).
        let w = InputWatcher::start(d.path());
        assert!(w.is_watching());
        let input = d.path().join("brainloop.input.db");
        commit(&input, "CREATE TABLE jobs(id INTEGER PRIMARY KEY, x)");
        assert!(woke(&w.wake).await, "creating input.db and its -wal");
        while woke(&w.wake).await {}
        for i in 0..3 {
            commit(&input, &format!("INSERT INTO jobs(x) VALUES ({i})"));
            assert!(woke(&w.wake).await, "commit {i} to the existing -wal");
        }
        while woke(&w.wake).await {}
        // The worker's own databases: no wake-up of either kind.
        let out = d.path().join("brainloop.output.db");
        commit(&out, "CREATE TABLE results(x)");
        while woke(&w.wake).await {}
        for i in 0..3 {
            commit(&out, &format!("INSERT INTO results VALUES ({i})"));
        }
        assert!(!woke(&w.wake).await && !woke(&w.approvals).await);
        // An operator's decision in command_security.db wakes the approvals side only.
        commit(
            &d.path().join("command_security.db"),
            "CREATE TABLE approvals(x)",
        );
        assert!(woke(&w.approvals).await);
        assert!(!woke(&w.wake).await);
    }

    #[tokio::test]
    async fn a_replaced_wal_is_watched_again() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("brainloop.input.db");
        commit(&input, "CREATE TABLE jobs(id INTEGER PRIMARY KEY, x)");
        let w = InputWatcher::start(d.path());
        let wal = d.path().join("brainloop.input.db-wal");
        // Moved away and a new one moved in (a restore, say): the new file gets its watch.
        std::fs::rename(&wal, d.path().join("old-wal")).unwrap();
        std::fs::write(d.path().join("new-wal"), b"x").unwrap();
        std::fs::rename(d.path().join("new-wal"), &wal).unwrap();
        assert!(woke(&w.wake).await, "the moved-in -wal");
        while woke(&w.wake).await {}
        std::fs::OpenOptions::new()
            .append(true)
            .open(&wal)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"y"))
            .unwrap();
        assert!(woke(&w.wake).await, "a write to the new -wal");
        drop(w);
    }
}
