//! Commands must not outlive the worker (DESIGN §3: after a crash no command of the previous run
//! may still be running when the new one starts). Each running command's process group is
//! recorded as a small file `running/<job_id>` in the data dir (pgid, session, leader start time;
//! a file is two syscalls, cheaper than a database commit per command); at start-up every process
//! still in a recorded group — same session, started no earlier than the recorded leader — is
//! killed, then the records are removed. (`PR_SET_PDEATHSIG` already kills
//! bash itself when the worker dies; this catches what bash left behind.)

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;

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

/// The state letter of a process (`R`, `S`, `Z`, ...), from /proc/<pid>/stat.
fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].chars().next()
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

pub const DIR: &str = "running";

/// Records a command's live process group. An error means the record could not be written: the
/// caller stops the command (fail closed, issue 21 — a crash would otherwise leave it running
/// unseen). A group already gone needs no record.
pub fn record(data_dir: &Path, job_id: i64, pgid: i32) -> std::io::Result<()> {
    let Some((_, sid, start)) = proc_stat(pgid) else {
        return Ok(());
    };
    let dir = data_dir.join(DIR);
    std::fs::create_dir_all(&dir).and_then(|_| {
        std::fs::write(
            dir.join(job_id.to_string()),
            format!("{pgid}:{sid}:{start}"),
        )
    })
}

pub fn forget(data_dir: &Path, job_id: i64) {
    let _ = std::fs::remove_file(data_dir.join(DIR).join(job_id.to_string()));
}

/// Kills what the previous run left; returns the number of processes killed.
pub fn reap_previous(data_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(data_dir.join(DIR)) else {
        return 0;
    };
    let mut killed = 0;
    for e in entries.flatten() {
        let value = std::fs::read_to_string(e.path()).unwrap_or_default();
        let parts: Vec<&str> = value.trim().split(':').collect();
        if let (Some(pgid), Some(sid), Some(start)) = (
            parts.first().and_then(|v| v.parse::<i32>().ok()),
            parts.get(1).and_then(|v| v.parse::<i32>().ok()),
            parts.get(2).and_then(|v| v.parse::<u64>().ok()),
        ) {
            if let Ok(dir) = std::fs::read_dir("/proc") {
                for p in dir.flatten() {
                    let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok())
                    else {
                        continue;
                    };
                    if let Some((pgrp, s, st)) = proc_stat(pid) {
                        // A zombie (the killed worker's helpers, not yet reaped by init) is
                        // not a command left running: do not count it.
                        if pgrp == pgid
                            && s == sid
                            && st >= start
                            && !matches!(proc_state(pid), Some('Z' | 'X') | None)
                            && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
                        {
                            killed += 1;
                        }
                    }
                }
            }
            tracing::info!(job = %e.file_name().to_string_lossy(), pgid, "cleared a command process group left by the previous run");
        }
        let _ = std::fs::remove_file(e.path());
    }
    killed
}
