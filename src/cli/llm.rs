//! `brainloop llm models` (the models the key can use, and whether `[llm] model` is one of them)
//! and `brainloop show JOB --reasoning` (the model's reasoning a job's result kept apart from
//! its answer: `llm.reasoning` of each call, a loop session's per-turn `reasoning`). Reasoning
//! is model text the agent's input shaped: printed through `crate::shown`.

use crate::config::Config;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Context, Result};
use rusqlite::OptionalExtension;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct LlmArgs {
    #[command(subcommand)]
    pub command: LlmCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum LlmCommand {
    /// List the models the API key can use (`GET /v1/models`) and whether `[llm] model` is one.
    Models {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(config: &Config, a: &LlmArgs) -> Result<i32> {
    match &a.command {
        LlmCommand::Models { json } => models(config, *json),
    }
}

fn models(config: &Config, json: bool) -> Result<i32> {
    let llm = crate::llm::Llm::from_env(&config.llm, None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let served = rt
        .block_on(llm.served_models(&cancel))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let model = &config.llm.model;
    let ok = served.iter().any(|m| m == model);
    if json {
        println!(
            "{}",
            serde_json::json!({"base_url": config.llm.base_url, "model": model, "served": served, "model_served": ok})
        );
    } else {
        println!("models served by {}:", shown::line(&config.llm.base_url));
        for m in &served {
            let mark = if m == model { "  ← [llm] model" } else { "" };
            println!("  {}{mark}", shown::line(m));
        }
        if !ok {
            println!(
                "{}",
                shown::line(
                    &crate::llm::LlmError::ModelNotServed {
                        model: model.clone(),
                        base_url: config.llm.base_url.clone(),
                        served: served.clone(),
                    }
                    .to_string()
                )
            );
        }
    }
    Ok(if ok { 0 } else { 1 })
}

/// Every reasoning text of a result, labelled by where it was found.
pub fn reasonings(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (k.as_str(), x) {
                    ("reasoning", Value::String(s)) if !s.trim().is_empty() => {
                        out.push((here, s.clone()));
                    }
                    ("reasoning", Value::Array(turns)) => {
                        for t in turns {
                            if let (Some(n), Some(s)) = (t["turn"].as_u64(), t["text"].as_str()) {
                                out.push((format!("turn {n}"), s.to_string()));
                            }
                        }
                    }
                    _ => reasonings(x, &here, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                reasonings(x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `brainloop show JOB --reasoning`.
pub fn show_reasoning(config: &Config, id: &str) -> Result<i32> {
    let Ok(job_id) = id.parse::<i64>() else {
        bail!("--reasoning takes a job id, not {}", shown::line(id));
    };
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let row: Option<(String, Option<String>)> = out
        .query_row(
            "SELECT status, result FROM results WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((status, result)) = row else {
        bail!("no result for job {job_id} (see `brainloop history`)");
    };
    let v: Value = result
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or(Value::Null);
    let mut found = Vec::new();
    reasonings(&v, "", &mut found);
    println!("job {job_id}  [{}]", shown::line(&status));
    if found.is_empty() {
        println!("no reasoning recorded (the model sent none, or reasoning_format = hidden/none)");
        return Ok(0);
    }
    for (label, text) in found {
        println!("--- {} ---", shown::line(&label));
        println!("{}", shown::block(&text));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_is_found_in_calls_and_in_turns() {
        let v = serde_json::json!({"llm": {"reasoning": "plan A"}, "reasoning": [{"turn": 2, "text": "use ls"}],
            "blocks": [{"llm": {"reasoning": "block"}}, {"llm": {"reasoning": null}}]});
        let mut out = Vec::new();
        reasonings(&v, "", &mut out);
        let labels: Vec<&str> = out.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            vec!["blocks[0].llm.reasoning", "llm.reasoning", "turn 2"]
        );
    }
}
