//! Keeps the idle worker small. One malloc arena for the whole process (set before the runtime
//! starts a thread: per-thread arenas kept ~4 MiB of freed memory resident after a burst), and,
//! at a heartbeat that finds the worker idle after it has done work, the writer connections'
//! SQLite page caches shrunk (`PRAGMA shrink_memory`) and freed heap handed back to the kernel
//! (`malloc_trim`), and the clean pages of brainloop's own read-only file mappings (code, constant
//! data) unmapped from the process (`MADV_DONTNEED`: they stay in the page cache and map back
//! on first use, a minor fault; a mapping holding any private copy-on-write page, such as the
//! relocated RELRO segment, is never touched). Nothing here changes what is written or when.

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

/// Shrinks the writer connections' page caches and trims the heap. Blocking (takes each
/// writer's lock in turn): run it on the blocking pool.
pub fn release(stores: &Stores) {
    for db in [
        &stores.input,
        &stores.lifecycle,
        &stores.output,
        &stores.metadata,
        &stores.security,
    ] {
        if let Err(e) = db.with(|c| Ok(c.execute_batch("PRAGMA shrink_memory")?)) {
            tracing::debug!(error = %e, "shrink_memory failed");
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the kernel; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
    if let Err(e) = unmap_clean_code() {
        tracing::debug!(error = %e, "cannot release code pages");
    }
}

/// A mapping of /proc/self/smaps.
#[derive(Debug, PartialEq)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    path: String,
    anonymous_kb: u64,
}

fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(first), Some(second)) = (f.next(), f.next()) else {
            continue;
        };
        if let Some(kb) = line.strip_prefix("Anonymous:") {
            if let Some(m) = out.last_mut() {
                // Unparseable: count it as private, so the mapping is left alone.
                m.anonymous_kb = kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(u64::MAX);
            }
            continue;
        }
        let Some((a, b)) = first.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        if second.len() != 4 {
            continue;
        }
        out.push(Mapping {
            start,
            end,
            writable: second.contains('w'),
            path: f.nth(3).unwrap_or("").to_string(),
            // Until its Anonymous line is read, a mapping counts as private.
            anonymous_kb: u64::MAX,
        });
    }
    out
}

/// The mappings of `exe` that can be dropped safely: read-only, with no private page.
fn droppable<'a>(maps: &'a [Mapping], exe: &'a str) -> impl Iterator<Item = &'a Mapping> {
    maps.iter()
        .filter(move |m| m.path == exe && !m.writable && m.anonymous_kb == 0)
}

fn unmap_clean_code() -> anyhow::Result<()> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let maps = parse_smaps(&std::fs::read_to_string("/proc/self/smaps")?);
    for m in droppable(&maps, &exe) {
        // SAFETY: the range is a whole read-only private file mapping of our own binary with no
        // copy-on-write page: dropping its pages only makes the next access fault them back in
        // from the file, unchanged.
        let r = unsafe {
            libc::madvise(
                m.start as *mut libc::c_void,
                m.end - m.start,
                libc::MADV_DONTNEED,
            )
        };
        if r != 0 {
            anyhow::bail!("madvise: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0826000 r--p 00000000 fd:00 123 /usr/bin/brainloop
Size:               8344 kB
Rss:                4000 kB
Anonymous:             0 kB
55d0a0827000-55d0a1a3e000 r-xp 00826000 fd:00 123 /usr/bin/brainloop
Anonymous:             0 kB
55d0a1a3f000-55d0a1c00000 r--p 01a3d000 fd:00 123 /usr/bin/brainloop
Anonymous:          1796 kB
55d0a1c07000-55d0a1c10000 rw-p 01c04000 fd:00 123 /usr/bin/brainloop
Anonymous:            36 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:00 9 /usr/lib/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 fd:00 123 /usr/bin/brainloop
Size:               1024 kB
";

    #[test]
    fn only_clean_read_only_mappings_of_the_binary_are_dropped() {
        let maps = parse_smaps(SMAPS);
        assert_eq!(maps.len(), 6);
        let d: Vec<usize> = droppable(&maps, "/usr/bin/brainloop")
            .map(|m| m.start)
            .collect();
        // Not the RELRO copy (anonymous pages), not the writable data, not libc, and not a
        // mapping whose Anonymous line is missing.
        assert_eq!(d, vec![0x55d0a0000000, 0x55d0a0827000]);
    }

    #[test]
    fn release_leaves_the_process_working() {
        // Drop our own code pages for real, then run code and read constants again.
        unmap_clean_code().unwrap();
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(v.iter().sum::<u64>(), 500_500);
        assert_eq!(format!("{:?}", parse_smaps("")), "[]");
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
