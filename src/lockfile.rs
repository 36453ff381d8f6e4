//! The single-instance lock: `brainloop.lock` in the data dir, held with `flock` for the worker's
//! whole life and holding its PID, so a second `brainloop run` on the same data dir refuses to
//! start (naming the running PID) instead of racing the first. The kernel drops the lock when the
//! process dies, even on `kill -9`.

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "brainloop.lock";

pub struct InstanceLock {
    _lock: Flock<File>,
    pub path: PathBuf,
}

impl InstanceLock {
    pub fn acquire(data_dir: &Path) -> Result<InstanceLock> {
        let path = data_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open lock file {}", path.display()))?;
        // `brainloop status` takes a shared lock for a moment to see whether a worker runs;
        // a start colliding with it retries briefly instead of failing.
        let mut attempt = Flock::lock(file, FlockArg::LockExclusiveNonblock);
        for _ in 0..20 {
            match attempt {
                Err((f, Errno::EWOULDBLOCK)) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    attempt = Flock::lock(f, FlockArg::LockExclusiveNonblock);
                }
                _ => break,
            }
        }
        let mut lock = match attempt {
            Ok(l) => l,
            Err((mut f, Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                bail!(
                    "another brainloop worker (pid {}) is already running on {}; stop it first (one worker per data dir)",
                    pid.trim(),
                    data_dir.display()
                );
            }
            Err((_, e)) => bail!("cannot lock {}: {e}", path.display()),
        };
        lock.set_len(0)?;
        lock.seek(SeekFrom::Start(0))?;
        writeln!(lock, "{}", std::process::id())?;
        lock.flush()?;
        Ok(InstanceLock { _lock: lock, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(dir.path()).unwrap();
        let err = InstanceLock::acquire(dir.path()).err().unwrap().to_string();
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        drop(first);
        InstanceLock::acquire(dir.path()).unwrap();
    }
}
