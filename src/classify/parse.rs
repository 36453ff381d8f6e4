//! The AST walk: parses a command with tree-sitter-bash and lists every simple command it
//! would run, with its DAG layer. It descends into `$(...)`, backticks, process
//! substitutions, subshells, `{ ...; }`, loops and conditionals; calls of functions defined
//! in the same command are expanded at the call site (a function shadowing `ls` is judged
//! by its body); heredoc- and herestring-fed shells and `echo ... | sh` have their input
//! parsed as a script; wrappers (`env`, `timeout`, `nice`, `nohup`, `command`, `xargs`,
//! `sh -c`, `bash -c`, `find -exec`, `eval`, `source`, `sudo`...) are unwrapped through the
//! knowledge table. Anything that does not parse is reported as an error, never as pure.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use tree_sitter::{Node, Parser, Tree};

use super::knowledge::{self, Analysis, Effects, Nested, Parsed};
use super::types::{display_word, Category, OpKind, DYN};
use super::words::{self, Vars};

/// Nesting limit for scripts inside scripts (`sh -c "sh -c '...'"`, function calls).
const MAX_DEPTH: usize = 8;
/// Deepest syntax tree we walk (the walk is recursive: this bounds its stack use, so the
/// classifier is safe on a 2 MiB thread stack).
pub const MAX_AST_DEPTH: usize = 64;

/// Depth of a tree, iteratively (no recursion on hostile input).
fn max_depth(tree: &Tree) -> usize {
    let mut cursor = tree.walk();
    let mut depth = 0usize;
    let mut max = 0usize;
    loop {
        max = max.max(depth);
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return max;
            }
            depth -= 1;
        }
    }
}
/// Upper bound on operations, so hostile input cannot blow up the classifier.
const MAX_OPS: usize = 1000;

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parse shell text. `Err` when the grammar cannot be loaded or the text has any ERROR /
/// MISSING node (the tree-sitter grammar recovers from errors; we refuse instead).
pub fn parse_tree(text: &str) -> Result<Tree, String> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut p = Parser::new();
            p.set_language(&tree_sitter_bash::LANGUAGE.into())
                .map_err(|e| format!("shell grammar failed to load: {e}"))?;
            *slot = Some(p);
        }
        let parser = slot.as_mut().ok_or_else(|| "no parser".to_string())?;
        let tree = parser
            .parse(text, None)
            .ok_or_else(|| "the shell parser gave up".to_string())?;
        if tree.root_node().has_error() {
            return Err(first_error(tree.root_node(), text.as_bytes()));
        }
        let depth = max_depth(&tree);
        if depth > MAX_AST_DEPTH {
            return Err(format!(
                "nesting too deep to analyse ({depth} levels, at most {MAX_AST_DEPTH})"
            ));
        }
        Ok(tree)
    })
}

fn first_error(root: Node, src: &[u8]) -> String {
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.is_error() || n.is_missing() {
            let p = n.start_position();
            let t: String = n.utf8_text(src).unwrap_or("").chars().take(40).collect();
            return if n.is_missing() {
                format!(
                    "syntax error: missing `{}` at line {}, column {}",
                    n.kind(),
                    p.row + 1,
                    p.column + 1
                )
            } else {
                format!(
                    "syntax error near `{}` at line {}, column {}",
                    t,
                    p.row + 1,
                    p.column + 1
                )
            };
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        for k in kids.into_iter().rev() {
            if k.has_error() || k.is_missing() {
                stack.push(k);
            }
        }
    }
    "syntax error".to_string()
}

/// Variables whose assignment makes a command non-pure (DESIGN §5.2 plus the ones that make
/// programs run other programs).
pub fn sensitive_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PROMPT_COMMAND",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "CDPATH",
        "HOME",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "GCONV_PATH",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "LESSOPEN",
        "LESSCLOSE",
        "MANPAGER",
        "BROWSER",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "HISTFILE",
        "TMPDIR",
        "GLOBIGNORE",
    ];
    EXACT.contains(&name)
        || name.starts_with("LD_")
        || name.starts_with("GIT_")
        || name.starts_with("BASH_FUNC_")
}

/// A static stdout of a pipeline stage that a later stage reads.
#[derive(Debug, Clone, Default)]
struct Feed {
    text: String,
    words: Vec<String>,
    exact: bool,
}

/// One operation with everything later stages need (the public view is `Operation`).
#[derive(Debug, Clone)]
pub struct RawOp {
    pub op: String,
    pub program: String,
    pub program_dir: Option<String>,
    pub args: Vec<String>,
    pub kind: OpKind,
    pub effects: Effects,
    pub layer: usize,
    pub via: Vec<String>,
    pub notes: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub block: Option<String>,
    pub stdin_exec: bool,
    pub decoder: bool,
    pub network_source: bool,
    pub runs_file: bool,
    pub is_shell: bool,
    pub canonical: Option<String>,
    pub parsed: Parsed,
    pub cmd_id: usize,
    /// This operation runs inside a substitution in the words of command `cmd_id`.
    pub subst_of: Option<usize>,
    /// (pipeline id, stage index).
    pub pipeline: Option<(usize, usize)>,
    pub background: bool,
    /// Its arguments come partly from stdin (xargs).
    pub stdin_args: bool,
    /// Runs on another host (ssh CMD).
    pub remote: bool,
    /// Its stdin comes from a heredoc / herestring / static echo.
    pub fed_static: bool,
    /// A shell whose stdin is a static script that was walked.
    pub static_script: bool,
    /// Redirect operator (`>`, `>>`, `<` ...) for redirect operations.
    pub redirect_op: Option<String>,
    /// Working directory set by an earlier static `cd` in the same command.
    pub cwd: Option<String>,
}

impl RawOp {
    pub fn dynamic(&self) -> bool {
        self.program.contains(DYN) || self.args.iter().any(|a| a.contains(DYN)) || self.stdin_args
    }
}

/// The result of walking a command.
#[derive(Debug, Default)]
pub struct Walked {
    pub ops: Vec<RawOp>,
    /// Code strings handed to other languages (`python -c`), for the regex line.
    pub codes: Vec<(String, String)>,
    /// Shell text of every nested script (`sh -c`, `eval`...), for the regex line.
    pub scripts: Vec<String>,
    /// Fork bombs found (a function calling itself in a pipeline or in the background, an
    /// endless loop starting background jobs), as reasons.
    pub fork_bombs: Vec<String>,
    /// Nested scripts that failed to parse.
    pub inner_errors: Vec<String>,
    /// Places where the grammar accepted text that bash would reject or read differently.
    pub syntax_errors: Vec<String>,
    /// The walk hit its size or depth bound.
    pub truncated: bool,
}

struct Walker {
    out: Walked,
    vars: Vars,
    funcs: HashMap<String, String>,
    called: HashSet<String>,
    call_stack: Vec<String>,
    via: Vec<String>,
    depth: usize,
    next_cmd: usize,
    next_pipe: usize,
    cur_pipe: Option<(usize, usize)>,
    cur_subst: Option<usize>,
    background: bool,
    remote: bool,
    feed: Option<Feed>,
    stage_out: Option<Feed>,
    /// Working directory after a static `cd` (for `cd / && rm -rf *`).
    cwd: Option<String>,
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
    };
    let last = w.node(tree.root_node(), text.as_bytes(), 0);
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
    w.out
}

fn text<'a>(n: Node, src: &'a [u8]) -> &'a str {
    n.utf8_text(src).unwrap_or("")
}

impl Walker {
    fn budget_ok(&mut self) -> bool {
        if self.out.ops.len() >= MAX_OPS || self.depth > MAX_DEPTH {
            if !self.out.truncated {
                self.out.truncated = true;
                let layer = self.out.ops.last().map(|o| o.layer).unwrap_or(0);
                self.push_unknown(
                    "analysis bound reached (too many operations or nesting too deep)",
                    layer,
                );
            }
            return false;
        }
        true
    }

    fn push_unknown(&mut self, why: &str, layer: usize) {
        let mut e = Effects::default();
        e.add(Category::Unknown);
        let op = self.blank_op(
            "bash:<unanalysable>",
            "<unanalysable>",
            OpKind::Command,
            e,
            layer,
        );
        let mut op = op;
        op.notes.push(why.to_string());
        self.out.ops.push(op);
    }

    fn blank_op(
        &self,
        name: &str,
        program: &str,
        kind: OpKind,
        effects: Effects,
        layer: usize,
    ) -> RawOp {
        RawOp {
            op: name.to_string(),
            program: program.to_string(),
            program_dir: None,
            args: Vec::new(),
            kind,
            effects,
            layer,
            via: self.via.clone(),
            notes: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            block: None,
            stdin_exec: false,
            decoder: false,
            network_source: false,
            runs_file: false,
            is_shell: false,
            canonical: None,
            parsed: Parsed::default(),
            cmd_id: usize::MAX,
            subst_of: self.cur_subst,
            pipeline: self.cur_pipe,
            background: self.background,
            stdin_args: false,
            remote: self.remote,
            fed_static: false,
            static_script: false,
            redirect_op: None,
            cwd: self.cwd.clone(),
        }
    }

    /// Bind `$0 $1 ... $@ $*` for a nested `sh -c SCRIPT NAME ARGS`; returns what to restore.
    fn set_positional(&mut self, args: &[String]) -> Vec<(String, Option<String>)> {
        let mut keys: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        keys.push("@".into());
        keys.push("*".into());
        let saved: Vec<(String, Option<String>)> = keys
            .iter()
            .map(|k| (k.clone(), self.vars.get(k).cloned()))
            .collect();
        for k in &keys {
            self.vars.remove(k);
        }
        for (i, a) in args.iter().enumerate().take(10) {
            self.vars.insert(i.to_string(), a.clone());
        }
        let rest = args.get(1..).unwrap_or(&[]).join(" ");
        self.vars.insert("@".into(), rest.clone());
        self.vars.insert("*".into(), rest);
        saved
    }

    /// Parse and walk nested shell text; returns the last layer used.
    fn script(&mut self, body: &str, layer: usize) -> usize {
        self.out.scripts.push(body.to_string());
        if !self.budget_ok() {
            return layer;
        }
        match parse_tree(body) {
            Ok(tree) => {
                self.depth += 1;
                let saved_pipe = self.cur_pipe;
                let r = self.node(tree.root_node(), body.as_bytes(), layer);
                self.cur_pipe = saved_pipe;
                self.depth -= 1;
                r
            }
            Err(e) => {
                let shown = display_word(body);
                self.out
                    .inner_errors
                    .push(format!("{e} in nested script `{shown}`"));
                self.push_unknown(
                    &format!("nested script does not parse ({e}): `{shown}`"),
                    layer,
                );
                layer
            }
        }
    }

    /// Walk any node; returns the last layer used.
    fn node(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        if !self.budget_ok() {
            return layer;
        }
        match n.kind() {
            "program" | "compound_statement" | "subshell" | "do_group" | "else_clause" | "list" => {
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
                if let Some(v) = n.child_by_field_name("variable") {
                    self.vars.insert(text(v, src).to_string(), DYN.to_string());
                }
                let mut c = n.walk();
                let values: Vec<Node> = n.children_by_field_name("value", &mut c).collect();
                for v in values {
                    self.substs(v, src, layer, None);
                }
                match n.child_by_field_name("body") {
                    Some(b) => self.node(b, src, layer),
                    None => layer,
                }
            }
            "comment" | "heredoc_body" | "heredoc_start" | "heredoc_end" => layer,
            "test_command" => {
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
            "negated_command"
            | "if_statement"
            | "c_style_for_statement"
            | "case_statement"
            | "case_item"
            | "elif_clause" => {
                // conditions and bodies in order; expressions may hide substitutions
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
            _ => {
                // expressions ((...)), words at top level...
                self.substs(n, src, layer, None);
                layer
            }
        }
    }

    /// `while COND; do BODY; done`: an endless loop that starts background jobs is a fork
    /// bomb in another spelling.
    fn while_loop(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
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

    fn sequence(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
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
    fn pipeline(&mut self, n: Node, src: &[u8], layer: usize, head: Option<Feed>) -> usize {
        let pid = self.next_pipe;
        self.next_pipe += 1;
        let saved_pipe = self.cur_pipe;
        let mut stages: Vec<(Node, Vec<Node>)> = Vec::new();
        flatten_pipeline(n, &mut stages);
        let mut max = layer;
        let offset = usize::from(head.is_some());
        let mut prev = head;
        for (i, (s, redirects)) in stages.into_iter().enumerate() {
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
        self.cur_pipe = saved_pipe;
        max
    }

    fn redirected(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
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
    fn node_with_redirects(
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
    fn heredoc_tail(&mut self, inner: &[Node], src: &[u8], layer: usize) -> usize {
        let mut cur = layer;
        for k in inner {
            if is_statement(k.kind()) && k.kind() != "pipeline" {
                cur = self.node(*k, src, cur + 1);
            }
        }
        cur
    }

    /// Static text a redirect feeds to stdin (heredoc body, herestring).
    fn stdin_text_of(&mut self, r: Node, src: &[u8]) -> Option<String> {
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

    fn redirect(&mut self, r: Node, src: &[u8], layer: usize) {
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
    fn substs(&mut self, n: Node, src: &[u8], layer: usize, parent: Option<usize>) {
        match n.kind() {
            "command_substitution" | "process_substitution" => {
                self.subst_body(n, src, layer, parent);
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

    fn subst_body(&mut self, n: Node, src: &[u8], layer: usize, parent: Option<usize>) {
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
        self.cur_pipe = saved_pipe;
        self.feed = saved_feed;
        self.stage_out = saved_out;
    }

    fn assignment(&mut self, n: Node, src: &[u8], layer: usize, persist: bool) -> (String, String) {
        let name = n
            .child_by_field_name("name")
            .map(|x| text(x, src).to_string())
            .unwrap_or_default();
        let value = n.child_by_field_name("value");
        if let Some(v) = value {
            self.substs(v, src, layer, None);
        }
        let val = value
            .map(|v| words::eval_one(v, src, &self.vars))
            .unwrap_or_default();
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

    fn declaration(&mut self, n: Node, src: &[u8], layer: usize) -> usize {
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        let builtin = kids
            .first()
            .map(|k| text(*k, src).to_string())
            .unwrap_or_default();
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

    /// A simple command: assignments, words, redirects.
    fn command(&mut self, n: Node, src: &[u8], layer: usize, outer_redirects: &[Node]) -> usize {
        let cmd_id = self.next_cmd;
        self.next_cmd += 1;
        let mut c = n.walk();
        let kids: Vec<Node> = n.children(&mut c).collect();
        let mut argv: Vec<String> = Vec::new();
        let mut redirects: Vec<Node> = Vec::new();
        let mut assigns: Vec<Node> = Vec::new();
        for (i, k) in kids.iter().enumerate() {
            let field = n.field_name_for_child(i as u32);
            match k.kind() {
                "variable_assignment" => assigns.push(*k),
                "file_redirect" | "herestring_redirect" | "heredoc_redirect" => redirects.push(*k),
                "subshell" => {
                    self.node(*k, src, layer);
                }
                _ if field == Some("name") || field == Some("argument") => {
                    self.substs(*k, src, layer, Some(cmd_id));
                    argv.extend(words::eval_words(*k, src, &self.vars));
                }
                _ if k.is_named() => self.substs(*k, src, layer, Some(cmd_id)),
                _ => {}
            }
        }
        // words tree-sitter split without a blank between them (`rm$IFS-rf$IFS/`): bash
        // reads one word there, so our reading would differ from bash's — refuse
        let mut prev_end: Option<usize> = None;
        for (i, k) in kids.iter().enumerate() {
            let field = n.field_name_for_child(i as u32);
            if field == Some("name") || field == Some("argument") {
                let joined = prev_end
                    .map(|e| {
                        let gap = &src[e.min(k.start_byte())..k.start_byte()];
                        gap.is_empty()
                            || (gap.len() % 2 == 0 && gap.chunks(2).all(|p| p == b"\\\n"))
                    })
                    .unwrap_or(false);
                if joined {
                    self.out.syntax_errors.push(format!(
                        "ambiguous word boundary near `{}`",
                        text(*k, src).chars().take(30).collect::<String>()
                    ));
                }
                prev_end = Some(k.end_byte());
            }
        }
        if let Some(name) = n.child_by_field_name("name") {
            const RESERVED: &[&str] = &[
                "fi", "done", "then", "else", "elif", "esac", "do", "in", "}", "{", "function",
            ];
            let t = text(name, src);
            if RESERVED.contains(&t) {
                self.out
                    .syntax_errors
                    .push(format!("syntax error: unexpected reserved word `{t}`"));
            }
        }
        redirects.extend_from_slice(outer_redirects);
        let persist = argv.is_empty();
        let mut scoped: Vec<(String, Option<String>)> = Vec::new();
        for a in assigns {
            let (name, val) = self.assignment(a, src, layer, persist);
            if !persist {
                // `X=/ bash -c 'rm -rf $X'`: the value is in the command's environment
                scoped.push((name.clone(), self.vars.get(&name).cloned()));
                self.vars.insert(name, val);
            }
        }
        let mut fed = false;
        for r in &redirects {
            if let Some(t) = self.stdin_text_of(*r, src) {
                self.feed = Some(Feed {
                    words: t.split_whitespace().map(String::from).collect(),
                    text: t,
                    exact: true,
                });
                fed = true;
            }
        }
        let last = if argv.is_empty() {
            layer
        } else {
            self.dispatch(argv, layer, cmd_id, false, fed)
        };
        for (k, v) in scoped.into_iter().rev() {
            match v {
                Some(v) => self.vars.insert(k, v),
                None => self.vars.remove(&k),
            };
        }
        for r in &redirects {
            self.redirect(*r, src, layer);
        }
        last.max(layer)
    }

    /// Judge an argv (after unwrapping) and recurse into what it runs.
    fn dispatch(
        &mut self,
        argv: Vec<String>,
        layer: usize,
        cmd_id: usize,
        stdin_args: bool,
        fed_static: bool,
    ) -> usize {
        if argv.is_empty() || !self.budget_ok() {
            return layer;
        }
        let mut word0 = argv[0].clone();
        if word0.contains(['*', '?', '[']) {
            // a glob in the program name (`/bin/r?`) may match any program
            word0.push(DYN);
        }
        let (dir, base) = split_program(&word0);
        // a function defined in this command shadows any program
        if dir.is_none() {
            if let Some(body) = self.funcs.get(&base).cloned() {
                self.called.insert(base.clone());
                if self.call_stack.contains(&base) {
                    if self.cur_pipe.is_some() || self.background {
                        self.out.fork_bombs.push(format!(
                            "function `{}` calls itself in a pipeline or in the background",
                            display_word(&base)
                        ));
                    }
                    let mut e = Effects::default();
                    e.add(Category::Process);
                    let mut op =
                        self.blank_op(&format!("bash:{base}"), &base, OpKind::Command, e, layer);
                    op.notes.push(format!("function `{base}` calls itself"));
                    op.cmd_id = cmd_id;
                    self.out.ops.push(op);
                    return layer;
                }
                self.call_stack.push(base.clone());
                self.via.push(format!("function {base}"));
                let l = self.script(&body, layer);
                self.via.pop();
                self.call_stack.pop();
                return l;
            }
        }
        let fed_static = fed_static || self.feed.is_some();
        let mut args: Vec<String> = argv[1..].to_vec();
        let mut xargs_fed = false;
        if stdin_args {
            match self.feed.take() {
                Some(f) if !f.words.is_empty() => {
                    args.extend(f.words.iter().cloned());
                    if !f.exact {
                        args.push(DYN.to_string());
                    }
                    xargs_fed = true;
                }
                _ => args.push(DYN.to_string()),
            }
        }
        let mut a: Analysis = knowledge::analyze(&base, dir.as_deref(), &args);
        // a shell reading a static script from stdin (heredoc, herestring, `cat <<EOF |`)
        // is a pass-through like `sh -c`: its script is walked below
        let static_script = a.is_shell
            && a.stdin_exec
            && self
                .feed
                .as_ref()
                .map(|f| !f.text.is_empty())
                .unwrap_or(false);
        if static_script {
            a.effects = Effects::default();
            a.notes
                .push("runs the static script given on stdin (walked below)".into());
        }
        let skip_op = !a.nested.is_empty()
            && a.effects.is_pure()
            && a.block.is_none()
            && a.reads.is_empty()
            && a.writes.is_empty()
            && !a.stdin_exec;
        let opname = if base.contains(DYN) {
            "bash:<dynamic>".to_string()
        } else {
            format!("bash:{base}")
        };
        if a.canonical.as_deref() == Some("cd") {
            let target = a
                .parsed
                .operands
                .first()
                .cloned()
                .unwrap_or_else(|| "~".into());
            self.cwd = if target.contains(DYN) {
                None
            } else if target.starts_with('/') || target.starts_with('~') {
                Some(super::danger::normalize(&target))
            } else {
                self.cwd
                    .as_ref()
                    .map(|c| super::danger::normalize(&format!("{c}/{target}")))
            };
        }
        // static output for the next pipeline stage
        match a.canonical.as_deref() {
            Some("echo") | Some("printf") if !args.iter().any(|x| x.contains(DYN)) => {
                self.stage_out = static_output(&base, &args).map(|text| Feed {
                    words: text.split_whitespace().map(String::from).collect(),
                    text,
                    exact: true,
                });
            }
            Some("cat") if fed_static && args.is_empty() => {
                self.stage_out = self.feed.clone();
            }
            Some("find") if a.nested.is_empty() => {
                self.stage_out = Some(Feed {
                    text: String::new(),
                    words: a.parsed.operands.clone(),
                    exact: false,
                });
            }
            _ => {}
        }
        if !skip_op {
            let mut op = self.blank_op(&opname, &base, OpKind::Command, a.effects, layer);
            op.program_dir = dir.clone();
            op.args = args.clone();
            op.notes = a.notes.clone();
            op.reads = a.reads.clone();
            op.writes = a.writes.clone();
            op.block = a.block.clone();
            op.stdin_exec = a.stdin_exec;
            op.decoder = a.decoder;
            op.network_source = a.network_source;
            op.runs_file = a.runs_file;
            op.is_shell = a.is_shell;
            op.canonical = a.canonical.clone();
            op.parsed = a.parsed.clone();
            op.cmd_id = cmd_id;
            op.stdin_args = stdin_args && !xargs_fed;
            op.fed_static = fed_static;
            op.static_script = static_script;
            if op.remote {
                op.effects = Effects::default();
                op.effects.add(Category::Network);
                op.notes.push("runs on the remote host".into());
            }
            self.out.ops.push(op);
        }
        let mut last = layer;
        for nested in a.nested {
            match nested {
                Nested::Argv {
                    argv,
                    via,
                    stdin_args: sa,
                    replace,
                    cwd,
                } => {
                    self.via.push(via);
                    let saved_cwd = self.cwd.clone();
                    if let Some(d) = cwd {
                        self.cwd = if d.contains(DYN) {
                            None
                        } else if d.starts_with('/') || d.starts_with('~') {
                            Some(super::danger::normalize(&d))
                        } else {
                            self.cwd
                                .as_ref()
                                .map(|c| super::danger::normalize(&format!("{c}/{d}")))
                        };
                    }
                    match replace {
                        Some(r) => {
                            // xargs -I R: one run per input item, R replaced by the item
                            let (mut items, exact) = match self.feed.take() {
                                Some(f) => (f.words, f.exact),
                                None => (Vec::new(), false),
                            };
                            items.truncate(8);
                            if !exact || items.is_empty() {
                                items.push(DYN.to_string());
                            }
                            for item in items {
                                let v: Vec<String> =
                                    argv.iter().map(|w| w.replace(r.as_str(), &item)).collect();
                                let l = self.dispatch(v, layer, cmd_id, false, fed_static);
                                last = last.max(l);
                            }
                        }
                        None => {
                            let l =
                                self.dispatch(argv, layer, cmd_id, sa || stdin_args, fed_static);
                            last = last.max(l);
                        }
                    }
                    self.cwd = saved_cwd;
                    self.via.pop();
                }
                Nested::Script {
                    text,
                    via,
                    remote,
                    args,
                } => {
                    let saved_remote = self.remote;
                    self.remote |= remote;
                    self.via.push(via);
                    let saved: Vec<(String, Option<String>)> = if args.is_empty() {
                        Vec::new()
                    } else {
                        self.set_positional(&args)
                    };
                    let l = self.script(&text, layer);
                    for (k, v) in saved {
                        match v {
                            Some(v) => self.vars.insert(k, v),
                            None => self.vars.remove(&k),
                        };
                    }
                    last = last.max(l);
                    self.via.pop();
                    self.remote = saved_remote;
                }
                Nested::Code { lang, text } => self.out.codes.push((lang, text)),
            }
        }
        if a.stdin_exec {
            if let Some(f) = self.feed.take() {
                if !f.text.is_empty() {
                    self.via.push(format!("{} (stdin)", display_word(&base)));
                    if a.is_shell || base == "source" || base == "." {
                        last = last.max(self.script(&f.text, layer));
                    } else {
                        self.out.codes.push((base.clone(), f.text));
                    }
                    self.via.pop();
                }
            }
        }
        last
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

fn is_statement(k: &str) -> bool {
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

/// What `echo ARGS` / `printf FORMAT ARGS` print, when it is simple enough to know.
fn static_output(prog: &str, args: &[String]) -> Option<String> {
    if prog == "echo" {
        let mut i = 0;
        let mut escapes = false;
        while i < args.len()
            && args[i].len() > 1
            && args[i].starts_with('-')
            && args[i][1..].chars().all(|c| matches!(c, 'n' | 'e' | 'E'))
        {
            escapes |= args[i].contains('e');
            i += 1;
        }
        let t = args[i..].join(" ");
        if escapes {
            let mut out = String::new();
            words::ansi_c_unescape(&t, &mut out);
            return Some(out);
        }
        return Some(t);
    }
    let fmt = args.first()?;
    let rest = &args[1..];
    let mut unescaped = String::new();
    words::ansi_c_unescape(fmt, &mut unescaped);
    let unescaped = unescaped.replace('\0', "\n");
    if !fmt.contains('%') {
        return Some(unescaped);
    }
    match unescaped.as_str() {
        "%s\n" | "%s" | "%s " => Some(rest.join("\n")),
        _ => None,
    }
}

/// `/usr/bin/rm` → (Some("/usr/bin"), "rm"); `rm` → (None, "rm"); `./x` → (Some("."), "x").
pub fn split_program(w: &str) -> (Option<String>, String) {
    match w.rfind('/') {
        Some(i) => {
            let dir = &w[..i];
            let base = &w[i + 1..];
            let dir = normalize_dir(if dir.is_empty() { "/" } else { dir });
            (Some(dir), base.to_string())
        }
        None => (None, w.to_string()),
    }
}

fn normalize_dir(d: &str) -> String {
    if !d.starts_with('/') {
        return d.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for p in d.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}
