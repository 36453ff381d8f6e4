//! `brainloop history` (issue 36, audit): the last decisions and applications, newest first —
//! every approve/deny/override written for a validation (by the operator or the reviewer), the
//! validations that expired unanswered, every change set applied (asked or not: who or what
//! decided) and undone — each at its local time, with the job, so `brainloop show JOB` follows
//! one. It only reads: decisions are `ask::validations`', applications `bash::journal`'s.
//! With a fleet registry (`[registry]`, issue 37) it reads the registry instead: every worker's
//! decisions, expiries, applied and undone change sets and undo requests, each naming its
//! worker.

use crate::ask::validations;
use crate::bash::journal;
use crate::config::Config;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::Result;
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct HistoryArgs {
    /// How many entries (the newest).
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: usize,
    /// JSON array (times as unix ms and local text; agent text exact).
    #[arg(long)]
    pub json: bool,
}

/// One line of the history.
struct Entry {
    at: i64,
    event: String,
    job_id: Option<i64>,
    validation_id: Option<String>,
    by: Option<String>,
    detail: String,
    command: Option<String>,
    /// With a fleet registry: the worker of the job.
    worker: Option<String>,
}

pub fn run(config: &Config, a: &HistoryArgs) -> Result<i32> {
    let limit = a.limit.max(1);
    let entries = match &config.registry {
        Some(reg) => fleet_entries(reg, limit)?,
        None => local_entries(config, limit)?,
    };
    print(entries, limit, a.json)
}

/// With a fleet registry (issue 37): every worker's decisions, expiries, applied and undone
/// change sets and undo requests, from the registry.
fn fleet_entries(reg: &crate::registry::Settings, limit: usize) -> Result<Vec<Entry>> {
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    let mut entries = Vec::new();
    for (d, f) in validations::fleet_recent_decisions(&mut c, limit)? {
        let r = d.row;
        let mut detail = String::new();
        if r.learn {
            detail.push_str(&format!("--learn --scope {}", d.learn_scope));
        }
        if let Some(x) = &r.reason {
            if !detail.is_empty() {
                detail.push(' ');
            }
            detail.push_str(&format!("reason: {x}"));
        }
        entries.push(Entry {
            at: r.created_at,
            event: r
                .decision
                .map(|d| d.as_str().to_string())
                .unwrap_or_else(|| "decision".into()),
            job_id: Some(f.validation.job_id),
            validation_id: Some(r.validation_id),
            by: Some(r.decided_by),
            detail,
            command: f.validation.command,
            worker: Some(f.worker),
        });
    }
    for f in validations::fleet_recent_expired(&mut c, limit)? {
        let v = f.validation;
        entries.push(Entry {
            at: v.decided_at.unwrap_or(v.requested_at),
            event: "expired".into(),
            job_id: Some(v.job_id),
            validation_id: Some(v.id),
            by: None,
            detail: "nobody answered in time".into(),
            command: v.command,
            worker: Some(f.worker),
        });
    }
    for j in validations::fleet_applied(&mut c, limit)? {
        if let Some(u) = j.undone_at {
            entries.push(Entry {
                at: u,
                event: "undone".into(),
                job_id: Some(j.job_id),
                validation_id: None,
                by: None,
                detail: "previous contents restored".into(),
                command: Some(j.command.clone()),
                worker: Some(j.worker.clone()),
            });
        }
        entries.push(Entry {
            at: j.applied_at,
            event: "applied".into(),
            job_id: Some(j.job_id),
            validation_id: j.validation_id,
            by: j.decided_by,
            detail: format!("{} ({})", j.summary, j.policy_used),
            command: Some(j.command),
            worker: Some(j.worker),
        });
    }
    for u in validations::recent_undo_requests(&mut c, limit)? {
        entries.push(Entry {
            at: u.requested_at,
            event: "undo_request".into(),
            job_id: Some(u.job_id),
            validation_id: None,
            by: Some(u.requested_by),
            detail: format!(
                "#{} {}{}",
                u.id,
                u.status,
                u.outcome.map(|o| format!(": {o}")).unwrap_or_default()
            ),
            command: None,
            worker: Some(u.worker),
        });
    }
    Ok(entries)
}

fn local_entries(config: &Config, limit: usize) -> Result<Vec<Entry>> {
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let sec = db::open_read_only(&config.data_dir, DbKind::Security)?;
    let mut entries = Vec::new();
    for d in validations::recent_decisions(&sec, limit)? {
        let v = validations::get(&out, &d.validation_id)?;
        let word = d
            .decision
            .map(|d| d.as_str().to_string())
            .unwrap_or_else(|| "decision".into());
        let mut detail = String::new();
        if d.learn {
            detail.push_str("--learn");
        }
        if let Some(r) = &d.reason {
            if !detail.is_empty() {
                detail.push(' ');
            }
            detail.push_str(&format!("reason: {r}"));
        }
        entries.push(Entry {
            at: d.created_at,
            event: word,
            job_id: v.as_ref().map(|v| v.job_id),
            validation_id: Some(d.validation_id.clone()),
            by: Some(d.decided_by),
            detail,
            command: v.and_then(|v| v.command),
            worker: None,
        });
    }
    for v in validations::recent_expired(&out, limit)? {
        entries.push(Entry {
            at: v.decided_at.unwrap_or(v.requested_at),
            event: "expired".into(),
            job_id: Some(v.job_id),
            validation_id: Some(v.id),
            by: None,
            detail: "nobody answered in time".into(),
            command: v.command,
            worker: None,
        });
    }
    for j in journal::recent(&sec, limit)? {
        if let Some(u) = j.undone_at {
            entries.push(Entry {
                at: u,
                event: "undone".into(),
                job_id: Some(j.job_id),
                validation_id: None,
                by: None,
                detail: "previous contents restored".into(),
                command: Some(j.command.clone()),
                worker: None,
            });
        }
        entries.push(Entry {
            at: j.applied_at,
            event: "applied".into(),
            job_id: Some(j.job_id),
            validation_id: j.validation_id,
            by: j.decided_by,
            detail: format!("{} ({})", j.summary, j.policy_used),
            command: Some(j.command),
            worker: None,
        });
    }
    Ok(entries)
}

fn print(mut entries: Vec<Entry>, limit: usize, json: bool) -> Result<i32> {
    // Newest first; a decision and the apply it caused in the same millisecond: the apply first.
    entries.sort_by(|x, y| y.at.cmp(&x.at).then_with(|| x.event.cmp(&y.event)));
    entries.truncate(limit);
    if json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "at_ms": e.at,
                    "at": crate::time::local(e.at),
                    "event": e.event,
                    "job_id": e.job_id,
                    "validation_id": e.validation_id,
                    "by": e.by,
                    "detail": e.detail,
                    "command": e.command,
                    "worker": e.worker,
                })
            })
            .collect();
        println!("{}", shown::json(&rows)?);
        return Ok(0);
    }
    if entries.is_empty() {
        println!("no decisions or applications yet (pending ones: `brainloop validations`)");
        return Ok(0);
    }
    for e in &entries {
        let job = match (e.job_id, &e.worker) {
            (Some(j), Some(w)) => format!("job {j} on {}", shown::line(w)),
            (Some(j), None) => format!("job {j}"),
            _ => String::new(),
        };
        let mut line = format!("{}  {:<12} {:<8}", crate::time::local(e.at), e.event, job);
        if let Some(by) = &e.by {
            line.push_str(&format!(" by {}", shown::line(by)));
        }
        if !e.detail.is_empty() {
            line.push_str(&format!("  {}", shown::line(&e.detail)));
        }
        println!("{line}");
        if let Some(c) = &e.command {
            println!("    {}", shown::line(c));
        }
    }
    println!("(newest first; `brainloop show JOB` for a change set's diff and who decided)");
    Ok(0)
}
