//! `run_code {code, language?, timeout_ms?}`: runs agent JavaScript/TypeScript in the embedded
//! engine as a validated DAG (see `crate::runcode`). Pure layers run without a human; a layer
//! whose tool call needs validation pauses the job (`pending_validation`) until `brainloop
//! approve`; `mcp.brainloop.<action>(args)` calls run as that action for the same client.
//!
//! Result: `{success, value, logs, logs_truncated, layers_executed, executed_path, calls,
//! cpu_ms, duration_ms, permission_set, confidence, validated, code_hash}`.

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome};
use crate::permset::PermissionSet;
use crate::runcode::{self, run::MAX_CPU_MS};
use serde_json::{json, Value};

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "run_code",
        description: "Runs agent JavaScript or TypeScript (the body of an async function: top-level await and return work) in an embedded engine with no file, network, process, timer or environment access. Its only way out is mcp.brainloop.<action>(args), which runs that brainloop action for the same client under the same grants, policy and approvals. Layers of pure operations run without a human; a tool call that needs validation pauses the job until approved; completed calls are checkpointed and never repeated. Limits: CPU time (timeout_ms), 64 MiB memory, stack, 1000 tool calls, 64 KiB of console output.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "minLength": 1, "description": "the body of an async function"},
                    "language": {"type": "string", "enum": ["js", "ts"], "description": "default js"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_CPU_MS, "description": "CPU budget of the code itself (tool calls not counted); default 10000"}
                },
                "required": ["code"],
                "additionalProperties": false
            })
        },
        grants: &[],
        permission_set: PermissionSet::McpStandard,
        handler: crate::actions::Run::Async(run_code),
        hidden: false,
        on_decision: Some(crate::bash::decisions::on_decision),
    }]
}

fn run_code(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let (code, lang, cpu_ms) = match super::decode::run_code(&params) {
            Ok(p) => p,
            Err(e) => return Outcome::failed(e),
        };
        let req = runcode::Request { code, lang, cpu_ms };
        runcode::run(&ctx, req).await
    })
}
