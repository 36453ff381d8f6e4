//! `brainloop jobs`: the jobs of the data dir, newest first, at most `--limit` — each with its
//! status, action, client, when it was submitted, how long it took and its command (or its
//! error). It only reads what a producer can read: input.db's `jobs` (queued ones have no
//! result yet) and output.db's `results` — the only place of a schedule's firings (negative
//! ids, dated by when they started) and of jobs whose input row `prune-input` deleted. Filters:
//! `--status` (names, comma-separated), `--action`, `--client`, `--since` / `--until` (on the
//! submission time). Owns the parsing of those time bounds ([`parse_time`]).

use crate::config::Config;
use crate::db::output::JobStatus;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Only jobs in these statuses (comma-separated): queued, running, pending_validation,
    /// succeeded, failed, denied, blocked, duplicate_warning, expired, cancelled, interrupted.
    #[arg(long, value_name = "STATUS[,STATUS]", value_delimiter = ',')]
    pub status: Vec<String>,
    /// Only jobs of this action.
    #[arg(long, value_name = "NAME")]
    pub action: Option<String>,
    /// Only jobs of this client.
    #[arg(long, value_name = "C")]
    pub client: Option<String>,
    /// Only jobs submitted at or after WHEN: a time ago (`30s`, `10m`, `2h`, `3d`), a local date
    /// or time (`2026-12-02`, `2026-12-02 15:30`), or unix milliseconds.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only jobs submitted before WHEN (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// How many jobs at most (the newest); 0 for every one that matches.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: usize,
    /// A JSON array (times as unix ms; agent text exact).
    #[arg(long)]
    pub json: bool,
}

/// One line of the listing.
#[derive(Debug, Clone, Serialize)]
struct Job {
    job_id: i64,
    status: String,
    action: Option<String>,
    client: Option<String>,
    /// When it was submitted (a firing: when it started).
    submitted_at: Option<i64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    duration_ms: Option<i64>,
    attempts: i64,
    /// An `execute_bash` job's command (cut at 300 characters).
    command: Option<String>,
    error: Option<String>,
}

/// The filters as the queries take them.
struct Filter {
    statuses: Option<Vec<String>>,
    action: Option<String>,
    client: Option<String>,
    since: Option<i64>,
    until: Option<i64>,
    limit: usize,
}

impl Filter {
    fn from_args(a: &JobsArgs, now: i64) -> Result<Filter> {
        let mut statuses = Vec::new();
        for s in a.status.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            if JobStatus::parse(s).is_none() {
                bail!(
                    "--status {}: not a job status (queued, running, pending_validation, succeeded, failed, denied, blocked, duplicate_warning, expired, cancelled, interrupted)",
                    shown::line(s)
                );
            }
            statuses.push(s.to_string());
        }
        let time = |w: &Option<String>, flag: &str| {
            w.as_deref()
                .map(|w| parse_time(w, now).with_context(|| format!("--{flag} {w:?}")))
                .transpose()
        };
        Ok(Filter {
            statuses: (!statuses.is_empty()).then_some(statuses),
            action: a.action.clone(),
            client: a.client.clone(),
            since: time(&a.since, "since")?,
            until: time(&a.until, "until")?,
            limit: if a.limit == 0 { usize::MAX } else { a.limit },
        })
    }

    fn wants(&self, status: &str) -> bool {
        self.statuses
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == status))
    }

    fn statuses_json(&self) -> Option<String> {
        self.statuses
            .as_ref()
            .map(|s| serde_json::Value::from(s.clone()).to_string())
    }
}

pub fn run(config: &Config, a: &JobsArgs) -> Result<i32> {
    let now = crate::time::now_ms();
    let f = Filter::from_args(a, now)?;
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let input = db::open_read_only(&config.data_dir, DbKind::Input);
    let (mut jobs, min_id) = match &input {
        Ok(input) => (from_input(input, &out, &f)?, lowest_id(input)?),
        Err(e) => {
            eprintln!(
                "brainloop: queued jobs not listed: {}",
                shown::line(&format!("{e:#}"))
            );
            (Vec::new(), i64::MAX)
        }
    };
    jobs.extend(results_only(&out, &f, min_id)?);
    jobs.sort_by(|x, y| {
        y.submitted_at
            .cmp(&x.submitted_at)
            .then(y.job_id.cmp(&x.job_id))
    });
    jobs.truncate(f.limit);
    if a.json {
        println!("{}", shown::json(&jobs)?);
    } else {
        print(&jobs, a.limit);
    }
    Ok(0)
}

/// The lowest id input.db still holds (`i64::MAX` when it holds none).
fn lowest_id(input: &Connection) -> Result<i64> {
    Ok(input
        .query_row("SELECT min(id) FROM jobs", [], |r| {
            r.get::<_, Option<i64>>(0)
        })?
        .unwrap_or(i64::MAX))
}

/// The newest matching jobs of input.db, each with its results row when it has one.
fn from_input(input: &Connection, out: &Connection, f: &Filter) -> Result<Vec<Job>> {
    let mut st = input.prepare(
        "SELECT id, action, client_id, created_at,
                CASE WHEN json_valid(params) THEN
                    CASE WHEN json_type(params, '$.command') = 'text'
                         THEN substr(json_extract(params, '$.command'), 1, 300) END END
         FROM jobs
         WHERE (?1 IS NULL OR action = ?1) AND (?2 IS NULL OR client_id = ?2)
           AND (?3 IS NULL OR created_at >= ?3) AND (?4 IS NULL OR created_at < ?4)
         ORDER BY id DESC",
    )?;
    let mut res = out.prepare(
        "SELECT status, error, attempts, duration_ms, started_at, finished_at
         FROM results WHERE job_id = ?1",
    )?;
    let mut rows = st.query(params![f.action, f.client, f.since, f.until])?;
    let mut jobs = Vec::new();
    while let Some(r) = rows.next()? {
        let mut job = Job {
            job_id: r.get(0)?,
            status: "queued".into(),
            action: r.get(1)?,
            client: r.get(2)?,
            submitted_at: r.get(3)?,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            attempts: 0,
            command: r.get(4)?,
            error: None,
        };
        let found = res
            .query_row([job.job_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .optional()?;
        if let Some((status, error, attempts, duration, started, finished)) = found {
            job.status = status;
            (job.error, job.attempts, job.duration_ms) = (error, attempts, duration);
            (job.started_at, job.finished_at) = (started, finished);
        }
        if f.wants(&job.status) {
            jobs.push(job);
            if jobs.len() >= f.limit {
                break;
            }
        }
    }
    Ok(jobs)
}

/// The newest matching results rows of jobs input.db does not hold: a schedule's firings
/// (negative ids) and jobs older than its lowest id (pruned).
fn results_only(out: &Connection, f: &Filter, min_id: i64) -> Result<Vec<Job>> {
    let limit = i64::try_from(f.limit).unwrap_or(i64::MAX);
    let mut st = out.prepare(
        "SELECT job_id, status, action, client_id, coalesce(started_at, finished_at),
                started_at, finished_at, duration_ms, attempts, error
         FROM results
         WHERE (job_id < 0 OR job_id < ?1)
           AND (?2 IS NULL OR action = ?2) AND (?3 IS NULL OR client_id = ?3)
           AND (?4 IS NULL OR coalesce(started_at, finished_at) >= ?4)
           AND (?5 IS NULL OR coalesce(started_at, finished_at) < ?5)
           AND (?6 IS NULL OR status IN (SELECT value FROM json_each(?6)))
         ORDER BY coalesce(started_at, finished_at) DESC, job_id DESC LIMIT ?7",
    )?;
    let rows = st.query_map(
        params![
            min_id,
            f.action,
            f.client,
            f.since,
            f.until,
            f.statuses_json(),
            limit
        ],
        |r| {
            Ok(Job {
                job_id: r.get(0)?,
                status: r.get(1)?,
                action: r.get(2)?,
                client: r.get(3)?,
                submitted_at: r.get(4)?,
                started_at: r.get(5)?,
                finished_at: r.get(6)?,
                duration_ms: r.get(7)?,
                attempts: r.get(8)?,
                command: None,
                error: r.get(9)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The table: one line per job, every text of agent or producer origin escaped.
fn print(jobs: &[Job], limit: usize) {
    if jobs.is_empty() {
        println!("no jobs match (`brainloop enqueue ping` queues one; --since/--status/--action/--client narrow the list)");
        return;
    }
    println!(
        "{:>8}  {:<18}  {:<16}  {:<12}  {:<19}  {:>9}  COMMAND / ERROR",
        "ID", "STATUS", "ACTION", "CLIENT", "SUBMITTED", "TOOK"
    );
    for j in jobs {
        let took = j
            .duration_ms
            .map(|d| format!("{d} ms"))
            .unwrap_or_else(|| "-".into());
        let what = match (&j.command, &j.error) {
            (Some(c), _) => c.clone(),
            (None, Some(e)) if j.status != "succeeded" => e.clone(),
            _ => String::new(),
        };
        println!(
            "{:>8}  {:<18}  {:<16}  {:<12}  {:<19}  {:>9}  {}",
            j.job_id,
            shown::line(&j.status),
            shown::line(j.action.as_deref().unwrap_or("?")),
            shown::line(j.client.as_deref().unwrap_or("?")),
            j.submitted_at
                .map(crate::time::local_short)
                .unwrap_or_else(|| "-".into()),
            took,
            shown::line(&crate::quote::prefix(&what, 120)),
        );
    }
    let more = if jobs.len() >= limit && limit > 0 {
        format!("the newest {limit}: --limit N for more; ")
    } else {
        String::new()
    };
    println!("(newest first; {more}`brainloop show ID` tells one job's story, `brainloop result ID` prints its result)");
}

/// A time bound: an age (`30s`, `10m`, `2h`, `3d` ago: `time::parse_span_ms`), a local date or date and time
/// (`2026-12-02`, `2026-12-02 15:30[:00]`, `T` also), or unix milliseconds; as unix ms.
pub fn parse_time(s: &str, now: i64) -> Result<i64> {
    use chrono::{Local, NaiveDate, NaiveDateTime, TimeZone};
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(span) = crate::time::parse_span_ms(s) {
        return Ok(now - span);
    }
    let local = s.replace('T', " ");
    let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(&local, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(&local, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        });
    match naive.map(|n| Local.from_local_datetime(&n).earliest()) {
        Some(Some(t)) => Ok(t.timestamp_millis()),
        _ => bail!(
            "not a time: use an age (30s, 10m, 2h, 3d), a local date or time (2026-12-02, 2026-12-02 15:30) or unix milliseconds"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn time_bounds_parse_in_every_form() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("10m", now).unwrap(), now - 600_000);
        assert_eq!(parse_time("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(parse_time("3d", now).unwrap(), now - 3 * 86_400_000);
        assert_eq!(parse_time("45s", now).unwrap(), now - 45_000);
        assert_eq!(parse_time("1700000000000", now).unwrap(), 1_700_000_000_000);
        let day = parse_time("2026-12-02", now).unwrap();
        let minute = parse_time("2026-12-02 15:30", now).unwrap();
        assert_eq!(minute - day, (15 * 60 + 30) * 60_000);
        assert_eq!(parse_time("2026-12-02T15:30:00", now).unwrap(), minute);
        for bad in ["soon", "10y", "2026-13-01", ""] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }
}
