//! `check_command`: the classification report of a shell command (the same object as
//! `brainloop check --json`), without running it. Pure: no grant needed, nothing executed.

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome};
use crate::classify::{self, Context};
use crate::permset::PermissionSet;
use serde_json::{json, Value};

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "check_command",
        description: "Classifies a shell command without running it: operations with categories and layers, permission set and confidence, risk score, detected dangerous patterns, whether it is blocked and which layers need validation.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "maxLength": 4096},
                    "workdir": {"type": "string", "description": "where it would run (default: the workspace)"}
                },
                "required": ["command"],
                "additionalProperties": false
            })
        },
        grants: &[],
        permission_set: PermissionSet::Minimal,
        handler: crate::actions::Run::Async(check_command),
        hidden: false,
        on_decision: None,
    }]
}

fn check_command(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let (command, workdir) = match super::decode::check_command(&params) {
            Ok(p) => p,
            Err(e) => return Outcome::failed(e),
        };
        let workdir = workdir
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| ctx.config.workspace.clone());
        let workdir = workdir.canonicalize().unwrap_or(workdir);
        let report = classify::check(
            &command,
            &Context {
                workdir: Some(workdir),
            },
        );
        match serde_json::to_value(&report) {
            Ok(mut v) => {
                v["success"] = json!(true);
                Outcome::ok(v)
            }
            Err(e) => Outcome::failed(format!("cannot serialise the report: {e}")),
        }
    })
}
