//! `read_code` fallback extraction for languages without a grammar here (SQL; see `syntax.rs`
//! for the parsed ones): per-language line patterns (seed 001's "extraction métadonnées par
//! regex") for functions, types, imports, tests, TODO/FIXME and line counts, reported as
//! `"parser": "patterns"`. It describes a file for an agent; it is not a security decision, so
//! approximate results on exotic formatting are acceptable. The Rust, Go, Python and JS/TS rows
//! stay as the tests' cross-check of the parsed extraction.

use regex::Regex;
use serde_json::{json, Value};
use std::sync::LazyLock;

/// One language's patterns. Capture group `name` is the item's name; `kind` (optional) its kind.
struct Rules {
    functions: Vec<&'static str>,
    types: Vec<&'static str>,
    imports: Vec<&'static str>,
    /// Patterns naming a test directly.
    tests: Vec<&'static str>,
    /// A line marking the next function as a test (Rust `#[test]`).
    test_marker: Option<&'static str>,
    line_comment: &'static str,
}

fn rules(lang: &str) -> Option<Rules> {
    Some(match lang {
        "rust" => Rules {
            functions: vec![
                r#"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)"#,
            ],
            types: vec![
                r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?P<kind>struct|enum|trait|type|union)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
            ],
            imports: vec![
                r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(?P<name>[^;]+);",
                r"^\s*extern\s+crate\s+(?P<name>\w+)",
            ],
            tests: vec![],
            test_marker: Some(r"^\s*#\[(?:[\w:]+::)?test\b"),
            line_comment: "//",
        },
        "go" => Rules {
            functions: vec![r"^func\s+(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*)"],
            types: vec![
                r"^type\s+(?P<name>[A-Za-z_]\w*)\s+(?P<kind>struct|interface|func|map|\[\]|\w+)",
            ],
            imports: vec![
                r#"^import\s+(?:\w+\s+)?"(?P<name>[^"]+)""#,
                r#"^\s+(?:[\w.]+\s+)?"(?P<name>[^"]+)"\s*$"#,
            ],
            tests: vec![r"^func\s+(?P<name>(?:Test|Benchmark|Fuzz|Example)\w*)\s*\("],
            test_marker: None,
            line_comment: "//",
        },
        "python" => Rules {
            functions: vec![r"^\s*(?:async\s+)?def\s+(?P<name>[A-Za-z_]\w*)"],
            types: vec![r"^\s*(?P<kind>class)\s+(?P<name>[A-Za-z_]\w*)"],
            imports: vec![
                r"^\s*import\s+(?P<name>[\w., ]+)",
                r"^\s*from\s+(?P<name>[\w.]+)\s+import\b",
            ],
            tests: vec![
                r"^\s*(?:async\s+)?def\s+(?P<name>test\w*)",
                r"^\s*class\s+(?P<name>Test\w*)",
            ],
            test_marker: None,
            line_comment: "#",
        },
        "javascript" | "typescript" => Rules {
            functions: vec![
                r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>[A-Za-z_$][\w$]*)",
                r"^\s*(?:export\s+)?(?:const|let|var)\s+(?P<name>[A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*(?:async\s+)?(?:function\b|\([^)]*\)\s*(?::\s*[^=]+)?=>|[A-Za-z_$][\w$]*\s*=>)",
            ],
            types: vec![
                r"^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+)?(?P<kind>class)\s+(?P<name>[A-Za-z_$][\w$]*)",
                r"^\s*(?:export\s+)?(?:declare\s+)?(?P<kind>interface|type|enum)\s+(?P<name>[A-Za-z_$][\w$]*)",
            ],
            imports: vec![
                r#"^\s*import\s+(?:type\s+)?(?:[^'"]*\s+from\s+)?['"](?P<name>[^'"]+)['"]"#,
                r#"require\(\s*['"](?P<name>[^'"]+)['"]\s*\)"#,
                r#"^\s*export\s+(?:\*|\{[^}]*\})\s+from\s+['"](?P<name>[^'"]+)['"]"#,
            ],
            tests: vec![r#"^\s*(?:it|test|describe)(?:\.\w+)?\(\s*['"`](?P<name>[^'"`]+)['"`]"#],
            test_marker: None,
            line_comment: "//",
        },
        "sql" => Rules {
            functions: vec![
                r"(?i)^\s*create\s+(?:or\s+replace\s+)?(?:function|procedure)\s+(?:if\s+not\s+exists\s+)?(?P<name>[\w.]+)",
            ],
            types: vec![
                r#"(?i)^\s*create\s+(?:temp\s+|temporary\s+|virtual\s+|unique\s+)?(?P<kind>table|view|index|trigger)\s+(?:if\s+not\s+exists\s+)?["`\[]?(?P<name>[\w.]+)"#,
            ],
            imports: vec![r#"(?i)^\s*attach\s+(?:database\s+)?'(?P<name>[^']+)'"#],
            tests: vec![],
            test_marker: None,
            line_comment: "--",
        },
        _ => return None,
    })
}

static CACHE: LazyLock<std::sync::Mutex<std::collections::HashMap<&'static str, Option<Regex>>>> =
    LazyLock::new(Default::default);

/// Compiled once; a pattern that fails to compile (a bug the tests catch) matches nothing.
fn rx(p: &'static str) -> Option<Regex> {
    let mut c = match CACHE.lock() {
        Ok(c) => c,
        Err(e) => e.into_inner(),
    };
    c.entry(p).or_insert_with(|| Regex::new(p).ok()).clone()
}

fn collect(patterns: &[&'static str], line: &str, lineno: usize, out: &mut Vec<Value>) {
    for p in patterns {
        let Some(re) = rx(p) else { continue };
        for caps in re.captures_iter(line) {
            if let Some(name) = caps.name("name") {
                let mut v = json!({"name": name.as_str().trim(), "line": lineno,
                    "signature": line.trim().chars().take(400).collect::<String>()});
                if let Some(k) = caps.name("kind") {
                    v["kind"] = json!(k.as_str().to_ascii_lowercase());
                }
                out.push(v);
            }
        }
    }
}

pub fn extract(lang: &str, text: &str) -> Result<Value, String> {
    let lang = match lang.to_ascii_lowercase().as_str() {
        "rs" => "rust".to_string(),
        "py" => "python".to_string(),
        "js" => "javascript".to_string(),
        "ts" => "typescript".to_string(),
        other => other.to_string(),
    };
    let r = rules(&lang).ok_or_else(|| {
        format!("unsupported language {lang:?} (rust, go, python, javascript, typescript, sql)")
    })?;
    let (mut functions, mut types, mut imports, mut tests) = (vec![], vec![], vec![], vec![]);
    let (mut blank, mut comment) = (0, 0);
    let mut pending_test = false;
    let mut in_go_import_block = false;
    let mut todos = vec![];
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if let Some((tag, text)) = t
            .find(r.line_comment)
            .and_then(|at| super::syntax::todo_in(&t[at..]))
        {
            todos.push(json!({"line": n, "tag": tag, "text": text}));
        }
        if t.is_empty() {
            blank += 1;
            continue;
        }
        if t.starts_with(r.line_comment) {
            comment += 1;
            continue;
        }
        if let Some(m) = r.test_marker.and_then(rx) {
            if m.is_match(line) {
                pending_test = true;
                continue;
            }
        }
        let before = functions.len();
        collect(&r.functions, line, n, &mut functions);
        if pending_test && functions.len() > before {
            if let Some(f) = functions.last() {
                tests.push(f.clone());
            }
            pending_test = false;
        }
        collect(&r.types, line, n, &mut types);
        if lang == "go" {
            if t.starts_with("import (") {
                in_go_import_block = true;
                continue;
            }
            if in_go_import_block {
                if t.starts_with(')') {
                    in_go_import_block = false;
                } else {
                    collect(&r.imports[1..], line, n, &mut imports);
                }
                continue;
            }
            collect(&r.imports[..1], line, n, &mut imports);
        } else {
            collect(&r.imports, line, n, &mut imports);
        }
        collect(&r.tests, line, n, &mut tests);
    }
    let total = text.lines().count();
    Ok(json!({
        "parser": "patterns",
        "language": lang,
        "exports": [],
        "todos": todos,
        "functions": functions,
        "types": types,
        "imports": imports,
        "tests": tests,
        "lines": {"total": total, "blank": blank, "comment": comment, "code": total - blank - comment},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_pattern_compiles() {
        for lang in ["rust", "go", "python", "javascript", "sql"] {
            let r = rules(lang).unwrap();
            for p in r
                .functions
                .iter()
                .chain(&r.types)
                .chain(&r.imports)
                .chain(&r.tests)
                .chain(r.test_marker.iter())
            {
                assert!(Regex::new(p).is_ok(), "{lang}: {p}");
            }
        }
    }

    fn names(v: &Value, key: &str) -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn fixtures_by_language() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/code");
        // (file, functions, types, imports, tests)
        type Case<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
        );
        let expect: &[Case] = &[
            (
                "sample.rs",
                &["parse", "run", "helper", "parses_numbers"],
                &["Config", "Mode", "Store"],
                &["std::collections::HashMap", "serde::Deserialize"],
                &["parses_numbers"],
            ),
            (
                "sample.go",
                &["NewServer", "Start", "TestStart"],
                &["Server", "Handler"],
                &["fmt", "net/http"],
                &["TestStart"],
            ),
            (
                "sample.py",
                &["load", "fetch", "test_load"],
                &["Loader", "TestLoader"],
                &["os", "typing"],
                &["TestLoader", "test_load"],
            ),
            (
                "sample.ts",
                &["main", "add", "fetchUser"],
                &["Client", "User", "Id"],
                &["./db", "node:fs", "lodash"],
                &["adds numbers"],
            ),
            (
                "sample.sql",
                &["touch_updated"],
                &["users", "orders", "active_users", "users_email"],
                &[],
                &[],
            ),
        ];
        for (file, funcs, types, imports, tests) in expect {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let d = extract(super::super::language_of(&path).unwrap(), &text).unwrap();
            for f in *funcs {
                assert!(
                    names(&d, "functions").contains(&f.to_string()),
                    "{file}: function {f} in {d}"
                );
            }
            for t in *types {
                assert!(
                    names(&d, "types").contains(&t.to_string()),
                    "{file}: type {t} in {d}"
                );
            }
            for i in *imports {
                assert!(
                    names(&d, "imports").iter().any(|x| x.contains(i)),
                    "{file}: import {i} in {d}"
                );
            }
            assert_eq!(
                names(&d, "tests"),
                tests.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{file}"
            );
        }
    }
}
