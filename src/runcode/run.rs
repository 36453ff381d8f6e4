//! One `run_code` job from start to outcome: prepare the plan, restore the checkpoint, ask for
//! the whole program when the analysis cannot vouch for it, then run the engine and serve its
//! tool calls.
//!
//! Each call is answered from the checkpoint when an earlier attempt completed it; otherwise
//! its gate is checked — a call in a layer that needs a human pauses the whole job as
//! `pending_validation` (one validation naming the layer's tool calls, hash over code +
//! layer); the resumed job (approval consumed by the supervisor) re-runs the code, replays the
//! completed calls and goes on from there. Calls run as brainloop actions for the same client
//! (`actions::run`), concurrently when the code issues them together; an action that itself
//! asks a human (execute_bash) pauses the job with that action's validation. Completed calls
//! are checkpointed before the code sees their answer.

use super::checkpoint::{self, CallRecord, State, MAX_TIMES};
use super::engine::{self, Failure, Finished, FromEngine, Limits, ToEngine};
use super::plan::{self, Gate, Plan};
use super::route;
use crate::ask::validations;
use crate::db::output::JobStatus;
use crate::job::{JobCtx, Outcome};

use crate::infer::{Lang, McpPermissions};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Default and largest CPU budget of the code itself (tool calls not counted).
pub const DEFAULT_CPU_MS: u64 = 10_000;
pub const MAX_CPU_MS: u64 = 120_000;

pub struct Request {
    pub code: String,
    pub lang: Lang,
    pub cpu_ms: Option<u64>,
}

/// The hash a validation of `gate` carries: code, language and gate.
pub fn gate_hash(code_hash: &str, lang: Lang, gate: &Gate) -> String {
    hex::encode(Sha256::digest(
        format!("run_code\n{code_hash}\n{}\n{}", lang.as_str(), gate.name()).as_bytes(),
    ))
}

enum Pause {
    Gate(Gate),
    Nested {
        tool: String,
        op: String,
        result: Value,
    },
}

struct StopOnDrop(Arc<AtomicBool>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

type Joined = (
    u64,
    String,
    String,
    Option<usize>,
    String,
    usize,
    Outcome,
    Duration,
);

struct Runner<'c> {
    ctx: &'c JobCtx,
    plan: Plan,
    mapping: McpPermissions,
    lang: Lang,
    state: State,
    calls: Vec<Value>,
    pause: Option<Pause>,
    cancelled: bool,
    to_engine: std::sync::mpsc::Sender<ToEngine>,
    stop: Arc<AtomicBool>,
}

pub async fn run(ctx: &JobCtx, req: Request) -> Outcome {
    match run_inner(ctx, req).await {
        Ok(o) | Err(o) => o,
    }
}

async fn run_inner(ctx: &JobCtx, req: Request) -> Result<Outcome, Outcome> {
    let started = Instant::now();
    let mapping = McpPermissions::load(ctx.config.mcp_permissions.as_deref())
        .map_err(|e| Outcome::failed(format!("{e:#}")))?;
    let key = format!(
        "__bl_{}",
        validations::new_id().map_err(|e| Outcome::failed(e.to_string()))?
    );
    let lang = req.lang;
    let plan = {
        let (code, m, k) = (req.code.clone(), mapping.clone(), key.clone());
        tokio::task::spawn_blocking(move || plan::prepare_isolated(code, lang, m, k))
            .await
            .map_err(|e| Outcome::failed(format!("the analysis failed: {e}")))?
            .map_err(Outcome::failed)?
    };
    let code_key = format!("{}:{}", lang.as_str(), plan.report.code_hash);
    let mut state = match checkpoint::load(&ctx.stores.lifecycle, ctx.job_id).await {
        Ok(Some(s)) if s.code_key == code_key => s,
        Ok(_) => State {
            code_key,
            seed: random_seed(),
            ..State::default()
        },
        Err(e) => {
            return Err(Outcome::failed(format!(
                "cannot read the checkpoint: {e:#}"
            )))
        }
    };
    // A consumed approval of one of this code's gates (the supervisor checked it against the
    // claimed snapshot; the hash is recomputed here from the claimed code).
    if let Some(a) = &ctx.approval {
        let gates =
            std::iter::once(Gate::All).chain((0..plan.report.layers.len()).map(Gate::Layer));
        for g in gates {
            if gate_hash(&plan.report.code_hash, lang, &g) == a.command_hash
                && !state.approved.contains(&g.name())
            {
                state.approved.push(g.name());
            }
        }
    }
    let mut runner = Runner {
        ctx,
        plan,
        mapping,
        lang,
        state,
        calls: Vec::new(),
        pause: None,
        cancelled: false,
        to_engine: std::sync::mpsc::channel().0,
        stop: Arc::new(AtomicBool::new(false)),
    };
    if runner.plan.whole_program.is_some() && !runner.state.is_approved("all") {
        runner.save(false).await;
        return runner.ask(Gate::All).await;
    }
    let limits = Limits {
        cpu: Duration::from_millis(req.cpu_ms.unwrap_or(DEFAULT_CPU_MS).clamp(1, MAX_CPU_MS)),
        ..Limits::default()
    };
    let finished = runner.execute(key, limits).await?;
    runner.conclude(finished, started).await
}

fn random_seed() -> i32 {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        return crate::time::now_ms() as i32;
    }
    i32::from_le_bytes(b)
}

impl Runner<'_> {
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.to_engine.send(ToEngine::Stop);
    }

    fn reply(&self, id: u64, result: Result<String, String>) {
        let _ = self.to_engine.send(ToEngine::Reply { id, result });
    }

    async fn save(&self, done: bool) {
        let c = &self.ctx;
        if let Err(e) = checkpoint::save(
            &c.stores.lifecycle,
            c.job_id,
            &c.client_id,
            &self.state,
            done,
        )
        .await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot write the run_code checkpoint"
            );
        }
    }

    /// Runs the engine until the code ends, pauses, or is stopped; every call started is
    /// finished and checkpointed before this returns.
    async fn execute(&mut self, key: String, limits: Limits) -> Result<Box<Finished>, Outcome> {
        let (tx, mut from_engine) = tokio::sync::mpsc::unbounded_channel();
        let (to_engine, engine_rx) = std::sync::mpsc::channel();
        self.to_engine = to_engine;
        let _guard = StopOnDrop(Arc::clone(&self.stop));
        let job = engine::Job {
            js: self.plan.js.clone(),
            key,
            limits,
            seed: self.state.seed,
            times: self.state.times.clone(),
        };
        let stop = Arc::clone(&self.stop);
        std::thread::Builder::new()
            .name("run_code".into())
            .stack_size(engine::ENGINE_THREAD_STACK)
            .spawn(move || engine::run(job, tx, engine_rx, stop))
            .map_err(|e| Outcome::failed(format!("cannot start the engine thread: {e}")))?;
        let mut inflight: JoinSet<Joined> = JoinSet::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let cancel = self.ctx.cancel.clone();
        let finished = loop {
            tokio::select! {
                msg = from_engine.recv() => match msg {
                    None => break None,
                    Some(FromEngine::Done(f)) => break Some(f),
                    Some(FromEngine::Time(t)) => {
                        if self.state.times.len() < MAX_TIMES {
                            self.state.times.push(t);
                        }
                    }
                    Some(FromEngine::Call { id, tool, op, site, params }) => {
                        self.on_call(&mut inflight, &mut seen, id, tool, op, site, params);
                    }
                },
                Some(joined) = inflight.join_next(), if !inflight.is_empty() => {
                    self.on_done(joined).await;
                }
                _ = cancel.cancelled(), if !self.cancelled => {
                    self.cancelled = true;
                    self.halt();
                }
            }
        };
        // Calls still running finish and are checkpointed: a resumed run must not repeat them.
        while let Some(joined) = inflight.join_next().await {
            self.on_done(joined).await;
        }
        finished.ok_or_else(|| Outcome::failed("the engine stopped unexpectedly"))
    }

    #[allow(clippy::too_many_arguments)]
    fn on_call(
        &mut self,
        inflight: &mut JoinSet<Joined>,
        seen: &mut HashMap<String, usize>,
        id: u64,
        tool: String,
        op: String,
        site: Option<usize>,
        params: String,
    ) {
        if self.pause.is_some() || self.cancelled {
            self.reply(id, Err("the run is stopping".into()));
            return;
        }
        let k = checkpoint::call_key(&tool, &op, &params);
        let n = {
            let c = seen.entry(k.clone()).or_insert(0);
            *c += 1;
            *c - 1
        };
        let layer = site.and_then(|s| self.plan.sites.get(&s)).map(|s| s.layer);
        if let Some(rec) = self.state.find(&k, n).cloned() {
            self.calls.push(json!({"tool": tool, "op": op, "layer": layer, "ms": rec.ms, "ok": rec.ok, "replayed": true}));
            self.reply(
                id,
                if rec.ok {
                    Ok(rec.answer)
                } else {
                    Err(rec.answer)
                },
            );
            return;
        }
        // A call that cannot go anywhere fails at once: nothing to ask a human about.
        let action = match route::route(self.ctx.actions.as_ref(), &self.mapping, &tool, &op) {
            Ok(a) => a,
            Err(e) => {
                self.calls.push(json!({"tool": tool, "op": op, "layer": layer, "ms": 0, "ok": false, "error": e}));
                self.reply(id, Err(e));
                return;
            }
        };
        let gate = self.plan.gate(&tool, &op, site);
        if gate != Gate::None && !self.state.is_approved(&gate.name()) {
            self.pause = Some(Pause::Gate(gate));
            self.halt();
            return;
        }
        let child = JobCtx {
            grants: None,
            ..self.ctx.clone()
        };
        inflight.spawn(async move {
            let t = Instant::now();
            let actions = Arc::clone(&child.actions);
            let out = actions.call(child, &action, &params).await;
            (id, tool, op, layer, k, n, out, t.elapsed())
        });
    }

    async fn on_done(&mut self, joined: Result<Joined, tokio::task::JoinError>) {
        let Ok((id, tool, op, layer, k, n, out, elapsed)) = joined else {
            // A panicking action: the code cannot know which call it was; stop the run.
            self.halt();
            return;
        };
        let ms = elapsed.as_millis() as u64;
        let answer: Result<String, String> = match out.status {
            JobStatus::PendingValidation => {
                self.calls.push(json!({"tool": tool, "op": op, "layer": layer, "ms": ms, "ok": false, "pending_validation": true}));
                self.pause = Some(Pause::Nested {
                    tool,
                    op,
                    result: out.result.unwrap_or(Value::Null),
                });
                self.halt();
                return;
            }
            JobStatus::Cancelled => {
                self.cancelled = true;
                self.halt();
                return;
            }
            JobStatus::Succeeded => Ok(out.result.unwrap_or(Value::Null).to_string()),
            other => {
                let detail = out
                    .error
                    .or_else(|| out.result.map(|r| r.to_string()))
                    .unwrap_or_default();
                Err(format!("mcp.brainloop.{op} {}: {detail}", other.as_str()))
            }
        };
        self.calls.push(json!({
            "tool": tool, "op": op, "layer": layer, "ms": ms, "ok": answer.is_ok(),
            "error": answer.as_ref().err(),
        }));
        let (ok, text) = match &answer {
            Ok(a) => (true, a.clone()),
            Err(e) => (false, e.clone()),
        };
        self.state.calls.push(CallRecord {
            key: k,
            n,
            tool,
            op,
            ok,
            answer: text,
            ms,
        });
        // Checkpointed before the code sees the answer.
        self.save(false).await;
        self.reply(id, answer);
    }

    fn layers_executed(&self, all: bool) -> Vec<usize> {
        let n = self.plan.report.layers.len();
        if all {
            return (0..n).collect();
        }
        match &self.pause {
            Some(Pause::Gate(Gate::Layer(l))) => (0..*l).collect(),
            _ => {
                let mut v: Vec<usize> = self
                    .calls
                    .iter()
                    .filter_map(|c| c["layer"].as_u64().map(|l| l as usize))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }

    async fn conclude(mut self, fin: Box<Finished>, started: Instant) -> Result<Outcome, Outcome> {
        if self.cancelled {
            self.save(false).await;
            return Ok(Outcome::cancelled());
        }
        match self.pause.take() {
            Some(Pause::Gate(g)) => {
                self.pause = Some(Pause::Gate(g.clone()));
                self.save(false).await;
                return self.ask(g).await;
            }
            Some(Pause::Nested { tool, op, result }) => {
                self.save(false).await;
                let mut r = crate::ask::nested(Some(result));
                r.insert("paused_at".into(), json!({"tool": tool, "op": op}));
                r.insert("action".into(), json!("run_code"));
                r.insert("calls".into(), json!(self.calls));
                r.insert("logs".into(), json!(fin.logs));
                return Ok(crate::ask::pending(r));
            }
            None => {}
        }
        let report = &self.plan.report;
        let mut result = json!({
            "language": self.lang.as_str(),
            "logs": fin.logs,
            "logs_truncated": fin.logs_truncated,
            "calls": self.calls,
            "cpu_ms": fin.cpu_ms,
            "duration_ms": started.elapsed().as_millis() as u64,
            "permission_set": report.permission_set,
            "confidence": report.confidence,
            "validated": self.state.approved,
            "code_hash": report.code_hash,
        });
        let outcome = match fin.value {
            Ok(v) => {
                result["success"] = json!(true);
                result["value"] = v;
                result["layers_executed"] = json!(self.layers_executed(true));
                result["executed_path"] = json!(report.executed_path);
                Outcome::ok(result)
            }
            Err(f) => {
                let error = match f {
                    Failure::Limit(l) => format!("limit exceeded: {l}"),
                    Failure::Thrown(m) => format!("the code threw: {m}"),
                    Failure::Setup(m) => format!("the code could not start: {m}"),
                    Failure::Stuck => {
                        "the code awaits something that can never happen (no tool call is pending)"
                            .into()
                    }
                    Failure::Stopped => "the run was stopped".into(),
                };
                result["success"] = json!(false);
                result["value"] = Value::Null;
                result["error"] = json!(error);
                result["layers_executed"] = json!(self.layers_executed(false));
                Outcome {
                    status: JobStatus::Failed,
                    result: Some(result),
                    error: Some(error),
                }
            }
        };
        self.save(true).await;
        Ok(outcome)
    }

    /// Pauses the job for a human: one validation for the gate, naming its tool calls.
    async fn ask(&self, gate: Gate) -> Result<Outcome, Outcome> {
        let ctx = self.ctx;
        let report = &self.plan.report;
        let hash = gate_hash(&report.code_hash, self.lang, &gate);
        let id = crate::ask::new_id()?;
        let (what, sites): (String, Vec<&plan::SiteInfo>) = match &gate {
            Gate::Layer(l) => (format!("layer {l}"), self.plan.layer_sites(*l)),
            _ => (
                "the whole program".into(),
                self.plan.sites.values().collect(),
            ),
        };
        let mut reasons: Vec<String> = Vec::new();
        if gate == Gate::All {
            reasons.push(
                self.plan
                    .whole_program
                    .clone()
                    .unwrap_or_else(|| "a tool call the analysis did not place in the DAG".into()),
            );
        }
        for s in &sites {
            reasons.push(format!("{} (line {}): {}", s.tool, s.line, s.code));
        }
        let tools: Vec<&str> = sites.iter().map(|s| s.tool.as_str()).collect();
        let command = format!(
            "run_code {} of job {}: {}",
            what,
            ctx.job_id,
            if tools.is_empty() {
                "tool calls".to_string()
            } else {
                tools.join(", ")
            }
        );
        let request = crate::ask::Request {
            id: id.clone(),
            command: command.clone(),
            bound_hash: hash,
            policy: "ask".into(),
            risk_score: None,
            permission_set: report.permission_set.as_str().to_string(),
            workdir: None,
            reasons: reasons.clone(),
        };
        let (_, mut result) = crate::ask::ask(&ctx.asker(), request).await?;
        let layer = match gate {
            Gate::Layer(l) => json!(l),
            _ => Value::Null,
        };
        result.insert("layer".into(), layer);
        result.insert("operations".into(), json!(tools));
        result.insert("layers_executed".into(), json!(self.layers_executed(false)));
        result.insert("calls".into(), json!(self.calls));
        result.remove("policy");
        result.remove("risk_score");
        Ok(crate::ask::pending(result))
    }
}
