//! What block mode asks the model, and the checks before it does: a block's target under the
//! client's grants (FILE_WRITE for a file, FILE_READ on the database for sql, as generate_file
//! and generate_sql check them — before any token is spent), the prompts (temperature 0.1),
//! one generation with code fences stripped, and SQLite's read-only verdict on sql code.

use crate::actions::llm::{ask_model, ask_structured, is_markdown, judge, schema_text};
use crate::actions::{JobCtx, Outcome};
use crate::clients::{paths, write, ClientGrants};
use crate::llm::{text, Answer, JobUsage, JsonSchema, Prompt};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

/// What a block's target resolved to.
pub enum Checked {
    /// A file under FILE_WRITE (the commit checks it again).
    File,
    /// A SQLite database under FILE_READ, with its schema for the prompt.
    Sql { schema: String },
}

pub fn grants(ctx: &JobCtx) -> Result<Arc<ClientGrants>, Outcome> {
    ctx.grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Outcome> + Send + 'static,
) -> Result<T, Outcome> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Outcome::failed(format!("blocking task failed: {e}")))?
}

/// Checks a block's target. `fresh`: a new file must not exist unless `overwrite` (propose);
/// refine only needs the grant to still hold.
pub async fn check_target(
    ctx: &JobCtx,
    kind: &str,
    target: &str,
    overwrite: bool,
    fresh: bool,
) -> Result<Checked, Outcome> {
    let grants = grants(ctx)?;
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let target = target.to_string();
    if super::state::is_sql(kind) {
        return blocking(move || {
            let opened = paths::open_for_read(&grants, &target, &deny).map_err(Outcome::from)?;
            let schema = schema_text(&opened)
                .map_err(|e| Outcome::failed(format!("{}: {e:#}", opened.real_path.display())))?;
            Ok(Checked::Sql { schema })
        })
        .await;
    }
    let t = write::check(&grants, &target, &deny).map_err(Outcome::from)?;
    if fresh && t.exists && !overwrite {
        return Err(Outcome::failed(format!(
            "{} already exists; nothing was generated (give the block \"overwrite\": true to replace it at commit)",
            t.real_path.display()
        )));
    }
    Ok(Checked::File)
}

/// SQLite's verdict on sql code (`statements`, `writes`), or the reason it is refused.
pub async fn sql_verdict(ctx: &JobCtx, target: &str, sql: &str) -> Value {
    let Ok(grants) = grants(ctx) else {
        return json!({"error": "grants not loaded"});
    };
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let (target, sql) = (target.to_string(), sql.to_string());
    let r = blocking(move || {
        let opened = paths::open_for_read(&grants, &target, &deny).map_err(Outcome::from)?;
        Ok(match judge(&opened, &sql) {
            Ok(v) => json!({"statements": v.statements, "writes": v.writes}),
            Err(e) => json!({"error": format!("{e:#}")}),
        })
    })
    .await;
    r.unwrap_or_else(|o| json!({"error": o.error.unwrap_or_default()}))
}

const SQL_RULES: &str = "Reply with SQLite SQL statements only, separated by semicolons: no explanation, no Markdown code fences. Never use ATTACH, DETACH, PRAGMA, BEGIN, COMMIT or SAVEPOINT.";
const CODE_RULES: &str = "Reply with the block's complete code only: no explanation before or after, no Markdown code fences around it.";

fn file_name(target: &str) -> String {
    Path::new(target)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| target.to_string())
}

fn context(kind: &str, target: &str, checked: &Checked, description: &str) -> String {
    match checked {
        Checked::Sql { schema } => {
            format!("Database schema:\n{schema}\n\nWhat the block must do:\n{description}\n")
        }
        Checked::File => format!(
            "Block type: {kind}\nTarget file: `{}`\n\nWhat the block must do:\n{description}\n",
            file_name(target)
        ),
    }
}

/// The first version of a block.
pub fn propose_prompt(kind: &str, target: &str, checked: &Checked, description: &str) -> Prompt {
    let rules = match checked {
        Checked::Sql { .. } => SQL_RULES,
        Checked::File => CODE_RULES,
    };
    Prompt {
        system: format!("You write one block of a larger change, precisely as described. {rules}"),
        user: context(kind, target, checked, description),
        temperature: 0.1,
        action: super::super::NAME,
    }
}

/// An improvement of the block's current code following feedback.
pub fn refine_prompt(
    kind: &str,
    target: &str,
    checked: &Checked,
    description: &str,
    iteration: u32,
    code: &str,
    feedback: &str,
) -> Prompt {
    let rules = match checked {
        Checked::Sql { .. } => SQL_RULES,
        Checked::File => CODE_RULES,
    };
    Prompt {
        system: format!(
            "You improve one block of code by applying a reviewer's feedback to its current version; keep what the feedback does not ask to change. {rules}"
        ),
        user: format!(
            "{}\nCurrent code (iteration {iteration}):\n{code}\n\nFeedback to apply:\n{feedback}\n",
            context(kind, target, checked, description)
        ),
        temperature: 0.1,
        action: super::super::NAME,
    }
}

/// The shape of a structured generation: the block's code in `code`.
fn code_schema() -> JsonSchema {
    JsonSchema {
        name: "code_block",
        schema: serde_json::json!({
            "type": "object",
            "required": ["code"],
            "additionalProperties": false,
            "properties": {"code": {"type": "string", "minLength": 1}}
        }),
    }
}

/// One generation (asked as [`code_schema`] where the model takes structured outputs): the
/// model's answer with code fences stripped (kept inside Markdown files).
pub async fn generate(
    ctx: &JobCtx,
    job: &JobUsage,
    prompt: Prompt,
    kind: &str,
    target: &str,
) -> Result<(String, Answer), Outcome> {
    let markdown = !super::state::is_sql(kind) && is_markdown(Path::new(target), Some(kind));
    let (code, answer) = if ctx.llm.structured() {
        let mut prompt = prompt;
        prompt.system.push_str(
            " Reply with one JSON object whose \"code\" field holds the block's complete code (no explanation).",
        );
        let (v, answer) = ask_structured(ctx, job, prompt, &code_schema()).await?;
        let code = v
            .as_ref()
            .and_then(|v| v["code"].as_str())
            .unwrap_or_default()
            .to_string();
        (text::strip_code_fences(&code, markdown), answer)
    } else {
        let answer = ask_model(ctx, job, prompt).await?;
        (text::strip_code_fences(&answer.text, markdown), answer)
    };
    let code = if super::state::is_sql(kind) {
        code.trim().to_string()
    } else {
        code
    };
    if code.trim().is_empty() {
        return Err(Outcome::failed("the model returned no code"));
    }
    Ok((code, answer))
}
