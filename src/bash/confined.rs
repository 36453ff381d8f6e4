//! The confined run (issue 32): the one way a command runs — a job's command directly in its
//! permission set, on an overlay of the workspace, or an operator hook. In order: the sandbox
//! prepared (`sandbox::prepare`), the egress proxy started when the set may reach the network
//! (the run's rules, `egress::job`), the process tree run (`executor`, its group recorded in
//! `leftovers` for a job), then the clean-up (leftovers forgotten, the sandbox's cgroup and tmp
//! dir removed, the proxy stopped and its connections recorded with the job). What happened comes
//! back as a typed [`Report`]; the text of "nothing ran" is written here only.
//!
//! It never asks a human, never records a run in the registry and never writes evidence: what
//! to do with the report is `bash::plan::after_run`'s decision, carried out by `bash::command`.

use super::executor::{self, ExecRequest, ExecResult};
use super::leftovers;
use crate::egress::job::{Scope, Who};
use crate::egress::proxy::{Connection, JobProxy};
use crate::egress::rules::Rules;
use crate::egress::EgressConfig;
use crate::permset::PermissionSet;
use crate::sandbox::detect::Level;
use crate::sandbox::{OverlaySpec, SandboxConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a confined run needs of the worker: how confinement works here, and when to stop.
#[derive(Clone, Copy)]
pub struct Confinement<'a> {
    pub level: &'a Level,
    pub sandbox: &'a SandboxConfig,
    pub egress: &'a EgressConfig,
    /// `[secrets]`: what a job's run may carry through its proxy (its client's SECRET grants).
    pub secrets: &'a crate::egress::secrets::Secrets,
    pub data_dir: &'a Path,
    /// Fired at shutdown: the run stops, and the report says `Cancelled`.
    pub cancel: &'a CancellationToken,
}

/// Where the run may connect.
pub enum Egress<'a> {
    /// Nowhere: no proxy (a set without network, where the sandbox leaves no way out).
    Closed,
    /// The job's rules for this command (`egress::job::rules`); the connections are recorded
    /// with the job.
    Job {
        who: Who<'a>,
        command_hash: &'a str,
        scope: Scope,
    },
    /// Fixed rules (an operator hook); the connections are not recorded.
    Rules(Rules),
}

/// One run: the command, where and how it runs.
pub struct Run<'a> {
    pub command: &'a str,
    pub workdir: &'a Path,
    pub workspace: &'a Path,
    pub set: PermissionSet,
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
    /// Names the run's sandbox (cgroup, tmp dir): the job's id, negative for a hook.
    pub tag: i64,
    /// Directories readable besides the set's (a hook's script).
    pub read: Vec<PathBuf>,
    /// Directories writable besides the set's (an overlay run's runner cache, `bash::runners`).
    pub write: Vec<PathBuf>,
    /// Written to the command's stdin (a hook's payload); `None`: /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Run on this overlay of the workspace (needs an enforcing sandbox).
    pub overlay: Option<OverlaySpec>,
    /// Record the process group under `leftovers` (a job's command: a crash cannot leave it).
    pub leftovers: bool,
    pub egress: Egress<'a>,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// It ran to an end: any exit code, a signal, a timeout.
    Ran(ExecResult),
    /// The worker stopped it (shutdown): it will run again.
    Cancelled,
    /// The overlay's cap stopped it (the helper's record: `bytes LIMIT MEASURED`, …).
    OverCap(String),
    /// Nothing of it ran.
    NotRun(NotRun),
}

/// Why nothing ran.
#[derive(Debug, Clone, PartialEq)]
pub struct NotRun {
    /// For the job's error.
    pub message: String,
    /// The sandbox could not mount the overlay here (the data dir's file system cannot hold an
    /// upper layer): the command itself could run without it.
    pub overlay_unavailable: bool,
}

impl NotRun {
    fn new(message: impl Into<String>) -> NotRun {
        NotRun {
            message: message.into(),
            overlay_unavailable: false,
        }
    }
}

/// What a confined run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub ended: Ended,
    /// What the result's `sandbox` field says (`+ overlay` on the overlay).
    pub label: String,
    /// What the egress proxy saw (allowed, refused, failed); empty without a proxy.
    pub connections: Vec<Connection>,
}

impl Report {
    fn not_run(message: impl Into<String>) -> Report {
        Report {
            ended: Ended::NotRun(NotRun::new(message)),
            label: String::new(),
            connections: Vec::new(),
        }
    }
}

/// Runs one command confined; see the module's doc for the steps.
pub async fn run(c: &Confinement<'_>, run: Run<'_>) -> Report {
    let prepared = crate::sandbox::prepare(
        c.level,
        c.sandbox,
        run.set,
        run.command,
        run.workdir,
        run.workspace,
        run.env.clone(),
        c.data_dir,
        run.tag,
    );
    let mut prepared = match prepared {
        Ok(p) => p,
        Err(e) => return Report::not_run(e),
    };
    use crate::sandbox::marks;
    marks::mark("prepared");
    let overlay = run.overlay.is_some();
    let over_cap_file = run.overlay.as_ref().and_then(|o| o.over_cap_file.clone());
    let proxy = match prepared.sandbox.as_mut() {
        Some((_, spec)) => {
            spec.read.extend(run.read.iter().cloned());
            spec.write.extend(run.write.iter().cloned());
            if run.overlay.is_some() {
                spec.overlay = run.overlay.clone();
            }
            start_proxy(c, &run.egress, spec).await
        }
        None if overlay => Err(
            "the overlay needs the sandbox, which is not enforcing here; nothing ran".to_string(),
        ),
        None => Ok(None),
    };
    let proxy = match proxy {
        Ok(p) => p,
        Err(e) => {
            prepared.finish_in_background();
            return Report::not_run(e);
        }
    };
    marks::mark("egress");
    // The helper's own timing marks (`sandbox::marks`), when the log asks for them.
    let marks_file = match prepared.sandbox.as_mut() {
        Some((_, spec)) => {
            spec.marks = marks::new_file(c.data_dir, run.tag);
            spec.marks.clone()
        }
        None => None,
    };
    let label = if overlay {
        format!("{} + overlay", prepared.label)
    } else {
        prepared.label.clone()
    };
    let req = ExecRequest {
        command: run.command.to_string(),
        workdir: run.workdir.to_path_buf(),
        timeout: run.timeout,
        sandbox: prepared.sandbox.clone(),
    };
    let (dd, tag, track) = (c.data_dir, run.tag, run.leftovers);
    let res = executor::execute_with(&req, run.stdin, c.cancel, |pgid| {
        if track {
            leftovers::record(dd, tag, pgid)
        } else {
            Ok(())
        }
    })
    .await;
    if track {
        leftovers::forget(dd, tag);
    }
    prepared.finish_in_background();
    let connections = match proxy {
        Some(p) => finish_proxy(&run.egress, p).await,
        None => Vec::new(),
    };
    let over_cap = over_cap_file.and_then(|f| std::fs::read_to_string(f).ok());
    if let Some(f) = marks_file {
        marks::merge_file(&f);
    }
    marks::mark("torn");
    Report {
        ended: ended(res, over_cap),
        label,
        connections,
    }
}

/// The proxy of a run that has a sandbox, when its egress is not closed.
async fn start_proxy(
    c: &Confinement<'_>,
    egress: &Egress<'_>,
    spec: &mut crate::sandbox::Spec,
) -> Result<Option<JobProxy>, String> {
    let (rules, secrets) = match egress {
        Egress::Closed => return Ok(None),
        Egress::Job {
            who,
            command_hash,
            scope,
        } => (
            crate::egress::job::rules(who, command_hash, *scope).await?,
            crate::egress::job::secrets(who, c.secrets).await?,
        ),
        Egress::Rules(r) => (r.clone(), Default::default()),
    };
    crate::egress::job::start_with(rules, secrets, c.egress, c.data_dir, spec)
        .await
        .map(Some)
}

async fn finish_proxy(egress: &Egress<'_>, proxy: JobProxy) -> Vec<Connection> {
    match egress {
        Egress::Job {
            who, command_hash, ..
        } => crate::egress::job::finish(who, command_hash, proxy).await,
        _ => proxy.finish().await,
    }
}

/// The executor's answer as an [`Ended`], in this order: not started, cancelled, over the
/// overlay's cap, not confined, ran.
fn ended(res: std::io::Result<ExecResult>, over_cap: Option<String>) -> Ended {
    let r = match res {
        Ok(r) => r,
        Err(e) => return Ended::NotRun(NotRun::new(format!("cannot start the command: {e}"))),
    };
    if r.cancelled {
        return Ended::Cancelled;
    }
    if let Some(what) = over_cap {
        return Ended::OverCap(what);
    }
    if r.sandbox_failed {
        return Ended::NotRun(NotRun {
            message: format!(
                "the sandbox could not confine the command, so nothing ran: {}",
                r.stderr.trim()
            ),
            overlay_unavailable: r.stderr.contains("mount overlay"),
        });
    }
    Ended::Ran(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(f: impl FnOnce(&mut ExecResult)) -> std::io::Result<ExecResult> {
        let mut r = ExecResult {
            exit_code: Some(0),
            ..ExecResult::default()
        };
        f(&mut r);
        Ok(r)
    }

    /// The order of the checks: a cancelled run over its cap is cancelled; an over-cap helper
    /// exit is over the cap, not "not confined"; a helper error naming the overlay mount says
    /// the overlay is unavailable.
    #[test]
    fn how_a_run_ended() {
        let err = Err(std::io::Error::other("no such file"));
        assert_eq!(
            ended(err, None),
            Ended::NotRun(NotRun::new("cannot start the command: no such file"))
        );
        assert_eq!(
            ended(ran(|r| r.cancelled = true), Some("bytes 1 2".into())),
            Ended::Cancelled
        );
        let failed = |r: &mut ExecResult| {
            r.sandbox_failed = true;
            r.stderr = "brainloop-sandbox: mount overlay: EINVAL\n".into();
        };
        assert_eq!(
            ended(ran(failed), Some("bytes 1 2".into())),
            Ended::OverCap("bytes 1 2".into())
        );
        match ended(ran(failed), None) {
            Ended::NotRun(n) => {
                assert!(n.overlay_unavailable);
                assert_eq!(n.message, "the sandbox could not confine the command, so nothing ran: brainloop-sandbox: mount overlay: EINVAL");
            }
            other => panic!("{other:?}"),
        }
        let exit1 = ran(|r| r.exit_code = Some(1));
        assert!(matches!(ended(exit1, None), Ended::Ran(r) if r.exit_code == Some(1)));
    }
}
