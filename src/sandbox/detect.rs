//! Start-up detection of the sandbox: runs the helper once on a probe command with every
//! mechanism requested. The helper refuses to run anything it cannot confine fully, so a probe
//! that exits 0 proves the whole chain (namespaces, /proc, Landlock fully enforced, seccomp, the
//! cgroup when one can be made) works here. The result is shown in `status`, in the heartbeat and
//! in each result's `sandbox` field.

use super::{cgroup, exec, landlock, seccomp, spec_for, Limits, Set, SETUP_FAILED};
use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Level {
    /// Every mechanism works: commands run confined.
    pub enforcing: bool,
    pub landlock_abi: i64,
    pub seccomp: bool,
    pub cgroup: Option<&'static str>,
    /// Why not, when not enforcing.
    pub error: Option<String>,
}

impl Level {
    /// Short label: `landlock-v7+seccomp+userns/pidns/netns+cgroup-v1` or `none (reason)`.
    pub fn label(&self) -> String {
        if self.enforcing {
            format!(
                "landlock-v{}+seccomp+namespaces{}",
                self.landlock_abi,
                self.cgroup
                    .map(|c| format!("+cgroup-{c}"))
                    .unwrap_or_else(|| "+rlimits".into())
            )
        } else {
            format!("none ({})", self.error.as_deref().unwrap_or("unknown"))
        }
    }

    pub fn disabled(why: &str) -> Level {
        Level {
            enforcing: false,
            landlock_abi: landlock::kernel_abi(),
            seccomp: seccomp::available(),
            cgroup: cgroup::flavour(),
            error: Some(why.to_string()),
        }
    }
}

pub fn probe(helper: &Path) -> Level {
    let mut level = Level::disabled("");
    level.error = None;
    if level.landlock_abi < 1 {
        level.error = Some("Landlock unsupported by this kernel".into());
        return level;
    }
    if !level.seccomp {
        level.error = Some("seccomp unavailable".into());
        return level;
    }
    if !exec::helper_exists(helper) {
        level.error = Some(format!("helper {} not found", helper.display()));
        return level;
    }
    let spec = spec_for(
        Set::Minimal,
        "exit 0",
        Path::new("/"),
        Path::new("/"),
        &[],
        None,
        Vec::new(),
        &Limits::default(),
    );
    let json = match serde_json::to_string(&spec) {
        Ok(j) => j,
        Err(e) => {
            level.error = Some(e.to_string());
            return level;
        }
    };
    match Command::new(helper)
        .args(["sandbox-exec", "--spec", &json])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => level.enforcing = true,
        Ok(out) => {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
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
