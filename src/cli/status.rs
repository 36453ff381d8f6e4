//! `brainloop status`: is the worker alive (instance lock + heartbeat age), what is it doing
//! (state, jobs running, queue depth, jobs waiting in input.db), file sizes, and the last hour's
//! headline figures, and why it does not progress (`diagnose`: disk full, a database locked by
//! whom, a failed consistency check, what the worker reports). `--json` for scripts, `--watch` to
//! refresh. Exit code 0 when the worker is alive and nothing is wrong, 4 when it is alive but
//! something blocks it, 3 when it is stopped, dead or never started.

use crate::config::Config;
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
        let report = collect(config)?;
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

/// 0: alive and nothing wrong; 4: alive but something blocks it (`problems`); 3: not running.
fn exit_code(report: &Value) -> i32 {
    let troubled = report["problems"].as_array().is_some_and(|p| !p.is_empty());
    match (report["alive"] == json!(true), troubled) {
        (true, false) => 0,
        (true, true) => 4,
        (false, _) => 3,
    }
}

/// Whether some process holds the worker's instance lock (without disturbing it): the lock on
/// the data directory itself, which survives a deleted `brainloop.lock` (see `lockfile`).
fn lock_held(config: &Config) -> Option<bool> {
    use nix::fcntl::{Flock, FlockArg};
    let dir = std::fs::File::open(&config.data_dir).ok()?;
    match Flock::lock(dir, FlockArg::LockSharedNonblock) {
        Ok(_guard) => Some(false),
        Err(_) => Some(true),
    }
}

/// The PID in `brainloop.lock`, when readable.
fn lock_pid(config: &Config) -> Option<i64> {
    std::fs::read_to_string(config.data_dir.join(LOCK_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// (state, heartbeat age, alive). The instance lock decides whether the worker lives: a worker
/// holding it is never reported DEAD, however old its heartbeat (disk full, a database locked):
/// it is STUCK, and `problems` says why.
fn liveness(
    config: &Config,
    hb: Option<&output::Heartbeat>,
    lock: Option<bool>,
    now: i64,
) -> (String, Option<i64>, bool) {
    let dead_after = config.dead_after_ms.max(2 * config.heartbeat_interval_ms) as i64;
    let age = hb.map(|h| now - h.timestamp);
    let stale = age.is_none_or(|a| a > dead_after);
    match (hb, lock) {
        (_, Some(true)) if stale => (
            format!(
                "STUCK (alive: pid {} holds the data-dir lock; no heartbeat for {})",
                lock_pid(config)
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "?".into()),
                age.map(|a| format!("{} s", a / 1000))
                    .unwrap_or_else(|| "ever".into())
            ),
            age,
            true,
        ),
        (Some(h), Some(true)) if h.status == "stopped" => ("starting".to_string(), age, true),
        (None, _) => ("never started".to_string(), None, false),
        (Some(h), _) if h.status == "stopped" => ("stopped".to_string(), age, false),
        (Some(h), lock) if stale || lock == Some(false) => (
            format!(
                "DEAD (last state {}; no heartbeat for {} s)",
                h.status,
                age.unwrap_or(0) / 1000
            ),
            age,
            false,
        ),
        (Some(h), _) => (h.status.clone(), age, true),
    }
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
    let dir = &config.data_dir;
    let out = db::open_read_only(dir, DbKind::Output)?;
    let hb = output::latest_heartbeat(&out)?;
    let lock = lock_held(config);
    let (state, age_ms, alive) = liveness(config, hb.as_ref(), lock, now);
    let worker_pid = lock_pid(config).or(hb.as_ref().map(|h| h.pid));
    let problems =
        super::diagnose::problems(config, output::latest_problem(&out).as_deref(), worker_pid);
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
        "running_jobs": running,
        "running_by_client": running_by_client,
        "last_errors": last_errors,
        "queue_by_action": queue_by_action,
        "tokens_today": tokens_today,
        "data_dir": dir.display().to_string(),
        "llm": llm,
        "alive": alive,
        "state": state,
        "problems": problems,
        "heartbeat_age_ms": age_ms,
        "instance_lock_held": lock,
        "lock_pid": lock_pid(config),
        "heartbeat": hb,
        "jobs_unclaimed": unclaimed,
        "results_last_hour": by_status,
        "metrics_last_hour": metrics,
        "egress_last_hour": egress_counters(dir, hour_ago),
        "files": files,
        "schema_versions": versions,
    }))
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
