//! Per-job timing marks (issue 39): where a confined command's time goes, from the handler's
//! start to its result, recorded by the daemon itself when the log asks for it
//! (`BRAINLOOP_LOG=…,brainloop::timing=debug`); otherwise nothing is recorded and no file is
//! written. This module owns the record's format: one `brainloop::timing` debug event per job,
//! `job_id` and `marks`, a JSON object `{name: CLOCK_MONOTONIC ns}` (the first time each name was
//! reached), read by `scripts/bench_confined.sh`.
//!
//! Worker side, the marks live in a task-local of the job's handler ([`scope`], [`mark`]). The
//! sandbox helper is another process (and forks PID 1 and the command): it appends `name ns`
//! lines to a file the worker created for the run (`Spec::marks`, under the data dir, opened
//! `O_APPEND | O_CLOEXEC` before anything of the command exists, closed by the command's exec
//! and by PID 1 once the command is forked, so the command never holds it); the worker merges
//! the file into the job's marks once the helper has exited ([`merge_file`]). A warm helper's
//! marks from before its spec arrived (cgroup, namespaces: done ahead) are kept in memory until
//! the spec names the file.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

/// The tracing target the record is logged under (and that turns it on).
pub const TARGET: &str = "brainloop::timing";

tokio::task_local! {
    static MARKS: RefCell<Vec<(String, u64)>>;
}

/// Whether the log asks for the timing record.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// Runs `f` (a job's handler) with a fresh set of marks, then logs them for `job_id` when the
/// log asks for it.
pub async fn scope<F: std::future::Future>(job_id: i64, f: F) -> F::Output {
    if !enabled() {
        return f.await;
    }
    MARKS
        .scope(RefCell::new(Vec::new()), async move {
            take_early(job_id);
            mark("start");
            let out = f.await;
            mark("end");
            emit(job_id);
            out
        })
        .await
}

/// Whether this task records marks (inside [`scope`], with the log asking).
pub fn active() -> bool {
    MARKS.try_with(|_| ()).is_ok()
}

/// Marks made for a job before its handler's [`scope`] began (the supervisor's claim, start and
/// the grants' load), by job id; [`scope`] takes them, [`forget`] drops those of a job that
/// never reached one. Kept only while the log asks for the record.
static EARLY: Mutex<Vec<(i64, &'static str, u64)>> = Mutex::new(Vec::new());

/// Records `name` now for `job_id`, before its handler runs, when the log asks for the record.
pub fn early(job_id: i64, name: &'static str) {
    if enabled() {
        let ns = super::deadline::monotonic_ns();
        lock(&EARLY).push((job_id, name, ns));
    }
}

/// Drops the early marks of `job_id` (its task was reaped).
pub fn forget(job_id: i64) {
    if enabled() {
        lock(&EARLY).retain(|(j, _, _)| *j != job_id);
    }
}

fn take_early(job_id: i64) {
    let mine: Vec<(&'static str, u64)> = {
        let mut all = lock(&EARLY);
        let (mine, rest) = all.drain(..).partition(|(j, _, _)| *j == job_id);
        *all = rest;
        mine.into_iter().map(|(_, n, t)| (n, t)).collect::<Vec<_>>()
    };
    for (n, t) in mine {
        mark_at(n, t);
    }
}

/// Records `name` now (the first time only), when this task records marks.
pub fn mark(name: &str) {
    mark_at(name, super::deadline::monotonic_ns());
}

fn mark_at(name: &str, ns: u64) {
    let _ = MARKS.try_with(|m| {
        let mut m = m.borrow_mut();
        if !m.iter().any(|(n, _)| n == name) {
            m.push((name.to_string(), ns));
        }
    });
}

fn emit(job_id: i64) {
    let Ok(marks) = MARKS.try_with(|m| m.borrow().clone()) else {
        return;
    };
    let obj: serde_json::Map<String, serde_json::Value> = marks
        .into_iter()
        .map(|(n, t)| (n, serde_json::Value::from(t)))
        .collect();
    let marks = serde_json::Value::Object(obj).to_string();
    tracing::debug!(target: TARGET, job_id, marks = %marks, "timing");
}

/// A new, empty marks file for one run's helper under `dir` (`None` when this task records no
/// marks or the file cannot be made: the run goes on without the helper's marks).
pub fn new_file(dir: &Path, tag: i64) -> Option<std::path::PathBuf> {
    if !active() {
        return None;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(format!("timing-{}-{tag}.marks", std::process::id()));
    let _ = std::fs::remove_file(&p);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)
        .ok()
        .map(|_| p)
}

/// Adds the helper's marks from `path` to this task's, and removes the file.
pub fn merge_file(path: &Path) {
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines() {
            if let Some((name, ns)) = line.split_once(' ') {
                if let Ok(ns) = ns.trim().parse() {
                    mark_at(name, ns);
                }
            }
        }
    }
    let _ = std::fs::remove_file(path);
}

// ---- the helper's side (a single-threaded process: `exec.rs`)

/// The helper's marks file, once its spec named it; marks before are kept in `PENDING`.
static FILE: Mutex<Option<OwnedFd>> = Mutex::new(None);
static PENDING: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// In the helper: records `name` now, in the marks file once open, else until it is.
pub fn helper_mark(name: &'static str) {
    let ns = super::deadline::monotonic_ns();
    let f = lock(&FILE);
    match f.as_ref() {
        Some(fd) => write_line(fd, name, ns),
        None => lock(&PENDING).push((name, ns)),
    }
}

fn write_line(fd: &OwnedFd, name: &str, ns: u64) {
    let line = format!("{name} {ns}\n");
    // SAFETY: writes a valid buffer to a descriptor this process owns.
    unsafe { libc::write(fd.as_raw_fd(), line.as_ptr().cast(), line.len()) };
}

/// In the helper: opens the spec's marks file (append, close-on-exec) and writes the marks
/// made before. Without a file, the pending marks are dropped and no more are kept.
pub fn helper_open(path: Option<&Path>) {
    use std::os::unix::fs::OpenOptionsExt;
    let pending = std::mem::take(&mut *lock(&PENDING));
    let Some(p) = path else {
        return;
    };
    let Ok(f) = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(p)
    else {
        return;
    };
    let fd = OwnedFd::from(f);
    for (n, t) in pending {
        write_line(&fd, n, t);
    }
    *lock(&FILE) = Some(fd);
}

/// In the helper: closes the marks file (PID 1 once the command is forked: it marks nothing
/// after, and holds no descriptor the command could reach).
pub fn helper_close() {
    lock(&FILE).take();
    lock(&PENDING).clear();
}

/// Whether the helper keeps marks (a cold helper without a marks file: no).
pub fn helper_keeps() -> bool {
    lock(&FILE).is_some()
}
