//! The labeled classification corpus (issue 4): every case in
//! `tests/data/classify_corpus.txt` (the shell's own cases) and every command example of the
//! program entries (`src/programs/*.toml`, issue 52; pure when its category is pure and its
//! verdict ok) asserts blocked/not (or refused), pure/not and the command's category.
//! Classification only — nothing in the corpus is ever executed.

use std::collections::BTreeMap;

use brainloop::classify::{check, Context};

struct Case {
    line: usize,
    group: String,
    verdict: String,
    purity: String,
    category: String,
    command: String,
}

fn cases() -> Vec<Case> {
    let text = include_str!("data/classify_corpus.txt");
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() || raw.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = raw.splitn(5, " | ").collect();
        assert_eq!(parts.len(), 5, "line {}: malformed case `{raw}`", i + 1);
        out.push(Case {
            line: i + 1,
            group: parts[0].trim().to_string(),
            verdict: parts[1].trim().to_string(),
            purity: parts[2].trim().to_string(),
            category: parts[3].trim().to_string(),
            command: parts[4].replace('⏎', "\n"),
        });
    }
    for e in brainloop::programs::builtin().unwrap().programs {
        for x in &e.examples {
            let (Some(cmd), Some(verdict), Some(category)) = (&x.command, &x.verdict, &x.category)
            else {
                continue;
            };
            let pure = category == "pure" && verdict == "ok";
            out.push(Case {
                line: x.from.as_ref().map(|o| o.line).unwrap_or(0),
                group: e
                    .origin
                    .file
                    .trim_start_matches("src/programs/")
                    .to_string(),
                verdict: verdict.clone(),
                purity: if pure { "pure" } else { "impure" }.to_string(),
                category: category.clone(),
                command: cmd.clone(),
            });
        }
    }
    out
}

#[test]
fn corpus() {
    let cases = cases();
    let ctx = Context::default();
    let mut failures = Vec::new();
    let mut by_group: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for c in &cases {
        let r = check(&c.command, &ctx);
        let verdict = r.verdict();
        let purity = if r.pure { "pure" } else { "impure" };
        let category = r.category.as_str();
        let e = by_group.entry(c.group.clone()).or_default();
        e.0 += 1;
        let mut wrong = Vec::new();
        if verdict != c.verdict {
            wrong.push(format!("verdict {verdict} (want {})", c.verdict));
        }
        if purity != c.purity {
            wrong.push(format!("purity {purity} (want {})", c.purity));
        }
        if category != c.category {
            wrong.push(format!("category {category} (want {})", c.category));
        }
        // invariants every report must hold
        if r.pure
            && (r.blocked || !r.valid || r.requires_validation || r.permission_set != "minimal")
        {
            wrong.push("pure report with blocked/invalid/validation/set".into());
        }
        if !r.valid && r.pure {
            wrong.push("invalid but pure".into());
        }
        if r.blocked && r.risk_score < 1.0 {
            wrong.push("blocked with risk < 1".into());
        }
        if wrong.is_empty() {
            e.1 += 1;
        } else {
            failures.push(format!(
                "line {} [{}] `{}`: {}\n    reasons: {:?}\n    ops: {:?}",
                c.line,
                c.group,
                c.command.replace('\n', "⏎"),
                wrong.join(", "),
                r.reasons,
                r.operations
                    .iter()
                    .map(|o| format!("{}:{}", o.op, o.category.as_str()))
                    .collect::<Vec<_>>()
            ));
        }
    }
    println!("classification corpus: {} cases", cases.len());
    for (g, (n, ok)) in &by_group {
        println!("  {g:<12} {ok:>4}/{n:<4} correct");
    }
    assert!(
        cases.len() >= 400,
        "the corpus must hold at least 400 cases"
    );
    assert!(
        failures.is_empty(),
        "{} corpus failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn reports_serialize_with_the_design_fields() {
    let r = check(
        "cat data.csv | grep x | sort | uniq -c > out.txt && curl -s https://api.example.com",
        &Context::default(),
    );
    let v = serde_json::to_value(&r).expect("serialises");
    for f in [
        "command_hash",
        "valid",
        "blocked",
        "reasons",
        "risk_score",
        "permission_set",
        "confidence",
        "detected_patterns",
        "pure",
        "requires_validation",
        "operations",
        "layers",
        "classifier_version",
    ] {
        assert!(v.get(f).is_some(), "missing field {f}");
    }
    for op in v["operations"].as_array().expect("array") {
        for f in ["op", "program", "category", "pure", "layer"] {
            assert!(op.get(f).is_some(), "operation misses {f}");
        }
    }
}

#[test]
fn refusals_are_clear() {
    let ctx = Context::default();
    for bad in ["", "   ", "ls\0-la", &"x".repeat(4097)] {
        let r = check(bad, &ctx);
        assert!(!r.valid && !r.pure && r.requires_validation, "{bad:?}");
        assert!(r.error.is_some());
    }
}

/// Hostile shapes and random token soup: never a panic, never a stack overflow on a 2 MiB
/// thread (tokio's default worker stack), bounded time, and never "pure" when invalid.
#[test]
fn robustness_on_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let ctx = Context::default();
            let mut inputs: Vec<String> = vec![
                format!("echo {}x{}", "$(".repeat(600), ")".repeat(600)),
                format!("{}x{}", "(".repeat(1300), ")".repeat(1300)),
                format!("echo {}x{}", "$(".repeat(30), ")".repeat(30)),
                format!("{}:{}", "{ ".repeat(30), "; }".repeat(30)),
                // sh -c nested deeper than the walker goes
                (0..8).fold("rm -rf /".to_string(), |acc, _| {
                    format!("sh -c {}", shell_quote(&acc))
                }),
                (0..12).fold("rm -rf /".to_string(), |acc, _| {
                    format!("sh -c {}", shell_quote(&acc))
                }),
                // exponential function calls
                format!(
                    "f0(){{ echo; }}; {} f24",
                    (1..25)
                        .map(|i| format!("f{i}(){{ f{p}; f{p}; }};", p = i - 1))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                "x".repeat(4096),
                "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}{s,t}".to_string(),
                "echo {1..100000}".to_string(),
            ];
            let tokens = [
                "rm",
                " -rf",
                " /",
                "$(",
                ")",
                "`",
                "'",
                "\"",
                " | ",
                " && ",
                "; ",
                "{ ",
                " }",
                "(",
                ")",
                " <<EOF\n",
                "\nEOF\n",
                "$IFS",
                "sh -c ",
                "eval ",
                "\\",
                " ",
                "x",
                "~",
                "*",
                "f(){ ",
                " & ",
                " > ",
                "<(",
                "$((",
                "))",
                "\n",
                "${",
                "}",
                "xargs ",
                "find / -exec ",
                " {} +",
                "env -S ",
                "$'\\x72'",
                "a=",
                "$a",
                " 2>&1",
                "<<<",
                "#",
                "[[ ",
                " ]]",
                "case ",
                " in ",
                "esac",
            ];
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            for _ in 0..3000 {
                let mut s = String::new();
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let n = 1 + (seed % 24) as usize;
                for _ in 0..n {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    s.push_str(tokens[(seed % tokens.len() as u64) as usize]);
                }
                inputs.push(s);
            }
            let mut slowest = 0.0f64;
            for s in &inputs {
                let t = std::time::Instant::now();
                let r = check(s, &ctx);
                slowest = slowest.max(t.elapsed().as_secs_f64());
                assert!(!(r.pure && (!r.valid || r.blocked)), "{s:?}");
                assert!(r.operations.len() <= 2000, "{s:?}");
                if s.contains("rm -rf /") && s.starts_with("sh -c") {
                    assert!(
                        r.blocked || !r.valid,
                        "nested sh -c must be blocked or refused: {s:?}"
                    );
                }
            }
            slowest
        })
        .expect("spawn");
    let slowest = handle.join().expect("no panic, no stack overflow");
    assert!(slowest < 2.0, "slowest check took {slowest:.3}s");
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Builtins that run shell code or rebind a variable through a side door: never pure, and
/// the hidden program counts as a computed name (SYSTEM_COMMAND '*' needed, never promoted)
/// or the rebinding as an `assign:` env operation. Classification only.
#[test]
fn builtin_side_doors_are_never_pure() {
    // (command, op that must be present)
    let table: &[(&str, &str)] = &[
        ("mapfile -C rm x", "bash:<dynamic>"),
        ("readarray -t -C 'rm x' -c1 a < y", "bash:<dynamic>"),
        ("compgen -C 'rm x' -W a", "bash:<dynamic>"),
        ("compgen -F f -W a", "bash:<dynamic>"),
        ("hash -p /usr/bin/curl cat; cat", "bash:<dynamic>"),
        ("printf -v 'a[$(rm y)]' %s x", "bash:<dynamic>"),
        ("test -v 'a[$(rm y)]'", "bash:<dynamic>"),
        ("declare \"a[\\$(rm y)]=1\"", "bash:<dynamic>"),
        ("read 'a[$(rm y)]' <<< 1", "bash:<dynamic>"),
        ("a[$(rm x)]=1", "bash:rm"),
        ("x='$(rm y)'; echo ${x@P}", "bash:<unanalysable>"),
        ("printf -v PATH %s .; cat", "assign:PATH"),
        ("read PATH <<< .; cat", "assign:PATH"),
        ("unset PATH; cat", "assign:PATH"),
        ("getopts a PATH", "assign:PATH"),
        ("wait -p PATH", "assign:PATH"),
        ("let PATH=1", "assign:PATH"),
        ("declare -n p=PATH; p=.; cat", "assign:PATH"),
        ("mapfile -t BASH_ENV < x", "assign:BASH_ENV"),
    ];
    let mut bad = Vec::new();
    for (cmd, want) in table {
        let r = check(cmd, &Context::default());
        let ops: Vec<&str> = r.operations.iter().map(|o| o.op.as_str()).collect();
        if r.pure || !ops.contains(want) {
            bad.push(format!("`{cmd}`: pure={} ops={ops:?}", r.pure));
        }
    }
    assert!(bad.is_empty(), "side doors missed:\n{}", bad.join("\n"));
    // plain uses stay pure
    for cmd in [
        "read -r line <<< x",
        "printf -v out %s x",
        "let i=1+2",
        "mapfile -t a <<< x",
    ] {
        assert!(
            check(cmd, &Context::default()).pure,
            "`{cmd}` should stay pure"
        );
    }
}
