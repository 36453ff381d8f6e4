//! A classified command's path through the worker (issue 32), driven here and decided in
//! `bash::plan`: what is known of it (registry row, promotion, last requests, this job's waiting
//! change set, signatures) → `plan` → refuse / ask / a confined run (`bash::confined`, direct
//! here, on the overlay in `bash::overlay`) → `after_run` → finish / ask about its hosts or
//! effects / apply; the run recorded by `bash::record`, the result built by `bash::result`.
//!
//! It takes its own [`Job`] (built by `actions::bash` from the job's context) and the
//! classified [`Command`]; the params, the grants check and the classification stay with the
//! action.

use super::changes::{self, Manifest};
use super::confined::{self, Confinement, Egress};
use super::evidence::{self, Mode};
use super::executor::{self, ExecResult};
use super::plan::{self, Next, Plan, Refusal};
use super::policy::{Allowed, Facts, Situation};
use super::record::{self, Happened, Ran};
use super::registry;
use super::result::{self, Finished};
use super::signatures::{self, SigState, Signature};
use super::Outcome;
use crate::ask::validations;
use crate::classify::{self, CheckReport};
use crate::clients::{ClientGrants, Permission};
use crate::db::output::JobStatus;
use crate::db::Stores;
use crate::egress::job::{Scope, Who};
use crate::egress::EgressConfig;
use crate::permset::PermissionSet;
use crate::sandbox::detect::Level;
use crate::sandbox::SandboxConfig;
use crate::stats::Stats;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The settings the command path reads (from the worker's configuration).
#[derive(Clone, Copy)]
pub struct Settings<'a> {
    pub workspace: &'a Path,
    pub data_dir: &'a Path,
    pub sandbox: &'a SandboxConfig,
    pub egress: &'a EgressConfig,
    /// `[secrets]` (issue 38).
    pub secrets: &'a crate::egress::secrets::Secrets,
    /// Capturable commands run on an overlay and ask about their change set.
    pub overlay: bool,
    pub signature_approvals: u32,
    pub overlay_max_bytes: u64,
    pub overlay_max_inodes: u64,
    pub pending_max_bytes_per_client: u64,
    /// The operator's `protected_paths` and `data_paths` (`bash::protected`).
    pub protected_paths: &'a [String],
    pub data_paths: &'a [String],
    pub validation_ttl_ms: u64,
    /// The test hooks (`BRAINLOOP_TEST_PAUSE_*`) are live.
    pub test_actions: bool,
}

/// The job a command runs for: its ids, stores, grants, approval, and the worker's means.
pub struct Job<'a> {
    pub job_id: i64,
    pub client_id: &'a str,
    pub stores: &'a Arc<Stores>,
    pub stats: &'a Stats,
    pub grants: &'a ClientGrants,
    pub approval: Option<crate::ask::ApprovedRun>,
    /// What the sandbox can enforce here.
    pub level: &'a Level,
    pub cancel: &'a CancellationToken,
    pub settings: Settings<'a>,
}

impl<'a> Job<'a> {
    pub(super) fn who(&self) -> Who<'_> {
        Who {
            stores: self.stores,
            stats: self.stats,
            job_id: self.job_id,
            client_id: self.client_id,
            grants: Some(self.grants),
            shared_hosts: crate::ask::learned::hosts_for,
        }
    }
    pub(super) fn confinement(&self) -> Confinement<'_> {
        Confinement {
            level: self.level,
            sandbox: self.settings.sandbox,
            egress: self.settings.egress,
            secrets: self.settings.secrets,
            data_dir: self.settings.data_dir,
            cancel: self.cancel,
        }
    }
    /// The workspace, canonical when it can be.
    pub(super) fn workspace(&self) -> PathBuf {
        let ws = self.settings.workspace;
        ws.canonicalize().unwrap_or_else(|_| ws.to_path_buf())
    }
}

/// A classified command: valid, not blocked, its programs granted.
pub struct Command<'a> {
    pub text: &'a str,
    pub report: &'a CheckReport,
    /// Canonical.
    pub workdir: &'a Path,
    pub timeout: Duration,
    /// `force_execute: true` in the params.
    pub force_requested: bool,
}

/// What the policy reads of a classification.
pub fn facts(r: &CheckReport) -> Facts {
    Facts {
        blocked: r.blocked,
        pure: r.pure,
        risk: r.risk_score,
        permission_set: r.permission_set,
        sandbox_auto_approvable: r.sandbox_auto_approvable,
        computed_program: r.computed_program,
        runs_workspace_file: r.runs_workspace_file,
    }
}

/// What a run of this command shares with its steps.
pub(super) struct Cmd<'a> {
    pub c: &'a Command<'a>,
    pub facts: Facts,
    pub sigs: Vec<Signature>,
    pub workspace: PathBuf,
    pub plan: Plan,
}

/// Runs the command's path: plan, then refuse, ask, run or apply. Ok/Err: the job's outcome.
pub async fn run(job: &Job<'_>, c: &Command<'_>) -> Result<Outcome, Outcome> {
    let f = facts(c.report);
    let hash = &c.report.command_hash;
    let now = crate::time::now_ms();
    let ws = job.workspace();
    let sigs = signatures::of_report(c.report, c.workdir, &ws);
    crate::sandbox::marks::mark("signatures");
    let k = known(job, hash, c.text, c.workdir, &f, &sigs, now).await?;
    crate::sandbox::marks::mark("known");
    let s = situation(job, c, &f, &ws, &sigs, &k, now);
    let plan = plan::plan(&s);
    crate::sandbox::marks::mark("planned");
    if k.pending.is_some() && !plan.keeps_pending() {
        changes::discard(job.settings.data_dir, job.job_id);
    }
    let cmd = Cmd {
        c,
        facts: f,
        sigs,
        workspace: ws,
        plan: plan.clone(),
    };
    match plan {
        Plan::Refuse(r) => refused(c, r, &k.entry),
        Plan::Ask {
            shown,
            force_refused,
        } => {
            record::signatures_asked(job, &cmd.sigs, false).await;
            ask(job, c, &shown, force_refused, Vec::new(), Asked::Command).await
        }
        Plan::Overlay { .. } => super::overlay::run(job, &cmd).await,
        Plan::Apply { happened } => match k.pending {
            Some(m) => {
                let used = happened.policy_used(Allowed::Approved);
                let out = super::overlay::apply(job, m, used).await;
                let ok = matches!(&out, Ok(o) if o.status == JobStatus::Succeeded);
                record::applied(job, hash, &cmd.facts, happened, ok).await;
                out
            }
            None => Err(Outcome::failed("internal error: change set vanished")),
        },
        Plan::Direct {
            set,
            allowed,
            happened,
        } => direct(job, &cmd, set, allowed, happened).await,
    }
}

/// The precedence table's inputs and what this job carries.
fn situation(
    job: &Job<'_>,
    c: &Command<'_>,
    f: &Facts,
    ws: &Path,
    sigs: &[Signature],
    k: &Known,
    now: i64,
) -> plan::Situation {
    let hash = &c.report.command_hash;
    // An approval binds to the command, or to the change set of this job's overlay run.
    let expected = k.pending.as_ref().map_or(hash, |m| &m.effect_hash);
    let approved = job
        .approval
        .as_ref()
        .is_some_and(|a| &a.command_hash == expected);
    // A human answered this command's host request (issue 23).
    let hosts_approved = job
        .approval
        .as_ref()
        .is_some_and(|a| a.command_hash == crate::egress::approval_hash(hash));
    let capturable =
        job.settings.overlay && job.level.enforcing && overlay_capturable(c.report, c.workdir, ws);
    // A duplicate is a second request to a human: a capturable command's overlay runs that
    // changed nothing asked nobody, so only its earlier requests count there.
    let last = if capturable {
        k.last_requested
    } else {
        k.last_executed.max(k.last_requested)
    };
    let e = &k.entry;
    let policy = Situation {
        facts: f.clone(),
        policy: e.current_policy,
        // This worker's override of the command and the registry's (`ask::learned`: what
        // `approve`/`deny --always` on a fleet validation, or `rules add command`, wrote for
        // this worker's scope): the more restrictive wins.
        user_override: crate::decision::strictest(
            e.user_override,
            crate::ask::learned::command_override(job.client_id, c.text, now),
        ),
        force_requested: c.force_requested,
        force_granted: job.grants.has(Permission::ForceExecute),
        approved: approved || hosts_approved,
        since_last_ms: last.map(|t| now - t),
        duplicate_threshold_ms: e.duplicate_threshold_ms,
        duplicate_check_enabled: e.duplicate_check_enabled,
        sandbox_enforcing: job.level.enforcing,
        overlay: capturable,
        signatures_learned: k.sig_state.all_learned && sigs.iter().all(|s| s.learnable),
        signature_always_ask: k.sig_state.always_ask,
        signature_never: k.sig_state.never.clone(),
        promoted: k.promotion.as_ref().map(|p| p.mode),
    };
    plan::Situation {
        policy,
        hosts_approved,
        by_human: job.approval.as_ref().is_some_and(|a| a.by_human()),
        pending: k.pending.is_some(),
        set: stored_set(
            e.permission_set
                .as_deref()
                .unwrap_or(c.report.permission_set.as_str()),
        ),
    }
}

/// The outcome of a refused command (nothing ran, nobody asked).
fn refused(c: &Command<'_>, r: Refusal, e: &registry::Entry) -> Result<Outcome, Outcome> {
    match r {
        Refusal::Blocked => Err(Outcome {
            status: JobStatus::Blocked,
            result: Some(json!({"status": "blocked", "reasons": c.report.reasons})),
            error: Some("blocked".into()),
        }),
        Refusal::Denied(why) => Err(Outcome {
            status: JobStatus::Denied,
            result: Some(json!({"status": "denied", "command": c.text, "reason": why})),
            error: Some(why),
        }),
        Refusal::Duplicate { seconds_since_last } => Ok(Outcome {
            status: JobStatus::DuplicateWarning,
            result: Some(json!({
                "status": "duplicate_warning",
                "command": c.text,
                "seconds_since_last": seconds_since_last,
                "threshold_ms": e.duplicate_threshold_ms,
            })),
            error: Some(format!(
                "the same command was asked {seconds_since_last:.1} s ago; nothing ran — resubmit after {} ms",
                e.duplicate_threshold_ms
            )),
        }),
    }
}

/// What the policy needs to know about a command besides its text.
struct Known {
    /// Its registry entry (created on first sight).
    entry: registry::Entry,
    promotion: Option<evidence::Promotion>,
    /// When another job last asked a human about it, and last ran it.
    last_requested: Option<i64>,
    last_executed: Option<i64>,
    /// This job's change set waiting for a human, when it is for this command.
    pending: Option<Manifest>,
    sig_state: SigState,
}

/// Reads [`Known`] in one call on the blocking pool (one hop, not six: issue 24). The duplicate
/// check looks at other jobs only: a retry after a crash (its first attempt ran, then the worker
/// died) is not a duplicate of itself (found by scripts/soak.sh). The last request is read on a
/// reader of output.db, so it never waits for the result writer's commit.
async fn known(
    job: &Job<'_>,
    hash: &str,
    command: &str,
    workdir: &Path,
    f: &Facts,
    sigs: &[Signature],
    now: i64,
) -> Result<Known, Outcome> {
    let stores = Arc::clone(job.stores);
    let (h, text, wd, f, sigs) = (
        hash.to_string(),
        command.to_string(),
        workdir.display().to_string(),
        f.clone(),
        sigs.to_vec(),
    );
    let (client, job_id, threshold) = (
        job.client_id.to_string(),
        job.job_id,
        job.settings.signature_approvals,
    );
    let data_dir = job.settings.data_dir.to_path_buf();
    let read = move || -> Result<Known, String> {
        // Nothing has run yet: a registry another process keeps locked delays the job.
        let (entry, promotion, last_executed) =
            crate::db::retry_while_locked("command_security.db", || {
                stores.security.with(|c| {
                    let version = classify::CLASSIFIER_VERSION;
                    let entry =
                        registry::get_or_create(c, &h, &text, &wd, &f, version, false, now)?;
                    let promotion = evidence::promotion(c, &client, &h, f.permission_set.as_str())?;
                    let last = validations::last_executed(c, &h, job_id, &client)
                        .unwrap_or(entry.last_executed);
                    Ok((entry, promotion, last))
                })
            })
            .map_err(|e| format!("command registry: {e:#}"))?;
        let last_requested = stores
            .output_readers
            .get()
            .ok()
            .and_then(|c| validations::last_requested(&c, &h, &text, job_id, &client).ok())
            .flatten();
        let pending = changes::load_manifest(&data_dir, job_id)
            .ok()
            .flatten()
            .filter(|m| m.command_hash == h);
        let sig_state = if sigs.is_empty() {
            SigState::default()
        } else {
            crate::db::retry_while_locked("command_security.db", || {
                stores
                    .security
                    .with(|c| signatures::observe(c, &client, &sigs, threshold, now))
            })
            .map_err(|e| format!("signatures: {e:#}"))?
        };
        Ok(Known {
            entry,
            promotion,
            last_requested,
            last_executed,
            pending,
            sig_state,
        })
    };
    match tokio::task::spawn_blocking(read).await {
        Ok(r) => r.map_err(Outcome::failed),
        Err(e) => Err(Outcome::failed(format!("command registry: {e}"))),
    }
}

/// Whether the overlay can capture every effect of the command: no network, environment or
/// system-control operation (workspace runners such as git hooks or test runners excepted: they
/// run confined on the overlay too, without network), a static program name, every statically
/// known write inside the workspace, and a working directory inside the workspace (the overlay
/// covers only the workspace).
pub fn overlay_capturable(report: &CheckReport, workdir: &Path, workspace: &Path) -> bool {
    !report.computed_program
        && report
            .operations
            .iter()
            .all(|op| signatures::not_capturable(op).is_none())
        && workdir.starts_with(workspace)
        && report.operations.iter().all(|op| {
            let here = signatures::op_dir(op, workdir);
            op.writes.iter().all(|w| {
                here.as_deref()
                    .is_some_and(|d| signatures::write_in_workspace(w, d, workspace))
                    || w.starts_with('/') && signatures::write_in_workspace(w, workdir, workspace)
            })
        })
}

/// The set a command runs in, from the name its registry row records. The fallback is
/// deliberate (the behaviour before issue 32): a row naming a set this build does not know, or
/// one the sandbox does not confine (`trusted`), runs in the narrowest set, never a wider one.
fn stored_set(name: &str) -> PermissionSet {
    match crate::permset::parse(name) {
        Ok(set) if set.profile().confined => set,
        Ok(_) | Err(_) => PermissionSet::Minimal,
    }
}

/// Runs the command directly in `set` (the set recorded in the registry — the one it was
/// approved or promoted under — decides; one this build does not know is the narrowest).
async fn direct(
    job: &Job<'_>,
    cmd: &Cmd<'_>,
    set: PermissionSet,
    allowed: Allowed,
    happened: Happened,
) -> Result<Outcome, Outcome> {
    let c = cmd.c;
    let hash = &c.report.command_hash;
    // A network set's only way out is its egress proxy (issue 23).
    let egress = if set.network() {
        Egress::Job {
            who: job.who(),
            command_hash: hash,
            scope: Scope::Granted,
        }
    } else {
        Egress::Closed
    };
    let report = confined::run(
        &job.confinement(),
        confined::Run {
            command: c.text,
            workdir: c.workdir,
            workspace: &cmd.workspace,
            set,
            timeout: c.timeout,
            env: executor::filtered_env(|k| std::env::var(k).ok()),
            tag: job.job_id,
            read: Vec::new(),
            stdin: None,
            overlay: None,
            write: Vec::new(),
            leftovers: true,
            egress,
        },
    )
    .await;
    let next = plan::after_run(&cmd.plan, &report, None);
    let r = match &report.ended {
        confined::Ended::Ran(r) => Some(r),
        _ => None,
    };
    if let (true, Some(r)) = (next.records_run(), r) {
        let ran = Ran {
            command_hash: hash,
            facts: &cmd.facts,
            label: &report.label,
            result: r,
            happened,
            mode: Mode::Direct,
            permission_set: set.as_str(),
        };
        record::run(job, &ran).await;
        crate::sandbox::marks::mark("recorded");
    }
    match (next, r) {
        (Next::Cancelled, _) => Ok(Outcome::cancelled()),
        (Next::Fail(m), _) => Err(Outcome::failed(m)),
        (Next::AskHosts { hosts, .. }, Some(r)) => {
            let h = HostAsk::of(hosts, report.connections.clone(), r);
            ask(job, c, "ask", false, Vec::new(), Asked::Hosts(&h)).await
        }
        (Next::Finish, Some(r)) => Ok(direct_result(c, &report, r, set, allowed)),
        (next, _) => Err(Outcome::failed(format!(
            "internal error: {next:?} after a direct run"
        ))),
    }
}

/// The result of a direct run: the finished-command result, with its connections and the
/// program's path.
fn direct_result(
    c: &Command<'_>,
    report: &confined::Report,
    r: &ExecResult,
    set: PermissionSet,
    allowed: Allowed,
) -> Outcome {
    let f = Finished {
        exit_code: r.exit_code,
        signal: r.signal,
        timed_out: r.timed_out,
        timeout_ms: c.timeout.as_millis() as u64,
        success: r.success(),
        stdout: &r.stdout,
        stderr: &r.stderr,
        truncated: r.truncated,
        duration_ms: r.duration_ms,
        sandbox: &report.label,
        permission_set: set.as_str(),
        command_hash: &c.report.command_hash,
        policy_used: allowed.as_str(),
    };
    let mut extra = Map::new();
    extra.insert("egress".into(), json!(report.connections));
    extra.insert("executed_path".into(), json!(c.report.executed_path));
    result::finished(&f, extra)
}

/// What a human is asked about.
#[derive(Clone, Copy)]
pub(super) enum Asked<'a> {
    /// The command, before it runs.
    Command,
    /// The change set of its overlay run.
    Effects(&'a Manifest),
    /// The hosts its run was refused (issue 23); approving re-runs it with the hosts approved.
    Hosts(&'a HostAsk),
}

/// A run that was refused hosts: the hosts, and what the run did.
pub(super) struct HostAsk {
    hosts: Vec<String>,
    exit_code: Option<i32>,
    stdout: String,
    stderr: String,
    connections: Vec<crate::egress::proxy::Connection>,
}

impl HostAsk {
    pub(super) fn of(
        hosts: Vec<String>,
        connections: Vec<crate::egress::proxy::Connection>,
        r: &ExecResult,
    ) -> HostAsk {
        HostAsk {
            hosts,
            exit_code: r.exit_code,
            stdout: r.stdout.clone(),
            stderr: r.stderr.clone(),
            connections,
        }
    }
}

/// Asks a human (`crate::ask`) about the command, its change set or its hosts; `lead`: reasons
/// said before the classifier's (why a change set was not applied automatically).
pub(super) async fn ask(
    job: &Job<'_>,
    c: &Command<'_>,
    shown: &str,
    force_refused: bool,
    lead: Vec<String>,
    asked: Asked<'_>,
) -> Result<Outcome, Outcome> {
    let report = c.report;
    let id = crate::ask::new_id()?;
    let mut reasons = lead;
    reasons.extend(report.reasons.iter().cloned());
    // What the approval binds to: the command, the command and its change set, or the
    // command's host request.
    let bound_hash = match asked {
        Asked::Command => report.command_hash.clone(),
        Asked::Effects(m) => m.effect_hash.clone(),
        Asked::Hosts(_) => crate::egress::approval_hash(&report.command_hash),
    };
    // Where each refused (or, up front, named) host points now, and of which class: shown,
    // and stored with the request (what a plain approve and `--allow-private-hosts` allow).
    let mut resolved = Vec::new();
    let named = match asked {
        Asked::Command => crate::egress::named::hosts(report),
        _ => Vec::new(),
    };
    if !named.is_empty() {
        // Issue 36: the first prompt names the hosts, so one answer allows them.
        let e = job.settings.egress;
        resolved = crate::egress::resolve::shown(
            e.hosts_file.as_deref(),
            std::time::Duration::from_millis(e.connect_timeout_ms.max(1)),
            &named,
        )
        .await;
        save_host_request(job, &id, &report.command_hash, &named, &resolved).await?;
        reasons.splice(
            0..0,
            crate::egress::named_reasons(job.client_id, &id, &named, &resolved),
        );
    }
    // Issue 38: the secrets this command would use, and where each goes (never a value).
    let secrets = if report.permission_set.network() || matches!(asked, Asked::Effects(_)) {
        let granted: Vec<String> = job
            .grants
            .grants
            .iter()
            .filter(|g| g.permission == crate::clients::Permission::Secret)
            .map(|g| g.pattern.clone())
            .collect();
        let mut hosts = named.clone();
        if let Asked::Hosts(h) = asked {
            hosts.extend(h.hosts.iter().cloned());
        }
        crate::egress::secrets::would_use(job.settings.secrets, &granted, c.text, &hosts)
    } else {
        Vec::new()
    };
    if let Some(line) = crate::egress::secrets::reason(&secrets) {
        reasons.insert(0, line);
    }
    if let Asked::Hosts(h) = asked {
        let e = job.settings.egress;
        resolved = crate::egress::resolve::shown(
            e.hosts_file.as_deref(),
            std::time::Duration::from_millis(e.connect_timeout_ms.max(1)),
            &h.hosts,
        )
        .await;
        save_host_request(job, &id, &report.command_hash, &h.hosts, &resolved).await?;
        reasons.splice(
            0..0,
            crate::egress::refusal_reasons(job.client_id, &id, &h.hosts, &resolved),
        );
    }
    if let Asked::Effects(m) = asked {
        reasons.insert(
            0,
            format!(
                "ran on an overlay of the workspace (exit {}); its effects: {} — `brainloop show {id}` for the diff; approve applies exactly this change set, deny discards it",
                m.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
                m.change_set.summary()
            ),
        );
        // What one `--learn` teaches beyond this command (`bash::coverage` families).
        for (i, line) in super::coverage::taught_lines(&m.signatures)
            .into_iter()
            .enumerate()
        {
            reasons.insert(1 + i, line);
        }
    }
    if shown == "ask_warning" {
        reasons.insert(0, format!("WARNING: high risk ({:.2})", report.risk_score));
    }
    if force_refused {
        reasons.push("force_execute ignored: the client is not granted FORCE_EXECUTE".into());
    }
    let layers: Vec<Value> = report
        .layers
        .iter()
        .filter(|l| l.requires_validation)
        .map(|l| json!({"layer": l.index, "operations": l.ops, "reason": l.reason}))
        .collect();
    let request = crate::ask::Request {
        id,
        command: c.text.to_string(),
        bound_hash,
        policy: shown.to_string(),
        risk_score: Some(report.risk_score),
        permission_set: report.permission_set.to_string(),
        workdir: Some(c.workdir.display().to_string()),
        reasons,
    };
    let asker = crate::ask::Asker {
        stores: job.stores,
        stats: job.stats,
        job_id: job.job_id,
        client_id: job.client_id,
        ttl_ms: job.settings.validation_ttl_ms,
    };
    let (_, mut result) = crate::ask::ask(&asker, request).await?;
    result.insert("layers".into(), json!(layers));
    asked_fields(&mut result, asked);
    if matches!(asked, Asked::Hosts(_)) || !named.is_empty() {
        result.insert("egress_resolved".into(), json!(resolved));
    }
    if !named.is_empty() {
        result.insert("egress_named".into(), json!(named));
    }
    if !secrets.is_empty() {
        let v: Vec<Value> = secrets
            .iter()
            .map(|(n, h)| json!({"name": n, "hosts": h}))
            .collect();
        result.insert("secrets".into(), json!(v));
    }
    Ok(crate::ask::pending(result))
}

/// Records the host request a validation answers (issue 23).
async fn save_host_request(
    job: &Job<'_>,
    id: &str,
    hash: &str,
    hosts: &[String],
    resolved: &[crate::egress::resolve::Resolved],
) -> Result<(), Outcome> {
    let req = crate::egress::store::Request {
        validation_id: id.to_string(),
        job_id: job.job_id,
        client_id: job.client_id.to_string(),
        command_hash: hash.to_string(),
        hosts: hosts.to_vec(),
        resolved: resolved.to_vec(),
    };
    job.stores
        .security
        .call(move |c| crate::egress::store::save_request(c, &req))
        .await
        .map_err(|e| Outcome::failed(format!("cannot record the host request: {e:#}")))
}

/// The pending result's fields of a change set (its diff, the run's output) or of a host
/// request (the hosts, the connections, the run's output).
fn asked_fields(result: &mut Map<String, Value>, asked: Asked<'_>) {
    match asked {
        Asked::Command => {}
        Asked::Effects(m) => {
            let (diff, _) = result::cap_str(&m.change_set.diff(), 4096);
            result.insert("effects".into(), result::effects_json(m));
            result.insert("diff".into(), json!(diff));
            result.insert("exit_code".into(), json!(m.exit_code));
            result.insert("stdout".into(), json!(m.stdout));
            result.insert("stderr".into(), json!(m.stderr));
        }
        Asked::Hosts(h) => {
            result.insert("egress_refused".into(), json!(h.hosts));
            result.insert("egress".into(), json!(h.connections));
            result.insert("exit_code".into(), json!(h.exit_code));
            result.insert("stdout".into(), json!(h.stdout));
            result.insert("stderr".into(), json!(h.stderr));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unrecognised_stored_set_falls_back_to_the_narrowest() {
        use super::{stored_set, PermissionSet};
        // the line in `direct`: a registry row with a set this build does not know
        assert_eq!(stored_set("full-access"), PermissionSet::Minimal);
        assert_eq!(stored_set("trusted"), PermissionSet::Minimal);
        assert_eq!(stored_set("network-api"), PermissionSet::NetworkApi);
        let src = include_str!("command.rs");
        assert!(!src.contains(&["unwrap_or(PermissionSet::", "McpStandard)"].concat()));
    }
}
