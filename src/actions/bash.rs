//! `execute_bash` (seed 001, DESIGN §5–§7): classify the command, check the client's
//! SYSTEM_COMMAND grants on every operation, consult the command registry and the precedence
//! table, then run it, ask a human, or refuse — never the original's self-approval.
//!
//! Results follow seed 001's shapes: `{success, exit_code, stdout, stderr, duration_ms,
//! policy_used, truncated, sandbox}` when it ran; `{status: "pending_validation", validation_id,
//! command, policy, risk_score, reasons}`; `{status: "duplicate_warning", command,
//! seconds_since_last}`; `{status: "blocked", reasons}`.

use super::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::ask::validations;
use crate::bash::changes::{self, Manifest};
use crate::bash::evidence::{self, Evidence, Mode, Source};
use crate::bash::executor::{self, ExecRequest};
use crate::bash::leftovers;
use crate::bash::policy::{self, Facts, Situation, Verdict};
use crate::bash::registry;
use crate::bash::signatures::{self, SigState, Signature};
use crate::classify::{self, CheckReport, Context};
use crate::clients::{ClientGrants, Permission};
use crate::db::output::JobStatus;
use crate::db::write_tx;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn workspace_of(ctx: &JobCtx) -> PathBuf {
    ctx.config
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| ctx.config.workspace.clone())
}

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "execute_bash",
        description: "Runs a shell command through the command-security policy: pure commands run at once, blocked ones never, others ask a human (pending_validation) until approved often enough to be promoted. Output capped at 10 KB, timeout 120 s, filtered environment.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "workdir": {"type": "string", "description": "default: the workspace; outside it needs FILE_READ there"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 120000},
                    "force_execute": {"type": "boolean", "description": "skip `ask` — only for clients granted FORCE_EXECUTE; never lifts a block or an override"},
                    "purpose": {"type": "string", "maxLength": 2000, "description": "what the command is for, in a sentence: shown to the human and to a configured reviewer, who compare it with the effects (it grants nothing)"}
                },
                "required": ["command"],
                "additionalProperties": false
            })
        },
        grants: &[Grant::SystemCommand],
        permission_set: PermissionSet::McpStandard,
        handler: crate::actions::Run::Async(execute_bash),
        hidden: false,
        on_decision: Some(crate::bash::decisions::on_decision),
    }]
}

fn facts(r: &CheckReport) -> Facts {
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

/// The canonical working directory, or the error that names the fix. A workdir outside the
/// workspace is checked against the FILE_READ grant on its *lexical* path (`..` folded, no
/// symlink followed) before anything looks at the disk, and again on its canonical path; every
/// refusal outside the workspace is the same denial, so errors reveal nothing about what
/// exists there, its type or where a symlink points (issue 19 item 4).
pub fn resolve_workdir(
    grants: &ClientGrants,
    workspace: &Path,
    requested: Option<&str>,
) -> Result<PathBuf, Outcome> {
    let ws = workspace.canonicalize().map_err(|_| {
        Outcome::failed(format!(
            "the workspace {} does not exist: create it, or set --workspace / BRAINLOOP_WORKSPACE",
            workspace.display()
        ))
    })?;
    let Some(req) = requested else { return Ok(ws) };
    let mut lexical = PathBuf::from("/");
    let joined = if Path::new(req).is_absolute() {
        PathBuf::from(req)
    } else {
        ws.join(req)
    };
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::Normal(n) => lexical.push(n),
            _ => {}
        }
    }
    let denied = || {
        Outcome::denied(grants.missing(Permission::FileRead, &format!("{}/**", lexical.display())))
    };
    let inside = lexical.starts_with(&ws);
    if !inside && !grants.covers_dir(Permission::FileRead, &lexical) {
        return Err(denied());
    }
    let canon = match lexical.canonicalize() {
        Ok(c) => c,
        Err(_) if inside => {
            return Err(Outcome::failed(format!(
                "workdir {} does not exist",
                lexical.display()
            )))
        }
        Err(_) => return Err(denied()),
    };
    if !canon.starts_with(&ws) && !grants.covers_dir(Permission::FileRead, &canon) {
        return Err(denied());
    }
    if !canon.is_dir() {
        return Err(Outcome::failed(format!(
            "workdir {} is not a directory",
            lexical.display()
        )));
    }
    Ok(canon)
}

/// SYSTEM_COMMAND is checked on every unwrapped operation; a computed program name needs `*`.
fn check_programs(grants: &ClientGrants, r: &CheckReport) -> Result<(), Outcome> {
    for op in &r.operations {
        if !op.op.starts_with("bash:") {
            continue;
        }
        let name = if op.op == "bash:<dynamic>" || op.program.is_empty() {
            "*"
        } else {
            op.program.as_str()
        };
        let ok = if name == "*" {
            grants.may_run_any()
        } else {
            grants.may_run(name)
        };
        if !ok {
            let what = if name == "*" {
                "a program whose name is computed at run time (needs SYSTEM_COMMAND '*')"
                    .to_string()
            } else {
                name.to_string()
            };
            return Err(Outcome::denied(
                grants.missing(Permission::SystemCommand, &what),
            ));
        }
    }
    Ok(())
}

fn execute_bash(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        match run(&ctx, &params).await {
            Ok(o) | Err(o) => o,
        }
    })
}

async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let p = super::decode::execute_bash(params).map_err(Outcome::failed)?;
    let command = p.command;
    let timeout = Duration::from_millis(
        p.timeout_ms
            .unwrap_or(executor::DEFAULT_TIMEOUT.as_millis() as u64),
    )
    .min(executor::MAX_TIMEOUT);
    let force_requested = p.force_execute;
    let workdir = resolve_workdir(&grants, &ctx.config.workspace, p.workdir.as_deref())?;

    let report = classify::check(
        &command,
        &Context {
            workdir: Some(workdir.clone()),
        },
    );
    if !report.valid {
        return Err(Outcome::failed(format!(
            "command refused: {}",
            report
                .error
                .clone()
                .unwrap_or_else(|| "not valid shell".into())
        )));
    }
    if report.blocked {
        return Err(Outcome {
            status: JobStatus::Blocked,
            result: Some(
                json!({"status": "blocked", "command": command, "reasons": report.reasons, "risk_score": report.risk_score}),
            ),
            error: Some(format!("blocked: {}", report.reasons.join("; "))),
        });
    }
    check_programs(&grants, &report)?;

    let f = facts(&report);
    let hash = report.command_hash.clone();
    let now = crate::time::now_ms();
    // Effects over commands (DESIGN §5.12): an overlay run of this job may wait for a human; an
    // approval then binds to the command *and* that exact change set.
    let ws = workspace_of(ctx);
    let data_dir = ctx.config.data_dir.clone();
    let sigs = signatures::of_report(&report, &workdir, &ws);
    let Known {
        entry,
        promotion,
        last_requested,
        last_executed,
        pending,
        sig_state,
    } = known(ctx, &hash, &command, &workdir, &f, &sigs, now).await?;
    let expected_hash = pending
        .as_ref()
        .map(|m| m.effect_hash.clone())
        .unwrap_or_else(|| hash.clone());
    let approved = ctx
        .approval
        .as_ref()
        .is_some_and(|a| a.command_hash == expected_hash);
    // A human answered this command's host request (issue 23): run it again, with the hosts
    // the human approved (on the overlay when its writes are capturable).
    let egress_approved = ctx
        .approval
        .as_ref()
        .is_some_and(|a| a.command_hash == crate::egress::approval_hash(&hash));
    let capturable =
        ctx.config.overlay && ctx.sandbox.enforcing && overlay_capturable(&report, &workdir, &ws);
    // A duplicate is a second request to a human: a capturable command's overlay runs that
    // changed nothing asked nobody, so only its earlier requests count there.
    let last = if capturable {
        last_requested
    } else {
        last_executed.max(last_requested)
    };
    let situation = Situation {
        facts: f.clone(),
        policy: entry.current_policy,
        user_override: entry.user_override,
        force_requested,
        force_granted: grants.has(Permission::ForceExecute),
        approved: approved || egress_approved,
        since_last_ms: last.map(|t| now - t),
        duplicate_threshold_ms: entry.duplicate_threshold_ms,
        duplicate_check_enabled: entry.duplicate_check_enabled,
        sandbox_enforcing: ctx.sandbox.enforcing,
        overlay: capturable,
        signatures_learned: sig_state.all_learned && sigs.iter().all(|s| s.learnable),
        signature_always_ask: sig_state.always_ask,
        signature_never: sig_state.never.clone(),
        promoted: promotion.as_ref().map(|p| p.mode),
    };
    let verdict = policy::decide(&situation);
    // An approved change set is applied, never re-run — also when `approve --always` has just
    // set always_allow (which precedes the approval in the table).
    let apply_it = pending.is_some() && approved && matches!(verdict, Verdict::Run(_));
    if pending.is_some() && !apply_it {
        // A change set nobody may apply any more (denied by an override, or superseded).
        changes::discard(&data_dir, ctx.job_id);
    }
    match verdict {
        Verdict::Blocked => Err(Outcome {
            status: JobStatus::Blocked,
            result: Some(json!({"status": "blocked", "reasons": report.reasons})),
            error: Some("blocked".into()),
        }),
        Verdict::Denied(why) => Err(Outcome {
            status: JobStatus::Denied,
            result: Some(json!({"status": "denied", "command": command, "reason": why})),
            error: Some(why),
        }),
        Verdict::Duplicate { seconds_since_last } => Ok(Outcome {
            status: JobStatus::DuplicateWarning,
            result: Some(json!({
                "status": "duplicate_warning",
                "command": command,
                "seconds_since_last": seconds_since_last,
                "threshold_ms": entry.duplicate_threshold_ms,
            })),
            error: Some(format!(
                "the same command was asked {seconds_since_last:.1} s ago; nothing ran — resubmit after {} ms",
                entry.duplicate_threshold_ms
            )),
        }),
        Verdict::Ask(shown) => {
            remember_signatures(ctx, &sigs, false).await;
            ask(ctx, &command, &report, &workdir, &shown, force_requested && !situation.force_granted, Asked::Command).await
        }
        Verdict::Run(_) if egress_approved && capturable => {
            overlay_run(ctx, &command, &report, &f, &workdir, &ws, timeout, None, &sigs, false).await
        }
        Verdict::Overlay { auto } => {
            let force_refused = force_requested && !situation.force_granted;
            // Auto-applied because learned signatures, or an overlay promotion, cover it.
            let why = if situation.signatures_learned { "signature_learned" } else { "promoted" };
            let auto = auto.then_some(why);
            overlay_run(ctx, &command, &report, &f, &workdir, &ws, timeout, auto, &sigs, force_refused).await
        }
        Verdict::Run(_) if apply_it => {
            match pending {
                Some(m) => {
                    let out = apply_pending(ctx, m, "approved").await;
                    // The human saw and approved this change set: evidence (overlay mode).
                    // A reviewer's approval is not (issue 22).
                    if human_approved(ctx) {
                        let ok = matches!(&out, Ok(o) if o.status == JobStatus::Succeeded);
                        let ev = evidence_of(ctx, &report, Source::HumanApproved, Mode::Overlay, PermissionSet::Filesystem.as_str(), ok);
                        record_evidence(ctx, &f, ev).await;
                    }
                    out
                }
                None => Err(Outcome::failed("internal error: change set vanished")),
            }
        }
        Verdict::Run(policy_used) => {
            let set = entry.permission_set.clone().unwrap_or_else(|| report.permission_set.to_string());
            execute(ctx, &command, &report, &f, &workdir, timeout, &policy_used, &set).await
        }
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
    ctx: &JobCtx,
    hash: &str,
    command: &str,
    workdir: &Path,
    f: &Facts,
    sigs: &[Signature],
    now: i64,
) -> Result<Known, Outcome> {
    let stores = std::sync::Arc::clone(&ctx.stores);
    let (h, text, wd, f, sigs) = (
        hash.to_string(),
        command.to_string(),
        workdir.display().to_string(),
        f.clone(),
        sigs.to_vec(),
    );
    let (client, job_id, threshold) = (
        ctx.client_id.clone(),
        ctx.job_id,
        ctx.config.signature_approvals,
    );
    let data_dir = ctx.config.data_dir.clone();
    let read = move || -> Result<Known, String> {
        let (entry, promotion, last_executed) = stores
            .security
            .with(|c| {
                let version = classify::CLASSIFIER_VERSION;
                let entry = registry::get_or_create(c, &h, &text, &wd, &f, version, false, now)?;
                let promotion = evidence::promotion(c, &client, &h, f.permission_set.as_str())?;
                let last = validations::last_executed(c, &h, job_id).unwrap_or(entry.last_executed);
                Ok((entry, promotion, last))
            })
            .map_err(|e| format!("command registry: {e:#}"))?;
        let last_requested = stores
            .output_readers
            .get()
            .ok()
            .and_then(|c| validations::last_requested(&c, &h, &text, job_id).ok())
            .flatten();
        let pending = changes::load_manifest(&data_dir, job_id)
            .ok()
            .flatten()
            .filter(|m| m.command_hash == h);
        let sig_state = if sigs.is_empty() {
            SigState::default()
        } else {
            stores
                .security
                .with(|c| signatures::observe(c, &client, &sigs, threshold, now))
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

/// What a human is asked about.
#[derive(Clone, Copy)]
enum Asked<'a> {
    /// The command, before it runs.
    Command,
    /// The change set of its overlay run.
    Effects(&'a Manifest),
    /// The hosts its run was refused (issue 23); approving re-runs it with the hosts approved.
    Hosts(&'a HostAsk),
}

/// A run that was refused hosts: the hosts, and what the run did.
struct HostAsk {
    hosts: Vec<String>,
    exit_code: Option<i32>,
    stdout: String,
    stderr: String,
    connections: Vec<crate::egress::proxy::Connection>,
}

impl HostAsk {
    /// `Some` when the run was refused at least one host.
    fn of(
        conns: Vec<crate::egress::proxy::Connection>,
        r: &executor::ExecResult,
    ) -> Option<HostAsk> {
        let hosts = crate::egress::refused(&conns);
        (!hosts.is_empty()).then(|| HostAsk {
            hosts,
            exit_code: r.exit_code,
            stdout: r.stdout.clone(),
            stderr: r.stderr.clone(),
            connections: conns,
        })
    }
}

async fn ask(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    workdir: &Path,
    shown: &str,
    force_refused: bool,
    asked: Asked<'_>,
) -> Result<Outcome, Outcome> {
    let id = crate::ask::new_id()?;
    let mut reasons = report.reasons.clone();
    let effects = match asked {
        Asked::Effects(m) => Some(m),
        _ => None,
    };
    // What the approval binds to: the command, the command and its change set, or the
    // command's host request.
    let bound_hash = match asked {
        Asked::Command => report.command_hash.clone(),
        Asked::Effects(m) => m.effect_hash.clone(),
        Asked::Hosts(_) => crate::egress::approval_hash(&report.command_hash),
    };
    if let Asked::Hosts(h) = asked {
        let req = crate::egress::store::Request {
            validation_id: id.clone(),
            job_id: ctx.job_id,
            client_id: ctx.client_id.clone(),
            command_hash: report.command_hash.clone(),
            hosts: h.hosts.clone(),
        };
        ctx.stores
            .security
            .call(move |c| crate::egress::store::save_request(c, &req))
            .await
            .map_err(|e| Outcome::failed(format!("cannot record the host request: {e:#}")))?;
        reasons.splice(
            0..0,
            crate::egress::refusal_reasons(&ctx.client_id, &id, &h.hosts),
        );
    }
    if let Some(m) = effects {
        reasons.insert(
            0,
            format!(
                "ran on an overlay of the workspace (exit {}); its effects: {} — `brainloop show {id}` for the diff; approve applies exactly this change set, deny discards it",
                m.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
                m.change_set.summary()
            ),
        );
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
        command: command.to_string(),
        bound_hash,
        policy: shown.to_string(),
        risk_score: Some(report.risk_score),
        permission_set: report.permission_set.to_string(),
        workdir: Some(workdir.display().to_string()),
        reasons,
    };
    let (_, mut result) = crate::ask::ask(&ctx.asker(), request).await?;
    result.insert("layers".into(), json!(layers));
    if let Some(m) = effects {
        let diff = m.change_set.diff();
        let (diff, _) = cap_str(&diff, 4096);
        result.insert("effects".into(), effects_json(m));
        result.insert("diff".into(), json!(diff));
        result.insert("exit_code".into(), json!(m.exit_code));
        result.insert("stdout".into(), json!(m.stdout));
        result.insert("stderr".into(), json!(m.stderr));
    }
    if let Asked::Hosts(h) = asked {
        result.insert("egress_refused".into(), json!(h.hosts));
        result.insert("egress".into(), json!(h.connections));
        result.insert("exit_code".into(), json!(h.exit_code));
        result.insert("stdout".into(), json!(h.stdout));
        result.insert("stderr".into(), json!(h.stderr));
    }
    Ok(crate::ask::pending(result))
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

#[allow(clippy::too_many_arguments)]
async fn execute(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    f: &Facts,
    workdir: &Path,
    timeout: Duration,
    policy_used: &str,
    permission_set: &str,
) -> Result<Outcome, Outcome> {
    // The set recorded in the registry (the one it was approved/promoted under) decides.
    let set = stored_set(permission_set);
    let prepared = crate::sandbox::prepare(
        &ctx.sandbox,
        &ctx.config.sandbox,
        set,
        command,
        workdir,
        &workspace_of(ctx),
        executor::filtered_env(|k| std::env::var(k).ok()),
        &ctx.config.data_dir,
        ctx.job_id,
    )
    .map_err(Outcome::failed)?;
    let mut prepared = prepared;
    // A network set's only way out is its egress proxy (issue 23).
    let proxy = match prepared.sandbox.as_mut() {
        Some((_, spec)) if set.network() => {
            let scope = crate::egress::job::Scope::Granted;
            match crate::egress::job::start(&ctx.egress(), &report.command_hash, scope, spec).await
            {
                Ok(p) => Some(p),
                Err(e) => {
                    prepared.finish_in_background();
                    return Err(Outcome::failed(e));
                }
            }
        }
        _ => None,
    };
    let label = prepared.label.clone();
    let req = ExecRequest {
        command: command.to_string(),
        workdir: workdir.to_path_buf(),
        timeout,
        sandbox: prepared.sandbox.clone(),
    };
    let data_dir = ctx.config.data_dir.clone();
    let job_id = ctx.job_id;
    let res = executor::execute_with(&req, &ctx.cancel, |pgid| {
        leftovers::record(&data_dir, job_id, pgid)
    })
    .await;
    leftovers::forget(&data_dir, job_id);
    prepared.finish_in_background();
    let conns = match proxy {
        Some(p) => crate::egress::job::finish(&ctx.egress(), &report.command_hash, p).await,
        None => Vec::new(),
    };
    let r = res.map_err(|e| Outcome::failed(format!("cannot start the command: {e}")))?;
    if r.cancelled {
        return Ok(Outcome::cancelled());
    }
    if r.sandbox_failed {
        return Err(Outcome::failed(format!(
            "the sandbox could not confine the command, so nothing ran: {}",
            r.stderr.trim()
        )));
    }
    let success = r.success();
    // Evidence only when a human approved this run, or the operator's override allowed it.
    let source = match policy_used {
        "approved" if human_approved(ctx) => Some(Source::HumanApproved),
        "always_allow" => Some(Source::OperatorOverride),
        _ => None,
    };
    let ev = source.map(|s| evidence_of(ctx, report, s, Mode::Direct, permission_set, success));
    record_run(ctx, report, f, &label, &r, ev).await;
    if let Some(h) = HostAsk::of(conns.clone(), &r) {
        return ask(
            ctx,
            command,
            report,
            workdir,
            "ask",
            false,
            Asked::Hosts(&h),
        )
        .await;
    }
    let result = json!({
        "egress": conns,
        "success": success,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "stdout": r.stdout,
        "stderr": r.stderr,
        "duration_ms": r.duration_ms,
        "policy_used": policy_used,
        "truncated": r.truncated,
        "timed_out": r.timed_out,
        "sandbox": label,
        "permission_set": set.as_str(),
        "executed_path": report.executed_path,
        "command_hash": report.command_hash,
    });
    Ok(Outcome {
        status: if success {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        },
        error: (!success).then(|| {
            if r.timed_out {
                format!(
                    "timed out after {} ms (process tree killed)",
                    timeout.as_millis()
                )
            } else if let Some(code) = r.exit_code {
                format!("exit code {code}")
            } else {
                format!("killed by signal {}", r.signal.unwrap_or(0))
            }
        }),
        result: Some(result),
    })
}

/// This run was approved by a human (not by the `[reviewer]` command): only then is it evidence.
fn human_approved(ctx: &JobCtx) -> bool {
    ctx.approval.as_ref().is_some_and(|a| a.by_human())
}

fn evidence_of(
    ctx: &JobCtx,
    report: &CheckReport,
    source: Source,
    mode: Mode,
    set: &str,
    success: bool,
) -> Evidence {
    Evidence {
        client_id: ctx.client_id.clone(),
        command_hash: report.command_hash.clone(),
        job_id: ctx.job_id,
        source,
        decided_by: ctx
            .approval
            .as_ref()
            .map(|a| format!("validation {}", a.validation_id)),
        mode,
        permission_set: set.to_string(),
        success,
    }
}

fn log_changes(res: anyhow::Result<Vec<policy::Change>>) {
    match res {
        Ok(ch) => {
            for c in ch {
                tracing::info!(change = ?c, "command policy changed");
            }
        }
        Err(e) => tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the run or its evidence"
        ),
    }
}

/// Counts a run in the registry (executions, statistics) and, when a human decision or an
/// operator override allowed it, as evidence (`bash::evidence`), which alone drives learning.
async fn record_run(
    ctx: &JobCtx,
    report: &CheckReport,
    f: &Facts,
    label: &str,
    r: &executor::ExecResult,
    evidence: Option<Evidence>,
) {
    ctx.stats.incr("bash_executions", 1.0);
    let (h, f2, sandbox, code, ms, success, job_id, client) = (
        report.command_hash.clone(),
        f.clone(),
        label.to_string(),
        r.exit_code,
        r.duration_ms as i64,
        r.success(),
        ctx.job_id,
        ctx.client_id.clone(),
    );
    let now = crate::time::now_ms();
    let res = ctx
        .stores
        .security
        .call(move |c| {
            let run = registry::Run {
                hash: &h,
                job_id,
                client_id: &client,
                exit_code: code,
                success,
                duration_ms: ms,
                sandbox: &sandbox,
                evidence,
            };
            registry::record_run(c, &run, &f2, now)
        })
        .await;
    log_changes(res);
}

/// Evidence without a run of its own (an approved change set applied).
async fn record_evidence(ctx: &JobCtx, f: &Facts, ev: Evidence) {
    let f2 = f.clone();
    let now = crate::time::now_ms();
    let res = ctx
        .stores
        .security
        .call(move |c| evidence::record_and_learn(c, &ev, Some(&f2), now))
        .await;
    log_changes(res);
}

/// Whether the overlay can capture every effect of the command: no network, environment or
/// system-control operation (workspace runners such as git hooks or test runners excepted: they
/// run confined on the overlay too, without network), a static program name, every statically known write inside the workspace,
/// and a working directory inside the workspace (the overlay covers only the workspace).
pub fn overlay_capturable(report: &CheckReport, workdir: &Path, workspace: &Path) -> bool {
    !report.computed_program
        && report
            .operations
            .iter()
            .all(|op| signatures::not_capturable(op).is_none())
        && workdir.starts_with(workspace)
        && report.operations.iter().all(|op| {
            op.writes
                .iter()
                .all(|w| signatures::write_in_workspace(w, workdir, workspace))
        })
}

async fn remember_signatures(ctx: &JobCtx, sigs: &[Signature], overlay: bool) {
    if sigs.is_empty() {
        return;
    }
    let texts: Vec<String> = sigs.iter().map(|s| s.text.clone()).collect();
    let (job, client) = (ctx.job_id, ctx.client_id.clone());
    let now = crate::time::now_ms();
    if let Err(e) = ctx
        .stores
        .security
        .call(move |c| signatures::remember_job(c, job, &client, overlay, &texts, now))
        .await
    {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the job's signatures"
        );
    }
}

fn cap_str(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_string(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}… (truncated)", &s[..end]), true)
}

fn effects_json(m: &Manifest) -> Value {
    let (a, md, d) = m.change_set.counts();
    json!({
        "added": a,
        "modified": md,
        "deleted": d,
        "change_set_hash": m.change_set.hash,
        "changes": m.change_set.changes.iter().take(200).map(|c| json!({"path": c.path, "kind": c.kind})).collect::<Vec<_>>(),
    })
}

/// Runs the command in the sandbox on an overlay of the workspace, then: no change → the result
/// at once; learned signatures (`auto`) → applies the change set now (journaled); otherwise →
/// keeps the change set under the data dir and asks a human about it.
#[allow(clippy::too_many_arguments)]
async fn overlay_run(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    f: &Facts,
    workdir: &Path,
    workspace: &Path,
    timeout: Duration,
    auto: Option<&str>,
    sigs: &[Signature],
    force_refused: bool,
) -> Result<Outcome, Outcome> {
    let data_dir = ctx.config.data_dir.clone();
    let job_id = ctx.job_id;
    // Bounded overlays (issue 18): a client's pending change sets share one budget, and this
    // run's byte cap is at most what is left of it.
    let pending_bytes = {
        let (dd, client) = (data_dir.clone(), ctx.client_id.clone());
        tokio::task::spawn_blocking(move || changes::pending_bytes(&dd, &client))
            .await
            .map_err(|e| Outcome::failed(format!("overlay: {e}")))?
            .map_err(|e| Outcome::failed(format!("overlay: {e:#}")))?
    };
    let budget = ctx.config.pending_max_bytes_per_client;
    if pending_bytes >= budget {
        return Err(Outcome::failed(format!(
            "client {} already has {pending_bytes} bytes of change sets waiting for a human, at or over pending_max_bytes_per_client ({budget}); nothing ran — answer or deny its pending validations (`brainloop validations`), or raise pending_max_bytes_per_client",
            ctx.client_id
        )));
    }
    let (max_bytes, cap_key) = if budget - pending_bytes < ctx.config.overlay_max_bytes {
        (budget - pending_bytes, "pending_max_bytes_per_client")
    } else {
        (ctx.config.overlay_max_bytes, "overlay_max_bytes")
    };
    let (upper, work) = {
        let dd = data_dir.clone();
        tokio::task::spawn_blocking(move || changes::create_layers(&dd, job_id))
            .await
            .map_err(|e| Outcome::failed(format!("overlay: {e}")))?
            .map_err(|e| Outcome::failed(format!("cannot create the overlay layers: {e:#}")))?
    };
    let discard = || changes::discard(&data_dir, job_id);
    let mut prepared = match crate::sandbox::prepare(
        &ctx.sandbox,
        &ctx.config.sandbox,
        PermissionSet::Filesystem,
        command,
        workdir,
        workspace,
        executor::filtered_env(|k| std::env::var(k).ok()),
        &ctx.config.data_dir,
        job_id,
    ) {
        Ok(p) => p,
        Err(e) => {
            discard();
            return Err(Outcome::failed(e));
        }
    };
    let Some((_, spec)) = prepared.sandbox.as_mut() else {
        prepared.finish_in_background();
        discard();
        return Err(Outcome::failed(
            "the overlay needs the sandbox, which is not enforcing here; nothing ran",
        ));
    };
    spec.overlay = Some(crate::sandbox::OverlaySpec {
        workspace: workspace.to_path_buf(),
        upper: upper.clone(),
        work,
        max_bytes: Some(max_bytes),
        max_entries: Some(ctx.config.overlay_max_inodes),
        over_cap_file: Some(changes::job_dir(&data_dir, job_id).join(changes::OVER_CAP_FILE)),
    });
    // The overlay run reaches only the hosts a human approved for this command (issue 23).
    let scope = crate::egress::job::Scope::ApprovedOnly;
    let proxy =
        match crate::egress::job::start(&ctx.egress(), &report.command_hash, scope, spec).await {
            Ok(p) => p,
            Err(e) => {
                prepared.finish_in_background();
                discard();
                return Err(Outcome::failed(e));
            }
        };
    let label = format!("{} + overlay", prepared.label);
    let req = ExecRequest {
        command: command.to_string(),
        workdir: workdir.to_path_buf(),
        timeout,
        sandbox: prepared.sandbox.clone(),
    };
    let res = executor::execute_with(&req, &ctx.cancel, |pgid| {
        leftovers::record(&data_dir, job_id, pgid)
    })
    .await;
    leftovers::forget(&data_dir, job_id);
    prepared.finish_in_background();
    let conns = crate::egress::job::finish(&ctx.egress(), &report.command_hash, proxy).await;
    let r = match res {
        Ok(r) => r,
        Err(e) => {
            discard();
            return Err(Outcome::failed(format!("cannot start the command: {e}")));
        }
    };
    if r.cancelled {
        discard();
        return Ok(Outcome::cancelled());
    }
    if let Some(what) = changes::over_cap(&data_dir, job_id) {
        discard();
        return Err(Outcome::failed(over_cap_message(
            &what,
            max_bytes,
            cap_key,
            ctx.config.overlay_max_inodes,
        )));
    }
    if r.sandbox_failed {
        discard();
        if r.stderr.contains("mount overlay") {
            // No overlay here (e.g. the data dir's file system cannot hold an upper layer):
            // nothing ran; ask about the command up front, as without the overlay.
            tracing::warn!(
                stderr = r.stderr.trim(),
                "overlay unavailable; asking up front"
            );
            return ask_kept_nothing(
                ctx,
                command,
                report,
                workdir,
                sigs,
                force_refused,
                Asked::Command,
            )
            .await;
        }
        return Err(Outcome::failed(format!(
            "the sandbox could not confine the command, so nothing ran: {}",
            r.stderr.trim()
        )));
    }
    // An overlay run is never evidence: nobody has seen its effects yet.
    record_run(ctx, report, f, &label, &r, None).await;
    if let Some(h) = HostAsk::of(conns, &r) {
        // What it did without those hosts is not what the human would approve: nothing kept;
        // approving the hosts re-runs it on the overlay.
        discard();
        return ask_kept_nothing(
            ctx,
            command,
            report,
            workdir,
            sigs,
            force_refused,
            Asked::Hosts(&h),
        )
        .await;
    }
    if ctx.config.test_actions {
        test_pause("BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS").await;
    }
    let cs = {
        let (u, w) = (upper.clone(), workspace.to_path_buf());
        tokio::task::spawn_blocking(move || {
            changes::compute(&u, &w).map(|cs| (cs, changes::upper_bytes(&u)))
        })
        .await
        .map_err(|e| Outcome::failed(format!("overlay: {e}")))?
    };
    let (cs, upper_bytes) = match cs {
        Ok(cs) => cs,
        Err(e) => {
            discard();
            return Err(Outcome::failed(format!(
                "cannot capture the command's effects, so nothing was applied: {e:#}"
            )));
        }
    };
    let m = Manifest {
        job_id,
        command: command.to_string(),
        command_hash: report.command_hash.clone(),
        effect_hash: changes::effect_hash(&report.command_hash, &cs.hash),
        workspace: workspace.to_path_buf(),
        workdir: workdir.to_path_buf(),
        exit_code: r.exit_code,
        success: r.success(),
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        truncated: r.truncated,
        duration_ms: r.duration_ms as u64,
        sandbox: label.clone(),
        signatures: sigs.iter().map(|s| s.text.clone()).collect(),
        change_set: cs,
        created_at: crate::time::now_ms(),
        client_id: ctx.client_id.clone(),
        upper_bytes,
    };
    if m.change_set.is_empty() {
        discard();
        return Ok(ran_outcome(
            &m,
            auto.unwrap_or("overlay_no_changes"),
            json!([]),
            None,
        ));
    }
    // A learned signature applies only what the command names, never a protected path
    // (`bash::effects`); otherwise the human is asked, with the reasons first. A prompt about a
    // change set touching a protected path says so, learned or not.
    let refused_report;
    let (auto, report) = {
        use crate::bash::effects;
        let why = match effects::Protected::shared(&ctx.config.protected_paths) {
            Ok(p) if auto.is_some() => {
                effects::auto_apply_refusals(report, workdir, workspace, &m.change_set, &p)
            }
            Ok(p) => effects::protected_refusals(&m.change_set, &p),
            Err(e) => vec![format!("the protected-path table is unusable: {e:#}")],
        };
        if why.is_empty() {
            (auto, report)
        } else {
            let mut r = report.clone();
            let lead = if auto.is_some() {
                "not applied automatically: "
            } else {
                ""
            };
            r.reasons
                .splice(0..0, why.into_iter().map(|w| format!("{lead}{w}")));
            refused_report = r;
            (None, &refused_report)
        }
    };
    if let Some(policy_used) = auto {
        let texts = m.signatures.clone();
        let out = apply_pending(ctx, m, policy_used).await;
        if out.is_ok() {
            let _ = ctx
                .stores
                .security
                .call(move |c| signatures::count_auto_applied(c, &texts))
                .await;
        }
        return out;
    }
    let saved = {
        let (dd, m2) = (data_dir.clone(), m.clone());
        tokio::task::spawn_blocking(move || changes::save_manifest(&dd, &m2))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
            .and_then(|r| r)
    };
    if let Err(e) = saved {
        discard();
        return Err(Outcome::failed(format!(
            "cannot keep the change set: {e:#}"
        )));
    }
    remember_signatures(ctx, sigs, true).await;
    ask(
        ctx,
        command,
        report,
        workdir,
        "ask",
        force_refused,
        Asked::Effects(&m),
    )
    .await
}

/// The error of an overlay run the sandbox helper stopped over its cap (`what`: the helper's
/// record, `bytes LIMIT MEASURED` / `entries LIMIT MEASURED` / `unmeasured`).
/// Asks a human about a command whose overlay run kept nothing: its signatures count as asked
/// up front, not as a change set.
async fn ask_kept_nothing(
    ctx: &JobCtx,
    command: &str,
    report: &CheckReport,
    workdir: &Path,
    sigs: &[Signature],
    force_refused: bool,
    asked: Asked<'_>,
) -> Result<Outcome, Outcome> {
    remember_signatures(ctx, sigs, false).await;
    ask(ctx, command, report, workdir, "ask", force_refused, asked).await
}

fn over_cap_message(what: &str, max_bytes: u64, cap_key: &str, max_inodes: u64) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    let mut w = what.split_whitespace();
    match w.next() {
        Some("entries") => format!(
            "the command created more than {max_inodes} files and directories on the overlay (overlay_max_inodes); it was stopped and nothing was kept"
        ),
        Some("bytes") if cap_key == "pending_max_bytes_per_client" => format!(
            "the command wrote more than the {} left of this client's budget for change sets waiting for a human (pending_max_bytes_per_client); it was stopped and nothing was kept — answer or deny the client's pending validations (`brainloop validations`), or raise pending_max_bytes_per_client",
            mib(max_bytes)
        ),
        Some("bytes") => format!(
            "the command wrote more than {} on the overlay (overlay_max_bytes); it was stopped and nothing was kept",
            mib(max_bytes)
        ),
        _ => format!(
            "the command's writes on the overlay could not be measured (a tree too deep to walk), so they count as over the cap (overlay_max_bytes {}); it was stopped and nothing was kept",
            mib(max_bytes)
        ),
    }
}

/// The result of a command that ran on the overlay (seed 001's shape plus the effects).
fn ran_outcome(m: &Manifest, policy_used: &str, applied: Value, undo: Option<String>) -> Outcome {
    let success = m.success;
    let mut result = json!({
        "success": success,
        "exit_code": m.exit_code,
        "stdout": m.stdout,
        "stderr": m.stderr,
        "duration_ms": m.duration_ms,
        "policy_used": policy_used,
        "truncated": m.truncated,
        "sandbox": m.sandbox,
        "permission_set": PermissionSet::Filesystem,
        "command_hash": m.command_hash,
        "effects": effects_json(m),
        "applied": applied,
    });
    if let (Some(u), Some(o)) = (undo, result.as_object_mut()) {
        o.insert("undo".into(), json!(u));
    }
    Outcome {
        status: if success {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        },
        error: (!success).then(|| match m.exit_code {
            Some(c) => format!("exit code {c}"),
            None => "the command did not exit normally".into(),
        }),
        result: Some(result),
    }
}

/// Applies a change set to the real workspace (refused on conflict), journals it, and removes
/// its overlay layers. Nothing is re-run.
/// Test hooks (only with `test_actions`): `BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS` holds a job between
/// its apply and its result, `BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS` between its overlay run (recorded
/// in the registry) and its validation, so process-level tests can kill the worker there.
async fn test_pause(var: &str) {
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

async fn apply_pending(ctx: &JobCtx, m: Manifest, policy_used: &str) -> Result<Outcome, Outcome> {
    let data_dir = ctx.config.data_dir.clone();
    let job_id = ctx.job_id;
    let applied = {
        let (dd, m2) = (data_dir.clone(), m.clone());
        tokio::task::spawn_blocking(move || changes::apply(&dd, &m2))
            .await
            .map_err(|e| Outcome::failed(format!("apply: {e}")))?
    };
    let journal = match applied {
        Ok(j) => j,
        Err(e) => {
            changes::discard(&data_dir, job_id);
            let msg = format!("{e:#}");
            return Err(Outcome {
                status: JobStatus::Failed,
                result: Some(json!({
                    "status": "conflict",
                    "command": m.command,
                    "policy_used": policy_used,
                    "effects": effects_json(&m),
                    "applied": [],
                    "error": msg,
                })),
                error: Some(msg),
            });
        }
    };
    let entries = serde_json::to_string(&journal.entries).unwrap_or_else(|_| "[]".into());
    let (cmd, wsd, pu, summary) = (
        m.command.clone(),
        m.workspace.display().to_string(),
        policy_used.to_string(),
        m.change_set.summary(),
    );
    let now = crate::time::now_ms();
    let stored = ctx
        .stores
        .security
        .call(move |c| {
            Ok(write_tx(c, |tx| {
                tx.execute(
                    "INSERT OR REPLACE INTO journal(job_id, command, workspace, policy_used, summary, entries, applied_at, undone_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
                    rusqlite::params![job_id, cmd, wsd, pu, summary, entries, now],
                )
            })?)
        })
        .await;
    if let Err(e) = stored {
        tracing::error!(
            error = format!("{e:#}"),
            job_id,
            "applied, but cannot record the journal row (journal/{job_id}/entries.json has it)"
        );
    }
    // The change set stays until the job's final result is committed (swept at start-up and by
    // the retention pass): a crash before that commit asks again, and the approved re-ask must
    // find this manifest to resume the apply — without it the command would run again on the
    // already-changed workspace and its effect be applied twice (found by scripts/soak.sh).
    if ctx.config.test_actions {
        test_pause("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS").await;
    }
    let paths = m.change_set.paths_json();
    Ok(ran_outcome(
        &m,
        policy_used,
        paths,
        Some(format!("brainloop undo {job_id}")),
    ))
}

#[cfg(test)]
mod issue19_tests {
    use super::*;
    use crate::clients::{Grant, Source};

    /// A workdir outside the workspace and the grants gets one denial, the same whether it
    /// exists, is a file, a symlink, a dir or `/proc/PID/cwd` — no oracle (issue 19 item 4).
    #[test]
    fn an_ungranted_workdir_outside_gets_one_generic_denial() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let out = t.path().join("out");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(out.join("dir")).unwrap();
        std::fs::write(out.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", out.join("link")).unwrap();
        std::os::unix::fs::symlink(out.join("dir"), ws.join("inlink")).unwrap();
        let g = ClientGrants::new(
            "c",
            vec![Grant {
                permission: Permission::FileRead,
                pattern: "{workspace}/**".into(),
                auto: false,
                source: Source::Config,
            }],
            &ws,
        )
        .unwrap();
        let o = out.display();
        for req in [
            format!("{o}/dir"),
            format!("{o}/file"),
            format!("{o}/link"),
            format!("{o}/missing"),
            "/proc/1/cwd".to_string(),
            "../out/dir".to_string(),
            "inlink".to_string(),
        ] {
            let e = resolve_workdir(&g, &ws, Some(&req)).unwrap_err();
            assert_eq!(
                e.status,
                crate::db::output::JobStatus::Denied,
                "{req}: {:?}",
                e.error
            );
            let msg = e.error.unwrap_or_default();
            for leak in ["exist", "directory", "/etc", "/dir"] {
                assert!(
                    !msg.contains(leak) || req.contains(leak),
                    "{req}: the error reveals `{leak}`: {msg}"
                );
            }
        }
        assert!(resolve_workdir(&g, &ws, Some(".")).is_ok());
    }

    #[test]
    fn an_unrecognised_stored_set_falls_back_to_the_narrowest() {
        // the line in `execute`: a registry row with a set this build does not know
        assert_eq!(stored_set("full-access"), PermissionSet::Minimal);
        assert_eq!(stored_set("trusted"), PermissionSet::Minimal);
        assert_eq!(stored_set("network-api"), PermissionSet::NetworkApi);
        let src = include_str!("bash.rs");
        assert!(!src.contains(&["unwrap_or(PermissionSet::", "McpStandard)"].concat()));
    }
}
