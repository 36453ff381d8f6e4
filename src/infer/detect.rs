//! The I/O detector: one AST walk that records every reference to something that can reach
//! the network, the file system, the environment, another process, or run code (`fetch`,
//! `Deno.*`, `process.env`, `mcp.<tool>.<op>`, `eval`, `new Function`, `import()`, `require`,
//! dynamic `globalThis[...]`), through aliases, optional chaining, computed constant keys and
//! TypeScript wrappers. It also records what would make name-based purity unsound: a sensitive
//! value escaping into data, mutation of built-ins, and functions that may reach I/O being
//! used as values (methods, getters, callbacks of unknown calls).

use super::catalog::{self, is_sensitive_root, BUILTINS, CALLBACK_METHODS};
use super::mcp_permissions::{McpPermissions, ToolClass};
use super::resolve::{Bindings, Chain, Root, Seg};
use super::Category;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_span::{GetSpan, Span};
use oxc_syntax::scope::ScopeFlags;
use std::collections::HashSet;

/// A tool call target.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRef {
    pub tool: String,
    pub op: String,
    pub class: ToolClass,
}

/// What a sensitive path gives access to.
#[derive(Debug, Clone, PartialEq)]
pub struct PathClass {
    pub pattern: String,
    pub category: Category,
    pub tool: Option<ToolRef>,
}

/// One detected pattern occurrence.
#[derive(Debug, Clone)]
pub struct Detection {
    pub pattern: String,
    pub category: Category,
    pub span: Span,
    /// The sensitive value is used as data (stored, passed, returned), not called or aliased.
    pub escapes: bool,
    pub tool: Option<ToolRef>,
}

/// The detector's findings.
#[derive(Debug, Default)]
pub struct Detected {
    pub detections: Vec<Detection>,
    /// Why no operation of this code can be trusted pure by name, if so.
    pub taint: Option<String>,
    /// Member names the code defines itself (`{ filter() {...} }`, `o.map = ...`); `"*"` when a
    /// computed key could define any name.
    pub user_names: HashSet<String>,
    /// The walk met nesting deeper than `parse::MAX_AST_DEPTH`.
    pub too_deep: bool,
}

/// Classifies a normalised sensitive path (see `Bindings::sensitive`).
pub fn classify_path(path: &[Seg], mapping: &McpPermissions) -> PathClass {
    let name = |i: usize| path.get(i).and_then(Seg::name);
    let simple = |pattern: String, category| PathClass {
        pattern,
        category,
        tool: None,
    };
    let root = name(0).unwrap_or("globalThis");
    match root {
        "fetch" | "XMLHttpRequest" | "WebSocket" | "EventSource" | "WebTransport" => {
            simple(root.to_string(), Category::Network)
        }
        "Deno" => match path.get(1) {
            None => simple("Deno".into(), Category::Process),
            Some(Seg::Dynamic) => simple("Deno[dynamic]".into(), Category::Process),
            Some(Seg::Name(m)) => simple(format!("Deno.{m}"), catalog::deno_member(m)),
        },
        "process" => match path.get(1) {
            Some(Seg::Name(m)) if m == "env" => simple("process.env".into(), Category::Env),
            Some(Seg::Name(m)) => simple(format!("process.{m}"), Category::Process),
            Some(Seg::Dynamic) => simple("process[dynamic]".into(), Category::Process),
            None => simple("process".into(), Category::Process),
        },
        "mcp" => match path.get(1) {
            None => simple("mcp".into(), Category::UnknownTool),
            Some(Seg::Dynamic) => simple("mcp[dynamic]".into(), Category::UnknownTool),
            Some(Seg::Name(tool)) => {
                let mut ops: Vec<&str> =
                    path[2..].iter().map(|s| s.name().unwrap_or("*")).collect();
                while matches!(ops.last(), Some(&"call") | Some(&"apply") | Some(&"bind"))
                    && ops.len() > 1
                {
                    ops.pop();
                }
                let op = if ops.is_empty() {
                    "*".to_string()
                } else {
                    ops.join(".")
                };
                let class = mapping.classify(tool, &op);
                let category = if class.canonical.is_none() {
                    Category::UnknownTool
                } else {
                    Category::of_set(class.permission_set)
                };
                let mut pattern = format!("mcp.{tool}");
                for s in &path[2..] {
                    match s {
                        Seg::Name(n) if op.split('.').any(|o| o == n) => {
                            pattern.push('.');
                            pattern.push_str(n);
                        }
                        Seg::Name(_) => {}
                        Seg::Dynamic => pattern.push_str("[dynamic]"),
                    }
                }
                PathClass {
                    pattern,
                    category,
                    tool: Some(ToolRef {
                        tool: tool.clone(),
                        op,
                        class,
                    }),
                }
            }
        },
        "eval" | "Function" | "require" | "importScripts" | "Worker" | "SharedWorker"
        | "WebAssembly" | "setTimeout" | "setInterval" => {
            simple(root.to_string(), Category::Dynamic)
        }
        g if catalog::GLOBAL_OBJECTS.contains(&g) => match path.get(1) {
            Some(Seg::Dynamic) => simple(format!("{g}[dynamic]"), Category::Dynamic),
            _ => simple(g.to_string(), Category::Dynamic),
        },
        other => simple(other.to_string(), Category::Process),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum FnKind {
    /// `function f() {}` or `const f = () => {}`: safe while `f` is only called directly.
    Named(String),
    /// `(() => {...})()`
    Iife,
    /// A callback given to a built-in method that calls it and keeps nothing (`arr.map(u =>
    /// ...)`, `p.then(...)`, `arr.forEach(...)`): safe unless the code defines a method of
    /// that name itself (then the "built-in" may be the code's own and store it).
    MethodCallback(String),
    /// Anything else: a method, getter, class member, argument of an unknown call...
    Other,
}

struct FnCtx {
    kind: FnKind,
    may_io: bool,
}

/// Runs the detector over a parsed program.
pub fn detect(program: &Program<'_>, b: &Bindings, mapping: &McpPermissions) -> Detected {
    let mut d = Detector {
        b,
        mapping,
        out: Detected::default(),
        value_refs: HashSet::new(),
        fns: Vec::new(),
        pending: None,
        risky_fns: Vec::new(),
        depth: 0,
    };
    d.visit_program(program);
    d.finish()
}

struct Detector<'m> {
    b: &'m Bindings,
    mapping: &'m McpPermissions,
    out: Detected,
    /// Plain identifiers used as values (not as direct callees).
    value_refs: HashSet<String>,
    fns: Vec<FnCtx>,
    pending: Option<FnKind>,
    /// Functions that may reach I/O, by kind.
    risky_fns: Vec<FnKind>,
    depth: usize,
}

/// Whether `e` is a chain the resolver flattens (identifier, member, wrappers).
pub fn is_chain_kind(e: &Expression<'_>) -> bool {
    match e {
        Expression::Identifier(_)
        | Expression::StaticMemberExpression(_)
        | Expression::ComputedMemberExpression(_)
        | Expression::ParenthesizedExpression(_)
        | Expression::TSAsExpression(_)
        | Expression::TSSatisfiesExpression(_)
        | Expression::TSNonNullExpression(_)
        | Expression::TSTypeAssertion(_)
        | Expression::TSInstantiationExpression(_)
        | Expression::SequenceExpression(_) => true,
        Expression::ChainExpression(c) => !matches!(c.expression, ChainElement::CallExpression(_)),
        _ => false,
    }
}

/// The function expression `e` is, through parentheses.
fn as_function<'x, 'a>(e: &'x Expression<'a>) -> bool {
    matches!(
        e.without_parentheses(),
        Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_)
    )
}

fn has_special_seg(segs: &[Seg]) -> Option<&'static str> {
    segs.iter().find_map(|s| match s.name() {
        Some("constructor") => Some("constructor"),
        Some("__proto__") => Some("__proto__"),
        Some("__defineGetter__") | Some("__defineSetter__") => Some("__defineGetter__"),
        _ => None,
    })
}

impl Detector<'_> {
    fn record(&mut self, class: PathClass, span: Span, escapes: bool) {
        if class.category != Category::Inert {
            for f in &mut self.fns {
                f.may_io = true;
            }
        }
        self.out.detections.push(Detection {
            pattern: class.pattern,
            category: class.category,
            span,
            escapes,
            tool: class.tool,
        });
    }

    fn dynamic(&mut self, pattern: &str, span: Span) {
        self.record(
            PathClass {
                pattern: pattern.to_string(),
                category: Category::Dynamic,
                tool: None,
            },
            span,
            false,
        );
    }

    /// A chain in a value position: a sensitive value there escapes (stored, passed,
    /// returned); a plain identifier there is recorded as a value use.
    fn value_reference(&mut self, e: &Expression<'_>) {
        let chain = self.b.chain(e);
        self.check_chain(&chain, e.span(), true);
        if let (Root::Ident(n), true) = (&chain.root, chain.segs.is_empty()) {
            self.value_refs.insert(n.clone());
        }
        for x in chain.extra {
            self.visit_expression(x);
        }
    }

    fn check_chain(&mut self, chain: &Chain<'_, '_>, span: Span, escapes: bool) -> bool {
        if let Some(path) = self.b.sensitive(chain) {
            let class = classify_path(&path, self.mapping);
            self.record(class, span, escapes);
            return true;
        }
        if let Some(s) = has_special_seg(&chain.segs) {
            self.dynamic(s, span);
            return true;
        }
        false
    }

    /// An assignment / update / delete target: writing to a sensitive global or a built-in
    /// changes what other code (and "pure" operations) do.
    fn mutation(&mut self, m: &MemberExpression<'_>) {
        let (object, seg, key) = match m {
            MemberExpression::StaticMemberExpression(s) => {
                (&s.object, Seg::Name(s.property.name.to_string()), None)
            }
            MemberExpression::ComputedMemberExpression(c) => {
                let seg = match self.b.const_str(&c.expression) {
                    Some(s) => Seg::Name(s),
                    None => Seg::Dynamic,
                };
                (&c.object, seg, Some(&c.expression))
            }
            MemberExpression::PrivateFieldExpression(p) => {
                self.visit_expression(&p.object);
                return;
            }
        };
        let chain = self.b.chain(object);
        let mut segs = chain.segs.clone();
        segs.push(seg.clone());
        let full = Chain {
            root: chain.root.clone(),
            root_span: chain.root_span,
            segs,
            extra: vec![],
        };
        let span = m.span();
        if let Some(path) = self.b.sensitive(&full) {
            let class = classify_path(&path, self.mapping);
            self.dynamic(&format!("assign:{}", class.pattern), span);
        } else if matches!(&chain.root, Root::Ident(n) if BUILTINS.contains(&n.as_str()))
            || full.segs.iter().any(|s| {
                matches!(
                    s.name(),
                    Some("prototype") | Some("__proto__") | Some("constructor")
                )
            })
        {
            self.dynamic("builtin-mutation", span);
        }
        match &seg {
            Seg::Name(n) => {
                self.out.user_names.insert(n.clone());
            }
            Seg::Dynamic => {
                self.out.user_names.insert("*".into());
            }
        }
        for x in chain.extra {
            self.visit_expression(x);
        }
        if let Some(k) = key {
            self.visit_expression(k);
        }
    }

    /// `Object.defineProperty(Array.prototype, ...)` and friends.
    fn mutator_call(&mut self, chain: &Chain<'_, '_>, call: &CallExpression<'_>) {
        let mutator = match (&chain.root, chain.segs.as_slice()) {
            (Root::Ident(o), [Seg::Name(m)]) if o == "Object" => matches!(
                m.as_str(),
                "defineProperty" | "defineProperties" | "setPrototypeOf" | "assign"
            ),
            (Root::Ident(o), [Seg::Name(m)]) if o == "Reflect" => {
                matches!(
                    m.as_str(),
                    "set" | "defineProperty" | "setPrototypeOf" | "deleteProperty"
                )
            }
            _ => false,
        };
        if !mutator {
            return;
        }
        match call.arguments.first() {
            None => return,
            // `Object.assign(...targets)`: the target is unknown.
            Some(Argument::SpreadElement(_)) => {
                self.dynamic("builtin-mutation", call.span);
                return;
            }
            Some(_) => {}
        }
        if let Some(first) = call.arguments.first().and_then(|a| a.as_expression()) {
            let c = self.b.chain(first);
            let builtin = matches!(&c.root, Root::Ident(n) if BUILTINS.contains(&n.as_str()) || is_sensitive_root(n) || self.b.aliases.contains_key(n))
                || c.segs
                    .iter()
                    .any(|s| matches!(s.name(), Some("prototype") | Some("__proto__")));
            if builtin {
                self.dynamic("builtin-mutation", call.span);
            }
        }
    }

    fn visit_args(&mut self, args: &[Argument<'_>], method: Option<String>) {
        for a in args {
            if let Some(e) = a.as_expression() {
                if as_function(e) {
                    self.pending = Some(if let Some(m) = &method {
                        FnKind::MethodCallback(m.clone())
                    } else {
                        FnKind::Other
                    });
                }
            }
            self.visit_argument(a);
            self.pending = None;
        }
    }

    fn enter_fn(&mut self) {
        let kind = self.pending.take().unwrap_or(FnKind::Other);
        self.fns.push(FnCtx {
            kind,
            may_io: false,
        });
    }

    fn leave_fn(&mut self) {
        if let Some(f) = self.fns.pop() {
            if f.may_io {
                self.risky_fns.push(f.kind);
            }
        }
    }

    /// Marks enclosing functions: this call may run unknown code.
    fn opaque_call(&mut self) {
        for f in &mut self.fns {
            f.may_io = true;
        }
    }

    fn finish(mut self) -> Detected {
        let io = self
            .out
            .detections
            .iter()
            .any(|d| d.category != Category::Inert);
        let mut taint = None;
        if let Some(d) = self
            .out
            .detections
            .iter()
            .find(|d| d.category == Category::Dynamic)
        {
            taint = Some(format!("dynamic code or access ({})", d.pattern));
        } else if let Some(d) = self.out.detections.iter().find(|d| d.escapes) {
            taint = Some(format!("{} is used as a value", d.pattern));
        } else if io {
            for k in &self.risky_fns {
                match k {
                    FnKind::Other => {
                        taint = Some("a function that may reach I/O is a method, getter or callback of an unknown call".into());
                        break;
                    }
                    FnKind::Named(n) if self.value_refs.contains(n) => {
                        taint = Some(format!(
                            "function {n}, which may reach I/O, is used as a value"
                        ));
                        break;
                    }
                    FnKind::MethodCallback(m)
                        if self.out.user_names.contains(m) || self.out.user_names.contains("*") =>
                    {
                        taint = Some(format!(
                            "a callback that may reach I/O is given to .{m}, which the code defines itself"
                        ));
                        break;
                    }
                    _ => {}
                }
            }
        }
        self.out.taint = taint;
        self.out
    }
}

impl<'a> Visit<'a> for Detector<'_> {
    fn visit_expression(&mut self, it: &Expression<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.out.too_deep = true;
            return;
        }
        self.depth += 1;
        if is_chain_kind(it) {
            self.value_reference(it);
        } else {
            walk::walk_expression(self, it);
        }
        self.depth -= 1;
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.out.too_deep = true;
            return;
        }
        self.depth += 1;
        walk::walk_statement(self, it);
        self.depth -= 1;
    }

    fn visit_member_expression(&mut self, it: &MemberExpression<'a>) {
        // Reached only from chain elements (`a?.b`); value position.
        let chain_obj = self.b.chain(it.object());
        let mut segs = chain_obj.segs.clone();
        match it {
            MemberExpression::StaticMemberExpression(s) => {
                segs.push(Seg::Name(s.property.name.to_string()))
            }
            MemberExpression::ComputedMemberExpression(c) => {
                segs.push(match self.b.const_str(&c.expression) {
                    Some(s) => Seg::Name(s),
                    None => Seg::Dynamic,
                })
            }
            MemberExpression::PrivateFieldExpression(_) => {}
        }
        let full = Chain {
            root: chain_obj.root.clone(),
            root_span: chain_obj.root_span,
            segs,
            extra: vec![],
        };
        self.check_chain(&full, it.span(), true);
        for x in chain_obj.extra {
            self.visit_expression(x);
        }
        if let MemberExpression::ComputedMemberExpression(c) = it {
            self.visit_expression(&c.expression);
        }
    }

    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        // Positions outside expressions (export specifiers, ...): a value use.
        let name = it.name.as_str();
        let chain = Chain {
            root: Root::Ident(name.to_string()),
            root_span: it.span,
            segs: vec![],
            extra: vec![],
        };
        self.check_chain(&chain, it.span, true);
        self.value_refs.insert(name.to_string());
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        let callee = &it.callee;
        if as_function(callee) {
            self.pending = Some(FnKind::Iife);
            self.visit_expression(callee);
            self.pending = None;
            self.visit_args(&it.arguments, None);
            return;
        }
        let mut callback_method = None;
        if is_chain_kind(callee) {
            let chain = self.b.chain(callee);
            let timer_with_fn = matches!(self.b.sensitive(&chain).as_deref(), Some([Seg::Name(n)]) if n == "setTimeout" || n == "setInterval")
                && it
                    .arguments
                    .first()
                    .and_then(|a| a.as_expression())
                    .is_some_and(as_function);
            let sensitive = if timer_with_fn {
                false
            } else if let Some(path) = self.b.sensitive(&chain) {
                let escapes = matches!(chain.segs.last(), Some(Seg::Name(n)) if n == "bind");
                let class = classify_path(&path, self.mapping);
                self.record(class, callee.span(), escapes);
                true
            } else {
                self.check_chain(&chain, callee.span(), false)
            };
            if !sensitive {
                if matches!(chain.segs.last(), Some(Seg::Dynamic)) {
                    self.dynamic("computed-call", callee.span());
                }
                self.mutator_call(&chain, it);
                let name = super::operations::callee_tool_name(&chain);
                let is_method = !chain.segs.is_empty();
                callback_method = chain
                    .segs
                    .last()
                    .and_then(Seg::name)
                    .filter(|m| is_method && CALLBACK_METHODS.contains(m))
                    .map(str::to_string);
                if !catalog::is_pure_operation(&name)
                    && !catalog::is_inert_impure(&name)
                    && !timer_with_fn
                {
                    self.opaque_call();
                }
            }
            for x in chain.extra {
                self.visit_expression(x);
            }
        } else {
            self.opaque_call();
            self.visit_expression(callee);
        }
        self.visit_args(&it.arguments, callback_method);
    }

    fn visit_new_expression(&mut self, it: &NewExpression<'a>) {
        if is_chain_kind(&it.callee) {
            let chain = self.b.chain(&it.callee);
            if !self.check_chain(&chain, it.callee.span(), false) {
                let data = matches!((&chain.root, chain.segs.is_empty()), (Root::Ident(n), true) if catalog::DATA_CONSTRUCTORS.contains(&n.as_str()));
                if !data {
                    self.opaque_call();
                }
            }
            for x in chain.extra {
                self.visit_expression(x);
            }
        } else {
            self.opaque_call();
            self.visit_expression(&it.callee);
        }
        self.visit_args(&it.arguments, None);
    }

    fn visit_tagged_template_expression(&mut self, it: &TaggedTemplateExpression<'a>) {
        if is_chain_kind(&it.tag) {
            let chain = self.b.chain(&it.tag);
            if !self.check_chain(&chain, it.tag.span(), false) {
                self.opaque_call();
            }
            for x in chain.extra {
                self.visit_expression(x);
            }
        } else {
            self.opaque_call();
            self.visit_expression(&it.tag);
        }
        self.visit_template_literal(&it.quasi);
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.dynamic("import()", it.span);
        walk::walk_import_expression(self, it);
    }

    fn visit_import_declaration(&mut self, it: &ImportDeclaration<'a>) {
        if it.import_kind.is_value() {
            self.dynamic("import", it.span);
        }
    }

    fn visit_export_all_declaration(&mut self, it: &ExportAllDeclaration<'a>) {
        self.dynamic("import", it.span);
    }

    fn visit_export_from_declaration(&mut self, it: &ExportFromDeclaration<'a>) {
        self.dynamic("import", it.span);
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        self.visit_binding_pattern(&it.id);
        let Some(init) = &it.init else { return };
        if as_function(init) {
            self.pending = Some(match &it.id {
                BindingPattern::BindingIdentifier(id) => FnKind::Named(id.name.to_string()),
                _ => FnKind::Other,
            });
            self.visit_expression(init);
            self.pending = None;
            return;
        }
        if is_chain_kind(init) {
            if let Some(paths) = self.b.alias_paths(&it.id, init) {
                // An alias: its uses are checked where they happen (an unused alias reaches
                // nothing) — except the environment, which binding already reads.
                for p in paths {
                    let class = classify_path(&p, self.mapping);
                    if class.category == Category::Env {
                        self.record(class, init.span(), false);
                    }
                }
                for x in self.b.chain(init).extra {
                    self.visit_expression(x);
                }
                return;
            }
        }
        self.visit_expression(init);
    }

    fn visit_assignment_expression(&mut self, it: &AssignmentExpression<'a>) {
        self.visit_assignment_target(&it.left);
        if let AssignmentTarget::AssignmentTargetIdentifier(id) = &it.left {
            if as_function(&it.right) {
                self.pending = Some(FnKind::Named(id.name.to_string()));
                self.visit_expression(&it.right);
                self.pending = None;
                return;
            }
            if is_chain_kind(&it.right) {
                let chain = self.b.chain(&it.right);
                if let Some(path) = self.b.sensitive(&chain) {
                    let class = classify_path(&path, self.mapping);
                    if class.category == Category::Env {
                        self.record(class, it.right.span(), false);
                    }
                    for x in chain.extra {
                        self.visit_expression(x);
                    }
                    return;
                }
            }
        }
        self.visit_expression(&it.right);
    }

    fn visit_simple_assignment_target(&mut self, it: &SimpleAssignmentTarget<'a>) {
        match it {
            SimpleAssignmentTarget::AssignmentTargetIdentifier(id) => {
                let n = id.name.as_str();
                if is_sensitive_root(n) && !self.b.aliases.contains_key(n) {
                    self.dynamic(&format!("assign:{n}"), id.span);
                }
            }
            SimpleAssignmentTarget::TSAsExpression(t) => self.visit_expression(&t.expression),
            SimpleAssignmentTarget::TSSatisfiesExpression(t) => {
                self.visit_expression(&t.expression)
            }
            SimpleAssignmentTarget::TSNonNullExpression(t) => self.visit_expression(&t.expression),
            SimpleAssignmentTarget::TSTypeAssertion(t) => self.visit_expression(&t.expression),
            _ => {
                if let Some(m) = it.as_member_expression() {
                    self.mutation(m);
                }
            }
        }
    }

    fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
        match (&it.operator, &it.argument) {
            (UnaryOperator::Typeof, Expression::Identifier(_)) => {}
            (UnaryOperator::Delete, arg) => {
                match arg.without_parentheses().as_member_expression() {
                    Some(m) => self.mutation(m),
                    None => self.visit_expression(arg),
                }
            }
            _ => walk::walk_unary_expression(self, it),
        }
    }

    fn visit_object_property(&mut self, it: &ObjectProperty<'a>) {
        let literal = matches!(
            it.value,
            Expression::StringLiteral(_)
                | Expression::NumericLiteral(_)
                | Expression::BooleanLiteral(_)
                | Expression::NullLiteral(_)
        );
        if !literal {
            match it.key.static_name() {
                Some(n) => {
                    self.out.user_names.insert(n.to_string());
                }
                None => {
                    self.out.user_names.insert("*".into());
                }
            }
        }
        walk::walk_object_property(self, it);
    }

    fn visit_method_definition(&mut self, it: &MethodDefinition<'a>) {
        match it.key.static_name() {
            Some(n) => self.out.user_names.insert(n.to_string()),
            None => self.out.user_names.insert("*".into()),
        };
        walk::walk_method_definition(self, it);
    }

    fn visit_property_definition(&mut self, it: &PropertyDefinition<'a>) {
        match it.key.static_name() {
            Some(n) => self.out.user_names.insert(n.to_string()),
            None => self.out.user_names.insert("*".into()),
        };
        walk::walk_property_definition(self, it);
    }

    fn visit_function(&mut self, it: &Function<'a>, flags: ScopeFlags) {
        if it.is_function_declaration() {
            if let Some(n) = it.name() {
                self.pending = Some(FnKind::Named(n.to_string()));
            }
        }
        self.enter_fn();
        walk::walk_function(self, it, flags);
        self.leave_fn();
    }

    fn visit_arrow_function_expression(&mut self, it: &ArrowFunctionExpression<'a>) {
        self.enter_fn();
        walk::walk_arrow_function_expression(self, it);
        self.leave_fn();
    }

    // Types have no run-time effect (`typeof fetch` in a type is not a use).
    fn visit_ts_type(&mut self, _it: &TSType<'a>) {}
    fn visit_ts_type_parameter_instantiation(&mut self, _it: &TSTypeParameterInstantiation<'a>) {}
    fn visit_ts_type_parameter_declaration(&mut self, _it: &TSTypeParameterDeclaration<'a>) {}
    fn visit_ts_interface_declaration(&mut self, _it: &TSInterfaceDeclaration<'a>) {}
    fn visit_ts_type_alias_declaration(&mut self, _it: &TSTypeAliasDeclaration<'a>) {}
}
