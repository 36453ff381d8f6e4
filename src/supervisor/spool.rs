//! The results spool (issue 34): **the one place results go when output.db cannot take them
//! during a shutdown**, and the one reader that puts them back. During the drain the result writer
//! (`finisher`) writes a group it cannot commit to output.db / lifecycle.db (locked, unwritable)
//! here instead — one JSON line per group in `brainloop.results.spool` beside the databases,
//! appended and fsynced before the group counts as written — and from then on every later
//! group too, so the spool keeps their order. At the next start-up, before recovery and before
//! anything is claimed (`startup`), [`replay`] writes every spooled group through the same
//! transactions as the finisher (`finisher::write_group`: results, then lifecycle and staged
//! audit rows), then removes the file. A job that finished during the drain therefore has its
//! result, and never runs twice; a replay that cannot write stops the start-up (nothing is
//! claimed before the spool is empty). The replay is idempotent (a final result is never
//! overwritten), so a crash in the middle of it only replays again.
//!
//! `status` reads [`pending`] (`cli::diagnose`): spooled results are not in output.db yet.

use super::finisher::{Disposition, Finished};
use crate::db::metadata::AuditRow;
use crate::db::output::{JobStatus, ResultRow};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The spool's file name, in the data dir.
pub const FILE_NAME: &str = "brainloop.results.spool";

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Appends `group` as one line and fsyncs it (and the directory, when the file is new).
pub fn append(data_dir: &Path, group: &[Finished]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let p = path(data_dir);
    let new = !p.exists();
    let mut line = serde_json::to_string(&json!({
        "rows": group.iter().map(encode).collect::<Vec<_>>()
    }))?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&p)
        .with_context(|| format!("cannot open the results spool {}", p.display()))?;
    f.write_all(line.as_bytes())
        .and_then(|_| f.sync_all())
        .with_context(|| format!("cannot write the results spool {}", p.display()))?;
    if new {
        std::fs::File::open(data_dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot sync {}", data_dir.display()))?;
    }
    Ok(())
}

/// What waits in the spool: (results, groups); a torn or foreign line counts as a group
/// without results. (0, 0): none, or no spool. `status` reports it (`cli::diagnose`).
pub fn pending(data_dir: &Path) -> Result<(usize, usize)> {
    match std::fs::read_to_string(path(data_dir)) {
        Ok(s) => Ok(counts(&s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
        Err(e) => Err(e).context("cannot read the results spool"),
    }
}

fn counts(text: &str) -> (usize, usize) {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .fold((0, 0), |(rows, groups), l| {
            let n = serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["rows"].as_array().map(|r| r.len()))
                .unwrap_or(0);
            (rows + n, groups + 1)
        })
}

/// Writes every spooled group with `write` (in order), then removes the spool. Returns how many
/// jobs' rows were replayed. An error leaves the spool in place (it is replayed again).
pub fn replay(data_dir: &Path, write: impl Fn(&[Finished]) -> Result<()>) -> Result<usize> {
    let p = path(data_dir);
    let text = match std::fs::read_to_string(&p) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
    };
    let mut rows = 0;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for (i, line) in lines.iter().enumerate() {
        let group = match decode_group(line) {
            Ok(g) => g,
            // A torn last line: the worker died inside its append, before the group counted
            // as written (its jobs are recovered as interrupted claims).
            Err(e) if i + 1 == lines.len() && !text.ends_with('\n') => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "ignoring a torn last line of the results spool"
                );
                break;
            }
            Err(e) => return Err(e).with_context(|| format!("line {} of {}", i + 1, p.display())),
        };
        write(&group).with_context(|| {
            format!(
                "cannot replay the results spooled at the last shutdown ({}) into output.db and \
                 lifecycle.db; nothing is claimed before they are in: make the databases \
                 writable (another process holding a lock? disk full?) and start again",
                p.display()
            )
        })?;
        rows += group.len();
    }
    std::fs::remove_file(&p).with_context(|| format!("cannot remove {}", p.display()))?;
    Ok(rows)
}

fn disposition_name(d: Disposition) -> &'static str {
    match d {
        Disposition::Started => "started",
        Disposition::Final => "final",
        Disposition::Requeue => "requeue",
        Disposition::Pending => "pending",
    }
}

fn encode(f: &Finished) -> Value {
    let r = &f.row;
    json!({
        "disposition": disposition_name(f.disposition),
        "job_id": r.job_id,
        "action": r.action,
        "client_id": r.client_id,
        "status": r.status.as_str(),
        "result": r.result,
        "error": r.error,
        "attempts": r.attempts,
        "duration_ms": r.duration_ms,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "audit": f.audit.as_ref().map(|a| json!({
            "timestamp": a.timestamp,
            "job_id": a.job_id,
            "client_id": a.client_id,
            "action": a.action,
            "params_hash": a.params_hash,
            "status": a.status,
            "duration_ms": a.duration_ms,
            "permission_set": a.permission_set,
        })),
    })
}

fn decode_group(line: &str) -> Result<Vec<Finished>> {
    let v: Value = serde_json::from_str(line).context("not JSON")?;
    let Some(rows) = v["rows"].as_array() else {
        bail!("no rows");
    };
    rows.iter().map(decode).collect()
}

fn decode(v: &Value) -> Result<Finished> {
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let i = |k: &str| v[k].as_i64();
    let disposition = match v["disposition"].as_str() {
        Some("started") => Disposition::Started,
        Some("final") => Disposition::Final,
        Some("requeue") => Disposition::Requeue,
        Some("pending") => Disposition::Pending,
        other => bail!("unknown disposition {other:?}"),
    };
    let status = v["status"]
        .as_str()
        .and_then(JobStatus::parse)
        .with_context(|| format!("unknown status {}", v["status"]))?;
    let row = ResultRow {
        job_id: i("job_id").context("no job_id")?,
        action: s("action"),
        client_id: s("client_id").context("no client_id")?,
        status,
        result: s("result"),
        error: s("error"),
        attempts: i("attempts").unwrap_or(0) as u32,
        duration_ms: i("duration_ms"),
        started_at: i("started_at"),
        finished_at: i("finished_at"),
    };
    let a = &v["audit"];
    let audit = if a.is_null() {
        None
    } else {
        let s = |k: &str| a[k].as_str().map(str::to_string);
        Some(AuditRow {
            timestamp: a["timestamp"].as_i64().context("audit without timestamp")?,
            job_id: a["job_id"].as_i64(),
            client_id: s("client_id").unwrap_or_default(),
            action: s("action"),
            params_hash: s("params_hash"),
            status: s("status").unwrap_or_default(),
            duration_ms: a["duration_ms"].as_i64(),
            permission_set: s("permission_set"),
        })
    };
    Ok(Finished {
        row,
        disposition,
        audit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn pending_counts_results_and_groups_a_torn_line_a_group_without_results() {
        assert_eq!(counts(""), (0, 0));
        assert_eq!(counts("{\"rows\":[{},{}]}\n{\"rows\":[{}]}\n{\"ro"), (3, 3));
        let d = tempfile::tempdir().unwrap();
        assert_eq!(pending(d.path()).unwrap(), (0, 0));
    }

    fn finished(id: i64, d: Disposition, status: JobStatus) -> Finished {
        Finished {
            row: ResultRow {
                job_id: id,
                action: Some("sleep".into()),
                client_id: "local".into(),
                status,
                result: Some("{\"ok\":true}".into()),
                error: None,
                attempts: 1,
                duration_ms: Some(12),
                started_at: Some(1),
                finished_at: Some(2),
            },
            disposition: d,
            audit: Some(AuditRow {
                timestamp: 3,
                job_id: Some(id),
                client_id: "local".into(),
                action: Some("sleep".into()),
                params_hash: Some("h".into()),
                status: status.as_str().into(),
                duration_ms: Some(12),
                permission_set: None,
            }),
        }
    }

    #[test]
    fn groups_are_replayed_in_order_once_then_the_spool_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, &[finished(1, Disposition::Final, JobStatus::Succeeded)]).unwrap();
        append(
            d,
            &[
                finished(2, Disposition::Requeue, JobStatus::Queued),
                finished(3, Disposition::Started, JobStatus::Running),
            ],
        )
        .unwrap();
        assert_eq!(pending(d).unwrap(), (3, 2));
        let seen = RefCell::new(Vec::new());
        // A failing write keeps the spool.
        let err = replay(d, |_| anyhow::bail!("database is locked")).unwrap_err();
        assert!(format!("{err:#}").contains("nothing is claimed"), "{err:#}");
        assert_eq!(pending(d).unwrap(), (3, 2));
        let n = replay(d, |g| {
            seen.borrow_mut().push(
                g.iter()
                    .map(|f| (f.row.job_id, f.disposition, f.row.status))
                    .collect::<Vec<_>>(),
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            seen.into_inner(),
            vec![
                vec![(1, Disposition::Final, JobStatus::Succeeded)],
                vec![
                    (2, Disposition::Requeue, JobStatus::Queued),
                    (3, Disposition::Started, JobStatus::Running)
                ]
            ]
        );
        assert_eq!(pending(d).unwrap(), (0, 0));
        assert_eq!(replay(d, |_| unreachable!()).unwrap(), 0);
    }

    #[test]
    fn a_torn_last_line_is_skipped_but_a_corrupt_middle_line_stops_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, &[finished(1, Disposition::Final, JobStatus::Failed)]).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path(d))
            .unwrap();
        f.write_all(b"{\"rows\":[{\"disp").unwrap();
        let n = replay(d, |g| {
            assert_eq!(g[0].row.job_id, 1);
            assert_eq!(g[0].audit.as_ref().unwrap().status, "failed");
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1);
        std::fs::write(path(d), "garbage\n{\"rows\":[]}\n").unwrap();
        assert!(replay(d, |_| Ok(())).is_err());
        assert!(path(d).exists());
    }
}
