//! `brainloop enqueue ACTION`: validates the action and its params against the registry (so a
//! typo fails here, not later in `results`), inserts the job with synchronous=FULL and prints
//! its id. `--wait` then waits for the final result and prints it as `cli::result` does (the
//! result JSON alone on stdout, the id on stderr; exit code by status); it never blocks on
//! what cannot come: with no worker holding the data dir it fails at once ([`EXIT_NO_WORKER`],
//! nothing queued), and a job that waits for a human returns at once with its validation (id,
//! why, the `show` / `approve` / `deny` lines) and exit 5, unless `--wait-for-human`;
//! `--timeout` ends it with exit 4.

use super::result;
use crate::actions::Registry;
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
    /// Do not start before this time: unix milliseconds, or a delay like +30s, +5m, +2h, +3d, +500ms.
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
    /// Wait for the job's final result and print its result JSON alone on stdout (the job id
    /// and any error go to stderr). Exit 0 succeeded; 1 failed, denied, blocked,
    /// duplicate_warning, expired, cancelled or interrupted; 3 no worker holds the data dir
    /// (at once, nothing queued); 4 --timeout passed (still queued or running); 5 the job waits
    /// for a human (at once, with its validation and the lines to type on stderr).
    #[arg(long)]
    pub wait: bool,
    /// Like --wait, but keep waiting while the job waits for a human (until it is decided,
    /// expires, or --timeout).
    #[arg(long)]
    pub wait_for_human: bool,
    /// With --wait: give up after this many seconds (exit 4; the job stays queued).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// One JSON object on stdout: without --wait `{"job_id": N}`; with it the job id, status,
    /// result and error together (a pending job's validation and the lines to type too).
    #[arg(long)]
    pub json: bool,
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
    match (wait, args.json) {
        (false, false) => println!("{id}"),
        (false, true) => println!("{}", shown::json(&json!({"job_id": id}))?),
        // stdout is the result's alone (`| jq`); a person still sees which job it is.
        (true, _) => eprintln!("job {id} queued"),
    }
    if !wait {
        return Ok(0);
    }
    wait_for(config, id, args)
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

/// `+30s` / `+5m` / `+2h` / `+500ms` relative to now (`time::parse_span_ms`), or absolute unix ms.
fn parse_when(s: &str) -> Result<i64> {
    let s = s.trim();
    if let Some(rel) = s.strip_prefix('+') {
        let ms = crate::time::parse_span_ms(rel).map_err(|e| anyhow::anyhow!("bad delay: {e}"))?;
        return Ok(crate::time::now_ms() + ms);
    }
    s.parse().with_context(|| {
        format!("--not-before {s:?}: expected unix milliseconds or +30s / +5m / +2h")
    })
}

/// Waits for job `id`'s final result; see the module doc for when it returns early.
fn wait_for(config: &Config, id: i64, args: &EnqueueArgs) -> Result<i32> {
    let (timeout, for_human) = (Duration::from_secs(args.timeout), args.wait_for_human);
    let t0 = Instant::now();
    let mut told = false;
    let mut lock_checked = Instant::now();
    loop {
        if let Some(code) = settled(config, id, args.json, for_human, &mut told)? {
            return Ok(code);
        }
        if lock_checked.elapsed() >= Duration::from_secs(1) {
            lock_checked = Instant::now();
            if crate::lockfile::held(&config.data_dir) == Some(false) {
                // The worker may have stopped right after writing the result.
                if let Some(code) = settled(config, id, args.json, for_human, &mut told)? {
                    return Ok(code);
                }
                eprintln!(
                    "brainloop: stopped waiting: {}; job {id} stays queued and runs once a worker starts",
                    no_worker(config)
                );
                still_open(config, id, args.json)?;
                return Ok(EXIT_NO_WORKER);
            }
        }
        if t0.elapsed() > timeout {
            eprintln!(
                "brainloop: job {id} has no final result after {} s (--timeout); it stays queued: `brainloop status` shows what the worker does, \
                 `brainloop result {id}{}` reads its result later",
                timeout.as_secs(),
                result::data_dir_flag(config)
            );
            still_open(config, id, args.json)?;
            return Ok(result::EXIT_OPEN);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Prints job `id`'s outcome once it is final, or once it waits for a human (unless
/// `for_human`: then it only says so on stderr, once); returns the exit code then.
fn settled(
    config: &Config,
    id: i64,
    as_json: bool,
    for_human: bool,
    told: &mut bool,
) -> Result<Option<i32>> {
    let Ok(out) = db::open_read_only(&config.data_dir, DbKind::Output) else {
        return Ok(None);
    };
    let Some(row) = result::row(&out, id)? else {
        return Ok(None);
    };
    match result::exit_code(&row.status) {
        result::EXIT_OPEN => Ok(None),
        result::EXIT_WAITS_FOR_HUMAN if for_human => {
            if !*told {
                if let Some(p) = result::pending(config, &out, id, &row)? {
                    eprint!("{}", p.text);
                    eprintln!(
                        "still waiting (--wait-for-human): the result comes once it is decided"
                    );
                }
                *told = true;
            }
            Ok(None)
        }
        _ => result::print(config, &out, id, &row, as_json).map(Some),
    }
}

/// `--json` when the wait ends before the job: the job as it stands (stdout has no result).
fn still_open(config: &Config, id: i64, as_json: bool) -> Result<()> {
    if !as_json {
        return Ok(());
    }
    let row = db::open_read_only(&config.data_dir, DbKind::Output)
        .ok()
        .and_then(|out| result::row(&out, id).ok().flatten());
    let v = match &row {
        Some(r) => result::envelope(id, r),
        None => json!({"job_id": id, "status": "queued", "result": null, "error": null}),
    };
    println!("{}", shown::json(&v)?);
    Ok(())
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
        // One span reading for the whole CLI (`time::parse_span_ms`): days too, weeks never.
        assert!((parse_when("+3d").unwrap() - now - 259_200_000).abs() < 1000);
        assert!(parse_when("+3w").is_err());
        assert!(parse_when("soon").is_err());
    }
}
