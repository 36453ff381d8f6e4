//! execute_bash overhead benchmark: prints figures, asserts nothing
//! (`cargo bench --bench bash_throughput`, or `scripts/bench.sh`).
//!
//! N auto-approved `true` commands (pure: no human; confined in the `minimal` set) through the
//! daemon — each one classified, checked against the client's grants, looked up in the registry,
//! confined by the sandbox helper (namespaces, cgroup, Landlock, seccomp), recorded in
//! `executions` (synchronous=FULL) and published in `results` — against N `bash -c true` from a
//! plain sequential loop, in the same run. The daemon is measured at concurrency 1 (the
//! like-for-like comparison) without warm sandbox helpers (the default: every helper started
//! cold) and with them (opt-in `BRAINLOOP_SANDBOX_WARM=1`, `sandbox/warm.rs`), and at its
//! default concurrency of 4 with warm helpers.
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

fn daemon(n: u64, concurrency: u64, warm: bool) -> Duration {
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
    while succeeded(&data) < n as i64 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let d = t.elapsed();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    d
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
    let cold = daemon(n, 1, false);
    let d1 = daemon(n, 1, true);
    let d4 = daemon(n, 4, true);
    let per = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
    println!("| run | total | per command | vs plain loop |");
    println!("|---|---|---|---|");
    println!(
        "| plain loop: bash -c true | {:.2} s | {:.3} ms | 1.00 |",
        base.as_secs_f64(),
        per(base)
    );
    println!(
        "| brainloop, concurrency 1, cold helpers | {:.2} s | {:.3} ms | {:.2} |",
        cold.as_secs_f64(),
        per(cold),
        cold.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "| brainloop, concurrency 1, warm helpers | {:.2} s | {:.3} ms | {:.2} |",
        d1.as_secs_f64(),
        per(d1),
        d1.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "| brainloop, concurrency 4, warm helpers | {:.2} s | {:.3} ms | {:.2} |",
        d4.as_secs_f64(),
        per(d4),
        d4.as_secs_f64() / base.as_secs_f64()
    );
}
