//! Operator hooks (issue 22): `[notify]` tells the operator that something waits, `[reviewer]`
//! is consulted before the human. This module owns *how an operator-configured command meets
//! agent-derived data*:
//!
//! - the data (the validation as JSON, `payload`) reaches the command **only on its stdin**, never
//!   in its argv, environment or shell text; the command line is the operator's, verbatim;
//! - the command runs **confined like any other command** (`bash::confined`, set `network-api`:
//!   network through its own egress proxy for a webhook or an LLM, no workspace, a private tmp;
//!   plus the operator's `read` directories for its script), with a timeout (`timeout_ms`, at
//!   most 120 s);
//! - it runs **off the dispatch path**: one background task polls the pending validations every
//!   second and runs the hooks one after the other; a failure or a timeout is logged (and, for the
//!   reviewer, means `ask`), never blocking or failing a job.
//!
//! Each new pending validation: the reviewer first (`reviewer.rs`: `deny` / `approve` become a
//! decision row the supervisor consumes like an operator's; an `approve` only where
//! `bash::learn::refusals` allows it), then, unless the reviewer settled it, `notify` with
//! `"event": "validation"`. Once more, `before_expiry_ms` before it expires: `notify` with
//! `"event": "expiring"`. The task remembers what it told in memory: after a restart, validations
//! still pending are notified (and reviewed) again. A reviewer that denies
//! `escalate_after_denials` of one client's validations in a row: `notify` with
//! `"event": "reviewer_denials"` (`reviewer.rs`).
//!
//! `eval.rs`: `brainloop reviewer eval`, the reviewer replayed on the validations a human
//! decided, run by the same [`Runner`] the task uses.

pub mod eval;
pub mod model;
pub mod payload;
mod reviewer;

pub use reviewer::marks as reviewer_marks;
pub use reviewer::{
    answer_of as reviewer_answer, applied as reviewer_applied, decided_by as reviewer_decided_by,
    denial_streak, escalated, payload_refusals, refusals_now, Answer, Streak,
};

/// The largest `escalate_after_denials` (a streak is looked for among a client's latest
/// [`reviewer::STREAK_WINDOW`] validations).
pub const MAX_ESCALATE_AFTER: u32 = 100;

use crate::ask::validations::{self, Validation};
use crate::bash::executor::{self, ExecResult};
use crate::db::Stores;
use crate::permset::PermissionSet;
use crate::sandbox::detect::Level;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// An operator hook carries no secret (its egress is fixed rules, not a client's grants).
static NO_SECRETS: crate::egress::secrets::Secrets = crate::egress::secrets::Secrets::new();

/// `[notify]` / `[reviewer]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HookConfig {
    /// Run with `/bin/bash -c`, confined (`network-api`); the validation as JSON on stdin.
    pub command: String,
    /// Killed after this long (ms, at most 120000); a reviewer that times out means `ask`.
    pub timeout_ms: u64,
    /// Directories the command may read besides the system ones (its script, its config).
    pub read: Vec<PathBuf>,
    /// Pass the worker's LLM settings in its environment: `BRAINLOOP_LLM_BASE_URL`,
    /// `BRAINLOOP_LLM_MODEL`, `CEREBRAS_API_KEY` (for an LLM reviewer), and allow the model's
    /// host through the hook's proxy (`model::rules`).
    pub llm: bool,
    /// `[notify]` only: notify again this long before a validation expires (ms; 0 = never).
    pub before_expiry_ms: u64,
    /// Where it may connect, through its own egress proxy (`HOST:PORT` rules as for `grant`;
    /// globs; a private or loopback address only when named exactly). Default `*`: any public
    /// host.
    pub hosts: Vec<String>,
    /// `[reviewer]` only: after this many reviewer denials in a row for one client (no human
    /// decision and no reviewer approve for that client in between), `[notify]` runs with
    /// `"event": "reviewer_denials"` (and again at every further multiple). 0 = never.
    pub escalate_after_denials: u32,
}

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig {
            command: String::new(),
            timeout_ms: 30_000,
            read: Vec::new(),
            llm: false,
            before_expiry_ms: 600_000,
            hosts: vec!["*".into()],
            escalate_after_denials: 3,
        }
    }
}

impl HookConfig {
    pub fn validate(&self, section: &str) -> Result<()> {
        if self.command.trim().is_empty() {
            anyhow::bail!("[{section}] command is empty");
        }
        if self.timeout_ms == 0 || self.timeout_ms > executor::MAX_TIMEOUT.as_millis() as u64 {
            anyhow::bail!(
                "[{section}] timeout_ms must be between 1 and {} (got {})",
                executor::MAX_TIMEOUT.as_millis(),
                self.timeout_ms
            );
        }
        if self.escalate_after_denials > MAX_ESCALATE_AFTER {
            anyhow::bail!(
                "[{section}] escalate_after_denials must be between 0 (never) and {MAX_ESCALATE_AFTER} (got {})",
                self.escalate_after_denials
            );
        }
        Ok(())
    }
}

/// The hooks' own configuration section: the two hooks and what running them confined and
/// judging change sets needs of the worker's configuration (built by `Config::hooks`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub notify: Option<HookConfig>,
    pub reviewer: Option<HookConfig>,
    pub data_dir: std::path::PathBuf,
    pub workspace: std::path::PathBuf,
    pub sandbox: crate::sandbox::SandboxConfig,
    pub egress: crate::egress::EgressConfig,
    pub llm: crate::llm::LlmConfig,
    /// The operator's `protected_paths` and `data_paths` (`bash::protected`).
    pub paths: crate::permset::PathLists,
}

/// What the hooks task needs, shared by its steps.
struct Hooks {
    config: Arc<Settings>,
    stores: Arc<Stores>,
    level: Arc<Level>,
    /// The LLM variables for hooks with `llm = true` (the key only when the worker has one).
    llm_env: Vec<(String, String)>,
    cancel: CancellationToken,
    /// Whether the reviewer last reached its model (`model::Reach`), to record each change once.
    model_ok: std::sync::Mutex<Option<bool>>,
}

/// Starts the hooks task when `[notify]` or `[reviewer]` is configured.
pub fn spawn(
    config: Arc<Settings>,
    stores: Arc<Stores>,
    level: Arc<Level>,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if config.notify.is_none() && config.reviewer.is_none() {
        return None;
    }
    let llm_env = llm_env(&config);
    let h = Hooks {
        config,
        stores,
        level,
        llm_env,
        cancel,
        model_ok: std::sync::Mutex::new(None),
    };
    Some(tokio::spawn(async move { h.run().await }))
}

pub(crate) fn llm_env(config: &Settings) -> Vec<(String, String)> {
    let mut env = vec![
        ("BRAINLOOP_LLM_BASE_URL".into(), config.llm.base_url.clone()),
        ("BRAINLOOP_LLM_MODEL".into(), config.llm.model.clone()),
    ];
    if let crate::llm::key::Found::Key(k, _) =
        crate::llm::key::find(&config.llm, |k| std::env::var(k).ok())
    {
        env.push((crate::llm::key::ENV_VAR.into(), k.expose().to_string()));
    }
    env
}

/// Per pending validation: whether the expiry notice went out.
type Told = HashMap<String, bool>;

impl Hooks {
    async fn run(self) {
        if let Some(h) = self.config.reviewer.as_ref().filter(|h| h.llm) {
            let reach = model::probe(&self.config, h).await;
            self.model_reach(reach).await;
        }
        let mut told = Told::new();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if let Err(e) = self.pass(&mut told).await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "hooks: cannot read pending validations"
                );
            }
        }
    }

    /// One look at the pending validations.
    async fn pass(&self, told: &mut Told) -> Result<()> {
        let pending = self
            .stores
            .output
            .call(|c| validations::list(c, true))
            .await?;
        told.retain(|id, _| pending.iter().any(|v| &v.id == id));
        for v in pending {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            match told.get(&v.id) {
                None => {
                    told.insert(v.id.clone(), false);
                    let p = self.payload(&v, "validation").await;
                    if !self.review(&v, &p).await {
                        self.notify(&v, &p).await;
                    }
                }
                Some(false) if self.expiring(&v) => {
                    told.insert(v.id.clone(), true);
                    let p = self.payload(&v, "expiring").await;
                    self.notify(&v, &p).await;
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn expiring(&self, v: &Validation) -> bool {
        let Some(n) = &self.config.notify else {
            return false;
        };
        n.before_expiry_ms > 0
            && v.expires_at
                .is_some_and(|t| t - crate::time::now_ms() <= n.before_expiry_ms as i64)
    }

    async fn payload(&self, v: &Validation, event: &str) -> serde_json::Value {
        let (stores, dd, v2, ev) = (
            Arc::clone(&self.stores),
            self.config.data_dir.clone(),
            v.clone(),
            event.to_string(),
        );
        let built = tokio::task::spawn_blocking(move || {
            let request = stores
                .security
                .with(|c| crate::egress::store::request(c, &v2.id))?;
            let mut p = stores
                .lifecycle
                .with(|c| Ok(payload::build(c, &dd, &v2, &ev)))?;
            payload::add_network(&mut p, request.as_ref());
            anyhow::Ok(p)
        })
        .await;
        match built {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                serde_json::json!({"event": event, "id": v.id, "error": format!("{e:#}")})
            }
            Err(e) => serde_json::json!({"event": event, "id": v.id, "error": e.to_string()}),
        }
    }

    async fn notify(&self, v: &Validation, p: &serde_json::Value) {
        self.notify_of(&v.id, v.job_id, p).await
    }

    /// Runs `[notify]` with `p`, about validation `id` of job `job_id` (for the log and the
    /// sandbox's name).
    async fn notify_of(&self, id: &str, job_id: i64, p: &serde_json::Value) {
        let Some(h) = &self.config.notify else {
            return;
        };
        match self.run_hook(h, p, job_id).await {
            Ok(r) if r.success() => {
                tracing::info!(validation_id = %id, event = %p["event"], "notify: sent")
            }
            Ok(r) => tracing::warn!(
                validation_id = %id,
                exit_code = ?r.exit_code,
                timed_out = r.timed_out,
                stderr = r.stderr.trim(),
                "notify command failed"
            ),
            Err(e) => {
                tracing::warn!(validation_id = %id, error = format!("{e:#}"), "notify command could not run")
            }
        }
    }

    async fn run_hook(
        &self,
        h: &HookConfig,
        p: &serde_json::Value,
        job_id: i64,
    ) -> Result<ExecResult> {
        let r = Runner {
            config: &self.config,
            level: &self.level,
            llm_env: &self.llm_env,
            cancel: &self.cancel,
        };
        let (run, conns) = r.run_seen(h, p, job_id).await;
        if h.llm {
            if let Some(reach) = model::after_run(&self.config, &conns) {
                self.model_reach(reach).await;
            }
        }
        run
    }

    /// Says whether the reviewer reaches its model: in the log, and as a `reviewer_check`
    /// event (`status` shows the latest) at start-up and whenever it changes.
    async fn model_reach(&self, reach: model::Reach) {
        let changed = match self.model_ok.lock() {
            Ok(mut last) => {
                let c = *last != Some(reach.ok) || reach.when == "startup";
                *last = Some(reach.ok);
                c
            }
            Err(_) => true,
        };
        if !changed {
            return;
        }
        match &reach.error {
            Some(e) => {
                tracing::warn!(base_url = %reach.base_url, when = %reach.when, "the reviewer cannot reach its model: {e}; validations go to the human")
            }
            None => {
                tracing::info!(base_url = %reach.base_url, when = %reach.when, "the reviewer reaches its model")
            }
        }
        let detail = match serde_json::to_value(&reach) {
            Ok(d) => d,
            Err(_) => return,
        };
        if let Err(e) = self
            .stores
            .metadata
            .call(move |c| crate::db::metadata::insert_event(c, model::EVENT, None, &detail))
            .await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot record the reviewer's model check"
            );
        }
    }
}

/// What running a hook needs: the worker's task, or `brainloop reviewer eval` (which runs the
/// reviewer exactly as the worker would, from the CLI, with no database open for writing).
pub struct Runner<'a> {
    pub config: &'a Settings,
    pub level: &'a Level,
    /// The LLM variables for hooks with `llm = true` ([`llm_env`]).
    pub llm_env: &'a [(String, String)],
    pub cancel: &'a CancellationToken,
}

impl Runner<'_> {
    /// Runs one hook confined (`bash::confined`, set `network-api`, its `read` dirs), the payload
    /// on its stdin; its network only through a proxy allowing its `hosts` rules (and, with
    /// `llm = true`, the model's host: `model::rules`).
    pub async fn run(
        &self,
        h: &HookConfig,
        p: &serde_json::Value,
        job_id: i64,
    ) -> Result<ExecResult> {
        self.run_seen(h, p, job_id).await.0
    }

    /// [`Runner::run`], and what its proxy saw.
    pub async fn run_seen(
        &self,
        h: &HookConfig,
        p: &serde_json::Value,
        job_id: i64,
    ) -> (Result<ExecResult>, Vec<crate::egress::proxy::Connection>) {
        use crate::bash::confined::{self, Confinement, Egress, Ended};
        let mut env = executor::filtered_env(|k| std::env::var(k).ok());
        if h.llm {
            env.extend(self.llm_env.iter().cloned());
        }
        let rules = match model::rules(self.config, h).await {
            Ok(r) => r,
            Err(e) => return (Err(e), Vec::new()),
        };
        let stdin = match serde_json::to_vec(p) {
            Ok(s) => s,
            Err(e) => return (Err(e.into()), Vec::new()),
        };
        let tmp = std::env::temp_dir();
        let conf = Confinement {
            level: self.level,
            sandbox: &self.config.sandbox,
            egress: &self.config.egress,
            secrets: &NO_SECRETS,
            data_dir: &self.config.data_dir,
            cancel: self.cancel,
        };
        let report = confined::run(
            &conf,
            confined::Run {
                command: &h.command,
                workdir: &tmp,
                workspace: &self.config.workspace,
                set: PermissionSet::NetworkApi,
                timeout: Duration::from_millis(h.timeout_ms),
                env,
                // Named apart from the job's own sandbox (negative id).
                tag: -job_id.abs().max(1),
                read: h.read.clone(),
                stdin: Some(stdin),
                overlay: None,
                write: Vec::new(),
                leftovers: false,
                egress: Egress::Rules(rules),
            },
        )
        .await;
        let conns = report.connections;
        let r = match report.ended {
            Ended::Ran(r) => Ok(r),
            Ended::Cancelled => Err(anyhow::anyhow!("cancelled: the worker is stopping")),
            Ended::OverCap(what) => Err(anyhow::anyhow!("over its cap: {what}")),
            Ended::NotRun(n) => Err(anyhow::anyhow!("{}", n.message)),
        };
        (r, conns)
    }
}
