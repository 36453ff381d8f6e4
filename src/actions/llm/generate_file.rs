//! `generate_file {prompt | verified_prompt, output_path, code_type?, patterns?, overwrite?}`:
//! the model writes one file (temperature 0.1, code fences stripped). The target is checked
//! under FILE_WRITE before any token is spent; an existing file is never replaced unless
//! `overwrite: true` (and then only through an atomic rename). Writing is a side effect: the
//! job asks a human with the path and a preview (or a diff) of the content, unless a FILE_WRITE
//! grant with `auto` covers the target; on approval exactly the approved content is written.

use super::pending::{self, write_hash, Ask};
use super::staged::{self, apply, saved};
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
use std::path::Path;

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

/// The write of `content` at `target` staged as the job's change set (`staged::stage`).
async fn stage(
    ctx: &JobCtx,
    target: &write::Target,
    content: &str,
    overwrite: bool,
    summary: String,
    result: Value,
) -> Result<Manifest, Outcome> {
    let w = staged::Write {
        real_path: target.real_path.clone(),
        grant_root: target.root().to_path_buf(),
        exists: target.exists,
        content: content.as_bytes().to_vec(),
    };
    let hash = write_hash(NAME, &target.real_path, overwrite, content);
    staged::stage(ctx, NAME, vec![w], hash, summary, result, String::new()).await
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
