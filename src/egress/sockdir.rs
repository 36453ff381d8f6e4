//! Where the egress proxies' sockets live (issue 33): **a socket path that fits `sun_path`
//! (108 bytes) whatever `$TMPDIR` is**. One short directory per worker,
//! `<base>/bl-<instance>-XXXXXX` (mode 0700, made by `mkdtemp`), where `<base>` is
//! `$XDG_RUNTIME_DIR` when it is short and under `/run`, else `/tmp` — both among the
//! directories the sandbox helper covers with a tmpfs (`sandbox::HIDDEN_DIRS`), so no command
//! sees it; `<instance>` is a hash of the data dir. Each proxy makes its own `e-XXXXXX` inside
//! (`proxy::JobProxy::start`). The worker makes it at start-up, under its instance lock, after
//! removing what a crashed run of the same instance left ([`prepare`]), and removes it at
//! shutdown ([`remove`]); any other process (a test, the CLI) makes one on first use and leaves
//! the sweep to the worker.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The longest base directory used (longer `$XDG_RUNTIME_DIR` values fall back to `/tmp`).
const MAX_BASE: usize = 40;

static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

fn lock() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    DIR.lock().unwrap_or_else(|p| p.into_inner())
}

/// `bl-<8 hex of the data dir>-`: this instance's directories.
fn prefix(data_dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let h = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    format!("bl-{}-", hex::encode(&h[..4]))
}

/// The candidate bases, best first.
fn bases() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        let short = x.as_os_str().len() <= MAX_BASE;
        if short && x.is_absolute() && x.starts_with("/run") && x.is_dir() {
            v.push(x);
        }
    }
    v.push(PathBuf::from("/tmp"));
    v
}

/// Makes a new directory for this process in the first base that takes one.
fn make(data_dir: &Path) -> Result<PathBuf> {
    let prefix = prefix(data_dir);
    let mut last = None;
    for base in bases() {
        match nix::unistd::mkdtemp(&base.join(format!("{prefix}XXXXXX"))) {
            Ok(d) => return Ok(d),
            Err(e) => last = Some(format!("{}: {e}", base.display())),
        }
    }
    anyhow::bail!(
        "cannot create the egress proxy's socket directory ({}); make /tmp writable for the worker's user",
        last.unwrap_or_default()
    )
}

/// Removes this instance's directories left in the bases (owned by this user): call at
/// worker start-up, under the instance lock, before any job runs. Returns how many.
fn sweep(data_dir: &Path, keep: Option<&Path>) -> usize {
    use std::os::unix::fs::MetadataExt;
    let prefix = prefix(data_dir);
    let uid = nix::unistd::getuid().as_raw();
    let mut n = 0;
    for base in bases() {
        let Ok(rd) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in rd.flatten() {
            let ours = e
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix));
            let Ok(md) = e.path().symlink_metadata() else {
                continue;
            };
            let kept = keep == Some(e.path().as_path());
            if ours
                && !kept
                && md.is_dir()
                && md.uid() == uid
                && std::fs::remove_dir_all(e.path()).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// The worker's start-up: sweeps what a previous run left, makes the directory (keeps the one
/// this process already uses, if a proxy started before). Returns it and how many leftovers
/// went.
pub fn prepare(data_dir: &Path) -> Result<(PathBuf, usize)> {
    let mut g = lock();
    let current = g.clone().filter(|d| d.is_dir());
    let swept = sweep(data_dir, current.as_deref());
    let dir = match current {
        Some(d) => d,
        None => make(data_dir)?,
    };
    *g = Some(dir.clone());
    Ok((dir, swept))
}

/// The directory (made on first use when [`prepare`] was not called).
pub fn get(data_dir: &Path) -> Result<PathBuf> {
    let mut g = lock();
    if let Some(d) = g.as_ref().filter(|d| d.is_dir()) {
        return Ok(d.clone());
    }
    let d = make(data_dir).context("egress proxy")?;
    *g = Some(d.clone());
    Ok(d)
}

/// Removes the directory (worker shutdown).
pub fn remove() {
    if let Some(d) = lock().take() {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_directory_is_short_private_and_swept_by_instance() {
        let data = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let a = make(data.path()).unwrap();
        let b = make(other.path()).unwrap();
        assert!(a.as_os_str().len() <= MAX_BASE + 20, "{a:?}");
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // A socket under it fits sun_path with room to spare, whatever $TMPDIR is.
        let sock = a.join("e-XXXXXX").join(format!("{}.sock", "0".repeat(32)));
        assert!(sock.as_os_str().len() < 100, "{sock:?}");
        assert_eq!(sweep(data.path(), Some(&a)), 0);
        assert_eq!(sweep(data.path(), None), 1);
        assert!(!a.exists() && b.exists());
        let _ = std::fs::remove_dir_all(b);
    }
}
