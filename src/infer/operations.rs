//! Splits code into operations (seed 003 `code:*` pseudo-tools, seed 000's list): method calls
//! (`users.filter(...)` → `code:filter`), built-in calls (`Math.round`, `JSON.parse`), operators
//! (`/` → `code:divide`, `&&` → `code:and`), property access (`code:get_length`,
//! `code:get_property`, `code:array_access`), tool calls (`mcp.db.query(...)` → `db:query`) and
//! I/O / dynamic-code uses (`code:fetch`, `code:Deno.readFile`, `code:eval`, `code:import`).
//! Operands come before the operation (evaluation order). Inside a callback given to a call,
//! only impure operations are recorded, as children of that call. Each operation records the
//! operations it depends on: its operands, the producers of the variables it reads, and the
//! previous side effect (side effects keep their order).

use super::catalog::{self, BUILTIN_NAMESPACES, DATA_CONSTRUCTORS};
use super::detect::{classify_path, is_chain_kind, ToolRef};
use super::mcp_permissions::McpPermissions;
use super::resolve::{Bindings, Chain, Root, Seg};
use super::Category;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_span::{GetSpan, Span};
use std::collections::{BTreeSet, HashMap, HashSet};

/// One operation, before layering.
#[derive(Debug, Clone)]
pub struct RawOp {
    pub id: usize,
    pub tool: String,
    pub tool_call: Option<ToolRef>,
    /// For I/O and dynamic-code operations: what they reach.
    pub io: Option<Category>,
    pub span: Span,
    /// Index of the top-level statement it belongs to.
    pub stmt: usize,
    /// The call whose callback contains it.
    pub parent: Option<usize>,
    pub deps: BTreeSet<usize>,
    /// A method call (`x.filter(...)`), as opposed to a built-in or an operator.
    pub method: bool,
    /// Operations `first_inner..id` were found inside this one (operands, callbacks).
    pub first_inner: usize,
}

/// The `code:*` name of a call whose callee is not sensitive.
pub fn callee_tool_name(chain: &Chain<'_, '_>) -> String {
    match (&chain.root, chain.segs.as_slice()) {
        (Root::Ident(n), []) if matches!(n.as_str(), "Number" | "String" | "Boolean") => {
            format!("code:{n}")
        }
        (Root::Ident(ns), [Seg::Name(m)]) if BUILTIN_NAMESPACES.contains(&ns.as_str()) => {
            format!("code:{ns}.{m}")
        }
        (_, [.., Seg::Name(m)]) => format!("code:{m}"),
        _ => "code:call".to_string(),
    }
}

/// Runs the operation pass.
/// Runs the operation pass; `None` when the code is nested deeper than `parse::MAX_AST_DEPTH`.
pub fn operations(
    program: &Program<'_>,
    b: &Bindings,
    mapping: &McpPermissions,
) -> Option<Vec<RawOp>> {
    let mut v = OpVisitor {
        b,
        mapping,
        ops: Vec::new(),
        stmt: 0,
        frames: Vec::new(),
        refs: Vec::new(),
        producers: HashMap::new(),
        last_effect: None,
        depth: 0,
        too_deep: false,
    };
    for (i, s) in program.body.iter().enumerate() {
        v.stmt = i;
        v.visit_statement(s);
    }
    (!v.too_deep).then_some(v.ops)
}

struct OpVisitor<'m> {
    b: &'m Bindings,
    mapping: &'m McpPermissions,
    ops: Vec<RawOp>,
    stmt: usize,
    /// Open callback frames: ids of the impure operations found inside each.
    frames: Vec<Vec<usize>>,
    /// Identifier names read, in visiting order.
    refs: Vec<String>,
    producers: HashMap<String, BTreeSet<usize>>,
    last_effect: Option<usize>,
    depth: usize,
    too_deep: bool,
}

struct Mark {
    ops: usize,
    refs: usize,
}

struct NewOp {
    tool: String,
    tool_call: Option<ToolRef>,
    io: Option<Category>,
    span: Span,
    method: bool,
}

impl OpVisitor<'_> {
    fn mark(&self) -> Mark {
        Mark {
            ops: self.ops.len(),
            refs: self.refs.len(),
        }
    }

    /// The outermost top-level operations emitted since `from` (post-order: containers last).
    fn roots_since(&self, from: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut cur_start = u32::MAX;
        for op in self.ops[from..].iter().rev() {
            if op.parent.is_some() {
                continue;
            }
            if op.span.end <= cur_start {
                out.insert(op.id);
                cur_start = op.span.start;
            }
        }
        out
    }

    fn producers_of_refs(&self, from: usize) -> BTreeSet<usize> {
        let mut seen = HashSet::new();
        let mut out = BTreeSet::new();
        for r in &self.refs[from..] {
            if seen.insert(r.as_str()) {
                if let Some(p) = self.producers.get(r) {
                    out.extend(p.iter().copied());
                }
            }
        }
        out
    }

    fn emit(&mut self, m: &Mark, n: NewOp) -> Option<usize> {
        let side_effect = n.tool_call.is_some()
            || n.io.is_some()
            || (!catalog::is_pure_operation(&n.tool) && !catalog::is_inert_impure(&n.tool));
        if !self.frames.is_empty() && !side_effect {
            return None;
        }
        let id = self.ops.len();
        let mut deps = self.roots_since(m.ops);
        deps.extend(self.producers_of_refs(m.refs));
        if side_effect {
            if let Some(e) = self.last_effect {
                deps.insert(e);
            }
            self.last_effect = Some(id);
        }
        deps.retain(|d| *d < id);
        self.ops.push(RawOp {
            id,
            tool: n.tool,
            tool_call: n.tool_call,
            io: n.io,
            span: n.span,
            stmt: self.stmt,
            parent: None,
            deps,
            method: n.method,
            first_inner: m.ops,
        });
        if let Some(f) = self.frames.last_mut() {
            f.push(id);
        }
        Some(id)
    }

    fn sensitive_op(&self, path: &[Seg], span: Span) -> NewOp {
        let class = classify_path(path, self.mapping);
        match class.tool {
            Some(t) => NewOp {
                tool: format!("{}:{}", t.tool, t.op),
                io: None,
                tool_call: Some(t),
                span,
                method: false,
            },
            None => NewOp {
                tool: format!("code:{}", class.pattern),
                io: Some(class.category),
                tool_call: None,
                span,
                method: false,
            },
        }
    }

    fn visit_args_framed(&mut self, args: &[Argument<'_>]) -> Vec<usize> {
        let mut children = Vec::new();
        for a in args {
            let is_fn = a.as_expression().is_some_and(|e| {
                matches!(
                    e.without_parentheses(),
                    Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_)
                )
            });
            if is_fn {
                self.frames.push(Vec::new());
                self.visit_argument(a);
                if let Some(f) = self.frames.pop() {
                    children.extend(f);
                }
            } else {
                self.visit_argument(a);
            }
        }
        children
    }

    fn adopt(&mut self, parent: Option<usize>, children: Vec<usize>) {
        match parent {
            Some(p) => {
                if !children.is_empty() {
                    // The call runs its callbacks' side effects: it is the latest side effect.
                    self.last_effect = Some(p);
                }
                for c in children {
                    if let Some(op) = self.ops.get_mut(c) {
                        if op.parent.is_none() {
                            op.parent = Some(p);
                        }
                    }
                }
            }
            // Not recorded (a pure op inside an outer callback): the children belong to the
            // enclosing frame.
            None => {
                if let Some(f) = self.frames.last_mut() {
                    f.extend(children);
                }
            }
        }
    }

    fn push_root_ref(&mut self, chain: &Chain<'_, '_>) {
        if let Root::Ident(n) = &chain.root {
            self.refs.push(n.clone());
        }
    }

    fn value_chain(&mut self, e: &Expression<'_>) {
        let m = self.mark();
        let chain = self.b.chain(e);
        self.push_root_ref(&chain);
        for x in chain.extra.clone() {
            self.visit_expression(x);
        }
        if let Some(path) = self.b.sensitive(&chain) {
            let n = self.sensitive_op(&path, e.span());
            self.emit(&m, n);
            return;
        }
        let tool = match chain.segs.last() {
            None => return,
            Some(_)
                if chain
                    .segs
                    .iter()
                    .any(|s| matches!(s.name(), Some("constructor") | Some("__proto__"))) =>
            {
                let n = NewOp {
                    tool: "code:constructor".into(),
                    io: Some(Category::Dynamic),
                    tool_call: None,
                    span: e.span(),
                    method: false,
                };
                self.emit(&m, n);
                return;
            }
            Some(Seg::Name(n)) if n == "length" => "code:get_length",
            Some(Seg::Name(n)) if n.parse::<f64>().is_ok() => "code:array_access",
            Some(Seg::Dynamic) => "code:array_access",
            Some(Seg::Name(_)) => "code:get_property",
        };
        self.emit(
            &m,
            NewOp {
                tool: tool.into(),
                io: None,
                tool_call: None,
                span: e.span(),
                method: false,
            },
        );
    }

    /// A sensitive capability bound to a name without being used (not the environment, whose
    /// binding is already a read).
    fn is_alias_value(&self, e: &Expression<'_>) -> bool {
        self.b
            .sensitive(&self.b.chain(e))
            .is_some_and(|p| classify_path(&p, self.mapping).category != Category::Env)
    }

    fn bind(&mut self, names: Vec<String>, m: &Mark, replace: bool) {
        let mut prods = self.roots_since(m.ops);
        if prods.is_empty() {
            prods = self.producers_of_refs(m.refs);
        }
        for n in names {
            if replace {
                self.producers.insert(n, prods.clone());
            } else {
                self.producers
                    .entry(n)
                    .or_default()
                    .extend(prods.iter().copied());
            }
        }
    }
}

fn binding_names(p: &BindingPattern<'_>, out: &mut Vec<String>) {
    match p {
        BindingPattern::BindingIdentifier(id) => out.push(id.name.to_string()),
        BindingPattern::AssignmentPattern(a) => binding_names(&a.left, out),
        BindingPattern::ObjectPattern(o) => {
            for prop in &o.properties {
                binding_names(&prop.value, out);
            }
            if let Some(r) = &o.rest {
                binding_names(&r.argument, out);
            }
        }
        BindingPattern::ArrayPattern(a) => {
            for el in a.elements.iter().flatten() {
                binding_names(el, out);
            }
            if let Some(r) = &a.rest {
                binding_names(&r.argument, out);
            }
        }
    }
}

impl<'a> Visit<'a> for OpVisitor<'_> {
    fn visit_expression(&mut self, it: &Expression<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.too_deep = true;
            return;
        }
        self.depth += 1;
        if is_chain_kind(it) {
            self.value_chain(it);
        } else {
            walk::walk_expression(self, it);
        }
        self.depth -= 1;
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.too_deep = true;
            return;
        }
        self.depth += 1;
        walk::walk_statement(self, it);
        self.depth -= 1;
    }

    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        self.refs.push(it.name.to_string());
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        let m = self.mark();
        let callee = &it.callee;
        if matches!(
            callee.without_parentheses(),
            Expression::ArrowFunctionExpression(_) | Expression::FunctionExpression(_)
        ) {
            // An IIFE: its body's operations are the operations.
            self.visit_expression(callee);
            for a in &it.arguments {
                self.visit_argument(a);
            }
            return;
        }
        let op = if is_chain_kind(callee) {
            let chain = self.b.chain(callee);
            self.push_root_ref(&chain);
            for x in chain.extra.clone() {
                self.visit_expression(x);
            }
            match self.b.sensitive(&chain) {
                Some(path) => {
                    let timer_fn = matches!(path.as_slice(), [Seg::Name(n)] if n == "setTimeout" || n == "setInterval")
                        && it
                            .arguments
                            .first()
                            .and_then(|a| a.as_expression())
                            .is_some_and(|e| {
                                matches!(
                                    e.without_parentheses(),
                                    Expression::ArrowFunctionExpression(_)
                                        | Expression::FunctionExpression(_)
                                )
                            });
                    if timer_fn {
                        NewOp {
                            tool: format!("code:{}", path[0].name().unwrap_or("setTimeout")),
                            io: None,
                            tool_call: None,
                            span: it.span,
                            method: false,
                        }
                    } else {
                        self.sensitive_op(&path, it.span)
                    }
                }
                None => {
                    let special = chain
                        .segs
                        .iter()
                        .any(|s| matches!(s.name(), Some("constructor") | Some("__proto__")))
                        || matches!(chain.segs.last(), Some(Seg::Dynamic));
                    NewOp {
                        tool: callee_tool_name(&chain),
                        io: special.then_some(Category::Dynamic),
                        tool_call: None,
                        span: it.span,
                        method: !matches!(&chain.root, Root::Ident(ns) if chain.segs.len() == 1 && BUILTIN_NAMESPACES.contains(&ns.as_str()))
                            && !chain.segs.is_empty(),
                    }
                }
            }
        } else {
            self.visit_expression(callee);
            NewOp {
                tool: "code:call".into(),
                io: None,
                tool_call: None,
                span: it.span,
                method: false,
            }
        };
        let children = self.visit_args_framed(&it.arguments);
        let id = self.emit(&m, op);
        self.adopt(id, children);
    }

    fn visit_new_expression(&mut self, it: &NewExpression<'a>) {
        let m = self.mark();
        let op = if is_chain_kind(&it.callee) {
            let chain = self.b.chain(&it.callee);
            self.push_root_ref(&chain);
            for x in chain.extra.clone() {
                self.visit_expression(x);
            }
            match self.b.sensitive(&chain) {
                Some(path) => Some(self.sensitive_op(&path, it.span)),
                None => {
                    let data = matches!((&chain.root, chain.segs.is_empty()), (Root::Ident(n), true) if DATA_CONSTRUCTORS.contains(&n.as_str()));
                    (!data).then(|| NewOp {
                        tool: "code:new".into(),
                        io: None,
                        tool_call: None,
                        span: it.span,
                        method: false,
                    })
                }
            }
        } else {
            self.visit_expression(&it.callee);
            Some(NewOp {
                tool: "code:new".into(),
                io: None,
                tool_call: None,
                span: it.span,
                method: false,
            })
        };
        let children = self.visit_args_framed(&it.arguments);
        match op {
            Some(op) => {
                let id = self.emit(&m, op);
                self.adopt(id, children);
            }
            None => self.adopt(None, children),
        }
    }

    fn visit_tagged_template_expression(&mut self, it: &TaggedTemplateExpression<'a>) {
        let m = self.mark();
        let op = if is_chain_kind(&it.tag) {
            let chain = self.b.chain(&it.tag);
            self.push_root_ref(&chain);
            for x in chain.extra.clone() {
                self.visit_expression(x);
            }
            self.b
                .sensitive(&chain)
                .map(|p| self.sensitive_op(&p, it.span))
        } else {
            self.visit_expression(&it.tag);
            None
        };
        self.visit_template_literal(&it.quasi);
        let op = op.unwrap_or(NewOp {
            tool: "code:call".into(),
            io: None,
            tool_call: None,
            span: it.span,
            method: false,
        });
        self.emit(&m, op);
    }

    fn visit_binary_expression(&mut self, it: &BinaryExpression<'a>) {
        let m = self.mark();
        walk::walk_binary_expression(self, it);
        if let Some(tool) = catalog::binary_operation(it.operator) {
            self.emit(
                &m,
                NewOp {
                    tool: tool.into(),
                    io: None,
                    tool_call: None,
                    span: it.span,
                    method: false,
                },
            );
        }
    }

    fn visit_logical_expression(&mut self, it: &LogicalExpression<'a>) {
        let m = self.mark();
        walk::walk_logical_expression(self, it);
        let tool = match it.operator {
            LogicalOperator::And => "code:and",
            LogicalOperator::Or => "code:or",
            LogicalOperator::Coalesce => return,
        };
        self.emit(
            &m,
            NewOp {
                tool: tool.into(),
                io: None,
                tool_call: None,
                span: it.span,
                method: false,
            },
        );
    }

    fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
        let m = self.mark();
        walk::walk_unary_expression(self, it);
        if it.operator == UnaryOperator::LogicalNot {
            self.emit(
                &m,
                NewOp {
                    tool: "code:not".into(),
                    io: None,
                    tool_call: None,
                    span: it.span,
                    method: false,
                },
            );
        }
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        let m = self.mark();
        walk::walk_import_expression(self, it);
        self.emit(
            &m,
            NewOp {
                tool: "code:import".into(),
                io: Some(Category::Dynamic),
                tool_call: None,
                span: it.span,
                method: false,
            },
        );
    }

    fn visit_export_all_declaration(&mut self, it: &ExportAllDeclaration<'a>) {
        let m = self.mark();
        self.emit(
            &m,
            NewOp {
                tool: "code:import".into(),
                io: Some(Category::Dynamic),
                tool_call: None,
                span: it.span,
                method: false,
            },
        );
    }

    fn visit_export_from_declaration(&mut self, it: &ExportFromDeclaration<'a>) {
        let m = self.mark();
        self.emit(
            &m,
            NewOp {
                tool: "code:import".into(),
                io: Some(Category::Dynamic),
                tool_call: None,
                span: it.span,
                method: false,
            },
        );
    }

    fn visit_import_declaration(&mut self, it: &ImportDeclaration<'a>) {
        let m = self.mark();
        if it.import_kind.is_value() {
            self.emit(
                &m,
                NewOp {
                    tool: "code:import".into(),
                    io: Some(Category::Dynamic),
                    tool_call: None,
                    span: it.span,
                    method: false,
                },
            );
        }
    }

    fn visit_simple_assignment_target(&mut self, it: &SimpleAssignmentTarget<'a>) {
        if let Some(mem) = it.as_member_expression() {
            let chain = self.b.chain(mem.object());
            for x in chain.extra {
                self.visit_expression(x);
            }
            if let MemberExpression::ComputedMemberExpression(c) = mem {
                self.visit_expression(&c.expression);
            }
        } else {
            walk::walk_simple_assignment_target(self, it);
        }
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        self.visit_binding_pattern(&it.id);
        let Some(init) = &it.init else { return };
        let m = self.mark();
        let alias = is_chain_kind(init)
            && self.b.alias_paths(&it.id, init).is_some_and(|ps| {
                ps.iter()
                    .all(|p| classify_path(p, self.mapping).category != Category::Env)
            });
        if alias {
            // `const f = fetch`: no operation; its uses are the operations.
            let chain = self.b.chain(init);
            for x in chain.extra {
                self.visit_expression(x);
            }
        } else {
            self.visit_expression(init);
        }
        let mut names = Vec::new();
        binding_names(&it.id, &mut names);
        self.bind(names, &m, true);
    }

    fn visit_assignment_expression(&mut self, it: &AssignmentExpression<'a>) {
        let m = self.mark();
        self.visit_assignment_target(&it.left);
        let alias = matches!(it.left, AssignmentTarget::AssignmentTargetIdentifier(_))
            && is_chain_kind(&it.right)
            && self.is_alias_value(&it.right);
        if !alias {
            self.visit_expression(&it.right);
        }
        let m2 = Mark {
            ops: m.ops,
            refs: m.refs,
        };
        match &it.left {
            AssignmentTarget::AssignmentTargetIdentifier(id) => {
                let replace = it.operator == AssignmentOperator::Assign;
                self.bind(vec![id.name.to_string()], &m2, replace);
            }
            other => {
                if let Some(mem) = other.as_member_expression() {
                    if let Root::Ident(n) = self.b.chain(mem.object()).root {
                        self.bind(vec![n], &m2, false);
                    }
                }
            }
        }
    }

    fn visit_for_of_statement(&mut self, it: &ForOfStatement<'a>) {
        let m = self.mark();
        self.visit_expression(&it.right);
        if let ForStatementLeft::VariableDeclaration(d) = &it.left {
            let mut names = Vec::new();
            for decl in &d.declarations {
                binding_names(&decl.id, &mut names);
            }
            self.bind(names, &m, true);
        }
        self.visit_statement(&it.body);
    }

    // Types have no run-time effect.
    fn visit_ts_type(&mut self, _it: &TSType<'a>) {}
    fn visit_ts_type_parameter_instantiation(&mut self, _it: &TSTypeParameterInstantiation<'a>) {}
    fn visit_ts_interface_declaration(&mut self, _it: &TSInterfaceDeclaration<'a>) {}
    fn visit_ts_type_alias_declaration(&mut self, _it: &TSTypeAliasDeclaration<'a>) {}
}
