//! A cgroup per job for process and memory limits: cgroup v2 (`pids.max`, `memory.max`,
//! `memory.swap.max`) when the worker's own cgroup is writable (systemd `Delegate=yes`), else the
//! cgroup v1 `pids` and `memory` hierarchies when writable. The worker creates it before spawning
//! the helper (which joins it first) and removes it when the job ends. `None` when neither works:
//! the limits then fall back to rlimits (see `Limits`).
//!
//! Delegation (systemd `Delegate=`, issue 20): a v2 cgroup with processes cannot hold job
//! cgroups, and the delegated service cgroup holds the worker, so the worker moves itself into a
//! `brainloop-worker` leaf and then enables `+pids +memory` ([`delegate_v2`]); the base of job
//! cgroups is computed once (the worker's cgroup before the move). Nothing is touched when other
//! processes share the cgroup (the rlimit fallbacks apply then).

use super::Limits;
use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, PartialEq)]
pub struct JobCgroup {
    pub dirs: Vec<PathBuf>,
}

fn own_path(controller: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    s.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
        let matches = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_string())
    })
}

/// Which cgroup flavour this process can create children in.
pub fn flavour() -> Option<&'static str> {
    if v2_delegated_base().is_some() {
        Some("v2")
    } else if v1_base("pids").is_some() {
        Some("v1")
    } else {
        None
    }
}

fn writable_dir(p: &Path) -> bool {
    nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn v2_base() -> Option<PathBuf> {
    let root = Path::new(ROOT);
    if !root.join("cgroup.controllers").exists() {
        return None;
    }
    let rel = own_path("")?;
    let base = root.join(rel.trim_start_matches('/'));
    let ctrls = std::fs::read_to_string(base.join("cgroup.controllers")).ok()?;
    (ctrls.split_whitespace().any(|c| c == "pids") && writable_dir(&base)).then_some(base)
}

fn v1_base(controller: &str) -> Option<PathBuf> {
    let root = Path::new(ROOT).join(controller);
    if !root.join("cgroup.procs").exists() {
        return None;
    }
    let rel = own_path(controller)?;
    let base = root.join(rel.trim_start_matches('/'));
    writable_dir(&base).then_some(base)
}

/// The v2 base with `pids` (and `memory` when available) enabled for its children, computed
/// once per process (see the module doc on delegation); `None` (logged once) when it cannot be.
fn v2_delegated_base() -> Option<PathBuf> {
    static BASE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let base = v2_base()?;
        delegate_v2(&base)
            .map_err(|why| {
                tracing::warn!(cgroup = %base.display(), %why, "no per-job cgroups: the rlimit fallbacks apply");
            })
            .ok()
            .map(|()| base)
    })
    .clone()
}

/// Makes the worker's own v2 cgroup (`base`, as systemd's `Delegate=yes` leaves it) able to
/// hold job cgroups. A cgroup with processes cannot: `memory` refuses to be enabled (EBUSY), and
/// `pids` alone (a threaded controller) turns it into a thread root whose children refuse
/// processes (EOPNOTSUPP, seen on Debian's 6.1 in the kernel matrix). So the worker moves itself
/// into the leaf `brainloop-worker` first — with the controllers off while it moves, as a
/// previous run may have left them on — and then enables them. Refused, touching nothing, when
/// other processes share the cgroup (a worker started from a login shell).
fn delegate_v2(base: &Path) -> Result<(), String> {
    let me = std::process::id();
    let procs = std::fs::read_to_string(base.join("cgroup.procs"))
        .map_err(|e| format!("cannot read cgroup.procs: {e}"))?;
    let others = procs
        .split_whitespace()
        .filter(|p| p.parse::<u32>().ok() != Some(me))
        .count();
    if others > 0 {
        return Err(format!(
            "{others} other process(es) share the worker's cgroup (run it as a service with \
             Delegate=yes for per-job cgroups)"
        ));
    }
    let control = base.join("cgroup.subtree_control");
    let _ = std::fs::write(&control, "-memory");
    let _ = std::fs::write(&control, "-pids");
    let leaf = base.join("brainloop-worker");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), me.to_string())
        .map_err(|e| format!("cannot move the worker into {}: {e}", leaf.display()))?;
    let available = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    for c in ["pids", "memory"] {
        if available.split_whitespace().any(|x| x == c) {
            std::fs::write(&control, format!("+{c}"))
                .map_err(|e| format!("cannot enable {c} for the job cgroups: {e}"))?;
        }
    }
    Ok(())
}

/// Removes the job cgroups (and warm helpers' cgroups) that workers no longer running left
/// behind — a worker killed with SIGKILL removes none of its own — killing anything still in
/// them: a command must not outlive its worker. A job cgroup is named `brainloop-<pid>-…` after
/// the worker that made it; those of a live process (this worker, another instance) are left
/// alone. Returns how many were removed. Blocking (call it off the runtime threads).
pub fn sweep_dead() -> usize {
    let me = std::process::id();
    let mut bases: Vec<PathBuf> = v2_delegated_base().into_iter().collect();
    bases.extend(["pids", "memory"].into_iter().filter_map(v1_base));
    let mut removed = 0;
    for base in bases {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = owner_pid(&name.to_string_lossy()) else {
                continue;
            };
            let alive = pid == me || Path::new("/proc").join(pid.to_string()).exists();
            if !alive && e.path().is_dir() {
                JobCgroup {
                    dirs: vec![e.path()],
                }
                .remove();
                removed += usize::from(!e.path().exists());
            }
        }
    }
    removed
}

/// The worker pid in a job cgroup's name (`brainloop-<pid>-<job or warmN>`).
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix("brainloop-")?.split_once('-')?;
    (!rest.is_empty()).then_some(())?;
    pid.parse().ok()
}

impl JobCgroup {
    /// Creates the job's cgroup(s) with the limits written; `None` if none can be made.
    pub fn create(name: &str, limits: &Limits) -> Option<JobCgroup> {
        if let Some(base) = v2_delegated_base() {
            let dir = base.join(name);
            let _ = std::fs::create_dir(&dir);
            let ok = std::fs::write(dir.join("pids.max"), limits.max_processes.to_string()).is_ok();
            let _ = std::fs::write(dir.join("memory.max"), limits.max_memory_bytes.to_string());
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            if ok {
                return Some(JobCgroup { dirs: vec![dir] });
            }
            let _ = std::fs::remove_dir(&dir);
        }
        let mut dirs = Vec::new();
        if let Some(base) = v1_base("pids") {
            let dir = base.join(name);
            let _ = std::fs::create_dir(&dir);
            if std::fs::write(dir.join("pids.max"), limits.max_processes.to_string()).is_ok() {
                dirs.push(dir);
            }
        }
        if let Some(base) = v1_base("memory") {
            let dir = base.join(name);
            let _ = std::fs::create_dir(&dir);
            if std::fs::write(
                dir.join("memory.limit_in_bytes"),
                limits.max_memory_bytes.to_string(),
            )
            .is_ok()
            {
                let _ = std::fs::write(
                    dir.join("memory.memsw.limit_in_bytes"),
                    limits.max_memory_bytes.to_string(),
                );
                dirs.push(dir);
            }
        }
        (!dirs.is_empty()).then_some(JobCgroup { dirs })
    }

    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Kills whatever is left and removes the directories (retries while processes exit).
    pub fn remove(&self) {
        for d in &self.dirs {
            if let Ok(pids) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for p in pids
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_cgroup_names_the_worker_that_made_it() {
        assert_eq!(owner_pid("brainloop-123-7"), Some(123));
        assert_eq!(owner_pid("brainloop-123-warm4"), Some(123));
        for other in [
            "brainloop-worker",
            "brainloop-123-",
            "brainloop-x-1",
            "user.slice",
            "brainloop",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
    }
}
