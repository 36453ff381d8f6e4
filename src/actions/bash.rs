//! `execute_bash` (seed 001, DESIGN §5–§7): classify the command, check the client's
//! SYSTEM_COMMAND grants on every operation, consult the command registry and the precedence
//! table, then run it, ask a human, or refuse — never the original's self-approval.
//!
//! Results follow seed 001's shapes: `{success, exit_code, stdout, stderr, duration_ms,
//! policy_used, truncated, sandbox}` when it ran; `{status: "pending_validation", validation_id,
//! command, policy, risk_score, reasons}`; `{status: "duplicate_warning", command,
//! seconds_since_last}`; `{status: "blocked", reasons}`.

use super::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::bash::approvals::{self, Validation};
use crate::bash::executor::{self, ExecRequest};
use crate::bash::leftovers;
use crate::bash::policy::{self, Facts, Situation, Verdict};
use crate::bash::registry;
use crate::classify::{self, CheckReport, Context};
use crate::clients::{ClientGrants, Permission};
use crate::db::output::JobStatus;
use crate::db::write_tx;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn workspace_of(ctx: &JobCtx) -> PathBuf {
    ctx.config
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| ctx.config.workspace.clone())
}

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "execute_bash",
        description: "Runs a shell command through the command-security policy: pure commands run at once, blocked ones never, others ask a human (pending_validation) until approved often enough to be promoted. Output capped at 10 KB, timeout 120 s, filtered environment.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "workdir": {"type": "string", "description": "default: the workspace; outside it needs FILE_READ there"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 120000},
                    "force_execute": {"type": "boolean", "description": "skip `ask` — only for clients granted FORCE_EXECUTE; never lifts a block or an override"}
                },
                "required": ["command"],
                "additionalProperties": false
            })
        },
        grants: &[Grant::SystemCommand],
        permission_set: "mcp-standard",
        handler: execute_bash,
        hidden: false,
    }]
}

fn facts(r: &CheckReport) -> Facts {
    Facts {
        blocked: r.blocked,
        pure: r.pure,
        risk: r.risk_score,
        permission_set: r.permission_set.to_string(),
        sandbox_auto_approvable: r.sandbox_auto_approvable,
        computed_program: r.computed_program,
        runs_workspace_file: r.runs_workspace_file,
    }
}

/// The canonical working directory, or the error that names the fix.
pub fn resolve_workdir(
    grants: &ClientGrants,
    workspace: &Path,
    requested: Option<&str>,
) -> Result<PathBuf, Outcome> {
    let ws = workspace.canonicalize().map_err(|_| {
        Outcome::failed(format!(
            "the workspace {} does not exist: create it, or set --workspace / BRAINLOOP_WORKSPACE",
            workspace.display()
        ))
    })?;
    let Some(req) = requested else { return Ok(ws) };
    let p = if Path::new(req).is_absolute() {
        PathBuf::from(req)
    } else {
        ws.join(req)
    };
    let canon = p
        .canonicalize()
        .map_err(|_| Outcome::failed(format!("workdir {} does not exist", p.display())))?;
    if !canon.is_dir() {
        return Err(Outcome::failed(format!(
            "workdir {} is not a directory",
            canon.display()
        )));
    }
    if !canon.starts_with(&ws) && !grants.covers_dir(Permission::FileRead, &canon) {
        return Err(Outcome::denied(
            grants.missing(Permission::FileRead, &format!("{}/**", canon.display())),
        ));
    }
    Ok(canon)
}

/// SYSTEM_COMMAND is checked on every unwrapped operation; a computed program name needs `*`.
fn check_programs(grants: &ClientGrants, r: &CheckReport) -> Result<(), Outcome> {
    for op in &r.operations {
        if !op.op.starts_with("bash:") {
            continue;
        }
        let name = if op.op == "bash:<dynamic>" || op.program.is_empty() {
            "*"
        } else {
            op.program.as_str()
        };
        let ok = if name == "*" {
            grants.may_run_any()
        } else {
            grants.may_run(name)
        };
        if !ok {
            let what = if name == "*" {
                "a program whose name is computed at run time (needs SYSTEM_COMMAND '*')"
                    .to_string()
            } else {
                name.to_string()
            };
            return Err(Outcome::denied(
                grants.missing(Permission::SystemCommand, &what),
            ));
        }
    }
    Ok(())
}

fn execute_bash(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        match run(&ctx, &params).await {
            Ok(o) | Err(o) => o,
        }
    })
}

async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let command = params["command"].as_str().unwrap_or_default().to_string();
    let timeout = Duration::from_millis(
        params["timeout_ms"]
            .as_u64()
            .unwrap_or(executor::DEFAULT_TIMEOUT.as_millis() as u64),
    )
    .min(executor::MAX_TIMEOUT);
    let force_requested = params["force_execute"].as_bool().unwrap_or(false);
    let workdir = resolve_workdir(&grants, &ctx.config.workspace, params["workdir"].as_str())?;

    let report = classify::check(
        &command,
        &Context {
            workdir: Some(workdir.clone()),
        },
    );
    if !report.valid {
        return Err(Outcome::failed(format!(
            "command refused: {}",
            report
                .error
                .clone()
                .unwrap_or_else(|| "not valid shell".into())
        )));
    }
    if report.blocked {
        return Err(Outcome {
            status: JobStatus::Blocked,
            result: Some(
                json!({"status": "blocked", "command": command, "reasons": report.reasons, "risk_score": report.risk_score}),
            ),
            error: Some(format!("blocked: {}", report.reasons.join("; "))),
        });
    }
    check_programs(&grants, &report)?;

    let f = facts(&report);
    let hash = report.command_hash.clone();
    let now = crate::time::now_ms();
    let entry = {
        let (h, c, w, f2) = (
            hash.clone(),
            command.clone(),
            workdir.display().to_string(),
            f.clone(),
        );
        ctx.stores
            .security
            .call(move |conn| {
                registry::get_or_create(
                    conn,
                    &h,
                    &c,
                    &w,
                    &f2,
                    classify::CLASSIFIER_VERSION,
                    false,
                    now,
                )
            })
            .await
            .map_err(|e| Outcome::failed(format!("command registry: {e:#}")))?
    };
    let last_requested = {
        let h = hash.clone();
        ctx.stores
            .output
            .call(move |c| approvals::last_requested(c, &h))
            .await
            .unwrap_or(None)
    };
    let last = entry.last_executed.max(last_requested);
    let approved = ctx
        .approval
        .as_ref()
        .is_some_and(|a| a.command_hash == hash);
    let situation = Situation {
        facts: f.clone(),
        policy: entry.current_policy,
        user_override: entry.user_override,
        force_requested,
        force_granted: grants.has(Permission::ForceExecute),
        approved,
        since_last_ms: last.map(|t| now - t),
        duplicate_threshold_ms: entry.duplicate_threshold_ms,
        duplicate_check_enabled: entry.duplicate_check_enabled,
        sandbox_enforcing: ctx.sandbox.enforcing,
    };
    match policy::decide(&situation) {
        Verdict::Blocked => Err(Outcome {
            status: JobStatus::Blocked,
            result: Some(json!({"status": "blocked", "reasons": report.reasons})),
            error: Some("blocked".into()),
        }),
        Verdict::Denied(why) => Err(Outcome {
            status: JobStatus::Denied,
            result: Some(json!({"status": "denied", "command": command, "reason": why})),
            error: Some(why),
        }),
        Verdict::Duplicate { seconds_since_last } => Ok(Outcome {
            status: JobStatus::DuplicateWarning,
            result: Some(json!({
                "status": "duplicate_warning",
                "command": command,
                "seconds_since_last": seconds_since_last,
                "threshold_ms": entry.duplicate_threshold_ms,
            })),
            error: Some(format!(
                "the same command was asked {seconds_since_last:.1} s ago; nothing ran — resubmit after {} ms",
                entry.duplicate_threshold_ms
            )),
        }),
        Verdict::Ask(shown) => ask(ctx, &command, &report, &workdir, &shown, force_requested && !situation.force_granted).await,
        Verdict::Run(policy_used) => {
            let set = entry.permission_set.clone().unwrap_or_else(|| report.permission_set.to_string());
            execute(ctx, &command, &report, &f, &workdir, timeout, &policy_used, &set).await
        }
    }
}

async fn ask(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    workdir: &Path,
    shown: &str,
    force_refused: bool,
) -> Result<Outcome, Outcome> {
    let id = approvals::new_id().map_err(|e| Outcome::failed(e.to_string()))?;
    let now = crate::time::now_ms();
    let mut reasons = report.reasons.clone();
    if shown == "ask_warning" {
        reasons.insert(0, format!("WARNING: high risk ({:.2})", report.risk_score));
    }
    if force_refused {
        reasons.push("force_execute ignored: the client is not granted FORCE_EXECUTE".into());
    }
    let layers: Vec<Value> = report
        .layers
        .iter()
        .filter(|l| l.requires_validation)
        .map(|l| json!({"layer": l.index, "operations": l.ops, "reason": l.reason}))
        .collect();
    let v = Validation {
        id: id.clone(),
        job_id: ctx.job_id,
        client_id: ctx.client_id.clone(),
        command: Some(command.to_string()),
        command_hash: Some(report.command_hash.clone()),
        policy: Some(shown.to_string()),
        risk_score: Some(report.risk_score),
        permission_set: Some(report.permission_set.to_string()),
        reasons: Some(json!(reasons).to_string()),
        status: "pending".into(),
        requested_at: now,
        decided_at: None,
        expires_at: Some(now + ctx.config.validation_ttl_ms as i64),
    };
    ctx.stores
        .output
        .call(move |c| approvals::create(c, &v))
        .await
        .map_err(|e| Outcome::failed(format!("{e:#}")))?;
    // The snapshot records what the approval must match (derived from the claimed params).
    let (job, hash, wd, set) = (
        ctx.job_id,
        report.command_hash.clone(),
        workdir.display().to_string(),
        report.permission_set,
    );
    let _ = ctx
        .stores
        .lifecycle
        .call(move |c| {
            Ok(write_tx(c, |tx| {
                tx.execute(
                    "UPDATE queue SET command_hash = ?2, workdir = ?3, permission_set = ?4 WHERE job_id = ?1",
                    rusqlite::params![job, hash, wd, set],
                )
            })?)
        })
        .await;
    ctx.stats.incr("hil_requests", 1.0);
    Ok(Outcome {
        status: JobStatus::PendingValidation,
        result: Some(json!({
            "status": "pending_validation",
            "validation_id": id,
            "command": command,
            "policy": shown,
            "risk_score": report.risk_score,
            "permission_set": report.permission_set,
            "reasons": reasons,
            "layers": layers,
            "message": format!("waiting for a human: brainloop approve {id} (or deny)"),
        })),
        error: None,
    })
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    f: &Facts,
    workdir: &Path,
    timeout: Duration,
    policy_used: &str,
    permission_set: &str,
) -> Result<Outcome, Outcome> {
    // The set recorded in the registry (the one it was approved/promoted under) decides.
    let set =
        crate::sandbox::Set::parse(permission_set).unwrap_or(crate::sandbox::Set::McpStandard);
    let prepared = crate::sandbox::prepare(
        &ctx.sandbox,
        &ctx.config.sandbox,
        set,
        command,
        workdir,
        &workspace_of(ctx),
        executor::filtered_env(|k| std::env::var(k).ok()),
        ctx.job_id,
    )
    .map_err(Outcome::failed)?;
    let label = prepared.label.clone();
    let req = ExecRequest {
        command: command.to_string(),
        workdir: workdir.to_path_buf(),
        timeout,
        sandbox: prepared.sandbox.clone(),
    };
    let data_dir = ctx.config.data_dir.clone();
    let job_id = ctx.job_id;
    let res = executor::execute_with(&req, &ctx.cancel, |pgid| {
        leftovers::record(&data_dir, job_id, pgid)
    })
    .await;
    leftovers::forget(&data_dir, job_id);
    prepared.finish();
    let r = res.map_err(|e| Outcome::failed(format!("cannot start the command: {e}")))?;
    if r.cancelled {
        return Ok(Outcome::cancelled());
    }
    if r.sandbox_failed {
        return Err(Outcome::failed(format!(
            "the sandbox could not confine the command, so nothing ran: {}",
            r.stderr.trim()
        )));
    }
    ctx.stats.incr("bash_executions", 1.0);
    let success = r.success();
    {
        let (h, f2, sandbox, code, ms) = (
            report.command_hash.clone(),
            f.clone(),
            label.clone(),
            r.exit_code,
            r.duration_ms as i64,
        );
        let now = crate::time::now_ms();
        let changes = ctx
            .stores
            .security
            .call(move |c| {
                registry::record_run(c, &h, job_id, code, success, ms, &sandbox, &f2, now)
            })
            .await;
        match changes {
            Ok(ch) => {
                for c in ch {
                    tracing::info!(change = ?c, "command policy changed");
                }
            }
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot record the run in the registry"
            ),
        }
    }
    let result = json!({
        "success": success,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "stdout": r.stdout,
        "stderr": r.stderr,
        "duration_ms": r.duration_ms,
        "policy_used": policy_used,
        "truncated": r.truncated,
        "timed_out": r.timed_out,
        "sandbox": label,
        "permission_set": set.as_str(),
        "executed_path": report.executed_path,
        "command_hash": report.command_hash,
    });
    Ok(Outcome {
        status: if success {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        },
        error: (!success).then(|| {
            if r.timed_out {
                format!(
                    "timed out after {} ms (process tree killed)",
                    timeout.as_millis()
                )
            } else if let Some(code) = r.exit_code {
                format!("exit code {code}")
            } else {
                format!("killed by signal {}", r.signal.unwrap_or(0))
            }
        }),
        result: Some(result),
    })
}
