//! Simple commands: evaluates their words, calls functions defined in the same command,
//! judges the argv against the knowledge table and recurses into what it would run
//! (wrappers, `xargs`, `find -exec`, `sh -c` / `eval` / `env -S` strings with their
//! positional parameters, static scripts fed on stdin), keeping the bounds that make the
//! walk safe on hostile input.

use tree_sitter::Node;

use super::knowledge::{self, Analysis, Effects, Nested, Parsed};
use super::parse::parse_tree;
use super::rawop::RawOp;
use super::types::{display_word, Category, OpKind, DYN};
use super::walk::{text, Feed, Walker, MAX_DEPTH, MAX_OPS};
use super::words;

impl Walker {
    pub(super) fn budget_ok(&mut self) -> bool {
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

    /// Builtins that run hidden code or rebind a sensitive variable (`builtins.rs`).
    pub(super) fn builtin_side_doors(
        &mut self,
        base: &str,
        args: &[String],
        layer: usize,
        cmd_id: usize,
    ) {
        if let Some(why) = super::builtins::runs_hidden_code(base, args) {
            let mut e = Effects::default();
            e.add(Category::Unknown);
            let mut op = self.blank_op(
                "bash:<dynamic>",
                &DYN.to_string(),
                OpKind::Command,
                e,
                layer,
            );
            op.notes.push(why);
            op.cmd_id = cmd_id;
            self.out.ops.push(op);
        }
        if let Some(name) = super::builtins::sensitive_target(base, args) {
            let mut e = Effects::default();
            e.add(Category::Env);
            let mut op = self.blank_op(
                &format!("assign:{name}"),
                &name,
                OpKind::Assignment,
                e,
                layer,
            );
            op.notes.push(format!(
                "{base} rebinds {name}, which changes how later programs are found or behave"
            ));
            op.cmd_id = cmd_id;
            self.out.ops.push(op);
        }
    }

    pub(super) fn push_unknown(&mut self, why: &str, layer: usize) {
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

    pub(super) fn blank_op(
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
            dir: self.dir.clone(),
        }
    }

    /// Bind `$0 $1 ... $@ $*` for a nested `sh -c SCRIPT NAME ARGS`; returns what to restore.
    pub(super) fn set_positional(&mut self, args: &[String]) -> Vec<(String, Option<String>)> {
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
    pub(super) fn script(&mut self, body: &str, layer: usize) -> usize {
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

    /// A simple command: assignments, words, redirects.
    pub(super) fn command(
        &mut self,
        n: Node,
        src: &[u8],
        layer: usize,
        outer_redirects: &[Node],
    ) -> usize {
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
    /// Long because it follows one argv through every way a word can run another program
    /// (functions, globs, xargs, wrappers, interpreters) in the order bash applies them.
    pub(super) fn dispatch(
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
        if dir.is_none() {
            self.builtin_side_doors(&base, &args, layer, cmd_id);
            self.builtin_arith(&base, &args, layer);
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
        if a.canonical.as_deref() == Some("cd") {
            self.dir = moved_dir(
                self.dir.as_deref(),
                a.parsed.operands.first().map(String::as_str),
            );
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
            Some(c) if c == crate::programs::Form::Find.name() && a.nested.is_empty() => {
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
                    let saved_dir = self.dir.clone();
                    if let Some(d) = &cwd {
                        self.dir = moved_dir(self.dir.as_deref(), Some(d));
                    }
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
                    self.dir = saved_dir;
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

/// Where `cd TARGET` leaves a shell that was in `dir` (see `Walker::dir`): None when either is
/// not known statically (a computed operand, `cd -`, `~`, `CDPATH` lookups aside: a relative
/// operand is taken as a path).
fn moved_dir(dir: Option<&str>, target: Option<&str>) -> Option<String> {
    let t = target?;
    if t.contains(DYN) || t == "-" || t.starts_with('~') || t.starts_with('-') {
        return None;
    }
    if t.starts_with('/') {
        return Some(super::danger::normalize(t));
    }
    let d = dir?;
    if d.is_empty() {
        Some(t.trim_end_matches('/').to_string())
    } else {
        Some(format!(
            "{}/{}",
            d.trim_end_matches('/'),
            t.trim_end_matches('/')
        ))
    }
}
