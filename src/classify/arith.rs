//! Arithmetic over run-time values. Bash evaluates the *value* of every variable an
//! arithmetic context names as arithmetic again, and an array subscript in that value runs
//! command substitutions: `x='a[$(touch /tmp/p)]'; echo $((x))` runs `touch`, although no
//! command appears where the walk looks for one.
//!
//! Arithmetic contexts: `$(( ))` / `$[ ]`, `(( ))`, `for (( ))`, `let`, the operands of
//! `[[ -eq -ne -lt -le -gt -ge ]]`, indexed-array subscripts (`${a[i]}`, `a[i]=`, and
//! `NAME[i]` operands of `read`, `unset`, `printf -v`, `test -v`...), `${s:offset:length}`,
//! and assignments to `declare -i` variables (including `read` / `for` into them).
//!
//! A variable read there is safe only if it holds a literal number everywhere: at the
//! reference (a static literal, or assigned by arithmetic, or a numeric shell variable) and
//! nowhere in the command given anything else (`tainted`: non-numeric assignments, `read`
//! targets, `${x:=...}`, loop variables over words; `set`/`shift` for positional
//! parameters). The walk is flow-insensitive (branches and loops are walked once), so the
//! verdict is taken at the end of the walk ([`Walker::arith_finish`]), when every
//! assignment has been seen. Otherwise the context is a `bash:<dynamic>` operation:
//! never pure, its hidden program counts as a computed name. A command substitution, a
//! run-time value (`$(...)`, backquotes, unknown words) or an indirect `${!x}` inside
//! arithmetic is dynamic at once.

use tree_sitter::Node;

use super::knowledge::Effects;
use super::types::{Category, OpKind, DYN};
use super::walk::{text, Walker};

/// Shell variables bash keeps numeric (unless the command assigns them, which taints them).
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

/// Positional parameters (tainted together by `set` / `shift`).
pub(super) const POSITIONALS: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// What an arithmetic expression does with names, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// The variable's value is evaluated.
    Read(String),
    /// The variable receives the (numeric) result.
    Assign(String),
    /// Something evaluated is not known statically.
    Dynamic(&'static str),
}

/// A literal bash integer: `42`, `-7`, `0x1F`, `8#17`, `64#@_` (empty counts: it is 0).
pub fn is_number_literal(v: &str) -> bool {
    let t = v.trim();
    let t = t.strip_prefix(['-', '+']).unwrap_or(t);
    if t.is_empty() {
        return v.trim().is_empty();
    }
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some((base, digits)) = t.split_once('#') {
        return !base.is_empty()
            && base.chars().all(|c| c.is_ascii_digit())
            && !digits.is_empty()
            && digits
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '@' || c == '_');
    }
    t.chars().all(|c| c.is_ascii_digit())
}

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names an arithmetic expression reads and assigns, and what in it is dynamic.
pub fn scan(expr: &str) -> Vec<Token> {
    let b: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == DYN {
            out.push(Token::Dynamic("a value known only at run time"));
            i += 1;
        } else if c == '`' {
            out.push(Token::Dynamic("the output of a command"));
            i += 1;
        } else if c == '$' {
            match b.get(i + 1).copied() {
                Some('(') if b.get(i + 2) == Some(&'(') => i += 3,
                Some('(') => {
                    out.push(Token::Dynamic("the output of a command"));
                    i += 2;
                }
                Some('[') => i += 2,
                Some('{') => {
                    i += 2;
                    match b.get(i).copied() {
                        Some('#') if b.get(i + 1).is_some_and(|c| ident_start(*c)) => {
                            // ${#x}: a length
                            i += 1;
                            while i < b.len() && ident_char(b[i]) {
                                i += 1;
                            }
                        }
                        Some('!') => {
                            out.push(Token::Dynamic("an indirect expansion"));
                            i += 1;
                        }
                        Some(c) if ident_start(c) => {
                            let s = i;
                            while i < b.len() && ident_char(b[i]) {
                                i += 1;
                            }
                            out.push(Token::Read(b[s..i].iter().collect()));
                        }
                        Some(c) if c.is_ascii_digit() => {
                            let s = i;
                            while i < b.len() && b[i].is_ascii_digit() {
                                i += 1;
                            }
                            out.push(Token::Read(b[s..i].iter().collect()));
                        }
                        Some('#' | '?' | '$') => i += 1,
                        Some(c @ ('@' | '*' | '-')) => {
                            out.push(Token::Read(c.to_string()));
                            i += 1;
                        }
                        _ => {}
                    }
                }
                Some(c) if ident_start(c) => {
                    let s = i + 1;
                    i += 1;
                    while i < b.len() && ident_char(b[i]) {
                        i += 1;
                    }
                    out.push(Token::Read(b[s..i].iter().collect()));
                }
                Some(c) if c.is_ascii_digit() => {
                    out.push(Token::Read(c.to_string()));
                    i += 2;
                }
                Some('#' | '?' | '$' | '!') => i += 2,
                Some(c @ ('@' | '*' | '-')) => {
                    out.push(Token::Read(c.to_string()));
                    i += 2;
                }
                _ => i += 1,
            }
        } else if c.is_ascii_digit() {
            // a number, in any base (0x1f, 16#ff, 64#@_)
            while i < b.len() && (ident_char(b[i]) || b[i] == '#' || b[i] == '@') {
                i += 1;
            }
        } else if ident_start(c) {
            let s = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let name: String = b[s..i].iter().collect();
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let at = |k: usize| b.get(k).copied().unwrap_or('\0');
            if at(j) == '=' && at(j + 1) != '=' {
                out.push(Token::Assign(name));
            } else if ("+-*/%&^|".contains(at(j)) && at(j + 1) == '=')
                || ((at(j) == '<' || at(j) == '>') && at(j + 1) == at(j) && at(j + 2) == '=')
            {
                out.push(Token::Read(name.clone()));
                out.push(Token::Assign(name));
            } else {
                out.push(Token::Read(name));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// `NAME[SUBSCRIPT]` (optionally followed by `=value` / `+=value`): the name and subscript.
pub fn subscripted(word: &str) -> Option<(&str, &str)> {
    let open = word.find('[')?;
    let name = &word[..open];
    if name.is_empty() || !name.starts_with(ident_start) || !name.chars().all(ident_char) {
        return None;
    }
    let close = word.rfind(']')?;
    (close > open).then(|| (name, &word[open + 1..close]))
}

/// The variable a `name` / `name[i]` / `name+` assignment target sets.
pub fn base_name(target: &str) -> &str {
    let end = target
        .find(|c: char| !ident_char(c))
        .unwrap_or(target.len());
    &target[..end]
}

impl Walker {
    /// Does `name` hold a literal number at this point of the walk?
    fn numeric_now(&self, name: &str) -> bool {
        NUMERIC_SPECIALS.contains(&name)
            || self.arith.numeric.contains(name)
            || self
                .vars
                .get(name)
                .is_some_and(|v| !v.contains(DYN) && is_number_literal(v))
    }

    /// `name` may hold a non-numeric value somewhere in the command.
    pub(super) fn taint(&mut self, name: &str) {
        self.arith.numeric.remove(name);
        self.arith.tainted.insert(name.to_string());
    }

    /// `name` was given `value` by a plain assignment.
    pub(super) fn assigned(&mut self, name: &str, value: &str, append: bool, layer: usize) {
        let name = base_name(name);
        if self.arith.int_vars.contains(name) {
            // `declare -i x; x=$v`: the value is evaluated as arithmetic; the result is a number
            self.arith(
                value,
                &format!("assignment to the integer variable {name}"),
                layer,
            );
            self.arith.numeric.insert(name.to_string());
        } else if append || value.contains(DYN) || !is_number_literal(value) {
            self.taint(name);
        } else {
            self.arith.numeric.remove(name);
        }
    }

    /// A builtin stores run-time input in `name` (`read x`, `printf -v x`, `getopts o x`).
    pub(super) fn assigned_at_run_time(&mut self, name: &str, layer: usize) {
        let name = base_name(name);
        if name.is_empty() {
            return;
        }
        self.taint(name);
        if self.arith.int_vars.contains(name) {
            self.push_dynamic(
                &format!(
                    "stores run-time input in the integer variable {name}: bash evaluates it as arithmetic, and a subscript in it (`a[$(cmd)]`) runs cmd"
                ),
                layer,
            );
        }
    }

    /// An arithmetic context: its dynamic parts at once, its variable reads at the end.
    pub(super) fn arith(&mut self, expr: &str, what: &str, layer: usize) {
        let mut reads: Vec<(String, bool)> = Vec::new();
        for t in scan(expr) {
            match t {
                Token::Read(n) => {
                    let ok = self.numeric_now(&n);
                    reads.push((n, ok));
                }
                Token::Assign(n) => {
                    self.arith.numeric.insert(n);
                }
                Token::Dynamic(why) => {
                    self.push_dynamic(
                        &format!("{what} evaluates {why} as arithmetic, which can run commands (`a[$(cmd)]`)"),
                        layer,
                    );
                    return;
                }
            }
        }
        if reads.is_empty() {
            return;
        }
        let mut e = Effects::default();
        e.add(Category::Unknown);
        let mut op = self.blank_op(
            "bash:<dynamic>",
            &DYN.to_string(),
            OpKind::Command,
            e,
            layer,
        );
        op.notes.push(what.to_string());
        self.arith.pending.push((reads, op));
    }

    /// Reads that were not numbers everywhere become `bash:<dynamic>` operations.
    pub(super) fn arith_finish(&mut self) {
        let pending = std::mem::take(&mut self.arith.pending);
        for (reads, mut op) in pending {
            let bad: Vec<&str> = reads
                .iter()
                .filter(|(n, ok)| !ok || self.arith.tainted.contains(n))
                .map(|(n, _)| n.as_str())
                .collect();
            if bad.is_empty() {
                continue;
            }
            let what = op.notes.pop().unwrap_or_default();
            op.notes.push(format!(
                "{what} evaluates ${}, whose value is not a literal number: bash evaluates it again, and a subscript in it (`a[$(cmd)]`) runs cmd",
                bad.join(", $")
            ));
            self.out.ops.push(op);
        }
    }

    /// An arithmetic context met in the tree (not inside one already scanned).
    pub(super) fn arith_context(&mut self, expr: &str, what: &str, layer: usize) {
        if self.arith.depth == 0 {
            self.arith(expr, what, layer);
        }
    }

    /// Arithmetic inside a word: `$((...))`, a subscript, `${s:offset:length}`; and the
    /// assignments `${x:=...}` makes.
    pub(super) fn word_arith(&mut self, n: Node, src: &[u8], layer: usize) {
        let t = text(n, src);
        match n.kind() {
            "arithmetic_expansion" => {
                let inner = t
                    .strip_prefix("$((")
                    .and_then(|x| x.strip_suffix("))"))
                    .or_else(|| t.strip_prefix("$[").and_then(|x| x.strip_suffix(']')))
                    .unwrap_or(t);
                self.arith_context(inner, "$((...))", layer);
            }
            "subscript" => {
                let name = n
                    .child_by_field_name("name")
                    .map(|x| text(x, src))
                    .unwrap_or("");
                if self.arith.assoc.contains(name) {
                    return;
                }
                if let Some((_, sub)) = subscripted(t) {
                    self.arith_context(sub, "an array subscript", layer);
                }
            }
            "expansion" => {
                let mut c = n.walk();
                let kids: Vec<Node> = n.children(&mut c).collect();
                let name = kids
                    .iter()
                    .find(|k| k.kind() == "variable_name")
                    .map(|k| text(*k, src).to_string());
                for k in &kids {
                    if k.is_named() {
                        continue;
                    }
                    match k.kind() {
                        "=" | ":=" => {
                            if let Some(nm) = &name {
                                self.taint(nm);
                            }
                        }
                        ":" => {
                            // ${s:offset:length}
                            let rest = &src[k.end_byte()..n.end_byte()];
                            let rest = std::str::from_utf8(rest).unwrap_or("");
                            let rest = rest.strip_suffix('}').unwrap_or(rest).to_string();
                            self.arith_context(&rest, "a substring offset", layer);
                            break;
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// `[[ A -eq B ]]` (and -ne -lt -le -gt -ge) evaluates both operands as arithmetic;
    /// `[[ -v a[i] ]]` evaluates the subscript.
    pub(super) fn test_arith(&mut self, n: Node, src: &[u8], layer: usize) {
        const OPS: &[&str] = &["-eq", "-ne", "-lt", "-le", "-gt", "-ge"];
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            let mut c = x.walk();
            let kids: Vec<Node> = x.children(&mut c).collect();
            match x.kind() {
                "binary_expression" => {
                    let op = x
                        .child_by_field_name("operator")
                        .map(|o| text(o, src))
                        .unwrap_or("");
                    if OPS.contains(&op) {
                        for side in ["left", "right"] {
                            if let Some(s) = x.child_by_field_name(side) {
                                let t = text(s, src).to_string();
                                self.arith_context(&t, &format!("[[ {op} ]]"), layer);
                            }
                        }
                    }
                }
                "unary_expression" => {
                    let is_v = kids.first().is_some_and(|o| text(*o, src) == "-v");
                    if is_v {
                        for k in kids.iter().skip(1) {
                            let t = text(*k, src).replace(['\'', '"'], "");
                            if let Some((name, sub)) = subscripted(&t) {
                                if !self.arith.assoc.contains(name) {
                                    self.arith_context(sub, "[[ -v ]]", layer);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
            stack.extend(kids);
        }
    }

    /// `declare -i` / `-A` (also `local`, `typeset`): integer and associative names.
    pub(super) fn declared_types(&mut self, builtin: &str, kids: &[Node], src: &[u8]) {
        if !matches!(builtin, "declare" | "typeset" | "local") {
            return;
        }
        let flags: String = kids
            .iter()
            .skip(1)
            .map(|k| text(*k, src))
            .filter(|t| t.starts_with('-'))
            .collect();
        let (int, assoc) = (flags.contains('i'), flags.contains('A'));
        if !int && !assoc {
            return;
        }
        for k in kids.iter().skip(1) {
            let name = match k.kind() {
                "variable_assignment" => k
                    .child_by_field_name("name")
                    .map(|x| base_name(text(x, src)).to_string()),
                _ if k.is_named() && !text(*k, src).starts_with('-') => {
                    Some(base_name(text(*k, src)).to_string())
                }
                _ => None,
            };
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                if int {
                    self.arith.int_vars.insert(name.clone());
                }
                if assoc {
                    self.arith.assoc.insert(name);
                }
            }
        }
    }

    /// Builtins with arithmetic operands or run-time assignments (evaluated argv).
    pub(super) fn builtin_arith(&mut self, base: &str, args: &[String], layer: usize) {
        match base {
            "let" => {
                for a in args {
                    self.arith(a, "let", layer);
                }
                return;
            }
            "set" if args.iter().any(|a| a == "--" || !a.starts_with(['-', '+'])) => {
                for p in POSITIONALS {
                    self.taint(p);
                }
            }
            "shift" => {
                for p in POSITIONALS {
                    self.taint(p);
                }
            }
            _ => {}
        }
        // NAME[SUBSCRIPT] operands whose subscript the builtin evaluates
        let operands: Vec<&String> = match base {
            "printf" | "test" | "[" | "wait" => args
                .windows(2)
                .filter(|w| w[0] == "-v" || w[0] == "-p")
                .map(|w| &w[1])
                .collect(),
            "read" | "mapfile" | "readarray" | "getopts" | "unset" | "declare" | "typeset"
            | "local" | "export" | "readonly" => args.iter().collect(),
            _ => Vec::new(),
        };
        for a in &operands {
            if let Some((name, sub)) = subscripted(a) {
                if !self.arith.assoc.contains(name) {
                    self.arith(sub, &format!("{base} NAME[...]"), layer);
                }
            }
        }
        // run-time input stored in variables
        let targets: Vec<&String> = match base {
            "read" | "mapfile" | "readarray" | "getopts" => args
                .iter()
                .filter(|a| a.starts_with(ident_start) && !a.contains(DYN))
                .collect(),
            "printf" | "wait" => operands,
            _ => Vec::new(),
        };
        for t in targets {
            self.assigned_at_run_time(t, layer);
        }
    }

    fn push_dynamic(&mut self, why: &str, layer: usize) {
        let mut e = Effects::default();
        e.add(Category::Unknown);
        let mut op = self.blank_op(
            "bash:<dynamic>",
            &DYN.to_string(),
            OpKind::Command,
            e,
            layer,
        );
        op.notes.push(why.to_string());
        self.out.ops.push(op);
    }
}

/// The walker's arithmetic state.
#[derive(Debug, Default)]
pub(super) struct ArithState {
    /// Assigned by arithmetic (so a number) and not reassigned since.
    pub(super) numeric: std::collections::HashSet<String>,
    /// May hold a non-numeric value somewhere in the command.
    pub(super) tainted: std::collections::HashSet<String>,
    /// `declare -i` / `local -i` / `typeset -i` names.
    pub(super) int_vars: std::collections::HashSet<String>,
    /// `declare -A` names: their subscripts are strings, not arithmetic.
    pub(super) assoc: std::collections::HashSet<String>,
    /// Nesting of arithmetic contexts being walked (inner ones were scanned with the outer).
    pub(super) depth: usize,
    /// Contexts whose reads are judged at the end of the walk.
    pub(super) pending: Vec<(Vec<(String, bool)>, super::rawop::RawOp)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals() {
        for v in ["0", "42", "-7", "+3", "0x1F", "16#ff", "64#@_", "", "  5 "] {
            assert!(is_number_literal(v), "{v:?}");
        }
        for v in ["a", "a[$(id)]", "1+2", "x1", "0x", "#1", "1 2", "$x", "16#"] {
            assert!(!is_number_literal(v), "{v:?}");
        }
    }

    #[test]
    fn scanning() {
        use Token::*;
        assert_eq!(
            scan("i=0, j+=i, k++ < ${n:-3} + $m + 0x1f + 16#ff + ${#s}"),
            vec![
                Assign("i".into()),
                Read("j".into()),
                Assign("j".into()),
                Read("i".into()),
                Read("k".into()),
                Read("n".into()),
                Read("m".into()),
            ]
        );
        assert_eq!(scan("$# + $? + $$"), vec![]);
        assert!(matches!(scan("$(id) + 1")[0], Dynamic(_)));
        assert!(matches!(scan("`id`")[0], Dynamic(_)));
        assert!(matches!(scan("${!x}")[0], Dynamic(_)));
        assert_eq!(scan("$((x))"), vec![Read("x".into())]);
        assert_eq!(scan("x == y"), vec![Read("x".into()), Read("y".into())]);
        assert_eq!(scan("x <<= 2"), vec![Read("x".into()), Assign("x".into())]);
    }

    #[test]
    fn subscripts() {
        assert_eq!(subscripted("a[$x]"), Some(("a", "$x")));
        assert_eq!(subscripted("a[i]=5"), Some(("a", "i")));
        assert_eq!(subscripted("[y/n]"), None);
        assert_eq!(subscripted("-p"), None);
        assert_eq!(base_name("a[1]"), "a");
    }
}
