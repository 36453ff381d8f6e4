//! Static evaluation of shell words: what a word node would expand to, as far as that can
//! be known without running anything. Owns unquoting (`\rm`, `r""m`, `'rm'`, `$'\x72m'`),
//! tilde and `$HOME`, `$IFS` field splitting, brace expansion (`{a,b}`, `{1..3}`), and
//! constant propagation of variables assigned earlier in the same command. Unknown parts
//! become the [`DYN`] marker so later stages can tell a computed word from a literal one.

use std::collections::HashMap;
use tree_sitter::Node;

use super::types::{DYN, SPLIT};

/// Variables whose value is known (static text, possibly containing `DYN`).
pub type Vars = HashMap<String, String>;

/// Evaluate one argument-like node into zero or more words (after brace expansion and
/// `$IFS` splitting).
pub fn eval_words(node: Node, src: &[u8], vars: &Vars) -> Vec<String> {
    let mut out = String::new();
    let mut brace = false;
    eval_into(node, src, vars, false, &mut out, &mut brace);
    let expanded = if brace { brace_expand(&out) } else { vec![out] };
    let mut words = Vec::new();
    for w in expanded {
        if w.contains(SPLIT) {
            words.extend(
                w.split(SPLIT)
                    .filter(|s| !s.is_empty())
                    .map(|s| s.to_string()),
            );
        } else {
            words.push(w);
        }
    }
    words
}

/// Evaluate a node as a single string (assignment values, redirect targets).
pub fn eval_one(node: Node, src: &[u8], vars: &Vars) -> String {
    let mut out = String::new();
    let mut brace = false;
    eval_into(node, src, vars, true, &mut out, &mut brace);
    out.replace(SPLIT, " ")
}

fn text<'a>(node: Node, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or("")
}

fn eval_into(
    node: Node,
    src: &[u8],
    vars: &Vars,
    quoted: bool,
    out: &mut String,
    brace: &mut bool,
) {
    match node.kind() {
        "word" | "command_name" if node.named_child_count() == 0 => {
            let t = text(node, src);
            if quoted {
                out.push_str(t);
            } else {
                unescape_unquoted(t, out.is_empty(), out);
                if t.contains('{') && (t.contains(',') || t.contains("..")) || t == "{" || t == "}"
                {
                    *brace = true;
                }
            }
        }
        "command_name" | "concatenation" => {
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                if ch.is_named() {
                    eval_into(ch, src, vars, quoted, out, brace);
                } else {
                    // anonymous tokens inside a concatenation are literal text
                    out.push_str(text(ch, src));
                }
            }
        }
        "number" => {
            if node.named_child_count() > 0 {
                out.push(DYN);
            } else {
                out.push_str(text(node, src));
            }
        }
        "raw_string" => {
            let t = text(node, src);
            out.push_str(
                t.strip_prefix('\'')
                    .and_then(|s| s.strip_suffix('\''))
                    .unwrap_or(t),
            );
        }
        "ansi_c_string" => {
            let t = text(node, src);
            let inner = t
                .strip_prefix("$'")
                .and_then(|s| s.strip_suffix('\''))
                .unwrap_or(t);
            ansi_c_unescape(inner, out);
        }
        "string" | "translated_string" => {
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                match ch.kind() {
                    "string_content" => unescape_dquoted(text(ch, src), out),
                    "\"" | "$\"" => {}
                    _ if ch.is_named() => eval_into(ch, src, vars, true, out, brace),
                    _ => out.push_str(text(ch, src)),
                }
            }
        }
        "simple_expansion" | "expansion" => {
            // tree-sitter quirk: inside a string the span may start with the blank before `$`
            let t = text(node, src);
            let lead = t.len() - t.trim_start().len();
            out.push_str(&t[..lead]);
            expand_var(node, src, vars, quoted, out, brace)
        }
        "command_substitution" => match fold_echo(node, src, vars) {
            // `$(echo rm)` is the literal `rm`: fold it (split when unquoted)
            Some(v) if quoted => out.push_str(&v),
            Some(v) => out.push_str(
                &v.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(&SPLIT.to_string()),
            ),
            None => out.push(DYN),
        },
        "brace_expression" => {
            out.push_str(text(node, src));
            *brace = true;
        }
        "process_substitution" | "arithmetic_expansion" => out.push(DYN),
        "word" => out.push_str(text(node, src)),
        _ => {
            // unknown node kinds (array, subscript...): literal text is not trustworthy
            out.push(DYN);
        }
    }
}

/// The static output of `$(echo words...)` (no options), if it has one.
fn fold_echo(node: Node, src: &[u8], vars: &Vars) -> Option<String> {
    let mut c = node.walk();
    let kids: Vec<Node> = node.named_children(&mut c).collect();
    if kids.len() != 1 || kids[0].kind() != "command" {
        return None;
    }
    let cmd = kids[0];
    let name = cmd.child_by_field_name("name")?;
    let prog = text(name, src);
    if prog != "echo" && prog != "printf" {
        return None;
    }
    let mut words = Vec::new();
    let mut cc = cmd.walk();
    for (i, k) in cmd.children(&mut cc).enumerate() {
        if cmd.field_name_for_child(i as u32) == Some("argument") {
            for w in eval_words(k, src, vars) {
                let echo_flag = words.is_empty()
                    && w.len() > 1
                    && w.starts_with('-')
                    && w[1..].chars().all(|c| matches!(c, 'n' | 'e' | 'E'));
                if w.contains(DYN) || echo_flag {
                    return None;
                }
                words.push(w);
            }
        } else if k.is_named() && k.kind() != "command_name" {
            return None;
        }
    }
    if prog == "printf" {
        // only a lone format without conversions: `$(printf 'rm -rf /')`
        if words.len() != 1 || words[0].contains('%') {
            return None;
        }
        let mut out = String::new();
        ansi_c_unescape(&words[0], &mut out);
        return Some(out.trim_end_matches('\n').to_string());
    }
    Some(words.join(" "))
}

fn expand_var(
    node: Node,
    src: &[u8],
    vars: &Vars,
    quoted: bool,
    out: &mut String,
    brace: &mut bool,
) {
    let mut name: Option<String> = None;
    let mut has_operator = false;
    let mut default: Option<Node> = None;
    let mut op_text = String::new();
    let mut c = node.walk();
    let mut seen_op = false;
    for ch in node.children(&mut c) {
        match ch.kind() {
            "variable_name" | "special_variable_name" if name.is_none() && !seen_op => {
                name = Some(text(ch, src).to_string())
            }
            "$" | "${" | "}" => {}
            k if !ch.is_named() => {
                seen_op = true;
                has_operator = true;
                op_text.push_str(k);
            }
            _ => {
                if seen_op && default.is_none() {
                    default = Some(ch);
                } else if name.is_none() {
                    has_operator = true;
                }
            }
        }
    }
    let Some(name) = name else {
        out.push(DYN);
        return;
    };
    let known = known_var(&name, vars, quoted).map(|v| {
        // with a custom IFS, unquoted expansions split on its characters
        match vars.get("IFS") {
            Some(ifs) if !quoted && name != "IFS" && !ifs.is_empty() && !ifs.contains(DYN) => v
                .chars()
                .map(|ch| if ifs.contains(ch) { SPLIT } else { ch })
                .collect(),
            _ => v,
        }
    });
    if !has_operator {
        match known {
            Some(v) => out.push_str(&v),
            None => out.push(DYN),
        }
        return;
    }
    match op_text.as_str() {
        ":-" | "-" => match (known, default) {
            (Some(v), _) if !v.is_empty() && !v.contains(DYN) => out.push_str(&v),
            (None, Some(d)) if !vars.contains_key(&name) => {
                // unset variable with a default: the default is what runs
                eval_into(d, src, vars, quoted, out, brace)
            }
            _ => out.push(DYN),
        },
        _ => out.push(DYN),
    }
}

fn known_var(name: &str, vars: &Vars, quoted: bool) -> Option<String> {
    if name == "IFS" {
        if let Some(v) = vars.get(name) {
            return Some(if quoted { v.clone() } else { SPLIT.to_string() });
        }
    }
    if let Some(v) = vars.get(name) {
        return Some(v.clone());
    }
    match name {
        "HOME" => Some("~".to_string()),
        "IFS" => Some(if quoted {
            " ".to_string()
        } else {
            SPLIT.to_string()
        }),
        _ => None,
    }
}

/// Backslash removal for unquoted words; a leading `~` becomes the home marker.
fn unescape_unquoted(t: &str, at_start: bool, out: &mut String) {
    let mut chars = t.chars().peekable();
    let mut first = at_start;
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') => {}
                Some(n) => out.push(n),
                None => {}
            }
        } else if c == '~' && first {
            out.push('~');
        } else {
            out.push(c);
        }
        first = false;
    }
}

/// Backslash removal inside double quotes (only before `$`, `` ` ``, `"`, `\`, newline).
fn unescape_dquoted(t: &str, out: &mut String) {
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$') | Some('`') | Some('"') | Some('\\') => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
}

/// Decode `$'...'` escapes.
pub fn ansi_c_unescape(t: &str, out: &mut String) {
    let b: Vec<char> = t.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c != '\\' || i + 1 >= b.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = b[i + 1];
        i += 2;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            '?' => out.push('?'),
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut v: u32 = 0;
                let mut n = 0;
                while n < max && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + b[i].to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.push('\\');
                    out.push(e);
                } else {
                    out.push(char::from_u32(v).unwrap_or(DYN));
                }
            }
            '0'..='7' => {
                let mut v: u32 = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && i < b.len() && ('0'..='7').contains(&b[i]) {
                    v = v * 8 + b[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(char::from_u32(v).unwrap_or(DYN));
            }
            'c' => {
                if i < b.len() {
                    out.push(char::from_u32((b[i] as u32) & 0x1f).unwrap_or(DYN));
                    i += 1;
                }
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
}

/// Bash brace expansion of one word: `{a,b}c` → `ac bc`, `x{1..3}` → `x1 x2 x3`.
/// Bounded (at most 256 results) so a hostile word cannot blow up the classifier.
pub fn brace_expand(w: &str) -> Vec<String> {
    let mut out = Vec::new();
    expand_rec(w, &mut out, 0);
    if out.is_empty() {
        out.push(w.to_string());
    }
    out
}

fn expand_rec(w: &str, out: &mut Vec<String>, depth: usize) {
    if out.len() >= 256 || depth > 8 {
        out.push(w.to_string());
        return;
    }
    let chars: Vec<char> = w.chars().collect();
    // find the first '{' that has a matching '}' with a top-level ',' or '..'
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '{' {
            let mut d = 0;
            let mut j = i;
            let mut commas = Vec::new();
            let mut close = None;
            while j < chars.len() {
                match chars[j] {
                    '{' => d += 1,
                    '}' => {
                        d -= 1;
                        if d == 0 {
                            close = Some(j);
                            break;
                        }
                    }
                    ',' if d == 1 => commas.push(j),
                    _ => {}
                }
                j += 1;
            }
            if let Some(close) = close {
                let pre: String = chars[..i].iter().collect();
                let post: String = chars[close + 1..].iter().collect();
                let inner: String = chars[i + 1..close].iter().collect();
                let alts: Vec<String> = if !commas.is_empty() {
                    let mut parts = Vec::new();
                    let mut start = i + 1;
                    for &c in &commas {
                        parts.push(chars[start..c].iter().collect());
                        start = c + 1;
                    }
                    parts.push(chars[start..close].iter().collect());
                    parts
                } else if let Some(seq) = sequence(&inner) {
                    seq
                } else {
                    i += 1;
                    continue;
                };
                for a in alts {
                    expand_rec(&format!("{pre}{a}{post}"), out, depth + 1);
                    if out.len() >= 256 {
                        return;
                    }
                }
                return;
            }
        }
        i += 1;
    }
    out.push(w.to_string());
}

fn sequence(inner: &str) -> Option<Vec<String>> {
    let mut it = inner.split("..");
    let a = it.next()?;
    let b = it.next()?;
    if let (Ok(x), Ok(y)) = (a.parse::<i64>(), b.parse::<i64>()) {
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        if hi - lo > 255 {
            return None;
        }
        return Some((lo..=hi).map(|n| n.to_string()).collect());
    }
    let (ac, bc) = (a.chars().next()?, b.chars().next()?);
    if a.len() == 1 && b.len() == 1 && ac.is_ascii_alphabetic() && bc.is_ascii_alphabetic() {
        let (lo, hi) = if ac <= bc { (ac, bc) } else { (bc, ac) };
        return Some((lo..=hi).map(|c| c.to_string()).collect());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces() {
        assert_eq!(brace_expand("{rm,-rf,/}"), vec!["rm", "-rf", "/"]);
        assert_eq!(brace_expand("x{1..3}"), vec!["x1", "x2", "x3"]);
        assert_eq!(brace_expand("a{b,c}d"), vec!["abd", "acd"]);
        assert_eq!(brace_expand("{x}"), vec!["{x}"]);
    }

    #[test]
    fn ansi() {
        let mut s = String::new();
        ansi_c_unescape(r"\x72\155", &mut s);
        assert_eq!(s, "rm");
    }
}
