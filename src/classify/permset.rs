//! Permission sets and confidence (seed 002, DESIGN §5.4): all pure → `minimal`; reads only →
//! `readonly`; writes → `filesystem`; network only → `network-api`; env, process, unknown, or
//! network mixed with anything → `mcp-standard`. `trusted` is never inferred. Confidence
//! follows seed 002's rules applied to the shell operations.

use serde::Serialize;

use super::knowledge::Effects;
use super::parse::RawOp;
use super::types::Category;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionSet {
    Minimal,
    Readonly,
    Filesystem,
    NetworkApi,
    McpStandard,
}

impl PermissionSet {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionSet::Minimal => "minimal",
            PermissionSet::Readonly => "readonly",
            PermissionSet::Filesystem => "filesystem",
            PermissionSet::NetworkApi => "network-api",
            PermissionSet::McpStandard => "mcp-standard",
        }
    }
}

/// The smallest set that covers every effect.
pub fn infer(all: &Effects) -> PermissionSet {
    if all.has(Category::Unknown) || all.has(Category::Process) || all.has(Category::Env) {
        return PermissionSet::McpStandard;
    }
    if all.has(Category::Network) {
        if all.has(Category::Readonly) || all.has(Category::Filesystem) {
            return PermissionSet::McpStandard;
        }
        return PermissionSet::NetworkApi;
    }
    if all.has(Category::Filesystem) {
        return PermissionSet::Filesystem;
    }
    if all.has(Category::Readonly) {
        return PermissionSet::Readonly;
    }
    PermissionSet::Minimal
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
