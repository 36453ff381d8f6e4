//! Permission inference benchmark: prints figures, asserts nothing (run:
//! `cargo bench --bench infer`). Parses and infers a generated 100-line and 2,000-line
//! TypeScript agent file (tool calls, pure array/string/Math operations, interfaces, functions,
//! loops) and prints the median and p99 of `infer` (parse + detect + operations + DAG +
//! re-validation of pure tasks) and of the oxc parse alone. Goal: well under 1 ms for 100 lines.
//!
//! Env: BENCH_INFER_ITERS (default 2000 for 100 lines; a tenth of it for 2,000 lines).

use brainloop::infer::{infer, parse, Lang, McpPermissions};
use std::time::{Duration, Instant};

/// A 20-line block of typical agent TypeScript; `i` makes every block distinct.
fn block(i: usize) -> String {
    format!(
        r##"interface Row{i} {{ id: number; name: string; active: boolean; score: number }}
const rows{i}: Row{i}[] = (await mcp.db.query({{ sql: "SELECT * FROM t{i}" }})) as Row{i}[];
const active{i} = rows{i}.filter((r) => r.active && r.score > {i});
const names{i} = active{i}.map((r) => r.name.trim().toLowerCase()).join(", ");
const total{i} = active{i}.reduce((s, r) => s + r.score, 0);
const avg{i} = active{i}.length > 0 ? total{i} / active{i}.length : 0;
const rounded{i} = Math.round(avg{i} * 100) / 100;
function label{i}(r: Row{i}): string {{
  return `${{r.id}}:${{r.name}}`.padStart(12, " ");
}}
const labels{i} = active{i}.slice(0, 10).map(label{i});
const byId{i} = Object.fromEntries(active{i}.map((r) => [r.id, r]));
const keys{i} = Object.keys(byId{i}).sort();
for (const k of keys{i}) {{
  if (k.length > 3 || !byId{i}[k]) {{
    continue;
  }}
}}
const report{i} = JSON.stringify({{ names: names{i}, avg: rounded{i}, labels: labels{i} }});
await mcp.slack.send({{ channel: "#ops", text: report{i} }});
"##
    )
}

fn file(lines: usize) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.lines().count() < lines {
        s.push_str(&block(i));
        i += 1;
    }
    s.lines().take(lines).collect::<Vec<_>>().join("\n") + "\n"
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let med = v[v.len() / 2];
    let p99 = v[((v.len() as f64) * 0.99) as usize - 1];
    (med, p99)
}

fn measure(iters: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..iters.min(50) {
        f();
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    stats(times)
}

fn main() {
    let iters: usize = std::env::var("BENCH_INFER_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mapping = McpPermissions::defaults();
    println!("| file | bytes | operations | tasks | step | median | p99 |");
    println!("|---|---|---|---|---|---|---|");
    for (lines, n) in [(100usize, iters), (2000usize, (iters / 10).max(20))] {
        let code = file(lines);
        let r = infer(&code, Lang::Ts, &mapping);
        assert!(
            r.error.is_none(),
            "generated code must parse: {:?}",
            r.error
        );
        let (pm, pp) = measure(n, || {
            let alloc = oxc_allocator::Allocator::default();
            let p = parse::parse(&alloc, &code, Lang::Ts);
            std::hint::black_box(p.is_ok());
        });
        let (im, ip) = measure(n, || {
            std::hint::black_box(infer(&code, Lang::Ts, &mapping));
        });
        for (step, m, p) in [("parse", pm, pp), ("parse + infer", im, ip)] {
            println!(
                "| {lines} lines | {} | {} | {} | {step} | {:.3} ms | {:.3} ms |",
                code.len(),
                r.operations.len(),
                r.tasks.len(),
                m.as_secs_f64() * 1e3,
                p.as_secs_f64() * 1e3
            );
        }
    }
}
