//! Running one step the model proposed, through the same machinery as the standalone actions:
//!
//! - `run_command` becomes an `execute_bash` call for the same job and client (`actions::run`):
//!   the same classifier, grants, registry, precedence table, sandbox, overlay and approvals.
//!   Blocked stays blocked; a command that needs a human pauses the session with that
//!   validation (execute_bash records its hash in the job's snapshot). The job's consumed
//!   approval is handed only to the step that waited for it, never to a later one; nothing the
//!   model writes can set `force_execute`.
//! - `read_file` opens under the client's FILE_READ grants (`clients::paths`).
//! - `write_file` checks the target under FILE_WRITE (`clients::write`); an `auto` grant writes
//!   at once, otherwise the write asks a human exactly like generate_file (`llm::pending`, hash
//!   over action, real path and content), and the resumed step writes only if the approval's
//!   hash matches the stored step and the target as it resolves now.

use super::observe::{cap, CAP};
use super::tools::Tool;
use crate::actions::llm::{pending, preview};
use crate::actions::{ApprovedRun, JobCtx, Outcome};
use crate::clients::write::{self, WriteError};
use crate::clients::{paths, ClientGrants};
use crate::db::output::JobStatus;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// What a step came to.
pub enum StepResult {
    /// Finished: `outcome` is `ok` or why not (failed, blocked, refused); the observation is
    /// what the model sees (capped).
    Done {
        outcome: &'static str,
        observation: String,
    },
    /// A human must decide: the job ends with this `pending_validation` outcome.
    Pause(Outcome),
    /// The job is being cancelled (shutdown) while the step ran: outcome unknown.
    Cancelled,
}

fn done(outcome: &'static str, observation: impl Into<String>) -> StepResult {
    StepResult::Done {
        outcome,
        observation: cap(&observation.into(), CAP),
    }
}

/// Largest file `read_file` reads (the model sees at most [`CAP`] bytes of it).
const READ_MAX: u64 = 1024 * 1024;

/// Action name recorded with the writes this mode asks about.
pub const WRITE_ACTION: &str = "loop";

fn resolve(workdir: &str, p: &str) -> String {
    if Path::new(p).is_absolute() {
        p.to_string()
    } else {
        Path::new(workdir).join(p).display().to_string()
    }
}

pub async fn execute(
    ctx: &JobCtx,
    grants: &Arc<ClientGrants>,
    workdir: &str,
    index: u32,
    tool: &Tool,
    approval: Option<ApprovedRun>,
) -> StepResult {
    match tool {
        Tool::RunCommand { command } => run_command(ctx, workdir, command, approval).await,
        Tool::ReadFile { path } => read_file(ctx, grants, &resolve(workdir, path)).await,
        Tool::WriteFile { path, content } => {
            write_file(
                ctx,
                grants,
                index,
                &resolve(workdir, path),
                content,
                approval,
            )
            .await
        }
        Tool::Finish { summary } => done("ok", format!("session finished: {summary}")),
    }
}

async fn run_command(
    ctx: &JobCtx,
    workdir: &str,
    command: &str,
    approval: Option<ApprovedRun>,
) -> StepResult {
    let params = json!({"command": command, "workdir": workdir}).to_string();
    let child = JobCtx {
        grants: None,
        approval,
        ..ctx.clone()
    };
    let actions = Arc::clone(&child.actions);
    let out = actions.call(child, "execute_bash", &params).await;
    let r = out.result.clone().unwrap_or(Value::Null);
    match out.status {
        JobStatus::PendingValidation => StepResult::Pause(out),
        JobStatus::Cancelled => StepResult::Cancelled,
        JobStatus::Succeeded => {
            let exit = r["exit_code"].as_i64();
            let ok = r["success"].as_bool().unwrap_or(false) && exit == Some(0);
            let text = format!(
                "exit_code: {}\npolicy: {}\nstdout:\n{}\nstderr:\n{}",
                exit.map(|c| c.to_string()).unwrap_or_else(|| "none (killed or timed out)".into()),
                r["policy_used"].as_str().unwrap_or("?"),
                r["stdout"].as_str().unwrap_or(""),
                r["stderr"].as_str().unwrap_or(""),
            );
            done(if ok { "ok" } else { "failed" }, text)
        }
        JobStatus::Blocked => done(
            "blocked",
            format!(
                "REFUSED by command security: blocked, never run ({}). Nothing lifts a block; do not try to get around it.",
                r["reasons"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
                    .unwrap_or_else(|| out.error.clone().unwrap_or_default())
            ),
        ),
        JobStatus::Denied => done(
            "refused",
            format!(
                "REFUSED: {}; the command did not run",
                out.error.unwrap_or_else(|| "denied".into())
            ),
        ),
        JobStatus::DuplicateWarning => done(
            "refused",
            format!(
                "NOT RUN (duplicate_warning): {}",
                out.error.unwrap_or_default()
            ),
        ),
        other => done(
            "failed",
            format!(
                "{}: {}",
                other.as_str(),
                out.error.unwrap_or_else(|| r.to_string())
            ),
        ),
    }
}

async fn read_file(ctx: &JobCtx, grants: &Arc<ClientGrants>, path: &str) -> StepResult {
    let (g, p, deny) = (
        Arc::clone(grants),
        path.to_string(),
        paths::deny_roots(&ctx.config.data_dir),
    );
    let read = tokio::task::spawn_blocking(move || -> Result<(String, usize, bool), String> {
        let opened = paths::open_for_read(&g, &p, &deny).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        (&opened.file)
            .take(READ_MAX)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", opened.real_path.display()))?;
        let whole = buf.len() < READ_MAX as usize;
        let n = buf.len();
        Ok((String::from_utf8_lossy(&buf).into_owned(), n, whole))
    })
    .await;
    match read {
        Ok(Ok((text, n, whole))) => done(
            "ok",
            format!(
                "{path}: {n} bytes{}\n{text}",
                if whole {
                    ""
                } else {
                    " read (the file is larger)"
                }
            ),
        ),
        Ok(Err(e)) => done("refused", format!("read_file refused: {e}")),
        Err(e) => done("failed", format!("read_file failed: {e}")),
    }
}

fn write_error(e: WriteError) -> String {
    e.to_string()
}

async fn write_now(
    grants: &Arc<ClientGrants>,
    path: &str,
    deny: Vec<std::path::PathBuf>,
    real: std::path::PathBuf,
    content: &str,
    how: &str,
) -> StepResult {
    let (g, p, r2, c) = (
        Arc::clone(grants),
        path.to_string(),
        real.clone(),
        content.to_string(),
    );
    let written =
        tokio::task::spawn_blocking(move || write::write(&g, &p, &deny, &r2, c.as_bytes(), true))
            .await;
    match written {
        Ok(Ok(bytes)) => done(
            "ok",
            format!("wrote {bytes} bytes to {} ({how})", real.display()),
        ),
        Ok(Err(e)) => done("refused", format!("write_file refused: {}", write_error(e))),
        Err(e) => done("failed", format!("write_file failed: {e}")),
    }
}

async fn write_file(
    ctx: &JobCtx,
    grants: &Arc<ClientGrants>,
    index: u32,
    path: &str,
    content: &str,
    approval: Option<ApprovedRun>,
) -> StepResult {
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let target = match write::check(grants, path, &deny) {
        Ok(t) => t,
        Err(e) => return done("refused", format!("write_file refused: {e}")),
    };
    let hash = pending::write_hash(WRITE_ACTION, &target.real_path, true, content);
    if let Some(a) = approval {
        // The step that waited: write exactly what was approved, where it was approved.
        pending::forget(ctx).await;
        if a.command_hash != hash {
            return done(
                "refused",
                format!(
                    "write_file refused: {} no longer resolves to what was approved (validation {}); nothing was written",
                    target.real_path.display(),
                    a.validation_id
                ),
            );
        }
        return write_now(grants, path, deny, target.real_path, content, "approved").await;
    }
    let protected = if target.auto {
        pending::auto_refusals(ctx, &target, Some(content)).await
    } else {
        Vec::new()
    };
    if target.auto && protected.is_empty() {
        return write_now(grants, path, deny, target.real_path, content, "auto grant").await;
    }
    let old = if target.exists {
        let (g, p, d) = (Arc::clone(grants), target.real_path.clone(), deny.clone());
        tokio::task::spawn_blocking(move || {
            let opened = paths::open_for_read(&g, &p.to_string_lossy(), &d).ok()?;
            let mut buf = String::new();
            (&opened.file)
                .take(READ_MAX)
                .read_to_string(&mut buf)
                .ok()?;
            Some(buf)
        })
        .await
        .ok()
        .flatten()
    } else {
        None
    };
    let shown = match &old {
        Some(old) => preview::diff(old, content),
        None if target.exists => format!(
            "(replaces an existing file the client may not read; new content:)\n{}",
            preview::head(content)
        ),
        None => preview::head(content),
    };
    let summary = format!(
        "loop agent step {index} of job {}: write {} ({} bytes, {})",
        ctx.job_id,
        target.real_path.display(),
        content.len(),
        if target.exists {
            "REPLACES the existing file"
        } else {
            "new file"
        }
    );
    let out = pending::ask(
        ctx,
        pending::Ask {
            action: WRITE_ACTION,
            target: &target.real_path,
            content,
            hash,
            summary,
            preview: shown,
            permission_set: PermissionSet::Filesystem,
            extra: json!({}),
            protected,
            change_set: None,
        },
    )
    .await;
    match out.status {
        JobStatus::PendingValidation => StepResult::Pause(out),
        _ => done(
            "failed",
            format!(
                "write_file could not ask for validation: {}",
                out.error.unwrap_or_default()
            ),
        ),
    }
}
