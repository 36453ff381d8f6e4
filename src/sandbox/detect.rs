//! Start-up detection of the sandbox: runs the helper once on a probe command (the minimal set)
//! with every mechanism requested, Landlock at this kernel's ABI. The helper refuses to run a
//! command whose set's guarantees it cannot meet, so a probe that exits 0 proves the chain
//! (namespaces, /proc, Landlock enforced at that ABI, seccomp, the cgroup when one can be made)
//! works here. The result — mechanisms, Landlock level, and the per-set guarantee table of
//! `guarantees.rs` — is shown by `brainloop sandbox`, in `status`, in the heartbeat and in each
//! result's `sandbox` field.

use super::guarantees::{self, Mechanisms, SetReport};
use super::{cgroup, exec, landlock, seccomp, spec_for, Limits, SETUP_FAILED};
use crate::permset::PermissionSet;
use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Level {
    /// The probe ran confined: namespaces, Landlock at `landlock_abi`, seccomp all work.
    pub enforcing: bool,
    /// The Landlock ABI the rules are built for (the kernel's, capped at the newest this code
    /// knows, or lowered by the test override).
    pub landlock_abi: i64,
    /// The kernel's own Landlock ABI.
    pub landlock_kernel_abi: i64,
    /// `BRAINLOOP_TEST_LANDLOCK_ABI` lowered the level (tests only).
    pub landlock_abi_overridden: bool,
    /// User, mount, PID and network namespaces can be created.
    pub namespaces: bool,
    pub seccomp: bool,
    pub cgroup: Option<&'static str>,
    /// Why not, when not enforcing.
    pub error: Option<String>,
    /// Which limits apply to each command: `cgroup-v2 (pids.max, memory.max)` or the rlimits.
    pub limits: String,
    /// Per set: the guarantees, their mechanism, whether they hold, whether the set runs.
    pub sets: Vec<SetReport>,
}

impl Level {
    /// The mechanisms, as `guarantees.rs` takes them.
    pub fn mechanisms(&self) -> Mechanisms {
        Mechanisms {
            namespaces: self.namespaces,
            landlock_abi: self.landlock_abi,
            seccomp: self.seccomp,
        }
    }

    /// Short label: `landlock-v2+seccomp+namespaces+cgroup-v2` or `none (reason)`.
    pub fn label(&self) -> String {
        if self.enforcing {
            format!(
                "landlock-v{}{}+seccomp+namespaces{}",
                self.landlock_abi,
                if self.landlock_abi_overridden {
                    " (test override)"
                } else {
                    ""
                },
                self.cgroup
                    .map(|c| format!("+cgroup-{c}"))
                    .unwrap_or_else(|| "+rlimits".into())
            )
        } else {
            format!("none ({})", self.error.as_deref().unwrap_or("unknown"))
        }
    }

    /// What `brainloop status` shows (through the heartbeat): the label, the sets refused on
    /// this kernel, and which limits apply.
    pub fn status_line(&self) -> String {
        let refused: Vec<&str> = self
            .sets
            .iter()
            .filter(|s| !s.runs)
            .map(|s| s.set)
            .collect();
        format!(
            "{}{}; limits: {}",
            self.label(),
            if refused.is_empty() {
                String::new()
            } else {
                format!(
                    "; sets without their guarantees here: {} (see `brainloop sandbox`)",
                    refused.join(", ")
                )
            },
            self.limits
        )
    }

    /// Restates which limits are active with the configured values (the probe knows only
    /// the defaults).
    pub fn with_limits(mut self, l: &Limits) -> Level {
        self.limits = limits_line(self.cgroup, l);
        self
    }

    pub fn disabled(why: &str) -> Level {
        let cgroup = cgroup::flavour();
        let mut l = Level {
            enforcing: false,
            landlock_abi: landlock::effective_abi(),
            landlock_kernel_abi: landlock::kernel_abi(),
            landlock_abi_overridden: landlock::overridden().is_some(),
            namespaces: false,
            seccomp: seccomp::available(),
            cgroup,
            error: Some(why.to_string()),
            limits: limits_line(cgroup, &Limits::default()),
            sets: Vec::new(),
        };
        l.sets = guarantees::table(&l.mechanisms());
        l
    }
}

pub fn probe(helper: &Path) -> Level {
    let mut level = probe_inner(helper);
    level.sets = guarantees::table(&level.mechanisms());
    level
}

fn probe_inner(helper: &Path) -> Level {
    let mut level = Level::disabled("");
    level.error = None;
    if !exec::helper_exists(helper) {
        level.error = Some(format!("helper {} not found", helper.display()));
        return level;
    }
    let mut spec = spec_for(
        PermissionSet::Minimal,
        "exit 0",
        Path::new("/"),
        Path::new("/"),
        &[],
        None,
        Vec::new(),
        &Limits::default(),
    );
    spec.landlock_abi = Some(level.landlock_abi);
    let framed = match exec::frame_spec(&spec, None) {
        Ok(j) => j,
        Err(e) => {
            level.error = Some(e.to_string());
            return level;
        }
    };
    match run_helper(helper, &framed) {
        Ok(out) if out.status.success() => {
            level.enforcing = true;
            level.namespaces = true;
        }
        Ok(out) => {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // The helper sets namespaces up first: any later failure means they work.
            level.namespaces = out.status.code() == Some(SETUP_FAILED)
                && ![
                    "unshare",
                    "uid_map",
                    "gid_map",
                    "setgroups",
                    "make mounts private",
                ]
                .iter()
                .any(|k| msg.contains(k));
            level.error = Some(
                if out.status.code() == Some(SETUP_FAILED) && !msg.is_empty() {
                    msg
                } else {
                    format!("probe exited {:?}: {msg}", out.status.code())
                },
            );
        }
        Err(e) => level.error = Some(format!("cannot run the helper: {e}")),
    }
    level
}

/// Runs the helper with `framed` (`exec::frame_spec`) on its stdin (`exec::run_from_stdin`).
fn run_helper(helper: &Path, framed: &[u8]) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    let mut child = Command::new(helper)
        .arg("sandbox-exec")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that fails before reading shows in its exit status and stderr.
        let _ = stdin.write_all(framed);
    }
    child.wait_with_output()
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// Which limits bind each command, with their values: what `brainloop sandbox` and `status`
/// show. Without a writable cgroup the job's memory and process limits are NOT enforced as
/// such; the line says what replaces them and how to get them back.
pub fn limits_line(cgroup: Option<&str>, l: &Limits) -> String {
    let common = format!(
        "open files {}, file size {}, CPU {} s (rlimits)",
        l.max_open_files,
        size(l.max_file_size_bytes),
        l.max_cpu_seconds
    );
    if let Some(c) = cgroup {
        return format!(
            "cgroup-{c} per job: processes {}, memory {}; {common}",
            l.max_processes,
            size(l.max_memory_bytes)
        );
    }
    let nproc = match l.rlimit_nproc_fallback.filter(|&n| n > 0) {
        Some(n) => format!(
            "processes {n} per user (RLIMIT_NPROC, shared with the worker: a fork bomb stalls \
             other commands until its timeout)"
        ),
        None => "processes UNLIMITED (rlimit_nproc_fallback = 0)".into(),
    };
    let mem = match l.rlimit_as_fallback.filter(|&n| n > 0) {
        Some(n) => format!("address space {} per process (RLIMIT_AS)", size(n)),
        None => "memory UNLIMITED (rlimit_as_fallback = 0)".into(),
    };
    format!(
        "no writable cgroup, so not the job's {} of memory nor {} processes: {nproc}, {mem}; \
         {common}. Give the service Delegate=yes (the shipped unit does) for per-job cgroups",
        size(l.max_memory_bytes),
        l.max_processes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_line_says_what_binds_and_what_does_not() {
        let l = Limits {
            max_memory_bytes: 512 << 20,
            ..Limits::default()
        };
        let with = limits_line(Some("v2"), &l);
        assert!(with.contains("memory 512 MiB"), "{with}");
        assert!(with.contains("processes 256"), "{with}");
        let without = limits_line(None, &l);
        assert!(without.contains("not the job's 512 MiB"), "{without}");
        assert!(
            without.contains("address space 16 GiB per process"),
            "{without}"
        );
        assert!(without.contains("Delegate=yes"), "{without}");
        let off = limits_line(
            None,
            &Limits {
                rlimit_as_fallback: Some(0),
                rlimit_nproc_fallback: None,
                ..l
            },
        );
        assert!(off.contains("memory UNLIMITED"), "{off}");
        assert!(off.contains("processes UNLIMITED"), "{off}");
    }
}
