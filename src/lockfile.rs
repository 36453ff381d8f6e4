//! The single-instance lock, held for the worker's whole life so a second `brainloop run` on the
//! same data dir refuses to start (naming the running PID) instead of racing the first. The kernel
//! drops it when the process dies, even on `kill -9`.
//!
//! Two `flock`s: the data directory itself (an `O_DIRECTORY` fd — the real guard, since nobody
//! can delete a directory's inode while files live in it, issue 21) and `brainloop.lock`, which
//! holds the PID for humans and scripts (`init_command_security.sh`, `uninstall.sh`). Deleting
//! `brainloop.lock` therefore never lets a second worker in; [`InstanceLock::reverify`] puts a
//! deleted or replaced lock file back (locked, with the PID) so scripts see the worker again.

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "brainloop.lock";

pub struct InstanceLock {
    _dir: Flock<File>,
    file: std::sync::Mutex<Flock<File>>,
    pub path: PathBuf,
}

/// Takes an exclusive `flock` on `file`, retrying for a second: `brainloop status` takes a
/// shared lock for a moment to see whether a worker runs, and a start colliding with it must not
/// fail. `Err(Some(file))`: another process holds it.
fn lock_exclusive(file: File, what: &Path) -> Result<std::result::Result<Flock<File>, File>> {
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
    match attempt {
        Ok(l) => Ok(Ok(l)),
        Err((f, Errno::EWOULDBLOCK)) => Ok(Err(f)),
        Err((_, e)) => bail!("cannot lock {}: {e}", what.display()),
    }
}

fn open_lock_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))
}

/// The PID written in the lock file, or why it is unknown.
fn holder_pid(path: &Path) -> String {
    let mut pid = String::new();
    match File::open(path).and_then(|mut f| f.read_to_string(&mut pid)) {
        Ok(_) if !pid.trim().is_empty() => pid.trim().to_string(),
        _ => format!("unknown: {} is missing or empty", LOCK_FILE),
    }
}

fn write_pid(lock: &mut Flock<File>) -> Result<()> {
    lock.set_len(0)?;
    lock.seek(SeekFrom::Start(0))?;
    writeln!(lock, "{}", std::process::id())?;
    lock.flush()?;
    Ok(())
}

/// Whether some process holds the worker's instance lock on `data_dir`, without disturbing it
/// (a shared lock taken and dropped at once): the lock on the data directory itself, which
/// survives a deleted `brainloop.lock`. `None` when the directory cannot be opened. The one
/// answer to "does a worker hold this data dir" (`status`, `enqueue --wait`).
pub fn held(data_dir: &Path) -> Option<bool> {
    let dir = File::open(data_dir).ok()?;
    match Flock::lock(dir, FlockArg::LockSharedNonblock) {
        Ok(_guard) => Some(false),
        Err(_) => Some(true),
    }
}

impl InstanceLock {
    pub fn acquire(data_dir: &Path) -> Result<InstanceLock> {
        let path = data_dir.join(LOCK_FILE);
        let dir = File::open(data_dir).with_context(|| {
            format!("cannot open the data dir {} to lock it", data_dir.display())
        })?;
        let dir = match lock_exclusive(dir, data_dir)? {
            Ok(l) => l,
            Err(_) => bail!(
                "another brainloop worker (pid {}) is already running on {}: it holds the lock on the data directory itself \
                 (deleting {LOCK_FILE} does not release it); stop it first (one worker per data dir)",
                holder_pid(&path),
                data_dir.display()
            ),
        };
        let mut lock = match lock_exclusive(open_lock_file(&path)?, &path)? {
            Ok(l) => l,
            Err(mut f) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                bail!(
                    "another process (pid {}) holds {} although no worker is running on {}; stop it first (one worker per data dir)",
                    pid.trim(),
                    path.display(),
                    data_dir.display()
                );
            }
        };
        write_pid(&mut lock)?;
        Ok(InstanceLock {
            _dir: dir,
            file: std::sync::Mutex::new(lock),
            path,
        })
    }

    /// Puts the lock file back if it was deleted or replaced (the data-dir lock still guards the
    /// worker; this keeps the PID visible to `status` and scripts). Returns whether it did.
    pub fn reverify(&self) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let mut held = match self.file.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let held_ino = held.metadata()?.ino();
        match std::fs::metadata(&self.path) {
            Ok(m) if m.ino() == held_ino => return Ok(false),
            _ => {}
        }
        let _ = std::fs::remove_file(&self.path); // a foreign replacement
        let mut lock = match lock_exclusive(open_lock_file(&self.path)?, &self.path)? {
            Ok(l) => l,
            Err(_) => bail!(
                "{} was replaced and another process holds the new one",
                self.path.display()
            ),
        };
        write_pid(&mut lock)?;
        *held = lock;
        Ok(true)
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
        assert_eq!(held(dir.path()), Some(true));
        drop(first);
        assert_eq!(held(dir.path()), Some(false));
        InstanceLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn deleting_the_lock_file_does_not_let_a_second_lock_in() {
        let dir = tempfile::tempdir().unwrap();
        let first = InstanceLock::acquire(dir.path()).unwrap();
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        let err = InstanceLock::acquire(dir.path()).err().unwrap().to_string();
        assert!(err.contains("data directory itself"), "{err}");
        assert!(first.reverify().unwrap());
        assert!(!first.reverify().unwrap());
        let err = InstanceLock::acquire(dir.path()).err().unwrap().to_string();
        assert!(err.contains(&std::process::id().to_string()), "{err}");
    }
}
