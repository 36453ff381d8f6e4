//! Learning shared by scope (issue 37): **the fleet's learned rules and each worker's
//! read-through copy of them**. It owns the statements on the registry's `learned_rules` (the
//! operator's `approve --learn --scope fleet` and `approve`/`deny --always` insert, `signatures --revoke` revokes; workers
//! only read: PostgreSQL's grants and row security refuse them anything else) and the rule
//! that a worker uses a fleet rule **only while its copy is fresh**: the bridge (`ask::fleet`)
//! pulls the active rules at each pass (a `brainloop_learned` notification, or the poll), and a
//! copy older than `[registry] learned_fresh_ms` — the worker cut off from the registry — is
//! not used at all, so a revocation made during an outage applies before any fleet rule is
//! used again (fail closed). Each pull that changed the rules also saves them in the worker's
//! command_security.db (`registry_copy`, this module its one writer), and a worker loads that
//! copy at start-up: its restrictive rules (`never`, `always_ask` overrides) apply however old
//! the copy is — a worker restarted while the registry is down still refuses what the fleet
//! forbade — while its permissive ones (learned signatures, `always_allow`, host rules) are
//! used only from a pull of the running worker, while fresh.
//!
//! It also owns the clients' grants shared by scope (`client_grants`, `brainloop grant
//! --scope`): written and revoked only by the operator's role, pulled with the rules, used
//! (`grants_for`, added to a job's grants by `actions`) only while the copy is fresh, never
//! saved — a grant widens, so a worker cut off from the registry has its local grants only.
//!
//! Evidence and promotion come only from rows the operator's role wrote: a rule is inserted in
//! the same transaction as the operator's decision that teaches it, naming that decision and
//! its validation; nothing a worker reports promotes anything. `bash::signatures` reads the
//! copy ([`teaches`], [`learned_for`]) beside the worker's own evidence, with every check of a
//! locally learned signature still applied (learnable, overrides, this client's denials).

use crate::decision::Override;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::Mutex;

/// A learned rule of the registry.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LearnedRule {
    pub id: i64,
    /// `signature` (learned), `override` (of a signature: `value`) or `host` (a host rule
    /// the client's commands may reach, `egress::rules`).
    pub kind: String,
    /// The signature's text, or the host rule.
    pub rule: String,
    /// The client it is for (on every worker of its scope); `*`: every client.
    pub client_id: String,
    /// `fleet`, `project` (the workers whose `horos_name` is `target`) or `worker` (the
    /// worker whose login role is `target`).
    pub scope: String,
    /// The operator who taught it (`operator:…`).
    pub learned_by: String,
    /// The PostgreSQL role that wrote it (an operator's login).
    pub db_role: String,
    /// The validation whose approval taught it.
    pub validation_id: Option<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub revoked_by: Option<String>,
    /// The project or worker of a `project` / `worker` scope.
    pub target: Option<String>,
    /// An override's value: `always_allow`, `always_ask` or `never`.
    pub value: Option<String>,
}

impl LearnedRule {
    /// In force at `now` (wall ms): not revoked, not expired.
    pub fn active(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

const COLS: &str = "id, kind, rule, client_id, scope, learned_by, db_role, validation_id, created_at, expires_at, revoked_at, revoked_by, target, value";

fn row(r: &postgres::Row) -> Result<LearnedRule> {
    Ok(LearnedRule {
        id: r.try_get(0)?,
        kind: r.try_get(1)?,
        rule: r.try_get(2)?,
        client_id: r.try_get(3)?,
        scope: r.try_get(4)?,
        learned_by: r.try_get(5)?,
        db_role: r.try_get(6)?,
        validation_id: r.try_get(7)?,
        created_at: r.try_get(8)?,
        expires_at: r.try_get(9)?,
        revoked_at: r.try_get(10)?,
        revoked_by: r.try_get(11)?,
        target: r.try_get(12)?,
        value: r.try_get(13)?,
    })
}

/// Operator side, inside the transaction of decision `decision_id`: learns `sigs` for `client`
/// on every worker of `scope`. Returns the rules' ids.
#[allow(clippy::too_many_arguments)]
pub fn learn(
    tx: &mut postgres::Transaction<'_>,
    validation_id: &str,
    decision_id: i64,
    client: &str,
    sigs: &[String],
    scope: &Scope,
    by: &str,
    now: i64,
    expires_at: Option<i64>,
) -> Result<Vec<i64>> {
    let (sc, target) = scope.parts();
    let mut ids = Vec::new();
    for s in sigs {
        let id: i64 = tx
            .query_one(
                "INSERT INTO learned_rules(kind, rule, client_id, scope, target, learned_by, validation_id, decision_id, created_at, expires_at)
                 VALUES ('signature', $1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                &[s, &client, &sc, &target, &by, &validation_id, &decision_id, &now, &expires_at],
            )
            .context("writing the learned rule in the registry (is this the operator's role?)")?
            .get(0);
        ids.push(id);
    }
    Ok(ids)
}

/// Operator side, inside the transaction of decision `decision_id` (`approve --always` →
/// `always_allow`, `deny --always` → `never`): the override of `command` (its exact text) for
/// every client, in `scope`. Returns the rule.
#[allow(clippy::too_many_arguments)]
pub fn learn_command(
    tx: &mut postgres::Transaction<'_>,
    validation_id: &str,
    decision_id: i64,
    command: &str,
    value: &str,
    scope: &Scope,
    by: &str,
    now: i64,
) -> Result<LearnedRule> {
    let (scope, target) = scope.parts();
    let r = tx
        .query_one(
            &format!(
                "INSERT INTO learned_rules(kind, rule, client_id, scope, target, value, learned_by, validation_id, decision_id, created_at)
                 VALUES ('command', $1, '*', $2, $3, $4, $5, $6, $7, $8) RETURNING {COLS}"
            ),
            &[&command, &scope, &target, &value, &by, &validation_id, &decision_id, &now],
        )
        .context("writing the command's override in the registry (is this the operator's role?)")?;
    row(&r)
}

/// Where a rule applies: `fleet`, `project:NAME` or `worker:ROLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Fleet,
    Project(String),
    Worker(String),
}

impl Scope {
    pub fn parse(s: &str) -> Result<Scope> {
        let named = |kind: &str, n: &str| -> Result<String> {
            if n.is_empty() || n.len() > 200 || n.chars().any(char::is_control) {
                bail!("--scope {kind}:NAME needs a name (1 to 200 printable characters)");
            }
            Ok(n.to_string())
        };
        Ok(match s.split_once(':') {
            None if s == "fleet" => Scope::Fleet,
            Some(("project", n)) => Scope::Project(named("project", n)?),
            Some(("worker", n)) => Scope::Worker(named("worker", n)?),
            _ => bail!("--scope {s:?}: fleet, project:NAME (the workers whose horos_name is NAME) or worker:ROLE (one worker's login role)"),
        })
    }
    /// `fleet`, `project:NAME` or `worker:ROLE` (what [`Scope::parse`] reads).
    pub fn text(&self) -> String {
        match self.parts() {
            (s, Some(t)) => format!("{s}:{t}"),
            (s, None) => s.to_string(),
        }
    }
    fn parts(&self) -> (&'static str, Option<&str>) {
        match self {
            Scope::Fleet => ("fleet", None),
            Scope::Project(n) => ("project", Some(n)),
            Scope::Worker(n) => ("worker", Some(n)),
        }
    }
}

/// A rule the operator adds directly (`brainloop rules add`).
#[derive(Debug, Clone)]
pub struct NewRule<'a> {
    /// `signature`, `override` or `host`.
    pub kind: &'a str,
    pub rule: &'a str,
    pub client: &'a str,
    pub scope: &'a Scope,
    /// An override's value.
    pub value: Option<&'a str>,
    pub by: &'a str,
    pub expires_at: Option<i64>,
}

/// Operator side: adds one rule (any kind and scope) under the operator's role; the registry's
/// checks refuse a malformed one and any other role.
pub fn add(c: &mut crate::registry::Client, r: &NewRule<'_>, now: i64) -> Result<LearnedRule> {
    let (scope, target) = r.scope.parts();
    let inserted = c
        .query_one(
            &format!(
                "INSERT INTO learned_rules(kind, rule, client_id, scope, target, value, learned_by, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {COLS}"
            ),
            &[&r.kind, &r.rule, &r.client, &scope, &target, &r.value, &r.by, &now, &r.expires_at],
        )
        .context("writing the rule in the registry (is this the operator's role?)")?;
    row(&inserted)
}

/// Operator side: [`add`] unless the same rule (kind, text, client, scope, value) is active
/// already; (the rule, whether it is new).
pub fn add_once(
    c: &mut crate::registry::Client,
    r: &NewRule<'_>,
    now: i64,
) -> Result<(LearnedRule, bool)> {
    let (scope, target) = r.scope.parts();
    let same = c
        .query_opt(
            &format!(
                "SELECT {COLS} FROM learned_rules
                 WHERE kind = $1 AND rule = $2 AND client_id = $3 AND scope = $4
                   AND target IS NOT DISTINCT FROM $5 AND value IS NOT DISTINCT FROM $6
                   AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $7)
                 ORDER BY id LIMIT 1"
            ),
            &[&r.kind, &r.rule, &r.client, &scope, &target, &r.value, &now],
        )
        .context("reading the registry's rules")?;
    match same {
        Some(row_) => Ok((row(&row_)?, false)),
        None => Ok((add(c, r, now)?, true)),
    }
}

/// Operator side: revokes `key` — `fleet:N` (one rule) or a signature's exact text (every
/// active rule of it). Returns the rules revoked; none is an error naming `signatures`.
pub fn revoke(
    c: &mut crate::registry::Client,
    key: &str,
    by: &str,
    now: i64,
) -> Result<Vec<LearnedRule>> {
    let rows = match key.strip_prefix("fleet:").map(str::parse::<i64>) {
        Some(Ok(id)) => c.query(
            &format!(
                "UPDATE learned_rules SET revoked_at = $2, revoked_by = $3, revoked_role = current_user
                 WHERE id = $1 AND revoked_at IS NULL RETURNING {COLS}"
            ),
            &[&id, &now, &by],
        ),
        Some(Err(_)) => bail!("{key:?}: a fleet rule is `fleet:N` (see `brainloop signatures`)"),
        None => c.query(
            &format!(
                "UPDATE learned_rules SET revoked_at = $2, revoked_by = $3, revoked_role = current_user
                 WHERE rule = $1 AND revoked_at IS NULL RETURNING {COLS}"
            ),
            &[&key, &now, &by],
        ),
    }
    .context("revoking in the registry (is this the operator's role?)")?;
    let out = rows.iter().map(row).collect::<Result<Vec<_>>>()?;
    if out.is_empty() {
        bail!("no active fleet rule {key:?} in the registry (see `brainloop signatures`)");
    }
    Ok(out)
}

/// Any role: the registry's learned rules it may read (a worker: the fleet's), oldest first;
/// `all`: revoked and expired ones too.
pub fn list(c: &mut crate::registry::Client, all: bool, now: i64) -> Result<Vec<LearnedRule>> {
    let rows = c
        .query(
            &format!(
                "SELECT {COLS} FROM learned_rules
                 WHERE $1 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2))
                 ORDER BY id"
            ),
            &[&all, &now],
        )
        .context("reading the registry's learned rules")?;
    rows.iter().map(row).collect()
}

// ---- The worker's read-through copy ----

struct Copy {
    rules: Vec<LearnedRule>,
    /// The clients' grants shared with this worker's scope (permissive: never saved).
    grants: Vec<SharedGrant>,
    /// `time::mono_ms()` of the last successful pull.
    pulled: i64,
    fresh_ms: i64,
}

static COPY: Mutex<Option<Copy>> = Mutex::new(None);

/// The restrictive overrides (`never`, `always_ask`) of the last successful pull: kept when the
/// copy goes stale or is dropped — a worker cut off from the registry keeps refusing what the
/// operator forbade (fail closed); only the next pull lifts one.
static RESTRICTIVE: Mutex<Vec<LearnedRule>> = Mutex::new(Vec::new());

/// This worker's project: its `horos_name` (the project it registers as in HOROS).
static PROJECT: Mutex<String> = Mutex::new(String::new());

/// Worker side, at start-up: the project whose rules (`scope = 'project'`) apply here.
pub fn set_project(name: &str) {
    let mut g = PROJECT.lock().unwrap_or_else(|p| p.into_inner());
    *g = name.to_string();
}

/// Whether `r` applies to a job of `client` on this worker (its own worker-scoped rules are
/// the only ones row security lets it read).
fn applies(r: &LearnedRule, client: &str, project: &str) -> bool {
    (r.client_id == client || r.client_id == "*")
        && match r.scope.as_str() {
            "fleet" | "worker" => true,
            "project" => r.target.as_deref() == Some(project),
            _ => false,
        }
}

/// A restrictive rule: kept (in memory and in the saved copy) when the copy goes stale.
fn restrictive(r: &LearnedRule) -> bool {
    matches!(r.kind.as_str(), "override" | "command")
        && matches!(r.value.as_deref(), Some("never" | "always_ask"))
}

/// Worker side (the bridge, at each pass): replaces the copy with the registry's active
/// rules this worker may read, fresh from now, and saves it in `sec` (command_security.db)
/// when it changed. Returns whether the set changed. Err (the registry, or the save failed):
/// the restrictive rules just read are in force anyway; the permissive ones are not used.
pub fn pull(
    c: &mut crate::registry::Client,
    sec: &mut rusqlite::Connection,
    fresh_ms: u64,
) -> Result<bool> {
    let rules = list(c, false, crate::time::now_ms())?;
    if super::epoch::restored() {
        // A registry restored from a backup (`ask::epoch`): its restrictive rules add to the
        // ones in force from before the restore — a `never` it lost still holds —, none of its
        // permissive ones is used, and the saved copy stays the one from before.
        let mut r = RESTRICTIVE.lock().unwrap_or_else(|p| p.into_inner());
        for n in rules.iter().filter(|r| restrictive(r)) {
            if !r.iter().any(|o| o == n) {
                r.push(n.clone());
            }
        }
        drop(r);
        forget();
        return Ok(false);
    }
    {
        let mut r = RESTRICTIVE.lock().unwrap_or_else(|p| p.into_inner());
        *r = rules.iter().filter(|r| restrictive(r)).cloned().collect();
    }
    let grants = list_grants(c, false, crate::time::now_ms())?;
    let (rules_changed, changed) = COPY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map_or((true, true), |old| {
            (
                old.rules != rules,
                old.rules != rules || old.grants != grants,
            )
        });
    if rules_changed {
        save(sec, &rules, crate::time::now_ms())?;
    }
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    *g = Some(Copy {
        rules,
        grants,
        pulled: crate::time::mono_ms(),
        fresh_ms: fresh_ms.min(i64::MAX as u64) as i64,
    });
    Ok(changed)
}

/// Replaces the saved copy (`registry_copy`) with `rules`, pulled at `now` (wall ms).
fn save(sec: &mut rusqlite::Connection, rules: &[LearnedRule], now: i64) -> Result<()> {
    let tx = sec
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .context("saving the fleet's rules in command_security.db")?;
    tx.execute("DELETE FROM registry_copy", [])?;
    {
        let mut st = tx.prepare(
            "INSERT INTO registry_copy(id, kind, rule, client_id, scope, target, value, learned_by,
               db_role, validation_id, created_at, expires_at, pulled_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        for r in rules {
            st.execute(rusqlite::params![
                r.id,
                r.kind,
                r.rule,
                r.client_id,
                r.scope,
                r.target,
                r.value,
                r.learned_by,
                r.db_role,
                r.validation_id,
                r.created_at,
                r.expires_at,
                now
            ])?;
        }
    }
    tx.commit()
        .context("saving the fleet's rules in command_security.db")?;
    Ok(())
}

/// The saved copy (`registry_copy`): the rules of the last pull that changed them, and when
/// it was made (wall ms; None: never pulled).
pub fn saved(sec: &rusqlite::Connection) -> Result<(Vec<LearnedRule>, Option<i64>)> {
    let mut st = sec.prepare(
        "SELECT id, kind, rule, client_id, scope, learned_by, db_role, validation_id, created_at,
                expires_at, target, value, pulled_at
         FROM registry_copy ORDER BY id",
    )?;
    let mut pulled = None;
    let rules = st
        .query_map([], |r| {
            Ok((
                LearnedRule {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    rule: r.get(2)?,
                    client_id: r.get(3)?,
                    scope: r.get(4)?,
                    learned_by: r.get(5)?,
                    db_role: r.get(6)?,
                    validation_id: r.get(7)?,
                    created_at: r.get(8)?,
                    expires_at: r.get(9)?,
                    revoked_at: None,
                    revoked_by: None,
                    target: r.get(10)?,
                    value: r.get(11)?,
                },
                r.get::<_, i64>(12)?,
            ))
        })?
        .map(|x| {
            x.map(|(rule, at)| {
                pulled = Some(pulled.map_or(at, |p: i64| p.max(at)));
                rule
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("reading the saved copy of the fleet's rules (command_security.db)")?;
    Ok((rules, pulled))
}

/// Worker side, at start-up (before any job runs): the restrictive rules of the saved copy
/// are in force until the first pull replaces them — however old the copy; its permissive
/// rules are not used (only a pull of this process makes a copy fresh). Returns how many
/// restrictive rules it restored.
pub fn load(sec: &rusqlite::Connection) -> Result<usize> {
    let (rules, _) = saved(sec)?;
    let kept: Vec<LearnedRule> = rules.into_iter().filter(restrictive).collect();
    let n = kept.len();
    // Called before the bridge starts: no pull has run yet in this process.
    *RESTRICTIVE.lock().unwrap_or_else(|p| p.into_inner()) = kept;
    Ok(n)
}

/// Worker side (the bridge, when the registry fails): drops the copy at once — a cut the
/// bridge sees stops the fleet's rules before the freshness bound would.
pub fn forget() {
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    *g = None;
}

/// The copy when it is fresh (pulled less than its freshness bound ago) and the registry is
/// not restored (`ask::epoch`), else None.
fn fresh<T>(f: impl FnOnce(&Copy) -> T) -> Option<T> {
    if super::epoch::restored() {
        return None;
    }
    let g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    let copy = g.as_ref()?;
    if crate::time::mono_ms().saturating_sub(copy.pulled) > copy.fresh_ms {
        return None;
    }
    Some(f(copy))
}

/// The rules of `kind` of the copy usable now for `client`: none when the copy is older than
/// its freshness bound.
fn usable(kind: &str, client: &str, now: i64) -> Vec<LearnedRule> {
    if super::epoch::restored() {
        return Vec::new();
    }
    let project = PROJECT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    let Some(copy) = g.as_ref() else {
        return Vec::new();
    };
    if crate::time::mono_ms().saturating_sub(copy.pulled) > copy.fresh_ms {
        return Vec::new();
    }
    copy.rules
        .iter()
        .filter(|r| r.kind == kind && applies(r, client, &project) && r.active(now))
        .cloned()
        .collect()
}

/// The fleet rule that teaches `sig` to `client` now (a fresh copy only).
pub fn teaches(client: &str, sig: &str, now: i64) -> Option<LearnedRule> {
    usable("signature", client, now)
        .into_iter()
        .find(|r| r.rule == sig)
}

/// The signatures the fleet teaches `client` now (a fresh copy only).
pub fn learned_for(client: &str, now: i64) -> Vec<String> {
    usable("signature", client, now)
        .into_iter()
        .map(|r| r.rule)
        .collect()
}

/// The registry's override of signature `sig` for `client` now (`always_allow`, `always_ask`
/// or `never`), the most restrictive when several apply (`never` > `always_ask` >
/// `always_allow`): a restrictive one from the last
/// pull even when the copy is stale or dropped, `always_allow` from a fresh copy only.
pub fn override_of(client: &str, sig: &str, now: i64) -> Option<Override> {
    strictest_of("override", client, sig, now)
}

/// The registry's override of `command` (its exact text) for a job of `client` now, as
/// [`override_of`] for a signature: what `approve --always` / `deny --always` on a fleet
/// validation wrote (`learn_command`), or `rules add command`.
pub fn command_override(client: &str, command: &str, now: i64) -> Option<Override> {
    strictest_of("command", client, command, now)
}

/// Whether a rule of `kind` written with the decision of validation `vid` applies here now
/// (from the copy, or the restrictive ones kept from the last pull): the worker that asked
/// then leaves the command's override to the registry (`bash::decisions`), so revoking the
/// rule takes it back there too.
pub fn written_with(kind: &str, client: &str, vid: &str, now: i64) -> bool {
    let project = PROJECT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let of_v = |r: &LearnedRule| r.validation_id.as_deref() == Some(vid);
    RESTRICTIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|r| r.kind == kind && of_v(r) && applies(r, client, &project) && r.active(now))
        || usable(kind, client, now).iter().any(of_v)
}

/// The most restrictive value of the overrides of `kind` on `rule` for `client` now
/// (`decision::strictest`, the one order); a value that is no override counts for nothing.
fn strictest_of(kind: &str, client: &str, rule: &str, now: i64) -> Option<Override> {
    let project = PROJECT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let restrictive: Vec<Option<Override>> = RESTRICTIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|r| {
            r.kind == kind && r.rule == rule && applies(r, client, &project) && r.active(now)
        })
        .map(|r| r.value.as_deref().and_then(Override::parse))
        .collect();
    let fresh = usable(kind, client, now)
        .into_iter()
        .filter(|r| r.rule == rule)
        .map(|r| r.value.as_deref().and_then(Override::parse));
    restrictive
        .into_iter()
        .chain(fresh)
        .fold(None, crate::decision::strictest)
}

/// The host rules the registry grants `client`'s commands now (a fresh copy only): what
/// `egress::job::rules` adds to a run's rules beside the hosts a human approved.
pub fn hosts_for(client: &str, now: i64) -> Vec<String> {
    usable("host", client, now)
        .into_iter()
        .map(|r| r.rule)
        .collect()
}

// ---- Clients' grants shared by scope ----

/// A client's grant in the registry (`client_grants`): what `brainloop grant --scope` shares.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SharedGrant {
    pub id: i64,
    pub client_id: String,
    /// FILE_READ, FILE_WRITE, SYSTEM_COMMAND, NETWORK, LLM, FORCE_EXECUTE or SECRET.
    pub permission: String,
    /// As a local grant's (`clients::store::check_pattern`); SECRET: the secret's name.
    pub pattern: String,
    /// FILE_WRITE only: writes there need no human validation.
    pub auto: bool,
    /// `fleet`, `project` or `worker`, with `target` as a rule's.
    pub scope: String,
    pub target: Option<String>,
    /// The operator who granted it (`operator:…`) and the role that wrote it.
    pub granted_by: String,
    pub db_role: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub revoked_by: Option<String>,
}

impl SharedGrant {
    /// In force at `now` (wall ms): not revoked, not expired.
    pub fn active(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }

    /// `fleet`, `project:NAME` or `worker:ROLE`.
    pub fn scope_text(&self) -> String {
        match &self.target {
            Some(t) => format!("{}:{t}", self.scope),
            None => self.scope.clone(),
        }
    }
}

const GRANT_COLS: &str = "id, client_id, permission, pattern, auto, scope, target, granted_by, db_role, created_at, expires_at, revoked_at, revoked_by";

fn grant_row(r: &postgres::Row) -> Result<SharedGrant> {
    Ok(SharedGrant {
        id: r.try_get(0)?,
        client_id: r.try_get(1)?,
        permission: r.try_get(2)?,
        pattern: r.try_get(3)?,
        auto: r.try_get(4)?,
        scope: r.try_get(5)?,
        target: r.try_get(6)?,
        granted_by: r.try_get(7)?,
        db_role: r.try_get(8)?,
        created_at: r.try_get(9)?,
        expires_at: r.try_get(10)?,
        revoked_at: r.try_get(11)?,
        revoked_by: r.try_get(12)?,
    })
}

/// A grant the operator shares (`brainloop grant --scope`, `registry import`).
#[derive(Debug, Clone)]
pub struct NewGrant<'a> {
    pub client: &'a str,
    pub permission: crate::clients::Permission,
    pub pattern: &'a str,
    pub auto: bool,
    pub scope: &'a Scope,
    pub by: &'a str,
    pub expires_at: Option<i64>,
}

/// Operator side: shares a grant (checked as a local one); the same active grant of that
/// scope is kept (false: nothing new), one that differs only by `auto` is replaced. The
/// registry refuses any role but the operator's.
pub fn grant(
    c: &mut crate::registry::Client,
    g: &NewGrant<'_>,
    now: i64,
) -> Result<(SharedGrant, bool)> {
    crate::clients::store::check_pattern(g.permission, g.pattern)?;
    if g.auto && g.permission != crate::clients::Permission::FileWrite {
        bail!("--auto applies only to FILE_WRITE grants");
    }
    let (scope, target) = g.scope.parts();
    let perm = g.permission.as_str();
    let mut tx = c.transaction()?;
    let same = tx
        .query_opt(
            &format!(
                "SELECT {GRANT_COLS} FROM client_grants
                 WHERE client_id = $1 AND permission = $2 AND pattern = $3 AND scope = $4
                   AND target IS NOT DISTINCT FROM $5 AND revoked_at IS NULL
                 FOR UPDATE"
            ),
            &[&g.client, &perm, &g.pattern, &scope, &target],
        )
        .context("reading the registry's grants (is this the operator's role?)")?
        .map(|r| grant_row(&r))
        .transpose()?;
    if let Some(old) = same {
        if old.auto == g.auto && old.expires_at == g.expires_at {
            tx.commit()?;
            return Ok((old, false));
        }
        tx.execute(
            "UPDATE client_grants SET revoked_at = $2, revoked_by = $3, revoked_role = current_user
             WHERE id = $1",
            &[&old.id, &now, &g.by],
        )
        .context("replacing the registry's grant (is this the operator's role?)")?;
    }
    let r = tx
        .query_one(
            &format!(
                "INSERT INTO client_grants(client_id, permission, pattern, auto, scope, target, granted_by, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {GRANT_COLS}"
            ),
            &[&g.client, &perm, &g.pattern, &g.auto, &scope, &target, &g.by, &now, &g.expires_at],
        )
        .context("writing the grant in the registry (is this the operator's role?)")?;
    let out = grant_row(&r)?;
    tx.commit().context("writing the grant in the registry")?;
    Ok((out, true))
}

/// Operator side: revokes the active grants of `client` `permission` `pattern` of `scope`
/// (None: of every scope). Returns those revoked (none: nothing matched).
pub fn revoke_grant(
    c: &mut crate::registry::Client,
    client: &str,
    permission: crate::clients::Permission,
    pattern: &str,
    scope: Option<&Scope>,
    by: &str,
    now: i64,
) -> Result<Vec<SharedGrant>> {
    let (sc, target) = match scope {
        Some(s) => {
            let (a, b) = s.parts();
            (Some(a), b)
        }
        None => (None, None),
    };
    let rows = c
        .query(
            &format!(
                "UPDATE client_grants SET revoked_at = $5, revoked_by = $6, revoked_role = current_user
                 WHERE client_id = $1 AND permission = $2 AND pattern = $3 AND revoked_at IS NULL
                   AND ($4::text IS NULL OR (scope = $4 AND target IS NOT DISTINCT FROM $7))
                 RETURNING {GRANT_COLS}"
            ),
            &[&client, &permission.as_str(), &pattern, &sc, &now, &by, &target],
        )
        .context("revoking in the registry (is this the operator's role?)")?;
    rows.iter().map(grant_row).collect()
}

/// Any role: the registry's grants it may read (a worker: its scopes'), oldest first; `all`:
/// revoked and expired ones too.
pub fn list_grants(
    c: &mut crate::registry::Client,
    all: bool,
    now: i64,
) -> Result<Vec<SharedGrant>> {
    let rows = c
        .query(
            &format!(
                "SELECT {GRANT_COLS} FROM client_grants
                 WHERE $1 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2))
                 ORDER BY id"
            ),
            &[&all, &now],
        )
        .context("reading the registry's grants")?;
    rows.iter().map(grant_row).collect()
}

/// The grants the registry gives `client` on this worker now (a fresh copy only): what a
/// job's grants add to the configuration's and the local operator's (`clients::load_with`).
/// A grant whose permission this binary does not know is ignored, never widened.
pub fn grants_for(client: &str, now: i64) -> Vec<crate::clients::Grant> {
    let project = PROJECT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    fresh(|copy| {
        copy.grants
            .iter()
            .filter(|g| {
                g.client_id == client
                    && g.active(now)
                    && match g.scope.as_str() {
                        "fleet" | "worker" => true,
                        "project" => g.target.as_deref() == Some(project.as_str()),
                        _ => false,
                    }
            })
            .filter_map(|g| {
                Some(crate::clients::Grant {
                    permission: crate::clients::Permission::parse(&g.permission).ok()?,
                    pattern: g.pattern.clone(),
                    auto: g.auto,
                    source: crate::clients::Source::Registry,
                })
            })
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(expires_at: Option<i64>, revoked_at: Option<i64>) -> LearnedRule {
        LearnedRule {
            id: 1,
            kind: "signature".into(),
            rule: "sed -i EXPR WS_PATH".into(),
            client_id: "local".into(),
            scope: "fleet".into(),
            learned_by: "operator:t".into(),
            db_role: "op".into(),
            validation_id: None,
            created_at: 0,
            expires_at,
            revoked_at,
            revoked_by: None,
            target: None,
            value: None,
        }
    }

    #[test]
    fn a_rule_applies_to_its_client_or_every_client_and_to_its_project_only() {
        let mut r = rule(None, None);
        assert!(applies(&r, "local", "web"));
        assert!(!applies(&r, "ci", "web"));
        r.client_id = "*".into();
        assert!(applies(&r, "ci", "web"));
        r.scope = "project".into();
        r.target = Some("web".into());
        assert!(applies(&r, "ci", "web"));
        assert!(!applies(&r, "ci", "batch"));
        r.scope = "galaxy".into();
        assert!(
            !applies(&r, "ci", "web"),
            "an unknown scope applies nowhere"
        );
    }

    #[test]
    fn a_rule_is_in_force_until_revoked_or_expired() {
        assert!(rule(None, None).active(10));
        assert!(rule(Some(11), None).active(10));
        assert!(!rule(Some(10), None).active(10));
        assert!(!rule(None, Some(5)).active(10));
    }
}
