//! MCP front-end round trip benchmark: prints figures, asserts only that calls succeeded
//! (`cargo bench --bench mcp_roundtrip`).
//!
//! One worker (`brainloop run`, default settings) and one `brainloop mcp --client bench`, driven
//! over stdio by rmcp's client. Measured, N calls each, sequentially:
//!
//! - `tools/call list_actions` through MCP (answered by the front-end itself);
//! - `tools/call execute_bash {"command": "echo hi"}` through MCP (a pure command: queued as a
//!   job, run by the worker, result awaited);
//! - the same two jobs submitted directly to the queue in the same run: insert into input.db
//!   (synchronous=FULL, like the front-end) and wait for the final row in output.db, polling
//!   `PRAGMA data_version` every 100 µs (the best a direct producer can do; the front-end
//!   sleeps on inotify instead).
//!
//! Env: BENCH_CALLS (default 1000).

use brainloop::db::{self, input, DbKind};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use rusqlite::{Connection, OptionalExtension};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        p50: pct(&v, 0.50),
        p99: pct(&v, 0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn wait_ready(data: &Path, pid: u32) {
    let t0 = Instant::now();
    loop {
        let ok = Connection::open(data.join("brainloop.output.db"))
            .ok()
            .and_then(|c| {
                c.query_row(
                    "SELECT 1 FROM heartbeat WHERE pid = ?1 AND status = 'running'",
                    [pid],
                    |_| Ok(()),
                )
                .optional()
                .ok()
                .flatten()
            })
            .is_some();
        if ok {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "worker not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Direct submission: insert, then wait for a final row (data_version polled every 100 µs).
fn direct(data: &Path, action: &str, params: &str, n: usize) -> Vec<Duration> {
    let mut input_conn = db::open(data, DbKind::Input).unwrap();
    let out = db::open_read_only(data, DbKind::Output).unwrap();
    let mut times = Vec::with_capacity(n);
    let mut last_version: i64 = -1;
    for _ in 0..n {
        let t = Instant::now();
        let id = input::insert_job(&mut input_conn, action, params, "bench", 0, None).unwrap();
        loop {
            let v: i64 = out
                .query_row("PRAGMA data_version", [], |r| r.get(0))
                .unwrap();
            if v != last_version {
                last_version = v;
                let status: Option<String> = out
                    .query_row("SELECT status FROM results WHERE job_id = ?1", [id], |r| {
                        r.get(0)
                    })
                    .optional()
                    .unwrap();
                match status.as_deref() {
                    Some("succeeded") => break,
                    Some("queued") | Some("running") | None => {}
                    Some(other) => panic!("direct job {id} ended {other}"),
                }
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        times.push(t.elapsed());
    }
    times
}

async fn via_mcp(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    action: &str,
    params: Value,
    n: usize,
) -> Vec<Duration> {
    let Value::Object(args) = json!({"action": action, "params": params}) else {
        unreachable!()
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client
            .call_tool(CallToolRequestParams::new("brainloop").with_arguments(args.clone()))
            .await
            .unwrap();
        times.push(t.elapsed());
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    times
}

fn main() {
    let n: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
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
    let mut worker = Command::new(BIN)
        .args(["run", "--data-dir"])
        .arg(&data)
        .arg("--workspace")
        .arg(&ws)
        .env("BRAINLOOP_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(&data, worker.id());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let echo = json!({"command": "echo hi"});
    let (mcp_list, mcp_echo) = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["mcp", "--client", "bench", "--data-dir"])
            .arg(&data)
            .env("BRAINLOOP_LOG", "warn");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let client = ClientConfig::default().serve(transport).await.unwrap();
        // Warm-up (connections, page cache).
        via_mcp(&client, "list_actions", json!({}), 20).await;
        via_mcp(&client, "execute_bash", echo.clone(), 20).await;
        let list = via_mcp(&client, "list_actions", json!({}), n).await;
        let run = via_mcp(&client, "execute_bash", echo.clone(), n).await;
        let _ = client.cancel().await;
        (list, run)
    });
    direct(&data, "list_actions", "{}", 20);
    let direct_list = direct(&data, "list_actions", "{}", n);
    let direct_echo = direct(&data, "execute_bash", &echo.to_string(), n);

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = worker.wait();

    let rows = [
        ("list_actions", stats(mcp_list), stats(direct_list)),
        (
            "execute_bash `echo hi`",
            stats(mcp_echo),
            stats(direct_echo),
        ),
    ];
    println!("MCP round trip — {n} sequential calls each; direct = the same job inserted into input.db and awaited in output.db\n");
    println!("| call | MCP p50 | MCP p99 | direct queue p50 | direct queue p99 | p50 ratio | p99 ratio |");
    println!("|---|---|---|---|---|---|---|");
    for (name, m, d) in rows {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2}× | {:.2}× |",
            ms(m.p50),
            ms(m.p99),
            ms(d.p50),
            ms(d.p99),
            m.p50.as_secs_f64() / d.p50.as_secs_f64(),
            m.p99.as_secs_f64() / d.p99.as_secs_f64()
        );
    }
    println!("\n(MCP list_actions is answered by the front-end; direct list_actions goes through the worker.)");
}
