//! Call-site instrumentation: every tool call the inference found (`mcp.db.query(args)`, or an
//! alias of it) is rewritten so the engine knows which static operation — hence which DAG layer
//! — a runtime call belongs to:
//!
//! ```text
//! OBJ.PROP(ARGS)   →  KEY(site, 1, OBJ, "PROP", [ARGS])
//! OBJ[EXPR](ARGS)  →  KEY(site, 1, OBJ, EXPR, [ARGS])
//! CALLEE(ARGS)     →  KEY(site, 0, CALLEE, null, [ARGS])
//! ```
//!
//! `KEY` is a parameter of the wrapper function with a random 128-bit name: the agent's code
//! cannot name it (its text was written before the name existed). Evaluation order is kept
//! (object, then arguments, then the call); a function that is not a bridge function is called
//! with its original `this`. Optional calls and calls inside optional chains are left alone:
//! a bridge call that carries no site is treated as unplanned (whole-program validation).

use crate::infer::{parse, Lang};
use oxc_allocator::Allocator;
use oxc_ast::ast::*;
use oxc_ast_visit::{walk, Visit};
use oxc_span::GetSpan;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Callee {
    Member { obj: (u32, u32), key: Key },
    Plain((u32, u32)),
}

#[derive(Debug, Clone)]
enum Key {
    Name(String),
    Expr((u32, u32)),
}

#[derive(Debug, Clone)]
struct Site {
    id: usize,
    span: (u32, u32),
    callee: Callee,
    args: Option<(u32, u32)>,
}

/// The instrumented text and the sites that were rewritten.
#[derive(Debug, Clone)]
pub struct Instrumented {
    pub code: String,
    pub sites: Vec<usize>,
}

/// Rewrites the calls whose span (start, end) is a key of `wanted` (value: the site id).
pub fn instrument(
    code: &str,
    lang: Lang,
    wanted: &HashMap<(u32, u32), usize>,
    key: &str,
) -> Result<Instrumented, String> {
    if wanted.is_empty() {
        return Ok(Instrumented {
            code: code.to_string(),
            sites: vec![],
        });
    }
    let alloc = Allocator::default();
    let program = parse::parse(&alloc, code, lang)?;
    let mut v = Finder {
        wanted,
        sites: Vec::new(),
        chain: 0,
    };
    v.visit_program(&program);
    let mut sites = v.sites;
    sites.sort_by(|a, b| a.span.0.cmp(&b.span.0).then(b.span.1.cmp(&a.span.1)));
    let mut out = String::with_capacity(code.len() + sites.len() * 48);
    emit(code, (0, code.len() as u32), &sites, key, &mut out)?;
    let mut ids: Vec<usize> = sites.iter().map(|s| s.id).collect();
    ids.sort_unstable();
    Ok(Instrumented {
        code: out,
        sites: ids,
    })
}

struct Finder<'w> {
    wanted: &'w HashMap<(u32, u32), usize>,
    sites: Vec<Site>,
    chain: usize,
}

fn sp(s: oxc_span::Span) -> (u32, u32) {
    (s.start, s.end)
}

impl<'a> Visit<'a> for Finder<'_> {
    fn visit_chain_expression(&mut self, it: &ChainExpression<'a>) {
        self.chain += 1;
        walk::walk_chain_expression(self, it);
        self.chain -= 1;
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        if let Some(&id) = self.wanted.get(&sp(it.span)) {
            if self.chain == 0 && !it.optional {
                let callee = match it.callee.without_parentheses() {
                    Expression::StaticMemberExpression(m)
                        if !m.optional && !matches!(m.object, Expression::Super(_)) =>
                    {
                        Some(Callee::Member {
                            obj: sp(m.object.span()),
                            key: Key::Name(m.property.name.to_string()),
                        })
                    }
                    Expression::ComputedMemberExpression(m)
                        if !m.optional && !matches!(m.object, Expression::Super(_)) =>
                    {
                        Some(Callee::Member {
                            obj: sp(m.object.span()),
                            key: Key::Expr(sp(m.expression.span())),
                        })
                    }
                    Expression::StaticMemberExpression(_)
                    | Expression::ComputedMemberExpression(_)
                    | Expression::PrivateFieldExpression(_)
                    | Expression::Super(_) => None,
                    _ => Some(Callee::Plain(sp(it.callee.span()))),
                };
                if let Some(callee) = callee {
                    let args = match (it.arguments.first(), it.arguments.last()) {
                        (Some(f), Some(l)) => Some((f.span().start, l.span().end)),
                        _ => None,
                    };
                    self.sites.push(Site {
                        id,
                        span: sp(it.span),
                        callee,
                        args,
                    });
                }
            }
        }
        walk::walk_call_expression(self, it);
    }
}

fn slice(code: &str, r: (u32, u32)) -> Result<&str, String> {
    code.get(r.0 as usize..r.1 as usize)
        .ok_or_else(|| "internal error: a call span does not fall on character boundaries".into())
}

/// Copies `range` of `code` to `out`, rewriting the sites it contains (recursively).
fn emit(
    code: &str,
    range: (u32, u32),
    sites: &[Site],
    key: &str,
    out: &mut String,
) -> Result<(), String> {
    let mut pos = range.0;
    let start = sites.partition_point(|s| s.span.0 < range.0);
    for s in &sites[start..] {
        if s.span.0 >= range.1 {
            break;
        }
        if s.span.0 < pos || s.span.1 > range.1 {
            continue; // inside a site already emitted (handled by its own recursion)
        }
        out.push_str(slice(code, (pos, s.span.0))?);
        out.push_str(key);
        out.push('(');
        out.push_str(&s.id.to_string());
        match &s.callee {
            Callee::Member { obj, key: k } => {
                out.push_str(", 1, (");
                emit(code, *obj, sites, key, out)?;
                out.push_str("), ");
                match k {
                    Key::Name(n) => out.push_str(&serde_json::to_string(n).unwrap_or_default()),
                    Key::Expr(e) => {
                        out.push('(');
                        emit(code, *e, sites, key, out)?;
                        out.push(')');
                    }
                }
            }
            Callee::Plain(c) => {
                out.push_str(", 0, (");
                emit(code, *c, sites, key, out)?;
                out.push_str("), null");
            }
        }
        out.push_str(", [");
        if let Some(a) = s.args {
            emit(code, a, sites, key, out)?;
        }
        out.push_str("])");
        pos = s.span.1;
    }
    out.push_str(slice(code, (pos, range.1))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(code: &str, needle: &str) -> (u32, u32) {
        let s = code.find(needle).unwrap() as u32;
        (s, s + needle.len() as u32)
    }

    #[test]
    fn member_plain_and_nested_calls_are_rewritten_in_order() {
        let code = "const r = await mcp.a.b({x: mcp.c.d(1)});\nconst q = f;\nreturn q(...xs);";
        let mut w = HashMap::new();
        w.insert(at(code, "mcp.a.b({x: mcp.c.d(1)})"), 0);
        w.insert(at(code, "mcp.c.d(1)"), 1);
        w.insert(at(code, "q(...xs)"), 2);
        let i = instrument(code, Lang::Js, &w, "K").unwrap();
        assert_eq!(
            i.code,
            "const r = await K(0, 1, (mcp.a), \"b\", [{x: K(1, 1, (mcp.c), \"d\", [1])}]);\nconst q = f;\nreturn K(2, 0, (q), null, [...xs]);"
        );
        assert_eq!(i.sites, vec![0, 1, 2]);
    }

    #[test]
    fn optional_calls_are_left_alone() {
        let code = "return mcp.a?.b(1);";
        let mut w = HashMap::new();
        w.insert(at(code, "mcp.a?.b(1)"), 0);
        let i = instrument(code, Lang::Js, &w, "K").unwrap();
        assert_eq!(i.code, code);
        assert!(i.sites.is_empty());
    }

    #[test]
    fn computed_keys_and_typescript_type_arguments() {
        let code = "const x = await mcp.db[\"query\"]<Row[]>({sql: 'q' as string});";
        let mut w = HashMap::new();
        w.insert(
            at(code, "mcp.db[\"query\"]<Row[]>({sql: 'q' as string})"),
            4,
        );
        let i = instrument(code, Lang::Ts, &w, "K").unwrap();
        assert_eq!(
            i.code,
            "const x = await K(4, 1, (mcp.db), (\"query\"), [{sql: 'q' as string}]);"
        );
    }
}
