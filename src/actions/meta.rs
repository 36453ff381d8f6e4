//! The actions that describe brainloop itself: `ping`, `list_actions`, `get_schema`,
//! `get_stats`. Pure reads: they need no grant and never wait for a human.

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome, Registry};
use crate::db::output;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::sync::Arc;

pub fn specs() -> Vec<ActionSpec> {
    vec![
        ActionSpec {
            name: "ping",
            description: "Answers at once with `pong`, the worker's version and time (a producer's health check: the job went through the whole queue). An optional `echo` string is returned as given.",
            aliases: &[],
            params_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "echo": {"type": "string", "maxLength": 1024,
                                 "description": "returned unchanged (to correlate answers)"}
                    },
                    "additionalProperties": false
                })
            },
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Instant(ping),
            hidden: false,
            on_decision: None,
        },
        ActionSpec {
            name: "list_actions",
            description: "Lists the available actions with their descriptions, required grants and params schemas.",
            aliases: &[],
            params_schema: || json!({"type": "object", "properties": {}, "additionalProperties": false}),
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Instant(list_actions),
            hidden: false,
            on_decision: None,
        },
        ActionSpec {
            name: "get_schema",
            description: "Returns one action's description, grants and the JSON Schema of its params.",
            aliases: &[],
            params_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "action_name": {"type": "string", "description": "the action to describe"},
                        "action": {"type": "string", "description": "alias of action_name"}
                    },
                    "anyOf": [{"required": ["action_name"]}, {"required": ["action"]}],
                    "additionalProperties": false
                })
            },
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Instant(get_schema),
            hidden: false,
            on_decision: None,
        },
        ActionSpec {
            name: "get_stats",
            description: "Usage statistics over a window (default the last hour): metrics aggregated by name (samples, sum, avg, min, max), job results by status, and the latest heartbeat.",
            aliases: &[],
            params_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "window_s": {"type": "integer", "minimum": 1, "maximum": 31_536_000,
                                     "description": "window in seconds (default 3600)"}
                    },
                    "additionalProperties": false
                })
            },
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Async(get_stats),
            hidden: false,
            on_decision: None,
        },
    ]
}

/// The `list_actions` answer. Shared with the MCP front-end, which answers it itself, so the
/// two can never differ.
pub fn list_actions_answer(registry: &Registry) -> Value {
    let actions: Vec<Value> = registry.visible().map(|a| a.describe()).collect();
    json!({"success": true, "count": actions.len(), "actions": actions})
}

/// The `get_schema` answer for already validated params, or the unknown-action error.
/// Shared with the MCP front-end like [`list_actions_answer`].
pub fn get_schema_answer(registry: &Registry, params: &Value) -> Result<Value, String> {
    let name = params
        .get("action_name")
        .or_else(|| params.get("action"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    match registry.get(name).filter(|a| !a.spec.hidden) {
        Some(a) => {
            let mut v = a.describe();
            v["success"] = json!(true);
            Ok(v)
        }
        None => Err(registry.unknown(name)),
    }
}

/// The `ping` answer: small and constant-time, so a benchmark of it measures the queue.
pub fn ping_answer(params: &Value) -> Value {
    let mut v = json!({
        "success": true,
        "pong": true,
        "version": env!("CARGO_PKG_VERSION"),
        "at_ms": crate::time::now_ms(),
    });
    if let Some(e) = params.get("echo") {
        v["echo"] = e.clone();
    }
    v
}

fn ping(_registry: &Registry, params: &Value) -> Outcome {
    Outcome::ok(ping_answer(params))
}

fn list_actions(registry: &Registry, _params: &Value) -> Outcome {
    Outcome::ok(list_actions_answer(registry))
}

fn get_schema(registry: &Registry, params: &Value) -> Outcome {
    match get_schema_answer(registry, params) {
        Ok(v) => Outcome::ok(v),
        Err(e) => Outcome::failed(e),
    }
}

fn get_stats(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let window_s = params
            .get("window_s")
            .and_then(Value::as_i64)
            .unwrap_or(3600);
        let pool = ctx.stores.output_readers.clone();
        let now = crate::time::now_ms();
        let since = now - window_s * 1000;
        let llm = Arc::clone(&ctx.llm);
        let read = tokio::task::spawn_blocking(move || -> anyhow::Result<Value> {
            let conn = pool.get()?;
            let metrics = output::summarize_metrics(&conn, since)?;
            // LLM totals per hour and per day (from the metrics) and today's budget use.
            let totals = |ms: i64| -> anyhow::Result<Value> {
                let m: serde_json::Map<String, Value> = output::summarize_metrics(&conn, now - ms)?
                    .into_iter()
                    .filter(|m| m.name.starts_with("cerebras_"))
                    .map(|m| {
                        (
                            m.name.clone(),
                            json!({"sum": m.sum, "samples": m.samples, "avg": m.avg, "max": m.max}),
                        )
                    })
                    .collect();
                Ok(Value::Object(m))
            };
            let cfg = llm.config();
            let llm_stats = json!({
                "model": cfg.model,
                "available": llm.available().is_ok(),
                "last_hour": totals(3_600_000)?,
                "last_day": totals(86_400_000)?,
                "tokens_today_utc": llm.used_today(),
                "daily_token_budget": cfg.daily_token_budget,
                "job_token_budget": cfg.job_token_budget,
                "start_up_check": llm.last_check(),
            });
            let statuses: serde_json::Map<String, Value> = output::status_counts(&conn, since)?
                .into_iter()
                .map(|(s, n)| (s, json!(n)))
                .collect();
            let hb = output::latest_heartbeat(&conn)?;
            Ok(json!({
                "success": true,
                "window_s": window_s,
                "metrics": metrics,
                "results_by_status": statuses,
                "heartbeat": hb,
                "llm": llm_stats,
            }))
        })
        .await;
        match read {
            Ok(Ok(v)) => Outcome::ok(v),
            Ok(Err(e)) => Outcome::failed(format!("cannot read statistics: {e:#}")),
            Err(e) => Outcome::failed(format!("statistics task failed: {e}")),
        }
    })
}
