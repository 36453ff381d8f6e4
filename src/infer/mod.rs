//! Code permission inference and the pure-operation DAG for agent JS/TS (seeds 002, 003, 000).
//!
//! [`infer`] parses the code with oxc ([`parse`]), resolves aliases ([`resolve`]), detects every
//! reach to I/O or dynamic code ([`detect`]), applies seed 002's set and confidence rules
//! ([`confidence`]) with the MCP tool mapping ([`mcp_permissions`]), splits the code into
//! `code:*` operations and tool calls ([`operations`]), and builds layers and fused pure tasks
//! ([`dag`]), re-validating every pure task ([`revalidate`]). It never executes the code.
//!
//! Unparseable code gives `minimal` with confidence 0.0 and an `error`; unparseable or
//! low-confidence code is never pure and always needs validation; `trusted` is never inferred.
//!
//! Untrusted input on a thread with a small stack (tokio workers, the blocking pool: 2 MiB)
//! goes through [`infer_isolated`], which runs on a 64 MiB stack.

pub mod catalog;
pub mod confidence;
pub mod dag;
pub mod detect;
pub mod mcp_permissions;
pub mod operations;
pub mod parse;
pub mod resolve;
pub mod revalidate;

pub use catalog::{is_code_operation, is_pure_operation};
pub use mcp_permissions::McpPermissions;
pub use revalidate::{validate_pure_task, validate_pure_tasks, RevalidationError};

use oxc_allocator::Allocator;
use oxc_span::GetSpan;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

use crate::permset::{smallest, Needs, PermissionSet, Workspace};

/// Bumped whenever the rules change: stored results of older versions are recomputed.
pub const INFER_VERSION: &str = "infer-1";

/// Source language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Js,
    Ts,
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Js => "js",
            Lang::Ts => "ts",
        }
    }
    pub fn parse(s: &str) -> Option<Lang> {
        match s.to_ascii_lowercase().as_str() {
            "js" | "javascript" | "mjs" => Some(Lang::Js),
            "ts" | "typescript" | "mts" => Some(Lang::Ts),
            _ => None,
        }
    }
}

/// What a detected pattern reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Network,
    Read,
    Write,
    Env,
    /// Process control, subprocesses, runtime internals.
    Process,
    /// `eval`, `new Function`, `import()`, `require`, unresolvable global access, mutation of
    /// built-ins: anything could happen.
    Dynamic,
    UnknownTool,
    /// A known tool mapped to mcp-standard.
    Other,
    /// A known tool mapped to minimal.
    Inert,
}

impl Category {
    /// The category a tool mapped to `s` counts as: the one reach its row of the profile table
    /// names, or `Other` for a set that reaches several things or anything.
    pub fn of_set(s: PermissionSet) -> Category {
        let p = s.profile();
        if p.any_effect || !p.inferred {
            return Category::Other;
        }
        match (p.network, p.workspace) {
            (false, Workspace::None) => Category::Inert,
            (false, Workspace::Read) => Category::Read,
            (false, Workspace::Write) => Category::Write,
            (true, Workspace::None) => Category::Network,
            (true, _) => Category::Other,
        }
    }
    /// What the category reaches, in the terms of the profile table.
    pub fn needs(self) -> Needs {
        match self {
            Category::Network => Needs::NETWORK,
            Category::Read => Needs::READ,
            Category::Write => Needs::WRITE,
            Category::Inert => Needs::NONE,
            _ => Needs::OTHER,
        }
    }
    /// The narrowest set covering the category.
    pub fn permission_set(self) -> PermissionSet {
        smallest(self.needs())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpanJson {
    pub start: u32,
    pub end: u32,
    /// 1-based line of `start`.
    pub line: usize,
}

/// One `code:*` operation or tool call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Operation {
    pub id: String,
    /// `code:filter`, `db:query`, ...
    pub tool: String,
    /// `code` or `tool`.
    pub kind: String,
    pub span: SpanJson,
    /// The original text (span slice).
    pub code: String,
    pub pure: bool,
    /// Seed 003 `isSafeToFail`: pure operations may fail without consequence.
    pub safe_to_fail: bool,
    pub permission_set: PermissionSet,
    pub requires_validation: bool,
    /// Layer of the task that runs it.
    pub layer: usize,
    /// Longest dependency path among operations (the unfused, logical DAG).
    pub logical_layer: usize,
    pub task: String,
    pub depends_on: Vec<String>,
    /// The call whose callback contains this operation.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub within: Option<String>,
}

/// A physical task: one operation, or a fused run of sequential pure operations.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Task {
    pub id: String,
    /// The operation's tool, or `code:computation` for a fused run.
    pub tool: String,
    /// `code_execution` or `mcp_tool`.
    #[serde(rename = "type")]
    pub kind: String,
    pub code: String,
    pub pure: bool,
    pub permission_set: PermissionSet,
    pub layer: usize,
    pub depends_on: Vec<String>,
    /// Seed 003 `logicalTools`: the operations it runs, in order.
    pub logical_tools: Vec<String>,
    pub fused_from: Vec<String>,
    pub requires_validation: bool,
    /// Set when a task first marked pure failed the static re-validation.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub revalidation_error: Option<String>,
}

/// One layer of the physical DAG.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Layer {
    pub index: usize,
    pub tasks: Vec<String>,
    pub requires_validation: bool,
    /// The tools a human is asked to validate in this layer.
    pub validate: Vec<String>,
}

/// The answer of [`infer`] (also the JSON of `infer-permissions` and the action).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InferReport {
    /// SHA-256 of the code (hex).
    pub code_hash: String,
    pub language: Lang,
    pub permission_set: PermissionSet,
    pub confidence: f64,
    /// Distinct patterns that decided the set, sorted.
    pub detected_patterns: Vec<String>,
    /// The whole code is pure: minimal, parsed, confident, every task pure.
    pub pure: bool,
    pub requires_validation: bool,
    pub operations: Vec<Operation>,
    pub layers: Vec<Layer>,
    pub tasks: Vec<Task>,
    /// Seed 003 `executedPath`: the operations a run goes through, in order.
    pub executed_path: Vec<String>,
    /// Why no operation could be trusted pure by its name (dynamic code, escaping capability).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub purity_withdrawn: Option<String>,
    /// Dynamic code or a capability used as a value: something may act where no operation
    /// shows it, so an executor must validate the whole program, not layer by layer.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub unaccounted: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// SHA-256 of the code, hex.
pub fn code_hash(code: &str) -> String {
    hex::encode(Sha256::digest(code.as_bytes()))
}

/// Infers the permission set, operations and DAG of `code`. Never executes it; never panics on
/// bad input (unparseable code gives a minimal report with confidence 0.0 and `error`).
pub fn infer(code: &str, lang: Lang, mapping: &McpPermissions) -> InferReport {
    let hash = code_hash(code);
    let alloc = Allocator::default();
    let program = match parse::parse(&alloc, code, lang) {
        Ok(p) => p,
        Err(e) => return unparseable(hash, lang, e),
    };
    let too_deep = || {
        unparseable(
            hash.clone(),
            lang,
            format!(
                "code is nested too deeply to analyse safely (over {} levels)",
                parse::MAX_AST_DEPTH
            ),
        )
    };
    let bindings = resolve::Bindings::collect(&program);
    let found = detect::detect(&program, &bindings, mapping);
    if bindings.too_deep || found.too_deep {
        return too_deep();
    }
    let (set, confidence) = confidence::decide(&found.detections);
    let Some(ops) = operations::operations(&program, &bindings, mapping) else {
        return too_deep();
    };
    let statements = program.body.iter().map(|s| s.span()).collect();
    let dag = dag::build(dag::Input {
        code,
        lang,
        ops,
        statements,
        found: &found,
        set,
        confidence,
    });
    let detected_patterns: BTreeSet<String> =
        found.detections.iter().map(|d| d.pattern.clone()).collect();
    let low = confidence < confidence::LOW_CONFIDENCE;
    let pure = !low && set == PermissionSet::Minimal && dag.tasks.iter().all(|t| t.pure);
    // Safety net: dynamic code, or a capability used as a value, may act where no operation
    // shows it.
    let unaccounted = found
        .detections
        .iter()
        .any(|d| d.category == Category::Dynamic || d.escapes);
    let requires_validation =
        low || unaccounted || dag.layers.iter().any(|l| l.requires_validation);
    InferReport {
        code_hash: hash,
        language: lang,
        permission_set: set,
        confidence,
        detected_patterns: detected_patterns.into_iter().collect(),
        pure,
        requires_validation,
        executed_path: dag.operations.iter().map(|o| o.tool.clone()).collect(),
        operations: dag.operations,
        layers: dag.layers,
        tasks: dag.tasks,
        purity_withdrawn: found.taint.clone(),
        unaccounted,
        error: None,
    }
}

fn unparseable(hash: String, lang: Lang, error: String) -> InferReport {
    InferReport {
        code_hash: hash,
        language: lang,
        permission_set: PermissionSet::Minimal,
        confidence: 0.0,
        detected_patterns: vec![],
        pure: false,
        requires_validation: true,
        operations: vec![],
        layers: vec![],
        tasks: vec![],
        executed_path: vec![],
        purity_withdrawn: None,
        unaccounted: true,
        error: Some(error),
    }
}

/// Seed 003 `isSafeToFail`: a pure task (minimal, re-validated) may fail without consequence.
pub fn is_safe_to_fail(task: &Task) -> bool {
    task.pure && task.kind == "code_execution" && task.permission_set == PermissionSet::Minimal
}

/// Stack of the thread [`infer_isolated`] runs on: the parse pre-scan bounds nesting, this
/// leaves a wide margin for oxc's recursive descent and the AST walks.
pub const INFER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// [`infer`] on a dedicated thread with a large stack (tokio and blocking-pool threads have
/// 2 MiB); a panic inside is an error, not a crash of the caller.
pub fn infer_isolated(
    code: String,
    lang: Lang,
    mapping: McpPermissions,
) -> anyhow::Result<InferReport> {
    let handle = std::thread::Builder::new()
        .name("infer".into())
        .stack_size(INFER_STACK_BYTES)
        .spawn(move || infer(&code, lang, &mapping))?;
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("permission inference failed unexpectedly (panic)"))
}
