//! The layers only point down (issue 32): every `crate::` path in every source file — `use`
//! lines, grouped `use crate::{a, b}`, inline paths such as `crate::sandbox::prepare(`, and
//! `super::` chains that climb to the crate root — names a top-level module of a lower layer
//! than the file's own, per the layer table in ARCHITECTURE.md ("## Layers"). Modules of one
//! layer never import each other, so there is no import cycle between top-level modules.
//!
//! The table is read from ARCHITECTURE.md itself: the document and the check cannot drift.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Reads `| N | `a`, `b` | … |` rows under the `## Layers` heading: module → layer.
fn layer_table() -> BTreeMap<String, u32> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md is readable");
    let section = doc
        .split("\n## Layers")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut table = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(layer) = cells[1].parse::<u32>() else {
            continue;
        };
        for m in cells[2].split(',') {
            let m = m.trim().trim_matches('`');
            if !m.is_empty() {
                assert!(
                    table.insert(m.to_string(), layer).is_none(),
                    "module {m} is listed twice in the layer table"
                );
            }
        }
    }
    assert!(!table.is_empty(), "the layer table has no rows");
    table
}

/// The line breaks inside a blanked literal or comment, so that line numbers stay true.
fn newlines(text: &[u8]) -> String {
    "\n".repeat(text.iter().filter(|&&c| c == b'\n').count())
}

/// Source text with comments, string and char literals blanked (a path inside a doc comment
/// or a message is not an import).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let start = i;
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            out.push_str(&newlines(&b[start..i.min(b.len())]));
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // raw string r"…" / r#"…"#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"'
                    && b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            out.push_str(&newlines(&b[i..j.min(b.len())]));
            i = j;
        } else if c == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
            out.push_str(&newlines(&b[start..i.min(b.len())]));
        } else if c == b'\'' {
            // a char literal ('x', '\n', '\'', '"') or a lifetime ('a)
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            // keep multi-byte characters whole
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The spans of inline modules (`mod tests { … }`): a `super::` inside one climbs one more level.
fn inline_modules(code: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if at > 0 {
            let prev = code.as_bytes()[at - 1];
            if prev.is_ascii_alphanumeric() || prev == b'_' {
                continue;
            }
        }
        let rest = &code[at + 4..];
        let Some(name) = ident_at(rest.trim_start()) else {
            continue;
        };
        let after = rest.trim_start()[name.len()..].trim_start();
        if !after.starts_with('{') {
            continue; // `mod x;`
        }
        let open = code.len() - after.len();
        let mut depth = 0usize;
        for (i, ch) in code[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        spans.push((open, open + i));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    spans
}

/// The top-level modules a file's code names: `crate::X…`, `crate::{X, Y::…}`, and
/// `super::…::X` chains that climb to the crate root from a file `depth` modules deep.
fn referenced_top_modules(code: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let inline = inline_modules(code);
    let depth_at = |i: usize| depth + inline.iter().filter(|(a, b)| *a < i && i < *b).count();
    let tokens = code.match_indices("crate::").map(|(i, _)| (i, 7, 0usize));
    let supers = code.match_indices("super::").filter_map(|(i, _)| {
        // only the first `super::` of a chain
        let before = code[..i].trim_end();
        if before.ends_with("super::") {
            return None;
        }
        let mut n = 0;
        let mut j = i;
        while code[j..].starts_with("super::") {
            n += 1;
            j += 7;
        }
        (n == depth_at(i)).then_some((i, j - i, n))
    });
    for (at, len, _) in tokens.chain(supers) {
        if at > 0 {
            let prev = code.as_bytes()[at - 1];
            if prev.is_ascii_alphanumeric() || prev == b'_' || prev == b'$' {
                continue; // `$crate::` in a macro, or an identifier ending in `crate`
            }
        }
        let rest = &code[at + len..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth_b = 1;
            let mut item = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth_b += 1,
                    '}' => depth_b -= 1,
                    _ => {}
                }
                if depth_b == 0 || (depth_b == 1 && ch == ',') {
                    if let Some(id) = ident_at(item.trim()) {
                        out.push(id.to_string());
                    }
                    item.clear();
                    if depth_b == 0 {
                        break;
                    }
                } else if depth_b >= 1 && !(depth_b == 1 && ch == '{') {
                    item.push(ch);
                }
            }
        } else if let Some(id) = ident_at(rest) {
            out.push(id.to_string());
        }
    }
    out
}

fn rust_files(dir: &Path, acc: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("src is readable").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, acc);
        } else if p.extension().is_some_and(|x| x == "rs") {
            acc.push(p);
        }
    }
}

/// (top-level module, depth of the file's module below the crate root)
fn owner(src: &Path, file: &Path) -> Option<(String, usize)> {
    let rel: Vec<String> = file
        .strip_prefix(src)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = rel.last()?.trim_end_matches(".rs").to_string();
    if rel.len() == 1 {
        if last == "main" || last == "lib" {
            return None; // the crate roots wire everything together
        }
        return Some((last, 1));
    }
    let depth = if last == "mod" {
        rel.len() - 1
    } else {
        rel.len()
    };
    Some((rel[0].clone(), depth))
}

#[test]
fn the_scanner_sees_every_form_of_path() {
    let code = code_only(
        "use crate::{db::{self, Stores}, time};\n\
         // crate::cli::not_code\n\
         let s = \"crate::cli::in_a_string\";\n\
         let r = r#\"crate::cli::raw\"#;\n\
         let c = '\"'; let x = crate::sandbox::prepare(&spec);\n\
         fn f<'a>(v: &'a str) { crate::quote::prefix(v, 1); }\n\
         use super::super::llm::Llm;",
    );
    let mut got = referenced_top_modules(&code, 2);
    got.sort();
    assert_eq!(got, ["db", "llm", "quote", "sandbox", "time"]);
    // one `super::` from a file two modules deep stays inside its own top-level module
    assert!(referenced_top_modules(&code_only("use super::x::Y;"), 2).is_empty());
    // … and so does a `super::` in an inline module of a top-level file
    let tests = code_only("mod tests { use super::*; fn f() { super::g(); } }");
    assert!(referenced_top_modules(&tests, 1).is_empty());
    let up = code_only("mod tests { use super::super::db::Stores; }");
    assert_eq!(referenced_top_modules(&up, 1), ["db"]);
}

#[test]
fn every_import_points_down_the_layer_table() {
    let layers = layer_table();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut unlisted = BTreeSet::new();
    let mut upward = BTreeSet::new();
    for file in &files {
        let Some((module, depth)) = owner(&src, file) else {
            continue;
        };
        let Some(&own) = layers.get(&module) else {
            unlisted.insert(module);
            continue;
        };
        let text = fs::read_to_string(file).expect("source is readable");
        for target in referenced_top_modules(&code_only(&text), depth) {
            if target == module {
                continue;
            }
            match layers.get(&target) {
                None => {
                    unlisted.insert(target);
                }
                Some(&l) if l >= own => {
                    let rel = file
                        .strip_prefix(root)
                        .unwrap_or(file)
                        .display()
                        .to_string();
                    upward.insert(format!(
                        "{rel}: {module} (layer {own}) uses {target} (layer {l})"
                    ));
                }
                Some(_) => {}
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "modules missing from ARCHITECTURE.md's layer table: {unlisted:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that do not point down the layers ({}):\n{}",
        upward.len(),
        upward.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Functions longer than this many lines need a sentence above them saying why.
const LONG_FUNCTION: usize = 150;

/// `(name, first line, last line)` (0-based) of every `fn` with a body in `code` (comments and
/// literals blanked, line breaks kept).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(at) = line.find("fn ") else {
            continue;
        };
        let before = line[..at].trim();
        let is_item = before.is_empty()
            || before.split_whitespace().all(|w| {
                matches!(w, "pub" | "async" | "const" | "unsafe") || w.starts_with("pub(")
            });
        let Some(name) = ident_at(&line[at + 3..]) else {
            continue;
        };
        if !is_item {
            continue;
        }
        // the body: the first `{` before a `;` at depth 0, then its matching `}`
        let rest: String = lines[n..].join("\n");
        let (mut depth, mut opened, mut end) = (0i32, false, None);
        for (i, ch) in rest[at..].char_indices() {
            match ch {
                ';' if !opened && depth == 0 => break,
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth -= 1;
                    if opened && depth == 0 {
                        end = Some(at + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(e) = end {
            let last = n + rest[..e].matches('\n').count();
            out.push((name.to_string(), n, last));
        }
    }
    out
}

/// Whether the comment block right above line `n` (doc comments, comments and attributes)
/// says why the function is long: a sentence starting "Long because".
fn says_why(original: &[&str], n: usize) -> bool {
    original[..n]
        .iter()
        .rev()
        .take_while(|l| {
            let t = l.trim_start();
            t.starts_with("//") || t.starts_with("#[")
        })
        .any(|l| l.contains("Long because"))
}

#[test]
fn the_function_scanner_measures_bodies() {
    let src = "fn a() {\n    let s = \"}\n}\";\n}\n\npub(crate) async fn b(x: u8)\n    -> u8\n{\n    x\n}\nfn c();\n";
    let got = functions(&code_only(src));
    assert_eq!(got, [("a".to_string(), 0, 3), ("b".to_string(), 5, 9)]);
    let text = [
        "/// Does x.",
        "/// Long because the rules read as one table.",
        "#[test]",
        "fn t() {}",
    ];
    assert!(says_why(&text, 3));
    assert!(!says_why(&text[2..], 1));
}

/// Issue 32: no function over ~150 lines without a sentence above it saying why.
#[test]
fn long_functions_say_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut silent = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("source is readable");
        let original: Vec<&str> = text.lines().collect();
        for (name, first, last) in functions(&code_only(&text)) {
            let len = last - first + 1;
            if len > LONG_FUNCTION && !says_why(&original, first) {
                let rel = file
                    .strip_prefix(root)
                    .unwrap_or(file)
                    .display()
                    .to_string();
                silent.push(format!("{rel}:{} fn {name} ({len} lines)", first + 1));
            }
        }
    }
    assert!(
        silent.is_empty(),
        "functions over {LONG_FUNCTION} lines with no \"Long because …\" sentence above them \
         (split them, or say why they are long):\n{}",
        silent.join("\n")
    );
}
