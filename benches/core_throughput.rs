//! Worker-core benchmark: prints figures, asserts nothing (run: `scripts/bench.sh` or
//! `cargo bench --bench core_throughput`).
//!
//! In one run, on the same disk:
//! 1. the raw SQLite floor: a producer inserting N jobs one commit each (synchronous=FULL) while
//!    a minimal rusqlite loop polls them and writes one result row per job (FULL, one commit each);
//! 2. brainloop doing the same end to end (the producer identical; the worker's output.db is FULL);
//! 3. both again on a pre-loaded backlog (consumer-bound: no producer in the way);
//! 4. brainloop idle for BENCH_IDLE_SECS (default 60): CPU seconds and RSS.
//!
//! Env: BENCH_JOBS (default 10000), BENCH_IDLE_SECS (default 60), BENCH_CONCURRENCY (default 4).

use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn env_num(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn open(p: &Path) -> Connection {
    let c = Connection::open(p).unwrap();
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c
}

/// Inserts `n` jobs, one commit each; returns the elapsed time.
fn produce(input: &Path, n: u64) -> Duration {
    let c = open(input);
    let t = Instant::now();
    let mut s = c
        .prepare("INSERT INTO jobs(action, params, created_at) VALUES ('list_actions', '{}', ?1)")
        .unwrap();
    for _ in 0..n {
        s.execute([now_ms()]).unwrap();
    }
    t.elapsed()
}

fn preload(input: &Path, n: u64) {
    let mut c = open(input);
    let tx = c.transaction().unwrap();
    for _ in 0..n {
        tx.execute(
            "INSERT INTO jobs(action, params, created_at) VALUES ('list_actions', '{}', ?1)",
            [now_ms()],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn pct(v: &mut [i64], p: f64) -> i64 {
    if v.is_empty() {
        return -1;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

// ---------- the floor: a minimal rusqlite polling loop ----------

fn floor_setup(dir: &Path) -> (PathBuf, PathBuf) {
    let input = dir.join("in.db");
    let output = dir.join("out.db");
    let c = open(&input);
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute_batch(
        "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT, params TEXT, created_at INTEGER);",
    )
    .unwrap();
    let o = open(&output);
    o.pragma_update(None, "journal_mode", "WAL").unwrap();
    o.execute_batch(
        "CREATE TABLE results(job_id INTEGER PRIMARY KEY, status TEXT, result TEXT, picked_at INTEGER, finished_at INTEGER);",
    )
    .unwrap();
    (input, output)
}

/// The bytes brainloop writes as a `list_actions` result: the floor writes the same payload, so
/// the ratio compares the machinery, not the payload size.
fn list_actions_payload() -> String {
    let registry =
        brainloop::actions::Registry::new(&brainloop::config::Config::default()).unwrap();
    brainloop::actions::list_actions_answer(&registry).to_string()
}

/// Polls without sleeping and writes one result per job, one FULL commit each, until `n` done.
fn floor_consume(input: PathBuf, output: PathBuf, n: u64) -> std::thread::JoinHandle<()> {
    let payload = list_actions_payload();
    std::thread::spawn(move || {
        let i = open(&input);
        let o = open(&output);
        let mut last = 0i64;
        let mut done = 0u64;
        while done < n {
            let rows: Vec<(i64, String, String)> = {
                let mut s = i
                    .prepare_cached(
                        "SELECT id, action, params FROM jobs WHERE id > ?1 ORDER BY id LIMIT 512",
                    )
                    .unwrap();
                let r = s
                    .query_map([last], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .unwrap();
                r.map(Result::unwrap).collect()
            };
            let picked = now_ms();
            for (id, action, params) in rows {
                let _: serde_json::Value = serde_json::from_str(&params).unwrap();
                assert_eq!(action, "list_actions");
                let result = &payload;
                o.execute(
                    "INSERT INTO results(job_id, status, result, picked_at, finished_at) VALUES (?1, 'succeeded', ?2, ?3, ?4)",
                    params![id, result, picked, now_ms()],
                )
                .unwrap();
                last = id;
                done += 1;
            }
        }
    })
}

fn floor_latencies(input: &Path, output: &Path) -> (Vec<i64>, Vec<i64>) {
    let o = open(output);
    o.execute("ATTACH DATABASE ?1 AS i", [input.to_str().unwrap()])
        .unwrap();
    let mut s = o
        .prepare("SELECT r.picked_at - j.created_at, r.finished_at - j.created_at FROM results r JOIN i.jobs j ON j.id = r.job_id")
        .unwrap();
    let rows: Vec<(i64, i64)> = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.into_iter().unzip()
}

// ---------- brainloop ----------

struct Worker {
    child: Child,
    data: PathBuf,
}

impl Worker {
    fn start(data: &Path, ws: &Path, concurrency: u64) -> Worker {
        let child = Command::new(BIN)
            .args(["run", "--data-dir"])
            .arg(data)
            .arg("--workspace")
            .arg(ws)
            .env("BRAINLOOP_LOG", "warn")
            .env("BRAINLOOP_CONCURRENCY", concurrency.to_string())
            // One client: every slot is its own (the figures measure the pipeline, not fairness).
            .env("BRAINLOOP_MAX_SLOTS_PER_CLIENT", concurrency.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let w = Worker {
            child,
            data: data.to_path_buf(),
        };
        let t = Instant::now();
        while !w.ready() {
            assert!(t.elapsed() < Duration::from_secs(30), "worker not ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        w
    }

    fn ready(&self) -> bool {
        Connection::open(self.data.join("brainloop.output.db"))
            .and_then(|c| {
                c.query_row(
                    "SELECT count(*) FROM heartbeat WHERE pid = ?1 AND status = 'running'",
                    [self.child.id()],
                    |r| r.get::<_, i64>(0),
                )
            })
            .map(|n| n > 0)
            .unwrap_or(false)
    }

    fn finals(&self) -> i64 {
        let c = Connection::open(self.data.join("brainloop.output.db")).unwrap();
        c.query_row(
            "SELECT count(*) FROM results WHERE status = 'succeeded'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    fn rss_kib(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn latencies(&self) -> (Vec<i64>, Vec<i64>) {
        let o = Connection::open(self.data.join("brainloop.lifecycle.db")).unwrap();
        o.execute(
            "ATTACH DATABASE ?1 AS o",
            [self.data.join("brainloop.output.db").to_str().unwrap()],
        )
        .unwrap();
        let mut s = o
            .prepare("SELECT q.claimed_at - q.created_at, r.finished_at - q.created_at FROM queue q JOIN o.results r ON r.job_id = q.job_id")
            .unwrap();
        let rows: Vec<(i64, i64)> = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows.into_iter().unzip()
    }

    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn wait_until(f: impl Fn() -> bool) {
    while !f() {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn main() {
    // `cargo bench` passes --bench; ignore arguments.
    let n = env_num("BENCH_JOBS", 10_000);
    let idle = env_num("BENCH_IDLE_SECS", 60);
    let conc = env_num("BENCH_CONCURRENCY", 4);
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg: String = String::from_utf8(
        Command::new(BIN)
            .args(["run", "--print-config"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let poll = cfg
        .lines()
        .find(|l| l.starts_with("poll_fallback_ms"))
        .unwrap_or("poll_fallback_ms = ?")
        .to_string();

    println!(
        "brainloop worker-core benchmark — {n} list_actions jobs, producer one FULL commit per job"
    );
    println!("settings: worker concurrency {conc}; {poll}; wake-up by file watcher + PRAGMA data_version");
    println!("sync: producer FULL; brainloop output.db FULL, lifecycle NORMAL, metadata NORMAL; floor output FULL");
    println!(
        "payload: each result is the list_actions answer ({} bytes), in both\n",
        list_actions_payload().len()
    );

    // 0. Producer alone: the insert rate of this disk.
    let d0 = root.path().join("p0");
    std::fs::create_dir_all(&d0).unwrap();
    let (in0, _) = floor_setup(&d0);
    let p_alone = produce(&in0, n);
    let prod_rate = n as f64 / p_alone.as_secs_f64();

    // 1. Floor, producer-driven.
    let d1 = root.path().join("floor");
    std::fs::create_dir_all(&d1).unwrap();
    let (in1, out1) = floor_setup(&d1);
    let t = Instant::now();
    let cons = floor_consume(in1.clone(), out1.clone(), n);
    produce(&in1, n);
    cons.join().unwrap();
    let floor_e2e = n as f64 / t.elapsed().as_secs_f64();
    let (mut fp, mut fl) = floor_latencies(&in1, &out1);

    // 2. brainloop, producer-driven.
    let d2 = root.path().join("bl");
    let st = Command::new(BIN)
        .args(["init", "--data-dir"])
        .arg(&d2)
        .output()
        .unwrap();
    assert!(st.status.success());
    let w = Worker::start(&d2, &ws, conc);
    let t = Instant::now();
    produce(&d2.join("brainloop.input.db"), n);
    wait_until(|| w.finals() >= n as i64);
    let bl_e2e = n as f64 / t.elapsed().as_secs_f64();
    let (mut bp, mut bl) = w.latencies();

    // 4. Idle (the same worker, now with nothing to do).
    std::thread::sleep(Duration::from_secs(2));
    let c0 = w.cpu_ticks();
    let t_idle = Instant::now();
    std::thread::sleep(Duration::from_secs(idle));
    let idle_cpu = (w.cpu_ticks() - c0) as f64 / 100.0; // USER_HZ = 100 on Linux
    let idle_secs = t_idle.elapsed().as_secs_f64();
    let rss = w.rss_kib("VmRSS:");
    let hwm = w.rss_kib("VmHWM:");
    w.stop();

    // 3. Backlog drain: floor vs brainloop on N pre-loaded jobs.
    let d3 = root.path().join("floor_backlog");
    std::fs::create_dir_all(&d3).unwrap();
    let (in3, out3) = floor_setup(&d3);
    preload(&in3, n);
    let t = Instant::now();
    floor_consume(in3, out3, n).join().unwrap();
    let floor_drain = n as f64 / t.elapsed().as_secs_f64();

    let d4 = root.path().join("bl_backlog");
    Command::new(BIN)
        .args(["init", "--data-dir"])
        .arg(&d4)
        .output()
        .unwrap();
    preload(&d4.join("brainloop.input.db"), n);
    let t = Instant::now();
    let w = Worker::start(&d4, &ws, conc);
    wait_until(|| w.finals() >= n as i64);
    let bl_drain = n as f64 / t.elapsed().as_secs_f64();
    w.stop();

    println!("| measure | raw SQLite floor | brainloop | brainloop / floor |");
    println!("|---|---|---|---|");
    println!("| producer alone, inserts/s (FULL, 1 commit each) | {prod_rate:.0} | | |");
    println!(
        "| end to end, jobs/s (producer running) | {floor_e2e:.0} | {bl_e2e:.0} | {:.2} |",
        bl_e2e / floor_e2e
    );
    println!(
        "| pickup latency p50 / p99, ms (insert → claim) | {} / {} | {} / {} | |",
        pct(&mut fp, 0.5),
        pct(&mut fp, 0.99),
        pct(&mut bp, 0.5),
        pct(&mut bp, 0.99)
    );
    println!(
        "| insert → result visible p50 / p99, ms | {} / {} | {} / {} | |",
        pct(&mut fl, 0.5),
        pct(&mut fl, 0.99),
        pct(&mut bl, 0.5),
        pct(&mut bl, 0.99)
    );
    println!(
        "| backlog drain, jobs/s (pre-loaded) | {floor_drain:.0} | {bl_drain:.0} | {:.2} |",
        bl_drain / floor_drain
    );
    println!(
        "| idle CPU over {idle_secs:.0} s | | {idle_cpu:.2} s ({:.3} s/min) | |",
        idle_cpu * 60.0 / idle_secs
    );
    println!(
        "| idle RSS / peak RSS | | {:.1} MiB / {:.1} MiB | |",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}
