//! Issue 21 item 7: the sandbox helper is started from the running executable, so replacing or
//! deleting the binary's path under a running worker (a package upgrade) does not break the next
//! command; and a job waiting for its `not_before` has its `queued` result row.

mod common;

use common::{now_ms, run, Env, BIN};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn sandbox_enforcing() -> bool {
    Command::new(BIN)
        .arg("sandbox")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn commands_keep_running_after_the_binary_is_replaced_under_the_worker() {
    assert!(
        sandbox_enforcing(),
        "SANDBOX NOT ENFORCING HERE: this test cannot exercise the sandbox helper (`brainloop sandbox` fails)"
    );
    let env = Env::new();
    let bin_dir = env.root.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let installed = bin_dir.join("brainloop");
    std::fs::copy(BIN, &installed).unwrap();
    let log = std::fs::File::create(env.root.path().join("worker.log")).unwrap();
    let mut child = Command::new(&installed)
        .args(["run", "--data-dir"])
        .arg(&env.data)
        .arg("--workspace")
        .arg(&env.workspace)
        .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
        .env_remove("CEREBRAS_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let running = || {
        env.data.join("brainloop.output.db").exists()
            && env
                .output()
                .query_row(
                    "SELECT 1 FROM heartbeat WHERE status = 'running'",
                    [],
                    |_| Ok(()),
                )
                .is_ok()
    };
    while !running() {
        assert!(t0.elapsed() < LONG, "the worker did not start");
        assert!(child.try_wait().unwrap().is_none(), "the worker exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, v, err) = run(
        &env,
        "local",
        "execute_bash",
        json!({"command": "echo before"}),
    );
    assert_eq!(st, "succeeded", "{v} {err}");
    // A package upgrade: the new binary is renamed over the path (the old inode is unlinked);
    // then the path is removed altogether.
    let staged = bin_dir.join("brainloop.new");
    std::fs::write(&staged, b"#!/bin/sh\nexit 97\n").unwrap();
    std::fs::rename(&staged, &installed).unwrap();
    let (st, v, err) = run(
        &env,
        "local",
        "execute_bash",
        json!({"command": "echo after-upgrade"}),
    );
    assert_eq!(st, "succeeded", "{v} {err}");
    assert_eq!(v["stdout"], "after-upgrade\n");
    std::fs::remove_file(&installed).unwrap();
    let (st, v, err) = run(
        &env,
        "local",
        "execute_bash",
        json!({"command": "echo after-removal"}),
    );
    assert_eq!(st, "succeeded", "{v} {err}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_job_waiting_for_not_before_has_its_queued_row() {
    let env = Env::new();
    let d = env.start(&[]);
    let later = env.insert_full("sleep", "{\"ms\": 1}", 0, Some(now_ms() + 3_600_000));
    let soon = env.insert_full("sleep", "{\"ms\": 1}", 0, Some(now_ms() + 1_500));
    let t0 = Instant::now();
    loop {
        if env.result(later).map(|r| r.0).as_deref() == Some("queued") {
            break;
        }
        assert!(
            t0.elapsed() < LONG,
            "no queued row for job {later}: {:?}",
            env.result(later)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let waiting: String = env
        .output()
        .query_row(
            "SELECT result FROM results WHERE job_id = ?1",
            [later],
            |r| r.get(0),
        )
        .unwrap();
    assert!(waiting.contains("waiting_until"), "{waiting}");
    env.wait_status(soon, "succeeded", LONG);
    assert_eq!(env.result(later).unwrap().0, "queued");
    d.sigterm();
    d.wait_exit(LONG);
}
