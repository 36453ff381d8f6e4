//! `brainloop enqueue ACTION`: validates the action and its params against the registry (so a
//! typo fails here, not later in `results`), inserts the job with synchronous=FULL and prints
//! its id. `--wait` then waits for the final result and prints it as JSON.

use crate::actions::Registry;
use crate::config::Config;
use crate::db::{self, input, output, DbKind};
use anyhow::{bail, Context, Result};
use rusqlite::OptionalExtension;
use serde_json::Value;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct EnqueueArgs {
    /// The action to run (see `list_actions`).
    pub action: String,
    /// Params as a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub params: String,
    /// Client the job acts for (its grants apply).
    #[arg(long, default_value = "local", value_name = "C")]
    pub client: String,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i64,
    /// Do not start before this time: unix milliseconds, or a delay like +30s, +5m, +2h, +500ms.
    #[arg(long, value_name = "WHEN")]
    pub not_before: Option<String>,
    /// Wait for the job's final result and print it (exit 0 only if it succeeded).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

pub fn run(config: &Config, args: &EnqueueArgs) -> Result<i32> {
    let registry = Registry::new(config)?;
    let Some(action) = registry.get(&args.action) else {
        bail!("{}", registry.unknown(&args.action));
    };
    let params: Value = serde_json::from_str(&args.params)
        .with_context(|| format!("--params is not valid JSON: {}", args.params))?;
    if !params.is_object() {
        bail!("--params must be a JSON object, e.g. '{{\"key\": \"value\"}}'");
    }
    registry
        .check_params(action, &params)
        .map_err(anyhow::Error::msg)?;
    let not_before = args.not_before.as_deref().map(parse_when).transpose()?;
    let path = DbKind::Input.path(&config.data_dir);
    if !path.exists() {
        bail!(
            "{} does not exist: run `brainloop init` or start `brainloop run` first (data dir {})",
            path.display(),
            config.data_dir.display()
        );
    }
    db::identity::check_input_for_producer(&config.data_dir)?;
    let mut conn = db::open(&config.data_dir, DbKind::Input)?;
    let id = input::insert_job(
        &mut conn,
        &args.action,
        &params.to_string(),
        &args.client,
        args.priority,
        not_before,
    )?;
    println!("{id}");
    if !args.wait {
        return Ok(0);
    }
    wait_for(config, id, Duration::from_secs(args.timeout))
}

/// `+30s` / `+5m` / `+2h` / `+500ms` relative to now, or absolute unix ms.
fn parse_when(s: &str) -> Result<i64> {
    let s = s.trim();
    if let Some(rel) = s.strip_prefix('+') {
        let (num, unit) =
            rel.split_at(rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len()));
        let n: i64 = num.parse().with_context(|| format!("bad delay {s:?}"))?;
        let ms = match unit {
            "ms" => n,
            "" | "s" => n * 1000,
            "m" => n * 60_000,
            "h" => n * 3_600_000,
            _ => bail!("bad delay unit in {s:?}: use ms, s, m or h"),
        };
        return Ok(crate::time::now_ms() + ms);
    }
    s.parse().with_context(|| {
        format!("--not-before {s:?}: expected unix milliseconds or +30s / +5m / +2h")
    })
}

fn wait_for(config: &Config, id: i64, timeout: Duration) -> Result<i32> {
    let t0 = Instant::now();
    let mut told = false;
    loop {
        if let Ok(conn) = db::open_read_only(&config.data_dir, DbKind::Output) {
            let row: Option<(String, Option<String>, Option<String>)> = conn
                .query_row(
                    &format!(
                        "SELECT status, result, error FROM results WHERE job_id = ?1 AND status IN {}",
                        output::FINAL_SQL
                    ),
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            if let Some((status, result, error)) = row {
                let result: Value = result
                    .and_then(|r| serde_json::from_str(&r).ok())
                    .unwrap_or(Value::Null);
                let out = serde_json::json!({"job_id": id, "status": status, "result": result, "error": error});
                println!("{}", crate::shown::json(&out)?);
                return Ok(if status == "succeeded" { 0 } else { 1 });
            }
        }
        if !told {
            if let Ok(conn) = db::open_read_only(&config.data_dir, DbKind::Output) {
                let pending: Option<String> = conn
                    .query_row(
                        "SELECT result FROM results WHERE job_id = ?1 AND status = 'pending_validation'",
                        [id],
                        |r| r.get(0),
                    )
                    .optional()?
                    .flatten();
                if let Some(r) = pending {
                    let v: Value = serde_json::from_str(&r).unwrap_or(Value::Null);
                    eprintln!(
                        "job {id} waits for a human: brainloop approve {} (or deny); still waiting",
                        v["validation_id"].as_str().unwrap_or("?")
                    );
                    told = true;
                }
            }
        }
        if t0.elapsed() > timeout {
            bail!(
                "job {id} has no final result after {} s (is `brainloop run` running?)",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse() {
        let now = crate::time::now_ms();
        assert!((parse_when("+2s").unwrap() - now - 2000).abs() < 1000);
        assert!((parse_when("+500ms").unwrap() - now - 500).abs() < 1000);
        assert_eq!(parse_when("1700000000000").unwrap(), 1_700_000_000_000);
        assert!(parse_when("+3d").is_err());
        assert!(parse_when("soon").is_err());
    }
}
