//! Name resolution without a scope analysis: member chains (`a.b["c"]?.d`) are flattened to a
//! root and segments; constant strings (`"fe" + "tch"`, `` `x` ``, `const k = "fetch"`) are
//! folded; and aliases of sensitive globals (`const f = fetch`, `const { env } = process`,
//! `const m = mcp.fs`, `let g; g = globalThis`) are collected flow-insensitively (any binding of
//! a name, anywhere, counts everywhere — over-approximate on purpose).

use super::catalog::{is_sensitive_root, GLOBAL_OBJECTS};
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_span::Span;
use std::collections::HashMap;

/// One step of a member chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Name(String),
    /// A computed key that is not a constant.
    Dynamic,
}

impl Seg {
    pub fn name(&self) -> Option<&str> {
        match self {
            Seg::Name(n) => Some(n),
            Seg::Dynamic => None,
        }
    }
}

/// A flattened member chain.
pub struct Chain<'x, 'a> {
    pub root: Root,
    pub root_span: Span,
    pub segs: Vec<Seg>,
    /// Sub-expressions the chain does not cover (computed keys, an opaque root, the leading
    /// expressions of `(a, b)`): a visitor must still visit them.
    pub extra: Vec<&'x Expression<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    Ident(String),
    This,
    /// A call, literal, ... : never a global.
    Opaque,
}

/// Aliases and constant strings of the program.
#[derive(Debug, Default)]
pub struct Bindings {
    pub aliases: HashMap<String, Vec<Seg>>,
    /// `None` when the name is bound to several different values.
    consts: HashMap<String, Option<String>>,
    /// The walk met nesting deeper than `parse::MAX_AST_DEPTH`.
    pub too_deep: bool,
}

impl Bindings {
    /// Collects aliases until nothing changes (aliases of aliases, declared in any order).
    pub fn collect(program: &Program<'_>) -> Bindings {
        let mut b = Bindings::default();
        for _ in 0..6 {
            let mut c = Collector {
                b: &mut b,
                changed: false,
                depth: 0,
            };
            c.visit_program(program);
            if !c.changed {
                break;
            }
        }
        b
    }

    /// Flattens `e` into a chain (iteratively: a long chain cannot exhaust the stack).
    pub fn chain<'x, 'a>(&self, e: &'x Expression<'a>) -> Chain<'x, 'a> {
        let mut segs = Vec::new();
        let mut extra = Vec::new();
        let mut cur = e;
        loop {
            match cur {
                Expression::ParenthesizedExpression(p) => cur = &p.expression,
                Expression::TSAsExpression(t) => cur = &t.expression,
                Expression::TSSatisfiesExpression(t) => cur = &t.expression,
                Expression::TSNonNullExpression(t) => cur = &t.expression,
                Expression::TSTypeAssertion(t) => cur = &t.expression,
                Expression::TSInstantiationExpression(t) => cur = &t.expression,
                Expression::SequenceExpression(s) => {
                    let n = s.expressions.len();
                    extra.extend(s.expressions.iter().take(n.saturating_sub(1)));
                    match s.expressions.last() {
                        Some(last) => cur = last,
                        None => break,
                    }
                }
                Expression::ChainExpression(c) => match &c.expression {
                    ChainElement::StaticMemberExpression(m) => {
                        segs.push(Seg::Name(m.property.name.to_string()));
                        cur = &m.object;
                    }
                    ChainElement::ComputedMemberExpression(m) => {
                        segs.push(self.key(&m.expression, &mut extra));
                        cur = &m.object;
                    }
                    ChainElement::TSNonNullExpression(t) => cur = &t.expression,
                    _ => {
                        extra.push(cur);
                        return Chain {
                            root: Root::Opaque,
                            root_span: span_of(cur),
                            segs: rev(segs),
                            extra,
                        };
                    }
                },
                Expression::StaticMemberExpression(m) => {
                    segs.push(Seg::Name(m.property.name.to_string()));
                    cur = &m.object;
                }
                Expression::ComputedMemberExpression(m) => {
                    segs.push(self.key(&m.expression, &mut extra));
                    cur = &m.object;
                }
                Expression::Identifier(id) => {
                    return Chain {
                        root: Root::Ident(id.name.to_string()),
                        root_span: id.span,
                        segs: rev(segs),
                        extra,
                    }
                }
                Expression::ThisExpression(t) => {
                    return Chain {
                        root: Root::This,
                        root_span: t.span,
                        segs: rev(segs),
                        extra,
                    }
                }
                _ => break,
            }
        }
        extra.push(cur);
        Chain {
            root: Root::Opaque,
            root_span: span_of(cur),
            segs: rev(segs),
            extra,
        }
    }

    fn key<'x, 'a>(&self, k: &'x Expression<'a>, extra: &mut Vec<&'x Expression<'a>>) -> Seg {
        match self.const_str(k) {
            Some(s) => Seg::Name(s),
            None => {
                extra.push(k);
                Seg::Dynamic
            }
        }
    }

    /// The value of a constant string expression, if it is one.
    pub fn const_str(&self, e: &Expression<'_>) -> Option<String> {
        self.const_str_depth(e, 0)
    }

    fn const_str_depth(&self, e: &Expression<'_>, depth: usize) -> Option<String> {
        if depth > 64 {
            return None;
        }
        match e {
            Expression::StringLiteral(s) => Some(s.value.to_string()),
            Expression::NumericLiteral(n) => Some(n.value.to_string()),
            Expression::TemplateLiteral(t) => {
                let mut out = String::new();
                for (i, q) in t.quasis.iter().enumerate() {
                    out.push_str(q.value.cooked.as_ref()?.as_str());
                    if let Some(x) = t.expressions.get(i) {
                        out.push_str(&self.const_str_depth(x, depth + 1)?);
                    }
                }
                Some(out)
            }
            Expression::BinaryExpression(b) if b.operator == BinaryOperator::Addition => {
                let l = self.const_str_depth(&b.left, depth + 1)?;
                let r = self.const_str_depth(&b.right, depth + 1)?;
                Some(l + &r)
            }
            Expression::ParenthesizedExpression(p) => {
                self.const_str_depth(&p.expression, depth + 1)
            }
            Expression::Identifier(id) => self.consts.get(id.name.as_str()).cloned().flatten(),
            _ => None,
        }
    }

    /// The path a chain reaches when it is rooted at a sensitive global (directly or through an
    /// alias), normalised so that `globalThis.fetch` is `fetch`. `None` for ordinary values.
    pub fn sensitive(&self, chain: &Chain<'_, '_>) -> Option<Vec<Seg>> {
        let mut path = match &chain.root {
            Root::Ident(name) => match self.aliases.get(name) {
                Some(p) => p.clone(),
                None if is_sensitive_root(name) => vec![Seg::Name(name.clone())],
                None => return None,
            },
            // `this.fetch` is the global in sloppy functions; only named globals count.
            Root::This => match chain.segs.first() {
                Some(Seg::Name(n)) if is_sensitive_root(n) => vec![],
                _ => return None,
            },
            Root::Opaque => return None,
        };
        path.extend(chain.segs.iter().cloned());
        Some(normalise(path)).filter(|p| match p.first() {
            Some(Seg::Name(n)) => is_sensitive_root(n),
            _ => false,
        })
    }

    /// The names a binding pattern binds, each with the path suffix it receives from the bound
    /// value. `None` for patterns this analysis does not follow (arrays).
    pub fn pattern_targets(&self, p: &BindingPattern<'_>) -> Option<Vec<(String, Vec<Seg>)>> {
        let mut out = Vec::new();
        self.pattern_into(p, Vec::new(), &mut out, 0)?;
        Some(out)
    }

    fn pattern_into(
        &self,
        p: &BindingPattern<'_>,
        prefix: Vec<Seg>,
        out: &mut Vec<(String, Vec<Seg>)>,
        depth: usize,
    ) -> Option<()> {
        if depth > 32 {
            return None;
        }
        match p {
            BindingPattern::BindingIdentifier(id) => out.push((id.name.to_string(), prefix)),
            BindingPattern::AssignmentPattern(a) => {
                self.pattern_into(&a.left, prefix, out, depth + 1)?
            }
            BindingPattern::ObjectPattern(o) => {
                for prop in &o.properties {
                    let seg = match prop.key.static_name() {
                        Some(n)
                            if !prop.computed
                                || matches!(prop.key, PropertyKey::StringLiteral(_)) =>
                        {
                            Seg::Name(n.to_string())
                        }
                        _ => match prop.key.as_expression().and_then(|k| self.const_str(k)) {
                            Some(s) => Seg::Name(s),
                            None => Seg::Dynamic,
                        },
                    };
                    let mut pre = prefix.clone();
                    pre.push(seg);
                    self.pattern_into(&prop.value, pre, out, depth + 1)?;
                }
                if let Some(rest) = &o.rest {
                    self.pattern_into(&rest.argument, prefix, out, depth + 1)?;
                }
            }
            BindingPattern::ArrayPattern(_) => return None,
        }
        Some(())
    }

    /// For `const <pattern> = <init>` binding a sensitive value: the path each bound name gets.
    pub fn alias_paths(
        &self,
        id: &BindingPattern<'_>,
        init: &Expression<'_>,
    ) -> Option<Vec<Vec<Seg>>> {
        let base = self.sensitive(&self.chain(init))?;
        let targets = self.pattern_targets(id)?;
        Some(
            targets
                .into_iter()
                .map(|(_, suffix)| {
                    let mut p = base.clone();
                    p.extend(suffix);
                    normalise(p)
                })
                .collect(),
        )
    }

    fn add_alias(&mut self, name: String, path: Vec<Seg>) -> bool {
        match self.aliases.get(&name) {
            Some(p) if *p == path => false,
            // Bound to two different sensitive things: keep the broader (the shorter prefix).
            Some(p) if p.len() <= path.len() => false,
            _ => {
                self.aliases.insert(name, path);
                true
            }
        }
    }

    fn add_const(&mut self, name: String, value: Option<String>) -> bool {
        match self.consts.get(&name) {
            None => {
                self.consts.insert(name, value);
                true
            }
            Some(v) if *v == value => false,
            Some(None) => false,
            Some(_) => {
                self.consts.insert(name, None);
                true
            }
        }
    }
}

fn rev(mut v: Vec<Seg>) -> Vec<Seg> {
    v.reverse();
    v
}

fn span_of(e: &Expression<'_>) -> Span {
    use oxc_span::GetSpan;
    e.span()
}

/// `globalThis.window.fetch` → `fetch`; `globalThis` alone stays.
fn normalise(mut path: Vec<Seg>) -> Vec<Seg> {
    while path.len() > 1 {
        match (&path[0], &path[1]) {
            (Seg::Name(g), Seg::Name(_)) if GLOBAL_OBJECTS.contains(&g.as_str()) => {
                path.remove(0);
            }
            _ => break,
        }
    }
    path
}

struct Collector<'b> {
    b: &'b mut Bindings,
    changed: bool,
    depth: usize,
}

impl<'a> Visit<'a> for Collector<'_> {
    fn visit_expression(&mut self, it: &Expression<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.b.too_deep = true;
            return;
        }
        self.depth += 1;
        walk::walk_expression(self, it);
        self.depth -= 1;
    }

    fn visit_statement(&mut self, it: &Statement<'a>) {
        if self.depth >= super::parse::MAX_AST_DEPTH {
            self.b.too_deep = true;
            return;
        }
        self.depth += 1;
        walk::walk_statement(self, it);
        self.depth -= 1;
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        if let Some(init) = &it.init {
            let chain = self.b.chain(init);
            if let Some(path) = self.b.sensitive(&chain) {
                if let Some(targets) = self.b.pattern_targets(&it.id) {
                    for (name, suffix) in targets {
                        let mut p = path.clone();
                        p.extend(suffix);
                        self.changed |= self.b.add_alias(name, normalise(p));
                    }
                }
            } else if let BindingPattern::BindingIdentifier(id) = &it.id {
                let v = self.b.const_str(init);
                self.changed |= self.b.add_const(id.name.to_string(), v);
            }
        }
        walk::walk_variable_declarator(self, it);
    }

    fn visit_assignment_expression(&mut self, it: &AssignmentExpression<'a>) {
        if let AssignmentTarget::AssignmentTargetIdentifier(id) = &it.left {
            let chain = self.b.chain(&it.right);
            if let Some(path) = self.b.sensitive(&chain) {
                self.changed |= self.b.add_alias(id.name.to_string(), path);
            } else {
                // A reassigned constant is no longer a constant.
                let v = if it.operator == AssignmentOperator::Assign {
                    self.b.const_str(&it.right)
                } else {
                    None
                };
                self.changed |= self.b.add_const(id.name.to_string(), v);
            }
        }
        walk::walk_assignment_expression(self, it);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::{parse::parse, Lang};
    use oxc_allocator::Allocator;

    fn names(p: &[Seg]) -> String {
        p.iter()
            .map(|s| s.name().unwrap_or("[*]").to_string())
            .collect::<Vec<_>>()
            .join(".")
    }

    #[test]
    fn aliases_and_constants_are_followed() {
        let code = r#"
            const f = fetch; let g; g = globalThis; const { env } = process;
            const m = mcp.fs; const { write: w } = mcp.fs; const k = "fe" + `tch`; const h = g[k];
            const z = later; var later = Deno;
        "#;
        let alloc = Allocator::default();
        let prog = parse(&alloc, code, Lang::Js).unwrap();
        let b = Bindings::collect(&prog);
        let get = |n: &str| b.aliases.get(n).map(|p| names(p));
        assert_eq!(get("f").as_deref(), Some("fetch"));
        assert_eq!(get("g").as_deref(), Some("globalThis"));
        assert_eq!(get("env").as_deref(), Some("process.env"));
        assert_eq!(get("m").as_deref(), Some("mcp.fs"));
        assert_eq!(get("w").as_deref(), Some("mcp.fs.write"));
        assert_eq!(get("h").as_deref(), Some("fetch"));
        assert_eq!(get("z").as_deref(), Some("Deno"));
    }
}
