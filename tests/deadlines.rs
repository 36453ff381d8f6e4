//! Deadlines that do not depend on the worker running (issue 34, item 2), with the real binary:
//! the worker is stopped (SIGSTOP) while a command runs, for longer than the command's timeout.
//! The sandbox helper kills the command at its deadline all the same (checked in /proc while the
//! worker is still stopped), and a command that exited before its deadline is reported by its
//! real exit after SIGCONT, however late the worker looks.

mod common;

use common::{final_result, job, require_sandbox, scaled, Env};
use nix::sys::signal::Signal;
use serde_json::json;
use std::time::{Duration, Instant};

/// The pids whose command line is exactly `argv` (as this user sees /proc).
fn procs(argv: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// The state letter of `pid` in /proc (`T`: stopped).
fn state(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|r| r.trim_start().chars().next())
        .unwrap_or('?')
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > within {
            eprintln!("not within {within:?}: {what}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Starts the worker; `warm`: a first command fills the pool of warm helpers, so the next
/// one runs on a warm helper (its spec, and deadline, arrive after its namespaces exist);
/// otherwise every helper starts cold.
fn start(env: &Env, warm: bool) -> common::Daemon {
    let cfg = common::ops_config(env);
    let d = env.start(&[
        ("BRAINLOOP_CONFIG", cfg.as_str()),
        ("BRAINLOOP_SANDBOX_WARM", if warm { "1" } else { "0" }),
        ("BRAINLOOP_LOG", "info,brainloop::sandbox=debug"),
    ]);
    if warm {
        let (st, v, err) = common::run(
            env,
            "ops",
            "execute_bash",
            json!({"command": "echo pool", "force_execute": true}),
        );
        assert_eq!(st, "succeeded", "{v} {err}");
        std::thread::sleep(Duration::from_millis(500));
    }
    d
}

/// How many commands ran on a warm helper (the worker's debug log).
fn on_warm(d: &common::Daemon) -> usize {
    d.log_text().matches("warm=true").count()
}

/// A 2 s timeout, the worker stopped right after the command starts, for up to 6 s: the
/// command's process is gone while the worker is still stopped, and after SIGCONT the job says
/// timed out.
fn killed_at_the_deadline_while_the_worker_is_stopped(warm: bool, argv: [&str; 2]) {
    require_sandbox();
    let env = Env::new();
    let d = start(&env, warm);
    let warm_before = on_warm(&d);
    let id = job(
        &env,
        "ops",
        "execute_bash",
        &json!({"command": format!("echo started; {} {}", argv[0], argv[1]), "timeout_ms": 2000, "force_execute": true}),
    );
    assert!(
        wait_until("the command runs", scaled(Duration::from_secs(30)), || {
            !procs(&argv).is_empty()
        }),
        "the command never ran; log:\n{}",
        d.log_text()
    );
    d.signal(Signal::SIGSTOP);
    let gone = wait_until(
        "the command is killed at its deadline",
        scaled(Duration::from_secs(6)),
        || procs(&argv).is_empty(),
    );
    let worker_state = state(d.pid());
    let survivors = procs(&argv);
    d.signal(Signal::SIGCONT);
    assert_eq!(worker_state, 'T', "the worker was not stopped meanwhile");
    assert!(
        gone,
        "the command ({survivors:?}) outlived its 2 s deadline while the worker was stopped"
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "failed", "{v} {err}");
    assert!(err.contains("timed out"), "{err}");
    assert_eq!(v["timed_out"], true, "{v}");
    assert_eq!(v["signal"], 9, "{v}");
    assert_eq!(v["stdout"], "started\n", "{v}");
    let ran_warm = on_warm(&d) > warm_before;
    assert_eq!(
        ran_warm,
        warm,
        "warm helper expected: {warm}; log:\n{}",
        d.log_text()
    );
}

#[test]
fn a_command_dies_at_its_deadline_while_the_worker_is_stopped_cold_helper() {
    killed_at_the_deadline_while_the_worker_is_stopped(false, ["sleep", "29.61"]);
}

#[test]
fn a_command_dies_at_its_deadline_while_the_worker_is_stopped_warm_helper() {
    killed_at_the_deadline_while_the_worker_is_stopped(true, ["sleep", "29.62"]);
}

/// `sleep 1; echo ok` with a 5 s timeout, the worker stopped for 8 s from the start: the command
/// exited long before its deadline, and the job says so (succeeded, exit 0, "ok"), although the
/// worker, on resume, finds both its timer and the exit due.
#[test]
fn a_command_that_exited_before_its_deadline_reports_its_real_exit_after_a_long_stop() {
    require_sandbox();
    let env = Env::new();
    let d = start(&env, true);
    let argv = ["sleep", "1.01"];
    let id = job(
        &env,
        "ops",
        "execute_bash",
        &json!({"command": "sleep 1.01; echo ok", "timeout_ms": 5000, "force_execute": true}),
    );
    assert!(
        wait_until("the command runs", scaled(Duration::from_secs(30)), || {
            !procs(&argv).is_empty()
        }),
        "the command never ran; log:\n{}",
        d.log_text()
    );
    d.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(8));
    let worker_state = state(d.pid());
    d.signal(Signal::SIGCONT);
    assert_eq!(worker_state, 'T', "the worker was not stopped meanwhile");
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{v} {err}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"], "ok\n", "{v}");
    assert_eq!(v["timed_out"], false, "{v}");
}
