//! The `loop` action (issue 10): resumable LLM sessions persisted in lifecycle.db `sessions`.
//!
//! - Block mode ([`blocks`]): `propose` creates a session and generates code per block,
//!   `status` returns a block's state, `audit` asks the model for its findings, `refine` improves one with feedback, `commit` writes the refined
//!   code (files like generate_file, SQL like generate_sql) and closes the block, `abandon`
//!   ends the session.
//! - Agent mode ([`agent`]): `agent` runs one session of model-proposed steps (tool calls),
//!   each command through command security, pausing as `pending_validation` when a step needs
//!   a human and resuming at the next step after a restart.
//!
//! `db::sessions` owns the `sessions` rows (one per session, state as JSON, owner client).

pub mod agent;
pub mod blocks;

use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::permset::PermissionSet;
use serde_json::{json, Value};

pub const NAME: &str = "loop";

pub fn specs() -> Vec<ActionSpec> {
    vec![spec()]
}

fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "Resumable LLM sessions. Block mode: mode=propose {blocks:[{description,type,target}]} creates a session and generates code per block (a file target must not exist unless the block has overwrite: true); status {session_id, block_id?} returns the blocks (code, versions, feedback; no LLM call); audit {session_id, block_id?} asks the model to audit each block's code (findings: severity, category, line, title, detail, recommendation, and a Markdown audit); refine {session_id, block_id, feedback} improves one; commit {session_id, block_id?} writes the refined code (files under FILE_WRITE with a human's validation, SQL with generate_sql's rules) and closes the block; abandon {session_id} ends the session. Agent mode: mode=agent {goal, workdir?, max_iterations?, token_budget?} lets the model run one step at a time (run_command, read_file, write_file, finish); every command passes command security, a step needing validation pauses the session until a human approves it.",
        aliases: &[],
        params_schema,
        grants: &[Grant::Llm],
        permission_set: PermissionSet::Filesystem,
        handler: crate::actions::Run::Async(handle),
        hidden: false,
        on_decision: Some(crate::bash::decisions::on_decision),
    }
}

fn params_schema() -> Value {
    let session_id = json!({"type": "string", "minLength": 1, "maxLength": 200, "description": "the session_id a propose answer returned"});
    let block_id = json!({"type": "string", "minLength": 1, "maxLength": 200, "description": "a block of the session (its id from propose)"});
    json!({
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["propose", "status", "audit", "refine", "commit", "abandon", "agent"]},
            "blocks": {
                "type": "array", "minItems": 1, "maxItems": 50,
                "items": {
                    "type": "object",
                    "properties": {
                        "description": {"type": "string", "minLength": 1, "maxLength": 100000},
                        "type": {"type": "string", "minLength": 1, "maxLength": 100, "description": "code | sql | a language name"},
                        "target": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the file the block is committed to (absolute or relative to the workspace); for sql, the database"},
                        "overwrite": {"type": "boolean", "description": "the commit may replace an existing file (default false; shown to the human who approves)"}
                    },
                    "required": ["description", "type", "target"],
                    "additionalProperties": false
                }
            },
            "session_id": session_id,
            "block_id": block_id,
            "feedback": {"type": "string", "minLength": 1, "maxLength": 100000},
            "goal": {"type": "string", "minLength": 1, "maxLength": 100000},
            "workdir": {"type": "string", "minLength": 1, "maxLength": 4096},
            "max_iterations": {"type": "integer", "minimum": 1, "maximum": 500},
            "token_budget": {"type": "integer", "minimum": 1000, "maximum": 100000000}
        },
        "required": ["mode"],
        "allOf": [
            {"if": {"properties": {"mode": {"const": "propose"}}}, "then": {"required": ["blocks"]}},
            {"if": {"properties": {"mode": {"enum": ["status", "audit", "commit", "abandon"]}}}, "then": {"required": ["session_id"]}},
            {"if": {"properties": {"mode": {"const": "refine"}}}, "then": {"required": ["session_id", "block_id", "feedback"]}},
            {"if": {"properties": {"mode": {"const": "agent"}}}, "then": {"required": ["goal"]}}
        ],
        "additionalProperties": false
    })
}

fn handle(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let mode = params.get("mode").and_then(Value::as_str).unwrap_or("");
        match mode {
            "agent" => agent::run(&ctx, &params).await,
            "propose" | "status" | "audit" | "refine" | "commit" | "abandon" => {
                blocks::run(&ctx, mode, &params).await
            }
            other => Outcome::failed(format!("unknown loop mode {other:?}")),
        }
    })
}
