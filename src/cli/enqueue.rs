//! `brainloop enqueue ACTION`: validates the action and its params against the registry (so a
//! typo fails here, not later in `results`), inserts the job with synchronous=FULL and prints
//! its id. `--wait` then waits for the final result and prints it as JSON; it never blocks on
//! what cannot come: with no worker holding the data dir it fails at once (nothing queued), and
//! a job that waits for a human returns at once with its validation (id, why, the `show` /
//! `approve` / `deny` lines) and [`EXIT_WAITS_FOR_HUMAN`], unless `--wait-for-human`.
//! Owns the exit codes of `enqueue --wait`.

use crate::actions::Registry;
use crate::ask::validations;
use crate::config::Config;
use crate::db::{self, input, output, DbKind};
use crate::shown;
use anyhow::{bail, Context, Result};
use rusqlite::OptionalExtension;
use serde_json::{json, Value};
use std::io::Read;
use std::time::{Duration, Instant};

/// `enqueue --wait`: no worker holds the data dir (as `brainloop status`'s "not running").
pub const EXIT_NO_WORKER: i32 = 3;
/// `enqueue --wait`: the job waits for a human decision (its validation is printed).
pub const EXIT_WAITS_FOR_HUMAN: i32 = 5;

#[derive(clap::Args, Debug)]
pub struct EnqueueArgs {
    /// The action to run (see `list_actions`).
    pub action: String,
    /// Params as a JSON object; `@FILE` reads them from FILE, `-` from standard input.
    #[arg(
        long,
        default_value = "{}",
        value_name = "JSON|@FILE|-",
        allow_hyphen_values = true
    )]
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
    /// Wait for the job's final result and print it (exit 0 only if it succeeded, 1 for any
    /// other result). Fails at once (exit 3, nothing queued) when no worker holds the data dir;
    /// returns at once (exit 5) with the validation when the job waits for a human.
    #[arg(long)]
    pub wait: bool,
    /// Like --wait, but keep waiting while the job waits for a human (until it is decided,
    /// expires, or --timeout).
    #[arg(long)]
    pub wait_for_human: bool,
    /// With --wait: give up after this many seconds (the job stays queued).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

pub fn run(config: &Config, args: &EnqueueArgs) -> Result<i32> {
    let registry = Registry::new(config)?;
    let Some(action) = registry.get(&args.action) else {
        bail!("{}", registry.unknown(&args.action));
    };
    let text = params_text(&args.params)?;
    let params: Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "--params is not valid JSON: {}",
            crate::quote::prefix(&text, crate::quote::VALUE_MAX)
        )
    })?;
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
    let wait = args.wait || args.wait_for_human;
    if wait && crate::lockfile::held(&config.data_dir) == Some(false) {
        eprintln!("brainloop: {} (nothing was queued)", no_worker(config));
        return Ok(EXIT_NO_WORKER);
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
    if !wait {
        return Ok(0);
    }
    wait_for(
        config,
        id,
        Duration::from_secs(args.timeout),
        args.wait_for_human,
    )
}

/// The most `--params @FILE` / `--params -` reads (a FIFO or `/dev/zero` must not fill memory).
const PARAMS_MAX: u64 = 16 << 20;

/// The text of `--params`: inline JSON, `@FILE`, or `-` (standard input), at most [`PARAMS_MAX`].
fn params_text(arg: &str) -> Result<String> {
    let (what, reader): (String, Box<dyn Read>) = if arg == "-" {
        (
            "standard input (`--params -`)".into(),
            Box::new(std::io::stdin()),
        )
    } else if let Some(file) = arg.strip_prefix('@') {
        let f = std::fs::File::open(file).with_context(|| {
            format!("cannot read --params from file {file:?} (`--params @FILE`)")
        })?;
        (format!("file {file:?} (`--params @FILE`)"), Box::new(f))
    } else {
        return Ok(arg.to_string());
    };
    let mut s = String::new();
    reader
        .take(PARAMS_MAX + 1)
        .read_to_string(&mut s)
        .with_context(|| format!("cannot read --params from {what} (a JSON object, UTF-8)"))?;
    if s.len() as u64 > PARAMS_MAX {
        bail!(
            "--params from {what} is over {} MiB, the most `enqueue` reads",
            PARAMS_MAX >> 20
        );
    }
    Ok(s)
}

/// Why `--wait` does not wait: no worker holds the data dir.
fn no_worker(config: &Config) -> String {
    let shown = config.data_dir.display();
    let dir = crate::egress::shell_word(&shown.to_string());
    format!(
        "no brainloop worker holds the data dir {shown}: start one with `brainloop run --data-dir {dir}` \
         (`brainloop status --data-dir {dir}` says more), or enqueue without --wait to queue the job for later"
    )
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

/// Waits for job `id`'s final result; see the module doc for when it returns early.
fn wait_for(config: &Config, id: i64, timeout: Duration, for_human: bool) -> Result<i32> {
    let t0 = Instant::now();
    let mut told = false;
    let mut lock_checked = Instant::now();
    loop {
        if let Some(code) = final_result(config, id)? {
            return Ok(code);
        }
        if !told {
            if let Some(pending) = pending(config, id)? {
                eprint!("{}", pending.text);
                if !for_human {
                    println!("{}", shown::json(&pending.json)?);
                    return Ok(EXIT_WAITS_FOR_HUMAN);
                }
                eprintln!("still waiting (--wait-for-human): the result comes once it is decided");
                told = true;
            }
        }
        if lock_checked.elapsed() >= Duration::from_secs(1) {
            lock_checked = Instant::now();
            if crate::lockfile::held(&config.data_dir) == Some(false) {
                // The worker may have stopped right after writing the result.
                if let Some(code) = final_result(config, id)? {
                    return Ok(code);
                }
                eprintln!(
                    "brainloop: stopped waiting: {}; job {id} stays queued and runs once a worker starts",
                    no_worker(config)
                );
                return Ok(EXIT_NO_WORKER);
            }
        }
        if t0.elapsed() > timeout {
            bail!(
                "job {id} has no final result after {} s (--timeout); it stays queued: `brainloop status` shows what the worker does, \
                 `brainloop enqueue get_result --params '{{\"job_id\": {id}}}' --wait` reads its result later",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Prints job `id`'s final result when there is one; returns the exit code.
fn final_result(config: &Config, id: i64) -> Result<Option<i32>> {
    let Ok(conn) = db::open_read_only(&config.data_dir, DbKind::Output) else {
        return Ok(None);
    };
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
    let Some((status, result, error)) = row else {
        return Ok(None);
    };
    let result: Value = result
        .and_then(|r| serde_json::from_str(&r).ok())
        .unwrap_or(Value::Null);
    let out = json!({"job_id": id, "status": status, "result": result, "error": error});
    println!("{}", shown::json(&out)?);
    Ok(Some(if status == "succeeded" { 0 } else { 1 }))
}

/// A job waiting for a human, as `--wait` shows it: JSON for stdout, text for a person.
struct Pending {
    json: Value,
    text: String,
}

/// Job `id`'s pending validation, when it waits for one.
fn pending(config: &Config, id: i64) -> Result<Option<Pending>> {
    let Ok(conn) = db::open_read_only(&config.data_dir, DbKind::Output) else {
        return Ok(None);
    };
    let result: Option<Option<String>> = conn
        .query_row(
            "SELECT result FROM results WHERE job_id = ?1 AND status = 'pending_validation'",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(result) = result else {
        return Ok(None);
    };
    let result: Value = result
        .and_then(|r| serde_json::from_str(&r).ok())
        .unwrap_or(Value::Null);
    let vid = result["validation_id"].as_str().unwrap_or("?").to_string();
    let v = validations::get(&conn, &vid)?;
    let reasons: Vec<String> = v
        .as_ref()
        .and_then(|v| v.reasons.as_deref())
        .and_then(|r| serde_json::from_str(r).ok())
        .or_else(|| serde_json::from_value(result["reasons"].clone()).ok())
        .unwrap_or_default();
    let command = v
        .as_ref()
        .and_then(|v| v.command.clone())
        .or_else(|| result["command"].as_str().map(str::to_string));
    // The lines work as typed from anywhere: the data dir is named unless it is the default.
    let dd = if config.data_dir == std::path::Path::new(crate::config::DEFAULT_DATA_DIR) {
        String::new()
    } else {
        format!(
            " --data-dir {}",
            crate::egress::shell_word(&config.data_dir.display().to_string())
        )
    };
    let (show, approve, deny) = (
        format!("brainloop show {vid}{dd}"),
        format!("brainloop approve {vid}{dd}"),
        format!("brainloop deny {vid}{dd}"),
    );
    let mut text = format!("job {id} waits for a human: validation {vid}\n");
    if let Some(c) = &command {
        text += &format!(
            "  command:  {}\n",
            shown::block(c).replace('\n', "\n            ")
        );
    }
    for r in &reasons {
        text += &format!("  - {}\n", shown::item(r, "    "));
    }
    if let Some(m) = v
        .as_ref()
        .and_then(|v| super::security::bound_change_set(config, v))
    {
        text += &format!("  --- changes ({})\n", shown::line(&m.change_set.summary()));
        text += &crate::bash::changes::shown_diff_lines(
            &m.change_set,
            "    ",
            super::security::LISTED_DIFF_LINES,
            &vid,
        );
    }
    text += &format!("  see it:   {show}\n  approve:  {approve}\n  deny:     {deny}\n");
    text += &format!(
        "  then:     brainloop enqueue get_result --params '{{\"job_id\": {id}}}' --wait{dd}\n"
    );
    Ok(Some(Pending {
        json: json!({
            "job_id": id,
            "status": "pending_validation",
            "validation_id": vid,
            "command": command,
            "reasons": reasons,
            "show": show,
            "approve": approve,
            "deny": deny,
            "result": result,
        }),
        text,
    }))
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
