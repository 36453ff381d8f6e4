//! The fleet registry (issue 37): **the PostgreSQL database several workers and one operator
//! share** — its settings (`[registry] url`), the connection, the versioned migrations and the
//! roles. It owns who may write what there: `migrate` creates the group roles
//! `brainloop_operator` (decides), `brainloop_worker` (creates validations, reads the
//! decisions of its own validations, never writes one, carries out the undo requests the
//! operator addressed to it) and `brainloop_reviewer` (decides only as a reviewer may: never
//! learns, never overrules a human, approves only what `brainloop_reviewer_may` allows), with
//! grants and row security, and
//! `add_role` makes a login role a member of one. A worker's name in the registry is its login
//! role (`current_user`): row security keeps each worker to its own validations.
//!
//! The statements on the registry's tables live with their owners (`ask::validations` for
//! `validations`, `decisions`, `deliveries`); this module holds only the DDL, the role
//! statements and `registry_migrations`. Absent `[registry]`, nothing here is used: the
//! embedded SQLite default is unchanged.
//!
//! The client is the synchronous `postgres` crate (it runs its own small runtime): call it from
//! a plain thread or `spawn_blocking`, never on an async worker thread.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub mod tls;

/// The channel a decision is announced on (payload: the worker that asked).
pub const CHANNEL: &str = "brainloop_decisions";
/// The channel a learned rule's insert or revocation is announced on (payload: its id).
pub const LEARNED_CHANNEL: &str = "brainloop_learned";
/// The group role of the operator's logins: the one that decides (a reviewer's decides only
/// within [`REVIEWER_ROLE`]'s limits).
pub const OPERATOR_ROLE: &str = "brainloop_operator";
/// The group role of workers' logins.
pub const WORKER_ROLE: &str = "brainloop_worker";
/// The group role of a fleet reviewer's logins: decides only as a reviewer may (migration 3).
pub const REVIEWER_ROLE: &str = "brainloop_reviewer";

/// `[registry]` in the configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `postgres://ROLE[:PASSWORD]@HOST[:PORT]/DB[?…]` (libpq's URL form; `host=/dir` for a
    /// Unix socket). A worker's config names its worker role, the operator's config the
    /// operator's role. Empty: no registry.
    pub url: String,
    /// The worker's fallback poll of the registry when no notification arrives (ms).
    pub poll_ms: u64,
    /// A connection attempt gives up after this long (ms).
    pub connect_timeout_ms: u64,
    /// The fleet's learned rules are used only while the worker's copy of them is this fresh
    /// (ms since its last successful pull; at least twice `poll_ms`): a worker cut off from
    /// the registry stops using them, so a revocation made meanwhile applies before any is
    /// used again (fail closed).
    pub learned_fresh_ms: u64,
    /// The deadline of every registry statement (`statement_timeout` on each connection) and of
    /// each pass of the worker's bridge, its connection included (ms): a pass past it — a
    /// registry, or the worker's backend, that hangs — is the `registry` problem, and the
    /// bridge reconnects (issue 50).
    pub pass_timeout_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            url: String::new(),
            poll_ms: 1000,
            connect_timeout_ms: 3000,
            learned_fresh_ms: 5000,
            pass_timeout_ms: 10_000,
        }
    }
}

impl Settings {
    /// `statement_timeout` of every connection (ms): [`Settings::pass_timeout_ms`], at least 100.
    pub fn statement_timeout_ms(&self) -> u64 {
        self.pass_timeout_ms.max(100)
    }
    /// The URL with any password replaced by `***` (for messages and `status`).
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }
}

/// `url` with the password (between `:` and `@` of the authority) masked.
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.split_once('@') {
        Some((a, t)) => (a, t),
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{tail}"),
        None => url.to_string(),
    }
}

/// A connection to the registry (the caller's role, from the URL).
pub type Client = postgres::Client;

/// Connects with the settings' URL and timeout, over TLS as its `sslmode` says ([`tls`]).
pub fn connect(s: &Settings) -> Result<Client> {
    let (url, t) = tls::split(&s.url)?;
    let mut cfg: postgres::Config = url
        .parse()
        .with_context(|| format!("[registry] url {} is not a PostgreSQL URL", s.shown_url()))?;
    cfg.connect_timeout(Duration::from_millis(s.connect_timeout_ms.max(100)));
    cfg.application_name("brainloop");
    // The server's own deadline on each statement (a backend that runs but takes too long);
    // one that cannot run at all (stopped) is the bridge's client-side deadline's (`ask::fleet`).
    cfg.options(&format!(
        "-c statement_timeout={}",
        s.statement_timeout_ms()
    ));
    cfg.keepalives(true);
    cfg.keepalives_idle(Duration::from_secs(30));
    let host = cfg
        .get_hosts()
        .iter()
        .find_map(|h| match h {
            postgres::config::Host::Tcp(n) => Some(n.clone()),
            #[allow(unreachable_patterns)]
            _ => None,
        })
        .unwrap_or_default();
    let res = match t.mode {
        tls::Mode::Disable => {
            cfg.ssl_mode(postgres::config::SslMode::Disable);
            cfg.connect(postgres::NoTls)
        }
        mode => {
            cfg.ssl_mode(if mode == tls::Mode::Prefer {
                postgres::config::SslMode::Prefer
            } else {
                postgres::config::SslMode::Require
            });
            let rc = tls::client_config(&t)?;
            cfg.connect(tokio_postgres_rustls::MakeRustlsConnect::new(rc))
        }
    };
    res.map_err(|e| {
        let why = tls::explain(&e, &t, &host);
        let e = anyhow::Error::new(e);
        match why {
            Some(fix) => e.context(format!(
                "cannot reach the registry {}: {fix}",
                s.shown_url()
            )),
            None => e.context(format!("cannot reach the registry {}", s.shown_url())),
        }
    })
}

/// How this connection is protected, as the server sees it (`pg_stat_ssl`): e.g.
/// `TLS TLSv1.3 TLS_AES_256_GCM_SHA384`, or `no TLS`.
pub fn transport(c: &mut Client) -> Result<String> {
    let r = c
        .query_one(
            "SELECT ssl, coalesce(version, ''), coalesce(cipher, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .context("reading pg_stat_ssl")?;
    let ssl: bool = r.get(0);
    Ok(if ssl {
        format!("TLS {} {}", r.get::<_, String>(1), r.get::<_, String>(2))
    } else {
        "no TLS".to_string()
    })
}

/// Listens for decisions on this connection (see [`wait`]).
pub fn listen(c: &mut Client) -> Result<()> {
    c.batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {LEARNED_CHANNEL}"))
        .context("LISTEN on the registry")
}

/// Waits up to `timeout` for a notification on this connection; true if one (or more) came.
/// Err: the connection is broken.
pub fn wait(c: &mut Client, timeout: Duration) -> Result<bool> {
    use postgres::fallible_iterator::FallibleIterator;
    let mut n = c.notifications();
    let got = n
        .timeout_iter(timeout)
        .next()
        .context("waiting for the registry's notifications")?;
    if got.is_none() {
        return Ok(false);
    }
    // Drain what else is queued without waiting.
    let mut more = n.iter();
    while more
        .next()
        .context("reading the registry's notifications")?
        .is_some()
    {}
    Ok(true)
}

/// The registry's migrations, in order; `registry_migrations` records the applied ones. Never
/// edit a shipped step: append one.
const STEPS: &[&str] = &[
    // 1: the operator queue: validations (a worker's requests), decisions (the operator's),
    // deliveries (which worker has taken which decision), the roles and their rights.
    r#"
DO $roles$ BEGIN
  -- Roles are the cluster's: another database's migration may create them at the same time.
  BEGIN
    CREATE ROLE brainloop_operator NOLOGIN;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
  END;
  BEGIN
    CREATE ROLE brainloop_worker NOLOGIN;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
  END;
END $roles$;

CREATE TABLE validations (
  id text PRIMARY KEY,
  worker text NOT NULL DEFAULT current_user,
  job_id bigint NOT NULL,
  client_id text NOT NULL,
  command text,
  command_hash text,
  policy text,
  risk_score double precision,
  permission_set text,
  reasons text,
  status text NOT NULL DEFAULT 'pending',
  requested_at bigint NOT NULL,
  decided_at bigint,
  expires_at bigint
);
CREATE INDEX validations_pending ON validations(status, requested_at);

CREATE TABLE decisions (
  id bigserial PRIMARY KEY,
  validation_id text NOT NULL REFERENCES validations(id),
  decision text NOT NULL CHECK (decision IN ('approve', 'deny', 'always_allow', 'always_ask', 'never')),
  reason text,
  decided_by text NOT NULL,
  db_role text NOT NULL DEFAULT current_user,
  created_at bigint NOT NULL,
  learn boolean NOT NULL DEFAULT false
);
CREATE INDEX decisions_validation ON decisions(validation_id);

CREATE TABLE deliveries (
  decision_id bigint NOT NULL REFERENCES decisions(id),
  worker text NOT NULL DEFAULT current_user,
  delivered_at bigint NOT NULL,
  PRIMARY KEY (decision_id, worker)
);

CREATE FUNCTION brainloop_decision_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_notify('brainloop_decisions',
                    (SELECT worker FROM validations WHERE id = NEW.validation_id));
  RETURN NEW;
END $f$;
CREATE TRIGGER decisions_notify AFTER INSERT ON decisions
  FOR EACH ROW EXECUTE FUNCTION brainloop_decision_notify();

REVOKE ALL ON validations, decisions, deliveries FROM PUBLIC;
GRANT SELECT ON registry_migrations TO brainloop_worker, brainloop_operator;
GRANT SELECT, INSERT ON validations TO brainloop_worker;
GRANT UPDATE (status, decided_at) ON validations TO brainloop_worker;
GRANT SELECT ON decisions TO brainloop_worker;
GRANT SELECT, INSERT ON deliveries TO brainloop_worker;
GRANT SELECT ON validations, deliveries TO brainloop_operator;
GRANT SELECT, INSERT ON decisions TO brainloop_operator;
GRANT USAGE ON SEQUENCE decisions_id_seq TO brainloop_operator;

ALTER TABLE validations ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_own ON validations TO brainloop_worker
  USING (worker = current_user) WITH CHECK (worker = current_user);
CREATE POLICY operator_reads ON validations FOR SELECT TO brainloop_operator USING (true);

ALTER TABLE decisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_reads_own ON decisions FOR SELECT TO brainloop_worker
  USING (EXISTS (SELECT 1 FROM validations v WHERE v.id = validation_id AND v.worker = current_user));
CREATE POLICY operator_reads ON decisions FOR SELECT TO brainloop_operator USING (true);
CREATE POLICY operator_decides ON decisions FOR INSERT TO brainloop_operator
  WITH CHECK (db_role = current_user);

ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_own ON deliveries TO brainloop_worker
  USING (worker = current_user) WITH CHECK (worker = current_user);
CREATE POLICY operator_reads ON deliveries FOR SELECT TO brainloop_operator USING (true);
"#,
    // 2: learning shared by scope: the signatures a validation's change set carries (published
    // by the worker with the validation, fixed once inserted), the scope of a decision's
    // `--learn`, and the fleet's learned rules — written (learned, revoked) only by the
    // operator's role, read by every worker, announced on `brainloop_learned`.
    r#"
ALTER TABLE validations ADD COLUMN signatures text;
ALTER TABLE decisions ADD COLUMN learn_scope text NOT NULL DEFAULT 'worker'
  CHECK (learn_scope IN ('worker', 'fleet'));

CREATE TABLE learned_rules (
  id bigserial PRIMARY KEY,
  kind text NOT NULL DEFAULT 'signature' CHECK (kind IN ('signature')),
  rule text NOT NULL,
  client_id text NOT NULL,
  scope text NOT NULL CHECK (scope IN ('fleet')),
  learned_by text NOT NULL,
  db_role text NOT NULL DEFAULT current_user,
  validation_id text REFERENCES validations(id),
  decision_id bigint REFERENCES decisions(id),
  created_at bigint NOT NULL,
  expires_at bigint,
  revoked_at bigint,
  revoked_by text,
  revoked_role text
);
CREATE INDEX learned_rules_active ON learned_rules(revoked_at, client_id);

CREATE FUNCTION brainloop_learned_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_notify('brainloop_learned', NEW.id::text);
  RETURN NEW;
END $f$;
CREATE TRIGGER learned_rules_notify AFTER INSERT OR UPDATE ON learned_rules
  FOR EACH ROW EXECUTE FUNCTION brainloop_learned_notify();

REVOKE ALL ON learned_rules FROM PUBLIC;
GRANT SELECT ON learned_rules TO brainloop_worker;
GRANT SELECT, INSERT ON learned_rules TO brainloop_operator;
GRANT UPDATE (revoked_at, revoked_by, revoked_role) ON learned_rules TO brainloop_operator;
GRANT USAGE ON SEQUENCE learned_rules_id_seq TO brainloop_operator;

ALTER TABLE learned_rules ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_reads ON learned_rules FOR SELECT TO brainloop_worker USING (scope = 'fleet');
CREATE POLICY operator_reads ON learned_rules FOR SELECT TO brainloop_operator USING (true);
CREATE POLICY operator_learns ON learned_rules FOR INSERT TO brainloop_operator
  WITH CHECK (db_role = current_user AND revoked_at IS NULL);
CREATE POLICY operator_revokes ON learned_rules FOR UPDATE TO brainloop_operator
  USING (true) WITH CHECK (revoked_role = current_user);
"#,
    // 3 (the operator queue from any machine, the reviewer's role): what a validation shows
    // (`detail`: the payload the worker's hooks get, capped as they are, fixed once inserted),
    // the change sets each worker applied and undid (`applied_changes`, its own rows), undo
    // requests (only the operator's role creates one; only the worker named carries it out and
    // records the outcome), which decisions a worker refused to act on (`deliveries.refused`),
    // and `brainloop_reviewer`: it reads the queue and inserts decisions only as a reviewer may
    // (`decided_by` 'reviewer:…', approve or deny, no learning, the first decision of a pending
    // validation, an approve only of a change set shown whole, local, whose signatures and
    // command no human denied for that client) — checked by `brainloop_reviewer_may`, a
    // function of the migration's owner (it reads past row security).
    r#"
DO $roles$ BEGIN
  BEGIN
    CREATE ROLE brainloop_reviewer NOLOGIN;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
  END;
END $roles$;

ALTER TABLE validations ADD COLUMN detail text;
ALTER TABLE deliveries ADD COLUMN refused text;

CREATE TABLE applied_changes (
  worker text NOT NULL DEFAULT current_user,
  job_id bigint NOT NULL,
  validation_id text,
  command text NOT NULL,
  summary text NOT NULL,
  policy_used text NOT NULL,
  decided_by text,
  applied_at bigint NOT NULL,
  undone_at bigint,
  diff text,
  PRIMARY KEY (worker, job_id)
);

CREATE TABLE undo_requests (
  id bigserial PRIMARY KEY,
  worker text NOT NULL,
  job_id bigint NOT NULL,
  requested_by text NOT NULL,
  db_role text NOT NULL DEFAULT current_user,
  requested_at bigint NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
  outcome text,
  done_at bigint
);
CREATE INDEX undo_requests_pending ON undo_requests(worker, status);

CREATE FUNCTION brainloop_undo_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_notify('brainloop_decisions', NEW.worker);
  RETURN NEW;
END $f$;
CREATE TRIGGER undo_requests_notify AFTER INSERT ON undo_requests
  FOR EACH ROW EXECUTE FUNCTION brainloop_undo_notify();

-- What a reviewer may decide (the registry's side of `hooks::reviewer`): read past row
-- security (SECURITY DEFINER, the owner's), so a reviewer cannot hide a human's denial.
CREATE FUNCTION brainloop_reviewer_may(vid text, word text, by_name text, learns boolean, scope text)
RETURNS boolean LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  v validations%ROWTYPE;
  p jsonb;
  sigs jsonb;
BEGIN
  IF by_name NOT LIKE 'reviewer:%' OR learns OR scope <> 'worker'
     OR word NOT IN ('approve', 'deny') THEN
    RETURN false;
  END IF;
  SELECT * INTO v FROM validations WHERE id = vid;
  IF NOT FOUND OR v.status <> 'pending' THEN
    RETURN false;
  END IF;
  -- The first decision only: a reviewer never overrules (or races) a human.
  IF EXISTS (SELECT 1 FROM decisions d WHERE d.validation_id = vid) THEN
    RETURN false;
  END IF;
  IF word = 'deny' THEN
    RETURN true;
  END IF;
  -- approve: a local change set the payload showed whole.
  BEGIN
    p := v.detail::jsonb;
    sigs := coalesce(v.signatures, '[]')::jsonb;
  EXCEPTION WHEN others THEN
    RETURN false;
  END;
  IF p IS NULL OR p->>'kind' IS DISTINCT FROM 'change_set'
     OR coalesce((p->>'truncated')::boolean, true)
     OR jsonb_typeof(p->'network') IS DISTINCT FROM 'null'
     OR p->'generated' IS NOT NULL AND jsonb_typeof(p->'generated') <> 'null'
     OR jsonb_typeof(sigs) <> 'array' OR jsonb_array_length(sigs) = 0 THEN
    RETURN false;
  END IF;
  -- Never a command or a signature a human denied for that client, on any worker.
  IF EXISTS (
    SELECT 1 FROM decisions d JOIN validations w ON w.id = d.validation_id
    WHERE d.decision IN ('deny', 'never') AND d.decided_by NOT LIKE 'reviewer:%'
      AND w.client_id = v.client_id
      AND (w.command_hash = v.command_hash OR w.command = v.command
           OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(
                         CASE WHEN w.signatures IS NULL THEN '[]'::jsonb ELSE w.signatures::jsonb END) s
                      WHERE sigs ? s.value))) THEN
    RETURN false;
  END IF;
  RETURN true;
END $f$;
REVOKE ALL ON FUNCTION brainloop_reviewer_may(text, text, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brainloop_reviewer_may(text, text, text, boolean, text) TO brainloop_reviewer;

REVOKE ALL ON applied_changes, undo_requests FROM PUBLIC;
GRANT SELECT ON registry_migrations TO brainloop_reviewer;
GRANT SELECT, INSERT, UPDATE ON applied_changes TO brainloop_worker;
GRANT SELECT ON applied_changes TO brainloop_operator, brainloop_reviewer;
GRANT SELECT ON undo_requests TO brainloop_worker;
GRANT UPDATE (status, outcome, done_at) ON undo_requests TO brainloop_worker;
GRANT SELECT, INSERT ON undo_requests TO brainloop_operator;
GRANT USAGE ON SEQUENCE undo_requests_id_seq TO brainloop_operator;
GRANT SELECT ON validations, decisions, deliveries TO brainloop_reviewer;
GRANT INSERT ON decisions TO brainloop_reviewer;
GRANT USAGE ON SEQUENCE decisions_id_seq TO brainloop_reviewer;

ALTER TABLE applied_changes ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_own ON applied_changes TO brainloop_worker
  USING (worker = current_user) WITH CHECK (worker = current_user);
CREATE POLICY operator_reads ON applied_changes FOR SELECT TO brainloop_operator USING (true);
CREATE POLICY reviewer_reads ON applied_changes FOR SELECT TO brainloop_reviewer USING (true);

ALTER TABLE undo_requests ENABLE ROW LEVEL SECURITY;
CREATE POLICY operator_reads ON undo_requests FOR SELECT TO brainloop_operator USING (true);
CREATE POLICY operator_requests ON undo_requests FOR INSERT TO brainloop_operator
  WITH CHECK (db_role = current_user AND status = 'pending' AND outcome IS NULL AND done_at IS NULL);
CREATE POLICY worker_reads_own ON undo_requests FOR SELECT TO brainloop_worker
  USING (worker = current_user);
CREATE POLICY worker_answers_own ON undo_requests FOR UPDATE TO brainloop_worker
  USING (worker = current_user AND status = 'pending')
  WITH CHECK (worker = current_user AND status <> 'pending');

CREATE POLICY reviewer_reads ON validations FOR SELECT TO brainloop_reviewer USING (true);
CREATE POLICY reviewer_reads ON decisions FOR SELECT TO brainloop_reviewer USING (true);
CREATE POLICY reviewer_decides ON decisions FOR INSERT TO brainloop_reviewer
  WITH CHECK (db_role = current_user
              AND brainloop_reviewer_may(validation_id, decision, decided_by, learn, learn_scope));
CREATE POLICY reviewer_reads ON deliveries FOR SELECT TO brainloop_reviewer USING (true);
"#,
    // 4: overrides and host rules shared by scope. `learned_rules` also holds the
    // operator's overrides of a signature (`kind = 'override'`, `value` always_allow /
    // always_ask / never) and host rules (`kind = 'host'`, `rule` a host pattern), each with a
    // scope: the fleet, a project (`target` = the project's name: the `horos_name` its workers
    // register as), or one worker (`target` = its login role). Written and revoked only by the
    // operator's role (the grants and policies of step 2 still hold); a worker reads the
    // fleet's, the projects', and its own worker-scoped rules, never another worker's.
    r#"
ALTER TABLE learned_rules DROP CONSTRAINT IF EXISTS learned_rules_kind_check;
ALTER TABLE learned_rules DROP CONSTRAINT IF EXISTS learned_rules_scope_check;
ALTER TABLE learned_rules ADD COLUMN target text;
ALTER TABLE learned_rules ADD COLUMN value text;
ALTER TABLE learned_rules ADD CONSTRAINT learned_rules_kind3
  CHECK (kind IN ('signature', 'override', 'host'));
ALTER TABLE learned_rules ADD CONSTRAINT learned_rules_scope3
  CHECK ((scope = 'fleet' AND target IS NULL)
      OR (scope IN ('project', 'worker') AND target IS NOT NULL AND target <> ''));
ALTER TABLE learned_rules ADD CONSTRAINT learned_rules_value3
  CHECK ((kind = 'override' AND value IN ('always_allow', 'always_ask', 'never'))
      OR (kind <> 'override' AND value IS NULL));
DROP POLICY worker_reads ON learned_rules;
CREATE POLICY worker_reads ON learned_rules FOR SELECT TO brainloop_worker
  USING (scope IN ('fleet', 'project') OR (scope = 'worker' AND target = current_user));
"#,
    // 5: the fleet's evidence (`ask::evidence`): how many human approvals and denials each
    // (client, signature) has in the registry, counted only from decision rows a member of
    // `brainloop_operator` wrote (not a reviewer's: `decided_by 'reviewer:…'`), the first such
    // decision of each validation, joined to the signatures its worker published with it (fixed
    // once inserted). Views of the migration's owner: they read past row security, aggregate
    // only, and no role may write them (no grant; an aggregate view is not updatable) — nothing
    // a worker writes (its validations' status, its applied change sets, its own SQLite
    // counts) is in them. `brainloop_json_texts` reads a worker's published text without ever
    // failing on it (a malformed list counts nothing, it does not break the view). And a
    // fourth kind of learned rule: a command's override (`kind = 'command'`).
    r#"
CREATE FUNCTION brainloop_json_texts(t text) RETURNS SETOF text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
  j jsonb;
BEGIN
  IF t IS NULL THEN
    RETURN;
  END IF;
  BEGIN
    j := t::jsonb;
  EXCEPTION WHEN others THEN
    RETURN;
  END;
  IF jsonb_typeof(j) = 'array' THEN
    RETURN QUERY SELECT DISTINCT e.v #>> '{}' FROM jsonb_array_elements(j) e(v)
                 WHERE jsonb_typeof(e.v) = 'string';
  END IF;
END $f$;

CREATE VIEW fleet_human_decisions AS
SELECT DISTINCT ON (d.validation_id) d.id, d.validation_id, d.decision, d.decided_by, d.db_role, d.created_at
FROM decisions d
WHERE d.decided_by NOT LIKE 'reviewer:%'
  AND EXISTS (SELECT 1 FROM pg_roles r
              WHERE r.rolname = d.db_role AND pg_has_role(r.oid, 'brainloop_operator', 'MEMBER'))
ORDER BY d.validation_id, d.id;

CREATE VIEW fleet_evidence AS
SELECT v.client_id, s.signature,
       count(*) FILTER (WHERE h.decision IN ('approve', 'always_allow', 'always_ask')) AS approvals,
       count(*) FILTER (WHERE h.decision IN ('deny', 'never')) AS denials,
       count(DISTINCT v.worker) FILTER (WHERE h.decision IN ('approve', 'always_allow', 'always_ask')) AS workers,
       max(h.created_at) AS last_decided_at
FROM fleet_human_decisions h
JOIN validations v ON v.id = h.validation_id
CROSS JOIN LATERAL brainloop_json_texts(v.signatures) s(signature)
GROUP BY v.client_id, s.signature;

CREATE VIEW fleet_evidence_version AS
SELECT coalesce(max(id), 0) AS last_decision FROM decisions;

REVOKE ALL ON fleet_human_decisions, fleet_evidence, fleet_evidence_version FROM PUBLIC;
GRANT SELECT ON fleet_evidence, fleet_evidence_version
  TO brainloop_worker, brainloop_operator, brainloop_reviewer;
GRANT SELECT ON fleet_human_decisions TO brainloop_operator;

-- A command's override in the registry (`kind = 'command'`, `rule` = the command's exact
-- text, `value` always_allow / always_ask / never): what `approve --always` / `deny --always`
-- on a validation write in the decision's transaction, for the scope the operator names (the
-- worker that asked by default), or `rules add command`.
ALTER TABLE learned_rules DROP CONSTRAINT IF EXISTS learned_rules_kind3;
ALTER TABLE learned_rules DROP CONSTRAINT IF EXISTS learned_rules_value3;
ALTER TABLE learned_rules ADD CONSTRAINT learned_rules_kind5
  CHECK (kind IN ('signature', 'override', 'host', 'command'));
ALTER TABLE learned_rules ADD CONSTRAINT learned_rules_value5
  CHECK ((kind IN ('override', 'command') AND value IN ('always_allow', 'always_ask', 'never'))
      OR (kind NOT IN ('override', 'command') AND value IS NULL));
"#,
    // 6: clients' grants shared by scope (`brainloop grant --scope`): a permission and its
    // pattern (as in each worker's `client_permissions`: a SECRET grant names the secret, whose
    // value stays in each worker's own configuration) for a client, on the fleet, a project
    // (`target` = the workers' `horos_name`) or one worker (`target` = its login role).
    // Written and revoked only by the operator's role, under its own name; a worker reads the
    // fleet's, the projects' and its own worker-scoped grants; an insert or a revocation is
    // announced on `brainloop_learned` like a rule's. And `approve --learn --scope
    // project:NAME|worker:ROLE`: a decision's `learn_scope` may name one (`worker` alone
    // still means the worker that asked learns locally).
    r#"
ALTER TABLE decisions DROP CONSTRAINT IF EXISTS decisions_learn_scope_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_learn_scope6
  CHECK (learn_scope IN ('worker', 'fleet')
      OR (learn_scope LIKE 'project:_%') OR (learn_scope LIKE 'worker:_%'));

CREATE TABLE client_grants (
  id bigserial PRIMARY KEY,
  client_id text NOT NULL CHECK (client_id <> ''),
  permission text NOT NULL CHECK (permission IN
    ('FILE_READ', 'FILE_WRITE', 'SYSTEM_COMMAND', 'NETWORK', 'LLM', 'FORCE_EXECUTE', 'SECRET')),
  pattern text NOT NULL CHECK (pattern <> ''),
  auto boolean NOT NULL DEFAULT false CHECK (NOT auto OR permission = 'FILE_WRITE'),
  scope text NOT NULL,
  target text,
  granted_by text NOT NULL,
  db_role text NOT NULL DEFAULT current_user,
  created_at bigint NOT NULL,
  expires_at bigint,
  revoked_at bigint,
  revoked_by text,
  revoked_role text,
  CONSTRAINT client_grants_scope CHECK ((scope = 'fleet' AND target IS NULL)
      OR (scope IN ('project', 'worker') AND target IS NOT NULL AND target <> ''))
);
CREATE UNIQUE INDEX client_grants_active ON client_grants
  (client_id, permission, pattern, scope, coalesce(target, '')) WHERE revoked_at IS NULL;

CREATE FUNCTION brainloop_grant_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_notify('brainloop_learned', 'grant:' || NEW.id::text);
  RETURN NEW;
END $f$;
CREATE TRIGGER client_grants_notify AFTER INSERT OR UPDATE ON client_grants
  FOR EACH ROW EXECUTE FUNCTION brainloop_grant_notify();

REVOKE ALL ON client_grants FROM PUBLIC;
GRANT SELECT ON client_grants TO brainloop_worker;
GRANT SELECT, INSERT ON client_grants TO brainloop_operator;
GRANT UPDATE (revoked_at, revoked_by, revoked_role) ON client_grants TO brainloop_operator;
GRANT USAGE ON SEQUENCE client_grants_id_seq TO brainloop_operator;

ALTER TABLE client_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY worker_reads ON client_grants FOR SELECT TO brainloop_worker
  USING (scope IN ('fleet', 'project') OR (scope = 'worker' AND target = current_user));
CREATE POLICY operator_reads ON client_grants FOR SELECT TO brainloop_operator USING (true);
CREATE POLICY operator_grants ON client_grants FOR INSERT TO brainloop_operator
  WITH CHECK (db_role = current_user AND revoked_at IS NULL);
CREATE POLICY operator_revokes ON client_grants FOR UPDATE TO brainloop_operator
  USING (true) WITH CHECK (revoked_role = current_user);
"#,
    STEP_7_DECISIONS_SERIALISED,
    // 8: one human decision per validation (issue 50): a unique key on the validation among
    // the decisions not written as a reviewer's, so of two operators deciding at once the
    // first committed wins and the second's insert fails (`ask::validations::fleet_decide_in`
    // says who decided what and when). Rows older than the key that already break it (two
    // human decisions written before this step) are left as they are: the key covers the
    // decisions after the newest of them.
    r#"
DO $one$
DECLARE
  last bigint;
BEGIN
  SELECT coalesce(max(d.id), 0) INTO last FROM decisions d
  WHERE d.decided_by NOT LIKE 'reviewer:%'
    AND EXISTS (SELECT 1 FROM decisions e WHERE e.validation_id = d.validation_id
                AND e.id < d.id AND e.decided_by NOT LIKE 'reviewer:%');
  EXECUTE format('CREATE UNIQUE INDEX decisions_one_human ON decisions(validation_id)
                  WHERE decided_by NOT LIKE %L AND id > %s', 'reviewer:%', last);
END $one$;
"#,
    STEP_9_EPOCH,
];

/// 7 (issue 49): **a human's decision wins over a reviewer's.** Every insert into `decisions`
/// (the operator's and the reviewer's roles alike) first locks its validation's row
/// (`brainloop_decision_lock`, a BEFORE trigger of the owner's, so neither role needs a grant
/// on `validations` for it): two decisions on one validation are serialised. And
/// `brainloop_reviewer_may` becomes VOLATILE, so its "no decision yet" reads the decisions
/// committed while the insert waited for that lock (a STABLE function sees only the statement's
/// snapshot, taken before the wait): a reviewer's insert made while a human's decision is
/// uncommitted waits for it, then fails. A reviewer's decision committed first does not stop the
/// human: the operator's CLI decides over it, and the worker takes a human's decision over a
/// reviewer's it has not acted on (`ask::validations::undelivered`).
const STEP_7_DECISIONS_SERIALISED: &str = r#"
CREATE FUNCTION brainloop_decision_lock() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $f$
BEGIN
  PERFORM 1 FROM validations WHERE id = NEW.validation_id FOR UPDATE;
  RETURN NEW;
END $f$;
CREATE TRIGGER decisions_lock BEFORE INSERT ON decisions
  FOR EACH ROW EXECUTE FUNCTION brainloop_decision_lock();
ALTER FUNCTION brainloop_reviewer_may(text, text, text, boolean, text) VOLATILE;
"#;

/// 9 (issue 50): **a registry that goes back in time is noticed** (`ask::epoch`). The
/// generation — `registry_generation`, moved forward by every statement that writes a registry
/// table (a trigger of the owner's, so no role needs a grant on it) — and the epochs:
/// `registry_epochs`, none at first and one per operator's `brainloop registry
/// accept-restore`, each recording the database and table it was written in (a dump restored
/// elsewhere carries the old ones). Workers read both; only the operator's role adds an epoch.
const STEP_9_EPOCH: &str = r#"
CREATE SEQUENCE registry_generation;
CREATE TABLE registry_epochs (
  id bigserial PRIMARY KEY,
  epoch uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
  accepted_by text NOT NULL,
  db_role text NOT NULL DEFAULT current_user,
  created_at bigint NOT NULL,
  database_oid bigint NOT NULL,
  table_oid bigint NOT NULL
);

CREATE FUNCTION brainloop_generation_bump() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $f$
BEGIN
  PERFORM nextval('registry_generation');
  RETURN NULL;
END $f$;
DO $bump$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['validations', 'decisions', 'deliveries', 'learned_rules',
                           'client_grants', 'applied_changes', 'undo_requests', 'registry_epochs']
  LOOP
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %I
                    FOR EACH STATEMENT EXECUTE FUNCTION brainloop_generation_bump()',
                   t || '_generation', t);
  END LOOP;
END $bump$;

REVOKE ALL ON registry_epochs, registry_generation FROM PUBLIC;
GRANT SELECT ON registry_generation TO brainloop_worker, brainloop_operator, brainloop_reviewer;
GRANT SELECT ON registry_epochs TO brainloop_worker, brainloop_operator, brainloop_reviewer;
GRANT INSERT ON registry_epochs TO brainloop_operator;
GRANT USAGE ON SEQUENCE registry_epochs_id_seq TO brainloop_operator;
ALTER TABLE registry_epochs ENABLE ROW LEVEL SECURITY;
CREATE POLICY all_read ON registry_epochs FOR SELECT USING (true);
CREATE POLICY operator_accepts ON registry_epochs FOR INSERT TO brainloop_operator
  WITH CHECK (db_role = current_user);
"#;

/// The version the binary's migrations reach.
pub fn latest() -> i64 {
    STEPS.len() as i64
}

/// Applies the missing migrations (one transaction each, serialized by an advisory lock, so two
/// `migrate` at once apply each step once). Returns (version before, version after). Run with a
/// role that owns the database (not a worker's or the operator's).
pub fn migrate(c: &mut Client) -> Result<(i64, i64)> {
    // A migration may rewrite big tables: the owner's session has no statement deadline.
    c.batch_execute("SET statement_timeout = 0")
        .context("lifting statement_timeout for the migration")?;
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS registry_migrations (
           version bigint PRIMARY KEY, applied_at bigint NOT NULL)",
    )
    .context("creating registry_migrations (does this role own the database?)")?;
    let mut before = None;
    loop {
        let mut tx = c.transaction()?;
        tx.batch_execute("SELECT pg_advisory_xact_lock(3737)")?;
        let v: i64 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM registry_migrations",
                &[],
            )?
            .get(0);
        before.get_or_insert(v);
        let Some(step) = STEPS.get(v as usize) else {
            tx.commit()?;
            return Ok((before.unwrap_or(v), v));
        };
        tx.batch_execute(step)
            .with_context(|| format!("registry migration {}", v + 1))?;
        tx.execute(
            "INSERT INTO registry_migrations(version, applied_at) VALUES ($1, $2)",
            &[&(v + 1), &crate::time::now_ms()],
        )?;
        tx.commit()?;
    }
}

/// The registry's schema version (0: never migrated).
pub fn version(c: &mut Client) -> Result<i64> {
    let exists: bool = c
        .query_one("SELECT to_regclass('registry_migrations') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(0);
    }
    Ok(c.query_one(
        "SELECT coalesce(max(version), 0) FROM registry_migrations",
        &[],
    )?
    .get(0))
}

/// Fails unless the registry is at the binary's version (a worker must not write an older
/// or newer schema than it knows).
pub fn check_version(c: &mut Client) -> Result<()> {
    let v = version(c)?;
    if v != latest() {
        bail!(
            "the registry is at schema version {v}, this binary needs {}: run `brainloop registry migrate` with the database owner's URL",
            latest()
        );
    }
    Ok(())
}

/// Which group a login role joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Operator,
    Worker,
    Reviewer,
}

impl Role {
    pub fn group(self) -> &'static str {
        match self {
            Role::Operator => OPERATOR_ROLE,
            Role::Worker => WORKER_ROLE,
            Role::Reviewer => REVIEWER_ROLE,
        }
    }
}

/// Creates login role `name` (if missing) as a member of `role`'s group, with `password` if
/// given. A worker's login name is its name in the registry.
pub fn add_role(c: &mut Client, name: &str, role: Role, password: Option<&str>) -> Result<()> {
    if name.is_empty()
        || name.len() > 63
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        bail!("role name {name:?}: use 1 to 63 letters, digits, '_' or '-'");
    }
    let exists: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)",
            &[&name],
        )?
        .get(0);
    let quoted = format!("\"{name}\"");
    if !exists {
        c.batch_execute(&format!("CREATE ROLE {quoted} LOGIN"))?;
    }
    c.batch_execute(&format!("GRANT {} TO {quoted}", role.group()))?;
    if let Some(p) = password {
        let lit = p.replace('\'', "''");
        c.batch_execute(&format!("ALTER ROLE {quoted} PASSWORD '{lit}'"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            shown_url("postgres://w1:secret@db:5432/reg"),
            "postgres://w1:***@db:5432/reg"
        );
        assert_eq!(shown_url("postgres://w1@db/reg"), "postgres://w1@db/reg");
    }
}
