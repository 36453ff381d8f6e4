//! Seed 002's permission set and confidence rules (AC4, AC7), applied to the detected
//! categories:
//!
//! | detected | set | confidence |
//! |---|---|---|
//! | nothing | minimal | 0.95 |
//! | network only | network-api | 0.90, 0.95 with several distinct patterns |
//! | file system only | readonly if every access reads, else filesystem | 0.90 / 0.95 |
//! | environment only | mcp-standard | 0.80 |
//! | mixed (or a tool mapped to mcp-standard) | mcp-standard | 0.70 |
//! | any unknown tool, process control or dynamic code | mcp-standard | 0.50 |
//! | unparseable | minimal | 0.0 (and an `error`) |
//!
//! `trusted` is never the result.

use super::detect::Detection;
use super::{Category, PermissionSet};
use std::collections::BTreeSet;

/// Confidence below which code is never pure and always validated.
pub const LOW_CONFIDENCE: f64 = 0.5;

pub fn decide(detections: &[Detection]) -> (PermissionSet, f64) {
    let cats: BTreeSet<Category> = detections
        .iter()
        .map(|d| d.category)
        .filter(|c| *c != Category::Inert)
        .collect();
    let distinct = |f: &dyn Fn(Category) -> bool| {
        detections
            .iter()
            .filter(|d| f(d.category))
            .map(|d| d.pattern.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    };
    if cats.iter().any(|c| {
        matches!(
            c,
            Category::Dynamic | Category::Process | Category::UnknownTool
        )
    }) {
        return (PermissionSet::McpStandard, 0.50);
    }
    if cats.is_empty() {
        return (PermissionSet::Minimal, 0.95);
    }
    let only = |allowed: &[Category]| cats.iter().all(|c| allowed.contains(c));
    let by_count = |n: usize| if n >= 2 { 0.95 } else { 0.90 };
    if only(&[Category::Network]) {
        let n = distinct(&|c| c == Category::Network);
        return (PermissionSet::NetworkApi, by_count(n));
    }
    if only(&[Category::Read, Category::Write]) {
        let n = distinct(&|c| matches!(c, Category::Read | Category::Write));
        let set = if cats.contains(&Category::Write) {
            PermissionSet::Filesystem
        } else {
            PermissionSet::Readonly
        };
        return (set, by_count(n));
    }
    if only(&[Category::Env]) {
        return (PermissionSet::McpStandard, 0.80);
    }
    (PermissionSet::McpStandard, 0.70)
}
