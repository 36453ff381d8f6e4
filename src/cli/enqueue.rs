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
    /// Refuse the job (exit 6, naming the first one's id) while a job of the same client with
    /// this key is queued, running or waiting for a human; the worker refuses it too.
    #[arg(long, value_name = "KEY")]
    pub unique_key: Option<String>,
    /// The job's retry policy (JSON), e.g. '{"max_attempts": 3, "backoff_ms": 1000}'; fields:
    /// max_attempts, backoff_ms, max_backoff_ms, jitter (0..1), on (failed|timeout|exit_code|error).
    #[arg(long, value_name = "JSON")]
    pub retry: Option<String>,
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
    let retry = args
        .retry
        .as_deref()
        .map(|r| crate::retry::Policy::parse(r).map_err(|e| anyhow::anyhow!("--retry: {e}")))
        .transpose()?
        .map(|p| serde_json::to_string(&p))
        .transpose()?;
    if args.unique_key.as_deref() == Some("") {
        bail!("--unique-key is empty: give the key that must not run twice at once");
    }
    let mut conn = db::open(&config.data_dir, DbKind::Input)?;
    let ctl = input::JobControl {
        unique_key: args.unique_key.as_deref(),
        retry: retry.as_deref(),
    };
    let out = db::open_read_only(&config.data_dir, DbKind::Output).ok();
    let open_status = |id: i64, created: i64| held_status(out.as_ref(), id, created);
    let id = match input::insert_unique(
        &mut conn,
        &args.action,
        &params.to_string(),
        &args.client,
        args.priority,
        not_before,
        &ctl,
        &open_status,
    )? {
        input::Inserted::New(id) => id,
        input::Inserted::Held { by, status } => {
            eprintln!(
                "brainloop: refused: job {by} ({status}) of client {} holds unique_key {}; nothing was enqueued (wait for job {by} to end, or `brainloop cancel {by}`)",
                crate::shown::line(&args.client),
                crate::shown::line(args.unique_key.as_deref().unwrap_or_default()),
            );
            return Ok(UNIQUE_HELD);
        }
    };
    println!("{id}");
    if !args.wait {
        return Ok(0);
    }
    wait_for(config, id, Duration::from_secs(args.timeout))
}

/// Exit code of `enqueue --unique-key` when an open job holds the key.
pub const UNIQUE_HELD: i32 = 6;

/// Whether job `id` (created at `created`) still holds its unique key, as a producer can tell
/// from output.db: a non-final results row; no row yet for a job created in the last day (not
/// claimed or not started yet). Unreadable output.db: held (refusing is the safe side).
fn held_status(out: Option<&rusqlite::Connection>, id: i64, created: i64) -> Option<String> {
    let Some(out) = out else {
        return Some("status unknown: output.db unreadable".into());
    };
    let row: Result<Option<String>, _> = out
        .query_row("SELECT status FROM results WHERE job_id = ?1", [id], |r| {
            r.get(0)
        })
        .optional();
    match row {
        Ok(Some(st)) => output::JobStatus::parse(&st)
            .is_none_or(|s| !s.is_final())
            .then_some(st),
        Ok(None) if crate::time::now_ms() - created < 86_400_000 => Some("queued".into()),
        Ok(None) => None,
        Err(_) => Some("status unknown: output.db unreadable".into()),
    }
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
