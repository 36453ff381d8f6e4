//! Agent mode of `loop` (issue 10): `loop {mode: "agent", goal, workdir?, max_iterations?,
//! token_budget?}` — one job runs one session in which the model proposes one step at a time
//! (API tool calling, or strict JSON as a fallback) and brainloop runs it through the same
//! command security, grants and approvals as the standalone actions.
//!
//! | file | owns |
//! |---|---|
//! | `state.rs` | the persisted session: transcript, counters, the step in progress, records |
//! | `tools.rs` | tool definitions and strict parsing (native calls, strict-JSON answers) |
//! | `steps.rs` | running one step: run_command → execute_bash, read_file, write_file |
//! | `observe.rs` | capping observations (4 KB, UTF-8 boundary, saying what was cut) |
//!
//! The loop: stop checks (failure limit, iteration cap, token budget) → one model turn (state
//! saved with the proposed step) → the step's intent saved (`started`) → the step → its
//! observation saved. A step that needs a human ends the job `pending_validation` with that
//! validation (state saved as `awaiting_validation`); the approved job re-runs this handler,
//! which finds the session by job id and runs exactly that step with the approval, then goes
//! on. A step found `started` on resume (the worker died while it ran) is not run again unless
//! it is a `read_file`: the model is told "interrupted, outcome unknown" and decides.

mod observe;
mod state;
mod steps;
mod tools;

use crate::actions::{JobCtx, Outcome};
use crate::db::output::JobStatus;
use crate::db::sessions::{self as store, Session};
use crate::llm::{rejects_tools, Conversation, JobUsage, LlmError, Message};
use observe::{cap, CAP};
use serde_json::{json, Value};
use state::{
    AgentState, End, Pending, Phase, StepRecord, TurnReasoning, DEFAULT_MAX_ITERATIONS,
    FAILURE_LIMIT,
};

/// Bytes of one turn's reasoning kept in the session.
const REASONING_CAP: usize = 16 * 1024;
use std::sync::atomic::AtomicU64;
use steps::StepResult;
use tools::Tool;

pub const MODE: &str = "agent";

pub async fn run(ctx: &JobCtx, params: &Value) -> Outcome {
    match run_inner(ctx, params).await {
        Ok(o) | Err(o) => o,
    }
}

fn system_prompt(st: &AgentState) -> String {
    let mut s = format!(
        "You are an autonomous agent working in the directory {}.\n\
         Reach the goal one step at a time. Each answer proposes exactly ONE step; you then see its result (the observation) and propose the next.\n\
         Every command passes a security policy: a refused or blocked command is reported back and did not run — do not try to get around a refusal; some steps wait for a human's approval before they run.\n\
         Observations longer than {CAP} bytes are cut. You have at most {} steps.\n\
         When the goal is reached, or cannot be reached, call finish with a short summary.",
        st.workdir, st.max_iterations
    );
    if st.fallback {
        s.push_str(&format!(
            "\n\nTool calling is not available. Answer with exactly one JSON object and nothing else, of the form {{\"tool\": NAME, \"arguments\": {{...}}}}. The tools:\n{}",
            tools::described()
        ));
    }
    s
}

/// The transcript as a strict-JSON server sees it: tool calls as their JSON text, tool results
/// as user messages.
fn plain(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let calls: Vec<String> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let args: Value =
                            serde_json::from_str(&c.function.arguments).unwrap_or(Value::Null);
                        json!({"tool": c.function.name, "arguments": args}).to_string()
                    })
                    .collect();
                Message::assistant(calls.join("\n"), Vec::new())
            }
            "tool" => Message::user(format!("Observation:\n{}", m.content)),
            _ => m.clone(),
        })
        .collect()
}

struct Runner<'c> {
    ctx: &'c JobCtx,
    session: Session,
    st: AgentState,
}

async fn run_inner(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    ctx.llm
        .available()
        .map_err(|e| Outcome::failed(e.to_string()))?;
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let db = &ctx.stores.lifecycle;
    let existing = store::find_by_job(db, ctx.job_id, MODE)
        .await
        .map_err(|e| Outcome::failed(format!("cannot read the agent session: {e:#}")))?;
    let session = match existing {
        Some(id) => store::load(db, &id, &ctx.client_id)
            .await
            .map_err(|e| Outcome::failed(format!("cannot read the agent session: {e:#}")))?
            .ok_or_else(|| Outcome::failed(format!("agent session {id} vanished")))?,
        None => create(ctx, &grants, params).await?,
    };
    let st: AgentState = serde_json::from_value(session.state.clone()).map_err(|e| {
        Outcome::failed(format!(
            "agent session {}: unreadable state: {e}",
            session.session_id
        ))
    })?;
    let mut r = Runner { ctx, session, st };
    if let Some(end) = End::parse(&r.session.status) {
        // Ended before the job's result was recorded (a crash in between): same answer again.
        return Ok(r.outcome(end, None));
    }
    r.count_sessions().await;
    tracing::info!(session_id = %r.session.session_id, iterations = r.st.iterations, steps = r.st.steps.len(), "agent session running");
    r.drive(&grants).await
}

async fn create(
    ctx: &JobCtx,
    grants: &std::sync::Arc<crate::clients::ClientGrants>,
    params: &Value,
) -> Result<Session, Outcome> {
    let workdir = crate::actions::bash::resolve_workdir(
        grants,
        &ctx.config.workspace,
        params["workdir"].as_str(),
    )?;
    let goal = params["goal"].as_str().unwrap_or_default().to_string();
    let st = AgentState {
        goal: goal.clone(),
        workdir: workdir.display().to_string(),
        max_iterations: params["max_iterations"]
            .as_u64()
            .map(|n| n as u32)
            .unwrap_or(DEFAULT_MAX_ITERATIONS),
        token_budget: params["token_budget"].as_u64(),
        fallback: !ctx.llm.config().tool_calling,
        messages: vec![Message::user(format!("Goal: {goal}"))],
        iterations: 0,
        tokens_used: 0,
        consecutive_failures: 0,
        pending: None,
        steps: Vec::new(),
        summary: None,
        reasoning: Vec::new(),
        reasoning_tokens: 0,
    };
    let now = crate::time::now_ms();
    let s = Session {
        session_id: store::new_id(MODE).map_err(|e| Outcome::failed(format!("{e:#}")))?,
        job_id: Some(ctx.job_id),
        client_id: ctx.client_id.clone(),
        mode: MODE.into(),
        status: "open".into(),
        state: serde_json::to_value(&st).map_err(|e| Outcome::failed(e.to_string()))?,
        created_at: now,
        updated_at: now,
    };
    store::save(&ctx.stores.lifecycle, &s)
        .await
        .map_err(|e| Outcome::failed(format!("{e:#}")))?;
    Ok(s)
}

impl Runner<'_> {
    /// Persists the state; a session that cannot be saved must not go on (a crash would then
    /// repeat what was not recorded).
    async fn save(&mut self) -> Result<(), Outcome> {
        self.session.state =
            serde_json::to_value(&self.st).map_err(|e| Outcome::failed(e.to_string()))?;
        store::save(&self.ctx.stores.lifecycle, &self.session)
            .await
            .map_err(|e| Outcome::failed(format!("cannot save the agent session: {e:#}")))?;
        self.session.updated_at = crate::time::now_ms();
        Ok(())
    }

    /// Refreshes the heartbeat's `sessions_active` (open `loop` sessions) after a change.
    async fn count_sessions(&self) {
        match store::count_open(&self.ctx.stores.lifecycle).await {
            Ok(n) => self
                .ctx
                .stats
                .sessions_active
                .store(n, std::sync::atomic::Ordering::Relaxed),
            Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot count open sessions"),
        }
    }

    async fn end(&mut self, end: End, error: Option<String>) -> Result<Outcome, Outcome> {
        if self.st.summary.is_none() || end != End::Finished {
            let last = self
                .st
                .steps
                .last()
                .map(|s| format!("; last step: {} → {}", s.tool, s.outcome))
                .unwrap_or_default();
            let mut summary = format!(
                "stopped: {} after {} model turns and {} steps{last}",
                end.as_str(),
                self.st.iterations,
                self.st.steps.len()
            );
            if end == End::Finished {
                summary = self.st.summary.clone().unwrap_or(summary);
            }
            self.st.summary = Some(summary);
        }
        self.session.status = end.as_str().into();
        self.save().await?;
        self.count_sessions().await;
        tracing::info!(session_id = %self.session.session_id, status = end.as_str(), "agent session ended");
        Ok(self.outcome(end, error))
    }

    fn outcome(&self, end: End, error: Option<String>) -> Outcome {
        let result = json!({
            "mode": MODE,
            "session_id": self.session.session_id,
            "status": end.as_str(),
            "summary": self.st.summary,
            "iterations": self.st.iterations,
            "max_iterations": self.st.max_iterations,
            "tokens_used": self.st.tokens_used,
            "reasoning_tokens": self.st.reasoning_tokens,
            "reasoning": self.st.reasoning,
            "token_budget": self.st.token_budget,
            "strict_json_fallback": self.st.fallback,
            "workdir": self.st.workdir,
            "created_at": self.session.created_at,
            "updated_at": self.session.updated_at,
            "steps": self.st.steps,
        });
        if end == End::Finished {
            return Outcome::ok(result);
        }
        Outcome {
            status: JobStatus::Failed,
            result: Some(result),
            error: Some(error.unwrap_or_else(|| {
                format!(
                    "agent session {} stopped: {}",
                    self.session.session_id,
                    self.st
                        .summary
                        .clone()
                        .unwrap_or_else(|| end.as_str().into())
                )
            })),
        }
    }

    /// Feeds an observation back: a `tool` message for a native call, else a user message.
    fn observe(&mut self, call_id: Option<String>, text: String) {
        self.st.messages.push(match call_id {
            Some(id) => Message::tool(id, text),
            None => Message::user(format!("Observation:\n{text}")),
        });
    }

    fn record(&mut self, p: &Pending, outcome: &str, observation: &str) {
        self.st.steps.push(StepRecord {
            index: p.index,
            tool: p.tool.name().into(),
            arguments: step_arguments(&p.tool),
            outcome: outcome.into(),
            observation: observation.to_string(),
        });
        if outcome == "ok" {
            self.st.consecutive_failures = 0;
        } else {
            self.st.consecutive_failures += 1;
        }
    }

    /// Long because the session loop reads as one sequence per turn (a step cut off by a crash,
    /// stop checks, one model turn, the step, persistence); the steps themselves are in `steps.rs`.
    async fn drive(
        &mut self,
        grants: &std::sync::Arc<crate::clients::ClientGrants>,
    ) -> Result<Outcome, Outcome> {
        let ctx = self.ctx;
        // The job's approval belongs to the step that waited for it, and to no other.
        let mut approval = ctx.approval.clone();
        let job = JobUsage {
            used: AtomicU64::new(self.st.tokens_used),
        };
        loop {
            if let Some(mut p) = self.st.pending.clone() {
                if p.phase == Phase::Started && !matches!(p.tool, Tool::ReadFile { .. }) {
                    let text = format!(
                        "INTERRUPTED: the worker stopped while step {} ({}) was running; its outcome is unknown (it may or may not have taken effect). It is not repeated automatically: check the current state before doing it again.",
                        p.index,
                        p.tool.name()
                    );
                    tracing::warn!(
                        step = p.index,
                        tool = p.tool.name(),
                        "agent step interrupted by a worker stop; not repeated"
                    );
                    self.record(&p, "interrupted", &text);
                    // Not the model's failure: it does not count toward the failure limit.
                    self.st.consecutive_failures = self.st.consecutive_failures.saturating_sub(1);
                    self.observe(p.call_id.clone(), text);
                    self.st.pending = None;
                    self.save().await?;
                    continue;
                }
                let this_approval = if p.phase == Phase::AwaitingValidation {
                    approval.take()
                } else {
                    None
                };
                p.phase = Phase::Started;
                self.st.pending = Some(p.clone());
                self.save().await?;
                let res = steps::execute(
                    ctx,
                    grants,
                    &self.st.workdir,
                    p.index,
                    &p.tool,
                    this_approval,
                )
                .await;
                match res {
                    StepResult::Pause(out) => {
                        p.phase = Phase::AwaitingValidation;
                        self.st.pending = Some(p.clone());
                        self.save().await?;
                        tracing::info!(
                            step = p.index,
                            tool = p.tool.name(),
                            "agent step waits for a human"
                        );
                        return Ok(self.paused(out, &p));
                    }
                    StepResult::Cancelled => {
                        // Left `started`: the resumed session reports it interrupted.
                        return Ok(Outcome::cancelled());
                    }
                    StepResult::Done {
                        outcome,
                        observation,
                    } => {
                        tracing::info!(
                            step = p.index,
                            tool = p.tool.name(),
                            outcome,
                            "agent step done"
                        );
                        self.record(&p, outcome, &observation);
                        self.observe(p.call_id.clone(), observation);
                        self.st.pending = None;
                        self.save().await?;
                    }
                }
                continue;
            }
            if self.st.consecutive_failures >= FAILURE_LIMIT {
                return self.end(End::FailureLimit, None).await;
            }
            if self.st.iterations >= self.st.max_iterations {
                return self.end(End::IterationLimit, None).await;
            }
            let remaining = match self.st.token_budget {
                Some(b) if self.st.tokens_used >= b => {
                    return self.end(End::TokenBudget, None).await
                }
                Some(b) => Some(b - self.st.tokens_used),
                None => None,
            };
            let mut messages = vec![Message::system(system_prompt(&self.st))];
            if self.st.fallback {
                messages.extend(plain(&self.st.messages));
            } else {
                messages.extend(self.st.messages.iter().cloned());
            }
            let conv = Conversation {
                messages,
                tools: if self.st.fallback {
                    Vec::new()
                } else {
                    tools::definitions()
                },
                temperature: 0.2,
                max_completion_tokens: remaining,
                action: super::NAME,
                response_format: None,
            };
            let answer = match ctx.llm.converse(&job, &conv, &ctx.stats, &ctx.cancel).await {
                Ok(a) => a,
                Err(LlmError::Cancelled) => return Ok(Outcome::cancelled()),
                Err(LlmError::Budget(m)) => return self.end(End::TokenBudget, Some(m)).await,
                Err(e) if !self.st.fallback && rejects_tools(&e) => {
                    tracing::warn!(error = %e, "the LLM server refuses tools; strict-JSON fallback for this session");
                    self.st.fallback = true;
                    self.save().await?;
                    continue;
                }
                Err(e) => {
                    let m = format!("LLM call failed: {e}");
                    return self.end(End::Failed, Some(m)).await;
                }
            };
            self.st.iterations += 1;
            self.st.tokens_used += answer.usage.total();
            self.st.reasoning_tokens += answer.usage.reasoning_tokens();
            let index = self.st.iterations;
            if !answer.reasoning.trim().is_empty() {
                self.st.reasoning.push(TurnReasoning {
                    turn: index,
                    text: cap(&answer.reasoning, REASONING_CAP),
                });
            }
            let proposed = if self.st.fallback {
                self.st
                    .messages
                    .push(Message::assistant(answer.text.clone(), Vec::new()));
                tools::parse_strict(&answer.text)
                    .map(|t| (None, t))
                    .map_err(|e| (None, e))
            } else {
                self.st.messages.push(Message::assistant(
                    answer.text.clone(),
                    answer.tool_calls.clone(),
                ));
                // Every call must be answered; only the first one is a step.
                for extra in answer.tool_calls.iter().skip(1) {
                    self.observe(
                        Some(extra.id.clone()),
                        "NOT RUN: one step at a time; propose it again after this step's observation".into(),
                    );
                }
                match answer.tool_calls.first() {
                    Some(c) => tools::parse_native(&c.function.name, &c.function.arguments)
                        .map(|t| (Some(c.id.clone()), t))
                        .map_err(|e| (Some(c.id.clone()), e)),
                    None => Err((None, "no tool call: answer with exactly one tool call (run_command, read_file, write_file or finish)".to_string())),
                }
            };
            match proposed {
                Ok((call_id, Tool::Finish { summary })) => {
                    self.st.summary = Some(summary.clone());
                    let p = Pending {
                        index,
                        call_id: call_id.clone(),
                        tool: Tool::Finish { summary },
                        phase: Phase::Proposed,
                    };
                    self.record(&p, "ok", "session finished");
                    self.observe(call_id, "session finished".into());
                    return self.end(End::Finished, None).await;
                }
                Ok((call_id, tool)) => {
                    self.st.pending = Some(Pending {
                        index,
                        call_id,
                        tool,
                        phase: Phase::Proposed,
                    });
                }
                Err((id, msg)) => {
                    // Answered with the call's id (when there is one) so the transcript stays
                    // valid; counts toward the failure limit.
                    let text = cap(&format!("ERROR: {msg}"), CAP);
                    self.st.steps.push(StepRecord {
                        index,
                        tool: "(invalid)".into(),
                        arguments: Value::Null,
                        outcome: "invalid".into(),
                        observation: text.clone(),
                    });
                    self.st.consecutive_failures += 1;
                    self.observe(id, text);
                }
            }
            self.save().await?;
        }
    }

    /// The job waits for a human: the step's validation, with the session around it.
    fn paused(&self, out: Outcome, p: &Pending) -> Outcome {
        let mut r = crate::ask::nested(out.result);
        r.insert("mode".into(), json!(MODE));
        r.insert("session_id".into(), json!(self.session.session_id));
        r.insert(
            "paused_at".into(),
            json!({"step": p.index, "tool": p.tool.name(), "arguments": step_arguments(&p.tool)}),
        );
        r.insert("iterations".into(), json!(self.st.iterations));
        r.insert("tokens_used".into(), json!(self.st.tokens_used));
        r.insert("steps_done".into(), json!(self.st.steps.len()));
        crate::ask::pending(r)
    }
}

/// Arguments as shown in results (a written file's content by size and hash only).
fn step_arguments(t: &Tool) -> Value {
    match t {
        Tool::WriteFile { path, content } => json!({
            "path": path,
            "bytes": content.len(),
            "content_sha256": crate::actions::llm::pending::sha256(content),
        }),
        other => other.arguments(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::wire::{FunctionCall, ToolCall};

    #[test]
    fn the_strict_json_transcript_turns_calls_into_json_and_results_into_user_messages() {
        let call = ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "run_command".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            },
        };
        let m = plain(&[
            Message::user("Goal: x"),
            Message::assistant("", vec![call]),
            Message::tool("c1", "exit_code: 0"),
        ]);
        assert_eq!(m[0], Message::user("Goal: x"));
        assert_eq!(m[1].role, "assistant");
        assert!(m[1].tool_calls.is_empty());
        let v: Value = serde_json::from_str(&m[1].content).unwrap();
        assert_eq!(
            v,
            json!({"tool": "run_command", "arguments": {"command": "ls"}})
        );
        assert_eq!(m[2].role, "user");
        assert!(m[2].tool_call_id.is_none());
        assert!(m[2].content.contains("exit_code: 0"));
    }
}
