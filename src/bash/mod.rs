//! Shell commands (seed 001's secure bash execution, DESIGN §5) — the command path, owned here
//! (issue 32): `command` drives a classified command through `plan` (pure: the plan, and what
//! follows a run) → `confined` (the one confined run, also used by operator hooks) or `overlay`
//! (a capturable command's run, its change set captured and applied) → `record` (the run's
//! statistics and evidence, typed) → `result` (the one finished-command result). Beneath them:
//! `policy` (pure decision rules), `registry` (the evolving per-command registry), `evidence`
//! (what learning may count: human decisions only), `protected` (what may make the operator's tools run
//! code: never applied without a human; `gitconfig` reads git's config for it), `effects` (what a
//! learned signature may apply without a human), `explain` (a learned signature's approved
//! examples: checked when the rules load, and what `signatures --explain` shows), `learn` (which change sets `approve --learn` and a reviewer's `approve` may
//! cover), `changes` (change sets, read and written beneath the workspace through
//! `crate::fs::beneath`), `journal` (the record of each applied change set), `decisions` (what a human's answer means for commands: the actions'
//! `on_decision`), `executor` (running one command as a bounded process tree), `leftovers` (no
//! command outlives a crash). Classification lives in `crate::classify`, asking a human in
//! `crate::ask`; the `execute_bash` action (`crate::actions::bash`) keeps its params and the
//! grants check.

/// The job's outcome, for `command`, `overlay` and `result`.
use crate::db::output::Outcome;

pub mod changes;
pub mod command;
pub mod confined;
pub mod coverage;
pub mod decisions;
pub mod effects;
pub mod evidence;
pub mod examples;
pub mod executor;
pub mod explain;
pub mod gitconfig;
pub mod journal;
pub mod learn;
pub mod leftovers;
mod overlay;
pub mod plan;
pub mod policy;
pub mod protected;
pub mod record;
pub mod registry;
pub mod result;
pub mod run_on_use;
pub mod runners;
pub mod signatures;

pub use overlay::{apply_recorded, recover_apply, test_knob};
