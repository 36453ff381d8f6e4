//! Warm sandbox helpers (issue 24): a confined command no longer waits for what does not
//! depend on it.
//!
//! A warm helper is `brainloop sandbox-exec` started ahead with a [`Prelude`] (its cgroup and
//! limits) instead of a spec: it execs, joins its cgroup (created here, ahead, with the limits
//! written), sets the limits, creates its user, mount, PID and network namespaces, maps the ids
//! and makes the mounts private — the costly part of a command's confinement (the network
//! namespace alone is about a third of the helper's CPU) — and blocks on stdin. When a strict
//! command is prepared, [`reserve`] hands one out (its cgroup becomes the job's), the executor
//! ([`take`]) writes the spec on its stdin, and from there the helper does exactly what a cold
//! one does: the spec's bind mounts and overlay, PID 1, the covers over the shared dirs, a fresh
//! /proc, and per command Landlock and seccomp before the exec. Replacements are started in the
//! background once a job's result has been committed ([`replenish`], from the result writer
//! `supervisor::finisher`, after each group holding a job that ended: not while the command runs
//! nor while its result is written), or at once when no helper is left ready; each time a command finds none ready, one more is kept ready (up to
//! [`MAX_POOL`]: under load).
//!
//! Single use: a warm helper runs one command and exits; its namespaces die with it and its
//! cgroup is removed with the job (`Prepared::finish`), so nothing of one command — a file in
//! its private tmp, a process, a descriptor, a cgroup setting — is there for the next
//! (`tests/warm_helpers.rs`). Best-effort specs (`[sandbox] required = false`) never use one.
//! An idle warm helper has `PR_SET_PDEATHSIG` from the worker like any helper and is killed at
//! shutdown ([`drain`]).
//!
//! On by default; `BRAINLOOP_SANDBOX_WARM=0` starts every helper cold, per command. (They were
//! opt-in for a while: `execute_bash::an_approved_job_interrupted_by_a_crash_asks_again_…`
//! twice found a `sleep 30` alive after the crash, in full runs that had another test suite
//! running `sleep 30` beside them — its `pgrep` looked machine-wide. It now looks for its own
//! command only, and first sees it running.)

use super::cgroup::JobCgroup;
use super::exec::{frame_prelude, Prelude};
use super::Limits;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::process::Child;

/// Warm helpers kept ready (started ahead of the commands that will use them), at first.
const POOL: usize = 2;
/// At most this many when commands found none ready (under load, issue 39).
const MAX_POOL: usize = 4;

struct Warm {
    id: u64,
    child: Child,
    /// The read end of its status pipe (`exec::Prelude::status_fd`).
    status: Option<OwnedFd>,
    cgroup: Option<JobCgroup>,
    limits: Limits,
    helper: PathBuf,
}

/// Ready helpers, and reserved ones (given to a prepared command, not yet to the executor).
static READY: Mutex<Vec<Warm>> = Mutex::new(Vec::new());
static RESERVED: Mutex<Vec<(u64, Child, Option<OwnedFd>)>> = Mutex::new(Vec::new());
static STARTING: AtomicUsize = AtomicUsize::new(0);
/// How many helpers are kept ready: [`POOL`], one more each time a command found none (up to
/// [`MAX_POOL`]).
static TARGET: AtomicUsize = AtomicUsize::new(POOL);
/// The helper binary and limits of the last reservation, for [`replenish`].
static LAST: Mutex<Option<(PathBuf, Limits)>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether warm helpers are used: yes unless `BRAINLOOP_SANDBOX_WARM=0` (see the module doc).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("BRAINLOOP_SANDBOX_WARM").map_or(true, |v| v != "0"))
}

/// A warm helper reserved for one command: its id (for the spec, [`take`], [`discard`]) and
/// the job cgroup it already joined.
#[derive(Debug)]
pub struct Reserved {
    pub id: u64,
    pub cgroup: Option<JobCgroup>,
}

/// Hands out a ready warm helper started with `helper` and `limits` (or `None`: the caller
/// starts a cold one), and starts replacements in the background (needs a tokio runtime; none
/// without one). Helpers that died while waiting are dropped.
pub fn reserve(helper: &Path, limits: &Limits) -> Option<Reserved> {
    if !enabled() {
        return None;
    }
    let got = {
        let mut ready = lock(&READY);
        let mut got = None;
        while let Some(i) = ready
            .iter()
            .position(|w| w.limits == *limits && w.helper == helper)
        {
            let mut w = ready.swap_remove(i);
            if matches!(w.child.try_wait(), Ok(None)) {
                got = Some(w);
                break;
            }
            w.discard();
        }
        // Helpers for other limits or binaries are of no use any more.
        let (keep, stale): (Vec<Warm>, Vec<Warm>) = std::mem::take(&mut *ready)
            .into_iter()
            .partition(|w| w.limits == *limits && w.helper == helper);
        *ready = keep;
        stale.into_iter().for_each(Warm::discard);
        (got, ready.len())
    };
    let (got, left) = got;
    *lock(&LAST) = Some((helper.to_path_buf(), limits.clone()));
    if got.is_none() {
        // Under load: keep more ready from now on.
        let _ = TARGET.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
            (t < MAX_POOL).then_some(t + 1)
        });
    }
    // Replacements start at once only when none is left ready; otherwise after this command's
    // job ([`replenish`]), so that starting one (exec, cgroup,
    // namespaces: a few ms of CPU) does not compete with the command on a small machine.
    if left == 0 {
        refill(helper, limits);
    }
    let w = got?;
    lock(&RESERVED).push((w.id, w.child, w.status));
    Some(Reserved {
        id: w.id,
        cgroup: w.cgroup,
    })
}

/// The reserved helper `id` and the read end of its status pipe, for the executor (once).
pub fn take(id: u64) -> Option<(Child, Option<OwnedFd>)> {
    let mut r = lock(&RESERVED);
    let i = r.iter().position(|(i, _, _)| *i == id)?;
    let (_, child, status) = r.swap_remove(i);
    Some((child, status))
}

/// Forgets the reserved helper `id` if the executor never took it: killed (`kill_on_drop`).
pub fn discard(id: u64) {
    drop(take(id));
}

/// Starts the helpers missing from the pool for the last reservation's binary and limits
/// (the result writer calls it once a job's result is committed; nothing to do when the pool is
/// full or no command ever reserved one).
pub fn replenish() {
    if !enabled() {
        return;
    }
    let last = lock(&LAST).clone();
    if let Some((helper, limits)) = last {
        refill(&helper, &limits);
    }
}

fn refill(helper: &Path, limits: &Limits) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let have = lock(&READY).len() + STARTING.load(Ordering::SeqCst);
    for _ in have..TARGET.load(Ordering::SeqCst) {
        STARTING.fetch_add(1, Ordering::SeqCst);
        let (helper, limits) = (helper.to_path_buf(), limits.clone());
        // Spawned from a runtime thread (which lives as long as the runtime), not a blocking
        // thread: PR_SET_PDEATHSIG fires when the thread that forked the helper exits.
        rt.spawn(async move {
            let started = start(&helper, &limits).await;
            match started {
                Ok(w) => lock(&READY).push(w),
                Err(e) => tracing::debug!(error = %e, "cannot start a warm sandbox helper"),
            }
            STARTING.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

impl Warm {
    /// Drops a helper that will not be used (killed on drop) and removes its cgroup.
    fn discard(self) {
        drop(self.child);
        if let Some(c) = &self.cgroup {
            c.remove();
        }
    }
}

/// The descriptor number a warm helper gets its status pipe's write end at.
const STATUS_FD: i32 = 3;

/// A pipe for a warm helper's status (both ends close-on-exec, the write end above the
/// standard descriptors and [`STATUS_FD`], so the child's `dup2` cannot clobber it).
fn status_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor (≥ 10) we own.
    let high = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if high < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created, owned here.
    Ok((r, unsafe { OwnedFd::from_raw_fd(high) }))
}

async fn start(helper: &Path, limits: &Limits) -> std::io::Result<Warm> {
    use tokio::io::AsyncWriteExt;
    let id = NEXT.fetch_add(1, Ordering::SeqCst);
    // Filesystem work off the runtime threads; only the spawn below stays on one (PDEATHSIG).
    let (name, lim) = (
        format!("brainloop-{}-warm{id}", std::process::id()),
        limits.clone(),
    );
    let cgroup = tokio::task::spawn_blocking(move || JobCgroup::create(&name, &lim))
        .await
        .map_err(std::io::Error::other)?;
    let (status_r, status_w) = status_pipe()?;
    let prelude = Prelude {
        cgroup_procs: cgroup
            .as_ref()
            .map(JobCgroup::procs_files)
            .unwrap_or_default(),
        limits: limits.clone(),
        status_fd: Some(STATUS_FD),
    };
    let started = async {
        let mut cmd = super::process::helper_command(helper);
        let w = status_w.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; it runs in the child between fork and exec, and
        // gives the child the pipe's write end at STATUS_FD without close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(w, STATUS_FD) != STATUS_FD {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = cmd.spawn();
        drop(status_w);
        let mut child = spawned?;
        let stdin = child
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        stdin.write_all(&frame_prelude(&prelude)?).await?;
        Ok::<_, std::io::Error>(child)
    }
    .await;
    match started {
        Ok(child) => Ok(Warm {
            id,
            child,
            status: Some(status_r),
            cgroup,
            limits: limits.clone(),
            helper: helper.to_path_buf(),
        }),
        Err(e) => {
            if let Some(c) = &cgroup {
                c.remove();
            }
            Err(e)
        }
    }
}

/// Kills the idle and reserved helpers and removes their cgroups (at shutdown).
pub async fn drain() {
    let ready: Vec<Warm> = std::mem::take(&mut *lock(&READY));
    let reserved: Vec<(u64, Child, Option<OwnedFd>)> = std::mem::take(&mut *lock(&RESERVED));
    let mut cgroups = Vec::new();
    let mut children = Vec::new();
    for w in ready {
        children.push(w.child);
        cgroups.extend(w.cgroup);
    }
    children.extend(reserved.into_iter().map(|(_, c, _)| c));
    for mut c in children {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    for c in cgroups {
        c.remove();
    }
}
