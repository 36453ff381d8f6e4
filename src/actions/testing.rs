//! Hidden actions for the test-suite and benchmarks, registered only when `test_actions` is on:
//! `sleep {ms, fail?}` waits (honouring cancellation), then succeeds or fails.

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome};
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::time::Duration;

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "sleep",
        description:
            "Test helper: waits `ms` milliseconds (cancellable), then succeeds, or fails if `fail`.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0, "maximum": 600000},
                    "fail": {"type": "boolean"},
                    "ignore_cancel": {"type": "boolean"}
                },
                "required": ["ms"],
                "additionalProperties": false
            })
        },
        grants: &[],
        permission_set: PermissionSet::Minimal,
        handler: crate::actions::Run::Async(sleep),
        hidden: true,
        on_decision: None,
    }]
}

fn sleep(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let (ms, fail, ignore_cancel) = match super::decode::sleep(&params) {
            Ok(p) => p,
            Err(e) => return Outcome::failed(e),
        };
        let wait = tokio::time::sleep(Duration::from_millis(ms));
        if ignore_cancel {
            wait.await;
        } else {
            tokio::select! {
                _ = wait => {}
                _ = ctx.cancel.cancelled() => return Outcome::cancelled(),
            }
        }
        if fail {
            Outcome::failed(format!("sleep failed on purpose after {ms} ms"))
        } else {
            Outcome::ok(
                json!({"success": true, "slept_ms": ms, "job_id": ctx.job_id, "attempt": ctx.attempt}),
            )
        }
    })
}
