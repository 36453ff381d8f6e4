//! The command as a small DAG (seed 003, DESIGN §5.9): pipeline stages form one layer,
//! `&&`, `||`, `;` start the next. A layer needs validation when it holds a non-pure
//! operation; validation is asked once for the command and names those layers.

use serde::Serialize;

use super::types::Operation;

/// One layer of the DAG.
#[derive(Debug, Clone, Serialize)]
pub struct Layer {
    pub index: usize,
    /// Operation names in this layer (`bash:cat`, `redirect:write`...).
    pub ops: Vec<String>,
    pub pure: bool,
    pub requires_validation: bool,
    /// Why (the non-pure operations and their categories), or why not.
    pub reason: String,
}

/// Renumber the walker's layers densely (0..n) and build the layer list.
pub fn layers(ops: &mut [Operation]) -> Vec<Layer> {
    let mut raw: Vec<usize> = ops.iter().map(|o| o.layer).collect();
    raw.sort_unstable();
    raw.dedup();
    for o in ops.iter_mut() {
        o.layer = raw.binary_search(&o.layer).unwrap_or(0);
    }
    let mut out = Vec::with_capacity(raw.len());
    for i in 0..raw.len() {
        let in_layer: Vec<&Operation> = ops.iter().filter(|o| o.layer == i).collect();
        let impure: Vec<String> = in_layer
            .iter()
            .filter(|o| !o.pure)
            .map(|o| format!("{} ({})", o.op, o.category.as_str()))
            .collect();
        let pure = impure.is_empty();
        out.push(Layer {
            index: i,
            ops: in_layer.iter().map(|o| o.op.clone()).collect(),
            pure,
            requires_validation: !pure,
            reason: if pure {
                "pure operations only: runs without validation".into()
            } else {
                format!("needs validation for {}", impure.join(", "))
            },
        });
    }
    out
}

/// The executed path (`["bash:cat", "bash:grep", ...]`) in layer order.
pub fn executed_path(ops: &[Operation]) -> Vec<String> {
    let mut v: Vec<(usize, usize, String)> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| (o.layer, i, o.op.clone()))
        .collect();
    v.sort();
    v.into_iter().map(|(_, _, s)| s).collect()
}
