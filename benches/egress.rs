//! Egress proxy overhead (issue 23): prints figures, asserts nothing (`cargo bench --bench
//! egress`). The same network-api command through the executor with the real helper, twice per
//! round, alternating: through the job's egress proxy (own network namespace, forwarder,
//! per-run proxy started and stopped, connection recorded in memory) and without it (the host's
//! network namespace, as before issue 23 — `best_effort` lets the helper run a network set
//! without a proxy). Commands: `true` (set-up cost only) and `curl` fetching a small page from a
//! local server on 127.0.0.1. Reports p50/p99 per command and the ratio with / without.
//! Env: BENCH_COMMANDS (default 200 per row).

use brainloop::bash::executor::{execute, filtered_env, ExecRequest};
use brainloop::egress::proxy::JobProxy;
use brainloop::egress::resolve::Resolver;
use brainloop::egress::rules::{HostRule, Rules};
use brainloop::permset::PermissionSet;
use brainloop::sandbox::{self, cgroup::JobCgroup, Limits};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A tiny HTTP server on 127.0.0.1 answering every request with a 13-byte page.
fn serve() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello-egress\n");
            });
        }
    });
    port
}

/// One command as the worker runs it; milliseconds.
async fn once(cmd: &str, ws: &Path, i: usize, via_proxy: bool, rule: &str) -> f64 {
    let limits = Limits::default();
    let t = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("bl-bench")
        .tempdir()
        .unwrap();
    let cg = JobCgroup::create(&format!("bl-bench-eg-{}-{i}", std::process::id()), &limits);
    let mut spec = sandbox::spec_for(
        PermissionSet::NetworkApi,
        cmd,
        ws,
        ws,
        &[],
        Some(tmp.path().to_path_buf()),
        filtered_env(|k| std::env::var(k).ok()),
        &limits,
    );
    if let Some(c) = &cg {
        spec.cgroup_procs = c.procs_files();
    }
    let proxy = if via_proxy {
        let rules = Rules {
            rules: vec![HostRule::parse(rule, "bench").unwrap()],
        };
        let p = JobProxy::start(
            rules,
            Arc::new(Resolver::default()),
            brainloop::egress::proxy::Bounds::default(),
            &std::env::temp_dir(),
        )
        .unwrap();
        p.route(&mut spec);
        Some(p)
    } else {
        spec.best_effort = true;
        None
    };
    let req = ExecRequest {
        command: cmd.into(),
        workdir: ws.to_path_buf(),
        timeout: Duration::from_secs(30),
        sandbox: Some((PathBuf::from(BIN), spec)),
    };
    let r = execute(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{cmd}: {}{}", r.stdout, r.stderr);
    if let Some(p) = proxy {
        p.finish().await;
    }
    if let Some(c) = cg {
        c.remove();
    }
    t.elapsed().as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let port = serve();
    let rule = format!("127.0.0.1:{port}");
    let curl = format!("curl -sf -o /dev/null http://127.0.0.1:{port}/");
    println!(
        "egress proxy overhead — network-api, {n} commands per row, alternating with / without\n"
    );
    println!("| command | without proxy p50 / p99 ms | with proxy p50 / p99 ms | ratio p50 |");
    println!("|---|---|---|---|");
    for (name, cmd) in [
        ("true", "true".to_string()),
        ("curl 127.0.0.1 (1 request)", curl),
    ] {
        let (mut with, mut without) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            without.push(once(&cmd, &ws, 2 * i, false, &rule).await);
            with.push(once(&cmd, &ws, 2 * i + 1, true, &rule).await);
        }
        let (w50, w99) = (pct(&mut with, 0.5), pct(&mut with, 0.99));
        let (o50, o99) = (pct(&mut without, 0.5), pct(&mut without, 0.99));
        println!(
            "| {name} | {o50:.2} / {o99:.2} | {w50:.2} / {w99:.2} | {:.2} |",
            w50 / o50
        );
    }
}
