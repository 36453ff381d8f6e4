//! Hidden actions for the test-suite and benchmarks, registered only when `test_actions` is on:
//! `sleep {ms, fail?}` waits (honouring cancellation), then succeeds or fails. With
//! `canary: true` a run that reaches its end appends `<job_id> <attempt>` to the file named by
//! `BRAINLOOP_TEST_CANARY` (the shutdown tests count runs with it: a finished job must never
//! run twice).

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
                    "ignore_cancel": {"type": "boolean"},
                    "canary": {"type": "boolean"}
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
        if params.get("canary").and_then(Value::as_bool) == Some(true) {
            if let Err(e) = canary(ctx.job_id, ctx.attempt).await {
                return Outcome::failed(format!("cannot append to the canary: {e}"));
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

/// Appends one line for this run to `BRAINLOOP_TEST_CANARY`.
async fn canary(job_id: i64, attempt: u32) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("BRAINLOOP_TEST_CANARY") else {
        return Err(std::io::Error::other("BRAINLOOP_TEST_CANARY is not set"));
    };
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        f.write_all(format!("{job_id} {attempt}\n").as_bytes())?;
        f.sync_all()
    })
    .await
    .map_err(std::io::Error::other)?
}
