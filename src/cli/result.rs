//! A job's outcome as the CLI shows it: `brainloop result ID`, and what `enqueue --wait` prints
//! once its job ends or waits for a human. Owns **the exit code of a job's status** (0
//! succeeded; 1 failed, denied, blocked, duplicate_warning, expired, cancelled, interrupted; 4
//! still queued or running; 5 waiting for a human) and **the one shape of stdout**: the stored
//! result JSON alone (`null` when a final job stored none), so `| jq` works, with what a person
//! reads (the error, the validation and the lines to type) on stderr; `--json` prints the
//! envelope instead (`job_id`, `status`, `result`, `error`, the row's timings; a pending job's
//! validation and its `show` / `approve` / `deny` lines).

use crate::ask::validations;
use crate::config::Config;
use crate::db::output::{JobStatus, ShownResult};
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Result};
use rusqlite::{Connection, OptionalExtension};
use serde_json::{json, Value};

/// The job ended without succeeding (or, for `result`, there is no such job).
pub const EXIT_NOT_SUCCEEDED: i32 = 1;
/// The job is still queued or running (`enqueue --wait`: `--timeout` passed).
pub const EXIT_OPEN: i32 = 4;
/// The job waits for a human decision (its validation is printed).
pub const EXIT_WAITS_FOR_HUMAN: i32 = 5;

#[derive(clap::Args, Debug)]
pub struct ResultArgs {
    /// The job id (a schedule's firing has a negative one: `brainloop result -3`).
    #[arg(allow_negative_numbers = true)]
    pub id: i64,
    /// One JSON object: job_id, status, result, error, action, client, attempts and timings.
    #[arg(long)]
    pub json: bool,
}

/// The exit code of a job in `status` (unknown names count as not succeeded).
pub fn exit_code(status: &str) -> i32 {
    match JobStatus::parse(status) {
        Some(JobStatus::Succeeded) => 0,
        Some(JobStatus::Queued | JobStatus::Running) => EXIT_OPEN,
        Some(JobStatus::PendingValidation) => EXIT_WAITS_FOR_HUMAN,
        _ => EXIT_NOT_SUCCEEDED,
    }
}

/// `brainloop result ID`: the stored result, exit code by status.
pub fn run(config: &Config, a: &ResultArgs) -> Result<i32> {
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    if let Some(code) = report(config, &out, a.id, a.json)? {
        return Ok(code);
    }
    if !queued(config, a.id) {
        bail!(
            "no job {} in this data dir ({}): `brainloop jobs` lists the jobs (a result is pruned {} days after it ends, `retention.results_days`)",
            a.id,
            config.data_dir.display(),
            config.retention.results_days
        );
    }
    eprintln!(
        "job {} is queued: no result yet (`brainloop status` shows what the worker does)",
        a.id
    );
    if a.json {
        let v = json!({"job_id": a.id, "status": "queued", "result": null, "error": null});
        println!("{}", shown::json(&v)?);
    }
    Ok(EXIT_OPEN)
}

/// Whether job `id` exists without a result row yet: a producer's row in input.db, or a
/// schedule's firing claimed in lifecycle.db (when this user can read it).
fn queued(config: &Config, id: i64) -> bool {
    let (kind, sql) = if id > 0 {
        (DbKind::Input, "SELECT 1 FROM jobs WHERE id = ?1")
    } else {
        (DbKind::Lifecycle, "SELECT 1 FROM queue WHERE job_id = ?1")
    };
    db::open_read_only(&config.data_dir, kind)
        .and_then(|c| Ok(c.query_row(sql, [id], |_| Ok(())).optional()?))
        .is_ok_and(|r| r.is_some())
}

/// Job `id`'s results row, if it has one.
pub fn row(out: &Connection, id: i64) -> Result<Option<ShownResult>> {
    crate::db::output::result_of(out, id)
}

/// Prints job `id`'s outcome when it has a results row; returns the exit code (None: no row).
pub fn report(config: &Config, out: &Connection, id: i64, as_json: bool) -> Result<Option<i32>> {
    let Some(r) = row(out, id)? else {
        return Ok(None);
    };
    print(config, out, id, &r, as_json).map(Some)
}

/// Prints one results row (see the module doc); returns its exit code.
pub fn print(
    config: &Config,
    out: &Connection,
    id: i64,
    r: &ShownResult,
    as_json: bool,
) -> Result<i32> {
    let code = exit_code(&r.status);
    if code == EXIT_WAITS_FOR_HUMAN {
        if let Some(p) = pending(config, out, id, r)? {
            eprint!("{}", p.text);
            let v = if as_json { &p.json } else { &p.json["result"] };
            println!("{}", shown::json(v)?);
            return Ok(code);
        }
    }
    let result = stored(r);
    if as_json {
        println!("{}", shown::json(&envelope(id, r))?);
    } else if !result.is_null() || code != EXIT_OPEN {
        println!("{}", shown::json(&result)?);
    }
    match code {
        0 => {}
        EXIT_OPEN => eprintln!("job {id} is {}: no final result yet", r.status),
        _ => eprintln!(
            "job {id} {}{}",
            r.status,
            r.error
                .as_deref()
                .map(|e| format!(": {}", shown::line(e)))
                .unwrap_or_default()
        ),
    }
    Ok(code)
}

/// The stored result JSON (Null when none or unreadable).
fn stored(r: &ShownResult) -> Value {
    r.result
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null)
}

/// `--json`: the job's row as one object.
pub fn envelope(id: i64, r: &ShownResult) -> Value {
    json!({
        "job_id": id,
        "status": r.status,
        "result": stored(r),
        "error": r.error,
        "action": r.action,
        "client": r.client_id,
        "attempts": r.attempts,
        "duration_ms": r.duration_ms,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    })
}

/// A job waiting for a human: JSON for stdout, text for a person.
pub struct Pending {
    pub json: Value,
    pub text: String,
}

/// Job `id`'s pending validation, when its row says it waits for one.
pub fn pending(
    config: &Config,
    out: &Connection,
    id: i64,
    r: &ShownResult,
) -> Result<Option<Pending>> {
    if r.status != JobStatus::PendingValidation.as_str() {
        return Ok(None);
    }
    let result = stored(r);
    let vid = result["validation_id"].as_str().unwrap_or("?").to_string();
    let v = validations::get(out, &vid)?;
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
    let dd = data_dir_flag(config);
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
    text += &format!("  then:     brainloop result {id}{dd}\n");
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

/// ` --data-dir DIR` when the data dir is not the default, so a printed line works as typed.
pub fn data_dir_flag(config: &Config) -> String {
    if config.data_dir == std::path::Path::new(crate::config::DEFAULT_DATA_DIR) {
        return String::new();
    }
    format!(
        " --data-dir {}",
        crate::egress::shell_word(&config.data_dir.display().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_exit_code() {
        let want = [
            ("succeeded", 0),
            ("failed", 1),
            ("denied", 1),
            ("blocked", 1),
            ("duplicate_warning", 1),
            ("expired", 1),
            ("cancelled", 1),
            ("interrupted", 1),
            ("queued", 4),
            ("running", 4),
            ("pending_validation", 5),
            ("no such status", 1),
        ];
        for (status, code) in want {
            assert_eq!(exit_code(status), code, "{status}");
        }
    }
}
