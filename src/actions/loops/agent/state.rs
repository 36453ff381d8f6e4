//! The persisted state of one agent session (lifecycle.db `sessions`, mode `agent`, one row per
//! job): the transcript, counters, the step in progress and every completed step's
//! observation. Written after every model turn and every step, and before a step starts
//! (its intent), so a worker killed at any point resumes at the right place.

use super::tools::Tool;
use crate::llm::Message;
use serde::{Deserialize, Serialize};

/// Where a proposed step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The model proposed it; nothing was started.
    Proposed,
    /// Intent recorded, execution begun; no outcome recorded yet.
    Started,
    /// Command security asked a human; the job waits (`pending_validation`).
    AwaitingValidation,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub index: u32,
    /// The tool call's id (native mode), answered by a `tool` message.
    pub call_id: Option<String>,
    pub tool: Tool,
    pub phase: Phase,
}

/// One completed step (what the result and the resumed session see).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: u32,
    pub tool: String,
    pub arguments: serde_json::Value,
    /// ok | failed | blocked | refused | invalid | interrupted
    pub outcome: String,
    pub observation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    pub goal: String,
    /// Canonical working directory of commands (checked when the session was created).
    pub workdir: String,
    pub max_iterations: u32,
    pub token_budget: Option<u64>,
    /// Strict-JSON mode (no API tool calling).
    pub fallback: bool,
    /// The transcript after the system prompt (built per request).
    pub messages: Vec<Message>,
    /// Model turns so far.
    pub iterations: u32,
    pub tokens_used: u64,
    pub consecutive_failures: u32,
    pub pending: Option<Pending>,
    pub steps: Vec<StepRecord>,
    pub summary: Option<String>,
    /// The model's reasoning per turn (issue 51), never part of the transcript the model sees
    /// again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<TurnReasoning>,
    /// Reasoning tokens the server reported, all turns.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

/// The reasoning of one model turn (`turn` = the iteration that produced it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnReasoning {
    pub turn: u32,
    pub text: String,
}

/// Consecutive failed steps that end a session.
pub const FAILURE_LIMIT: u32 = 3;
pub const DEFAULT_MAX_ITERATIONS: u32 = 20;

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Finished,
    IterationLimit,
    TokenBudget,
    FailureLimit,
    Failed,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Finished => "finished",
            End::IterationLimit => "iteration_limit",
            End::TokenBudget => "token_budget",
            End::FailureLimit => "failure_limit",
            End::Failed => "failed",
        }
    }
    pub fn parse(s: &str) -> Option<End> {
        [
            End::Finished,
            End::IterationLimit,
            End::TokenBudget,
            End::FailureLimit,
            End::Failed,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}
