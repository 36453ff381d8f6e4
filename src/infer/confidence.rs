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
//! The set is the narrowest row of the profile table covering every detected category
//! (`crate::permset::smallest`); `trusted` is never the result.

use super::detect::Detection;
use super::Category;
use crate::permset::{smallest, Needs, PermissionSet};
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
        return (smallest(Needs::OTHER), 0.50);
    }
    let needs = cats.iter().fold(Needs::NONE, |n, c| n.union(c.needs()));
    let set = smallest(needs);
    if cats.is_empty() {
        return (set, 0.95);
    }
    let only = |allowed: &[Category]| cats.iter().all(|c| allowed.contains(c));
    let by_count = |n: usize| if n >= 2 { 0.95 } else { 0.90 };
    if only(&[Category::Network]) {
        return (set, by_count(distinct(&|c| c == Category::Network)));
    }
    if only(&[Category::Read, Category::Write]) {
        let n = distinct(&|c| matches!(c, Category::Read | Category::Write));
        return (set, by_count(n));
    }
    if only(&[Category::Env]) {
        return (set, 0.80);
    }
    (set, 0.70)
}
