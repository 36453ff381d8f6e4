//! The classifier's permission set and confidence (seed 002, DESIGN §5.4): the effects of every
//! operation become [`Needs`] (reads → read, writes → write, network → network; env, process or
//! unknown → anything), and the set is the narrowest row of the profile table covering them
//! (`crate::permset::smallest`): all pure → `minimal`; reads only → `readonly`; writes →
//! `filesystem`; network only → `network-api`; anything else → `mcp-standard`. `trusted` is
//! never inferred. Confidence follows seed 002's rules applied to the shell operations.

use crate::permset::{smallest, Needs, PermissionSet};

use super::knowledge::Effects;
use super::parse::RawOp;
use super::types::Category;

/// What the effects reach, in the terms of the profile table.
pub fn needs(all: &Effects) -> Needs {
    Needs {
        read: all.has(Category::Readonly),
        write: all.has(Category::Filesystem),
        network: all.has(Category::Network),
        other: all.has(Category::Unknown) || all.has(Category::Process) || all.has(Category::Env),
    }
}

/// The smallest set that covers every effect.
pub fn infer(all: &Effects) -> PermissionSet {
    smallest(needs(all))
}

/// Seed 002 AC7: no patterns → 0.95; one clear pattern → 0.90; several of one type → 0.95;
/// mixed → 0.75; unknown (unknown programs, computed words, truncated analysis) → 0.50.
pub fn confidence(ops: &[RawOp], all: &Effects, truncated: bool) -> f64 {
    if truncated || all.has(Category::Unknown) || ops.iter().any(|o| o.dynamic()) {
        return 0.5;
    }
    let cats: Vec<Category> = all
        .categories()
        .into_iter()
        .filter(|c| *c != Category::Pure)
        .collect();
    match cats.len() {
        0 => 0.95,
        1 => {
            let n = ops.iter().filter(|o| !o.effects.is_pure()).count();
            if n <= 1 {
                0.9
            } else {
                0.95
            }
        }
        _ => 0.75,
    }
}
