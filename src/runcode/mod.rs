//! `run_code`: agent JavaScript/TypeScript executed as a validated DAG in an embedded engine
//! (issue 8; seeds 002, 003, 000).
//!
//! - [`plan`]: inference (the DAG, `crate::infer`), call-site instrumentation ([`instrument`]),
//!   type stripping ([`strip`]), and the gate of each tool call;
//! - [`engine`]: QuickJS on its own thread with no I/O of its own, memory / stack / CPU /
//!   output limits, `console` capture, a seeded `Math.random` and a recorded clock
//!   (`prelude.js`);
//! - [`route`]: `mcp.brainloop.<action>` → the brainloop action; other tools fail clearly;
//! - [`checkpoint`]: completed calls in lifecycle `sessions`, so a re-run never repeats them;
//! - [`run`]: the job — gates, pauses for a human, resumes after approval, the result.

pub mod checkpoint;
pub mod engine;
pub mod instrument;
pub mod plan;
pub mod route;
pub mod run;
pub mod standalone;
pub mod strip;

pub use run::{gate_hash, run, Request};
