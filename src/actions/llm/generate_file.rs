//! `generate_file {prompt | verified_prompt, output_path, code_type?, patterns?, overwrite?}`:
//! the model writes one file (temperature 0.1, code fences stripped). The target is checked
//! under FILE_WRITE before any token is spent; an existing file is never replaced unless
//! `overwrite: true` (and then only through an atomic rename). Writing is a side effect: the
//! job asks a human with the path and a preview (or a diff) of the content, unless a FILE_WRITE
//! grant with `auto` covers the target; on approval exactly the approved content is written.

use super::pending::{self, write_hash, Ask};
use super::{ask_model, js_permissions, llm_info, str_param};
use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::bash::changes::{self, Manifest};
use crate::clients::paths;
use crate::clients::write;
use crate::clients::ClientGrants;
use crate::llm::{text, JobUsage, Prompt};
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const NAME: &str = "generate_file";

pub fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "Generates one file with the LLM (temperature 0.1, code fences stripped) and writes it under the client's FILE_WRITE grants. Never overwrites unless overwrite is true. The write asks a human (pending_validation, with a preview or diff) unless a FILE_WRITE grant with auto covers the path; on approval exactly the approved content is written. JS/TS results carry the inferred permission set.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "minLength": 1, "maxLength": 200000, "description": "what the file must contain"},
                    "verified_prompt": {"type": "string", "minLength": 1, "maxLength": 200000, "description": "alias of prompt (seed 001)"},
                    "output_path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "absolute, or relative to the workspace"},
                    "code_type": {"type": "string", "maxLength": 100, "description": "language or kind of file (e.g. python, sql, markdown)"},
                    "patterns": {
                        "description": "conventions or patterns the code must follow",
                        "anyOf": [
                            {"type": "array", "items": {"type": "string", "maxLength": 10000}, "maxItems": 100},
                            {"type": "string", "maxLength": 100000}
                        ]
                    },
                    "overwrite": {"type": "boolean", "description": "replace an existing file (default false)"}
                },
                "required": ["output_path"],
                "anyOf": [{"required": ["prompt"]}, {"required": ["verified_prompt"]}],
                "additionalProperties": false
            })
        },
        grants: &[Grant::Llm, Grant::FileWrite],
        permission_set: PermissionSet::Filesystem,
        handler: crate::actions::Run::Async(handle),
        hidden: false,
        on_decision: None,
    }
}

fn handle(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        match run(&ctx, &params).await {
            Ok(o) | Err(o) => o,
        }
    })
}

pub(crate) fn is_markdown(path: &Path, code_type: Option<&str>) -> bool {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    matches!(ext.as_deref(), Some("md" | "markdown" | "mdx"))
        || code_type.is_some_and(|c| c.eq_ignore_ascii_case("markdown"))
}

/// The current content of the file being replaced, if the client may read it.
pub(crate) fn current(
    grants: &ClientGrants,
    real: &Path,
    deny: &[std::path::PathBuf],
) -> Option<String> {
    let opened = paths::open_for_read(grants, &real.to_string_lossy(), deny).ok()?;
    let mut buf = String::new();
    (&opened.file)
        .take(1024 * 1024)
        .read_to_string(&mut buf)
        .ok()?;
    Some(buf)
}

/// Where a write at `target` is staged as a change set: (root, its path beneath it) — the
/// workspace when the file is beneath it (the paths `show`, `history` and `undo` name), else the
/// root of the grant that allows it; both by their real paths (`target.real_path` is real).
fn staged_at(
    workspace: &Path,
    real_path: &Path,
    grant_root: &Path,
) -> Result<(PathBuf, String), String> {
    for root in [workspace, grant_root] {
        let Ok(real) = std::fs::canonicalize(root) else {
            continue;
        };
        if let Ok(rel) = real_path.strip_prefix(&real) {
            match rel.to_str() {
                Some(r) if !r.is_empty() => return Ok((real, r.to_string())),
                Some(_) => {}
                None => return Err(format!("{} is not UTF-8", real_path.display())),
            }
        }
    }
    Err(format!(
        "{} is beneath neither the workspace nor the root of its grant",
        real_path.display()
    ))
}

/// The write of `content` at `target` staged as job's change set (`changes::stage_file`) and its
/// manifest saved: the same store, bound hash, budget, expiry and retention as a command's
/// overlay run (issue 54). `result`: what the job's result says once it is applied.
async fn stage(
    ctx: &JobCtx,
    target: &write::Target,
    content: &str,
    overwrite: bool,
    summary: String,
    result: Value,
) -> Result<Manifest, Outcome> {
    let (config, job_id, client) = (ctx.config.clone(), ctx.job_id, ctx.client_id.clone());
    let (target_path, target_root, exists) = (
        target.real_path.clone(),
        target.root().to_path_buf(),
        target.exists,
    );
    let (content, hash) = (
        content.as_bytes().to_vec(),
        write_hash(NAME, &target.real_path, overwrite, content),
    );
    tokio::task::spawn_blocking(move || -> Result<Manifest, String> {
        let dd = &config.data_dir;
        let waiting = changes::pending_bytes(dd, &client).map_err(|e| format!("{e:#}"))?;
        let budget = config.pending_max_bytes_per_client;
        if waiting >= budget {
            return Err(format!("client {client} already has {waiting} bytes of change sets waiting for a human, at or over pending_max_bytes_per_client ({budget}); nothing was written — answer or deny its pending validations (`brainloop validations`)"));
        }
        let (root, rel) = staged_at(&config.workspace, &target_path, &target_root)?;
        // The replaced file's permission bits (never setuid/setgid), else 0644.
        let mode = std::fs::symlink_metadata(&target_path)
            .ok()
            .filter(|m| exists && m.is_file())
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o644);
        let (cs, upper_bytes) = changes::stage_file(dd, job_id, &root, &rel, &content, mode)
            .map_err(|e| format!("cannot stage the write as a change set: {e:#}"))?;
        let m = Manifest {
            job_id,
            command: summary,
            effect_hash: changes::effect_hash(&hash, &cs.hash),
            command_hash: hash,
            workspace: root.clone(),
            workdir: root,
            exit_code: None,
            success: true,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            sandbox: String::new(),
            signatures: Vec::new(),
            change_set: cs,
            created_at: crate::time::now_ms(),
            client_id: client,
            upper_bytes,
            signal: None,
            timed_out: false,
            timeout_ms: 0,
            action: Some(NAME.to_string()),
            result: Some(result),
        };
        if let Err(e) = changes::save_manifest(dd, &m) {
            changes::discard(dd, job_id);
            return Err(format!("cannot keep the change set: {e:#}"));
        }
        Ok(m)
    })
    .await
    .map_err(|e| Outcome::failed(format!("stage task failed: {e}")))?
    .map_err(Outcome::failed)
}

/// Applies a staged write through the one apply of change sets (`bash::apply_recorded`:
/// `applying` recorded before the first byte, journaled, conflict-checked, `applied` with the
/// job's outcome after), so `undo`, `show`, `history` and start-up recovery know it as they
/// know a command's. Holds on the apply test hooks (`bash::test_knob`).
async fn apply(
    ctx: &JobCtx,
    m: Manifest,
    policy_used: &'static str,
    validation_id: Option<String>,
) -> Result<Outcome, Outcome> {
    let hold = |var: &'static str| {
        let ms = crate::bash::test_knob(ctx.config.test_actions, var);
        async move {
            if let Some(ms) = ms {
                tracing::info!(hook = var, ms, "test hook: holding the job");
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
    };
    hold("BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS").await;
    let stores = ctx.stores.clone();
    let v = validation_id.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::bash::apply_recorded(&stores, &m, policy_used, v.as_deref(), &mut |_| {})
    })
    .await
    .map_err(|e| Outcome::failed(format!("apply task failed: {e}")))?;
    if out.is_ok() {
        hold("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS").await;
    }
    out
}

/// The job's change set as saved when it asked (None: none, or unreadable).
async fn saved(ctx: &JobCtx) -> Option<Manifest> {
    let (dd, job) = (ctx.config.data_dir.clone(), ctx.job_id);
    tokio::task::spawn_blocking(move || changes::load_manifest(&dd, job).ok().flatten())
        .await
        .ok()
        .flatten()
}

/// Long because it is the action's one linear story (the target checked before any token, the
/// generation, the change set staged, then applied under an auto grant or asked; resumed: the
/// approved change set applied), each step a call.
async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let output_path = str_param(params, &["output_path"])
        .unwrap_or_default()
        .to_string();
    let overwrite = params["overwrite"].as_bool().unwrap_or(false);
    let deny = paths::deny_roots(&ctx.config.data_dir);

    // Resumed after a human approved: apply the change set shown, nothing else.
    if let Some(approved) = pending::approved(ctx, NAME).await {
        let a = approved?;
        let target = write::check(&grants, &output_path, &deny).map_err(Outcome::from)?;
        let m = saved(ctx).await;
        let after = format!("file:{}:", pending::sha256(&a.content));
        let same = m.as_ref().is_some_and(|m| {
            m.effect_hash == a.hash
                && m.command_hash == write_hash(NAME, &target.real_path, overwrite, &a.content)
                && m.change_set
                    .changes
                    .iter()
                    .any(|c| c.after.as_deref().is_some_and(|s| s.starts_with(&after)))
        });
        let (Some(m), true) = (m, same && target.real_path.to_string_lossy() == a.target) else {
            pending::forget(ctx).await;
            changes::discard(&ctx.config.data_dir, ctx.job_id);
            return Err(Outcome::denied(format!(
                "{output_path} now resolves to {} (approved: {}), or the change set on disk is not the one approved; nothing was written",
                target.real_path.display(),
                a.target
            )));
        };
        if target.exists && !overwrite {
            pending::forget(ctx).await;
            changes::discard(&ctx.config.data_dir, ctx.job_id);
            return Err(Outcome::failed(format!(
                "{} already exists; nothing was written (pass \"overwrite\": true to replace it)",
                target.real_path.display()
            )));
        }
        let out = apply(ctx, m, "approved", Some(a.validation_id.clone())).await;
        pending::forget(ctx).await;
        return out.map(|mut o| {
            if let Some(r) = o.result.as_mut() {
                r["validation_id"] = json!(a.validation_id);
            }
            o
        });
    }

    // First run: check the target before spending any token.
    let target = write::check(&grants, &output_path, &deny).map_err(Outcome::from)?;
    if target.exists && !overwrite {
        return Err(Outcome::failed(format!(
            "{} already exists; nothing was generated (pass \"overwrite\": true to replace it)",
            target.real_path.display()
        )));
    }
    let prompt = str_param(params, &["prompt", "verified_prompt"]).unwrap_or_default();
    let code_type = str_param(params, &["code_type"]);
    let patterns = match &params["patterns"] {
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .map(|s| format!("- {s}"))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    let file_name = target
        .real_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let kind = code_type.map(|c| format!(" ({c})")).unwrap_or_default();
    let mut user =
        format!("Write the complete content of the file `{file_name}`{kind}.\n\n{prompt}\n");
    if !patterns.is_empty() {
        user.push_str(&format!(
            "\nFollow these patterns and conventions:\n{patterns}\n"
        ));
    }
    let job = JobUsage::default();
    let answer = ask_model(
        ctx,
        &job,
        Prompt {
            system: "You are a precise code generator. Reply with the file's content only: no explanation before or after, no Markdown code fences around it.".into(),
            user,
            temperature: 0.1,
            action: NAME,
        },
    )
    .await?;
    let content = text::strip_code_fences(&answer.text, is_markdown(&target.real_path, code_type));
    let inferred = js_permissions(ctx, &target.real_path, &content).await;

    let protected = if target.auto {
        pending::auto_refusals(ctx, &target, Some(&content)).await
    } else {
        Vec::new()
    };
    let summary = format!(
        "generate_file: write {} ({} bytes, {} lines, {})",
        target.real_path.display(),
        content.len(),
        content.lines().count(),
        if target.exists {
            "REPLACES the existing file"
        } else {
            "new file"
        }
    );
    let mut result = json!({
        "success": true,
        "path": target.real_path,
        "bytes": content.len(),
        "content_sha256": pending::sha256(&content),
        "overwritten": target.exists,
        "llm": llm_info(&answer),
    });
    if let Some(perm) = &inferred {
        result["inferred_permissions"] = perm.clone();
    }
    let auto = target.auto && protected.is_empty();
    if auto {
        result["grant"] = json!(target.grant);
    }
    let m = stage(ctx, &target, &content, overwrite, summary.clone(), result).await?;
    if m.change_set.is_empty() {
        changes::discard(&ctx.config.data_dir, ctx.job_id);
        let mut r = m.result.clone().unwrap_or_default();
        r["policy_used"] = json!("unchanged");
        r["message"] = json!("the file already holds exactly this content; nothing was written");
        return Ok(Outcome::ok(r));
    }
    if auto {
        return apply(ctx, m, "auto_grant", None).await;
    }
    let mut extra = json!({"llm": llm_info(&answer), "overwrite": overwrite});
    if let Some(perm) = inferred {
        extra["inferred_permissions"] = perm;
    }
    Ok(pending::ask(
        ctx,
        Ask {
            action: NAME,
            target: &target.real_path,
            content: &content,
            hash: m.effect_hash.clone(),
            summary,
            preview: m.change_set.diff(),
            permission_set: PermissionSet::Filesystem,
            extra,
            protected,
            change_set: Some(&m),
        },
    )
    .await)
}
