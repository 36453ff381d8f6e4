//! Commands must not outlive the worker (DESIGN §3: after a crash no command of the previous run
//! may still be running when the new one starts). Each running command's process group is
//! recorded in lifecycle.db (`config` key `pgid:<job>`: pgid, session, leader start time); at
//! start-up every process still in a recorded group — same session, started no earlier than the
//! recorded leader — is killed, then the records are cleared. (`PR_SET_PDEATHSIG` already kills
//! bash itself when the worker dies; this catches what bash left behind.)

use crate::db::{write_tx, Db};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rusqlite::params;

/// (pgrp, session, start time in clock ticks) of a process, from /proc/<pid>/stat.
pub fn proc_stat(pid: i32) -> Option<(i32, i32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields after comm: state(0) ppid(1) pgrp(2) session(3) ... starttime(19)
    Some((
        f.get(2)?.parse().ok()?,
        f.get(3)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
    ))
}

/// Whether any live (non-zombie) process is in process group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            return false;
        };
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
            return false;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        f.first() != Some(&"Z") && f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
    })
}

pub fn record(db: &Db, job_id: i64, pgid: i32) {
    let Some((_, sid, start)) = proc_stat(pgid) else {
        return;
    };
    let res = db.with(|c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO config(key, value, updated_at) VALUES (?1, ?2, ?3)",
                params![
                    format!("pgid:{job_id}"),
                    format!("{pgid}:{sid}:{start}"),
                    crate::time::now_ms()
                ],
            )
        })?)
    });
    if let Err(e) = res {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot record a command's process group"
        );
    }
}

pub fn forget(db: &Db, job_id: i64) {
    let _ = db.with(|c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "DELETE FROM config WHERE key = ?1",
                [format!("pgid:{job_id}")],
            )
        })?)
    });
}

/// Kills what the previous run left; returns the number of processes killed.
pub fn reap_previous(db: &Db) -> usize {
    let records: Vec<(String, String)> = db
        .with(|c| {
            let mut s = c.prepare("SELECT key, value FROM config WHERE key LIKE 'pgid:%'")?;
            let v = s
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(v)
        })
        .unwrap_or_default();
    let mut killed = 0;
    for (key, value) in &records {
        let parts: Vec<&str> = value.split(':').collect();
        let (Some(pgid), Some(sid), Some(start)) = (
            parts.first().and_then(|v| v.parse::<i32>().ok()),
            parts.get(1).and_then(|v| v.parse::<i32>().ok()),
            parts.get(2).and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                if let Some((pgrp, s, st)) = proc_stat(pid) {
                    if pgrp == pgid
                        && s == sid
                        && st >= start
                        && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
                    {
                        killed += 1;
                    }
                }
            }
        }
        tracing::info!(
            key,
            "cleared a command process group left by the previous run"
        );
    }
    if !records.is_empty() {
        let _ = db.with(|c| {
            Ok(write_tx(c, |tx| {
                tx.execute("DELETE FROM config WHERE key LIKE 'pgid:%'", [])
            })?)
        });
    }
    killed
}
