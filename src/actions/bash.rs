//! `execute_bash` (seed 001, DESIGN §5–§7): classify the command, check the client's
//! SYSTEM_COMMAND grants on every operation, consult the command registry and the precedence
//! table, then run it, ask a human, or refuse — never the original's self-approval.
//!
//! Results follow seed 001's shapes: `{success, exit_code, stdout, stderr, duration_ms,
//! policy_used, truncated, sandbox}` when it ran; `{status: "pending_validation", validation_id,
//! command, policy, risk_score, reasons}`; `{status: "duplicate_warning", command,
//! seconds_since_last}`; `{status: "blocked", reasons}`.

use super::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::bash;
use crate::bash::executor;
use crate::classify::{self, CheckReport, Context};
use crate::clients::{ClientGrants, Permission};
use crate::db::output::JobStatus;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
                    "force_execute": {"type": "boolean", "description": "skip `ask` — only for clients granted FORCE_EXECUTE; never lifts a block or an override"},
                    "purpose": {"type": "string", "maxLength": 2000, "description": "what the command is for, in a sentence: shown to the human and to a configured reviewer, who compare it with the effects (it grants nothing)"}
                },
                "required": ["command"],
                "additionalProperties": false
            })
        },
        grants: &[Grant::SystemCommand],
        permission_set: crate::permset::PermissionSet::McpStandard,
        handler: crate::actions::Run::Async(execute_bash),
        hidden: false,
        on_decision: Some(crate::bash::decisions::on_decision),
    }]
}

/// The canonical working directory, or the error that names the fix. A workdir outside the
/// workspace is checked against the FILE_READ grant on its *lexical* path (`..` folded, no
/// symlink followed) before anything looks at the disk, and again on its canonical path; every
/// refusal outside the workspace is the same denial, so errors reveal nothing about what
/// exists there, its type or where a symlink points (issue 19 item 4).
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
    let mut lexical = PathBuf::from("/");
    let joined = if Path::new(req).is_absolute() {
        PathBuf::from(req)
    } else {
        ws.join(req)
    };
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::Normal(n) => lexical.push(n),
            _ => {}
        }
    }
    let denied = || {
        Outcome::denied(grants.missing(Permission::FileRead, &format!("{}/**", lexical.display())))
    };
    let inside = lexical.starts_with(&ws);
    if !inside && !grants.covers_dir(Permission::FileRead, &lexical) {
        return Err(denied());
    }
    let canon = match lexical.canonicalize() {
        Ok(c) => c,
        Err(_) if inside => {
            return Err(Outcome::failed(format!(
                "workdir {} does not exist",
                lexical.display()
            )))
        }
        Err(_) => return Err(denied()),
    };
    if !canon.starts_with(&ws) && !grants.covers_dir(Permission::FileRead, &canon) {
        return Err(denied());
    }
    if !canon.is_dir() {
        return Err(Outcome::failed(format!(
            "workdir {} is not a directory",
            lexical.display()
        )));
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
        // The job's timing record, when the log asks for it (`sandbox::marks`, issue 39).
        let out = crate::sandbox::marks::scope(ctx.job_id, async {
            match run(&ctx, &params).await {
                Ok(o) | Err(o) => o,
            }
        })
        .await;
        // The warm helpers this job's command used are replaced once its result is committed
        // (`supervisor::finisher`, `sandbox::warm::replenish`).
        out
    })
}

/// Params → workdir → classification (invalid and blocked end here) → SYSTEM_COMMAND on every
/// operation → the command path (`bash::command`).
async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let p = super::decode::execute_bash(params).map_err(Outcome::failed)?;
    let timeout = Duration::from_millis(
        p.timeout_ms
            .unwrap_or(executor::DEFAULT_TIMEOUT.as_millis() as u64),
    )
    .min(executor::MAX_TIMEOUT);
    let workdir = resolve_workdir(&grants, &ctx.config.workspace, p.workdir.as_deref())?;
    let report = classify::check(
        &p.command,
        &Context {
            workdir: Some(workdir.clone()),
        },
    );
    crate::sandbox::marks::mark("classified");
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
                json!({"status": "blocked", "command": p.command, "reasons": report.reasons, "risk_score": report.risk_score}),
            ),
            error: Some(format!("blocked: {}", report.reasons.join("; "))),
        });
    }
    check_programs(&grants, &report)?;
    let command = bash::command::Command {
        text: &p.command,
        report: &report,
        workdir: &workdir,
        timeout,
        force_requested: p.force_execute,
    };
    bash::command::run(&job(ctx, &grants), &command).await
}

/// What the command path sees of the job.
fn job<'a>(ctx: &'a JobCtx, grants: &'a ClientGrants) -> bash::command::Job<'a> {
    let c = &ctx.config;
    bash::command::Job {
        job_id: ctx.job_id,
        client_id: &ctx.client_id,
        stores: &ctx.stores,
        stats: &ctx.stats,
        grants,
        approval: ctx.approval.clone(),
        level: &ctx.sandbox,
        cancel: &ctx.cancel,
        settings: bash::command::Settings {
            workspace: &c.workspace,
            data_dir: &c.data_dir,
            sandbox: &c.sandbox,
            egress: &c.egress,
            secrets: &c.secrets,
            overlay: c.overlay,
            signature_approvals: c.signature_approvals,
            overlay_max_bytes: c.overlay_max_bytes,
            overlay_max_inodes: c.overlay_max_inodes,
            pending_max_bytes_per_client: c.pending_max_bytes_per_client,
            protected_paths: &c.protected_paths,
            data_paths: &c.data_paths,
            validation_ttl_ms: c.validation_ttl_ms,
            test_actions: c.test_actions,
        },
    }
}

#[cfg(test)]
mod issue19_tests {
    use super::*;
    use crate::clients::{Grant, Source};

    /// A workdir outside the workspace and the grants gets one denial, the same whether it
    /// exists, is a file, a symlink, a dir or `/proc/PID/cwd` — no oracle (issue 19 item 4).
    #[test]
    fn an_ungranted_workdir_outside_gets_one_generic_denial() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let out = t.path().join("out");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(out.join("dir")).unwrap();
        std::fs::write(out.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", out.join("link")).unwrap();
        std::os::unix::fs::symlink(out.join("dir"), ws.join("inlink")).unwrap();
        let g = ClientGrants::new(
            "c",
            vec![Grant {
                permission: Permission::FileRead,
                pattern: "{workspace}/**".into(),
                auto: false,
                source: Source::Config,
            }],
            &ws,
        )
        .unwrap();
        let o = out.display();
        for req in [
            format!("{o}/dir"),
            format!("{o}/file"),
            format!("{o}/link"),
            format!("{o}/missing"),
            "/proc/1/cwd".to_string(),
            "../out/dir".to_string(),
            "inlink".to_string(),
        ] {
            let e = resolve_workdir(&g, &ws, Some(&req)).unwrap_err();
            assert_eq!(
                e.status,
                crate::db::output::JobStatus::Denied,
                "{req}: {:?}",
                e.error
            );
            let msg = e.error.unwrap_or_default();
            for leak in ["exist", "directory", "/etc", "/dir"] {
                assert!(
                    !msg.contains(leak) || req.contains(leak),
                    "{req}: the error reveals `{leak}`: {msg}"
                );
            }
        }
        assert!(resolve_workdir(&g, &ws, Some(".")).is_ok());
    }
}
