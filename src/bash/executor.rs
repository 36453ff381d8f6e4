//! Runs one shell command as its own process tree and collects its output safely.
//!
//! - `/bin/bash -c COMMAND` in a new process group (so the whole tree can be signalled), with
//!   `PR_SET_PDEATHSIG` so it dies with the worker, stdin from /dev/null;
//! - environment: only an allowlist (DESIGN §5.10) — a fixed `PATH`, `HOME`, `USER`, `LANG`,
//!   `LC_ALL`, `TERM`; nothing else of the worker's environment (API keys, AWS_*, tokens) passes;
//! - timeout (120 s default and maximum): a deadline on the monotonic clock, enforced outside
//!   the worker (`sandbox::deadline`: the helper's timerfd, or a watchdog process for a run
//!   without a helper), so a stopped worker cannot stretch it; the executor's own timer is a
//!   backstop [`BACKSTOP`] later (SIGTERM to the group, then SIGKILL after a grace), and never
//!   overrides an exit that already happened (checked with `try_wait` first). Cancellation
//!   (shutdown) stops the group the same way; output read so far is kept;
//! - when bash exits, whatever it left in its group is killed, so a background grandchild holding
//!   the pipes cannot keep the job alive;
//! - stdout + stderr capped at 10 KB *total*, cut on a UTF-8 boundary, with a `truncated` flag;
//!   beyond the cap the pipes are drained and discarded, so memory stays bounded under a flood.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);
pub const OUTPUT_CAP: usize = 10 * 1024;
pub const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long after a command's deadline the executor's own timer kills it, should the helper's
/// (or the watchdog's) kill not have been seen by then: a backstop, never the deadline itself.
pub const BACKSTOP: Duration = Duration::from_secs(1);
pub use crate::sandbox::process::SAFE_PATH;
/// Variables copied from the worker's environment (besides PATH, which is fixed).
pub const ENV_ALLOWLIST: &[&str] = &["HOME", "USER", "LANG", "LC_ALL", "TERM"];

#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub command: String,
    pub workdir: PathBuf,
    pub timeout: Duration,
    /// Run confined: the helper binary (`brainloop`) and the spec it applies. `None` runs
    /// `/bin/bash -c` directly (process group only).
    pub sandbox: Option<(PathBuf, crate::sandbox::Spec)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecResult {
    /// `None` when killed by a signal.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    /// Some output was not valid UTF-8 and was replaced with U+FFFD.
    pub lossy: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The sandbox helper could not confine the command: nothing of it ran (message in stderr).
    pub sandbox_failed: bool,
    /// The process group id, for bookkeeping.
    pub pgid: i32,
}

impl ExecResult {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled && !self.sandbox_failed
    }
}

/// Fixed variables every command gets. `PYTHONDONTWRITEBYTECODE`: running a script must not
/// leave `__pycache__/` in the workspace — an effect nobody asked for that would make every
/// overlay run of `python3 x.py` a change set to review (and never within what it names).
/// The update checks of npm and pip (issue 35): each run has a fresh private HOME, so their
/// once-a-day state never persists and every `npm test` asked for `registry.npmjs.org:443`.
pub const FIXED_ENV: &[(&str, &str)] = &[
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("NPM_CONFIG_UPDATE_NOTIFIER", "false"),
    ("NO_UPDATE_NOTIFIER", "1"),
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
];

/// The environment a command gets: the fixed PATH and variables, the allowlist from `source`.
pub fn filtered_env(source: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), SAFE_PATH.to_string())];
    env.extend(
        FIXED_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    for k in ENV_ALLOWLIST {
        if let Some(v) = source(k) {
            env.push((k.to_string(), v));
        }
    }
    env
}

/// Shared state of the two streams: the first `OUTPUT_CAP` bytes (in arrival order) are kept,
/// the rest is read and dropped.
#[derive(Default)]
struct Captured {
    left: usize,
    truncated: bool,
    streams: [Vec<u8>; 2],
}

type Shared = std::sync::Arc<std::sync::Mutex<Captured>>;

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, Captured> {
    match c.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Writes `bytes` to the command's stdin: what the pipe takes at once right here (a spec is far
/// below a pipe's buffer, so the helper does not wait for another task to be scheduled, issue
/// 39), the rest in the background. A helper gone before reading shows up as its exit status.
fn send_input(mut stdin: tokio::process::ChildStdin, bytes: Vec<u8>) {
    use futures_util::FutureExt;
    use tokio::io::AsyncWriteExt;
    let n = match stdin.write(&bytes).now_or_never() {
        Some(Ok(n)) => n,
        Some(Err(_)) => bytes.len(),
        None => 0,
    };
    if n < bytes.len() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes[n..]).await;
        });
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, shared: Shared, which: usize) {
    let mut buf = [0u8; 8192];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut c = lock(&shared);
        let take = n.min(c.left);
        c.streams[which].extend_from_slice(&buf[..take]);
        c.left -= take;
        if take < n {
            c.truncated = true;
        }
    }
}

/// Bytes to text: cut an incomplete trailing UTF-8 sequence (from truncation), replace invalid bytes.
fn to_text(mut bytes: Vec<u8>, truncated: bool) -> (String, bool) {
    if truncated {
        if let Err(e) = std::str::from_utf8(&bytes) {
            if e.error_len().is_none() {
                bytes.truncate(e.valid_up_to());
            }
        }
    }
    match String::from_utf8(bytes) {
        Ok(s) => (s, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    }
}

fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), sig);
    }
}

/// How the command's process (bash, or the helper) ended.
struct Ended {
    status: std::process::ExitStatus,
    /// The command's signal (SIGKILL for a kill at the deadline, not the helper's report).
    signal: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    /// The helper reported the exit code before its own exit (not reaped yet).
    reported: bool,
}

/// Waits for the command's end: its exit, the backstop (`backstop`, after the deadline the
/// helper or watchdog enforces) or a cancellation. A worker that was stopped sees the backstop
/// (or a cancellation) and the exit at once on resume: whatever the order, a command that has
/// exited is reported by its real exit (`try_wait` before choosing to kill).
async fn wait_end(
    child: &mut tokio::process::Child,
    reports: Option<std::os::fd::OwnedFd>,
    pgid: i32,
    sandboxed: bool,
    deadline_ns: u64,
    backstop: tokio::time::Instant,
    cancel: &CancellationToken,
) -> std::io::Result<Ended> {
    use std::os::unix::process::ExitStatusExt;
    let (mut timed_out, mut cancelled) = (false, false);
    let mut reported = false;
    // A warm helper reports its exit code before it exits (`sandbox::exec::report_status`):
    // the result need not wait for the teardown of its emptied namespaces. When it reports
    // nothing (killed at its deadline, a setup failure), its exit is waited for as from a
    // cold one.
    let exit = async {
        if let Some(code) = read_report(reports).await {
            reported = true;
            return Ok(std::process::ExitStatus::from_raw((code & 0xff) << 8));
        }
        child.wait().await
    };
    let waited = tokio::select! {
        s = exit => Some(s?),
        _ = tokio::time::sleep_until(backstop) => None,
        _ = cancel.cancelled() => None,
    };
    let status = match waited {
        Some(s) => s,
        None => match child.try_wait()? {
            Some(s) => s,
            None => {
                if cancel.is_cancelled() {
                    cancelled = true;
                } else {
                    timed_out = true;
                }
                signal_group(pgid, Signal::SIGTERM);
                match tokio::time::timeout(TERM_GRACE, child.wait()).await {
                    Ok(s) => s?,
                    Err(_) => {
                        signal_group(pgid, Signal::SIGKILL);
                        child.wait().await?
                    }
                }
            }
        },
    };
    // Killed at its deadline by the helper or the watchdog (their report, read after the fact).
    // The command itself died of SIGKILL then (the helper's SIGALRM is only its report).
    let mut signal = status.signal();
    if !cancelled
        && crate::sandbox::deadline::killed_at_deadline(
            signal,
            sandboxed,
            deadline_ns,
            crate::sandbox::deadline::monotonic_ns(),
        )
    {
        timed_out = true;
        signal = Some(Signal::SIGKILL as i32);
    }
    Ok(Ended {
        status,
        signal,
        timed_out,
        cancelled,
        reported,
    })
}

/// The exit code a warm helper wrote on its status pipe (4 bytes), or `None` when the pipe
/// ended without one (or there is none).
async fn read_report(fd: Option<std::os::fd::OwnedFd>) -> Option<i32> {
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd?).ok()?;
    let mut b = [0u8; 4];
    rx.read_exact(&mut b).await.ok()?;
    Some(i32::from_le_bytes(b))
}

/// Runs `req` with no input and nothing recorded (tests, benchmarks); the worker's commands
/// go through [`execute_with`] from `bash::confined`.
pub async fn execute(req: &ExecRequest, cancel: &CancellationToken) -> std::io::Result<ExecResult> {
    execute_with(req, None, cancel, |_| Ok(())).await
}

/// Runs `req`: `input`, when given, written to the command's stdin then closed (how operator
/// hooks receive agent-derived data, never in their command line); `on_spawn(pgid)` called once
/// the process group exists (the worker records it so a crash cannot leave the tree running).
/// When `on_spawn` fails the group is killed at once and the error returned: nothing runs that
/// the worker could not record (the sandbox helper is still setting up its namespaces then,
/// before the command's exec).
pub async fn execute_with(
    req: &ExecRequest,
    input: Option<Vec<u8>>,
    cancel: &CancellationToken,
    on_spawn: impl FnOnce(i32) -> std::io::Result<()>,
) -> std::io::Result<ExecResult> {
    run(req, input, cancel, on_spawn).await
}

async fn run(
    req: &ExecRequest,
    input: Option<Vec<u8>>,
    cancel: &CancellationToken,
    on_spawn: impl FnOnce(i32) -> std::io::Result<()>,
) -> std::io::Result<ExecResult> {
    let timeout = req.timeout.min(MAX_TIMEOUT);
    // The deadline, on the monotonic clock, enforced outside this process (`sandbox::deadline`):
    // by the helper, or by a watchdog forked just before bash's exec. This task's own timer is
    // only a backstop, a little later.
    let t0 = Instant::now();
    let deadline_ns = crate::sandbox::deadline::after(timeout);
    let backstop = tokio::time::Instant::from_std(t0 + timeout + BACKSTOP);
    let mut cmd = match &req.sandbox {
        None => {
            let mut c = tokio::process::Command::new("/bin/bash");
            c.arg("-c")
                .arg(&req.command)
                .current_dir(&req.workdir)
                .env_clear()
                .envs(filtered_env(|k| std::env::var(k).ok()));
            crate::sandbox::process::configure(&mut c);
            // SAFETY: the watchdog only makes syscalls (fork, timerfd, prctl, close_range, read,
            // kill): async-signal-safe between fork and exec.
            unsafe {
                c.pre_exec(move || crate::sandbox::deadline::watchdog(deadline_ns));
            }
            c
        }
        Some((helper, _)) => crate::sandbox::process::helper_command(helper),
    };
    // Sandboxed: the framed spec (with the deadline), then the command's input; direct: the
    // input alone.
    let stdin_bytes = match &req.sandbox {
        Some((_, spec)) => {
            let mut spec = spec.clone();
            spec.deadline_ns = Some(deadline_ns);
            Some(crate::sandbox::exec::frame_spec(&spec, input)?)
        }
        None => input,
    };
    if stdin_bytes.is_none() {
        cmd.stdin(Stdio::null());
    }
    // A warm helper reserved for this spec (`sandbox::warm`) has done the set-up that does not
    // depend on the command and waits for its spec on stdin; otherwise a cold one starts now.
    let warm = match &req.sandbox {
        Some((_, spec)) => spec.warm.and_then(crate::sandbox::warm::take),
        None => None,
    };
    let (mut child, status) = match warm {
        Some((c, s)) => (c, s),
        None => (cmd.spawn()?, None),
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    if let Err(e) = on_spawn(pgid) {
        signal_group(pgid, Signal::SIGKILL);
        let _ = child.wait().await;
        return Err(std::io::Error::other(format!(
            "cannot record the command's process group ({e}), so it was stopped before it ran"
        )));
    }
    crate::sandbox::marks::mark("spawned");
    if let (Some(bytes), Some(stdin)) = (stdin_bytes, child.stdin.take()) {
        // Written only once the process group is recorded (the helper waits for its spec, so
        // nothing runs before), and concurrently: a command that never reads its input must
        // not block the worker; one that exits early just closes the pipe. A helper that dies
        // before reading its spec shows up as its exit status, not here.
        send_input(stdin, bytes);
    }
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        signal_group(pgid, Signal::SIGKILL);
        return Err(std::io::Error::other("cannot capture the command's output"));
    };
    let shared: Shared = std::sync::Arc::new(std::sync::Mutex::new(Captured {
        left: OUTPUT_CAP,
        ..Captured::default()
    }));
    // The pipes are drained while the command runs, or a chatty command would block on a full pipe.
    let out_task = tokio::spawn(pump(out, shared.clone(), 0));
    let err_task = tokio::spawn(pump(err, shared.clone(), 1));

    let Ended {
        status,
        signal,
        timed_out,
        cancelled,
        reported,
    } = wait_end(
        &mut child,
        status,
        pgid,
        req.sandbox.is_some(),
        deadline_ns,
        backstop,
        cancel,
    )
    .await?;
    if reported {
        // The helper reported its exit code and is exiting (its command's processes are all
        // gone): reaped in the background, its cgroup removed with the job's.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
    }
    crate::sandbox::marks::mark("exited");
    // bash is gone: nothing it started may outlive the job or hold the pipes open.
    signal_group(pgid, Signal::SIGKILL);
    let aborts = (out_task.abort_handle(), err_task.abort_handle());
    let drained = async {
        let _ = out_task.await;
        let _ = err_task.await;
    };
    if tokio::time::timeout(Duration::from_millis(500), drained)
        .await
        .is_err()
    {
        // Something outside the group (a daemon that escaped with setsid) holds the pipes:
        // stop reading and keep what arrived.
        aborts.0.abort();
        aborts.1.abort();
    }
    crate::sandbox::marks::mark("collected");
    let (out, err, truncated) = {
        let mut c = lock(&shared);
        let [o, e] = std::mem::take(&mut c.streams);
        (o, e, c.truncated)
    };
    let (stdout, l1) = to_text(out, truncated);
    let (stderr, l2) = to_text(err, truncated);
    let sandbox_failed = req.sandbox.is_some()
        && status.code() == Some(crate::sandbox::SETUP_FAILED)
        && stderr.starts_with(crate::sandbox::ERROR_PREFIX);
    Ok(ExecResult {
        sandbox_failed,
        exit_code: status.code(),
        signal,
        stdout,
        stderr,
        truncated,
        lossy: l1 || l2,
        duration_ms: t0.elapsed().as_millis() as u64,
        timed_out,
        cancelled,
        pgid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cmd: &str, timeout_ms: u64) -> ExecRequest {
        ExecRequest {
            command: cmd.into(),
            workdir: std::env::temp_dir(),
            timeout: Duration::from_millis(timeout_ms),
            sandbox: None,
        }
    }

    #[tokio::test]
    async fn runs_and_captures_both_streams() {
        let r = execute(
            &req("echo out; echo err >&2; exit 3", 5000),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout, "out\n");
        assert_eq!(r.stderr, "err\n");
        assert!(!r.truncated && !r.success());
    }

    #[tokio::test]
    async fn a_flood_is_capped_on_a_utf8_boundary() {
        // 3-byte characters, several MB: the cut must not split one.
        let r = execute(
            &req("yes 'ééé€€€' | head -c 5000000", 20000),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(r.truncated);
        assert!(r.stdout.len() <= OUTPUT_CAP && r.stdout.len() > OUTPUT_CAP - 4);
        assert!(!r.stdout.contains('\u{FFFD}'));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_tree_and_keeps_partial_output() {
        let marker = format!("brainloop-test-{}", std::process::id());
        let cmd = format!("echo started; (sleep 30; echo {marker}) & sleep 30");
        let r = execute(&req(&cmd, 300), &CancellationToken::new())
            .await
            .unwrap();
        assert!(r.timed_out);
        assert_eq!(r.stdout, "started\n");
        assert!(r.duration_ms < 10_000);
        // No process of the group survives.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !crate::bash::leftovers::group_alive(r.pgid),
            "process group {} still alive",
            r.pgid
        );
    }

    /// A runtime that cannot run (its only thread blocked) stands in for a stopped worker: the
    /// watchdog (no helper here) kills the tree at the deadline all the same, and the result
    /// says timed out.
    #[tokio::test(flavor = "current_thread")]
    async fn the_deadline_holds_while_the_executor_cannot_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = req("echo $$ > pgid; echo started; sleep 29.71", 400);
        r.workdir = dir.path().to_path_buf();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(async move { execute(&r, &cancel).await });
        let pgid_file = dir.path().join("pgid");
        let t0 = Instant::now();
        while !pgid_file.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the command never started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pgid: i32 = loop {
            if let Ok(p) = std::fs::read_to_string(&pgid_file).unwrap().trim().parse() {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Blocked: the executor's task cannot run, its timer cannot fire.
        let t1 = Instant::now();
        while crate::bash::leftovers::group_alive(pgid) && t1.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !crate::bash::leftovers::group_alive(pgid),
            "the command outlived its deadline while the executor could not run"
        );
        let res = task.await.unwrap().unwrap();
        assert!(res.timed_out, "{res:?}");
        assert_eq!(res.stdout, "started\n");
    }

    /// A command that exits before its deadline while the executor cannot run is reported by its
    /// real exit, not as timed out, however late the executor looks.
    #[tokio::test(flavor = "current_thread")]
    async fn an_exit_before_the_deadline_wins_over_a_late_look() {
        let cancel = CancellationToken::new();
        let r = req("sleep 0.2; echo ok", 600);
        let task = tokio::spawn(async move { execute(&r, &cancel).await });
        // Let the task spawn the command, then block past the deadline and the backstop.
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::thread::sleep(Duration::from_millis(600) + BACKSTOP + Duration::from_millis(500));
        let res = task.await.unwrap().unwrap();
        assert!(!res.timed_out, "{res:?}");
        assert_eq!(res.exit_code, Some(0), "{res:?}");
        assert_eq!(res.stdout, "ok\n");
        assert!(res.success());
    }

    #[tokio::test]
    async fn background_children_do_not_hold_the_job() {
        let r = execute(
            &req("sleep 30 & echo done", 20000),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(r.success(), "{r:?}");
        assert!(r.duration_ms < 5000, "{r:?}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!crate::bash::leftovers::group_alive(r.pgid));
    }

    #[tokio::test]
    async fn a_process_escaping_the_group_cannot_hold_the_job() {
        // setsid leaves the process group (the sandbox's PID namespace will catch this one too);
        // the job still ends and keeps its output.
        let r = execute(
            &req("echo before; setsid sleep 3 & echo after", 20000),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(r.success(), "{r:?}");
        assert_eq!(r.stdout, "before\nafter\n");
        assert!(r.duration_ms < 2500, "{r:?}");
    }

    #[tokio::test]
    async fn the_environment_is_filtered() {
        // The test process itself carries a secret; the command must not see it.
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "leak-me");
        std::env::set_var("CEREBRAS_API_KEY", "leak-me-too");
        let r = execute(&req("env", 5000), &CancellationToken::new())
            .await
            .unwrap();
        assert!(!r.stdout.contains("leak-me"), "{}", r.stdout);
        assert!(r.stdout.contains(&format!("PATH={SAFE_PATH}")));
    }

    #[tokio::test]
    async fn non_utf8_output_is_replaced_not_fatal() {
        let r = execute(&req("printf 'a\\xffb'", 5000), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(r.stdout, "a\u{FFFD}b");
        assert!(r.lossy);
    }

    #[tokio::test]
    async fn cancellation_stops_the_command() {
        let c = CancellationToken::new();
        let c2 = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            c2.cancel();
        });
        let r = execute(&req("sleep 30", 60000), &c).await.unwrap();
        assert!(r.cancelled && !r.success());
    }
}
