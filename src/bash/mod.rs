//! Shell commands (seed 001's secure bash execution, DESIGN §5): `policy` (pure decision rules),
//! `registry` (the evolving per-command registry), `evidence` (what learning may count: human
//! decisions only), `effects` (what a learned signature may apply without a human), `learn` (which
//! change sets `approve --learn` and a reviewer's `approve` may cover), `changes`
//! (change sets, read and written beneath the workspace through `crate::fs::beneath`), `journal`
//! (the record of each applied change set), `approvals` (human validation), `executor`
//! (running one command as a bounded process tree), `leftovers` (no command outlives a crash).
//! Classification itself lives in `crate::classify`; the `execute_bash` action in
//! `crate::actions::bash` ties them together.

pub mod changes;
pub mod decisions;
pub mod effects;
pub mod evidence;
pub mod executor;
pub mod journal;
pub mod learn;
pub mod leftovers;
pub mod policy;
pub mod registry;
pub mod signatures;
