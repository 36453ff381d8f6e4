//! Preparing a run: infer the code's DAG (seeds 002/003/000), instrument its tool-call sites,
//! strip TypeScript types — on a thread with a large stack, since all three walk an
//! attacker-shaped AST — and derive the [`Plan`]: which static site is which tool call, in
//! which layer, and whether it needs a human.

use super::{instrument, strip};
use crate::infer::{self, InferReport, Lang, McpPermissions};
use std::collections::{BTreeMap, HashMap};

/// A tool-call operation of the inference, by site id (its index in `report.operations`).
#[derive(Debug, Clone)]
pub struct SiteInfo {
    /// `tool:op` as written (`brainloop:execute_bash`).
    pub tool: String,
    pub layer: usize,
    pub requires_validation: bool,
    pub line: usize,
    pub code: String,
}

/// What the runner needs to know about the code.
#[derive(Debug)]
pub struct Plan {
    pub report: InferReport,
    /// The JavaScript the engine runs (instrumented; types stripped).
    pub js: String,
    pub sites: BTreeMap<usize, SiteInfo>,
    /// Low confidence or unaccounted dynamic code: one validation for the whole program,
    /// before anything runs.
    pub whole_program: Option<String>,
}

/// Which validation a call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    None,
    Layer(usize),
    All,
}

impl Gate {
    pub fn name(&self) -> String {
        match self {
            Gate::None => "none".into(),
            Gate::Layer(l) => format!("layer:{l}"),
            Gate::All => "all".into(),
        }
    }
}

impl Plan {
    /// The gate of a runtime call of `mcp.<tool>.<op>` made at `site`.
    pub fn gate(&self, tool: &str, op: &str, site: Option<usize>) -> Gate {
        if self.whole_program.is_some() {
            return Gate::All;
        }
        match site.and_then(|s| self.sites.get(&s)) {
            Some(info) if info.tool == format!("{tool}:{op}") => {
                if info.requires_validation {
                    Gate::Layer(info.layer)
                } else {
                    Gate::None
                }
            }
            // A call the analysis did not see at this place (dynamic access, `.call`, an
            // optional chain, code built at run time): the whole program needs a human.
            _ => Gate::All,
        }
    }

    /// The tool-call sites of a layer that need validation.
    pub fn layer_sites(&self, layer: usize) -> Vec<&SiteInfo> {
        self.sites
            .values()
            .filter(|s| s.layer == layer && s.requires_validation)
            .collect()
    }
}

/// [`prepare`] on a dedicated thread with a large stack; a panic inside is an error.
pub fn prepare_isolated(
    code: String,
    lang: Lang,
    mapping: McpPermissions,
    key: String,
) -> Result<Plan, String> {
    std::thread::Builder::new()
        .name("run_code-prepare".into())
        .stack_size(infer::INFER_STACK_BYTES)
        .spawn(move || prepare(&code, lang, &mapping, &key))
        .map_err(|e| format!("cannot start the analysis thread: {e}"))?
        .join()
        .map_err(|_| "the analysis failed unexpectedly (panic)".to_string())?
}

/// Infers, instruments and compiles `code`; an error means it cannot run at all.
pub fn prepare(
    code: &str,
    lang: Lang,
    mapping: &McpPermissions,
    key: &str,
) -> Result<Plan, String> {
    let report = infer::infer(code, lang, mapping);
    if let Some(e) = &report.error {
        return Err(format!("the code cannot run: {e}"));
    }
    let mut wanted = HashMap::new();
    let mut sites = BTreeMap::new();
    for (i, op) in report.operations.iter().enumerate() {
        if op.kind != "tool" {
            continue;
        }
        wanted.insert((op.span.start, op.span.end), i);
        sites.insert(
            i,
            SiteInfo {
                tool: op.tool.clone(),
                layer: op.layer,
                requires_validation: op.requires_validation,
                line: op.span.line,
                code: op.code.chars().take(300).collect(),
            },
        );
    }
    let inst = instrument::instrument(code, lang, &wanted, key)?;
    // Sites the rewrite could not mark (optional chains...) carry no site at run time.
    sites.retain(|id, _| inst.sites.binary_search(id).is_ok());
    let js = match lang {
        Lang::Js => inst.code,
        Lang::Ts => strip::strip_types(&inst.code)?,
    };
    let whole_program = if report.confidence < infer::confidence::LOW_CONFIDENCE {
        Some(format!(
            "low confidence ({:.2}) in the analysis of the code",
            report.confidence
        ))
    } else if report.unaccounted {
        Some(match &report.purity_withdrawn {
            Some(t) => format!("the code may act where no operation shows it: {t}"),
            None => format!(
                "the code uses dynamic features the analysis cannot follow ({})",
                report.detected_patterns.join(", ")
            ),
        })
    } else {
        None
    };
    Ok(Plan {
        report,
        js,
        sites,
        whole_program,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(code: &str, mapping: &str) -> Plan {
        let m = McpPermissions::from_toml_over(mapping, Some(McpPermissions::defaults())).unwrap();
        prepare(code, Lang::Js, &m, "K").unwrap()
    }

    #[test]
    fn tool_sites_get_their_layer_and_validation() {
        let p = plan(
            "const a = await mcp.brainloop.execute_bash({command: 'echo 1'});\nconst b = await mcp.db.query({sql: a.stdout});\nreturn b;",
            "",
        );
        assert!(p.whole_program.is_none(), "{:?}", p.whole_program);
        let s: Vec<_> = p.sites.iter().collect();
        assert_eq!(s.len(), 2);
        let (a, b) = (s[0], s[1]);
        assert_eq!(a.1.tool, "brainloop:execute_bash");
        assert!(
            !a.1.requires_validation,
            "brainloop actions validate themselves"
        );
        assert_eq!(b.1.tool, "db:query");
        assert!(b.1.requires_validation);
        assert!(b.1.layer > a.1.layer);
        assert_eq!(p.gate("brainloop", "execute_bash", Some(*a.0)), Gate::None);
        assert_eq!(p.gate("db", "query", Some(*b.0)), Gate::Layer(b.1.layer));
        // wrong tool at a site, or no site: the whole program
        assert_eq!(p.gate("brainloop", "execute_bash", Some(*b.0)), Gate::All);
        assert_eq!(p.gate("db", "query", None), Gate::All);
        assert!(
            p.js.contains("K(") && !p.js.contains("mcp.db.query("),
            "{}",
            p.js
        );
    }

    #[test]
    fn dynamic_code_needs_the_whole_program_validated() {
        let p = plan("const f = globalThis['ev' + 'al'];\nreturn f('1+1');", "");
        assert!(p.whole_program.is_some());
        assert_eq!(p.gate("brainloop", "get_stats", Some(0)), Gate::All);
    }

    #[test]
    fn ways_to_forge_a_call_site_need_the_whole_program_validated() {
        // Reading a function's (instrumented) source and evaluating it in scope, or building
        // code at run time: the analysis flags each, so no site is trusted without a human.
        for code in [
            "function f() { return mcp.brainloop.get_stats({}); }\nreturn eval(f.toString().replace('get_stats', 'execute_bash'));",
            "return (function(){}).constructor('return 1')();",
            "const F = Function; return new F('return 1')();",
            "return await import('x');",
        ] {
            let p = plan(code, "");
            assert!(p.whole_program.is_some(), "{code}");
        }
    }

    #[test]
    fn unparseable_code_cannot_run() {
        let m = McpPermissions::defaults();
        let e = prepare("return (", Lang::Js, &m, "K").unwrap_err();
        assert!(e.contains("cannot run"), "{e}");
    }
}
