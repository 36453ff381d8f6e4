//! LLM loop overhead (issue 51): an agent session (`loop` mode `agent`) of 20 steps against the
//! mock Cerebras API answering after a fixed latency (BENCH_LATENCY_MS, default 200). Each step
//! is a `read_file` tool call (streamed, arguments split over chunks), the 20th a `finish`.
//! brainloop's overhead per step is the time from the moment the mock's reply is complete to the
//! moment the next request arrives — parse, the step, the session saved, the next request built
//! and sent — reported as a ratio to the mock's latency measured in the same run (goal ≤ 2 % at
//! 200 ms). Prints figures; asserts only that the session finished.
//!
//! `cargo bench --bench llm_loop` (BENCH_LATENCY_MS, BENCH_STEPS).

#[path = "../tests/common/mock_llm.rs"]
mod mock_llm;
#[path = "common/results.rs"]
mod results;

use mock_llm::{tool_call_pieces, MockLlm, Reply};
use rusqlite::Connection;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn env_num(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn main() {
    let latency = Duration::from_millis(env_num("BENCH_LATENCY_MS", 200));
    let steps = env_num("BENCH_STEPS", 20) as usize;
    let dir = tempfile::tempdir().unwrap();
    let (data, ws) = (dir.path().join("data"), dir.path().join("ws"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "a short file\n").unwrap();
    let config = dir.path().join("brainloop.toml");
    std::fs::write(
        &config,
        "[clients.agent]\nfile_read = [\"{workspace}/**\"]\nllm = true\n",
    )
    .unwrap();

    // (request arrived, reply complete) per chat, as the mock saw them.
    let times: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let t2 = Arc::clone(&times);
    let mock = MockLlm::start(move |req| {
        if req.method == "GET" {
            return Reply::models(mock_llm::TODAY);
        }
        let arrived = Instant::now();
        let turn = req.turns();
        let pieces = if turn + 1 >= steps {
            tool_call_pieces(
                &format!("call_{turn}"),
                "finish",
                &json!({"summary": "done"}),
                100,
                20,
            )
        } else {
            tool_call_pieces(
                &format!("call_{turn}"),
                "read_file",
                &json!({"path": "notes.txt"}),
                100,
                20,
            )
        };
        std::thread::sleep(latency);
        // One write: the reply is complete when this returns (the mock writes it at once).
        t2.lock().unwrap().push((arrived, Instant::now()));
        Reply::Stream {
            pieces: vec![pieces.concat()],
            stall: false,
            headers: vec![],
        }
    });

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
        .env("BRAINLOOP_CONFIG", &config)
        .env("BRAINLOOP_LLM_BASE_URL", mock.base_url())
        .env("CEREBRAS_API_KEY", "bench")
        .env("BRAINLOOP_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = brainloop::db::open(&data, brainloop::db::DbKind::Input).unwrap();
    let params = json!({"mode": "agent", "goal": "read notes", "max_iterations": steps + 1});
    let id =
        brainloop::db::input::insert_job(&mut input, "loop", &params.to_string(), "agent", 0, None)
            .unwrap();
    let out = Connection::open(data.join("brainloop.output.db")).unwrap();
    let (status, v) = results::wait(
        &out,
        id,
        &["queued", "running"],
        Duration::from_secs(60 + steps as u64 * 10),
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = worker.wait();
    assert_eq!(status, "succeeded", "{v}");

    let t = times.lock().unwrap().clone();
    assert_eq!(t.len(), steps, "one request per step");
    let served: Vec<Duration> = t.iter().map(|(a, r)| *r - *a).collect();
    let overheads: Vec<Duration> = t.windows(2).map(|w| w[1].0 - w[0].1).collect();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    let mut sorted = overheads.clone();
    sorted.sort();
    let (m_over, m_lat) = (mean(&overheads), mean(&served));
    println!(
        "llm_loop: {steps} steps, mock latency {:.1} ms (measured), brainloop overhead per step: mean {:.2} ms, median {:.2} ms, max {:.2} ms → {:.2} % of the latency (goal ≤ 2 %)",
        m_lat.as_secs_f64() * 1e3,
        m_over.as_secs_f64() * 1e3,
        sorted[sorted.len() / 2].as_secs_f64() * 1e3,
        sorted.last().unwrap().as_secs_f64() * 1e3,
        100.0 * m_over.as_secs_f64() / m_lat.as_secs_f64()
    );
}
