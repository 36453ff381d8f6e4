//! run_code engine benchmark: prepare (infer + instrument) + fresh QuickJS runtime + run of a
//! small pure program, and of a TypeScript one (adds type stripping), and a program with 10
//! tool calls answered in-process. Prints p50 / p99 over N runs (BENCH_RUNS, default 300).

use brainloop::infer::Lang;
use brainloop::runcode::engine::Limits;
use brainloop::runcode::standalone::run_standalone;
use std::time::{Duration, Instant};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn bench(name: &str, code: &str, lang: Lang, runs: usize) {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let (f, _) =
            run_standalone(code, lang, Limits::default(), |c| Ok(c.params.clone())).expect("runs");
        assert!(f.value.is_ok(), "{:?}", f.value);
        times.push(t.elapsed());
    }
    let p50 = pct(&mut times, 0.50);
    let p99 = pct(&mut times, 0.99);
    println!(
        "{name:<40} runs={runs:<5} p50={:>8.3} ms  p99={:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    bench(
        "pure js (filter/map/reduce)",
        "const users = [{n: 'a', age: 30, active: true}, {n: 'b', age: 40, active: false}, {n: 'c', age: 50, active: true}];\nconst active = users.filter(u => u.active);\nconst avg = active.reduce((s, u) => s + u.age, 0) / active.length;\nreturn {names: active.map(u => u.n), avg: Math.round(avg)};",
        Lang::Js,
        runs,
    );
    bench(
        "pure ts (types stripped)",
        "interface U { n: string; age: number; active: boolean }\nconst users: U[] = [{n: 'a', age: 30, active: true}, {n: 'b', age: 40, active: false}];\nconst active: U[] = users.filter((u: U): boolean => u.active);\nreturn active.map((u: U) => u.n as string);",
        Lang::Ts,
        runs,
    );
    bench(
        "10 tool calls (answered in-process)",
        "const out = [];\nfor (let i = 0; i < 10; i++) { const r = await mcp.brainloop.get_stats({i}); out.push(r.i); }\nreturn out;",
        Lang::Js,
        runs,
    );
}
