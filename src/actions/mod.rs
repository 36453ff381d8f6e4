//! The action registry: every action brainloop can run, with its name, description, the JSON
//! Schema of its params (validated before anything runs), the grants it needs, and its handler.
//!
//! One registry serves the worker, `brainloop enqueue` (early refusal of unknown actions) and
//! the MCP front-end's `list_actions` / `get_schema`.

mod bash;
mod check;
mod clients;
pub mod decode;
mod infer;
mod llm;
mod loops;
mod meta;
mod readers;
mod runcode;
mod testing;

use crate::clients::ClientGrants;
use crate::config::Config;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::sync::Arc;

pub use crate::ask::ApprovedRun;
pub use crate::clients::Permission as Grant;
pub use crate::db::output::Outcome;
/// `loop` sessions for the heartbeat (open / ended) and the retention pass (idle expiry).
pub use crate::db::sessions::{
    close_orphaned_agent_sessions, count_ended as loop_sessions_ended,
    count_open as loop_sessions_open, expire_idle as expire_idle_loop_sessions,
};
pub use crate::job::JobCtx;
pub use loops::blocks::MODE as LOOP_BLOCKS_MODE;
pub use meta::{get_schema_answer, list_actions_answer};

pub use crate::job::HandlerFuture;
pub type Handler = fn(JobCtx, Value) -> HandlerFuture;
/// An answer computed from the registry and the params alone: no I/O, no grant, no waiting.
pub type InstantFn = fn(&Registry, &Value) -> Outcome;

/// How an action runs.
#[derive(Clone, Copy)]
pub enum Run {
    /// A task of its own, holding one of the worker's slots while it runs.
    Async(Handler),
    /// Answered synchronously in the supervisor's claim batch, holding no slot (issue 24: a
    /// backlog of `ping`s costs microseconds of bookkeeping each, not a task and its hand-offs).
    /// Only for actions needing no grant: `Registry::new` refuses an instant action with grants.
    Instant(InstantFn),
}

/// The static description of an action.
pub struct ActionSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// Other names accepted for this action (seed 001 names).
    pub aliases: &'static [&'static str],
    pub params_schema: fn() -> Value,
    pub grants: &'static [Grant],
    /// The permission set recorded in the audit trail.
    pub permission_set: PermissionSet,
    pub handler: Run,
    /// Hidden actions (test helpers) are runnable but not listed.
    pub hidden: bool,
    /// What a human's answer to this action's request means beyond resuming or ending the job
    /// (`ask::answers::collect` calls it for every decision and expiry of its validations).
    pub on_decision: Option<crate::ask::answers::OnDecision>,
}

pub struct Action {
    pub spec: ActionSpec,
    pub schema: Value,
    validator: jsonschema::Validator,
}

impl Action {
    /// The public description (list_actions / get_schema).
    pub fn describe(&self) -> Value {
        json!({
            "name": self.spec.name,
            "description": self.spec.description,
            "grants": self.spec.grants,
            "params_schema": self.schema,
        })
    }
}

pub struct Registry {
    actions: Vec<Action>,
    /// The clients' loaded grants, reused while command_security.db is unchanged.
    grants: Arc<crate::clients::cache::Cache<Config>>,
}

impl Registry {
    /// Builds the registry; fails only if a built-in schema is itself invalid (a bug).
    pub fn new(config: &Config) -> anyhow::Result<Registry> {
        let mut specs = meta::specs();
        specs.extend(bash::specs());
        specs.extend(check::specs());
        specs.extend(clients::specs());
        specs.extend(readers::specs());
        specs.extend(infer::specs());
        specs.extend(runcode::specs());
        specs.extend(llm::specs());
        specs.extend(loops::specs());
        if config.test_actions {
            specs.extend(testing::specs());
        }
        let mut actions = Vec::with_capacity(specs.len());
        for spec in specs {
            if matches!(spec.handler, Run::Instant(_)) && !spec.grants.is_empty() {
                anyhow::bail!("action {} is instant but needs grants", spec.name);
            }
            let schema = (spec.params_schema)();
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| anyhow::anyhow!("schema of action {} is invalid: {e}", spec.name))?;
            actions.push(Action {
                spec,
                schema,
                validator,
            });
        }
        actions.sort_by_key(|a| a.spec.name);
        Ok(Registry {
            actions,
            grants: Arc::default(),
        })
    }

    pub fn get(&self, name: &str) -> Option<&Action> {
        self.actions
            .iter()
            .find(|a| a.spec.name == name || a.spec.aliases.contains(&name))
    }

    /// Listed actions, by name.
    pub fn visible(&self) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(|a| !a.spec.hidden)
    }

    /// Every registered name, hidden actions included (the params fuzz target).
    pub fn all_names(&self) -> Vec<&'static str> {
        self.actions.iter().map(|a| a.spec.name).collect()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.visible().map(|a| a.spec.name).collect()
    }

    /// The waiting action's consequences of an answer (its spec's `on_decision`; none: nothing
    /// beyond resuming or ending the job).
    pub fn on_decision(
        &self,
        stores: &crate::db::Stores,
        answer: &crate::ask::answers::Answer,
    ) -> anyhow::Result<()> {
        match answer
            .action
            .and_then(|a| self.get(a))
            .and_then(|a| a.spec.on_decision)
        {
            Some(f) => f(stores, answer),
            None => Ok(()),
        }
    }

    /// The error for an unknown action name, listing the known ones.
    pub fn unknown(&self, name: &str) -> String {
        format!(
            "unknown action {:?}; known actions: {}",
            crate::quote::prefix(name, crate::quote::VALUE_MAX),
            self.names().join(", ")
        )
    }

    /// Validates params against the action's schema; the error lists every violation.
    pub fn check_params(&self, action: &Action, params: &Value) -> Result<(), String> {
        let errors: Vec<String> = action
            .validator
            .iter_errors(params)
            .map(|e| {
                // The message quotes the offending value: a prefix of it only (issue 21).
                let at = crate::quote::prefix(&e.instance_path().to_string(), 100);
                let e = violation(&e);
                if at.is_empty() {
                    e
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "invalid params for {}: {} (see get_schema {{\"action_name\": \"{}\"}})",
                action.spec.name,
                errors.join("; "),
                action.spec.name
            ))
        }
    }
}

/// One schema violation, bounded: a long value is quoted by a prefix and its size, so the
/// rule it broke (the limit, e.g. "longer than 4096 characters") is never cut off (issue 36).
fn violation(e: &jsonschema::ValidationError<'_>) -> String {
    const QUOTED: usize = 60;
    let full = e.to_string();
    if full.len() <= crate::quote::VALUE_MAX {
        return full;
    }
    let value = match e.instance().as_ref() {
        Value::String(s) => {
            let n = s.chars().count();
            let head: String = s.chars().take(QUOTED).collect();
            let cut = if n > QUOTED { "…" } else { "" };
            format!("{:?}{cut} ({n} characters)", head)
        }
        v => crate::quote::prefix(&v.to_string(), QUOTED),
    };
    crate::quote::prefix(
        &e.masked_with(value).to_string(),
        crate::quote::VALUE_MAX + 2 * QUOTED,
    )
}

/// Runs one claimed job: rejects malformed rows, looks the action up, validates the params
/// against its schema, then calls the handler. Never panics on bad input.
/// What every run checks before the action itself: the claim-time rejection, the action's
/// existence, params that parse and match its schema. `Err` is the job's outcome.
fn prepare<'r>(
    registry: &'r Registry,
    action: Option<&str>,
    params: Option<&str>,
    reject: Option<&str>,
) -> Result<(&'r Action, Value), Outcome> {
    if let Some(reason) = reject {
        return Err(Outcome::failed(reason));
    }
    let Some(name) = action else {
        return Err(Outcome::failed("job has no action"));
    };
    let Some(act) = registry.get(name) else {
        return Err(Outcome::failed(registry.unknown(name)));
    };
    let params: Value = match serde_json::from_str(params.unwrap_or("{}")) {
        Ok(v) => v,
        Err(e) => return Err(Outcome::failed(format!("params are not valid JSON: {e}"))),
    };
    registry
        .check_params(act, &params)
        .map_err(Outcome::failed)?;
    Ok((act, params))
}

/// Whether a claimed job is answered synchronously ([`instant`] then always returns `Some`):
/// rejected at claim, no or an unknown action, or an action that runs [`Run::Instant`].
pub fn is_instant(registry: &Registry, action: Option<&str>, rejected: bool) -> bool {
    rejected
        || action
            .and_then(|a| registry.get(a))
            .is_none_or(|a| matches!(a.spec.handler, Run::Instant(_)))
}

/// The outcome of a job that needs no task (see [`is_instant`]), or `None` if it needs one.
pub fn instant(
    registry: &Registry,
    action: Option<&str>,
    params: Option<&str>,
    reject: Option<&str>,
) -> Option<Outcome> {
    match prepare(registry, action, params, reject) {
        Err(out) => Some(out),
        Ok((act, params)) => match act.spec.handler {
            Run::Instant(f) => Some(f(registry, &params)),
            Run::Async(_) => None,
        },
    }
}

/// Runs one claimed job in `ctx` (see [`prepare`]), then its handler.
pub async fn run(
    registry: &Registry,
    ctx: JobCtx,
    action: Option<&str>,
    params: Option<&str>,
    reject: Option<&str>,
) -> Outcome {
    let (act, params) = match prepare(registry, action, params, reject) {
        Ok(p) => p,
        Err(out) => return out,
    };
    let handler = match act.spec.handler {
        Run::Instant(f) => return f(registry, &params),
        Run::Async(h) => h,
    };
    let cache = Arc::clone(&registry.grants);
    with_grants(ctx, cache, act.spec.name, act.spec.grants, handler, params).await
}

/// Loads the client's grants when the action needs some (refusing a missing one with
/// `denied`), then runs the handler.
async fn with_grants(
    ctx: JobCtx,
    cache: Arc<GrantsCache>,
    name: &'static str,
    needs: &'static [Grant],
    handler: Handler,
    params: Value,
) -> Outcome {
    let mut ctx = ctx;
    if !needs.is_empty() {
        let grants = match load_grants(&ctx, cache).await {
            Ok(g) => g,
            Err(e) => return Outcome::failed(format!("cannot load the client's grants: {e:#}")),
        };
        for &p in needs {
            if !grants.has(p) {
                return Outcome::denied(grants.missing(p, name));
            }
        }
        ctx.grants = Some(grants);
        crate::sandbox::marks::early(ctx.job_id, "grants");
    }
    handler(ctx, params).await
}

type GrantsCache = crate::clients::cache::Cache<Config>;

/// The client's grants as command_security.db and the fleet registry have them now: the set
/// loaded for an earlier job when the database is unchanged and the registry's grants for the
/// client here are the same (checked at once when the connection is free: no hop to the
/// blocking pool), else loaded there (`clients::cache`).
async fn load_grants(ctx: &JobCtx, cache: Arc<GrantsCache>) -> anyhow::Result<Arc<ClientGrants>> {
    let (config, client) = (Arc::clone(&ctx.config), ctx.client_id.clone());
    // The fleet registry's grants for this client here (a fresh copy only; none without one).
    let shared = crate::ask::learned::grants_for(&client, crate::time::now_ms());
    let fresh = ctx
        .stores
        .security
        .try_with(|c| cache.fresh(c, &config, &client, &shared))
        .flatten();
    if let Some(g) = fresh {
        return Ok(g);
    }
    ctx.stores
        .security
        .call(move |c| {
            cache.load(
                c,
                &config,
                &config.clients,
                &config.workspace,
                &client,
                shared,
            )
        })
        .await
}

/// An action a job calls on its own behalf (`job::Actions`): checked exactly as a job.
impl crate::job::Actions for Registry {
    fn call(&self, ctx: JobCtx, action: &str, params: &str) -> HandlerFuture {
        match prepare(self, Some(action), Some(params), None) {
            Err(out) => Box::pin(std::future::ready(out)),
            Ok((act, params)) => match act.spec.handler {
                Run::Instant(f) => Box::pin(std::future::ready(f(self, &params))),
                Run::Async(h) => {
                    let cache = Arc::clone(&self.grants);
                    Box::pin(with_grants(
                        ctx,
                        cache,
                        act.spec.name,
                        act.spec.grants,
                        h,
                        params,
                    ))
                }
            },
        }
    }

    fn canonical(&self, name: &str) -> Option<&'static str> {
        self.get(name).map(|a| a.spec.name)
    }

    fn names(&self) -> Vec<&'static str> {
        Registry::names(self)
    }
}

/// The permission set an action's calls are audited with.
pub fn permission_set_of(registry: &Registry, action: Option<&str>) -> Option<PermissionSet> {
    action
        .and_then(|a| registry.get(a))
        .map(|a| a.spec.permission_set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::output::JobStatus;

    fn registry() -> Registry {
        Registry::new(&Config::default()).unwrap()
    }

    /// (action, params, claim-time rejection, routed as instant, status answered without a task)
    type InstantCase<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        bool,
        Option<JobStatus>,
    );

    /// Issue 24: which jobs the supervisor answers without a task. `is_instant` (decided at
    /// claim) and `instant` (run at start) must agree, or a job would be routed to a path that
    /// cannot answer it.
    #[test]
    fn instant_jobs_are_exactly_the_pure_actions_and_the_jobs_failing_before_any_action() {
        let r = registry();
        let cases: &[InstantCase] = &[
            (
                Some("ping"),
                Some(r#"{"echo": "x"}"#),
                None,
                true,
                Some(JobStatus::Succeeded),
            ),
            (
                Some("list_actions"),
                None,
                None,
                true,
                Some(JobStatus::Succeeded),
            ),
            (
                Some("get_schema"),
                Some(r#"{"action_name": "ping"}"#),
                None,
                true,
                Some(JobStatus::Succeeded),
            ),
            (
                Some("get_schema"),
                Some(r#"{"action_name": "nope"}"#),
                None,
                true,
                Some(JobStatus::Failed),
            ),
            (
                Some("ping"),
                Some("{not json"),
                None,
                true,
                Some(JobStatus::Failed),
            ),
            (
                Some("ping"),
                Some(r#"{"extra": 1}"#),
                None,
                true,
                Some(JobStatus::Failed),
            ),
            (
                Some("no_such_action"),
                None,
                None,
                true,
                Some(JobStatus::Failed),
            ),
            (None, None, None, true, Some(JobStatus::Failed)),
            (
                Some("execute_bash"),
                Some(r#"{"command": "true"}"#),
                Some("params too large"),
                true,
                Some(JobStatus::Failed),
            ),
            // Everything with I/O, grants or a human in the loop takes a task.
            (
                Some("execute_bash"),
                Some(r#"{"command": "true"}"#),
                None,
                false,
                None,
            ),
            (Some("get_stats"), None, None, false, None),
            (
                Some("get_result"),
                Some(r#"{"job_id": 1}"#),
                None,
                false,
                None,
            ),
            (
                Some("run_code"),
                Some(r#"{"code": "1"}"#),
                None,
                false,
                None,
            ),
        ];
        for (action, params, reject, routed, answered) in cases {
            assert_eq!(
                is_instant(&r, *action, reject.is_some()),
                *routed,
                "{action:?} {params:?}"
            );
            let out = instant(&r, *action, *params, *reject);
            assert_eq!(
                out.as_ref().map(|o| o.status),
                *answered,
                "{action:?} {params:?}: {out:?}"
            );
        }
        let pong = instant(&r, Some("ping"), Some(r#"{"echo": "x"}"#), None).unwrap();
        assert_eq!(pong.result.unwrap()["echo"], "x");
        // Every action routed as instant is answered, whatever its params.
        for a in r
            .visible()
            .filter(|a| matches!(a.spec.handler, Run::Instant(_)))
        {
            assert!(
                a.spec.grants.is_empty(),
                "{} is instant with grants",
                a.spec.name
            );
            for p in [None, Some("{}"), Some("[]"), Some("{bad")] {
                assert!(
                    instant(&r, Some(a.spec.name), p, None).is_some(),
                    "{} {p:?}",
                    a.spec.name
                );
            }
        }
    }

    #[test]
    fn the_core_actions_are_listed_and_test_actions_hidden() {
        let r = registry();
        for name in [
            "execute_bash",
            "check_command",
            "infer_permissions",
            "run_code",
            "get_schema",
            "get_stats",
            "list_actions",
            "ping",
            "get_result",
            "request_permission",
            "read_sqlite",
            "read_markdown",
            "read_code",
            "read_config",
            "generate_file",
            "generate_sql",
            "explore",
            "audit_code",
        ] {
            assert!(
                r.names().contains(&name),
                "{name} missing from {:?}",
                r.names()
            );
        }
        assert!(
            r.get("sleep").is_none(),
            "test actions only with test_actions"
        );
        let t = Registry::new(&Config {
            test_actions: true,
            ..Config::default()
        })
        .unwrap();
        assert!(t.get("sleep").is_some());
        assert!(!t.names().contains(&"sleep"));
    }

    #[test]
    fn params_are_checked_against_the_schema() {
        let r = registry();
        let a = r.get("get_schema").unwrap();
        assert!(r
            .check_params(a, &json!({"action_name": "list_actions"}))
            .is_ok());
        assert!(r
            .check_params(a, &json!({"action": "list_actions"}))
            .is_ok());
        let e = r.check_params(a, &json!({})).unwrap_err();
        assert!(e.contains("get_schema"), "{e}");
        let e = r.check_params(a, &json!({"action_name": 3})).unwrap_err();
        assert!(e.contains("/action_name"), "{e}");
        let l = r.get("list_actions").unwrap();
        assert!(r.check_params(l, &json!({"surprise": 1})).is_err());
    }

    #[test]
    fn ping_answers_small_and_checks_its_params() {
        let r = registry();
        let p = r.get("ping").unwrap();
        assert!(r.check_params(p, &json!({})).is_ok());
        assert!(r.check_params(p, &json!({"echo": "job-7"})).is_ok());
        assert!(r.check_params(p, &json!({"echo": 7})).is_err());
        assert!(r.check_params(p, &json!({"surprise": 1})).is_err());
        let long = "x".repeat(1025);
        assert!(r.check_params(p, &json!({"echo": long})).is_err());
        let a = meta::ping_answer(&json!({"echo": "job-7"}));
        assert_eq!(a["pong"], json!(true));
        assert_eq!(a["echo"], json!("job-7"));
        assert!(a.to_string().len() < 200, "{a}");
        assert!(meta::ping_answer(&json!({})).get("echo").is_none());
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = registry().unknown("nope");
        assert!(e.contains("\"nope\"") && e.contains("list_actions"), "{e}");
    }
}
