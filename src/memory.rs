//! Keeps the idle worker small. One malloc arena for the whole process (set before the runtime
//! starts a thread: per-thread arenas kept ~4 MiB of freed memory resident after a burst), and,
//! at a heartbeat that finds the worker idle after it has done work, the writer connections'
//! SQLite page caches shrunk (`PRAGMA shrink_memory`) and freed heap handed back to the kernel
//! (`malloc_trim`). Nothing here changes what is written or when.
//!
//! What stays resident is mostly brainloop's own code pages (clean, file-backed, shared with the
//! page cache). Unmapping them at idle (`MADV_DONTNEED`) was tried and dropped: it lowers the
//! RSS figure without lowering the memory the machine uses.

use crate::db::Stores;
use std::sync::atomic::{AtomicI64, Ordering};

/// One malloc arena (glibc); a no-op elsewhere. Call before any thread is started.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's tuning; it is called before threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Remembers the job count at the last release, so an idle worker releases once after start-up
/// and then once per burst of jobs.
pub struct IdleRelease {
    done_at_last: AtomicI64,
}

impl Default for IdleRelease {
    fn default() -> Self {
        IdleRelease {
            done_at_last: AtomicI64::new(-1),
        }
    }
}

impl IdleRelease {
    /// True when the worker is idle and, since the last release, has started or finished jobs.
    pub fn due(&self, jobs_running: i64, jobs_done_total: i64) -> bool {
        jobs_running == 0
            && self.done_at_last.swap(jobs_done_total, Ordering::Relaxed) != jobs_done_total
    }
}

/// Shrinks the writer connections' page caches and trims the heap. Never waits for a writer:
/// one that is in use is skipped (it is working; the next idle beat shrinks it) — the
/// heartbeat awaits this, and a writer can be held for seconds, e.g. the recorder's waiting on
/// a metadata.db another process has locked, which delayed the first `running` heartbeat past
/// a start-up's readiness deadline. Run it on the blocking pool.
pub fn release(stores: &Stores) {
    for db in [
        &stores.input,
        &stores.lifecycle,
        &stores.output,
        &stores.metadata,
        &stores.security,
    ] {
        match db.try_with(|c| c.execute_batch("PRAGMA shrink_memory")) {
            Some(Err(e)) => tracing::debug!(error = %e, "shrink_memory failed"),
            Some(Ok(())) => {}
            None => tracing::debug!(db = ?db.kind(), "shrink_memory skipped: the writer is in use"),
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the kernel; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer held by another thread (as the recorder holds metadata.db's while it waits on a
    /// lock) does not hold up the release: it returns while the writer is still held.
    #[test]
    fn release_never_waits_for_a_writer_in_use() {
        let dir = tempfile::tempdir().unwrap();
        crate::db::migrate::migrate_all(dir.path()).unwrap();
        let stores = Stores::open(dir.path()).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let stores = std::sync::Arc::clone(&stores);
            std::thread::spawn(move || {
                stores
                    .metadata
                    .with(|_| {
                        held_tx.send(()).unwrap();
                        // Held until the release below has returned (or the test gave up).
                        let _ = done_rx.recv_timeout(std::time::Duration::from_secs(60));
                        Ok(())
                    })
                    .unwrap();
            })
        };
        held_rx.recv().unwrap();
        let (ret_tx, ret_rx) = std::sync::mpsc::channel();
        let st = std::sync::Arc::clone(&stores);
        std::thread::spawn(move || {
            release(&st);
            ret_tx.send(()).unwrap();
        });
        let returned = ret_rx.recv_timeout(std::time::Duration::from_secs(30));
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(
            returned.is_ok(),
            "release waited for metadata.db's writer while another thread held it"
        );
    }

    #[test]
    fn release_is_due_once_per_burst_and_only_when_idle() {
        let r = IdleRelease::default();
        assert!(!r.due(1, 0), "busy from the start");
        assert!(r.due(0, 0), "first idle beat: the start-up's memory");
        assert!(!r.due(0, 0), "nothing done since");
        assert!(r.due(0, 10), "idle after 10 jobs");
        assert!(!r.due(0, 10), "still the same burst");
        assert!(!r.due(2, 12), "busy");
        assert!(r.due(0, 12), "idle after more jobs");
    }
}
