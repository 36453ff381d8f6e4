//! The operator queue from any machine (issue 37): `show`, `undo` and `history` with a fleet
//! registry (`[registry] url`) read — and `undo` writes — the registry, not a data dir: what
//! each worker published (its validations with the payload its hooks get, the decisions on
//! them, the change sets it applied and undid) and the undo requests. `undo` is a request: the
//! worker that applied the change set carries it out on its own workspace with the local undo's
//! checks (`ask::fleet`) and records the outcome, which this command waits for (`--wait`) and
//! reports. Every statement is `ask::validations`'; this module prints.

use super::security::{ShowArgs, UndoArgs};
use crate::ask::validations::{self, FleetApplied, FleetValidation, UndoRequest};
use crate::registry::{self, Settings};
use crate::shown;
use anyhow::{bail, Result};
use serde_json::Value;
use std::time::{Duration, Instant};

fn connect(reg: &Settings) -> Result<registry::Client> {
    let mut c = registry::connect(reg)?;
    registry::check_version(&mut c)?;
    Ok(c)
}

/// The one worker a job id names: a job id is each worker's own, so several may have one.
fn one_worker<'a>(job: i64, workers: &'a [String], asked: Option<&str>) -> Result<&'a str> {
    match (workers, asked) {
        ([], _) => bail!("no worker published job {job} to the registry (see `brainloop history`)"),
        ([w], _) => Ok(w),
        (_, _) => bail!(
            "job {job} exists on several workers ({}): name one with --worker NAME",
            shown::line(&workers.join(", "))
        ),
    }
}

/// `show ID` on the registry: a validation id, or a job id (`--worker` when several workers
/// have that job).
pub fn show(reg: &Settings, a: &ShowArgs) -> Result<i32> {
    let mut c = connect(reg)?;
    let now = crate::time::now_ms();
    let (f, job, worker) = match validations::fleet_get(&mut c, &a.id)? {
        Some(f) => {
            let (j, w) = (f.validation.job_id, f.worker.clone());
            (Some(f), j, w)
        }
        None => {
            let Ok(job) = a.id.parse::<i64>() else {
                bail!(
                    "no validation {} in the registry {} (a validation id or a job id: see `brainloop validations --all` or `brainloop history`)",
                    shown::line(&a.id),
                    reg.shown_url()
                );
            };
            let vs = validations::fleet_of_job(&mut c, job, a.worker.as_deref())?;
            let ap = validations::fleet_applied_of(&mut c, job, a.worker.as_deref())?;
            let mut ws: Vec<String> = vs
                .iter()
                .map(|f| f.worker.clone())
                .chain(ap.iter().map(|x| x.worker.clone()))
                .collect();
            ws.sort();
            ws.dedup();
            let w = one_worker(job, &ws, a.worker.as_deref())?.to_string();
            (vs.into_iter().find(|f| f.worker == w), job, w)
        }
    };
    println!("job {job} on worker {}", shown::line(&worker));
    if let Some(f) = &f {
        print_validation(&mut c, f, now)?;
    }
    let applied = validations::fleet_applied_of(&mut c, job, Some(&worker))?;
    let undos = validations::undo_requests_of(&mut c, job, Some(&worker))?;
    if let Some(x) = applied.first() {
        print_applied(x, now);
    }
    for u in &undos {
        println!("{}", shown::line(&undo_line(u, now)));
    }
    let detail = match &f {
        Some(f) => validations::fleet_detail(&mut c, &f.validation.id)?,
        None => None,
    };
    match (detail.as_ref().map(|d| &d["change_set"]), applied.first()) {
        (Some(cs), _) if cs.is_object() => print_change_set(cs),
        (_, Some(x)) => match &x.diff {
            Some(d) => {
                println!("--- changes (as applied)");
                print!("{}", shown::block(d));
            }
            None => {
                println!("(the diff is no longer kept: the worker's retention pass dropped it)")
            }
        },
        _ => {
            if let Some(g) = detail
                .as_ref()
                .map(|d| &d["generated"])
                .filter(|g| g.is_object())
            {
                println!(
                    "--- generated content for {} ({} bytes{})",
                    shown::line(g["path"].as_str().unwrap_or("?")),
                    shown::line(&g["bytes"].to_string()),
                    if g["content_truncated"].as_bool() == Some(true) {
                        ", cut"
                    } else {
                        ""
                    }
                );
                print!("{}", shown::block(g["content"].as_str().unwrap_or("")));
            } else {
                println!("no change set waits or was applied (the command is asked up front, was denied or expired, or changed nothing)");
            }
        }
    }
    Ok(0)
}

fn print_validation(c: &mut registry::Client, f: &FleetValidation, now: i64) -> Result<()> {
    let v = &f.validation;
    println!(
        "validation {} [{}]  client {}  policy {}  risk {:.2}  set {}",
        shown::line(&v.id),
        shown::line(&v.status),
        shown::line(&v.client_id),
        shown::line(v.policy.as_deref().unwrap_or("?")),
        v.risk_score.unwrap_or(0.0),
        shown::line(v.permission_set.as_deref().unwrap_or("?"))
    );
    let decided = match v.decided_at {
        Some(t) => format!(
            ", {} {}",
            shown::line(&v.status),
            crate::time::local_ago(t, now)
        ),
        None => String::new(),
    };
    println!(
        "requested {}{decided}",
        crate::time::local_ago(v.requested_at, now)
    );
    println!(
        "command: {}",
        shown::block(v.command.as_deref().unwrap_or(""))
    );
    let reasons: Vec<String> = v
        .reasons
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    for r in reasons {
        println!("- {}", shown::line(&r));
    }
    if !f.signatures.is_empty() {
        println!("signatures: {}", shown::line(&f.signatures.join(" | ")));
    }
    for (d, refused) in validations::fleet_decisions_of(c, &v.id)? {
        let r = &d.row;
        let mut line = format!(
            "decided by {}: {}{}{} {}",
            r.decided_by,
            r.decision.map(|d| d.as_str()).unwrap_or("?"),
            if r.learn {
                format!(" --learn --scope {}", d.learn_scope)
            } else {
                String::new()
            },
            r.reason
                .as_deref()
                .map(|x| format!(" (reason: {x})"))
                .unwrap_or_default(),
            crate::time::local_ago(r.created_at, now)
        );
        if let Some(why) = refused {
            line.push_str(&format!(
                " — REFUSED by the worker, the human decides: {why}"
            ));
        }
        println!("{}", shown::line(&line));
    }
    if let Some(n) = validations::fleet_detail(c, &v.id)?
        .as_ref()
        .map(|d| &d["network"])
        .filter(|n| !n.is_null())
    {
        println!("wants hosts: {}", shown::line(&n.to_string()));
    }
    Ok(())
}

fn print_change_set(cs: &Value) {
    let s = |k: &str| cs[k].as_str().unwrap_or("").to_string();
    println!(
        "ran on an overlay (exit {}): {}",
        cs["exit_code"]
            .as_i64()
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into()),
        shown::line(&s("summary"))
    );
    println!("--- stdout\n{}", shown::block(&s("stdout")));
    println!("--- stderr\n{}", shown::block(&s("stderr")));
    if cs["output_truncated"].as_bool() == Some(true) {
        println!("(the output was cut)");
    }
    println!("--- changes");
    print!("{}", shown::block(&s("diff")));
    if cs["diff_truncated"].as_bool() == Some(true) {
        println!("(the diff stops at its cap)");
    }
}

fn print_applied(x: &FleetApplied, now: i64) {
    println!(
        "change set applied ({}) {}: {}",
        shown::line(&x.policy_used),
        crate::time::local_ago(x.applied_at, now),
        shown::line(&x.summary)
    );
    if let Some(by) = &x.decided_by {
        println!("applied on the decision of {}", shown::line(by));
    }
    match x.undone_at {
        Some(u) => println!("undone {}", crate::time::local_ago(u, now)),
        None => println!(
            "undo: brainloop undo {} --worker {}",
            x.job_id,
            shown::line(&x.worker)
        ),
    }
}

fn undo_line(u: &UndoRequest, now: i64) -> String {
    let mut line = format!(
        "undo request #{} by {} {}: {}",
        u.id,
        u.requested_by,
        crate::time::local_ago(u.requested_at, now),
        u.status
    );
    if let Some(o) = &u.outcome {
        line.push_str(&format!(" — {o}"));
    }
    if u.status == "pending" {
        line.push_str(&format!(
            " (worker {} carries it out when it next reaches the registry)",
            u.worker
        ));
    }
    line
}

/// `undo JOB` on the registry: a request to the worker that applied the change set; waits up
/// to `--wait` seconds for its outcome. Exit 0 done, 1 refused by the worker (nothing undone),
/// 3 still pending (the worker carries it out when it is back).
pub fn undo(reg: &Settings, a: &UndoArgs) -> Result<i32> {
    let mut c = connect(reg)?;
    let applied = validations::fleet_applied_of(&mut c, a.job, a.worker.as_deref())?;
    let ws: Vec<String> = applied.iter().map(|x| x.worker.clone()).collect();
    let worker = one_worker(a.job, &ws, a.worker.as_deref())
        .map_err(|e| {
            anyhow::anyhow!("{e:#} (only an applied change set a worker published can be undone)")
        })?
        .to_string();
    if let Some(x) = applied.iter().find(|x| x.worker == worker) {
        if let Some(t) = x.undone_at {
            bail!(
                "job {}'s change set on worker {} was already undone ({})",
                a.job,
                shown::line(&worker),
                crate::time::local(t)
            );
        }
    }
    let id = validations::request_undo(&mut c, &worker, a.job, &super::operator())?;
    println!(
        "undo request #{id}: worker {} undoes job {}'s change set on its own workspace",
        shown::line(&worker),
        a.job
    );
    let t0 = Instant::now();
    let wait = Duration::from_secs(a.wait);
    loop {
        let Some(u) = validations::undo_request(&mut c, id)? else {
            bail!("undo request #{id} is gone from the registry");
        };
        match u.status.as_str() {
            "done" => {
                println!(
                    "undid job {} on worker {}: {}",
                    a.job,
                    shown::line(&worker),
                    shown::line(u.outcome.as_deref().unwrap_or(""))
                );
                return Ok(0);
            }
            "failed" => {
                eprintln!(
                    "error: worker {} did not undo job {}: {}",
                    shown::line(&worker),
                    a.job,
                    shown::line(u.outcome.as_deref().unwrap_or(""))
                );
                return Ok(1);
            }
            _ => {}
        }
        if t0.elapsed() >= wait {
            println!(
                "undo request #{id} still pending after {} s: worker {} has not taken it (stopped or cut off from the registry?); it carries it out when it is back — `brainloop show {} --worker {}` says where it stands",
                a.wait,
                shown::line(&worker),
                a.job,
                shown::line(&worker)
            );
            return Ok(3);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
