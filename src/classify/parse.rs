//! Parsing: tree-sitter-bash with the grammar's error recovery turned into refusals. Any
//! ERROR or MISSING node, or a tree deeper than [`MAX_AST_DEPTH`], is a parse error — a
//! clear refusal, never "pure". The walk over the tree is in `walk.rs` / `dispatch.rs`.

use std::cell::RefCell;

use tree_sitter::{Node, Parser, Tree};

pub use super::rawop::{sensitive_var, RawOp, Walked};
pub use super::walk::walk;

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
