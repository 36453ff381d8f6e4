//! From operations to the physical DAG (seeds 003 and 000): which operations are pure, which
//! need a human, the fusion of each run of sequential pure operations into one task (its
//! `logical_tools` list them), task layers (longest dependency path) and, per layer, whether it
//! requires validation — a layer of pure tasks never does; a tool call does unless its mapping
//! says `approval = "auto"`; unparseable or low-confidence code always does.

use super::catalog::{is_inert_impure, is_pure_operation};
use super::confidence::LOW_CONFIDENCE;
use super::detect::Detected;
use super::mcp_permissions::Approval;
use super::operations::RawOp;
use super::{revalidate, Category, Lang, Layer, Operation, SpanJson, Task};
use crate::permset::PermissionSet;
use oxc_span::Span;
use std::collections::BTreeSet;

/// Everything the DAG needs.
pub struct Input<'c> {
    pub code: &'c str,
    pub lang: Lang,
    pub ops: Vec<RawOp>,
    pub statements: Vec<Span>,
    pub found: &'c Detected,
    pub set: PermissionSet,
    pub confidence: f64,
}

pub struct Dag {
    pub operations: Vec<Operation>,
    pub tasks: Vec<Task>,
    pub layers: Vec<Layer>,
}

/// Long because the DAG is built in dependent phases over the same index vectors (purity in
/// post-order, fusion of pure runs, tasks, layers, statements).
pub fn build(input: Input<'_>) -> Dag {
    let Input {
        code,
        lang,
        ops,
        statements,
        found,
        set,
        confidence,
    } = input;
    let low = confidence < LOW_CONFIDENCE;
    let has_io = found
        .detections
        .iter()
        .any(|d| d.category != Category::Inert);
    let n = ops.len();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for op in &ops {
        if let Some(p) = op.parent {
            if p < n {
                children[p].push(op.id);
            }
        }
    }
    let mut det_spans: Vec<(u32, u32)> = found
        .detections
        .iter()
        .map(|d| (d.span.start, d.span.end))
        .collect();
    det_spans.sort_unstable();
    let detection_inside = |s: Span| {
        let i = det_spans.partition_point(|(a, _)| *a < s.start);
        det_spans[i..]
            .iter()
            .take_while(|(a, _)| *a < s.end)
            .any(|(_, b)| *b <= s.end)
    };
    let effective_impure = |op: &RawOp| {
        op.tool_call.is_some()
            || op.io.is_some()
            || (!is_pure_operation(&op.tool) && !is_inert_impure(&op.tool) && has_io)
    };
    let user_defined = |op: &RawOp| {
        op.method
            && (found.user_names.contains("*")
                || found
                    .user_names
                    .contains(op.tool.trim_start_matches("code:")))
    };
    // Children come before their parent (post-order), so one forward pass settles both.
    let mut pure = vec![false; n];
    let mut needs = vec![false; n];
    for op in &ops {
        let kids = &children[op.id];
        pure[op.id] = !low
            && found.taint.is_none()
            && op.tool_call.is_none()
            && op.io.is_none()
            && is_pure_operation(&op.tool)
            && !user_defined(op)
            && kids.iter().all(|c| !effective_impure(&ops[*c]))
            && ops[op.first_inner.min(op.id)..op.id]
                .iter()
                .all(|o| !effective_impure(o))
            && !detection_inside(op.span);
        needs[op.id] = if low {
            true
        } else if pure[op.id] {
            false
        } else if let Some(t) = &op.tool_call {
            t.class.approval == Approval::Hil
        } else if op.io.is_some() || kids.iter().any(|c| needs[*c]) {
            true
        } else if is_inert_impure(&op.tool) {
            false
        } else {
            has_io
        };
    }
    let op_set = |op: &RawOp, is_pure: bool| -> PermissionSet {
        if let Some(t) = &op.tool_call {
            t.class.permission_set
        } else if let Some(c) = op.io {
            c.permission_set()
        } else if is_pure || !has_io {
            PermissionSet::Minimal
        } else {
            set
        }
    };

    // Fusion: runs of sequential pure top-level operations become one task.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut run: Vec<usize> = Vec::new();
    for op in ops.iter().filter(|o| o.parent.is_none()) {
        if pure[op.id] {
            run.push(op.id);
        } else {
            if !run.is_empty() {
                groups.push(std::mem::take(&mut run));
            }
            groups.push(vec![op.id]);
        }
    }
    if !run.is_empty() {
        groups.push(run);
    }

    let mut task_of = vec![usize::MAX; n];
    for (t, g) in groups.iter().enumerate() {
        for &id in g {
            assign(id, t, &children, &mut task_of);
        }
    }
    let mut stmt_ops: Vec<Vec<usize>> = vec![Vec::new(); statements.len()];
    for op in &ops {
        if let Some(v) = stmt_ops.get_mut(op.stmt) {
            v.push(op.id);
        }
    }

    let text = |s: Span| -> String {
        code.get(s.start as usize..s.end as usize)
            .unwrap_or_default()
            .to_string()
    };
    let mut tasks: Vec<Task> = Vec::with_capacity(groups.len());
    let mut layers_of: Vec<usize> = Vec::with_capacity(groups.len());
    let mut next_free_stmt = 0usize;
    for (t, g) in groups.iter().enumerate() {
        let first = &ops[g[0]];
        let fused = g.len() > 1;
        let is_pure = g.iter().all(|id| pure[*id]);
        let mut dep_tasks = BTreeSet::new();
        for &id in g {
            for d in all_deps(id, &ops, &children) {
                let dt = task_of[d];
                if dt != t && dt < t {
                    dep_tasks.insert(dt);
                }
            }
        }
        let layer = dep_tasks
            .iter()
            .map(|d| layers_of[*d] + 1)
            .max()
            .unwrap_or(0);
        layers_of.push(layer);
        let code_text = if is_pure {
            statement_code(
                g,
                &ops,
                &stmt_ops,
                &statements,
                &task_of,
                t,
                &mut next_free_stmt,
                code,
            )
            .unwrap_or_else(|| {
                g.iter()
                    .map(|id| text(ops[*id].span))
                    .collect::<Vec<_>>()
                    .join(";\n")
            })
        } else {
            text(first.span)
        };
        let mut logical = Vec::new();
        for &id in g {
            collect_tools(id, &ops, &children, &mut logical);
        }
        let requires = g.iter().any(|id| needs[*id]);
        tasks.push(Task {
            id: format!("t{t}"),
            tool: if fused {
                "code:computation".into()
            } else {
                first.tool.clone()
            },
            kind: if first.tool_call.is_some() && !fused {
                "mcp_tool".into()
            } else {
                "code_execution".into()
            },
            code: code_text,
            pure: is_pure,
            permission_set: if is_pure {
                PermissionSet::Minimal
            } else {
                op_set(first, false)
            },
            layer,
            depends_on: dep_tasks.iter().map(|d| format!("t{d}")).collect(),
            logical_tools: logical,
            fused_from: g.iter().map(|id| format!("op{id}")).collect(),
            requires_validation: requires,
            revalidation_error: None,
        });
    }

    // Seed 000: a task marked pure is re-validated statically before it is trusted.
    let mut alloc = oxc_allocator::Allocator::default();
    for task in &mut tasks {
        if let Err(e) = revalidate::validate_with(task, lang, &mut alloc) {
            task.pure = false;
            task.requires_validation = true;
            task.permission_set = set;
            task.revalidation_error = Some(e.to_string());
            for id in task
                .fused_from
                .iter()
                .filter_map(|s| s[2..].parse::<usize>().ok())
            {
                pure[id] = false;
                needs[id] = true;
            }
        }
    }

    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(code.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |pos: u32| line_starts.partition_point(|s| *s <= pos as usize);
    let operations = ops
        .iter()
        .map(|op| {
            let t = task_of[op.id];
            let task_layer = layers_of.get(t).copied().unwrap_or(0);
            Operation {
                id: format!("op{}", op.id),
                tool: op.tool.clone(),
                kind: if op.tool_call.is_some() {
                    "tool"
                } else {
                    "code"
                }
                .into(),
                span: SpanJson {
                    start: op.span.start,
                    end: op.span.end,
                    line: line_of(op.span.start),
                },
                code: text(op.span),
                pure: pure[op.id],
                safe_to_fail: pure[op.id],
                permission_set: op_set(op, pure[op.id]),
                requires_validation: needs[op.id],
                layer: task_layer,
                logical_layer: 0,
                task: format!("t{t}"),
                depends_on: op.deps.iter().map(|d| format!("op{d}")).collect(),
                within: op.parent.map(|p| format!("op{p}")),
            }
        })
        .collect::<Vec<_>>();
    let mut operations = operations;
    // Logical layer: longest path over operation dependencies (deps always precede).
    let mut ll = vec![0usize; n];
    for op in &ops {
        ll[op.id] = op
            .deps
            .iter()
            .filter(|d| **d < op.id)
            .map(|d| ll[*d] + 1)
            .max()
            .unwrap_or(0);
        operations[op.id].logical_layer = ll[op.id];
    }

    let max_layer = layers_of.iter().copied().max();
    let layers = match max_layer {
        None => vec![],
        Some(m) => (0..=m)
            .map(|i| {
                let ts: Vec<&Task> = tasks.iter().filter(|t| t.layer == i).collect();
                Layer {
                    index: i,
                    tasks: ts.iter().map(|t| t.id.clone()).collect(),
                    requires_validation: low || ts.iter().any(|t| t.requires_validation),
                    validate: ts
                        .iter()
                        .filter(|t| t.requires_validation)
                        .map(|t| t.tool.clone())
                        .collect(),
                }
            })
            .collect(),
    };
    Dag {
        operations,
        tasks,
        layers,
    }
}

fn assign(id: usize, t: usize, children: &[Vec<usize>], task_of: &mut [usize]) {
    let mut stack = vec![id];
    while let Some(x) = stack.pop() {
        if x < task_of.len() && task_of[x] == usize::MAX {
            task_of[x] = t;
            stack.extend(children[x].iter().copied());
        }
    }
}

fn all_deps(id: usize, ops: &[RawOp], children: &[Vec<usize>]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![id];
    while let Some(x) = stack.pop() {
        out.extend(ops[x].deps.iter().copied());
        stack.extend(children[x].iter().copied());
    }
    out
}

fn collect_tools(id: usize, ops: &[RawOp], children: &[Vec<usize>], out: &mut Vec<String>) {
    // children were emitted first (they run inside the call)
    let mut ids = vec![id];
    let mut i = 0;
    while i < ids.len() {
        let x = ids[i];
        ids.extend(children[x].iter().copied());
        i += 1;
    }
    ids.sort_unstable();
    out.extend(ids.into_iter().map(|x| ops[x].tool.clone()));
}

/// The code of a pure run: the whole statements it owns from its first one (with the op-less
/// statements just before them — literals the run reads), then the text of its operations in
/// a statement it shares with other tasks. `None` when it owns no whole statement.
#[allow(clippy::too_many_arguments)]
fn statement_code(
    g: &[usize],
    ops: &[RawOp],
    stmt_ops: &[Vec<usize>],
    statements: &[Span],
    task_of: &[usize],
    t: usize,
    next_free: &mut usize,
    code: &str,
) -> Option<String> {
    let lo = g.iter().map(|id| ops[*id].stmt).min()?;
    let hi = g.iter().map(|id| ops[*id].stmt).max()?;
    if hi >= statements.len() || lo < *next_free {
        return None;
    }
    let owned = |s: usize| stmt_ops[s].iter().all(|id| task_of[*id] == t);
    let mut last = None;
    for s in lo..=hi {
        if owned(s) {
            last = Some(s);
        } else {
            break;
        }
    }
    let last = last?;
    let mut start = lo;
    while start > *next_free && stmt_ops[start - 1].is_empty() {
        start -= 1;
    }
    *next_free = last + 1;
    let mut out = code
        .get(statements[start].start as usize..statements[last].end as usize)?
        .to_string();
    for id in g.iter().filter(|id| ops[**id].stmt > last) {
        let sp = ops[*id].span;
        out.push('\n');
        out.push_str(
            code.get(sp.start as usize..sp.end as usize)
                .unwrap_or_default(),
        );
        out.push(';');
    }
    Some(out)
}
