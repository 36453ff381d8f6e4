//! `brainloop status`: is the worker alive (instance lock + the age of its status file), what is
//! it doing (state, jobs running, queue depth, jobs waiting in input.db), file sizes, and the
//! last hour's headline figures, and why it does not progress (`diagnose`: disk full, a database
//! locked by whom, a failed consistency check, what the worker reports). `--json` for scripts,
//! `--watch` to refresh. Exit code 0 when the worker is alive and nothing is wrong, 4 when it is
//! alive but something blocks it (a STUCK worker is blocked), 3 when it is stopped, dead or
//! never started.
//!
//! The live view comes from the status file (`db::status_file`), which the worker rewrites every
//! second on a channel independent of output.db: its age is measured on the monotonic clock
//! (same boot), so a wall-clock step neither kills nor revives a worker; a step is named under
//! `clock`. A worker older than the file is read from its last heartbeat row (insertion order).

use crate::config::Config;
use crate::db::status_file::{self, StatusFile};
use crate::db::{self, input, lifecycle, migrate, output, DbKind};
use crate::lockfile::LOCK_FILE;
use anyhow::Result;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Refresh every 2 seconds until interrupted.
    #[arg(long)]
    pub watch: bool,
}

pub fn run(config: &Config, args: &StatusArgs) -> Result<i32> {
    loop {
        let report = match collect(config) {
            Ok(r) => r,
            // output.db deleted or unreadable: still say whether the worker lives and what it
            // reports (issue 50), rather than fail.
            Err(e) => without_output(config, &e),
        };
        if args.json {
            println!("{}", crate::shown::json(&report)?);
        } else {
            if args.watch {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&report));
        }
        if !args.watch {
            return Ok(exit_code(&report));
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The report when output.db cannot be read (deleted, replaced by something unreadable): the
/// worker's life from its lock and its status file, its own problems, and this one.
fn without_output(config: &Config, e: &anyhow::Error) -> Value {
    let dir = &config.data_dir;
    let file = status_file::read(dir).ok().flatten();
    let lock = lock_held(config);
    let holder = lock_pid(config);
    let clocks = Clocks {
        wall: crate::time::now_ms(),
        mono: crate::time::mono_ms(),
        boot: crate::time::boot_id(),
    };
    let life = liveness(config, None, file.as_ref(), lock, holder, &clocks);
    let reported = file
        .as_ref()
        .map(|f| f.problems.clone())
        .unwrap_or_default();
    let mut problems = vec![json!({"cause": "output.db unreadable", "detail": format!(
        "{} cannot be read: {e:#} — results, heartbeats and validations are there; if it was deleted, stop the worker and run `brainloop repair`",
        DbKind::Output.path(dir).display())})];
    if let Some(why) = life.stuck {
        problems.push(json!({"cause": "stuck", "detail": why}));
    }
    problems.extend(super::diagnose::problems(config, &reported, holder));
    json!({
        "data_dir": dir.display().to_string(),
        "alive": life.alive,
        "state": life.state,
        "age_ms": life.age_ms,
        "pid": holder,
        "problems": problems,
    })
}

/// 0: alive and nothing wrong; 4: alive but something blocks it (`problems`); 3: not running.
fn exit_code(report: &Value) -> i32 {
    let troubled = report["problems"].as_array().is_some_and(|p| !p.is_empty());
    match (report["alive"] == json!(true), troubled) {
        (true, false) => 0,
        (true, true) => 4,
        (false, _) => 3,
    }
}

/// Whether some process holds the worker's instance lock (`lockfile::held`).
fn lock_held(config: &Config) -> Option<bool> {
    crate::lockfile::held(&config.data_dir)
}

/// The PID in `brainloop.lock`, when readable.
fn lock_pid(config: &Config) -> Option<i64> {
    std::fs::read_to_string(config.data_dir.join(LOCK_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The clocks `status` reads once: wall, monotonic, boot.
struct Clocks {
    wall: i64,
    mono: i64,
    boot: String,
}

/// What status concludes about the worker's life.
#[derive(Debug, PartialEq)]
struct Life {
    state: String,
    /// Age of the freshest account of the worker (status file, else heartbeat row), never < 0.
    age_ms: Option<i64>,
    alive: bool,
    /// The worker holds the lock but its account stopped moving: why, as a problem.
    stuck: Option<String>,
}

/// The worker's freshest account: (state, age, pid). The status file when there is one (every
/// worker since issue 34 writes it), else the heartbeat row.
fn account(
    hb: Option<&output::Heartbeat>,
    file: Option<&StatusFile>,
    c: &Clocks,
) -> Option<(String, i64, i64)> {
    match (file, hb) {
        (Some(f), _) => Some((f.state.clone(), f.age_ms(c.wall, c.mono, &c.boot), f.pid)),
        (None, Some(h)) => Some((h.status.clone(), (c.wall - h.timestamp).max(0), h.pid)),
        (None, None) => None,
    }
}

/// The kernel's state letter of `pid` (`T`: stopped by a signal), when readable.
fn proc_state(pid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The instance lock decides whether the worker lives: a worker holding it is never reported
/// DEAD, however old its account (disk full, a database locked, SIGSTOP): it is STUCK, a problem.
fn liveness(
    config: &Config,
    hb: Option<&output::Heartbeat>,
    file: Option<&StatusFile>,
    lock: Option<bool>,
    holder: Option<i64>,
    c: &Clocks,
) -> Life {
    let every = match file {
        Some(_) => config.heartbeat_interval_ms.min(status_file::EVERY_MS),
        None => config.heartbeat_interval_ms,
    };
    let dead_after = config.dead_after_ms.max(2 * every) as i64;
    let acc = account(hb, file, c);
    let age = acc.as_ref().map(|a| a.1);
    let stale = age.is_none_or(|a| a > dead_after);
    let life = |state: String, alive: bool| Life {
        state,
        age_ms: age,
        alive,
        stuck: None,
    };
    match (acc, lock) {
        (_, Some(true)) if stale => {
            let pid = holder.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
            let since = age
                .map(|a| format!("{} s", a / 1000))
                .unwrap_or_else(|| "ever".into());
            let why = match holder.and_then(proc_state) {
                Some('T') | Some('t') => format!(
                    "it is stopped by a signal (SIGSTOP or a debugger): `kill -CONT {pid}` resumes it"
                ),
                Some('D') => "it is blocked in the kernel on I/O (state D)".to_string(),
                _ => "it is hung, or cannot write the data dir".to_string(),
            };
            Life {
                state: format!(
                    "STUCK (alive: pid {pid} holds the data-dir lock; no sign of life for {since})"
                ),
                age_ms: age,
                alive: true,
                stuck: Some(format!(
                    "pid {pid} holds the data-dir lock but has not updated {} for {since}: {why}",
                    status_file::FILE
                )),
            }
        }
        (Some((st, _, pid)), Some(true)) if st == "stopped" => {
            // The account is a previous worker's (a new one is starting) or this one's last.
            if holder == Some(pid) {
                life("stopping".to_string(), true)
            } else {
                life("starting".to_string(), true)
            }
        }
        (None, _) => life("never started".to_string(), false),
        (Some((st, _, _)), _) if st == "stopped" => life("stopped".to_string(), false),
        (Some((st, a, _)), lock) if stale || lock == Some(false) => life(
            format!("DEAD (last state {st}; no sign of life for {} s)", a / 1000),
            false,
        ),
        (Some((st, _, _)), _) => life(st, true),
    }
}

/// The live counters, with the heartbeat row's field names: from the status file when there is
/// one (at most a second old), else the heartbeat row.
fn live_counters(hb: Option<&output::Heartbeat>, file: Option<&StatusFile>) -> Value {
    match file {
        Some(f) => json!({
            "worker_id": f.worker_id, "timestamp": f.wall_ms, "status": f.state, "pid": f.pid,
            "version": f.version, "sessions_active": f.sessions_active,
            "sessions_completed": f.sessions_completed, "jobs_running": f.jobs_running,
            "queue_depth": f.queue_depth, "jobs_done_total": f.jobs_done_total,
            "cache_hit_rate": f.cache_hit_rate, "sandbox_level": f.sandbox_level,
            "uptime_ms": f.uptime_ms, "source": status_file::FILE,
        }),
        None => json!(hb),
    }
}

/// The wall-clock steps seen since the worker started (`step_ms`, > 0 forward), with a sentence.
fn clock(file: Option<&StatusFile>, c: &Clocks) -> Value {
    let Some(f) = file else {
        return json!({"step_ms": Value::Null});
    };
    let step = f.step_ms(c.wall, c.mono, &c.boot);
    let detail = (step != 0).then(|| {
        format!(
            "the wall clock was stepped {}{} s since the worker started (NTP or an operator); ages, \
             approval expiry and not_before waits use the monotonic clock, stored times are wall clock",
            if step > 0 { "+" } else { "" },
            step / 1000
        )
    });
    json!({"step_ms": step, "last_step": f.last_clock_step.map(|(at, s)| json!({"at_ms": at, "step_ms": s})),
           "detail": detail})
}

/// The egress proxies' counters since `since` (issue 23), from command_security.db; `null`
/// when it cannot be read.
fn egress_counters(dir: &std::path::Path, since: i64) -> Value {
    db::open_read_only(dir, DbKind::Security)
        .and_then(|c| crate::egress::store::counters(&c, since))
        .map(|c| json!(c))
        .unwrap_or(Value::Null)
}

/// Long because `status --json` is one object assembled from every database, a read per field.
pub fn collect(config: &Config) -> Result<Value> {
    let now = crate::time::now_ms();
    let clocks = Clocks {
        wall: now,
        mono: crate::time::mono_ms(),
        boot: crate::time::boot_id(),
    };
    let dir = &config.data_dir;
    let out = db::open_read_only(dir, DbKind::Output)?;
    let hb = output::latest_heartbeat(&out)?;
    let (file, file_error) = match status_file::read(dir) {
        Ok(f) => (f, None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let lock = lock_held(config);
    let holder = lock_pid(config);
    let life = liveness(config, hb.as_ref(), file.as_ref(), lock, holder, &clocks);
    let (state, age_ms, alive) = (life.state, life.age_ms, life.alive);
    let worker_pid = holder
        .or(file.as_ref().map(|f| f.pid))
        .or(hb.as_ref().map(|h| h.pid));
    let reported = match &file {
        Some(f) => f.problems.clone(),
        None => super::diagnose::parse_reported(output::latest_problem(&out).as_deref()),
    };
    let mut problems = Vec::new();
    if let Some(why) = life.stuck {
        problems.push(json!({"cause": "stuck", "detail": why}));
    }
    problems.extend(super::diagnose::problems(config, &reported, worker_pid));
    let clock = clock(file.as_ref(), &clocks);
    let hour_ago = now - 3_600_000;
    let by_status: serde_json::Map<String, Value> = output::status_counts(&out, hour_ago)?
        .into_iter()
        .map(|(s, n)| (s, json!(n)))
        .collect();
    let metrics: serde_json::Map<String, Value> = output::summarize_metrics(&out, hour_ago)?
        .into_iter()
        .map(|m| {
            (
                m.name.clone(),
                json!({"sum": m.sum, "avg": m.avg, "max": m.max, "samples": m.samples}),
            )
        })
        .collect();
    let hwm = db::open_read_only(dir, DbKind::Lifecycle)
        .and_then(|c| lifecycle::high_water_mark(&c))
        .ok();
    let unclaimed = match hwm {
        Some(h) => db::open_read_only(dir, DbKind::Input)
            .and_then(|c| input::count_after(&c, h))
            .ok(),
        None => None,
    };
    let files: Vec<Value> = DbKind::ALL
        .iter()
        .map(|k| {
            let p = k.path(dir);
            let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            let wal = std::fs::metadata(format!("{}-wal", p.display()))
                .map(|m| m.len())
                .unwrap_or(0);
            json!({"file": k.file_name(), "bytes": size, "wal_bytes": wal})
        })
        .collect();
    let versions: serde_json::Map<String, Value> = migrate::versions(dir)
        .into_iter()
        .map(|(k, v)| (k.file_name().to_string(), json!(v)))
        .collect();
    // The LLM check of the current run (start-up `GET /models`), from the telemetry events.
    let llm: Value = db::open_read_only(dir, DbKind::Metadata)
        .ok()
        .and_then(|c| {
            c.query_row(
                "SELECT detail FROM events WHERE kind = 'llm_check' ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get::<_, String>(0),
            )
            .ok()
        })
        .and_then(|d| serde_json::from_str(&d).ok())
        .unwrap_or(Value::Null);
    // Whether the reviewer (`llm = true`) reaches its model: the latest check (issue 36), when
    // this configuration has such a reviewer or the running worker made it.
    let started_ms = file.as_ref().map(|f| f.wall_ms - f.uptime_ms);
    let reviewer_llm = config.reviewer.as_ref().is_some_and(|r| r.llm);
    let reviewer_model: Value = db::open_read_only(dir, DbKind::Metadata)
        .ok()
        .and_then(|c| {
            c.query_row(
                "SELECT timestamp, detail FROM events WHERE kind = ?1 ORDER BY id DESC LIMIT 1",
                [crate::hooks::model::EVENT],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
            )
            .ok()
        })
        .filter(|(t, _)| reviewer_llm || started_ms.is_some_and(|s| *t >= s - 1000))
        .and_then(|(_, d)| serde_json::from_str(&d).ok())
        .unwrap_or(Value::Null);
    let lc = db::open_read_only(dir, DbKind::Lifecycle).ok();
    let schedules = db::open_read_only(dir, DbKind::Input)
        .and_then(|c| {
            crate::schedules::views(
                &c,
                lc.as_ref(),
                chrono::Utc::now(),
                crate::schedules::cronexpr::parse_tz(&config.schedules_timezone)
                    .unwrap_or(chrono_tz::Tz::UTC),
            )
        })
        .unwrap_or_default();
    let pending_validations: i64 = out
        .query_row(
            "SELECT count(*) FROM validations WHERE status = 'pending'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0);
    // Clients whose reviewer keeps denying (`[reviewer] escalate_after_denials`).
    let reviewer_denials: serde_json::Map<String, Value> = match &config.reviewer {
        Some(r) => db::open_read_only(dir, DbKind::Security)
            .and_then(|sec| crate::hooks::escalated(&sec, &out, r.escalate_after_denials))
            .map(|v| {
                v.into_iter()
                    .map(|s| (s.client.clone(), json!(s.denials())))
                    .collect()
            })
            .unwrap_or_default(),
        None => serde_json::Map::new(),
    };
    let running: Vec<Value> = {
        let mut st = out.prepare(
            "SELECT job_id, action, client_id, started_at FROM results WHERE status = 'running' ORDER BY started_at LIMIT 20",
        )?;
        let rows = st
            .query_map([], |r| {
                let started: Option<i64> = r.get(3)?;
                Ok(
                    json!({"job_id": r.get::<_, i64>(0)?, "action": r.get::<_, Option<String>>(1)?,
                          "client_id": r.get::<_, Option<String>>(2)?,
                          "age_ms": started.map(|t| now - t)}),
                )
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows
    };
    // Slots held per client (the fair-slots share, `max_slots_per_client`): busiest first.
    let running_by_client: serde_json::Map<String, Value> = {
        let mut st = out.prepare(
            "SELECT client_id, count(*) FROM results WHERE status = 'running'
             GROUP BY client_id ORDER BY 2 DESC, 1 LIMIT 20",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                    json!(r.get::<_, i64>(1)?),
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().collect()
    };
    let last_errors: Vec<Value> = {
        let mut st = out.prepare(
            "SELECT job_id, action, status, error, finished_at FROM results
             WHERE status IN ('failed','blocked','denied','expired','interrupted') ORDER BY finished_at DESC LIMIT 5",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok(
                    json!({"job_id": r.get::<_, i64>(0)?, "action": r.get::<_, Option<String>>(1)?,
                          "status": r.get::<_, String>(2)?, "error": r.get::<_, Option<String>>(3)?,
                          "finished_at": r.get::<_, Option<i64>>(4)?}),
                )
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows
    };
    let queue_by_action: serde_json::Map<String, Value> = lc
        .as_ref()
        .and_then(|c| {
            let mut st = c
                .prepare("SELECT coalesce(q.action, '?'), count(*) FROM processed_log p JOIN queue q USING(job_id) WHERE p.status = 'claimed' GROUP BY 1")
                .ok()?;
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, json!(r.get::<_, i64>(1)?))))
                .ok()?
                .collect::<rusqlite::Result<Vec<_>>>()
                .ok()?;
            Some(rows.into_iter().collect())
        })
        .unwrap_or_default();
    let midnight = now - now.rem_euclid(86_400_000);
    let tokens_today: f64 = out
        .query_row(
            "SELECT coalesce(sum(value), 0) FROM metrics WHERE name IN ('cerebras_tokens_prompt', 'cerebras_tokens_completion') AND timestamp >= ?1",
            [midnight],
            |r| r.get(0),
        )
        .unwrap_or(0.0);
    Ok(json!({
        "schedules": schedules,
        "pending_validations": pending_validations,
        "reviewer_denials_in_a_row": reviewer_denials,
        "running_jobs": running,
        "running_by_client": running_by_client,
        "last_errors": last_errors,
        "queue_by_action": queue_by_action,
        "tokens_today": tokens_today,
        "data_dir": dir.display().to_string(),
        "llm": llm,
        "reviewer_model": reviewer_model,
        "alive": alive,
        "state": state,
        "problems": problems,
        "heartbeat_age_ms": age_ms,
        "instance_lock_held": lock,
        "lock_pid": holder,
        "heartbeat": live_counters(hb.as_ref(), file.as_ref()),
        "status_file_error": file_error,
        "clock": clock,
        "jobs_unclaimed": unclaimed,
        "results_last_hour": by_status,
        "metrics_last_hour": metrics,
        "egress_last_hour": egress_counters(dir, hour_ago),
        "signatures_suspended": suspended_signatures(dir),
        "files": files,
        "schema_versions": versions,
    }))
}

/// Learned signatures the load-time check suspended (`bash::explain::check`): a warning, not a
/// problem — the worker is not blocked, those commands ask again.
fn suspended_signatures(dir: &std::path::Path) -> Value {
    let rows =
        (|| -> Result<Vec<Value>> {
            let sec = db::open_read_only(dir, DbKind::Security)?;
            let mut st = sec.prepare(
                "SELECT client_id, signature, suspended FROM signature_evidence
             WHERE suspended IS NOT NULL AND denials = 0 ORDER BY signature, client_id",
            )?;
            let v = st
            .query_map([], |r| {
                Ok(json!({"client_id": r.get::<_, String>(0)?, "signature": r.get::<_, String>(1)?,
                          "why": r.get::<_, String>(2)?}))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(v)
        })();
    json!(rows.unwrap_or_default())
}

fn human_bytes(n: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Long because it prints the status sections in their order, a few lines each.
pub fn render(r: &Value) -> String {
    let mut s = String::new();
    // Every value may quote a producer or an agent (client ids, actions, errors, a lock
    // holder's command line): one line each, escaped.
    let line = |s: &mut String, k: &str, v: String| {
        s.push_str(&format!(
            "{:<22} {}\n",
            crate::shown::line(k),
            crate::shown::line(&v)
        ))
    };
    line(
        &mut s,
        "data dir",
        r["data_dir"].as_str().unwrap_or("").to_string(),
    );
    line(
        &mut s,
        "worker",
        r["state"].as_str().unwrap_or("").to_string(),
    );
    for p in r["problems"].as_array().into_iter().flatten() {
        line(
            &mut s,
            "PROBLEM",
            format!(
                "{}: {}",
                p["cause"].as_str().unwrap_or("?"),
                p["detail"].as_str().unwrap_or("")
            ),
        );
    }
    if let Some(d) = r["clock"]["detail"].as_str() {
        line(&mut s, "WARNING clock", d.to_string());
    }
    for p in r["signatures_suspended"].as_array().into_iter().flatten() {
        line(
            &mut s,
            "WARNING signature",
            format!(
                "`{}` suspended for client {}: {} (brainloop signatures --explain)",
                p["signature"].as_str().unwrap_or("?"),
                p["client_id"].as_str().unwrap_or("?"),
                p["why"].as_str().unwrap_or("")
            ),
        );
    }
    let hb = &r["heartbeat"];
    if let Some(age) = r["heartbeat_age_ms"].as_i64() {
        line(
            &mut s,
            "last heartbeat",
            format!("{:.1} s ago", age as f64 / 1000.0),
        );
        line(
            &mut s,
            "worker id / pid",
            format!(
                "{} / {}",
                hb["worker_id"].as_str().unwrap_or("?"),
                hb["pid"]
            ),
        );
        line(
            &mut s,
            "uptime",
            format!("{} s", hb["uptime_ms"].as_i64().unwrap_or(0) / 1000),
        );
        line(&mut s, "jobs running", hb["jobs_running"].to_string());
        line(
            &mut s,
            "queue depth",
            format!(
                "{} claimed, {} not yet claimed",
                hb["queue_depth"], r["jobs_unclaimed"]
            ),
        );
        line(
            &mut s,
            "jobs done (this run)",
            hb["jobs_done_total"].to_string(),
        );
        line(
            &mut s,
            "sandbox",
            hb["sandbox_level"].as_str().unwrap_or("?").to_string(),
        );
        let llm = &r["llm"];
        if !llm.is_null() {
            let state = if llm["ok"] == json!(true) {
                "ok".to_string()
            } else {
                format!(
                    "WARNING: {}",
                    llm["error"].as_str().unwrap_or("model not available")
                )
            };
            line(
                &mut s,
                "llm",
                format!(
                    "{} at {}: {state}",
                    llm["model"].as_str().unwrap_or("?"),
                    llm["base_url"].as_str().unwrap_or("?")
                ),
            );
        }
        let rm = &r["reviewer_model"];
        if !rm.is_null() {
            let state = if rm["ok"] == json!(true) {
                "reached".to_string()
            } else {
                format!(
                    "UNREACHABLE, validations go to the human: {}",
                    rm["error"].as_str().unwrap_or("?")
                )
            };
            line(
                &mut s,
                "reviewer model",
                format!(
                    "{} ({}): {state}",
                    rm["model_host"].as_str().unwrap_or("?"),
                    rm["when"].as_str().unwrap_or("?")
                ),
            );
        }
        line(
            &mut s,
            "cache hit rate",
            format!(
                "{:.0} %",
                hb["cache_hit_rate"].as_f64().unwrap_or(0.0) * 100.0
            ),
        );
    }
    let results = r["results_last_hour"].as_object();
    let summary = results
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|x| !x.is_empty())
        .unwrap_or_else(|| "none".into());
    line(&mut s, "results (last hour)", summary);
    if let Some(m) = r["metrics_last_hour"].as_object() {
        for (name, v) in m {
            line(
                &mut s,
                &format!("  {name}"),
                format!("sum {} max {}", v["sum"], v["max"]),
            );
        }
    }
    line(
        &mut s,
        "pending validations",
        r["pending_validations"].to_string(),
    );
    if let Some(c) = r["reviewer_denials_in_a_row"]
        .as_object()
        .filter(|c| !c.is_empty())
    {
        line(
            &mut s,
            "REVIEWER denials in a row",
            c.iter()
                .map(|(k, v)| format!("client {} {v}", crate::shown::line(k)))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if let Some(e) = r["egress_last_hour"].as_object() {
        line(
            &mut s,
            "egress proxy (last hour)",
            format!(
                "{} allowed, {} refused, {} failed connections; {} B up, {} B down",
                e["allowed"], e["refused"], e["failed"], e["bytes_up"], e["bytes_down"]
            ),
        );
    }
    line(&mut s, "tokens today", r["tokens_today"].to_string());
    if let Some(q) = r["queue_by_action"].as_object().filter(|q| !q.is_empty()) {
        line(
            &mut s,
            "queued by action",
            q.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    if let Some(c) = r["running_by_client"].as_object().filter(|c| !c.is_empty()) {
        line(
            &mut s,
            "running by client",
            c.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    for j in r["running_jobs"].as_array().into_iter().flatten() {
        line(
            &mut s,
            "  running",
            format!(
                "job {} {} ({} s)",
                j["job_id"],
                j["action"].as_str().unwrap_or("?"),
                j["age_ms"].as_i64().unwrap_or(0) / 1000
            ),
        );
    }
    for e in r["last_errors"].as_array().into_iter().flatten() {
        line(
            &mut s,
            "  recent error",
            format!(
                "job {} {} {}: {}",
                e["job_id"],
                e["action"].as_str().unwrap_or("?"),
                e["status"].as_str().unwrap_or(""),
                e["error"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(100)
                    .collect::<String>()
            ),
        );
    }
    if let Some(sch) = r["schedules"].as_array().filter(|a| !a.is_empty()) {
        s.push_str("schedules:\n");
        let now = crate::time::now_ms();
        for v in sch {
            let next = match (v["error"].as_str(), v["next_fire_ms"].as_i64()) {
                (Some(e), _) => format!("INVALID: {e}"),
                (None, Some(t)) => format!("next in {} s", (t - now).max(0) / 1000),
                (None, None) => "disabled".into(),
            };
            s.push_str(&format!(
                "  {:<20} {:<20} {:<16} {}\n",
                crate::shown::line(v["name"].as_str().unwrap_or("")),
                crate::shown::line(v["cron"].as_str().unwrap_or("")),
                crate::shown::line(v["action"].as_str().unwrap_or("")),
                crate::shown::line(&next)
            ));
        }
    }
    s.push_str("files:\n");
    if let Some(files) = r["files"].as_array() {
        for f in files {
            s.push_str(&format!(
                "  {:<26} {:>10}  (wal {})\n",
                f["file"].as_str().unwrap_or(""),
                human_bytes(f["bytes"].as_u64().unwrap_or(0)),
                human_bytes(f["wal_bytes"].as_u64().unwrap_or(0))
            ));
        }
    }
    s
}
