//! Benchmark: parse + classify per command over the labeled corpus (issue 4).
//! `cargo bench --bench classify` prints p50 / p99 (goal: p50 ≤ 50 µs). Nothing is executed.

use std::hint::black_box;
use std::time::Instant;

use brainloop::classify::{check, parse, Context};

fn corpus() -> Vec<String> {
    include_str!("../tests/data/classify_corpus.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.splitn(5, " | ").nth(4))
        .map(|c| c.replace('⏎', "\n"))
        .collect()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "{name:<28} n={:<7} p50={:>7.1} µs  p90={:>7.1} µs  p99={:>7.1} µs  mean={:>7.1} µs  max={:>8.1} µs",
        v.len(),
        pct(&v, 0.50),
        pct(&v, 0.90),
        pct(&v, 0.99),
        mean,
        v.last().copied().unwrap_or(0.0)
    );
}

fn main() {
    let cmds = corpus();
    let ctx = Context::default();
    let rounds: usize = std::env::var("CLASSIFY_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    // warm-up: table, regexes, parser, caches
    for c in &cmds {
        black_box(check(c, &ctx));
    }
    let mut full = Vec::with_capacity(cmds.len() * rounds);
    let mut parse_only = Vec::with_capacity(cmds.len() * rounds);
    let mut per_cmd_median = Vec::with_capacity(cmds.len());
    let mut per_cmd: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cmds.len()];
    for _ in 0..rounds {
        for (i, c) in cmds.iter().enumerate() {
            let t = Instant::now();
            black_box(check(black_box(c), &ctx));
            let us = t.elapsed().as_secs_f64() * 1e6;
            full.push(us);
            per_cmd[i].push(us);
            let t = Instant::now();
            let _ = black_box(parse::parse_tree(black_box(c)));
            parse_only.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    for mut v in per_cmd {
        v.sort_by(|a, b| a.total_cmp(b));
        per_cmd_median.push(pct(&v, 0.5));
    }
    println!(
        "classify benchmark: {} corpus commands × {} rounds",
        cmds.len(),
        rounds
    );
    report("check() (parse+classify)", full);
    report("per-command median check()", per_cmd_median);
    report("tree-sitter parse only", parse_only);
}
