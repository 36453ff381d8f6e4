//! `brainloop sandbox-exec` (the spec as JSON on stdin): the single-threaded helper that
//! confines one command.
//!
//! ```text
//! helper (in the worker's process group, PDEATHSIG from the worker)
//!   join the job's cgroup, set rlimits
//!   unshare(user | mount | pid | net); map our uid/gid; make mounts private
//!   arm a timerfd at the spec's deadline (CLOCK_MONOTONIC, `deadline.rs`)
//!   fork ─▶ init (PID 1 of the new PID namespace, PDEATHSIG from the helper)
//!            egress (network sets): lo up, 127.0.0.1:PORT, fork the forwarder (`forward.rs`)
//!            [unshare(mount): overlay or egress]; cover /tmp, /var/tmp, /run, /dev/shm, the runtime dir with an
//!            empty tmpfs and bind back the spec's paths beneath them (`Spec.hide`)
//!            mount a fresh /proc (only the sandbox's processes are visible)
//!            fork ─▶ command: chdir, no_new_privs, Landlock, seccomp, exec /bin/bash -c
//!            reap everything; when the command exits, exit with its status — the kernel then
//!            kills whatever is left in the namespace (a `setsid` double-fork included)
//! ```
//! The helper waits for PID 1 and for its deadline timer together: when the timer fires first,
//! it SIGKILLs PID 1 (the whole namespace dies) and dies of SIGALRM, the worker's sign that the
//! command was killed at its deadline — all of it without the worker, which may be stopped.
//!
//! A warm helper (`warm.rs`, [`warm_main`]) is started with a [`Prelude`] instead of a spec and
//! does the first three steps (cgroup, rlimits, namespaces + id maps + private mounts) and
//! compiles the seccomp programs before its spec arrives; then the same path as above from the
//! bind mounts on. Once PID 1 is reaped it reports the exit code on its status pipe with its
//! output closed ([`report_status`]), so the worker records the result while the helper's exit
//! tears the emptied namespaces down (issue 39).
//!
//! PID 1 unshares a mount namespace of its own for the covers only when someone outside the
//! command needs the view without them (the overlay's upper layer the helper measures, the
//! proxy socket the forwarder reaches); otherwise the covers and /proc go in the helper's, which
//! nothing looks at again and which dies with it.
//!
//! Any setup failure exits with [`SETUP_FAILED`] and a message prefixed by [`ERROR_PREFIX`]:
//! nothing of the command ran.
//!
//! No privilege bits: the workspace (and the private tmp) are bind-mounted over themselves
//! `nosuid,nodev` in the command's mount namespace (`Spec.nosuid`; the overlay is mounted
//! `nosuid,nodev` too), the seccomp filter refuses to create or chmod setuid/setgid files, and
//! `CAP_SETFCAP` is dropped from the bounding set before exec (no file capabilities).
//!
//! Host sockets (issue 19): Landlock does not govern `connect` on a pathname socket, so the
//! shared dirs where daemons listen are covered (above) in every set, and the seccomp filter
//! refuses `socket(2)` outside the spec's socket families (see `seccomp.rs`).
//!
//! Bounded overlays: for an overlay run with caps (`OverlaySpec.max_bytes` / `max_entries`),
//! RLIMIT_FSIZE is at most the byte cap + 1, and the helper (the parent of PID 1) measures the
//! upper layer every [`OVERLAY_POLL_MS`] while the command runs (waiting on a pidfd, so an
//! exit is seen at once) and once after it exits; over a cap it kills PID 1 (the whole PID
//! namespace dies), records the cap in `over_cap_file` and exits [`OVER_CAP`].

use super::{Limits, OverlaySpec, Spec, ERROR_PREFIX, OVERLAY_POLL_MS, OVER_CAP, SETUP_FAILED};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// `linux/capability.h` (not exported by the libc crate).
const CAP_SETFCAP: libc::c_ulong = 31;

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("{ERROR_PREFIX} {msg}");
    // SAFETY: _exit is always safe; no destructors must run in a forked child.
    unsafe { libc::_exit(SETUP_FAILED) }
}

fn status_code(ws: WaitStatus) -> Option<i32> {
    match ws {
        WaitStatus::Exited(_, c) => Some(c),
        WaitStatus::Signaled(_, s, _) => Some(128 + s as i32),
        _ => None,
    }
}

fn rlimits(spec: &Spec) -> Result<(), String> {
    base_rlimits(&spec.limits, !spec.cgroup_procs.is_empty())?;
    overlay_fsize(spec)
}

/// The limits that do not depend on the command (a warm helper sets them before its spec).
fn base_rlimits(l: &Limits, in_cgroup: bool) -> Result<(), String> {
    let set = |r, v: u64| setrlimit(r, v, v).map_err(|e| format!("setrlimit {r:?}: {e}"));
    set(Resource::RLIMIT_NOFILE, l.max_open_files)?;
    set(Resource::RLIMIT_FSIZE, l.max_file_size_bytes)?;
    set(Resource::RLIMIT_CPU, l.max_cpu_seconds)?;
    set(Resource::RLIMIT_CORE, 0)?;
    if !in_cgroup {
        if let Some(n) = l.rlimit_nproc_fallback.filter(|&n| n > 0) {
            set(Resource::RLIMIT_NPROC, n)?;
        }
        if let Some(n) = l.rlimit_as_fallback.filter(|&n| n > 0) {
            set(Resource::RLIMIT_AS, n)?;
        }
    }
    Ok(())
}

/// An overlay run's files stay within its byte cap (+ 1, so a file stopped by the limit is
/// over the cap by itself). Only ever lowers RLIMIT_FSIZE: allowed inside the user namespace.
fn overlay_fsize(spec: &Spec) -> Result<(), String> {
    if let Some(cap) = spec.overlay.as_ref().and_then(|o| o.max_bytes) {
        let v = spec.limits.max_file_size_bytes.min(cap.saturating_add(1));
        setrlimit(Resource::RLIMIT_FSIZE, v, v)
            .map_err(|e| format!("setrlimit RLIMIT_FSIZE: {e}"))?;
    }
    Ok(())
}

fn write(path: &str, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))
}

fn join_cgroups(procs: &[std::path::PathBuf]) {
    for f in procs {
        if let Err(e) = std::fs::write(f, "0") {
            fail(format!("cannot join cgroup {}: {e}", f.display()));
        }
    }
}

/// Runs the helper; returns its exit code (the command's, or SETUP_FAILED).
pub fn main(spec: &Spec) -> i32 {
    use super::marks::helper_mark as mark;
    super::marks::helper_open(spec.marks.as_deref());
    mark("h_spec");
    join_cgroups(&spec.cgroup_procs);
    if let Err(e) = rlimits(spec) {
        fail(e);
    }
    mark("h_cgroup");
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    // Every set gets its own network namespace; a network set's only way out of it is the
    // egress proxy (`forward.rs`), and a network set without one is refused.
    if spec.network && spec.egress.is_none() && !spec.best_effort {
        fail("a network set runs only through the egress proxy, and the spec has none");
    }
    if !spec.network || spec.egress.is_some() {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if let Err(e) = unshare(flags) {
        if spec.best_effort && spec.overlay.is_none() {
            // `required = false`: no namespaces here; still Landlock, seccomp and rlimits.
            eprintln!(
                "{ERROR_PREFIX} warning: unshare: {e}; running without namespaces (best effort)"
            );
            // No namespace of its own: no forwarder, and Landlock must not open the proxy port
            // on the host's network.
            let mut bare = spec.clone();
            bare.egress = None;
            // No PID 1 of its own to outlive the command: the deadline is a watchdog's.
            if let Some(d) = spec.deadline_ns {
                if let Err(e) = super::deadline::watchdog(d) {
                    fail(format!("cannot start the command's deadline watchdog: {e}"));
                }
            }
            command(&bare);
        }
        fail(format!("unshare: {e} (user namespaces unavailable?)"));
    }
    mark("h_unshare");
    map_ids_and_privatise(uid, gid);
    mark("h_maps");
    confine(spec)
}

/// Inside the fresh user and mount namespaces: our uid/gid mapped to themselves, every mount
/// private (nothing mounted here propagates back).
fn map_ids_and_privatise(uid: nix::unistd::Uid, gid: nix::unistd::Gid) {
    let maps = write("/proc/self/setgroups", "deny")
        .and_then(|_| write("/proc/self/uid_map", &format!("{uid} {uid} 1")))
        .and_then(|_| write("/proc/self/gid_map", &format!("{gid} {gid} 1")));
    if let Err(e) = maps {
        fail(e);
    }
    if let Err(e) = mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    ) {
        fail(format!("make mounts private: {e}"));
    }
}

/// The rest, once the namespaces exist: the spec's mounts, PID 1, the command.
fn confine(spec: &Spec) -> i32 {
    for p in &spec.nosuid {
        if let Err(e) = bind_nosuid(p) {
            fail(e);
        }
    }
    if let Some(o) = &spec.overlay {
        if let Err(e) = mount_overlay(o) {
            fail(e);
        }
    }
    super::marks::helper_mark("h_mounts");
    // The deadline is armed before anything of the command exists (absolute: a warm helper
    // that got its spec late has the same deadline as a cold one); no timer, no command.
    let deadline = match spec.deadline_ns.map(super::deadline::timer).transpose() {
        Ok(t) => t,
        Err(e) => fail(format!("cannot arm the command's deadline (timerfd): {e}")),
    };
    // SAFETY: the helper is single-threaded (it never starts a runtime), so fork is sound.
    match unsafe { fork() } {
        Err(e) => fail(format!("fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(deadline);
            status_close();
            init(spec)
        }
        Ok(ForkResult::Parent { child }) => {
            let code = wait_init(
                child,
                spec.overlay
                    .as_ref()
                    .filter(|o| o.max_bytes.is_some() || o.max_entries.is_some()),
                deadline,
            );
            report_status(code);
            code
        }
    }
}

/// Which cap the overlay's upper layer exceeds now, as recorded in `over_cap_file`.
fn over_cap(o: &OverlaySpec) -> Option<String> {
    let (mb, me) = (
        o.max_bytes.unwrap_or(u64::MAX),
        o.max_entries.unwrap_or(u64::MAX),
    );
    match crate::fs::beneath::usage(&o.upper, mb, me) {
        Ok(u) if u.unmeasured => Some("unmeasured".into()),
        Ok(u) if u.bytes > mb => Some(format!("bytes {mb} {}", u.bytes)),
        Ok(u) if u.entries > me => Some(format!("entries {me} {}", u.entries)),
        Ok(_) => None,
        Err(_) => Some("unmeasured".into()),
    }
}

fn record_over_cap(o: &OverlaySpec, what: &str) {
    if let Some(f) = &o.over_cap_file {
        let _ = std::fs::write(f, what);
    }
    eprintln!("{ERROR_PREFIX} the overlay run went over its cap ({what}); stopped");
}

/// Waits for PID 1 of the sandbox; with overlay caps, measures the upper layer meanwhile; with
/// a deadline (`deadline.rs`), kills PID 1 when its timer fires first and dies of the deadline's
/// signal, which is how the worker learns it, however late it looks.
fn wait_init(child: Pid, caps: Option<&OverlaySpec>, deadline: Option<OwnedFd>) -> i32 {
    // A pidfd turns "sleep 100 ms" into "until the child exits or 100 ms pass", and lets the
    // exit and the deadline be waited for together.
    let polled = caps.is_some() || deadline.is_some();
    // SAFETY: plain syscall with a pid we own; the result is a new descriptor or -1.
    let pidfd = if polled {
        unsafe { libc::syscall(libc::SYS_pidfd_open, child.as_raw(), 0) as i32 }
    } else {
        -1
    };
    loop {
        let flag = polled.then_some(WaitPidFlag::WNOHANG);
        match waitpid(child, flag) {
            Ok(WaitStatus::StillAlive) => {
                if let Some(t) = &deadline {
                    if super::deadline::fired(t) {
                        // PID 1 dies, and with it every process of the namespace.
                        let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                        let _ = waitpid(child, None);
                        super::deadline::report();
                    }
                }
                if let Some(o) = caps {
                    if let Some(what) = over_cap(o) {
                        let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                        let _ = waitpid(child, None);
                        record_over_cap(o, &what);
                        return OVER_CAP;
                    }
                }
                // Until PID 1 exits or the deadline comes; every 100 ms with caps (to
                // measure), or without a pidfd (kernels before 5.3).
                let interval = if caps.is_some() || pidfd < 0 {
                    OVERLAY_POLL_MS as i32
                } else {
                    -1
                };
                let mut fds = [
                    libc::pollfd {
                        fd: pidfd,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: deadline.as_ref().map_or(-1, |t| t.as_raw_fd()),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // SAFETY: two valid pollfds (a negative fd is ignored by poll).
                unsafe { libc::poll(fds.as_mut_ptr(), 2, interval) };
            }
            Ok(ws) => {
                if let Some(c) = status_code(ws) {
                    super::marks::helper_mark("h_reaped");
                    // What is kept is bounded exactly: one last measurement after the exit.
                    if let Some(o) = caps {
                        if let Some(what) = over_cap(o) {
                            record_over_cap(o, &what);
                            return OVER_CAP;
                        }
                    }
                    return c;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("{ERROR_PREFIX} waitpid: {e}");
                return SETUP_FAILED;
            }
        }
    }
}

/// Bind-mounts `p` over itself `nosuid,nodev` (keeping the flags the kernel locks in a user
/// namespace: read-only, noexec, atime), in this mount namespace only.
fn bind_nosuid(p: &Path) -> Result<(), String> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    mount(
        Some(p),
        p,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind {}: {e}", p.display()))?;
    let st = statvfs(p).map_err(|e| format!("statvfs {}: {e}", p.display()))?;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for (f, m) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if st.flags().contains(f) {
            flags |= m;
        }
    }
    mount(None::<&str>, p, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("remount {} nosuid: {e}", p.display()))
}

/// The directories of `spec.hide` to cover, canonical, and for each the paths of the spec
/// beneath it to bind back. A hidden dir that is a symlink (`/var/run`), missing, nested in
/// another, or at or beneath a path the spec needs whole (a workspace *is* `/tmp`) is skipped.
pub fn hide_plan(spec: &Spec) -> Vec<(std::path::PathBuf, Vec<std::path::PathBuf>)> {
    use std::path::PathBuf;
    let granted: Vec<PathBuf> = spec
        .read
        .iter()
        .chain(&spec.write)
        .chain(spec.tmp_dir.iter())
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    // The working dir is bound back when beneath a hidden dir, but `/` (the working dir of a
    // set without workspace or tmp) does not keep anything from being hidden.
    let needed: Vec<PathBuf> = granted
        .iter()
        .cloned()
        .chain(
            spec.devices
                .iter()
                .chain(std::iter::once(&spec.workdir))
                .filter_map(|p| p.canonicalize().ok()),
        )
        .collect();
    let mut dirs: Vec<PathBuf> = spec
        .hide
        .iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| !granted.iter().any(|n| d.starts_with(n)))
        .collect();
    dirs.sort();
    dirs.dedup();
    let outer: Vec<PathBuf> = dirs
        .iter()
        .filter(|d| !dirs.iter().any(|o| o != *d && d.starts_with(o)))
        .cloned()
        .collect();
    outer
        .into_iter()
        .map(|d| {
            let mut keep: Vec<PathBuf> = needed
                .iter()
                .filter(|n| n.starts_with(&d))
                .cloned()
                .collect();
            keep.sort();
            keep.dedup();
            let top: Vec<PathBuf> = keep
                .iter()
                .filter(|k| !keep.iter().any(|o| o != *k && k.starts_with(o)))
                .cloned()
                .collect();
            (d, top)
        })
        .collect()
}

/// Covers the shared directories (`/tmp`, `/run`, …) with an empty tmpfs in this mount
/// namespace, then binds back the spec's own paths beneath them (opened before the cover, bound
/// from `/proc/self/fd/N`, so the overlay and `nosuid` mounts already on them come along).
/// Host sockets there are then out of reach: `connect` needs the path, and the path is gone.
fn hide_shared_dirs(spec: &Spec) -> Result<(), String> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    for (dir, keep) in hide_plan(spec) {
        let fds = keep
            .iter()
            .map(|k| {
                open(k, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                    .map(|fd| (k, fd))
                    .map_err(|e| format!("open {}: {e}", k.display()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        mount(
            Some("tmpfs"),
            &dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0755,size=64k"),
        )
        .map_err(|e| format!("cover {}: {e}", dir.display()))?;
        for (k, fd) in &fds {
            let is_dir = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                .map(|m| m.is_dir())
                .unwrap_or(true);
            let made = if is_dir {
                std::fs::create_dir_all(k)
            } else {
                k.parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|_| std::fs::write(k, b""))
            };
            made.map_err(|e| format!("mount point {}: {e}", k.display()))?;
            mount(
                Some(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str()),
                k.as_path(),
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| format!("bind back {}: {e}", k.display()))?;
        }
    }
    Ok(())
}

/// Mounts the copy-on-write view of the workspace over the workspace path (this mount
/// namespace only). `userxattr` keeps overlay metadata (opaque dirs) in `user.overlay.*`, which
/// an unprivileged mounter may write and the worker may read.
///
/// The upper and work dirs are named relative to their common parent (the helper's cwd while
/// it mounts): the options shown in `/proc/self/mountinfo` then hold `upperdir=upper`, not a
/// path revealing the data dir.
fn mount_overlay(o: &super::OverlaySpec) -> Result<(), String> {
    let (upper, work) = match (o.upper.parent(), o.work.parent()) {
        (Some(a), Some(b)) if a == b => {
            std::env::set_current_dir(a).map_err(|e| format!("overlay: chdir: {e}"))?;
            (file_name(&o.upper), file_name(&o.work))
        }
        _ => (o.upper.clone(), o.work.clone()),
    };
    let mounted = mount_overlay_at(o, &upper, &work);
    std::env::set_current_dir("/").map_err(|e| format!("overlay: chdir /: {e}"))?;
    mounted
}

fn file_name(p: &Path) -> std::path::PathBuf {
    p.file_name().map_or_else(|| p.to_path_buf(), Into::into)
}

fn mount_overlay_at(o: &super::OverlaySpec, upper: &Path, work: &Path) -> Result<(), String> {
    let opts = |extra: &str| {
        format!(
            "lowerdir={},upperdir={},workdir={}{extra}",
            o.workspace.display(),
            upper.display(),
            work.display()
        )
    };
    for p in [&o.workspace, &o.upper, &o.work] {
        let s = p.display().to_string();
        if s.contains(',') || s.contains(':') || s.contains('\\') {
            return Err(format!("overlay: unsupported character in path {s}"));
        }
    }
    let attempt = |data: String| {
        mount(
            Some("overlay"),
            &o.workspace,
            Some("overlay"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
    };
    attempt(opts(",userxattr"))
        .or_else(|_| attempt(opts("")))
        .map_err(|e| format!("mount overlay on {}: {e}", o.workspace.display()))
}

/// PID 1 of the sandbox.
fn init(spec: &Spec) -> ! {
    use super::marks::helper_mark as mark;
    mark("h_init");
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        fail(format!("pdeathsig: {e}"));
    }
    // The forwarder to the egress proxy, forked while this mount view still shows its socket.
    if let Some(e) = &spec.egress {
        if let Err(e) = super::forward::start(e) {
            fail(e);
        }
    }
    mark("h_forward");
    // The covers over /tmp, /run… go in a mount namespace of their own when someone outside
    // the command needs the view without them: the helper (our parent) keeps seeing the
    // overlay's upper layer under the data dir, which it measures, and the egress forwarder
    // (forked above) the proxy's socket. Otherwise the helper's own namespace, which it
    // never looks at again and which dies with it, takes them (issue 39: one copy of the
    // mount table and its teardown fewer per command).
    if spec.overlay.is_some() || spec.egress.is_some() {
        if let Err(e) = unshare(CloneFlags::CLONE_NEWNS) {
            fail(format!("unshare mount namespace: {e}"));
        }
    }
    if let Err(e) = hide_shared_dirs(spec) {
        fail(e);
    }
    mark("h_hidden");
    let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if let Err(e) = mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        proc_flags,
        None::<&str>,
    ) {
        fail(format!("mount /proc: {e}"));
    }
    mark("h_proc");
    // SAFETY: still single-threaded.
    let cmd = match unsafe { fork() } {
        Err(e) => fail(format!("fork: {e}")),
        Ok(ForkResult::Child) => command(spec),
        Ok(ForkResult::Parent { child }) => child,
    };
    // PID 1 marks nothing more and keeps no descriptor of the worker's.
    super::marks::helper_close();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::__WALL)) {
            Ok(ws) => {
                if ws.pid() == Some(cmd) {
                    if let Some(c) = status_code(ws) {
                        // SAFETY: exiting PID 1 kills the rest of the namespace, as intended.
                        unsafe { libc::_exit(c) }
                    }
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => unsafe { libc::_exit(SETUP_FAILED) },
        }
    }
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// The command itself: confine, then exec bash.
fn command(spec: &Spec) -> ! {
    use super::marks::helper_mark as mark;
    mark("h_cmd");
    if let Err(e) = std::env::set_current_dir(&spec.workdir) {
        fail(format!("chdir {}: {e}", spec.workdir.display()));
    }
    // No file capabilities (`security.capability`, as potent as a setuid bit): without
    // CAP_SETFCAP in the bounding set, no process of the command can write one.
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, CAP_SETFCAP, 0, 0, 0) } != 0 {
        fail(format!(
            "drop CAP_SETFCAP: {}",
            std::io::Error::last_os_error()
        ));
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        fail(format!("no_new_privs: {e}"));
    }
    // Graded confinement (issue 20): Landlock at the spec's ABI; refused when a guarantee of
    // the set cannot be met, unless best effort (`required = false`) skips what fails.
    let abi = super::landlock::helper_abi(spec);
    let mechs = super::guarantees::Mechanisms {
        // Strict mode got here through the namespaces; best effort never fails on the check.
        namespaces: true,
        landlock_abi: abi,
        seccomp: super::seccomp::available(),
    };
    if !spec.set.profile().confined {
        fail(format!("the {} set has no confinement", spec.set));
    }
    if let Some(why) = super::guarantees::unmet(spec.set, &mechs) {
        if !spec.best_effort {
            fail(why);
        }
    }
    let strict = |e: String| {
        if !spec.best_effort {
            fail(e)
        }
    };
    mark("h_landlock0");
    if abi >= 1 {
        match super::landlock::apply(spec, abi) {
            Ok(true) => {}
            Ok(false) => strict(format!("Landlock ABI {abi} is not fully enforced")),
            Err(e) => strict(format!("landlock: {e}")),
        }
    }
    if abi < 3 {
        if let Err(e) = super::landlock::truncate_guard() {
            strict(format!("seccomp truncate guard: {e}"));
        }
    }
    mark("h_landlock");
    if let Err(e) = super::seccomp::apply(&super::socket_families(spec)) {
        strict(format!("seccomp: {e}"));
    }
    if spec.overlay.is_some() {
        if let Err(e) = super::seccomp::apply_no_hard_links() {
            strict(format!("seccomp (overlay links): {e}"));
        }
    }
    mark("h_seccomp");
    let argv = [cstring("bash"), cstring("-c"), cstring(&spec.command)];
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}")))
        .collect();
    mark("h_exec");
    let e = nix::unistd::execve(&cstring("/bin/bash"), &argv, &envp).err();
    fail(format!(
        "exec /bin/bash: {}",
        e.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Parses the spec argument and runs; for `cli`.
/// The helper's entry point: the spec arrives on stdin (never in argv, which every process of
/// the sandbox could read in `/proc/1/cmdline`); stdin is then replaced by `/dev/null`, so the
/// command inherits no way back to it, and no descriptor but 0, 1, 2 survives the exec.
/// A warm helper (`warm.rs`) first gets a [`Prelude`] frame, prepares what does not depend on
/// the command, then waits for its spec.
pub fn run_from_stdin() -> i32 {
    // Descriptors the worker inherited from whoever started it (and passed on) never reach
    // the command: everything above stderr closes at its exec.
    // SAFETY: close_range only flags descriptors of this process; no memory is involved.
    let flagged = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if flagged != 0 {
        eprintln!(
            "{ERROR_PREFIX} close_range: {}",
            std::io::Error::last_os_error()
        );
        return SETUP_FAILED;
    }
    let first = read_frame().and_then(|(prelude, json)| {
        if prelude {
            serde_json::from_slice::<Prelude>(&json)
                .map(Err)
                .map_err(|e| std::io::Error::other(format!("invalid prelude: {e}")))
        } else {
            parse_spec(&json).map(Ok)
        }
    });
    match first {
        Ok(Ok(spec)) => main(&spec),
        Ok(Err(prelude)) => warm_main(&prelude),
        Err(e) => {
            eprintln!("{ERROR_PREFIX} cannot read the spec from stdin: {e}");
            SETUP_FAILED
        }
    }
}

/// What a warm helper is told when the worker starts it, before any command exists: the
/// cgroup it joins and the limits it sets. Its spec (same framing as a cold helper's) follows
/// on stdin when a command is given to it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prelude {
    pub cgroup_procs: Vec<std::path::PathBuf>,
    pub limits: Limits,
    /// The descriptor (a pipe's write end) on which the helper reports its exit code once its
    /// PID 1 has been reaped and its output closed, before its own exit tears the emptied
    /// namespaces down ([`report_status`], issue 39). `None`: the worker waits for the exit.
    #[serde(default)]
    pub status_fd: Option<i32>,
}

/// The warm helper's status descriptor ([`Prelude::status_fd`]), or -1.
static STATUS_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Closes the status descriptor in this process (PID 1, so no process of the command has it).
fn status_close() {
    let fd = STATUS_FD.swap(-1, std::sync::atomic::Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: closes a descriptor this process owns and no one else uses.
        unsafe { libc::close(fd) };
    }
}

/// Reports `code` (what this helper is about to exit with) on the status descriptor, once
/// PID 1 is reaped: every process of the command is gone then (the PID namespace died with
/// its PID 1), so the helper first points its stdout and stderr at `/dev/null` — the worker
/// sees the end of the output — then writes the code. Only then does it exit, tearing down
/// its emptied user, mount and network namespaces while the worker already records the
/// result. Without a status descriptor (a cold helper) nothing is reported and the worker
/// waits for the exit, as it does when this fails.
fn report_status(code: i32) {
    let fd = STATUS_FD.swap(-1, std::sync::atomic::Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    // SAFETY: plain descriptor calls on descriptors this process owns.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 && libc::dup2(null, 1) == 1 && libc::dup2(null, 2) == 2 {
            let b = code.to_le_bytes();
            libc::write(fd, b.as_ptr().cast(), b.len());
        }
        if null >= 0 {
            libc::close(null);
        }
        libc::close(fd);
    }
}

/// Marks a prelude frame in the length word (a spec is never that long).
const PRELUDE_FLAG: u64 = 1 << 63;

/// The prelude frame on a warm helper's stdin.
pub fn frame_prelude(p: &Prelude) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(p).map_err(std::io::Error::other)?;
    let mut out = (json.len() as u64 | PRELUDE_FLAG).to_le_bytes().to_vec();
    out.extend(json);
    Ok(out)
}

/// A warm helper: everything that does not depend on the command — the cgroup, the limits,
/// the user, mount, PID and network namespaces, the id maps, private mounts — done ahead, in
/// the same order as [`main`]; then it blocks on stdin for its spec and confines exactly as a
/// cold helper does from there (mounts, PID 1, Landlock, seccomp per command). Single use: it
/// runs one command and exits, so nothing of one command survives for the next.
fn warm_main(p: &Prelude) -> i32 {
    use super::marks::helper_mark as mark;
    mark("h_start");
    if let Some(fd) = p.status_fd {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if fd > 2 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            STATUS_FD.store(fd, std::sync::atomic::Ordering::SeqCst);
        }
    }
    join_cgroups(&p.cgroup_procs);
    if let Err(e) = base_rlimits(&p.limits, !p.cgroup_procs.is_empty()) {
        fail(e);
    }
    mark("h_cgroup");
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    // A strict spec always gets its own network namespace (see `main`); best-effort specs
    // never go to a warm helper.
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET;
    if let Err(e) = unshare(flags) {
        fail(format!("unshare: {e} (user namespaces unavailable?)"));
    }
    mark("h_unshare");
    map_ids_and_privatise(uid, gid);
    mark("h_maps");
    // The seccomp programs, compiled before the command exists (installed per command).
    super::seccomp::prepare_all();
    super::landlock::prepare_ahead();
    mark("h_bpf");
    let spec = match read_frame().and_then(|(prelude, json)| {
        if prelude {
            Err(std::io::Error::other("a second prelude"))
        } else {
            parse_spec(&json)
        }
    }) {
        Ok(s) => s,
        Err(e) => fail(format!("cannot read the spec from stdin: {e}")),
    };
    super::marks::helper_open(spec.marks.as_deref());
    mark("h_spec");
    // What was prepared ahead must be what the spec asks for; anything else is refused.
    if spec.best_effort {
        fail("a best-effort spec reached a warm helper");
    }
    if spec.cgroup_procs != p.cgroup_procs || spec.limits != p.limits {
        fail("the spec's cgroup or limits differ from the warm helper's");
    }
    if spec.network && spec.egress.is_none() {
        fail("a network set runs only through the egress proxy, and the spec has none");
    }
    if let Err(e) = overlay_fsize(&spec) {
        fail(e);
    }
    confine(&spec)
}

/// A spec is at most this large (the command and its environment are bounded far below).
const MAX_SPEC_BYTES: u64 = 16 << 20;

/// What the worker writes on the helper's stdin: the spec's length (8 bytes, little-endian),
/// the spec as JSON, then — when `input` is given — the command's own stdin.
pub fn frame_spec(spec: &Spec, input: Option<Vec<u8>>) -> std::io::Result<Vec<u8>> {
    let mut spec = spec.clone();
    spec.stdin = input.is_some();
    let json = serde_json::to_vec(&spec).map_err(std::io::Error::other)?;
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    out.extend(input.unwrap_or_default());
    Ok(out)
}

/// Reads one frame from fd 0 without reading past it (unbuffered), so what follows stays for
/// the command when the spec says so. Returns (is a prelude, JSON).
fn read_frame() -> std::io::Result<(bool, Vec<u8>)> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    // SAFETY: fd 0 stays open (ManuallyDrop): this only reads from it.
    let mut fd0 = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let mut len = [0u8; 8];
    fd0.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    let prelude = len & PRELUDE_FLAG != 0;
    let len = len & !PRELUDE_FLAG;
    if len > MAX_SPEC_BYTES {
        return Err(std::io::Error::other(format!("spec of {len} bytes")));
    }
    let mut json = vec![0u8; len as usize];
    fd0.read_exact(&mut json)?;
    Ok((prelude, json))
}

/// Parses a spec; unless it says the command gets stdin, stdin becomes `/dev/null`.
fn parse_spec(json: &[u8]) -> std::io::Result<Spec> {
    let spec: Spec = serde_json::from_slice(json)
        .map_err(|e| std::io::Error::other(format!("invalid spec: {e}")))?;
    if !spec.stdin {
        let null = std::fs::File::open("/dev/null")?;
        nix::unistd::dup2_stdin(&null).map_err(std::io::Error::from)?;
    }
    Ok(spec)
}

/// Whether `p` is a usable helper binary.
pub fn helper_exists(p: &Path) -> bool {
    p.is_file()
}
