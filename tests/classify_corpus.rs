//! The labeled classification corpus (issue 4): every case in
//! `tests/data/classify_corpus.txt` asserts blocked/not (or refused), pure/not and the
//! command's category. Classification only — nothing in the corpus is ever executed.

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
        let verdict = if !r.valid {
            "invalid"
        } else if r.blocked {
            "block"
        } else {
            "ok"
        };
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
