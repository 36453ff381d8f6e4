//! Issue 24: warm sandbox helpers (`src/sandbox/warm.rs`) are single use — one command cannot
//! leave anything behind for the next.
//!
//! The real worker at concurrency 1, without the overlay (approved commands run directly). A
//! first approved command, on a warm helper (its cgroup is named `…-warmN`), leaves what it can:
//! a file and an open descriptor in its private tmp, a background process, a lowered open-file
//! limit. The next approved command, on another warm helper, must see none of it: an empty
//! private tmp (another one), only its own processes, descriptors 0–2, the configured limit, and
//! another cgroup. On the host, the first command's process and cgroup are gone; after SIGTERM,
//! no warm helper and no cgroup of the worker is left.

mod common;

use common::{cli_ok, final_result, job, require_sandbox, settled, Env};
use serde_json::json;
use std::time::Duration;

const MARK: &str = "300.4242";

fn run_approved(env: &Env, cmd: &str) -> String {
    let id = job(env, "local", "execute_bash", &json!({ "command": cmd }));
    let (st, v, e) = settled(env, id);
    assert_eq!(st, "pending_validation", "job {id}: {e} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    cli_ok(env, &["approve", &vid]);
    let (st, v, e) = final_result(env, id);
    assert_eq!(st, "succeeded", "job {id}: {e} {v}");
    assert!(
        v["sandbox"].as_str().unwrap_or("").contains("namespaces"),
        "{v}"
    );
    v["stdout"].as_str().unwrap().to_string()
}

/// The `pids` (v1) or unified (v2) cgroup line of `/proc/self/cgroup` output.
fn cgroup_of(out: &str) -> String {
    out.lines()
        .find(|l| l.contains(":pids:") || l.starts_with("0::"))
        .unwrap_or_else(|| panic!("no cgroup line in {out}"))
        .to_string()
}

/// Processes on the host whose cmdline contains `needle`.
fn host_processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) && !c.contains("warm_helpers") {
                found.push(format!("{}: {c}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// cgroup dirs named after the worker `pid` (`brainloop-PID-…`) under every hierarchy.
fn worker_cgroups(pid: i32) -> Vec<String> {
    let prefix = format!("brainloop-{pid}-");
    let mut found = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    found.push(e.path().display().to_string());
                } else if stack.len() < 10_000 {
                    stack.push(e.path());
                }
            }
        }
    }
    found
}

#[test]
fn a_warm_helper_is_single_use_and_nothing_of_one_command_reaches_the_next() {
    require_sandbox();
    let env = Env::new();
    let d = env.start(&[
        ("BRAINLOOP_SANDBOX_WARM", "1"),
        ("BRAINLOOP_OVERLAY", "0"),
        ("BRAINLOOP_CONCURRENCY", "1"),
        ("BRAINLOOP_MAX_SLOTS_PER_CLIENT", "1"),
    ]);
    let worker = d.pid();
    // A first command starts the pool (it may itself run on a cold helper).
    let (_, st, v, e) = common::submit(&env, "ls");
    assert_eq!(st, "succeeded", "{e} {v}");
    std::thread::sleep(Duration::from_millis(500));

    let first = run_approved(
        &env,
        &format!(
            "echo LEFT-BEHIND > \"$TMPDIR/left\"; exec 9>\"$TMPDIR/fd9\"; \
             (sleep {MARK} > /dev/null 2>&1 &); ulimit -n 64; \
             echo \"tmp $TMPDIR\"; cat /proc/self/cgroup"
        ),
    );
    let cg1 = cgroup_of(&first);
    let with_warm = |cg: &str| cg.contains("-warm");
    // Without a writable cgroup (e.g. as uid 65534) jobs get none: the rlimit fallbacks.
    let no_cgroup = !cg1.contains("brainloop-");
    if !no_cgroup {
        assert!(
            with_warm(&cg1),
            "the first command ran on a warm helper: {first}"
        );
    }
    // Its process died with its PID namespace, its cgroup went with the job.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        host_processes(MARK).is_empty(),
        "{:?}",
        host_processes(MARK)
    );
    if !no_cgroup {
        let name = cg1.rsplit('/').next().unwrap();
        assert!(
            !worker_cgroups(worker).iter().any(|c| c.ends_with(name)),
            "the first command's cgroup {name} is still there: {:?}",
            worker_cgroups(worker)
        );
    }

    let second = run_approved(
        &env,
        "echo \"tmp $TMPDIR\"; echo \"files [$(ls -A \"$TMPDIR\")]\"; \
         echo \"fds [$(ls /proc/self/fd | tr '\\n' ' ')]\"; echo \"nofile $(ulimit -n)\"; \
         for p in /proc/[0-9]*; do echo \"proc $(tr '\\0' ' ' < $p/cmdline)\"; done; \
         cat /proc/self/cgroup",
    );
    let tmp = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("tmp "))
            .unwrap()
            .to_string()
    };
    assert_ne!(tmp(&first), tmp(&second), "{first}\n{second}");
    assert!(second.contains("files []"), "{second}");
    assert!(
        !second.contains("LEFT-BEHIND") && !second.contains(MARK),
        "{second}"
    );
    // 0, 1, 2, and the one `ls` opened on /proc/self/fd.
    assert!(second.contains("fds [0 1 2 3 ]"), "{second}");
    assert!(second.contains("nofile 1024"), "{second}");
    let procs: Vec<&str> = second.lines().filter(|l| l.starts_with("proc ")).collect();
    assert!(
        procs.len() <= 4 && procs.iter().all(|l| !l.contains("sleep")),
        "{procs:?}"
    );
    if !no_cgroup {
        let cg2 = cgroup_of(&second);
        assert!(with_warm(&cg2), "{second}");
        assert_ne!(cg1, cg2);
    }

    // Shutdown: the idle warm helpers and every cgroup of the worker go with it.
    d.sigterm();
    let (st, _) = d.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "{st:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        worker_cgroups(worker).is_empty(),
        "{:?}",
        worker_cgroups(worker)
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("cgroup")).ok())
        .filter(|c| c.contains(&format!("brainloop-{worker}-")))
        .collect();
    assert!(
        left.is_empty(),
        "processes left in the worker's cgroups: {left:?}"
    );
}

/// A worker killed with SIGKILL removes none of its cgroups (its warm helpers' and its jobs'):
/// the next worker to start removes every `brainloop-<pid>-…` cgroup of a process no longer
/// running, killing what is still in one, and leaves those of live processes alone. Needs
/// cgroups the worker can create (root here; the unprivileged pass skips it by name).
#[test]
fn a_restart_removes_the_cgroups_of_a_worker_killed_with_sigkill_needs_writable_cgroups() {
    require_sandbox();
    let env = Env::new();
    let vars = [("BRAINLOOP_OVERLAY", "0"), ("BRAINLOOP_CONCURRENCY", "1")];
    let a = env.start(&vars);
    let dead = a.pid();
    let mark = format!("300.{:06}", std::process::id());
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({ "command": format!("sleep {mark}") }),
    );
    env.wait_status(id, "running", Duration::from_secs(60));
    let t0 = std::time::Instant::now();
    while host_processes(&mark).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The warm helpers' cgroups are made beside the job (one controller after another): the
    // list is taken once it stopped growing, so the kill finds them all made.
    let mut left = worker_cgroups(dead);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = worker_cgroups(dead);
        if now == left || t0.elapsed() > Duration::from_secs(30) {
            break;
        }
        left = now;
    }
    assert!(
        !left.is_empty(),
        "CANNOT RUN HERE: the worker made no cgroup (none writable?); log:\n{}",
        a.log_text()
    );
    a.kill9();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(worker_cgroups(dead), left, "a SIGKILL removes nothing");
    // Planted beside them: a cgroup of a process that is gone, still holding a process (a
    // command that outlived its worker), and one of a live process (this test).
    let base = std::path::Path::new(&left[0])
        .parent()
        .unwrap()
        .to_path_buf();
    let gone = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let orphan_cg = base.join(format!("brainloop-{gone}-7"));
    let live_cg = base.join(format!("brainloop-{}-7", std::process::id()));
    std::fs::create_dir(&orphan_cg).unwrap();
    std::fs::create_dir(&live_cg).unwrap();
    let orphan_mark = format!("301.{:06}", std::process::id());
    let mut orphan = std::process::Command::new("sleep")
        .arg(&orphan_mark)
        .spawn()
        .unwrap();
    std::fs::write(orphan_cg.join("cgroup.procs"), orphan.id().to_string()).unwrap();

    let b = env.start(&vars);
    let t0 = std::time::Instant::now();
    while !worker_cgroups(dead).is_empty() || orphan_cg.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "left: {:?} {}; log:\n{}",
            worker_cgroups(dead),
            orphan_cg.display(),
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = orphan.wait().unwrap();
    assert!(
        !st.success(),
        "the process in the dead worker's cgroup was killed: {st:?}"
    );
    assert!(live_cg.exists(), "a live process's cgroup was removed");
    assert!(b
        .log_text()
        .contains("removed job cgroups left by workers no longer running"));
    let _ = std::fs::remove_dir(&live_cg);
    // (The job itself, a pure command, is run again by `b`, and killed with it.)
    drop(b);
}

/// Issue 39: the timing record and the warm helper's status pipe reach no command. With the log
/// asking for `brainloop::timing`, a readonly command on a warm helper lists its own
/// descriptors: 0–2 and the one `ls` reads the list through — no marks file, no third pipe (the
/// status pipe's write end stays with the helper); the job's `timing` event carries the worker's
/// and the helper's marks, and the marks file is gone from the data dir afterwards.
#[test]
fn the_timing_record_and_the_status_pipe_reach_no_command() {
    require_sandbox();
    let env = Env::new();
    let d = env.start(&[
        ("BRAINLOOP_SANDBOX_WARM", "1"),
        ("BRAINLOOP_OVERLAY", "0"),
        ("BRAINLOOP_CONCURRENCY", "1"),
        ("BRAINLOOP_LOG", "info,brainloop::timing=debug"),
        ("BRAINLOOP_LOG_FORMAT", "json"),
    ]);
    // The first commands fill the pool (the very first may run on a cold helper).
    for _ in 0..2 {
        let (_, st, v, e) = common::submit(&env, "ls");
        assert_eq!(st, "succeeded", "{e} {v}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Auto-approved or asked (then approved): either way a confined run on a warm helper.
    let (id, st, v, e) = common::submit(&env, "ls -l /proc/self/fd");
    let (st, v, e) = if st == "pending_validation" {
        let vid = v["validation_id"].as_str().unwrap().to_string();
        cli_ok(&env, &["approve", &vid]);
        final_result(&env, id)
    } else {
        (st, v, e)
    };
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    assert!(
        !out.contains("marks"),
        "the marks file reached the command:\n{out}"
    );
    let fds: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split(" -> ").next()?.split_whitespace().last())
        .collect();
    assert!(
        fds.iter().all(|f| ["0", "1", "2", "3"].contains(f)),
        "descriptors beyond 0-3: {fds:?}\n{out}"
    );
    assert_eq!(
        out.matches("pipe:[").count(),
        2,
        "only stdout and stderr are pipes:\n{out}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let log = d.log_text();
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["fields"]["job_id"] == id && e["fields"]["marks"].is_string())
        .unwrap_or_else(|| panic!("no timing event for job {id}:\n{log}"));
    let marks: serde_json::Value =
        serde_json::from_str(line["fields"]["marks"].as_str().unwrap()).unwrap();
    for m in [
        "start",
        "planned",
        "prepared",
        "spawned",
        "h_spec",
        "h_landlock",
        "h_seccomp",
        "h_exec",
        "h_reaped",
        "exited",
        "end",
    ] {
        assert!(marks[m].as_u64().is_some(), "mark {m} missing: {marks}");
    }
    assert!(
        marks["h_exec"].as_u64() < marks["h_reaped"].as_u64(),
        "{marks}"
    );
    assert!(marks["start"].as_u64() < marks["end"].as_u64(), "{marks}");
    let left: Vec<String> = std::fs::read_dir(&env.data)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".marks"))
        .collect();
    assert!(left.is_empty(), "marks files left: {left:?}");
}
