//! A command's deadline, enforced outside the worker (issue 34): owns "a command dies at its
//! deadline even when the worker is stopped, and says so".
//!
//! The worker computes the deadline once, as an absolute time on `CLOCK_MONOTONIC`
//! ([`after`]), and hands it to what runs the command:
//! - the sandbox helper (`exec.rs`, cold or warm: the deadline travels in the spec) arms a
//!   `timerfd` at it ([`timer`]) and waits on it beside PID 1 of the command's PID namespace;
//!   when it fires first it SIGKILLs PID 1 (the kernel then kills every process of the
//!   namespace) and dies of [`REPORT_SIGNAL`] ([`report`]) — a death the helper never dies
//!   otherwise (a command's own exit or signal becomes the helper's exit *code*);
//! - a run without a helper of its own (unconfined, or the best-effort helper that found no
//!   namespaces and execs bash itself) gets a [`watchdog`]: a small process forked just before
//!   the exec, outside the command's process group, that SIGKILLs the group at the deadline and
//!   dies with the command (`PR_SET_PDEATHSIG`).
//!
//! Why `CLOCK_MONOTONIC` and not `CLOCK_BOOTTIME`: a timeout bounds the time a command runs,
//! and a suspended machine runs nothing (BOOTTIME would kill a command on resume for time it
//! never had); and it is the clock of `std::time::Instant`, so the executor's own backstop
//! (a tokio timer, slightly later) can never fire before the helper's timer. Neither clock
//! moves with the wall clock, so a clock step neither shortens nor extends a command.
//!
//! The worker reads the report after the fact ([`killed_at_deadline`]): the process it waited
//! for died of the deadline's signal, and the deadline has passed. A command that exited before
//! its deadline is reported by its real exit, however late the worker looks.

use std::time::Duration;

/// How the sandbox helper dies when it killed the command at its deadline.
pub const REPORT_SIGNAL: libc::c_int = libc::SIGALRM;

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The deadline `timeout` from now, on `CLOCK_MONOTONIC` (nanoseconds).
pub fn after(timeout: Duration) -> u64 {
    monotonic_ns().saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64)
}

/// A `timerfd` on `CLOCK_MONOTONIC` that becomes readable at `deadline_ns` (at once when it has
/// passed). Close-on-exec: the command never inherits it. No allocation: callable between fork
/// and exec.
pub fn timer(deadline_ns: u64) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscalls; the descriptor is owned by the returned OwnedFd.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // An absolute time of 0 disarms a timer: a deadline is never earlier than 1 ns.
    let at = deadline_ns.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (at / 1_000_000_000) as libc::time_t,
            tv_nsec: (at % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: a valid timerfd and itimerspec.
    let armed =
        unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    if armed != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
}

/// Whether the timer has fired (non-blocking check with `poll`).
pub fn fired(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// The helper's way to say "killed at the deadline": die of [`REPORT_SIGNAL`] (its default
/// action terminates; reset and unblocked first, whatever was inherited).
pub fn report() -> ! {
    // SAFETY: signal-disposition syscalls on this single-threaded helper, then exit.
    unsafe {
        libc::signal(REPORT_SIGNAL, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, REPORT_SIGNAL);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(REPORT_SIGNAL);
        libc::_exit(128 + REPORT_SIGNAL)
    }
}

/// Whether a run whose process died of `signal` was killed at its deadline: by the helper
/// (`sandboxed`: it dies of [`REPORT_SIGNAL`]) or by a [`watchdog`] / the kernel's teardown
/// (SIGKILL), and the deadline has passed (`now_ns` ≥ `deadline_ns`: a command cannot pass an
/// earlier death of its own for a timeout).
pub fn killed_at_deadline(
    signal: Option<i32>,
    sandboxed: bool,
    deadline_ns: u64,
    now_ns: u64,
) -> bool {
    let by_us = match signal {
        Some(s) if s == libc::SIGKILL => true,
        Some(s) if s == REPORT_SIGNAL => sandboxed,
        _ => false,
    };
    by_us && now_ns >= deadline_ns
}

/// Forks a watchdog for the process calling it, which is about to exec the command (between
/// fork and exec, or the best-effort helper before its exec): at `deadline_ns` the watchdog
/// SIGKILLs the caller's process group (the command's tree). The watchdog leaves that group
/// (the group's kill must not take it, nor the worker's clean-up wait for it), closes every
/// descriptor but its timer (it holds no pipe of the command open), and dies with the command
/// (`PR_SET_PDEATHSIG`). Async-signal-safe: no allocation, syscalls only.
pub fn watchdog(deadline_ns: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let t = timer(deadline_ns)?;
    // SAFETY: getters, then fork from a single-threaded process (a fork child before exec, or
    // the helper); the child only makes syscalls and never returns.
    unsafe {
        let group = libc::getpgrp();
        let parent = libc::getpid();
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                let tfd = t.as_raw_fd();
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                    || libc::getppid() != parent
                {
                    libc::_exit(0);
                }
                libc::setpgid(0, 0);
                // Every descriptor but the timer: above all the spawner's exec-status pipe (its
                // parent would wait for our end to close) and the command's output pipes.
                let below = tfd == 0
                    || libc::syscall(libc::SYS_close_range, 0u32, (tfd - 1) as u32, 0u32) == 0;
                let above =
                    libc::syscall(libc::SYS_close_range, (tfd + 1) as u32, u32::MAX, 0u32) == 0;
                if !(below && above) {
                    // Kernels before 5.9: one by one, up to the descriptor limit.
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    let n = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                        lim.rlim_cur.min(1 << 20) as libc::c_int
                    } else {
                        1024
                    };
                    for fd in (0..n).filter(|&fd| fd != tfd) {
                        libc::close(fd);
                    }
                }
                let mut buf = [0u8; 8];
                loop {
                    let n = libc::read(tfd, buf.as_mut_ptr().cast(), buf.len());
                    if n == 8 {
                        break;
                    }
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    libc::_exit(1);
                }
                if group > 1 {
                    libc::killpg(group, libc::SIGKILL);
                }
                libc::_exit(0)
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_fires_at_its_deadline_and_not_before() {
        let t = timer(after(Duration::from_millis(150))).unwrap();
        assert!(!fired(&t));
        std::thread::sleep(Duration::from_millis(250));
        assert!(fired(&t));
        // A deadline already past fires at once.
        assert!(fired(&timer(1).unwrap()));
    }

    #[test]
    fn only_a_death_of_the_deadline_signal_past_the_deadline_is_a_timeout() {
        let (d, before, past) = (1_000, 999, 1_000);
        assert!(killed_at_deadline(Some(libc::SIGALRM), true, d, past));
        assert!(killed_at_deadline(Some(libc::SIGKILL), false, d, past));
        // The command's own alarm, unconfined, is its own death.
        assert!(!killed_at_deadline(Some(libc::SIGALRM), false, d, past));
        assert!(!killed_at_deadline(Some(libc::SIGKILL), true, d, before));
        assert!(!killed_at_deadline(None, true, d, past));
        assert!(!killed_at_deadline(Some(libc::SIGTERM), true, d, past));
    }
}
