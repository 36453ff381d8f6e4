//! The engine without a worker: prepare and run code on the calling thread's behalf, answering
//! tool calls with a closure. Used by the escape tests and the benchmark; the daemon uses
//! [`super::run`].

use super::engine::{self, Finished, FromEngine, Limits, ToEngine};
use super::plan;
use crate::infer::{Lang, McpPermissions};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// One tool call as the closure sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenCall {
    pub tool: String,
    pub op: String,
    pub site: Option<usize>,
    pub params: String,
}

/// Runs `code` with `limits`; `answer` gets every tool call. Gates are not applied.
pub fn run_standalone(
    code: &str,
    lang: Lang,
    limits: Limits,
    mut answer: impl FnMut(&SeenCall) -> Result<String, String>,
) -> Result<(Box<Finished>, Vec<SeenCall>), String> {
    let key = format!(
        "__bl_{}",
        crate::ask::validations::new_id().map_err(|e| e.to_string())?
    );
    let plan = plan::prepare_isolated(
        code.to_string(),
        lang,
        McpPermissions::defaults(),
        key.clone(),
    )?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (to_engine, engine_rx) = std::sync::mpsc::channel();
    let job = engine::Job {
        js: plan.js,
        key,
        limits,
        seed: 42,
        times: vec![],
    };
    let stop = Arc::new(AtomicBool::new(false));
    let handle = std::thread::Builder::new()
        .stack_size(engine::ENGINE_THREAD_STACK)
        .spawn(move || engine::run(job, tx, engine_rx, stop))
        .map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    let out = loop {
        match rx.blocking_recv() {
            None => break Err("the engine stopped without an answer".to_string()),
            Some(FromEngine::Done(f)) => break Ok(f),
            Some(FromEngine::Time(_)) => {}
            Some(FromEngine::Call {
                id,
                tool,
                op,
                site,
                params,
            }) => {
                let c = SeenCall {
                    tool,
                    op,
                    site,
                    params,
                };
                let result = answer(&c);
                seen.push(c);
                let _ = to_engine.send(ToEngine::Reply { id, result });
            }
        }
    };
    let _ = handle.join();
    out.map(|f| (f, seen))
}
