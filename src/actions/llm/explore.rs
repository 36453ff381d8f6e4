//! `explore {topic | description, type?, sources?}` (temperature 0.6): the model looks for
//! patterns in the given sources — read through FILE_READ like the readers, line-numbered so it
//! can cite them — or, without sources, explores the topic. The answer always has the fixed
//! shape `{patterns: [{name, evidence: [{path, line}], summary}], summary}`: evidence citing a
//! path that is not a source or a line that does not exist is dropped; a reply without JSON
//! becomes `{patterns: [], summary, source_type}` (seed 001's digest fallback).

use super::{ask_structured, llm_info, str_param};
use crate::actions::readers::{read_text, sqlite};
use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::clients::paths;
use crate::llm::{text, JobUsage, JsonSchema, Prompt};
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::collections::HashMap;

pub const NAME: &str = "explore";
/// Bytes of one source sent to the model (the rest is cut).
const MAX_SOURCE_BYTES: usize = 64 * 1024;
/// Bytes of all sources together.
const MAX_TOTAL_BYTES: usize = 256 * 1024;

pub fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "Explores a topic with the LLM (temperature 0.6), optionally over source files read under FILE_READ, and returns {patterns: [{name, evidence: [{path, line}], summary}], summary}.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "topic": {"type": "string", "minLength": 1, "maxLength": 20000},
                    "description": {"type": "string", "minLength": 1, "maxLength": 20000, "description": "alias of topic (seed 001)"},
                    "type": {"type": "string", "maxLength": 100, "description": "kind of exploration (e.g. code, data, architecture)"},
                    "sources": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 4096}, "maxItems": 20, "description": "files to explore (absolute, or relative to the workspace)"}
                },
                "anyOf": [{"required": ["topic"]}, {"required": ["description"]}],
                "additionalProperties": false
            })
        },
        grants: &[Grant::Llm],
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

/// One source as the model sees it: its name, its text, its line count.
struct Source {
    path: String,
    text: String,
    lines: usize,
}

fn load(ctx: &JobCtx, sources: Vec<String>) -> Result<Vec<Source>, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let mut out = Vec::new();
    let mut total = 0;
    for s in sources {
        let opened = paths::open_for_read(&grants, &s, &deny).map_err(Outcome::from)?;
        let ext = opened
            .real_path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        let body = if matches!(ext.as_deref(), Some("db" | "sqlite" | "sqlite3")) {
            let d =
                sqlite::digest(&opened, 3).map_err(|e| Outcome::failed(format!("{s}: {e:#}")))?;
            serde_json::to_string_pretty(&d).unwrap_or_default()
        } else {
            read_text(&opened)?
        };
        let mut cut = body
            .len()
            .min(MAX_SOURCE_BYTES)
            .min(MAX_TOTAL_BYTES.saturating_sub(total));
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        let body = &body[..cut];
        total += body.len();
        let numbered: String = body
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:>5} | {l}\n", i + 1))
            .collect();
        out.push(Source {
            path: s,
            lines: body.lines().count(),
            text: numbered,
        });
    }
    Ok(out)
}

/// The shape of an exploration (asked with `response_format` where the model takes it).
fn schema() -> JsonSchema {
    JsonSchema {
        name: "exploration",
        schema: json!({
            "type": "object",
            "required": ["patterns", "summary"],
            "additionalProperties": false,
            "properties": {
                "patterns": {"type": "array", "maxItems": 100, "items": {
                    "type": "object",
                    "required": ["name", "evidence", "summary"],
                    "additionalProperties": false,
                    "properties": {
                        "name": {"type": "string", "maxLength": 500},
                        "evidence": {"type": "array", "maxItems": 100, "items": {
                            "type": "object",
                            "required": ["path", "line"],
                            "additionalProperties": false,
                            "properties": {
                                "path": {"type": "string", "maxLength": 4096},
                                "line": {"type": "integer", "minimum": 1}
                            }
                        }},
                        "summary": {"type": "string", "maxLength": 20000}
                    }
                }},
                "summary": {"type": "string", "maxLength": 20000}
            }
        }),
    }
}

/// Brings the model's reply to the fixed shape.
fn normalise(reply: &str, kind: &str, sources: &[Source]) -> Value {
    let Some(v) = text::extract_json(reply) else {
        let mut d = text::digest_or_fallback(reply, kind);
        d["patterns"] = json!([]);
        return d;
    };
    normalise_value(&v, sources)
}

/// Keeps the patterns with a name and the evidence that cites a line of a source given.
fn normalise_value(v: &Value, sources: &[Source]) -> Value {
    let lines: HashMap<&str, usize> = sources.iter().map(|s| (s.path.as_str(), s.lines)).collect();
    let patterns: Vec<Value> = v["patterns"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    let name = p["name"].as_str()?.trim();
                    if name.is_empty() {
                        return None;
                    }
                    let evidence: Vec<Value> = p["evidence"]
                        .as_array()
                        .map(|e| {
                            e.iter()
                                .filter_map(|ev| {
                                    let path = ev["path"].as_str()?;
                                    let line = ev["line"].as_u64()?;
                                    let max = *lines.get(path)?;
                                    (line >= 1 && line as usize <= max)
                                        .then(|| json!({"path": path, "line": line}))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(json!({
                        "name": name,
                        "evidence": evidence,
                        "summary": p["summary"].as_str().unwrap_or_default(),
                    }))
                })
                .collect()
        })
        .unwrap_or_default();
    let summary = match &v["summary"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    json!({"patterns": patterns, "summary": summary})
}

async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let topic = str_param(params, &["topic", "description"])
        .unwrap_or_default()
        .to_string();
    let kind = str_param(params, &["type"])
        .unwrap_or("exploration")
        .to_string();
    let wanted: Vec<String> = params["sources"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let sources = if wanted.is_empty() {
        Vec::new()
    } else {
        let c = ctx.clone();
        tokio::task::spawn_blocking(move || load(&c, wanted))
            .await
            .map_err(|e| Outcome::failed(format!("read task failed: {e}")))??
    };
    let mut user = format!("Topic ({kind}): {topic}\n");
    for s in &sources {
        user.push_str(&format!("\n=== source: {} ===\n{}", s.path, s.text));
    }
    user.push_str(
        "\nReply with one JSON object only: {\"patterns\": [{\"name\": string, \"evidence\": [{\"path\": source path as given, \"line\": number}], \"summary\": string}], \"summary\": string}.",
    );
    let job = JobUsage::default();
    let prompt = Prompt {
        system: "You explore code and data creatively but rigorously: name the patterns you see, cite evidence by source path and line, and summarise.".into(),
        user,
        temperature: 0.6,
        action: NAME,
    };
    let (value, answer) = ask_structured(ctx, &job, prompt, &schema()).await?;
    let mut result = match &value {
        Some(v) => normalise_value(v, &sources),
        None => normalise(&answer.text, &kind, &sources),
    };
    result["success"] = json!(true);
    result["topic"] = json!(topic);
    result["sources"] = json!(sources.iter().map(|s| &s.path).collect::<Vec<_>>());
    result["llm"] = llm_info(&answer);
    Ok(Outcome::ok(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_brought_to_the_fixed_shape() {
        let src = vec![Source {
            path: "a.rs".into(),
            text: String::new(),
            lines: 10,
        }];
        let v = normalise(
            r#"```json
{"patterns": [{"name": "builder", "evidence": [{"path": "a.rs", "line": 3}, {"path": "b.rs", "line": 1}, {"path": "a.rs", "line": 99}], "summary": "uses builders"}, {"evidence": []}], "summary": "ok"}
```"#,
            "code",
            &src,
        );
        assert_eq!(
            v,
            json!({"patterns": [{"name": "builder", "evidence": [{"path": "a.rs", "line": 3}], "summary": "uses builders"}], "summary": "ok"})
        );
        let v = normalise("Nothing structured here.", "code", &src);
        assert_eq!(
            v,
            json!({"summary": "Nothing structured here.", "source_type": "code", "patterns": []})
        );
    }
}
