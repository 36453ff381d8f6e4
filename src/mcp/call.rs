//! One `tools/call` of the `brainloop` tool, from arguments to [`Reply`]:
//!
//! 1. arguments: exactly `{action, params}` (an unexpected key such as `client_id` is refused:
//!    the identity is the operator's `--client`, nothing a caller sends);
//! 2. the action must be in the registry; params an object within `params_max_bytes`;
//! 3. `force_execute` (any value but `false`) needs the client's FORCE_EXECUTE grant, checked
//!    here with `clients::load` (the worker checks it again);
//! 4. params are validated against the action's schema;
//! 5. `list_actions` / `get_schema` are answered here; every other call needs a live worker
//!    (fails fast with the heartbeat age otherwise), is inserted as a job for `--client`, and
//!    the call waits — woken by output.db changing — for the job's final result, returning at
//!    once if it ends `pending_validation`. Cancellation or the timeout stop the wait, never the
//!    job.
//!
//! The params inserted are the re-serialised value that was checked, so duplicate keys or other
//! encodings cannot make the worker see something else. Steps 1–5 that answer or refuse write
//! an audit row ([`super::audit`]); jobs are audited by the worker.

use super::audit::{self, status, Auditor};
use super::liveness::Liveness;
use super::queue::Queue;
use super::reply::Reply;
use super::tool::ARGUMENTS;
use super::watch::OutputWatch;
use crate::actions::{self, Registry};
use crate::clients::{self, Permission};
use crate::config::Config;
use crate::db::metadata::AuditRow;
use crate::db::{self, DbKind};
use rmcp::model::{CreateTaskResult, JsonObject, ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a waiting call re-checks the worker's heartbeat (and its job, as a fallback).
const RECHECK: Duration = Duration::from_secs(1);

/// A waiting call tells a client that asked for progress each status change of its job
/// (queued → running → waiting for the operator → done), at most one per `PROGRESS_GAP` (a
/// change inside the gap is told at the next wake-up, within [`RECHECK`]; the last one always),
/// and repeats the current one every `PROGRESS_EVERY` while nothing changes.
const PROGRESS_GAP: Duration = Duration::from_millis(250);
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Where progress notifications go: the caller's peer and the token of its request.
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// One waiting call's progress: what it last told, and when (see [`PROGRESS_GAP`]).
struct Teller {
    progress: Option<Progress>,
    step: u32,
    told: Option<String>,
    at: Option<Instant>,
}

impl Teller {
    /// Tells `state` unless it was the last told (then only the beat), or a change was told
    /// less than `PROGRESS_GAP` ago and this one is not the `last`.
    async fn tell(&mut self, job_id: i64, state: &str, last: bool) {
        let Some(p) = &self.progress else { return };
        let changed = self.told.as_deref() != Some(state);
        let since = self.at.map(|t| t.elapsed());
        let due = match (changed, since) {
            (_, None) => true,
            (true, Some(s)) => last || s >= PROGRESS_GAP,
            (false, Some(s)) => s >= PROGRESS_EVERY,
        };
        if !due {
            return;
        }
        let poll = if last {
            String::new()
        } else {
            format!("; waiting for its result (poll: get_result {{\"job_id\": {job_id}}})")
        };
        p.send(self.step, format!("job {job_id} {state}{poll}"))
            .await;
        self.step += 1;
        self.told = Some(state.to_string());
        self.at = Some(Instant::now());
    }
}

impl Progress {
    async fn send(&self, step: u32, message: String) {
        let p = ProgressNotificationParam::new(self.token.clone(), f64::from(step))
            .with_message(message);
        if let Err(e) = self.peer.notify_progress(p).await {
            tracing::debug!(error = %e, "cannot send a progress notification");
        }
    }
}

/// Everything a call needs; shared by all concurrent calls of one `brainloop mcp` process.
pub struct Frontend {
    pub config: Arc<Config>,
    pub registry: Arc<Registry>,
    /// The operator's `--client`: the only identity jobs are ever inserted with.
    pub client: String,
    pub timeout: Duration,
    pub queue: Arc<Queue>,
    pub watch: OutputWatch,
    pub auditor: Arc<Auditor>,
}

/// What a call answers: a reply, or (for a client that declared the Tasks extension) the task
/// its job became.
pub enum Answer {
    Reply(Reply),
    Task(CreateTaskResult),
}

impl From<Reply> for Answer {
    fn from(r: Reply) -> Answer {
        Answer::Reply(r)
    }
}

/// How a call is served: which tool it came through, and whether its job becomes a task.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mode {
    /// Through `brainloop_read`: only [`super::tool::READ_ACTIONS`], never a model call.
    pub read_only: bool,
    /// The client declared `io.modelcontextprotocol/tasks`: a queued job answers as a task.
    pub as_task: bool,
}

/// The parsed arguments.
struct Call {
    action: String,
    params: Value,
}

fn parse_arguments(args: Option<JsonObject>) -> Result<Call, String> {
    let Some(args) = args else {
        return Err("arguments are required: {\"action\": NAME, \"params\": {...}}".into());
    };
    if let Some(k) = args.keys().find(|k| !ARGUMENTS.contains(&k.as_str())) {
        return Err(format!(
            "unexpected argument {k:?}: the brainloop tool takes only \"action\" and \"params\" \
             (the client identity is set by the operator's configuration, not by the caller)"
        ));
    }
    let action = match args.get("action") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("\"action\" must be a string (see list_actions)".into()),
        None => return Err("\"action\" is required (start with \"list_actions\")".into()),
    };
    let params = match args.get("params") {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err("\"params\" must be an object ({} when the action takes none)".into())
        }
        None => return Err("\"params\" is required ({} when the action takes none)".into()),
    };
    Ok(Call { action, params })
}

/// A caller-chosen name, bounded for logs, errors and the audit trail.
fn short(name: &str) -> String {
    const MAX: usize = 128;
    if name.len() <= MAX {
        return name.to_string();
    }
    let mut end = MAX;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &name[..end])
}

/// Refusal messages may quote caller input (a schema error quotes the offending value): keep
/// them readable and bounded.
fn bounded(error: String) -> String {
    const MAX: usize = 4096;
    if error.len() <= MAX {
        return error;
    }
    let mut end = MAX;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &error[..end], error.len())
}

/// Whether params ask for `force_execute` (any value except `false`/`null` counts as asking).
fn asks_force(params: &Value) -> bool {
    !matches!(
        params.get("force_execute"),
        None | Some(Value::Null) | Some(Value::Bool(false))
    )
}

impl Frontend {
    fn audit_row(
        &self,
        action: Option<&str>,
        params_text: Option<&str>,
        st: &str,
        t0: Instant,
    ) -> AuditRow {
        AuditRow {
            timestamp: crate::time::now_ms(),
            job_id: None,
            client_id: self.client.clone(),
            action: action.map(str::to_string),
            params_hash: params_text.map(audit::params_hash),
            status: st.to_string(),
            duration_ms: Some(t0.elapsed().as_millis().min(i64::MAX as u128) as i64),
            permission_set: actions::permission_set_of(&self.registry, action)
                .map(|s| s.to_string()),
        }
    }

    /// Audits and returns a refusal.
    async fn refuse(
        &self,
        action: Option<&str>,
        params_text: Option<&str>,
        st: &str,
        error: String,
        t0: Instant,
    ) -> Reply {
        let error = bounded(error);
        tracing::info!(client = %self.client, action = action.unwrap_or("-"), status = st, %error, "call refused");
        self.auditor
            .record(self.audit_row(action, params_text, st, t0))
            .await;
        Reply::refused(st, error)
    }

    /// Handles one call of the tool.
    /// `progress`, when the client asked for it, gets each status change of the queued job
    /// (rate-limited, see [`PROGRESS_GAP`]) with the job id, so a client that gives up still
    /// knows what to poll.
    pub async fn call(
        &self,
        args: Option<JsonObject>,
        mode: Mode,
        ct: CancellationToken,
        progress: Option<Progress>,
    ) -> Answer {
        let t0 = Instant::now();
        let mut call = match parse_arguments(args) {
            Ok(c) => c,
            Err(e) => return self.refuse(None, None, status::FAILED, e, t0).await.into(),
        };
        if mode.read_only {
            if let Err(e) = super::tool::read_only(&call.action, &mut call.params) {
                let attempted = short(&call.action);
                return self
                    .refuse(Some(&attempted), None, status::DENIED, e, t0)
                    .await
                    .into();
            }
        }
        let Some(action) = self.registry.get(&call.action) else {
            let e = self.registry.unknown(&short(&call.action));
            let attempted = short(&call.action);
            return self
                .refuse(Some(&attempted), None, status::FAILED, e, t0)
                .await
                .into();
        };
        let name = action.spec.name;
        let params_text = call.params.to_string();
        let p = Some(params_text.as_str());
        if params_text.len() as u64 > self.config.params_max_bytes {
            let e = format!(
                "params are {} bytes, over the {} byte limit (params_max_bytes): nothing was queued",
                params_text.len(),
                self.config.params_max_bytes
            );
            return self
                .refuse(Some(name), p, status::FAILED, e, t0)
                .await
                .into();
        }
        if asks_force(&call.params) {
            if let Err(e) = self.check_force().await {
                return self
                    .refuse(Some(name), p, status::DENIED, e, t0)
                    .await
                    .into();
            }
        }
        if let Err(e) = self.registry.check_params(action, &call.params) {
            return self
                .refuse(Some(name), p, status::FAILED, e, t0)
                .await
                .into();
        }
        match name {
            "list_actions" => {
                let v = actions::list_actions_answer(&self.registry);
                self.auditor
                    .record(self.audit_row(Some(name), p, status::SUCCEEDED, t0))
                    .await;
                return Reply::answered(v).into();
            }
            "get_schema" => {
                return match actions::get_schema_answer(&self.registry, &call.params) {
                    Ok(v) => {
                        self.auditor
                            .record(self.audit_row(Some(name), p, status::SUCCEEDED, t0))
                            .await;
                        Reply::answered(v).into()
                    }
                    Err(e) => self
                        .refuse(Some(name), p, status::FAILED, e, t0)
                        .await
                        .into(),
                };
            }
            _ => {}
        }
        match self.queue.liveness(Arc::clone(&self.config)).await {
            Ok(Liveness::Alive) => {}
            Ok(Liveness::Down(why)) => {
                let e = format!("{why} (nothing was queued)");
                return self
                    .refuse(Some(name), p, status::UNAVAILABLE, e, t0)
                    .await
                    .into();
            }
            Err(e) => {
                let e = format!("cannot read the worker's heartbeat in brainloop.output.db: {e:#} (nothing was queued)");
                return self
                    .refuse(Some(name), p, status::UNAVAILABLE, e, t0)
                    .await
                    .into();
            }
        }
        if mode.as_task {
            return match self
                .queue
                .insert_task(name.to_string(), params_text.clone(), self.client.clone())
                .await
            {
                Ok((job_id, task_id)) => {
                    tracing::debug!(client = %self.client, action = name, job_id, "queued as a task");
                    Answer::Task(self.created(job_id, &task_id))
                }
                Err(e) => {
                    let e = format!("{e:#} (nothing was queued)");
                    self.refuse(Some(name), p, status::FAILED, e, t0)
                        .await
                        .into()
                }
            };
        }
        let job_id = match self
            .queue
            .insert(name.to_string(), params_text.clone(), self.client.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let e = format!("{e:#} (nothing was queued)");
                return self
                    .refuse(Some(name), p, status::FAILED, e, t0)
                    .await
                    .into();
            }
        };
        tracing::debug!(client = %self.client, action = name, job_id, "queued");
        self.wait(job_id, ct, progress).await.into()
    }

    /// FORCE_EXECUTE of `--client`, from the configuration and the operator's grants.
    async fn check_force(&self) -> Result<(), String> {
        let config = Arc::clone(&self.config);
        let client = self.client.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let conn = db::open_read_only(&config.data_dir, DbKind::Security)?;
            clients::load(&config.clients, &config.workspace, &conn, &client)
        })
        .await;
        let grants = match loaded {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => {
                return Err(format!(
                    "force_execute refused: cannot load the grants of client {:?} ({e:#})",
                    self.client
                ))
            }
            Err(e) => return Err(format!("force_execute refused: grant lookup failed ({e})")),
        };
        if grants.has(Permission::ForceExecute) {
            return Ok(());
        }
        Err(format!(
            "force_execute refused: client {c:?} is not granted FORCE_EXECUTE (only an operator can grant it: \
             brainloop grant {c} FORCE_EXECUTE '*'). Nothing was queued; send the call without force_execute \
             and a command that needs a human returns a validation id for an operator to approve.",
            c = self.client
        ))
    }

    /// `[mcp] cancel_on_abandon`: the client abandoned a blocking call, and that withdraws its
    /// job (the worker cancels it as for `tasks/cancel`).
    async fn abandoned(&self, job_id: i64, current: Option<&str>) -> Reply {
        match self.queue.withdraw(job_id, self.client.clone()).await {
            Ok(_) => {
                tracing::info!(
                    job_id,
                    "call cancelled by the client; its job is withdrawn (cancel_on_abandon)"
                );
                Reply::still_open(
                    job_id,
                    current,
                    "cancelled by the client, and its job withdrawn (cancel_on_abandon)",
                )
            }
            Err(e) => {
                tracing::warn!(job_id, error = %format!("{e:#}"), "cannot withdraw the abandoned job");
                Reply::still_open(
                    job_id,
                    current,
                    "cancelled by the client; the withdrawal failed",
                )
            }
        }
    }

    /// Waits for the job's final result (or `pending_validation`), woken by output.db changes.
    async fn wait(&self, job_id: i64, ct: CancellationToken, progress: Option<Progress>) -> Reply {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut rx = self.watch.subscribe();
        let mut last_live = Instant::now();
        let mut current: Option<String> = None;
        let mut teller = Teller {
            progress,
            step: 0,
            told: None,
            at: None,
        };
        loop {
            rx.borrow_and_update();
            match self.queue.row(job_id).await {
                Ok(Some(row)) if row.is_final() => {
                    let state = format!("done: {}", crate::shown::line(&row.status));
                    teller.tell(job_id, &state, true).await;
                    return Reply::finished(job_id, &row.status, row.result, row.error);
                }
                Ok(Some(row)) if row.status == "pending_validation" => {
                    let vid = super::reply::validation_id(row.result.as_ref());
                    let state = super::reply::waiting_message(job_id, &crate::shown::line(&vid));
                    let state = state
                        .trim_start_matches(&format!("job {job_id} "))
                        .to_string();
                    teller.tell(job_id, &state, true).await;
                    return Reply::pending(job_id, row.result);
                }
                Ok(row) => current = row.map(|r| r.status),
                Err(e) => {
                    tracing::warn!(job_id, error = %format!("{e:#}"), "cannot read the job's result; retrying")
                }
            }
            let state = crate::shown::line(current.as_deref().unwrap_or("queued"));
            teller.tell(job_id, &state, false).await;
            if last_live.elapsed() >= RECHECK {
                last_live = Instant::now();
                if let Ok(Liveness::Down(why)) = self.queue.liveness(Arc::clone(&self.config)).await
                {
                    return Reply::still_open(
                        job_id,
                        current.as_deref(),
                        &format!("stopped waiting: {why}"),
                    );
                }
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The watch task is gone: keep going on the periodic re-check alone.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                _ = tokio::time::sleep(RECHECK) => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Reply::still_open(
                        job_id,
                        current.as_deref(),
                        &format!("no final result within {} s (--timeout-s)", self.timeout.as_secs()),
                    );
                }
                _ = ct.cancelled() => {
                    if self.config.mcp.cancel_on_abandon {
                        return self.abandoned(job_id, current.as_deref()).await;
                    }
                    tracing::info!(job_id, "call cancelled by the client; the job stays queued");
                    return Reply::still_open(job_id, current.as_deref(), "cancelled by the client");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Option<JsonObject> {
        match v {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    #[test]
    fn arguments_are_exactly_action_and_params() {
        let c = parse_arguments(obj(json!({"action": "list_actions", "params": {}}))).unwrap();
        assert_eq!(c.action, "list_actions");
        for (bad, needle) in [
            (json!({"action": "list_actions"}), "params"),
            (json!({"params": {}}), "action"),
            (json!({"action": 3, "params": {}}), "string"),
            (json!({"action": "x", "params": "{}"}), "object"),
            (
                json!({"action": "x", "params": {}, "client_id": "local"}),
                "client identity",
            ),
        ] {
            let e = parse_arguments(obj(bad.clone())).err().unwrap();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        assert!(parse_arguments(None).is_err());
    }

    #[test]
    fn any_force_execute_but_false_asks_for_the_grant() {
        assert!(!asks_force(&json!({"command": "ls"})));
        assert!(!asks_force(&json!({"force_execute": false})));
        assert!(!asks_force(&json!({"force_execute": null})));
        for v in [json!(true), json!("true"), json!(1), json!({})] {
            assert!(asks_force(&json!({ "force_execute": v })), "{v}");
        }
    }
}
