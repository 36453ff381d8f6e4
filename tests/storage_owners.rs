//! One owner per table (issue 32): every SQL write statement (INSERT, UPDATE, DELETE, REPLACE;
//! `INSERT OR IGNORE/REPLACE`; an `ON CONFLICT … DO UPDATE` belongs to its INSERT) in the string
//! literals of every `src/**/*.rs` file outside `#[cfg(test)]` items must be in the module that
//! ARCHITECTURE.md's `## Tables` section names as the owner of that table, and every table of
//! `schema/*.sql` must be listed there. The table is read from ARCHITECTURE.md itself: the
//! document and the check cannot drift.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Reads `| owner | database | tables |` rows under the `## Tables` heading: table → owner file
/// (a path under `src/`; the tables a comma-separated list).
fn owner_table() -> BTreeMap<String, String> {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("\n## Tables")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Tables` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut table = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || cells[1] == "owner" || cells[1].starts_with("--") {
            continue;
        }
        let owner = format!("src/{}", cells[1].trim_matches('`'));
        assert!(
            root().join(&owner).is_file(),
            "ARCHITECTURE.md `## Tables`: owner {owner} is not a file"
        );
        for name in cells[3].split(',').map(|t| t.trim().trim_matches('`')) {
            assert!(
                table.insert(name.to_string(), owner.clone()).is_none(),
                "table {name} is listed twice in `## Tables`"
            );
        }
    }
    assert!(!table.is_empty(), "the `## Tables` section has no rows");
    table
}

/// Every table `schema/*.sql` creates.
fn schema_tables() -> BTreeSet<String> {
    let create =
        Regex::new(r"(?i)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)")
            .unwrap();
    let mut out = BTreeSet::new();
    for e in fs::read_dir(root().join("schema")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sql") {
            let text = fs::read_to_string(&p).unwrap();
            let code: String = text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            out.extend(create.captures_iter(&code).map(|c| c[1].to_string()));
        }
    }
    assert!(!out.is_empty(), "no CREATE TABLE found in schema/");
    out
}

/// What the lexer found in one source file.
#[derive(Default)]
struct Lexed {
    /// The value of each string literal outside test items, with its line.
    strings: Vec<(usize, String)>,
    /// Out-of-line modules declared `#[cfg(test)] mod name;`.
    test_mods: Vec<String>,
}

/// The end of a raw string opened at `i` (`r`, then `#`s, then `"`), and its value.
fn raw_string(c: &[char], mut i: usize) -> Option<(usize, String)> {
    let mut hashes = 0;
    while c.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    if c.get(i) != Some(&'"') {
        return None;
    }
    let start = i + 1;
    let mut j = start;
    while j < c.len() {
        if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
            return Some((j + 1 + hashes, c[start..j].iter().collect()));
        }
        j += 1;
    }
    Some((c.len(), c[start..].iter().collect()))
}

/// A `"…"` literal opened at `i`: its end and its value (a `\` line continuation drops the
/// newline and the next line's indentation, as rustc does).
fn quoted_string(c: &[char], i: usize) -> (usize, String) {
    let mut v = String::new();
    let mut j = i + 1;
    while j < c.len() && c[j] != '"' {
        if c[j] == '\\' {
            match c.get(j + 1) {
                Some('\n') => {
                    j += 2;
                    while j < c.len() && c[j].is_whitespace() {
                        j += 1;
                    }
                    continue;
                }
                Some('n') | Some('t') | Some('r') => v.push(' '),
                Some(&x) => v.push(x),
                None => {}
            }
            j += 2;
            continue;
        }
        v.push(c[j]);
        j += 1;
    }
    (j + 1, v)
}

/// The end of a `/* */` comment (nested) opened at `i`.
fn block_comment(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// The end of `#[cfg(test)]` (whitespace allowed between its tokens) if it starts at `i`.
fn cfg_test_attr(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    for want in "#[cfg(test)]".chars() {
        while j < c.len() && c[j].is_whitespace() && want != '#' {
            j += 1;
        }
        if c.get(j) != Some(&want) {
            return None;
        }
        j += 1;
    }
    Some(j)
}

/// Lexes Rust source: string literals (normal, raw, byte) outside comments and outside the item
/// following each `#[cfg(test)]` (a braced item up to its closing brace, or up to `;`).
fn lex(src: &str) -> Lexed {
    let c: Vec<char> = src.chars().collect();
    let mut out = Lexed::default();
    let (mut i, mut line, mut depth) = (0, 1, 0usize);
    // While inside a test item: the depth it started at, whether its `{` was seen, its text.
    let mut skip: Option<(usize, bool, String)> = None;
    let line_of = |from: usize, to: usize| {
        c[from..to.min(c.len())]
            .iter()
            .filter(|&&x| x == '\n')
            .count()
    };
    while i < c.len() {
        let ch = c[i];
        let start = i;
        let mut literal = None;
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i = block_comment(&c, i);
        } else if ch == '"' {
            let (end, v) = quoted_string(&c, i);
            literal = Some(v);
            i = end;
        } else if ch == '\'' {
            i += if c.get(i + 1) == Some(&'\\') {
                (i + 2..c.len())
                    .find(|&k| c[k] == '\'')
                    .map_or(c.len(), |k| k + 1)
                    - i
            } else if c.get(i + 2) == Some(&'\'') {
                3
            } else {
                1 // a lifetime
            };
        } else if ch.is_alphabetic() || ch == '_' {
            let mut j = i;
            while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                j += 1;
            }
            let word: String = c[i..j].iter().collect();
            i = j;
            if word == "r" || word == "br" {
                if let Some((end, v)) = raw_string(&c, j) {
                    literal = Some(v);
                    i = end;
                }
            } else if word == "b" && c.get(j) == Some(&'"') {
                let (end, v) = quoted_string(&c, j);
                literal = Some(v);
                i = end;
            } else if word == "b" && c.get(j) == Some(&'\'') {
                i = (j + 2..c.len())
                    .find(|&k| c[k] == '\'')
                    .map_or(c.len(), |k| k + 1);
            }
            if let Some((_, false, text)) = &mut skip {
                text.push_str(&word);
                text.push(' ');
            }
        } else if ch == '#' {
            match cfg_test_attr(&c, i) {
                Some(end) => {
                    if skip.is_none() {
                        skip = Some((depth, false, String::new()));
                    }
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
            match ch {
                '{' => {
                    if let Some((d, started, _)) = &mut skip {
                        if *d == depth {
                            *started = true;
                        }
                    }
                    depth += 1;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if matches!(&skip, Some((d, true, _)) if *d == depth) {
                        skip = None;
                    }
                }
                ';' => {
                    if let Some((d, false, text)) = &skip {
                        if *d == depth {
                            let words: Vec<&str> = text.split_whitespace().collect();
                            if let Some(pos) = words.iter().position(|w| *w == "mod") {
                                if let Some(name) = words.get(pos + 1) {
                                    out.test_mods.push(name.to_string());
                                }
                            }
                            skip = None;
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(v) = literal {
            if skip.is_none() {
                out.strings.push((line, v));
            }
        }
        line += line_of(start, i);
    }
    out
}

/// The tables a SQL text writes, with the statement's first words.
fn writes_in(sql: &str) -> Vec<(String, String)> {
    // UPDATE needs its SET, so `DO UPDATE SET` (an upsert: its INSERT counts) and words of a
    // message are not statements.
    let re = Regex::new(
        r#"(?is)\b(INSERT\s+(?:OR\s+[a-z]+\s+)?INTO|REPLACE\s+INTO|DELETE\s+FROM|UPDATE(?:\s+OR\s+[a-z]+)?)\s+"?([A-Za-z_{][A-Za-z0-9_.{}]*)"?(\s+(?:AS\s+[A-Za-z_]+\s+)?SET\b)?"#,
    )
    .unwrap();
    let mut out = Vec::new();
    for m in re.captures_iter(sql) {
        let verb = m[1].split_whitespace().collect::<Vec<_>>().join(" ");
        let table = m[2].rsplit('.').next().unwrap_or(&m[2]).to_string();
        let is_update = verb.to_ascii_uppercase().starts_with("UPDATE");
        if table.eq_ignore_ascii_case("SET") || (is_update && m.get(3).is_none()) {
            continue;
        }
        out.push((verb.to_ascii_uppercase(), table));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every write outside test code: (file relative to the crate, line, verb, table).
fn all_writes() -> Vec<(String, usize, String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    let lexed: Vec<(PathBuf, Lexed)> = files
        .into_iter()
        .map(|p| {
            let l = lex(&fs::read_to_string(&p).unwrap());
            (p, l)
        })
        .collect();
    // Files of out-of-line `#[cfg(test)] mod name;` declarations are test code too.
    let mut test_files = BTreeSet::new();
    for (p, l) in &lexed {
        let stem = p.file_stem().unwrap().to_string_lossy();
        let dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
            p.parent().unwrap().to_path_buf()
        } else {
            p.with_extension("")
        };
        for m in &l.test_mods {
            test_files.insert(dir.join(format!("{m}.rs")));
            test_files.insert(dir.join(m).join("mod.rs"));
        }
    }
    let mut out = Vec::new();
    for (p, l) in &lexed {
        if test_files.contains(p) {
            continue;
        }
        let rel = p
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        for (line, s) in &l.strings {
            for (verb, table) in writes_in(s) {
                out.push((rel.clone(), *line, verb, table));
            }
        }
    }
    out
}

#[test]
fn every_write_is_in_its_tables_owner() {
    let owners = owner_table();
    let writes = all_writes();
    assert!(
        writes.iter().any(|w| w.3 == "jobs"),
        "the scan found no write to `jobs`: it is broken"
    );
    let mut problems = Vec::new();
    for (file, line, verb, table) in &writes {
        match owners.get(table) {
            None => problems.push(format!(
                "{file}:{line}: {verb} {table}: table not in ARCHITECTURE.md `## Tables`"
            )),
            Some(owner) if owner == file => {}
            Some(owner) => problems.push(format!(
                "{file}:{line}: {verb} {table}: only its owner {owner} writes it"
            )),
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn every_schema_table_has_an_owner() {
    let owners = owner_table();
    let missing: Vec<String> = schema_tables()
        .into_iter()
        .filter(|t| !owners.contains_key(t))
        .collect();
    assert!(
        missing.is_empty(),
        "tables of schema/*.sql missing from ARCHITECTURE.md `## Tables`: {missing:?}"
    );
}

#[test]
fn the_scan_sees_what_it_must() {
    let src = r####"
fn a() {
    c.execute("INSERT OR IGNORE INTO queue(job_id) VALUES (?1)
               ON CONFLICT(job_id) DO UPDATE SET x = 1", []);
    c.execute("UPDATE \
               processed_log SET status = 'done'", []);
    c.execute(r#"DELETE FROM "results" WHERE job_id = 1"#, []);
    c.execute("insert or replace into llm_pending(job_id) values (1)", []);
    let _ = '"'; // a quote in a char literal opens no string
    let _: &'static str = "REPLACE INTO cache(k) VALUES (1)";
    /* "UPDATE events SET x = 1" in a comment */
    tracing::info!("cannot update the session"); // words, not a statement
}
#[cfg(test)]
mod tests {
    fn t() { c.execute("DELETE FROM jobs", []); }
}
#[cfg(test)]
mod helpers;
fn b() { c.execute(&format!("UPDATE {t} SET x = 1"), []); }
"####;
    let l = lex(src);
    let found: Vec<(String, String)> = l.strings.iter().flat_map(|(_, s)| writes_in(s)).collect();
    let tables: Vec<&str> = found.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(
        tables,
        [
            "queue",
            "processed_log",
            "results",
            "llm_pending",
            "cache",
            "{t}"
        ],
        "{found:?}"
    );
    assert_eq!(l.test_mods, ["helpers"]);
    let lines: Vec<usize> = l.strings.iter().map(|s| s.0).collect();
    assert_eq!(lines[0], 3, "lines are counted from 1: {lines:?}");
}
