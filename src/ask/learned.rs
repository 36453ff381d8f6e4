//! Learning shared by scope (issue 37): **the fleet's learned rules and each worker's
//! read-through copy of them**. It owns the statements on the registry's `learned_rules` (the
//! operator's `approve --learn --scope fleet` and `approve`/`deny --always` insert, `signatures --revoke` revokes; workers
//! only read: PostgreSQL's grants and row security refuse them anything else) and the rule
//! that a worker uses a fleet rule **only while its copy is fresh**: the bridge (`ask::fleet`)
//! pulls the active rules at each pass (a `brainloop_learned` notification, or the poll), and a
//! copy older than `[registry] learned_fresh_ms` — the worker cut off from the registry — is
//! not used at all, so a revocation made during an outage applies before any fleet rule is
//! used again (fail closed). The copy lives in the worker's memory only: a restarted worker
//! uses no fleet rule before its first pull.
//!
//! Evidence and promotion come only from rows the operator's role wrote: a rule is inserted in
//! the same transaction as the operator's decision that teaches it, naming that decision and
//! its validation; nothing a worker reports promotes anything. `bash::signatures` reads the
//! copy ([`teaches`], [`learned_for`]) beside the worker's own evidence, with every check of a
//! locally learned signature still applied (learnable, overrides, this client's denials).

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
/// on the whole fleet. Returns the rules' ids.
#[allow(clippy::too_many_arguments)]
pub fn learn(
    tx: &mut postgres::Transaction<'_>,
    validation_id: &str,
    decision_id: i64,
    client: &str,
    sigs: &[String],
    by: &str,
    now: i64,
    expires_at: Option<i64>,
) -> Result<Vec<i64>> {
    let mut ids = Vec::new();
    for s in sigs {
        let id: i64 = tx
            .query_one(
                "INSERT INTO learned_rules(kind, rule, client_id, scope, learned_by, validation_id, decision_id, created_at, expires_at)
                 VALUES ('signature', $1, $2, 'fleet', $3, $4, $5, $6, $7) RETURNING id",
                &[s, &client, &by, &validation_id, &decision_id, &now, &expires_at],
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

/// Worker side (the bridge, at each pass): replaces the copy with the registry's active
/// rules this worker may read, fresh from now. Returns whether the set changed.
pub fn pull(c: &mut crate::registry::Client, fresh_ms: u64) -> Result<bool> {
    let rules = list(c, false, crate::time::now_ms())?;
    {
        let mut r = RESTRICTIVE.lock().unwrap_or_else(|p| p.into_inner());
        *r = rules
            .iter()
            .filter(|r| {
                matches!(r.kind.as_str(), "override" | "command")
                    && matches!(r.value.as_deref(), Some("never" | "always_ask"))
            })
            .cloned()
            .collect();
    }
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    let changed = g.as_ref().is_none_or(|old| old.rules != rules);
    *g = Some(Copy {
        rules,
        pulled: crate::time::mono_ms(),
        fresh_ms: fresh_ms.min(i64::MAX as u64) as i64,
    });
    Ok(changed)
}

/// Worker side (the bridge, when the registry fails): drops the copy at once — a cut the
/// bridge sees stops the fleet's rules before the freshness bound would.
pub fn forget() {
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    *g = None;
}

/// The rules of `kind` of the copy usable now for `client`: none when the copy is older than
/// its freshness bound.
fn usable(kind: &str, client: &str, now: i64) -> Vec<LearnedRule> {
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
pub fn override_of(client: &str, sig: &str, now: i64) -> Option<String> {
    strictest_of("override", client, sig, now)
}

/// The registry's override of `command` (its exact text) for a job of `client` now, as
/// [`override_of`] for a signature: what `approve --always` / `deny --always` on a fleet
/// validation wrote (`learn_command`), or `rules add command`.
pub fn command_override(client: &str, command: &str, now: i64) -> Option<String> {
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

/// The most restrictive value of the overrides of `kind` on `rule` for `client` now.
fn strictest_of(kind: &str, client: &str, rule: &str, now: i64) -> Option<String> {
    let project = PROJECT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut found: Vec<LearnedRule> = RESTRICTIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|r| {
            r.kind == kind && r.rule == rule && applies(r, client, &project) && r.active(now)
        })
        .cloned()
        .collect();
    found.extend(
        usable(kind, client, now)
            .into_iter()
            .filter(|r| r.rule == rule),
    );
    let rank = |v: &str| match v {
        "never" => 3,
        "always_ask" => 2,
        "always_allow" => 1,
        _ => 0,
    };
    found
        .into_iter()
        .filter_map(|r| r.value)
        .filter(|v| rank(v) > 0)
        .max_by_key(|v| rank(v))
}

/// The host rules the registry grants `client`'s commands now (a fresh copy only): what
/// `egress::job::rules` adds to a run's rules beside the hosts a human approved.
pub fn hosts_for(client: &str, now: i64) -> Vec<String> {
    usable("host", client, now)
        .into_iter()
        .map(|r| r.rule)
        .collect()
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
