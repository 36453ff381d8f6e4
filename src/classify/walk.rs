//! The AST walk: lists every simple command a parsed command would run, with its DAG
//! layer. It descends into `$(...)`, backticks, process substitutions, subshells,
//! `{ ...; }`, loops, conditionals and `case`; heredocs and herestrings feed the command's
//! stdin; tree-sitter's nesting quirks (`a | b 2>&1 | c`, `cat <<EOF | sh`) are flattened.
//! Simple commands are judged and unwrapped in `dispatch.rs`.

use std::collections::{HashMap, HashSet};

use tree_sitter::{Node, Tree};

use super::knowledge;
use super::knowledge::Effects;
use super::rawop::{sensitive_var, Walked};
use super::types::{display_word, Category, OpKind, DYN};
use super::words::{self, Vars};

/// Nesting limit for scripts inside scripts (`sh -c "sh -c '...'"`, function calls).
pub(super) const MAX_DEPTH: usize = 8;
/// Upper bound on operations, so hostile input cannot blow up the classifier.
pub(super) const MAX_OPS: usize = 1000;

/// A static stdout of a pipeline stage that a later stage reads.
#[derive(Debug, Clone, Default)]
pub(super) struct Feed {
    pub(super) text: String,
    pub(super) words: Vec<String>,
    pub(super) exact: bool,
}

pub(super) struct Walker {
    pub(super) out: Walked,
    pub(super) vars: Vars,
    pub(super) funcs: HashMap<String, String>,
    pub(super) called: HashSet<String>,
    pub(super) call_stack: Vec<String>,
    pub(super) via: Vec<String>,
    pub(super) depth: usize,
    pub(super) next_cmd: usize,
    pub(super) next_pipe: usize,
    pub(super) cur_pipe: Option<(usize, usize)>,
    pub(super) cur_subst: Option<usize>,
    pub(super) background: bool,
    pub(super) remote: bool,
    pub(super) feed: Option<Feed>,
    pub(super) stage_out: Option<Feed>,
    /// Working directory after a static `cd` (for `cd / && rm -rf *`).
    pub(super) cwd: Option<String>,
    /// Where the next command runs, after the static `cd`s before it in the same shell:
    /// relative to the command's working directory (`""`: there) or absolute; None once a
    /// `cd` is computed (`cd "$D"`, `cd -`). Scoped like the shell: a subshell, a pipeline's
    /// stages and a substitution keep theirs.
    pub(super) dir: Option<String>,
    /// Arithmetic over run-time values (`arith.rs`).
    pub(super) arith: super::arith::ArithState,
}

/// Walk a command that is known to parse (the top-level tree).
pub fn walk(tree: &Tree, text: &str) -> Walked {
    let mut w = Walker {
        out: Walked::default(),
        vars: Vars::new(),
        funcs: HashMap::new(),
        called: HashSet::new(),
        call_stack: Vec::new(),
        via: Vec::new(),
        depth: 0,
        next_cmd: 0,
        next_pipe: 0,
        cur_pipe: None,
        cur_subst: None,
        background: false,
        remote: false,
        feed: None,
        stage_out: None,
        cwd: None,
        dir: Some(String::new()),
        arith: Default::default(),
    };
    let last = w.node(tree.root_node(), text.as_bytes(), 0);
    if super::builtins::prompt_expansion(text) {
        w.push_unknown(
            "${var@P} expands a prompt string, running the command substitutions in the value",
            0,
        );
    }
    // functions defined but never called are still judged (they could be called by a
    // computed name or from a trap)
    let mut uncalled: Vec<(String, String)> = w
        .funcs
        .iter()
        .filter(|(n, _)| !w.called.contains(*n))
        .map(|(n, b)| (n.clone(), b.clone()))
        .collect();
    uncalled.sort();
    for (name, body) in uncalled {
        w.call_stack.push(name.clone());
        w.via.push(format!("function {name} (not called)"));
        w.script(&body, last);
        w.via.pop();
        w.call_stack.pop();
    }
    w.arith_finish();
    w.out
}

pub(super) fn text<'a>(n: Node, src: &'a [u8]) -> &'a str {
    n.utf8_text(src).unwrap_or("")
}

impl Walker {
    /// Walk any node; returns the last layer used.
    pub(super) fn node(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        if !self.budget_ok() {
            return layer;
        }
        match n.kind() {
            "compound_statement" if text(n, src).starts_with("((") => {
                let t = text(n, src);
                let inner = t
                    .strip_prefix("((")
                    .and_then(|x| x.strip_suffix("))"))
                    .unwrap_or(t);
                self.arith_context(inner, "((...))", layer);
                self.arith.depth += 1;
                let l = self.sequence(n, src, layer);
                self.arith.depth -= 1;
                l
            }
            "c_style_for_statement" => {
                let mut parts: Vec<String> = Vec::new();
                for f in ["initializer", "condition", "update"] {
                    let mut c = n.walk();
                    let kids: Vec<Node> = n.children_by_field_name(f, &mut c).collect();
                    for k in kids {
                        parts.push(text(k, src).to_string());
                    }
                }
                self.arith_context(&parts.join(" , "), "for ((...))", layer);
                // the head's inner contexts are scanned again (harmless); the body is not
                // arithmetic
                self.compound_children(n, src, layer)
            }
            "subshell" => {
                let saved = self.dir.clone();
                let l = self.sequence(n, src, layer);
                self.dir = saved;
                l
            }
            "program" | "compound_statement" | "do_group" | "else_clause" | "list" => {
                self.sequence(n, src, layer)
            }
            "pipeline" => self.pipeline(n, src, layer, None),
            "redirected_statement" => self.redirected(n, src, layer),
            "command" => self.command(n, src, layer, &[]),
            "function_definition" => {
                let name = n
                    .child_by_field_name("name")
                    .map(|x| words::eval_one(x, src, &self.vars))
                    .unwrap_or_default();
                let body = n
                    .child_by_field_name("body")
                    .map(|b| text(b, src).to_string())
                    .unwrap_or_default();
                self.funcs.insert(name, body);
                layer
            }
            "variable_assignment" => {
                self.assignment(n, src, layer, true);
                layer
            }
            "while_statement" => self.while_loop(n, src, layer),
            "variable_assignments" => {
                let mut c = n.walk();
                let kids: Vec<Node> = n.named_children(&mut c).collect();
                for k in kids {
                    self.assignment(k, src, layer, true);
                }
                layer
            }
            "declaration_command" | "unset_command" => self.declaration(n, src, layer),
            "for_statement" => {
                let var = n
                    .child_by_field_name("variable")
                    .map(|v| text(v, src).to_string());
                if let Some(v) = &var {
                    self.vars.insert(v.clone(), DYN.to_string());
                }
                let mut c = n.walk();
                let values: Vec<Node> = n.children_by_field_name("value", &mut c).collect();
                let mut all_numbers = !values.is_empty();
                for v in values {
                    self.substs(v, src, layer, None);
                    for w in words::eval_words(v, src, &self.vars) {
                        match &var {
                            Some(name) if self.arith.int_vars.contains(name) => self.arith(
                                &w,
                                &format!("for into the integer variable {name}"),
                                layer,
                            ),
                            _ => {}
                        }
                        all_numbers &= !w.contains(DYN) && super::arith::is_number_literal(&w);
                    }
                }
                if let Some(v) = &var {
                    if all_numbers {
                        self.arith.numeric.insert(v.clone());
                    } else {
                        self.taint(v);
                    }
                }
                match n.child_by_field_name("body") {
                    Some(b) => self.node(b, src, layer),
                    None => layer,
                }
            }
            "comment" | "heredoc_body" | "heredoc_start" | "heredoc_end" => layer,
            "test_command" => {
                if text(n, src).starts_with("[[") {
                    self.test_arith(n, src, layer);
                }
                self.substs(n, src, layer, None);
                let t = text(n, src);
                let args: Vec<String> = t
                    .trim_start_matches("[[")
                    .trim_end_matches("]]")
                    .split_whitespace()
                    .map(|s| s.to_string())
                    .collect();
                let a = knowledge::analyze("[[", None, &args);
                let mut op = self.blank_op("bash:[[", "[[", OpKind::Command, a.effects, layer);
                op.notes = a.notes;
                self.out.ops.push(op);
                layer
            }
            "command_substitution" | "process_substitution" => {
                self.subst_body(n, src, layer, None);
                layer
            }
            "negated_command" | "if_statement" | "case_statement" | "case_item" | "elif_clause" => {
                self.compound_children(n, src, layer)
            }
            _ => {
                // expressions ((...)), words at top level...
                self.substs(n, src, layer, None);
                layer
            }
        }
    }

    /// Conditions and bodies in order; expressions may hide substitutions.
    pub(super) fn compound_children(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let mut cur = layer;
        let mut first = true;
        for k in kids {
            if is_statement(k.kind()) {
                cur = self.node(k, src, if first { cur } else { cur + 1 });
                first = false;
            } else {
                self.substs(k, src, cur, None);
            }
        }
        cur
    }

    /// `while COND; do BODY; done`: an endless loop that starts background jobs is a fork
    /// bomb in another spelling.
    pub(super) fn while_loop(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let endless = n
            .child_by_field_name("condition")
            .map(|c| {
                let t = text(c, src).trim().trim_end_matches(';').trim().to_string();
                let kw = text(n, src).trim_start().starts_with("until");
                if kw {
                    t == "false"
                } else {
                    matches!(t.as_str(), "true" | ":" | "[ 1 ]" | "((1))")
                }
            })
            .unwrap_or(false);
        let before = self.out.ops.len();
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let mut cur = layer;
        let mut first = true;
        for k in kids {
            if is_statement(k.kind()) {
                cur = self.node(k, src, if first { cur } else { cur + 1 });
                first = false;
            } else {
                self.substs(k, src, cur, None);
            }
        }
        if endless && self.out.ops[before..].iter().any(|o| o.background) {
            self.out
                .fork_bombs
                .push("an endless loop starting background jobs".into());
        }
        cur
    }

    pub(super) fn sequence(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        let mut cur = layer;
        let mut first = true;
        for (i, k) in kids.iter().enumerate() {
            if !k.is_named() || k.kind() == "comment" {
                continue;
            }
            let bg = kids.get(i + 1).map(|x| x.kind() == "&").unwrap_or(false);
            let saved = self.background;
            self.background |= bg;
            let start = if first { cur } else { cur + 1 };
            cur = self.node(*k, src, start);
            self.background = saved;
            first = false;
        }
        cur
    }

    /// Pipeline stages share a layer. `head` is a stage that precedes the pipeline's own
    /// children (the command of a `cmd <<EOF | next` heredoc).
    pub(super) fn pipeline(
        &mut self,
        n: Node,
        src: &[u8],
        layer: usize,
        head: Option<Feed>,
    ) -> usize {
        let pid = self.next_pipe;
        self.next_pipe += 1;
        let saved_pipe = self.cur_pipe;
        let mut stages: Vec<(Node, Vec<Node>)> = Vec::new();
        flatten_pipeline(n, &mut stages);
        let mut max = layer;
        let offset = usize::from(head.is_some());
        let mut prev = head;
        // each stage of a pipeline runs in a subshell of its own: a `cd` in one moves none
        let saved_dir = self.dir.clone();
        let many = stages.len() > 1;
        for (i, (s, redirects)) in stages.into_iter().enumerate() {
            if many {
                self.dir = saved_dir.clone();
            }
            self.cur_pipe = Some((pid, i + offset));
            self.feed = prev.take();
            self.stage_out = None;
            let l = self.node(s, src, layer);
            for r in redirects {
                self.redirect(r, src, l);
            }
            max = max.max(l);
            prev = self.stage_out.take();
            self.feed = None;
        }
        if many {
            self.dir = saved_dir;
        }
        self.cur_pipe = saved_pipe;
        max
    }

    pub(super) fn redirected(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let body = n.child_by_field_name("body");
        let mut c = n.walk();
        let redirects: Vec<Node> = n
            .children(&mut c)
            .filter(|k| k.kind().ends_with("_redirect"))
            .collect();
        let Some(body) = body else {
            for r in &redirects {
                self.redirect(*r, src, layer);
            }
            return layer;
        };
        // heredoc with trailing syntax inside it (`cat <<EOF | sh`, `cat <<EOF && x`)
        let heredoc = redirects
            .iter()
            .find(|r| r.kind() == "heredoc_redirect")
            .copied();
        let mut stdin_text: Option<String> = None;
        for r in &redirects {
            if let Some(t) = self.stdin_text_of(*r, src) {
                stdin_text = Some(t);
            }
        }
        if let Some(h) = heredoc {
            let mut hc = h.walk();
            let inner: Vec<Node> = h.named_children(&mut hc).collect();
            if let Some(p) = inner.iter().find(|k| k.kind() == "pipeline") {
                // body is stage 0, the heredoc's pipeline continues it
                let pid_stage0 = self.next_pipe;
                self.next_pipe += 1;
                let saved_pipe = self.cur_pipe;
                self.cur_pipe = Some((pid_stage0, 0));
                self.feed = stdin_text.clone().map(|t| Feed {
                    words: t.split_whitespace().map(String::from).collect(),
                    text: t,
                    exact: true,
                });
                self.stage_out = None;
                let extra: Vec<Node> = redirects
                    .iter()
                    .copied()
                    .filter(|r| r.kind() != "heredoc_redirect")
                    .collect();
                let l0 = self.node_with_redirects(body, src, layer, &extra, &inner);
                self.redirect(h, src, layer);
                let out = self.stage_out.take();
                self.feed = None;
                // continue the same pipeline id for the following stages
                let mut pc = p.walk();
                let stages: Vec<Node> = p.named_children(&mut pc).collect();
                let mut prev = out;
                let mut max = l0;
                for (i, s) in stages.into_iter().enumerate() {
                    self.cur_pipe = Some((pid_stage0, i + 1));
                    self.feed = prev.take();
                    self.stage_out = None;
                    max = max.max(self.node(s, src, layer));
                    prev = self.stage_out.take();
                    self.feed = None;
                }
                self.cur_pipe = saved_pipe;
                return self.heredoc_tail(&inner, src, max);
            }
            self.feed = stdin_text.map(|t| Feed {
                words: t.split_whitespace().map(String::from).collect(),
                text: t,
                exact: true,
            });
            let extra: Vec<Node> = redirects
                .iter()
                .copied()
                .filter(|r| r.kind() != "heredoc_redirect")
                .collect();
            let l = self.node_with_redirects(body, src, layer, &extra, &inner);
            self.feed = None;
            self.redirect(h, src, layer);
            return self.heredoc_tail(&inner, src, l);
        }
        self.feed = stdin_text.map(|t| Feed {
            words: t.split_whitespace().map(String::from).collect(),
            text: t,
            exact: true,
        });
        let l = self.node_with_redirects(body, src, layer, &redirects, &[]);
        self.feed = None;
        l
    }

    /// Walk `body`, then attach redirects (and file redirects nested in a heredoc) to the
    /// last layer it used.
    pub(super) fn node_with_redirects(
        &mut self,
        body: Node,
        src: &[u8],
        layer: usize,
        redirects: &[Node],
        heredoc_inner: &[Node],
    ) -> usize {
        let l = if body.kind() == "command" {
            let mut all: Vec<Node> = redirects.to_vec();
            all.extend(
                heredoc_inner
                    .iter()
                    .copied()
                    .filter(|k| k.kind() == "file_redirect"),
            );
            return self.command(body, src, layer, &all);
        } else {
            self.node(body, src, layer)
        };
        for r in redirects {
            self.redirect(*r, src, l);
        }
        for r in heredoc_inner.iter().filter(|k| k.kind() == "file_redirect") {
            self.redirect(*r, src, l);
        }
        l
    }

    /// Statements after `&&` / `||` / `;` that tree-sitter nests inside a heredoc node.
    pub(super) fn heredoc_tail(&mut self, inner: &[Node], src: &[u8], layer: usize) -> usize {
        let mut cur = layer;
        for k in inner {
            if is_statement(k.kind()) && k.kind() != "pipeline" {
                cur = self.node(*k, src, cur + 1);
            }
        }
        cur
    }

    /// Static text a redirect feeds to stdin (heredoc body, herestring).
    pub(super) fn stdin_text_of(&mut self, r: Node, src: &[u8]) -> Option<String> {
        match r.kind() {
            "heredoc_redirect" => {
                let mut c = r.walk();
                let kids: Vec<Node> = r.named_children(&mut c).collect();
                let body = kids.iter().find(|k| k.kind() == "heredoc_body")?;
                Some(text(*body, src).to_string())
            }
            "herestring_redirect" => {
                let mut c = r.walk();
                let kids: Vec<Node> = r.named_children(&mut c).collect();
                let v = kids.last()?;
                Some(words::eval_one(*v, src, &self.vars))
            }
            _ => None,
        }
    }

    pub(super) fn redirect(&mut self, r: Node, src: &[u8], layer: usize) {
        match r.kind() {
            "file_redirect" => {
                self.substs(r, src, layer, None);
                let mut c = r.walk();
                let mut opname = String::new();
                for k in r.children(&mut c) {
                    if !k.is_named() {
                        opname.push_str(k.kind());
                    }
                }
                let Some(dest) = r.child_by_field_name("destination") else {
                    return;
                };
                let target = words::eval_one(dest, src, &self.vars);
                let dup = opname.ends_with('&')
                    && (target.chars().all(|ch| ch.is_ascii_digit()) || target == "-");
                if dup {
                    return;
                }
                let harmless = matches!(
                    target.as_str(),
                    "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
                ) || target.starts_with("/dev/fd/");
                if harmless {
                    return;
                }
                let is_write = opname.contains('>');
                let is_read = opname.contains('<');
                let mut e = Effects::default();
                let mut op = self.blank_op(
                    if is_write {
                        "redirect:write"
                    } else {
                        "redirect:read"
                    },
                    &opname,
                    OpKind::Redirect,
                    e,
                    layer,
                );
                if target.starts_with("/dev/tcp/") || target.starts_with("/dev/udp/") {
                    e.add(Category::Network);
                    op.network_source = true;
                    op.notes
                        .push(format!("{target} opens a network connection"));
                } else if !harmless {
                    if is_write {
                        e.add(Category::Filesystem);
                        op.writes.push(target.clone());
                    }
                    if is_read {
                        e.add(Category::Readonly);
                        op.reads.push(target.clone());
                    }
                }
                op.effects = e;
                op.args = vec![target];
                op.redirect_op = Some(opname);
                self.out.ops.push(op);
            }
            "heredoc_redirect" => {
                let mut c = r.walk();
                let kids: Vec<Node> = r.named_children(&mut c).collect();
                let quoted = kids
                    .iter()
                    .find(|k| k.kind() == "heredoc_start")
                    .map(|k| {
                        let t = text(*k, src);
                        t.contains('\'') || t.contains('"') || t.contains('\\')
                    })
                    .unwrap_or(false);
                if !quoted {
                    for k in kids.iter().filter(|k| k.kind() == "heredoc_body") {
                        self.substs(*k, src, layer, None);
                    }
                }
            }
            _ => self.substs(r, src, layer, None),
        }
    }

    /// Find command/process substitutions inside a non-statement node and walk them.
    pub(super) fn substs(&mut self, n: Node, src: &[u8], layer: usize, parent: Option<usize>) {
        match n.kind() {
            "command_substitution" | "process_substitution" => {
                self.subst_body(n, src, layer, parent);
            }
            "arithmetic_expansion" | "subscript" | "expansion" => {
                self.word_arith(n, src, layer);
                let inner = n.kind() != "expansion";
                if inner {
                    self.arith.depth += 1;
                }
                let mut c = n.walk();
                let kids: Vec<Node> = n.named_children(&mut c).collect();
                for k in kids {
                    self.substs(k, src, layer, parent);
                }
                if inner {
                    self.arith.depth -= 1;
                }
            }
            _ => {
                let mut c = n.walk();
                let kids: Vec<Node> = n.named_children(&mut c).collect();
                for k in kids {
                    self.substs(k, src, layer, parent);
                }
            }
        }
    }

    pub(super) fn subst_body(&mut self, n: Node, src: &[u8], layer: usize, parent: Option<usize>) {
        let label = if n.kind() == "process_substitution" {
            let t = text(n, src);
            if t.starts_with(">(") {
                ">(...)"
            } else {
                "<(...)"
            }
        } else if text(n, src).starts_with('`') {
            "`...`"
        } else {
            "$(...)"
        };
        let saved_feed = self.feed.take();
        let saved_out = self.stage_out.take();
        let saved_pipe = self.cur_pipe.take();
        let saved_subst = self.cur_subst;
        let saved_dir = self.dir.clone();
        self.cur_subst = parent.or(saved_subst);
        self.via.push(label.to_string());
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let mut cur = layer;
        for k in kids {
            if is_statement(k.kind()) {
                // all statements of a substitution belong to the enclosing step
                cur = self.node(k, src, cur);
            } else if k.kind() == "file_redirect" {
                // `$(< file)` reads the file
                self.redirect(k, src, cur);
            } else {
                self.substs(k, src, cur, parent);
            }
        }
        self.via.pop();
        self.cur_subst = saved_subst;
        self.dir = saved_dir;
        self.cur_pipe = saved_pipe;
        self.feed = saved_feed;
        self.stage_out = saved_out;
    }

    pub(super) fn assignment(
        &mut self,
        n: Node,
        src: &[u8],
        layer: usize,
        persist: bool,
    ) -> (String, String) {
        let name = n
            .child_by_field_name("name")
            .map(|x| text(x, src).to_string())
            .unwrap_or_default();
        // `a[$(cmd)]=1`: the subscript runs too
        if let Some(nm) = n.child_by_field_name("name") {
            self.substs(nm, src, layer, None);
        }
        let value = n.child_by_field_name("value");
        if let Some(v) = value {
            self.substs(v, src, layer, None);
        }
        let val = value
            .map(|v| words::eval_one(v, src, &self.vars))
            .unwrap_or_default();
        let append = {
            let mut c = n.walk();
            let kids: Vec<Node> = n.children(&mut c).collect();
            kids.iter().any(|k| !k.is_named() && k.kind() == "+=")
        };
        if value.is_some_and(|v| v.kind() == "array") {
            self.taint(super::arith::base_name(&name));
        } else {
            self.assigned(&name, &val, append, layer);
        }
        if sensitive_var(&name) {
            let mut e = Effects::default();
            e.add(Category::Env);
            let mut op = self.blank_op(
                &format!("assign:{name}"),
                &name,
                OpKind::Assignment,
                e,
                layer,
            );
            op.args = vec![display_word(&val)];
            op.notes.push(format!(
                "assigning {name} changes how later programs are found or behave"
            ));
            self.out.ops.push(op);
        }
        if persist {
            self.vars.insert(name.clone(), val.clone());
        }
        (name, val)
    }

    pub(super) fn declaration(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        let builtin = kids
            .first()
            .map(|k| text(*k, src).to_string())
            .unwrap_or_default();
        self.declared_types(&builtin, &kids, src);
        let mut args = Vec::new();
        for k in &kids[1.min(kids.len())..] {
            if k.kind() == "variable_assignment" {
                self.assignment(*k, src, layer, true);
                args.push(text(*k, src).to_string());
            } else if k.is_named() {
                self.substs(*k, src, layer, None);
                args.push(words::eval_one(*k, src, &self.vars));
            }
        }
        let cmd_id = self.next_cmd;
        self.next_cmd += 1;
        // the raw words too: `unset PATH` names its variable without evaluating it
        let mut seen = args.clone();
        seen.extend(
            kids[1.min(kids.len())..]
                .iter()
                .map(|k| text(*k, src).to_string()),
        );
        self.builtin_side_doors(&builtin, &seen, layer, cmd_id);
        self.builtin_arith(&builtin, &args, layer);
        let mut e = Effects::default();
        if args.iter().all(|a| a.starts_with('-'))
            && (builtin == "export" || builtin == "declare" || builtin == "typeset")
        {
            e.add(Category::Env);
        }
        let mut op = self.blank_op(
            &format!("bash:{builtin}"),
            &builtin,
            OpKind::Command,
            e,
            layer,
        );
        op.args = args.iter().map(|a| display_word(a)).collect();
        if !e.is_pure() {
            op.notes.push("prints the environment".into());
        }
        self.out.ops.push(op);
        layer
    }
}

/// Pipeline stages, flattening tree-sitter's nesting of `a | b 2>&1 | c` into
/// `pipeline(redirected_statement(pipeline(a, b), 2>&1), c)`: the redirects go with the
/// last stage of the nested pipeline.
fn flatten_pipeline<'t>(n: Node<'t>, out: &mut Vec<(Node<'t>, Vec<Node<'t>>)>) {
    let mut c = n.walk();
    let kids: Vec<Node<'t>> = n
        .named_children(&mut c)
        .filter(|k| k.kind() != "comment")
        .collect();
    for k in kids {
        if k.kind() == "redirected_statement" {
            if let Some(body) = k.child_by_field_name("body") {
                if body.kind() == "pipeline" {
                    let mut rc = k.walk();
                    let redirects: Vec<Node<'t>> = k
                        .children(&mut rc)
                        .filter(|r| {
                            r.kind() == "file_redirect" || r.kind() == "herestring_redirect"
                        })
                        .collect();
                    let before = out.len();
                    flatten_pipeline(body, out);
                    if out.len() > before {
                        if let Some(last) = out.last_mut() {
                            last.1.extend(redirects);
                        }
                        continue;
                    }
                }
            }
        }
        out.push((k, Vec::new()));
    }
}

pub(super) fn is_statement(k: &str) -> bool {
    matches!(
        k,
        "command"
            | "pipeline"
            | "list"
            | "redirected_statement"
            | "subshell"
            | "compound_statement"
            | "if_statement"
            | "while_statement"
            | "for_statement"
            | "c_style_for_statement"
            | "case_statement"
            | "function_definition"
            | "negated_command"
            | "declaration_command"
            | "unset_command"
            | "test_command"
            | "variable_assignment"
            | "variable_assignments"
            | "do_group"
            | "else_clause"
            | "elif_clause"
            | "case_item"
    )
}
