//! Actions about the calling client itself: `get_result` (poll one of its own jobs) and
//! `request_permission` (ask the operator for a grant — seed 004: the client asks, the
//! administrator approves; nothing an agent sends can grant anything by itself).

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome};
use crate::clients::store;
use crate::db::output;
use crate::permset::PermissionSet;
use rusqlite::OptionalExtension;
use serde_json::{json, Value};

pub fn specs() -> Vec<ActionSpec> {
    vec![
        ActionSpec {
            name: "get_result",
            description: "Returns the status and result of one of the calling client's own jobs (for polling), a firing of one of its schedules included (a negative id). Another client's job is reported as not found.",
            aliases: &[],
            params_schema: || {
                json!({
                    "type": "object",
                    // Producers' ids are positive, a schedule's firings negative (its
                    // client's own, like any job); 0 is no job.
                    "properties": {"job_id": {
                        "type": "integer",
                        "not": {"const": 0},
                        "description": "The job's id: positive for a queued job, negative for a firing of one of the client's schedules."
                    }},
                    "required": ["job_id"],
                    "additionalProperties": false
                })
            },
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Async(get_result),
            hidden: false,
            on_decision: None,
        },
        ActionSpec {
            name: "request_permission",
            description: "Files a request for a grant (permission + pattern + justification) that an operator decides with `brainloop requests grant|refuse ID`. Returns the request id; the grant itself never comes from this call.",
            aliases: &[],
            params_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "permission": {"type": "string", "enum": ["FILE_READ", "FILE_WRITE", "SYSTEM_COMMAND", "NETWORK", "LLM", "FORCE_EXECUTE"]},
                        "pattern": {"type": "string", "minLength": 1, "maxLength": 4096},
                        "justification": {"type": "string", "maxLength": 2000}
                    },
                    "required": ["permission", "pattern"],
                    "additionalProperties": false
                })
            },
            grants: &[],
            permission_set: PermissionSet::Minimal,
            handler: crate::actions::Run::Async(request_permission),
            hidden: false,
            on_decision: None,
        },
    ]
}

fn get_result(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let id = match super::decode::get_result(&params) {
            Ok(id) => id,
            Err(e) => return Outcome::failed(e),
        };
        let pool = ctx.stores.output_readers.clone();
        let client = ctx.client_id.clone();
        let read = tokio::task::spawn_blocking(move || -> anyhow::Result<Option<Value>> {
            let conn = pool.get()?;
            Ok(conn
                .query_row(
                    "SELECT status, result, error, attempts, duration_ms, started_at, finished_at, action
                     FROM results WHERE job_id = ?1 AND client_id = ?2",
                    rusqlite::params![id, client],
                    |r| {
                        let result: Option<String> = r.get(1)?;
                        Ok(json!({
                            "job_id": id,
                            "status": r.get::<_, String>(0)?,
                            "result": result.and_then(|s| serde_json::from_str::<Value>(&s).ok()),
                            "error": r.get::<_, Option<String>>(2)?,
                            "attempts": r.get::<_, i64>(3)?,
                            "duration_ms": r.get::<_, Option<i64>>(4)?,
                            "started_at": r.get::<_, Option<i64>>(5)?,
                            "finished_at": r.get::<_, Option<i64>>(6)?,
                            "action": r.get::<_, Option<String>>(7)?,
                        }))
                    },
                )
                .optional()?)
        })
        .await;
        match read {
            Ok(Ok(Some(mut v))) => {
                let status = v["status"].as_str().unwrap_or_default().to_string();
                let is_final = output::FINAL_SQL.contains(&format!("'{status}'"));
                v["final"] = json!(is_final);
                v["success"] = json!(true);
                Outcome::ok(v)
            }
            // Same answer whether the job does not exist or belongs to someone else.
            Ok(Ok(None)) => Outcome::failed(format!(
                "no job {id} for client {:?} (or it has no result yet)",
                ctx.client_id
            )),
            Ok(Err(e)) => Outcome::failed(format!("cannot read results: {e:#}")),
            Err(e) => Outcome::failed(format!("result lookup failed: {e}")),
        }
    })
}

fn request_permission(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let (perm, pattern, justification) = match super::decode::request_permission(&params) {
            Ok(p) => p,
            Err(e) => return Outcome::failed(e),
        };
        let client = ctx.client_id.clone();
        let (pat, cl) = (pattern.clone(), client.clone());
        let res = ctx
            .stores
            .security
            .call(move |c| store::file_request(c, &cl, perm, &pat, justification.as_deref()))
            .await;
        match res {
            Ok(id) => Outcome::ok(json!({
                "success": true,
                "request_id": id,
                "status": "pending",
                "permission": perm.as_str(),
                "pattern": pattern,
                "message": format!("request {id} filed; an operator decides it with `brainloop requests grant {id}` or `brainloop requests refuse {id}`"),
            })),
            Err(e) => Outcome::failed(format!("{e:#}")),
        }
    })
}
