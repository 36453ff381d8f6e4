//! Shell classification (`classify::check`) on arbitrary text.
//!
//! Oracle, built without the classifier's decision code: this target parses the text with
//! tree-sitter-bash itself and looks for
//! - a write: a `>`-style redirection to a literal file other than /dev/null & co.;
//! - network: a redirection to /dev/tcp or /dev/udp;
//! - a command named by a known writing or network program (no function of that name defined);
//! - a dynamic program name: a command name expanding a variable never assigned in the text;
//! - arithmetic over a variable never assigned in the text (its run-time value, such as
//!   `a[$(cmd)]`, would run `cmd`).
//! If any is present, the report must be neither pure nor in the `minimal` / `readonly` set.
//! Always: never panics, the verdict is consistent (pure ⇒ auto_approve, no validation).
#![no_main]

use std::collections::HashSet;

use brainloop::classify::{check, Context};
use libfuzzer_sys::fuzz_target;
use tree_sitter::{Node, Parser};

const WRITERS: &[&str] = &[
    "rm", "unlink", "rmdir", "mv", "cp", "touch", "mkdir", "ln", "chmod", "chown", "chgrp",
    "truncate", "install", "shred", "mkfifo", "mknod",
];
const NETWORK: &[&str] = &[
    "curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "rsync", "telnet", "ftp", "socat",
];
/// Shell variables bash keeps numeric whatever the environment says.
const NUMERIC_SPECIALS: &[&str] = &[
    "RANDOM",
    "SRANDOM",
    "SECONDS",
    "LINENO",
    "BASHPID",
    "PPID",
    "UID",
    "EUID",
    "EPOCHSECONDS",
    "OPTIND",
    "BASH_SUBSHELL",
];

fn unquote(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect()
}

fn all_nodes<'t>(root: Node<'t>) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        out.push(n);
        let mut c = n.walk();
        for k in n.children(&mut c) {
            stack.push(k);
        }
    }
    out
}

/// Identifiers an arithmetic text reads (bare names and `$name` / `${name}`).
fn arith_idents(t: &str) -> Vec<String> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'#' | b'@'))
            {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(t[s..i].to_string());
            continue;
        }
        i += 1;
    }
    out
}

fn is_arith_context(n: Node, src: &str) -> Option<String> {
    let t = n.utf8_text(src.as_bytes()).unwrap_or("");
    match n.kind() {
        "arithmetic_expansion" => Some(t.to_string()),
        "compound_statement" if t.starts_with("((") => Some(t.to_string()),
        "c_style_for_statement" => {
            let head = t.split_once("((").map(|x| x.1).unwrap_or("");
            Some(head.split("))").next().unwrap_or("").to_string())
        }
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(cmd) = std::str::from_utf8(data) else {
        return;
    };
    let report = check(cmd, &Context::default());
    if report.pure {
        assert!(report.valid && !report.blocked && !report.requires_validation);
        assert_eq!(report.starting_policy, "auto_approve");
    }
    if !report.valid || cmd.len() > 4096 {
        return;
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .unwrap();
    let Some(tree) = parser.parse(cmd, None) else {
        return;
    };
    if tree.root_node().has_error() {
        return;
    }
    let nodes = all_nodes(tree.root_node());
    let src = cmd.as_bytes();
    let text = |n: Node| n.utf8_text(src).unwrap_or("").to_string();

    // names the text may assign (conservatively large) and functions it defines
    let mut assigned: HashSet<String> = HashSet::new();
    let mut functions: HashSet<String> = HashSet::new();
    let bytes = cmd.as_bytes();
    let idents: HashSet<String> = arith_idents(cmd).into_iter().collect();
    for w in &idents {
        // any `NAME=`, `NAME+=`, `NAME++`... anywhere in the text counts as an assignment
        let mut from = 0;
        while let Some(p) = cmd[from..].find(w.as_str()) {
            let at = from + p;
            let end = at + w.len();
            let rest = cmd[end..].trim_start();
            let before_ok =
                at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
            if before_ok
                && (rest.starts_with('=')
                    || rest.starts_with('[')
                    || rest.starts_with("++")
                    || rest.starts_with("--")
                    || rest.len() >= 2 && rest.as_bytes()[1] == b'=' && !rest.starts_with("=="))
            {
                assigned.insert(w.clone());
            }
            if before_ok && at >= 2 && (&bytes[at - 2..at] == b"++" || &bytes[at - 2..at] == b"--")
            {
                assigned.insert(w.clone());
            }
            from = end;
        }
    }
    for n in &nodes {
        match n.kind() {
            "for_statement" => {
                if let Some(v) = n.child_by_field_name("variable") {
                    assigned.insert(text(v));
                }
            }
            "function_definition" => {
                if let Some(v) = n.child_by_field_name("name") {
                    functions.insert(unquote(&text(v)));
                }
            }
            // words given to builtins that assign: read x, declare x, printf -v x, ...
            "command" | "declaration_command" | "unset_command" => {
                for w in text(*n).split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if !w.is_empty() {
                        let first = text(*n);
                        let name = first.split_whitespace().next().unwrap_or("");
                        if matches!(
                            unquote(name).as_str(),
                            "read"
                                | "mapfile"
                                | "readarray"
                                | "getopts"
                                | "printf"
                                | "declare"
                                | "typeset"
                                | "local"
                                | "export"
                                | "readonly"
                                | "let"
                                | "set"
                                | "shift"
                                | "source"
                                | "."
                                | "eval"
                                | "unset"
                        ) || n.kind() != "command"
                        {
                            assigned.insert(w.to_string());
                        }
                    }
                }
            }
            _ => {}
        }
    }

    // functions defined where this walk does not look (`eval 'rm() { :; }'`): any `NAME ()`
    // or `function NAME` in the text
    for (i, _) in cmd.match_indices('(') {
        let head = cmd[..i].trim_end();
        let name: String = head
            .chars()
            .rev()
            .take_while(|c| {
                !c.is_whitespace()
                    && !matches!(
                        c,
                        ';' | '&' | '|' | '(' | ')' | '{' | '}' | '\'' | '"' | '`'
                    )
            })
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !name.is_empty() {
            functions.insert(unquote(&name));
        }
    }
    for w in cmd.split("function").skip(1) {
        if let Some(name) = w.split_whitespace().next() {
            functions.insert(unquote(name.trim_end_matches("()")));
        }
    }

    let mut why: Vec<String> = Vec::new();
    for n in &nodes {
        match n.kind() {
            "file_redirect" => {
                let mut op = String::new();
                let mut c = n.walk();
                for k in n.children(&mut c) {
                    if !k.is_named() {
                        op.push_str(k.kind());
                    }
                }
                let Some(dest) = n.child_by_field_name("destination") else {
                    continue;
                };
                let d = text(dest);
                if d.contains('$')
                    || d.contains('`')
                    || d.contains('~')
                    || d.contains('*')
                    || d.contains('?')
                    || d.contains('[')
                    || d.contains('{')
                {
                    continue;
                }
                let d = unquote(&d);
                if d.starts_with("/dev/tcp/") || d.starts_with("/dev/udp/") {
                    why.push(format!("network redirect {d}"));
                    continue;
                }
                let dup = op.ends_with('&') && (d.chars().all(|c| c.is_ascii_digit()) || d == "-");
                let harmless = matches!(
                    d.as_str(),
                    "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
                ) || d.starts_with("/dev/fd/");
                if op.contains('>') && !dup && !harmless {
                    why.push(format!("write redirect {op} {d}"));
                }
            }
            "command" => {
                let Some(name) = n.child_by_field_name("name") else {
                    continue;
                };
                let has_expansion = all_nodes(name)
                    .iter()
                    .any(|k| matches!(k.kind(), "simple_expansion" | "expansion"));
                if has_expansion {
                    // a variable the text never assigns, with no default: the name is dynamic
                    for k in all_nodes(name) {
                        if !matches!(k.kind(), "simple_expansion" | "expansion") {
                            continue;
                        }
                        let t = text(k);
                        let simple = t
                            .trim_start_matches("${")
                            .trim_start_matches('$')
                            .trim_end_matches('}');
                        if simple
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_')
                            && simple
                                .chars()
                                .next()
                                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                            && !assigned.contains(simple)
                            && simple != "HOME"
                            && simple != "IFS"
                        {
                            why.push(format!("dynamic program name {t}"));
                        }
                    }
                    continue;
                }
                let w = unquote(&text(name));
                let base = w.rsplit('/').next().unwrap_or("").to_string();
                if functions.contains(&base) || functions.contains(&w) {
                    continue;
                }
                if WRITERS.contains(&base.as_str()) {
                    why.push(format!("writing program {base}"));
                }
                if NETWORK.contains(&base.as_str()) {
                    why.push(format!("network program {base}"));
                }
            }
            _ => {}
        }
        let in_heredoc = {
            let mut p = n.parent();
            let mut found = false;
            while let Some(x) = p {
                if x.kind() == "heredoc_body" || x.kind() == "heredoc_redirect" {
                    found = true;
                    break;
                }
                p = x.parent();
            }
            found
        };
        if in_heredoc {
            continue;
        }
        if let Some(t) = is_arith_context(*n, cmd) {
            for id in arith_idents(&t) {
                if !assigned.contains(&id) && !NUMERIC_SPECIALS.contains(&id.as_str()) {
                    why.push(format!(
                        "arithmetic over the unassigned variable {id} in {t}"
                    ));
                }
            }
        }
    }
    if !why.is_empty() {
        assert!(
            !report.pure
                && report.permission_set != "minimal"
                && report.permission_set != "readonly",
            "{cmd:?} was classified pure={} set={} despite: {why:?}",
            report.pure,
            report.permission_set
        );
    }
});
