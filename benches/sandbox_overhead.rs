//! Sandbox overhead benchmark: prints figures, asserts nothing (`cargo bench --bench
//! sandbox_overhead`). N `true` commands per permission set through the executor with the real
//! helper (namespaces, Landlock, seccomp, cgroup, private tmp) against N unconfined
//! `bash -c true` through the same executor, in the same run; p50/p99 per command and the p50
//! added by confinement. Network sets run as the worker runs them: in their own network
//! namespace with the job's egress proxy (issue 23; `benches/egress.rs` isolates its cost).
//! Each set twice: with a cold helper (started for the command: exec, cgroup join, namespaces)
//! and with a warm one (`sandbox/warm.rs`: that part done ahead, as the worker does by default).
//! Env: BENCH_COMMANDS (default 1000).

use brainloop::bash::executor::{execute, filtered_env, ExecRequest};
use brainloop::permset::PermissionSet;
use brainloop::sandbox::{self, cgroup::JobCgroup, Limits};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn measure(
    n: usize,
    set: Option<PermissionSet>,
    warm: bool,
    ws: &std::path::Path,
) -> Vec<f64> {
    let limits = Limits::default();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        // What the worker does per command: tmp dir, cgroup, spec, run, cleanup.
        let mut proxy = None;
        let (sandbox, cg, tmp) = match set {
            None => (None, None, None),
            Some(set) => {
                let tmp = set.private_tmp().then(|| {
                    tempfile::Builder::new()
                        .prefix("bl-bench")
                        .tempdir()
                        .unwrap()
                });
                let reserved = if warm {
                    sandbox::warm::reserve(std::path::Path::new(BIN), &limits)
                } else {
                    None
                };
                let warm_id = reserved.as_ref().map(|r| r.id);
                let cg = match reserved {
                    Some(r) => r.cgroup,
                    None => {
                        JobCgroup::create(&format!("bl-bench-{}-{i}", std::process::id()), &limits)
                    }
                };
                let mut spec = sandbox::spec_for(
                    set,
                    "true",
                    ws,
                    ws,
                    &[],
                    tmp.as_ref().map(|t| t.path().to_path_buf()),
                    filtered_env(|k| std::env::var(k).ok()),
                    &limits,
                );
                if let Some(c) = &cg {
                    spec.cgroup_procs = c.procs_files();
                }
                spec.warm = warm_id;
                if set.network() {
                    use brainloop::egress::{proxy::JobProxy, resolve::Resolver, rules::Rules};
                    let p = JobProxy::start(
                        Rules::default(),
                        std::sync::Arc::new(Resolver::default()),
                        brainloop::egress::proxy::Bounds::default(),
                        &std::env::temp_dir(),
                    )
                    .unwrap();
                    p.route(&mut spec);
                    proxy = Some(p);
                }
                (Some((PathBuf::from(BIN), spec)), cg, tmp)
            }
        };
        let req = ExecRequest {
            command: "true".into(),
            workdir: ws.to_path_buf(),
            timeout: Duration::from_secs(30),
            sandbox,
        };
        let r = execute(&req, &CancellationToken::new()).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{}", r.stderr);
        if let Some(p) = proxy {
            p.finish().await;
        }
        if let Some(c) = cg {
            c.remove();
        }
        drop(tmp);
        // As the worker does after a job (`warm::replenish`): replacements once the command ran.
        if warm {
            sandbox::warm::replenish();
        }
        out.push(t.elapsed().as_secs_f64() * 1e3);
    }
    out
}

#[tokio::main]
async fn main() {
    // Warm helpers are on by default (`sandbox/warm.rs`), unless BRAINLOOP_SANDBOX_WARM=0 is set
    // around the bench: the warm rows need them on in this process.
    std::env::set_var("BRAINLOOP_SANDBOX_WARM", "1");
    let n: usize = std::env::var("BENCH_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    println!(
        "sandbox overhead — {n} `true` per row, sequential, through the executor (cgroup: {:?})\n",
        brainloop::sandbox::cgroup::flavour()
    );
    let mut base = measure(n, None, false, &ws).await;
    let b50 = pct(&mut base, 0.5);
    println!("| run | p50 ms | p99 ms | added at p50 |");
    println!("|---|---|---|---|");
    println!(
        "| unconfined bash -c true | {b50:.2} | {:.2} | — |",
        pct(&mut base, 0.99)
    );
    for set in [
        PermissionSet::Minimal,
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::NetworkApi,
        PermissionSet::McpStandard,
    ] {
        for warm in [false, true] {
            let mut v = measure(n, Some(set), warm, &ws).await;
            let p50 = pct(&mut v, 0.5);
            println!(
                "| {} ({}) | {p50:.2} | {:.2} | +{:.2} ms |",
                set.as_str(),
                if warm { "warm" } else { "cold" },
                pct(&mut v, 0.99),
                p50 - b50
            );
        }
    }
}
