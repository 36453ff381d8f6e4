//! Issue 21 item 5: the worker's memory is bounded by bytes, not by claim batch × params cap.
//! 600 rows of exactly 1 MiB params (a schema error each: `ms` is a 1 MiB string) must drain
//! under a 256 MiB memory limit, and no error quotes more than a short prefix of the value.
//!
//! The limit is a real one when this machine lets the test create a memory cgroup (v1
//! `memory.limit_in_bytes` or v2 `memory.max`, as root); otherwise the test measures the
//! worker's peak RSS (`VmHWM`) and says so in its output (`MEMORY LIMIT: none, measured`).

mod common;

use common::{Env, BIN};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: u64 = 256 * 1024 * 1024;
const ROWS: usize = 600;
const PARAMS: usize = 1024 * 1024;

/// A memory cgroup with [`LIMIT`]; removed on drop.
struct Cgroup {
    dir: PathBuf,
    v1: bool,
}

impl Cgroup {
    fn create() -> Option<Cgroup> {
        let name = format!("brainloop-test-{}", std::process::id());
        for (root, file, v1) in [
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", true),
            ("/sys/fs/cgroup", "memory.max", false),
            ("/sys/fs/cgroup/unified", "memory.max", false),
        ] {
            let dir = PathBuf::from(root).join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            if std::fs::write(dir.join(file), LIMIT.to_string()).is_ok() {
                return Some(Cgroup { dir, v1 });
            }
            let _ = std::fs::remove_dir(&dir);
        }
        None
    }

    fn read(&self, v1: &str, v2: &str) -> String {
        let f = if self.v1 { v1 } else { v2 };
        std::fs::read_to_string(self.dir.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn insert_big_rows(env: &Env) {
    let filler = "a".repeat(PARAMS - r#"{"ms":""}"#.len());
    let params = format!(r#"{{"ms":"{filler}"}}"#);
    assert_eq!(params.len(), PARAMS);
    let mut c = env.input();
    for _ in 0..ROWS / 50 {
        let tx = c.transaction().unwrap();
        for _ in 0..50 {
            tx.execute(
                "INSERT INTO jobs(action, params) VALUES ('sleep', ?1)",
                [&params],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
}

fn spawn_worker(env: &Env, cgroup: Option<&Cgroup>, log: &std::path::Path) -> Child {
    let procs = cgroup
        .map(|c| c.dir.join("cgroup.procs").display().to_string())
        .unwrap_or_else(|| "/dev/null".into());
    Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1" && exec "$2" run --data-dir "$3" --workspace "$4""#)
        .args(["sh", &procs, BIN])
        .arg(&env.data)
        .arg(&env.workspace)
        .env("BRAINLOOP_TEST_ACTIONS", "1")
        .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
        .env("BRAINLOOP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn six_hundred_rows_of_1_mib_params_drain_under_a_256_mib_limit_with_short_errors() {
    let env = Env::new();
    let (st, _, e) = env.cli(&["init"]);
    assert!(st.success(), "{e}");
    insert_big_rows(&env);
    let cgroup = Cgroup::create();
    match &cgroup {
        Some(c) => println!("MEMORY LIMIT: cgroup {} = {LIMIT} bytes", c.dir.display()),
        None => println!("MEMORY LIMIT: none, measured (no writable memory cgroup here): peak RSS must stay under {LIMIT} bytes"),
    }
    let log = env.root.path().join("worker.log");
    let mut child = spawn_worker(&env, cgroup.as_ref(), &log);
    let pid = child.id();
    let t0 = Instant::now();
    let mut peak = 0;
    while env.final_count() < ROWS as i64 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the worker died ({status}) after {:?} with {} of {ROWS} results (memory limit?); log tail:\n{}",
                t0.elapsed(),
                env.final_count(),
                tail(&log)
            );
        }
        peak = peak.max(vm_hwm(pid).unwrap_or(0));
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "only {} of {ROWS} final after 600 s",
            env.final_count()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    peak = peak.max(vm_hwm(pid).unwrap_or(0));
    let (failed, longest): (i64, i64) = env
        .output()
        .query_row(
            "SELECT count(*) FILTER (WHERE status = 'failed'), max(length(error)) FROM results",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let log_bytes = std::fs::metadata(&log).unwrap().len();
    let cg_peak = cgroup
        .as_ref()
        .map(|c| c.read("memory.max_usage_in_bytes", "memory.peak"));
    let cg_failcnt = cgroup
        .as_ref()
        .map(|c| c.read("memory.failcnt", "memory.events"));
    println!(
        "FIGURES: {ROWS} rows x {PARAMS} B drained in {:?}; worker peak RSS {} MiB; cgroup peak {:?} B, failcnt/events {:?}; longest error {longest} B; log {log_bytes} B",
        t0.elapsed(),
        peak / (1024 * 1024),
        cg_peak,
        cg_failcnt
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    assert_eq!(failed, ROWS as i64, "every row fails its schema check");
    assert!(longest < 8 * 1024, "an error quotes {longest} bytes");
    assert!(
        log_bytes < 4 * 1024 * 1024,
        "the log holds {log_bytes} bytes"
    );
    assert!(peak < LIMIT, "peak RSS {peak} bytes over {LIMIT}");
}

fn tail(log: &std::path::Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let start = s.len().saturating_sub(3000);
    s[s.char_indices()
        .find(|(i, _)| *i >= start)
        .map(|(i, _)| i)
        .unwrap_or(0)..]
        .to_string()
}
