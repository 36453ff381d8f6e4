//! `audit_code {file_path | path, audit_prompt?}`: reads one file under FILE_READ and returns
//! the model's Markdown audit (problems — bugs, security, performance — and recommendations),
//! temperature 0.3. Writes nothing. JS/TS results carry the inferred permission set.

use super::{ask_model, js_permissions, llm_info, str_param};
use crate::actions::readers::read_text;
use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::clients::paths;
use crate::llm::{JobUsage, Prompt};
use crate::permset::PermissionSet;
use serde_json::{json, Value};

pub const NAME: &str = "audit_code";
/// Files larger than this are not sent to the model (bytes).
pub const MAX_AUDIT_BYTES: usize = 256 * 1024;

pub fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "Audits one source file with the LLM (temperature 0.3): a Markdown report of problems (bugs, security, performance, bad practices) and recommendations. Reads the file under FILE_READ; writes nothing. JS/TS results carry the inferred permission set.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "absolute, or relative to the workspace"},
                    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "alias of file_path"},
                    "audit_prompt": {"type": "string", "maxLength": 20000, "description": "what to focus on"}
                },
                "anyOf": [{"required": ["file_path"]}, {"required": ["path"]}],
                "additionalProperties": false
            })
        },
        grants: &[Grant::Llm, Grant::FileRead],
        permission_set: PermissionSet::Readonly,
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

async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let requested = str_param(params, &["file_path", "path"])
        .unwrap_or_default()
        .to_string();
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let req = requested.clone();
    let (real, code) = tokio::task::spawn_blocking(move || {
        let opened = paths::open_for_read(&grants, &req, &deny).map_err(Outcome::from)?;
        let code = read_text(&opened)?;
        Ok::<_, Outcome>((opened.real_path, code))
    })
    .await
    .map_err(|e| Outcome::failed(format!("read task failed: {e}")))??;
    if code.len() > MAX_AUDIT_BYTES {
        return Err(Outcome::failed(format!(
            "{} is {} bytes; audit_code sends at most {MAX_AUDIT_BYTES} bytes to the model",
            real.display(),
            code.len()
        )));
    }
    let focus = str_param(params, &["audit_prompt"])
        .filter(|s| !s.trim().is_empty())
        .unwrap_or(
            "Identify vulnerabilities, bugs, inefficiencies and violations of best practices.",
        );
    let numbered: String = code
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{:>5} | {l}\n", i + 1))
        .collect();
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let job = JobUsage::default();
    let answer = ask_model(
        ctx,
        &job,
        Prompt {
            system: "You are a senior code reviewer. Write a Markdown audit report with the sections: Summary, Problems (each with severity, line numbers, and why), Recommendations. Be concrete; do not rewrite the whole file.".into(),
            user: format!("Focus: {focus}\n\nFile `{name}` (line numbers on the left):\n{numbered}"),
            temperature: 0.3,
            action: NAME,
        },
    )
    .await?;
    let mut result = json!({
        "success": true,
        "file_path": requested,
        "real_path": real,
        "audit": crate::llm::text::without_reasoning(&answer.text).trim(),
        "tokens": answer.usage.total(),
        "message": format!("Code audit completed for {name} (no files modified)"),
        "llm": llm_info(&answer),
    });
    if let Some(perm) = js_permissions(ctx, &real, &code).await {
        result["inferred_permissions"] = perm;
    }
    Ok(Outcome::ok(result))
}
