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
//!
//! After a wake-up the thread holds further ones until the supervisor has looked
//! ([`InputWatcher::looked`]) or [`HOLD`] has passed (issue 24): a producer committing job by
//! job would otherwise wake the thread and the supervisor once per commit, thousands of times
//! per second, while the supervisor paces its claims anyway (`ClaimPace`). The kernel merges the
//! events meanwhile; the first read after the hold sees them all. A client waiting for each
//! answer is not held up: the supervisor looks (claims) before its answer is written.

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    looked: Arc<Looked>,
    /// Input wake-ups delivered by the thread (tests count them).
    delivered: Arc<AtomicU64>,
}

/// The longest a wake-up is held while the supervisor has not looked (its claim pace).
pub const HOLD: std::time::Duration = std::time::Duration::from_millis(5);

/// Whether the supervisor has looked since the last wake-up; the thread waits on it.
#[derive(Default)]
struct Looked {
    yes: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Looked {
    fn set(&self, v: bool) {
        *self.yes.lock().unwrap_or_else(|p| p.into_inner()) = v;
        if v {
            self.cv.notify_one();
        }
    }

    /// Until the supervisor has looked, `hold` at most.
    fn wait(&self, hold: std::time::Duration) {
        let g = self.yes.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.cv.wait_timeout_while(g, hold, |yes| !*yes);
    }
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
    looked: Arc<Looked>,
    hold: std::time::Duration,
    delivered: Arc<AtomicU64>,
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
            let mut woke = Vec::new();
            for e in events {
                if e.mask.contains(EventMask::IGNORED) {
                    self.files.remove(&e.wd);
                } else if e.wd == self.dir {
                    // A file of ours appeared: watch it, and it is itself a change.
                    let name = e.name.map(|n| n.to_string_lossy().into_owned());
                    woke.extend(name.and_then(|n| self.arm(&n)));
                } else if let Some(n) = self.files.get(&e.wd) {
                    woke.push(Arc::clone(n));
                }
            }
            let input = woke.iter().any(|n| Arc::ptr_eq(n, &self.wake));
            if input {
                self.looked.set(false);
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            for n in woke {
                n.notify_one();
            }
            if input {
                self.looked.wait(self.hold);
            }
        }
    }
}

impl InputWatcher {
    /// Starts watching; on failure logs a warning and relies on the poll fallback.
    pub fn start(data_dir: &Path) -> InputWatcher {
        Self::start_holding(data_dir, HOLD)
    }

    /// The supervisor has looked at input.db: the next change may wake it at once.
    pub fn looked(&self) {
        self.looked.set(true);
    }

    /// Input wake-ups the thread has delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    fn start_holding(data_dir: &Path, hold: std::time::Duration) -> InputWatcher {
        let wake = Arc::new(Notify::new());
        let approvals = Arc::new(Notify::new());
        let stop = Arc::new(AtomicBool::new(false));
        let looked = Arc::new(Looked::default());
        let delivered = Arc::new(AtomicU64::new(0));
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
                looked: Arc::clone(&looked),
                hold,
                delivered: Arc::clone(&delivered),
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
                looked,
                delivered,
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the data dir; relying on the poll fallback");
                InputWatcher {
                    watching: None,
                    wake,
                    approvals,
                    looked,
                    delivered,
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
            self.looked.set(true);
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
    async fn a_burst_wakes_it_once_until_the_supervisor_has_looked() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("brainloop.input.db");
        commit(&input, "CREATE TABLE jobs(id INTEGER PRIMARY KEY, x)");
        // A hold far longer than the test: only `looked` can end it.
        let w = InputWatcher::start_holding(d.path(), Duration::from_secs(60));
        commit(&input, "INSERT INTO jobs(x) VALUES (0)");
        assert!(woke(&w.wake).await, "the first commit wakes it at once");
        assert_eq!(w.delivered(), 1);
        for i in 1..20 {
            commit(&input, &format!("INSERT INTO jobs(x) VALUES ({i})"));
        }
        assert!(!woke(&w.wake).await, "held: the supervisor has not looked");
        assert_eq!(w.delivered(), 1);
        w.looked();
        assert!(
            woke(&w.wake).await,
            "the held commits, merged into one wake-up"
        );
        assert_eq!(w.delivered(), 2);
        // Looked before the next commit: it wakes at once again.
        w.looked();
        commit(&input, "INSERT INTO jobs(x) VALUES (99)");
        assert!(woke(&w.wake).await);
        assert_eq!(w.delivered(), 3);
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
