//! execute_bash overhead benchmark: prints figures, asserts nothing
//! (`cargo bench --bench bash_throughput`, or `scripts/bench.sh`).
//!
//! N auto-approved `true` commands (pure: no human; confined in the `minimal` set) through the
//! daemon — each one classified, checked against the client's grants, looked up in the registry,
//! confined by the sandbox helper (namespaces, cgroup, Landlock, seccomp), recorded in
//! `executions` (synchronous=FULL) and published in `results` — against N `bash -c true` from a
//! plain sequential loop, in the same run. The daemon is measured at concurrency 1 (the
//! like-for-like comparison) with warm sandbox helpers (the default, `sandbox/warm.rs`) and
//! without them (`BRAINLOOP_SANDBOX_WARM=0`: every helper started cold, per command), and at its
//! default concurrency of 4. "total" includes the daemon's start-up; "steady" is the time from
//! the first result to the last, per command after the first.
//!
//! Env: BENCH_COMMANDS (default 1000).

use rusqlite::Connection;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn succeeded(data: &Path) -> i64 {
    Connection::open(data.join("brainloop.output.db"))
        .and_then(|c| {
            c.query_row(
                "SELECT count(*) FROM results WHERE status = 'succeeded'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap_or(0)
}

/// (total from the daemon's start, per command from the first result to the last)
fn daemon(n: u64, concurrency: u64, warm: bool) -> (Duration, Duration) {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    assert!(Command::new(BIN)
        .args(["init", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap()
        .status
        .success());
    // Pre-load the jobs in one transaction: the figure is the daemon's, not the producer's.
    {
        let mut c = Connection::open(data.join("brainloop.input.db")).unwrap();
        let tx = c.transaction().unwrap();
        for _ in 0..n {
            tx.execute("INSERT INTO jobs(action, params) VALUES ('execute_bash', '{\"command\": \"true\"}')", []).unwrap();
        }
        tx.commit().unwrap();
    }
    let t = Instant::now();
    let mut child = Command::new(BIN)
        .args(["run", "--data-dir"])
        .arg(&data)
        .arg("--workspace")
        .arg(&ws)
        .env("BRAINLOOP_LOG", "warn")
        .env("BRAINLOOP_CONCURRENCY", concurrency.to_string())
        .env("BRAINLOOP_SANDBOX_WARM", if warm { "1" } else { "0" })
        // One client: every slot is its own (the figures measure the pipeline, not fairness).
        .env("BRAINLOOP_MAX_SLOTS_PER_CLIENT", concurrency.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = None;
    loop {
        let done = succeeded(&data);
        if done >= 1 && first.is_none() {
            first = Some(Instant::now());
        }
        if done >= n as i64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let d = t.elapsed();
    let steady = first.map_or(d, |f| f.elapsed()) / (n.max(2) - 1) as u32;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    (d, steady)
}

fn plain(n: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        let st = Command::new("/bin/bash")
            .args(["-c", "true"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    t.elapsed()
}

fn main() {
    let n: u64 = std::env::var("BENCH_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    println!("execute_bash overhead — {n} auto-approved `true` commands (start-up included for the daemon)\n");
    let base = plain(n);
    let warm = daemon(n, 1, true);
    let cold = daemon(n, 1, false);
    let d4 = daemon(n, 4, true);
    let per = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| run | total | per command | steady, per command | vs plain loop (steady) |");
    println!("|---|---|---|---|---|");
    println!(
        "| plain loop: bash -c true | {:.2} s | {:.3} ms | {:.3} ms | 1.00 |",
        base.as_secs_f64(),
        per(base),
        per(base)
    );
    for (label, (total, steady)) in [
        ("brainloop, concurrency 1, warm helpers (default)", warm),
        ("brainloop, concurrency 1, cold helpers", cold),
        ("brainloop, concurrency 4, warm helpers", d4),
    ] {
        println!(
            "| {label} | {:.2} s | {:.3} ms | {:.3} ms | {:.2} |",
            total.as_secs_f64(),
            per(total),
            ms(steady),
            ms(steady) / per(base)
        );
    }
}
