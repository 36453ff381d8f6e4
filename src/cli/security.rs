//! Operator commands for command security (DESIGN §7): `validations`, `approve ID [--always]`,
//! `deny ID [--always]`, `commands`, `override HASH always_allow|always_ask|never|clear`.
//! Decisions are written to command_security.db, which only the operator and the worker can
//! write; the worker consumes each approval once (see `ask::answers`).

use crate::ask::validations::{self, Decision};
use crate::bash::policy::Override;
use crate::bash::registry;
use crate::bash::signatures;
use crate::bash::{changes, journal};
use crate::config::Config;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Result};
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct ValidationsArgs {
    /// Include decided and expired validations.
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug, Default)]
pub struct DecideArgs {
    /// The validation id (from `brainloop validations`, or the job's result).
    pub id: String,
    /// Also set the command's override: `approve --always` → always_allow, `deny --always` → never.
    #[arg(long)]
    pub always: bool,
    /// Why (kept with the decision).
    #[arg(long)]
    pub reason: Option<String>,
    /// `approve` only: also learn the change set's signatures for the job's client at once
    /// (refused, saying why, for what a learned signature could never apply).
    #[arg(long)]
    pub learn: bool,
    /// With --learn and a fleet registry: `worker` (default: the worker that asked learns),
    /// `fleet` (every worker learns the signatures for the job's client, until
    /// `signatures --revoke`), `project:NAME` (the workers whose horos_name is NAME) or
    /// `worker:ROLE` (the worker whose login role is ROLE). With --always and a fleet
    /// registry: where the command's override applies — `worker:ROLE` (default: the worker
    /// that asked), `project:NAME` or `fleet` (a rule of the registry, `rules revoke` takes it
    /// back).
    #[arg(long, value_name = "worker|fleet|project:NAME|worker:ROLE")]
    pub scope: Option<String>,
    /// With --learn --scope fleet: the rules expire after AGE (`30m`, `12h`, `7d`).
    #[arg(long, value_name = "AGE", requires = "learn")]
    pub expires: Option<String>,
    /// approve only: allow HOST:PORT (globs `*.example.org:443`) through the egress proxy for
    /// this client's command; repeatable. A host request approved without it allows the hosts
    /// it names.
    ///
    /// A host named by name reaches PUBLIC addresses only, even when it resolves (or later
    /// rebinds) to a private or loopback one; name a class to allow one: `--host
    /// svc.internal:8080+loopback` (classes: private, loopback, link-local, cgnat, ...). A host
    /// named by IP address reaches that address.
    #[arg(long = "host", value_name = "HOST:PORT[+CLASS]")]
    pub hosts: Vec<String>,
    /// approve only: let each name of the host request (or of --host) also reach the non-public
    /// address classes the request SHOWED it resolving to (private, loopback, link-local, ...;
    /// see `brainloop show ID`), and no other class. Without it an approved name reaches public
    /// addresses only.
    #[arg(long)]
    pub allow_private_hosts: bool,
    /// approve only: also remember the hosts (those of the request, or --host) for EVERY command
    /// of the validation's client: a NETWORK grant each, listed by `brainloop grants`, revoked
    /// with `brainloop revoke CLIENT NETWORK HOST:PORT`. Named hosts still reach public
    /// addresses only unless --allow-private-hosts (or a +CLASS) widened them.
    #[arg(long)]
    pub always_host: bool,
}

/// `deny ID`: only what a denial takes (`--help` lists no approve-only option).
#[derive(clap::Args, Debug)]
pub struct DenyArgs {
    /// The validation id (from `brainloop validations`, or the job's result).
    pub id: String,
    /// Also set the command's override to never.
    #[arg(long)]
    pub always: bool,
    /// Why (kept with the decision).
    #[arg(long)]
    pub reason: Option<String>,
    /// With --always and a fleet registry: where the command's `never` applies —
    /// `worker:ROLE` (default: the worker that asked), `project:NAME` or `fleet`.
    #[arg(
        long,
        value_name = "fleet|project:NAME|worker:ROLE",
        requires = "always"
    )]
    pub scope: Option<String>,
}

impl From<DenyArgs> for DecideArgs {
    fn from(d: DenyArgs) -> DecideArgs {
        DecideArgs {
            id: d.id,
            always: d.always,
            reason: d.reason,
            scope: d.scope,
            ..DecideArgs::default()
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CommandsArgs {
    #[arg(long)]
    pub json: bool,
    /// Show one command's policy history (hash or unique prefix).
    #[arg(long, value_name = "HASH")]
    pub history: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct OverrideArgs {
    /// Command hash (or a unique prefix), from `brainloop commands` or `brainloop check`; or a
    /// signature id from `brainloop signatures` (`sig:N`, or `N` when no command hash matches).
    pub hash: String,
    /// always_allow, always_ask, never, or clear.
    pub value: String,
    #[arg(long, conflicts_with = "scope")]
    pub reason: Option<String>,
    /// With a fleet registry: set the override of the signature whose exact text is given
    /// (not a hash: a command's hash is per workdir) in the registry for `fleet`,
    /// `project:NAME` or `worker:ROLE` (`brainloop rules add override`).
    #[arg(long)]
    pub scope: Option<String>,
    /// With --scope: the client it is for (`*`: every client).
    #[arg(long, requires = "scope", default_value = "*")]
    pub client: String,
    /// With --scope: expires after this long (e.g. 7d).
    #[arg(long, requires = "scope")]
    pub expires: Option<String>,
}

fn open(config: &Config, kind: DbKind) -> Result<rusqlite::Connection> {
    if !kind.path(&config.data_dir).exists() {
        bail!(
            "{} does not exist: run `brainloop init` first",
            kind.path(&config.data_dir).display()
        );
    }
    db::open(&config.data_dir, kind)
}

pub fn validations(config: &Config, a: &ValidationsArgs) -> Result<i32> {
    if let Some(reg) = &config.registry {
        return fleet_validations(reg, a);
    }
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let list = validations::list(&out, !a.all)?;
    if a.json {
        // Each with who decided it (`decided_by`; a reviewer's starts with `reviewer:`, and
        // `decided_by_reviewer` says so).
        let sec = db::open_read_only(&config.data_dir, DbKind::Security).ok();
        let mut rows = Vec::new();
        for v in &list {
            let mut row = serde_json::to_value(v)?;
            let d = match &sec {
                Some(c) => validations::first_decision(c, &v.id)?,
                None => None,
            };
            row["decided_by"] = serde_json::json!(d.as_ref().map(|d| &d.decided_by));
            row["decided_by_reviewer"] = serde_json::json!(d
                .as_ref()
                .is_some_and(|d| crate::ask::By::of(&d.decided_by) == crate::ask::By::Reviewer));
            rows.push(row);
        }
        println!("{}", crate::shown::json(&rows)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!("no {}validations", if a.all { "" } else { "pending " });
    }
    let now = crate::time::now_ms();
    let sec = db::open_read_only(&config.data_dir, DbKind::Security).ok();
    let meta = db::open_read_only(&config.data_dir, DbKind::Metadata).ok();
    if let (Some(sec), Some(r)) = (&sec, &config.reviewer) {
        print_denial_streaks(sec, &out, r.escalate_after_denials)?;
    }
    for v in list {
        println!(
            "{}  job {}  client {}  [{}]",
            v.id,
            v.job_id,
            shown::line(&v.client_id),
            v.status
        );
        print_marks(sec.as_ref(), meta.as_ref(), &v, "  ");
        print_request(&v, now);
        if v.status == "pending" {
            if let Some(m) = bound_change_set(config, &v) {
                println!("  --- changes ({})", shown::line(&m.change_set.summary()));
                print!(
                    "{}",
                    changes::shown_diff_lines(&m.change_set, "    ", LISTED_DIFF_LINES, &v.id)
                );
            }
            println!(
                "  → brainloop approve {} [--always]   |   brainloop deny {} [--always]",
                v.id, v.id
            );
        }
    }
    Ok(0)
}

/// How many lines of a waiting change set's diff `validations` and `enqueue --wait` print.
pub(crate) const LISTED_DIFF_LINES: usize = 60;

/// The change set validation `v` is bound to (its manifest on disk, whose effect hash is the
/// validation's), whatever action staged it.
pub(crate) fn bound_change_set(
    config: &Config,
    v: &validations::Validation,
) -> Option<changes::Manifest> {
    changes::load_manifest(&config.data_dir, v.job_id)
        .ok()
        .flatten()
        .filter(|m| v.command_hash.as_deref() == Some(m.effect_hash.as_str()))
}

/// The clients whose reviewer denied `every` or more of their validations in a row (the human
/// was told: `[reviewer] escalate_after_denials`, `hooks::denial_streak`).
/// A validation's command, policy line and reasons, as `validations` lists them (local or from
/// the registry); agent text through `shown`.
fn print_request(v: &crate::ask::validations::Validation, now: i64) {
    println!(
        "  command:  {}",
        shown::block(v.command.as_deref().unwrap_or("")).replace('\n', "\n            ")
    );
    println!(
        "  policy {}   risk {:.2}   set {}   {}",
        shown::line(v.policy.as_deref().unwrap_or("?")),
        v.risk_score.unwrap_or(0.0),
        shown::line(v.permission_set.as_deref().unwrap_or("?")),
        v.expires_at
            .filter(|_| v.status == "pending")
            .map(|t| format!("expires in {} min", (t - now).max(0) / 60_000))
            .unwrap_or_default()
    );
    let reasons: Vec<String> = v
        .reasons
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    for r in reasons {
        println!("  - {}", shown::item(&r, "    "));
    }
}

fn print_denial_streaks(
    sec: &rusqlite::Connection,
    out: &rusqlite::Connection,
    every: u32,
) -> Result<()> {
    for s in crate::hooks::escalated(sec, out, every)? {
        println!(
            "REVIEWER denied the last {} validations of client {} in a row (escalate_after_denials = {every}): {}",
            s.denials(),
            shown::line(&s.client),
            s.denied
                .iter()
                .map(|(v, _)| v.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

pub fn decide(config: &Config, a: &DecideArgs, approve: bool) -> Result<i32> {
    if let Some(reg) = &config.registry {
        return fleet_decide(reg, a, approve);
    }
    if a.scope.is_some() && !a.learn {
        bail!("--scope goes with --learn, or with --always on a fleet registry");
    }
    if a.scope.as_deref().is_some_and(|s| s != "worker") || a.expires.is_some() {
        bail!("--scope fleet and --expires need a fleet registry ([registry] url): without one, --learn teaches this worker");
    }
    if !approve && (!a.hosts.is_empty() || a.allow_private_hosts || a.always_host) {
        bail!("--host, --allow-private-hosts and --always-host go with approve (deny refuses the request as a whole)");
    }
    // The host request as it stood before the decision.
    let request = crate::egress::store::request(&open(config, DbKind::Security)?, &a.id)?;
    // Asked before the command ran (the hosts it names, issue 36), or after a run was refused.
    let up_front = match &request {
        Some(r) if approve => validations::get(
            &db::open_read_only(&config.data_dir, DbKind::Output)?,
            &a.id,
        )?
        .is_some_and(|v| v.command_hash.as_deref() == Some(r.command_hash.as_str())),
        _ => false,
    };
    let (hosts, left_out) = match (&request, a.hosts.is_empty() && up_front) {
        (Some(r), true) => up_front_rules(r, a.allow_private_hosts)?,
        _ => (
            host_rules(&a.hosts, request.as_ref(), a.allow_private_hosts)?,
            Vec::new(),
        ),
    };
    if a.always_host && hosts.is_empty() {
        if !left_out.is_empty() {
            bail!(
                "--always-host: the hosts shown are NOT PUBLIC ({}), nothing decided; add --allow-private-hosts to remember them",
                shown::line(&left_out.join(", "))
            );
        }
        bail!(
            "--always-host: validation {} names no host (see `brainloop show {}`), nothing decided; name one with --host HOST:PORT",
            a.id,
            a.id
        );
    }
    if approve && !hosts.is_empty() {
        // The hosts are written before the decision: the worker runs the command as soon as it
        // reads the decision, and must find them then (issue 36).
        let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
        let v = match validations::get(&out, &a.id)? {
            Some(v) if v.status == "pending" => v,
            Some(v) => bail!("validation {} is already {}", a.id, v.status),
            None => bail!("no validation {} (see `brainloop validations`)", a.id),
        };
        if a.learn {
            refuse_learning(config, &a.id, &open(config, DbKind::Security)?, &out)?;
        }
        let mut sec = open(config, DbKind::Security)?;
        validations::ensure_undecided(&sec, &v.id)?;
        approve_hosts(&mut sec, &v, request.as_ref(), &hosts)?;
        if a.always_host {
            remember_hosts(&mut sec, &v.client_id, &hosts)?;
        }
    }
    let (d, v, retired) = record_decision(
        config,
        &a.id,
        approve,
        a.always,
        a.learn,
        a.reason.as_deref(),
    )?;
    println!(
        "{} validation {} (job {}): {}",
        d.as_str(),
        v.id,
        v.job_id,
        shown::line(v.command.as_deref().unwrap_or(""))
    );
    if a.learn {
        let sigs = crate::bash::learn::signatures_of(&config.data_dir, v.job_id)?;
        println!(
            "and learn its signatures for client {}: {}",
            shown::line(&v.client_id),
            shown::line(&sigs.join(" | "))
        );
        for f in crate::bash::coverage::families_of(&sigs) {
            println!(
                "which teach the family \"{}\": {}",
                f.name,
                shown::line(&f.shows)
            );
        }
    }
    if approve && !left_out.is_empty() {
        println!(
            "not allowed (NOT PUBLIC, a plain approve allows public hosts only): {} — the run is refused them and asks again; `brainloop approve ID --allow-private-hosts` would have allowed them",
            shown::line(&left_out.join(", "))
        );
    }
    for line in retired {
        println!("{}", shown::line(&line));
    }
    println!(
        "the worker applies it within seconds (`brainloop result {}` for the outcome)",
        v.job_id
    );
    Ok(0)
}

/// `validations` with a fleet registry (issue 37): every worker's, from PostgreSQL.
fn fleet_validations(reg: &crate::registry::Settings, a: &ValidationsArgs) -> Result<i32> {
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    let list = validations::fleet_list(&mut c, !a.all)?;
    if a.json {
        let mut rows = Vec::new();
        for f in &list {
            let mut row = serde_json::to_value(f)?;
            let d = validations::fleet_last_decision(&mut c, &f.validation.id)?;
            row["decided_by"] = serde_json::json!(d.as_ref().map(|d| &d.row.decided_by));
            rows.push(row);
        }
        println!("{}", crate::shown::json(&rows)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!(
            "no {}validations in the registry {}",
            if a.all { "" } else { "pending " },
            reg.shown_url()
        );
    }
    let now = crate::time::now_ms();
    for f in list {
        let v = &f.validation;
        println!(
            "{}  worker {}  job {}  client {}  [{}]",
            shown::line(&v.id),
            shown::line(&f.worker),
            v.job_id,
            shown::line(&v.client_id),
            shown::line(&v.status)
        );
        print_request(v, now);
        if !f.signatures.is_empty() {
            println!(
                "  signatures (what --learn --scope fleet teaches every worker): {}",
                f.signatures
                    .iter()
                    .map(|t| format!("`{}`", shown::line(t)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if v.status == "pending" {
            println!(
                "  → brainloop approve {} [--always] [--learn [--scope fleet]]   |   brainloop deny {} [--always]",
                shown::line(&v.id),
                shown::line(&v.id)
            );
        }
    }
    Ok(0)
}

/// `approve` / `deny` with a fleet registry (issue 37): the decision is written in PostgreSQL
/// under the operator's role; the worker that asked takes it at once (LISTEN/NOTIFY) and
/// applies it with every check of a local decision.
fn fleet_decide(reg: &crate::registry::Settings, a: &DecideArgs, approve: bool) -> Result<i32> {
    if !a.hosts.is_empty() || a.allow_private_hosts || a.always_host {
        bail!("--host, --allow-private-hosts and --always-host are not available with a fleet registry yet: decide on the worker's machine without [registry], or approve without them");
    }
    let d = match (approve, a.always) {
        (true, false) => Decision::Approve,
        (true, true) => Decision::AlwaysAllow,
        (false, false) => Decision::Deny,
        (false, true) => Decision::Never,
    };
    if a.learn && d != Decision::Approve {
        bail!("--learn goes with `approve ID` alone (not with deny or --always)");
    }
    // With --always, --scope is where the command's override applies (default: the worker
    // that asked); with --learn, what learns.
    let override_scope = match (&a.scope, a.always) {
        (Some(s), true) => Some(crate::ask::learned::Scope::parse(s)?),
        (Some(_), false) if !a.learn => {
            bail!("--scope goes with --learn, or with --always (where the command's override applies)")
        }
        _ => None,
    };
    let learn = match (a.learn, a.scope.as_deref().unwrap_or("worker")) {
        (false, _) => None,
        (true, "worker") => {
            if a.expires.is_some() {
                bail!("--expires goes with --scope fleet (a worker's learning is revoked with `override sig:N clear` there)");
            }
            Some(validations::LearnScope::Worker)
        }
        (true, shared) => Some(validations::LearnScope::Shared {
            scope: crate::ask::learned::Scope::parse(shared)?,
            expires_at: match &a.expires {
                Some(age) => Some(
                    crate::time::now_ms()
                        + super::reviewer::parse_age(age)?
                            .as_millis()
                            .min(i64::MAX as u128) as i64,
                ),
                None => None,
            },
        }),
    };
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    let (f, taught, rule) = validations::fleet_decide_in(
        &mut c,
        &a.id,
        d,
        learn.clone(),
        override_scope.as_ref(),
        a.reason.as_deref(),
        &super::operator(),
    )?;
    println!(
        "{} validation {} (job {} on worker {}): {}",
        d.as_str(),
        shown::line(&f.validation.id),
        f.validation.job_id,
        shown::line(&f.worker),
        shown::line(f.validation.command.as_deref().unwrap_or(""))
    );
    if f.validation.status != "pending" {
        // A denial after the worker acted on a reviewer's approve (issue 49): recorded (a
        // human's denial, evidence against the command), but the run already happened.
        let applied = validations::fleet_applied_of(&mut c, f.validation.job_id, Some(&f.worker))?;
        let still = applied.iter().any(|x| x.undone_at.is_none());
        println!(
            "recorded, but worker {} already acted on a reviewer's approve of it{}: `brainloop undo {} --worker {}` takes the change set back",
            shown::line(&f.worker),
            if still { " and applied its change set" } else { "" },
            f.validation.job_id,
            shown::line(&f.worker)
        );
        return Ok(0);
    }
    if let Some(r) = &rule {
        println!(
            "and the command's override in the registry: {} (`brainloop rules revoke fleet:{}` takes it back)",
            shown::line(&super::rules::line(r, crate::time::now_ms())),
            r.id
        );
    }
    if !taught.is_empty() {
        let whom = match &learn {
            Some(validations::LearnScope::Shared {
                scope: crate::ask::learned::Scope::Project(p),
                ..
            }) => format!("every worker of project {}", shown::line(p)),
            Some(validations::LearnScope::Shared {
                scope: crate::ask::learned::Scope::Worker(w),
                ..
            }) => format!("worker {}", shown::line(w)),
            _ => "every worker of the fleet".to_string(),
        };
        println!(
            "and learn for client {} on {whom}: {} (each worker still refuses one it never learns, overridden or denied there; `brainloop signatures --revoke SIG` stops it everywhere)",
            shown::line(&f.validation.client_id),
            taught
                .iter()
                .map(|t| format!("`{}`", shown::line(t)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else if a.learn {
        // The change set lives on the worker: it checks the gate (`bash::learn`, the same
        // refusals as on one machine) and learns for the job's client there.
        println!(
            "and learn its signatures for client {} on worker {} (the worker checks that they may be learned; a refusal runs it once and learns nothing, see its log and `brainloop signatures` there)",
            shown::line(&f.validation.client_id),
            shown::line(&f.worker)
        );
    }
    println!(
        "worker {} takes it from the registry at once (`brainloop validations --all` shows when it did)",
        shown::line(&f.worker)
    );
    Ok(0)
}

/// What a human's denial of `v` retires: the job's signatures learned for its client (the worker
/// records the retirement when it applies the denial, `signatures::count_decision`).
pub(crate) fn retiring(config: &Config, v: &validations::Validation) -> Result<Vec<String>> {
    let sec = open(config, DbKind::Security)?;
    let learned =
        signatures::learned_in_job(&sec, v.job_id, &v.client_id, config.signature_approvals)?;
    Ok(learned
        .into_iter()
        .map(|(id, sig)| {
            format!(
                "retired signature sig:{id} `{sig}` for client {}: a human denied it, its commands ask again (`brainloop override sig:{id} clear` forgets the denial, then `approve --learn` teaches it again)",
                v.client_id
            )
        })
        .collect())
}

/// One operator decision (`approve` / `deny` and `review`): `--learn` is checked first and
/// refused, nothing decided, for what a learned signature could never apply (`bash::learn`).
pub(crate) fn record_decision(
    config: &Config,
    id: &str,
    approve: bool,
    always: bool,
    learn: bool,
    reason: Option<&str>,
) -> Result<(Decision, validations::Validation, Vec<String>)> {
    let d = match (approve, always) {
        (true, false) => Decision::Approve,
        (true, true) => Decision::AlwaysAllow,
        (false, false) => Decision::Deny,
        (false, true) => Decision::Never,
    };
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let mut sec = open(config, DbKind::Security)?;
    if learn {
        if d != Decision::Approve {
            bail!("--learn goes with `approve ID` alone (not with deny or --always)");
        }
        refuse_learning(config, id, &sec, &out)?;
    }
    // What the denial retires, read before the worker applies it (then they are no longer learned).
    let retired = match validations::get(&out, id)? {
        Some(v) if !approve && v.status == "pending" => retiring(config, &v)?,
        _ => Vec::new(),
    };
    let v = validations::decide(&mut sec, &out, id, d, learn, reason, &super::operator())?;
    Ok((d, v, retired))
}

/// `--learn` is for a change set a learned signature could apply (`bash::learn`).
fn refuse_learning(
    config: &Config,
    id: &str,
    sec: &rusqlite::Connection,
    out: &rusqlite::Connection,
) -> Result<()> {
    let Some(v) = validations::get(out, id)? else {
        bail!("no validation {id} (see `brainloop validations`)");
    };
    let protected = crate::bash::protected::Table::shared(&config.path_lists())?;
    let why = crate::bash::learn::refusals(sec, &config.data_dir, &v, &protected)?;
    if !why.is_empty() {
        bail!(
            "--learn refused for validation {}, nothing decided (approve it without --learn to run it once):\n  - {}",
            v.id,
            why.join("\n  - ")
        );
    }
    Ok(())
}

/// The host rules an approval allows: `--host` values, or the hosts of the request; with
/// `allow_private`, each name also reaches the non-public classes the request showed for it
/// (checked before anything is decided). Rule texts.
fn host_rules(
    given: &[String],
    request: Option<&crate::egress::store::Request>,
    allow_private: bool,
) -> Result<Vec<String>> {
    use crate::egress::rules::HostRule;
    let texts: Vec<String> = match (request, given.is_empty()) {
        (Some(r), true) => r.hosts.clone(),
        _ => given.to_vec(),
    };
    let mut rules = texts
        .iter()
        .map(|h| HostRule::parse(h, "approved"))
        .collect::<Result<Vec<HostRule>, String>>()
        .map_err(|e| anyhow::anyhow!(e))?;
    if allow_private {
        let shown = request.map(|r| r.resolved.as_slice()).unwrap_or_default();
        let mut widened = 0;
        for r in rules
            .iter_mut()
            .filter(|r| r.explicit() && r.literal().is_none())
        {
            let found = shown
                .iter()
                .find(|s| HostRule::parse(&s.host, "shown").is_ok_and(|s| s.text() == r.text()));
            let classes = found.map(|s| s.non_public()).unwrap_or_default();
            if !classes.is_empty() {
                r.classes.extend(classes);
                r.classes.sort();
                r.classes.dedup();
                widened += 1;
            }
        }
        if widened == 0 {
            bail!(
                "--allow-private-hosts: the request showed no host name resolving to a non-public address (see `brainloop show ID`), nothing decided; a host named by IP address needs no flag, and a class can be named per host: --host NAME:PORT+loopback"
            );
        }
    }
    Ok(rules.iter().map(HostRule::text).collect())
}

/// The host rules a plain approve of a FIRST prompt allows (issue 36: the hosts the command
/// names, asked before it runs): the hosts shown public (or not resolved: a name reaches public
/// addresses only); a host shown at a non-public address — a name or an address — only with
/// `allow_private` (a name then reaches the classes shown for it, an address itself). Returns
/// the rule texts and the hosts left out.
fn up_front_rules(
    request: &crate::egress::store::Request,
    allow_private: bool,
) -> Result<(Vec<String>, Vec<String>)> {
    use crate::egress::rules::HostRule;
    let (mut rules, mut left_out, mut widened) = (Vec::new(), Vec::new(), 0);
    for h in &request.hosts {
        let mut rule = HostRule::parse(h, "approved").map_err(|e| anyhow::anyhow!(e))?;
        let classes = request
            .resolved
            .iter()
            .find(|s| HostRule::parse(&s.host, "shown").is_ok_and(|s| s.text() == rule.text()))
            .map(|s| s.non_public())
            .unwrap_or_default();
        if classes.is_empty() {
            rules.push(rule.text());
        } else if allow_private {
            if rule.literal().is_none() {
                rule.classes.extend(classes);
                rule.classes.sort();
                rule.classes.dedup();
            }
            widened += 1;
            rules.push(rule.text());
        } else {
            left_out.push(rule.text());
        }
    }
    if allow_private && widened == 0 {
        bail!(
            "--allow-private-hosts: the prompt showed no host at a non-public address (see `brainloop show ID`), nothing decided"
        );
    }
    Ok((rules, left_out))
}

/// Records the host rules a human allows with an approval ([`host_rules`]) for the client's
/// command (its hash: the request's, or an up-front validation's).
fn approve_hosts(
    sec: &mut rusqlite::Connection,
    v: &validations::Validation,
    request: Option<&crate::egress::store::Request>,
    hosts: &[String],
) -> Result<()> {
    if hosts.is_empty() {
        return Ok(());
    }
    let hash = match request {
        Some(r) => r.command_hash.clone(),
        None => v.command_hash.clone().unwrap_or_default(),
    };
    crate::egress::store::approve_hosts(
        sec,
        &v.client_id,
        &hash,
        hosts,
        &v.id,
        &super::operator(),
    )?;
    println!(
        "allowed for client {}'s command through the egress proxy: {}",
        shown::line(&v.client_id),
        shown::line(&hosts.join(", "))
    );
    Ok(())
}

/// `approve --always-host`: the hosts become NETWORK grants of the client (every command of
/// it, direct runs), shown by `grants` and revoked like any grant (issue 36).
fn remember_hosts(sec: &mut rusqlite::Connection, client: &str, hosts: &[String]) -> Result<()> {
    use crate::clients::{store, Permission};
    for h in hosts {
        store::grant(
            sec,
            client,
            Permission::Network,
            h,
            false,
            &super::operator(),
        )?;
        // The client id is a producer's: the whole line is escaped.
        let (c, w) = (
            crate::egress::shell_word(client),
            crate::egress::shell_word(h),
        );
        println!(
            "{}",
            shown::line(&format!(
                "remembered for client {client}: NETWORK {h} (`brainloop grants {c}` lists it; `brainloop revoke {c} NETWORK {w}` forgets it)"
            ))
        );
    }
    Ok(())
}

pub fn commands(config: &Config, a: &CommandsArgs) -> Result<i32> {
    let sec = open(config, DbKind::Security)?;
    if let Some(h) = &a.history {
        let hash = registry::resolve_prefix(&sec, h)?;
        let hist = registry::history_of(&sec, &hash)?;
        if a.json {
            let v: Vec<_> = hist
                .iter()
                .map(|(t, o, n, r)| serde_json::json!({"changed_at": t, "old_policy": o, "new_policy": n, "reason": r}))
                .collect();
            println!("{}", crate::shown::json(&v)?);
        } else {
            for (t, o, n, r) in hist {
                let r = shown::line(&r);
                println!("{t}  {} → {n}  {r}", o.unwrap_or_else(|| "-".into()));
            }
        }
        return Ok(0);
    }
    let list = registry::list(&sec)?;
    if a.json {
        println!("{}", crate::shown::json(&list)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!("no commands yet");
    }
    println!(
        "{:<12} {:<12} {:<13} {:>5} {:>6} {:>5}  command",
        "hash", "policy", "override", "runs", "ok%", "risk"
    );
    for e in list {
        let rate = if e.execution_count > 0 {
            e.success_count as f64 * 100.0 / e.execution_count as f64
        } else {
            0.0
        };
        println!(
            "{:<12} {:<12} {:<13} {:>5} {:>5.0}% {:>5.2}  {}",
            &e.command_hash[..12.min(e.command_hash.len())],
            e.current_policy.as_str(),
            e.user_override.map(|o| o.as_str()).unwrap_or("-"),
            e.execution_count,
            rate,
            e.risk_score,
            shown::line(&e.command_text.replace('\n', " "))
        );
    }
    let promoted = crate::bash::evidence::promotions(&sec)?;
    if !promoted.is_empty() {
        println!(
            "\npromoted (learned from human approvals, per client, in the confinement approved):"
        );
        for p in promoted {
            println!(
                "{:<12} client {:<16} {:<8} set {:<12} {}",
                &p.command_hash[..12.min(p.command_hash.len())],
                shown::line(&p.client_id),
                p.mode.as_str(),
                p.permission_set,
                shown::line(&p.reason)
            );
        }
    }
    Ok(0)
}

pub fn set_override(config: &Config, a: &OverrideArgs) -> Result<i32> {
    if let Some(scope) = &a.scope {
        return super::rules::override_in_registry(
            config,
            &a.hash,
            &a.value,
            &a.client,
            scope,
            a.expires.as_deref(),
        );
    }
    let ov = match a.value.as_str() {
        "clear" => None,
        v => Some(Override::parse(v).ok_or_else(|| {
            anyhow::anyhow!("override must be always_allow, always_ask, never or clear (got {v:?})")
        })?),
    };
    let mut sec = open(config, DbKind::Security)?;
    let as_hash = if a.hash.starts_with("sig:") {
        Err(anyhow::anyhow!(
            "{} is not a signature id (`sig:N` from `brainloop signatures`)",
            a.hash
        ))
    } else {
        registry::resolve_prefix(&sec, &a.hash)
    };
    let hash = match (as_hash, signatures::resolve(&sec, &a.hash)?) {
        (Ok(h), _) => h,
        (Err(_), Some(id)) => {
            let reason = a
                .reason
                .clone()
                .unwrap_or_else(|| format!("set by {}", super::operator()));
            let (sig, forgotten) = signatures::set_override(&mut sec, id, ov, &reason)?;
            if ov.is_none() {
                crate::bash::explain::forget(&mut sec, &sig)?;
            }
            let sig = shown::line(&sig);
            println!(
                "signature {id} `{sig}`: override {}{}",
                ov.map(|o| o.as_str()).unwrap_or("cleared"),
                if ov.is_none() {
                    format!("; learning forgotten for {forgotten} client(s)")
                } else {
                    String::new()
                }
            );
            return Ok(0);
        }
        (Err(e), None) => return Err(e),
    };
    let reason = a
        .reason
        .clone()
        .unwrap_or_else(|| format!("set by {}", super::operator()));
    registry::set_override(&mut sec, &hash, ov, &reason, crate::time::now_ms())?;
    println!(
        "{hash}: override {}",
        ov.map(|o| o.as_str()).unwrap_or("cleared")
    );
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// A validation id, or a job id (a schedule's firing has a negative one: `show -3`).
    #[arg(allow_negative_numbers = true)]
    pub id: String,
    /// With a fleet registry: the worker whose job id this is (when several have one).
    #[arg(long, value_name = "NAME")]
    pub worker: Option<String>,
    /// Print the model's reasoning the job's result kept apart from its answer (LLM actions,
    /// each turn of a loop session).
    #[arg(long)]
    pub reasoning: bool,
    /// The whole story as one JSON object (the action, client, params, status and timings, the
    /// result and output, the validation and who decided, the change set and its diff).
    #[arg(long, conflicts_with = "reasoning")]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct UndoArgs {
    /// The job whose applied change set to undo (a schedule's firing: negative).
    #[arg(allow_negative_numbers = true)]
    pub job: i64,
    /// With a fleet registry: the worker that applied it (when several have that job id).
    #[arg(long, value_name = "NAME")]
    pub worker: Option<String>,
    /// With a fleet registry: how long to wait for the worker's outcome (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub wait: u64,
}

#[derive(clap::Args, Debug)]
pub struct SignaturesArgs {
    #[arg(long)]
    pub json: bool,
    /// Explain a signature (`sig:N`, its id, or its exact text; without one: every learned,
    /// retired or suspended signature): what it matches in words, who taught it and when, the
    /// approved examples it was learned from (re-signed now: one that no longer signs the same
    /// suspends it), and variants of an example it matches and refuses, with the rules' reasons.
    #[arg(long, value_name = "SIG", num_args = 0..=1, default_missing_value = "")]
    pub explain: Option<String>,
    /// With --explain and no SIG: every signature, not only the learned ones.
    #[arg(long)]
    pub all: bool,
    /// With a fleet registry, the operator's role: revoke a fleet rule (`fleet:N`) or every
    /// active fleet rule of a signature (its exact text); every worker stops using it within
    /// a second (at once for a job started after it has it).
    #[arg(long, value_name = "fleet:N|SIGNATURE", conflicts_with = "explain")]
    pub revoke: Option<String>,
    /// With a fleet registry: only the registry's learned rules (revoked and expired ones
    /// too), with their scope and provenance.
    #[arg(long, conflicts_with = "explain")]
    pub fleet: bool,
}

/// `brainloop show ID`: a validation (or job) with its change set's diff and the command's output
/// while it waits; once applied (asked or not), the diff as applied, who or what decided and
/// when (local time), kept until retention (`bash::journal`). An id that names no validation
/// and no job is an error (exit 1). With a fleet registry: `cli::fleet::show`, from the registry.
pub fn show(config: &Config, a: &ShowArgs) -> Result<i32> {
    if a.reasoning {
        return super::llm::show_reasoning(config, &a.id);
    }
    if let Some(reg) = &config.registry {
        return super::fleet::show(reg, a);
    }
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let (job_id, v) = match validations::get(&out, &a.id)? {
        Some(v) => (v.job_id, Some(v)),
        None => match a.id.parse::<i64>() {
            Ok(j) => (j, validations::latest_of_job(&out, j)?),
            Err(_) => bail!(
                "no validation {} (a validation id or a job id: see `brainloop validations --all` or `brainloop history`)",
                shown::line(&a.id)
            ),
        },
    };
    let sec = open(config, DbKind::Security)?;
    let applied = journal::of_job(&sec, job_id)?;
    let manifest = changes::load_manifest(&config.data_dir, job_id)?;
    let status = job_status(config, &out, job_id)?;
    if v.is_none() && applied.is_none() && manifest.is_none() && status.is_none() {
        bail!(
            "no job {job_id} and no validation {} (see `brainloop history` or `brainloop validations --all`)",
            shown::line(&a.id)
        );
    }
    let now = crate::time::now_ms();
    let told = Told::read(config, &out, job_id)?;
    if a.json {
        let story = story(&told, v.as_ref(), &sec, applied.as_ref(), manifest.as_ref())?;
        println!("{}", shown::json(&story)?);
        return Ok(0);
    }
    match &status {
        Some(s) => println!("job {job_id}  {}", shown::line(s)),
        None => println!("job {job_id}"),
    }
    told.print_head(now, v.is_none() && applied.is_none());
    if let Some(v) = &v {
        println!(
            "validation {} [{}]  policy {}  risk {:.2}",
            v.id,
            v.status,
            v.policy.as_deref().unwrap_or("?"),
            v.risk_score.unwrap_or(0.0)
        );
        let decided = match v.decided_at {
            Some(t) => format!(", {} {}", v.status, crate::time::local_ago(t, now)),
            None => String::new(),
        };
        println!(
            "requested {}{decided}",
            crate::time::local_ago(v.requested_at, now)
        );
        println!(
            "command: {}",
            shown::block(v.command.as_deref().unwrap_or(""))
        );
        let meta = db::open_read_only(&config.data_dir, DbKind::Metadata).ok();
        print_marks(Some(&sec), meta.as_ref(), v, "");
        // Issue 38: which secrets the command would use, and for which hosts (never a value).
        let reasons: Vec<String> = v
            .reasons
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        for r in reasons
            .iter()
            .filter(|r| r.starts_with(crate::egress::secrets::REASON_PREFIX))
        {
            println!("{}", shown::line(r));
        }
    }
    print_egress(&sec, job_id, v.as_ref().map(|v| v.id.as_str()))?;
    // Whether the change set is in the workspace: the journal row says so, and keeps its diff
    // and who decided after the overlay (and its manifest) is swept.
    if let Some(j) = &applied {
        if v.is_none() {
            println!("command: {}", shown::block(&j.command));
        }
        let what = match j.state.as_str() {
            journal::state::APPLYING => "change set being applied, or cut off by a stop (start-up recovery completes or reports it)",
            journal::state::PARTIAL => "change set partly applied",
            _ => "change set applied",
        };
        println!(
            "{what} ({}) {}: {}",
            shown::line(&j.policy_used),
            crate::time::local_ago(j.applied_at, now),
            shown::line(&j.summary),
        );
        if let Some(by) = &j.decided_by {
            println!("applied on the decision of {}", shown::line(by));
        }
        if let Some(p) = &j.applied_paths {
            let paths: Vec<String> = serde_json::from_str(p).unwrap_or_default();
            println!(
                "paths that reached the workspace: {}",
                shown::line(&crate::quote::prefix(&paths.join(", "), 2000))
            );
        }
        match j.undone_at {
            Some(u) => println!("undone {}", crate::time::local_ago(u, now)),
            None => println!("undo: brainloop undo {job_id}"),
        }
    }
    let ran_at_once = match (&v, &applied, &manifest) {
        (None, None, None) => told.ran_at_once(),
        _ => None,
    };
    if let Some(line) = &ran_at_once {
        println!("{line}");
    }
    if manifest.is_none() {
        told.print_output();
    }
    // A job with nothing to apply (a read-only command that ran at once, another action's
    // answer) has no change set to speak of.
    let asked_or_staged = v.is_some() || applied.is_some() || manifest.is_some();
    if asked_or_staged || (ran_at_once.is_none() && told.action() == Some("execute_bash")) {
        print_change_set(config, manifest, applied.as_ref());
    }
    Ok(0)
}

/// `show`'s change set: the one waiting (staged by an action, or a command's overlay run with
/// its output) through the one previewer, else the diff as applied from the journal row.
fn print_change_set(
    config: &Config,
    manifest: Option<changes::Manifest>,
    applied: Option<&journal::Row>,
) {
    match manifest {
        Some(m) if m.action() != "execute_bash" => {
            println!(
                "change set staged by {} beneath {}: {}",
                shown::line(m.action()),
                m.workspace.display(),
                shown::line(&m.change_set.summary())
            );
            if !m.stdout.is_empty() {
                // The action's own account of its change (a SQL script's statements and rows
                // changed per table), written by the agent's model: escaped like the diff.
                println!("--- what it does\n{}", shown::block(&m.stdout));
            }
            println!("--- changes");
            print!("{}", changes::shown_diff(&m.change_set));
        }
        Some(m) => {
            println!(
                "ran on an overlay of {} (exit {}, {} ms): {}",
                m.workspace.display(),
                m.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "?".into()),
                m.duration_ms,
                shown::line(&m.change_set.summary())
            );
            if !m.signatures.is_empty() {
                println!("signatures: {}", shown::line(&m.signatures.join(" | ")));
            }
            println!("--- stdout\n{}", shown::block(&m.stdout));
            println!("--- stderr\n{}", shown::block(&m.stderr));
            println!("--- changes");
            print!("{}", changes::shown_diff(&m.change_set));
        }
        None => match applied {
            Some(j) => match &j.diff {
                Some(d) => {
                    println!("--- changes (as applied to {})", shown::line(&j.workspace));
                    print!("{}", shown::block(d));
                }
                None => println!(
                    "(the diff is no longer kept: the retention pass drops it {} days after the apply (`retention.results_days`), and an older brainloop did not keep it)",
                    config.retention.results_days
                ),
            },
            None => println!(
                "no change set waits or was applied (the command is asked up front, was denied or expired, or changed nothing)"
            ),
        },
    }
}

/// What `show` tells of a job beyond its validation and change set: its snapshot (action,
/// client, params, when it was submitted and claimed) and its result row (status, attempts,
/// timings, the result and error). Each part None when its database does not have it (the
/// lifecycle database is the worker's: an operator who cannot read it sees the rest).
struct Told {
    job_id: i64,
    snapshot: Option<crate::db::lifecycle::Claimed>,
    result: Option<crate::db::output::ShownResult>,
}

impl Told {
    fn read(config: &Config, out: &rusqlite::Connection, job_id: i64) -> Result<Told> {
        let snapshot = db::open_read_only(&config.data_dir, DbKind::Lifecycle)
            .ok()
            .and_then(|lc| {
                crate::db::lifecycle::snapshot_of(&lc, job_id)
                    .ok()
                    .flatten()
            });
        Ok(Told {
            job_id,
            snapshot,
            result: crate::db::output::result_of(out, job_id)?,
        })
    }

    fn action(&self) -> Option<&str> {
        self.snapshot
            .as_ref()
            .and_then(|s| s.action.as_deref())
            .or_else(|| self.result.as_ref().and_then(|r| r.action.as_deref()))
    }

    fn params(&self) -> Value {
        self.snapshot
            .as_ref()
            .and_then(|s| s.params.as_deref())
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or(Value::Null)
    }

    fn result_json(&self) -> Value {
        self.result
            .as_ref()
            .and_then(|r| r.result.as_deref())
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or(Value::Null)
    }

    /// Client, timings and (`with_params`: nothing else prints it) the params — the command of
    /// an `execute_bash` job.
    fn print_head(&self, now: i64, with_params: bool) {
        let client = self
            .snapshot
            .as_ref()
            .map(|s| s.client_id.clone())
            .or_else(|| self.result.as_ref().and_then(|r| r.client_id.clone()));
        let mut line = format!("client {}", shown::line(client.as_deref().unwrap_or("?")));
        if let Some(s) = &self.snapshot {
            if let Some(c) = s.created_at {
                line.push_str(&format!("  submitted {}", crate::time::local_ago(c, now)));
            }
            line.push_str(&format!(
                "  claimed {}",
                crate::time::local_ago(s.claimed_at, now)
            ));
        }
        if let Some(r) = &self.result {
            if let Some(t) = r.started_at {
                line.push_str(&format!("  started {}", crate::time::local_ago(t, now)));
            }
            if let Some(d) = r.duration_ms {
                line.push_str(&format!("  took {d} ms"));
            }
            line.push_str(&format!("  attempts {}", r.attempts));
        }
        println!("{line}");
        if !with_params {
            return;
        }
        let params = self.params();
        match (self.action(), params["command"].as_str()) {
            (Some("execute_bash"), Some(c)) => println!("command: {}", shown::block(c)),
            _ if !params.is_null() => {
                println!("params: {}", shown::line(&params.to_string()))
            }
            _ => {}
        }
    }

    /// How a command that ran at once (no validation, no change set) ran: its policy, the
    /// sandbox and its exit; None for another action or a command that did not run.
    fn ran_at_once(&self) -> Option<String> {
        let v = self.result_json();
        let policy = v["policy_used"].as_str()?;
        let mut line = format!("ran at once, asking no one: policy {policy}");
        if let Some(sandbox) = v["sandbox"].as_str() {
            line.push_str(&format!(", sandbox {sandbox}"));
        }
        if let Some(code) = v["exit_code"].as_i64() {
            line.push_str(&format!(", exit {code}"));
        }
        if v["timed_out"] == Value::Bool(true) {
            line.push_str(", timed out");
        }
        Some(shown::line(&line))
    }

    /// The job's output as its result stores it: a command's stdout and stderr, another
    /// action's result JSON; and its error.
    fn print_output(&self) {
        let Some(r) = &self.result else { return };
        let v = self.result_json();
        if !v.is_null() && r.status != "pending_validation" {
            if v.get("stdout").is_some() || v.get("stderr").is_some() {
                println!(
                    "--- stdout\n{}",
                    shown::block(v["stdout"].as_str().unwrap_or(""))
                );
                println!(
                    "--- stderr\n{}",
                    shown::block(v["stderr"].as_str().unwrap_or(""))
                );
            } else {
                let pretty = serde_json::to_string_pretty(&v).unwrap_or_default();
                println!("--- result\n{}", shown::block(&pretty));
            }
        }
        if let Some(e) = &r.error {
            println!("error: {}", shown::line(e));
        }
    }
}

/// `show --json`: the whole story of a job as one object.
fn story(
    t: &Told,
    v: Option<&validations::Validation>,
    sec: &rusqlite::Connection,
    applied: Option<&journal::Row>,
    manifest: Option<&changes::Manifest>,
) -> Result<Value> {
    let decisions = match v {
        Some(v) => validations::decisions_of(sec, &v.id)?
            .into_iter()
            .map(|d| {
                json!({"decision": d.decision.map(|x| x.as_str()), "decided_by": d.decided_by, "at": d.created_at, "reason": d.reason})
            })
            .collect(),
        None => Vec::new(),
    };
    let change_set = match (manifest, applied) {
        (Some(m), _) => json!({
            "state": match applied { Some(j) => j.state.as_str(), None => "waiting" },
            "action": m.action(),
            "root": m.workspace,
            "summary": m.change_set.summary(),
            "paths": m.change_set.paths_json(),
            "diff": m.change_set.diff(),
            "diff_truncated": m.change_set.diff_truncated,
            "policy_used": applied.map(|j| &j.policy_used),
            "decided_by": applied.and_then(|j| j.decided_by.as_ref()),
            "applied_at": applied.map(|j| j.applied_at),
            "undone_at": applied.and_then(|j| j.undone_at),
        }),
        (None, Some(j)) => json!({
            "state": if j.undone_at.is_some() { "undone" } else { j.state.as_str() },
            "root": j.workspace,
            "summary": j.summary,
            "diff": j.diff,
            "policy_used": j.policy_used,
            "decided_by": j.decided_by,
            "applied_at": j.applied_at,
            "undone_at": j.undone_at,
        }),
        (None, None) => Value::Null,
    };
    let r = t.result.as_ref();
    Ok(json!({
        "job_id": t.job_id,
        "action": t.action(),
        "client": t.snapshot.as_ref().map(|s| s.client_id.clone()).or_else(|| r.and_then(|r| r.client_id.clone())),
        "params": t.params(),
        "submitted_at": t.snapshot.as_ref().and_then(|s| s.created_at),
        "claimed_at": t.snapshot.as_ref().map(|s| s.claimed_at),
        "status": r.map(|r| r.status.as_str()),
        "attempts": r.map(|r| r.attempts),
        "started_at": r.and_then(|r| r.started_at),
        "finished_at": r.and_then(|r| r.finished_at),
        "duration_ms": r.and_then(|r| r.duration_ms),
        "result": t.result_json(),
        "error": r.and_then(|r| r.error.as_deref()),
        "validation": v,
        "decisions": decisions,
        "change_set": change_set,
    }))
}

/// The job's final status from its result row (`succeeded`, `pending_validation`, …) or
/// `queued or running` when input.db has it and no result does; None when neither knows it.
fn job_status(config: &Config, out: &rusqlite::Connection, job_id: i64) -> Result<Option<String>> {
    use rusqlite::OptionalExtension;
    let r: Option<(String, Option<String>, Option<i64>)> = out
        .query_row(
            "SELECT status, action, finished_at FROM results WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    if let Some((status, action, fin)) = r {
        let now = crate::time::now_ms();
        return Ok(Some(format!(
            "{}[{status}]{}",
            action.map(|a| format!("{a} ")).unwrap_or_default(),
            fin.map(|t| format!(" finished {}", crate::time::local_ago(t, now)))
                .unwrap_or_default()
        )));
    }
    // Producers own input.db; an operator who cannot read it still sees what output.db knows.
    let Ok(input) = db::open_read_only(&config.data_dir, DbKind::Input) else {
        return Ok(None);
    };
    let action: Option<String> = input
        .query_row("SELECT action FROM jobs WHERE id = ?1", [job_id], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(action.map(|a| format!("{a} [queued or running]")))
}

/// Who decided a validation (the reviewer's decisions marked as such) and what the reviewer
/// answered (`hooks::reviewer_marks`).
fn print_marks(
    sec: Option<&rusqlite::Connection>,
    meta: Option<&rusqlite::Connection>,
    v: &validations::Validation,
    indent: &str,
) {
    let Some(sec) = sec else { return };
    match crate::hooks::reviewer_marks(sec, meta, v) {
        Ok(lines) => lines
            .iter()
            .for_each(|l| println!("{indent}{}", shown::line(l))),
        Err(e) => println!(
            "{indent}(cannot read who decided: {})",
            shown::line(&format!("{e:#}"))
        ),
    }
}

/// What the job's runs reached or wanted through the egress proxy, and what it asks for.
fn print_egress(sec: &rusqlite::Connection, job_id: i64, validation: Option<&str>) -> Result<()> {
    if let Some(r) = validation
        .map(|v| crate::egress::store::request(sec, v))
        .transpose()?
        .flatten()
    {
        println!("wants hosts: {}", shown::line(&r.hosts.join(", ")));
        for h in &r.resolved {
            println!("  {}", shown::line(&h.line()));
        }
    }
    let conns = crate::egress::store::of_job(sec, job_id)?;
    if conns.is_empty() {
        return Ok(());
    }
    println!("--- network (egress proxy)");
    for c in conns {
        println!("{}", shown::line(&connection_line(&c)));
    }
    Ok(())
}

fn connection_line(c: &crate::egress::proxy::Connection) -> String {
    if c.protocol == crate::egress::proxy::CAP {
        return format!(
            "{:<8} {} ×{}: {}",
            c.outcome,
            c.host,
            c.attempts,
            c.reason.as_deref().unwrap_or_default()
        );
    }
    let mut line = format!("{:<8} {}:{} ({})", c.outcome, c.host, c.port, c.protocol);
    if c.attempts > 1 {
        // A per-host aggregate (past the run's one-by-one records).
        line.push_str(&format!(
            " ×{} over {:.1} s",
            c.attempts,
            (c.at_ms - c.first_ms).max(0) as f64 / 1000.0
        ));
    }
    if let Some(a) = &c.address {
        line.push_str(&format!(" → {a}"));
    }
    if let Some(r) = &c.rule {
        line.push_str(&format!(" rule {r}"));
    }
    if c.outcome == "allowed" {
        line.push_str(&format!(" ↑{} B ↓{} B", c.bytes_up, c.bytes_down));
    }
    if let Some(r) = &c.reason {
        line.push_str(&format!(": {r}"));
    }
    line
}

/// `brainloop undo JOB`: restores what an applied change set replaced.
pub fn undo(config: &Config, a: &UndoArgs) -> Result<i32> {
    if let Some(reg) = &config.registry {
        return super::fleet::undo(reg, a);
    }
    let restored = undo_job(config, a.job)?;
    println!("undid job {}: {} path(s) restored", a.job, restored.len());
    for p in restored {
        println!("  {}", shown::line(&p));
    }
    Ok(0)
}

/// Undoes a job's applied change set (`undo` and `review`); the paths restored.
pub(crate) fn undo_job(config: &Config, job: i64) -> Result<Vec<String>> {
    let mut sec = open(config, DbKind::Security)?;
    journal::undo(&mut sec, &config.data_dir, job)
}

/// `brainloop signatures`: learned and learning operation signatures.
pub fn signatures_list(config: &Config, a: &SignaturesArgs) -> Result<i32> {
    if let Some(key) = &a.explain {
        return super::explain::run(config, a, key);
    }
    if a.all {
        bail!("--all goes with --explain (the listing shows every signature already)");
    }
    if a.revoke.is_some() || a.fleet {
        let Some(reg) = &config.registry else {
            bail!("--revoke and --fleet work on a fleet registry ([registry] url); on one machine `brainloop override sig:N clear` forgets what was learned");
        };
        return fleet_signatures(reg, a);
    }
    let sec = open(config, DbKind::Security)?;
    let rows = signatures::list(&sec, config.signature_approvals)?;
    if a.json {
        println!("{}", crate::shown::json(&rows)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no signatures yet");
    }
    println!(
        "{:>4} {:>4} {:>4} {:>5} {:>5}  {:<28} signature",
        "id", "ok", "deny", "up", "auto", "state"
    );
    for r in rows {
        println!(
            "{:>4} {:>4} {:>4} {:>5} {:>5}  {:<28} {}",
            r.id,
            r.approvals,
            r.denials,
            r.upfront_approvals,
            r.auto_applied,
            shown::line(&r.state),
            shown::line(&r.signature)
        );
        for c in &r.clients {
            println!("{:>9}{}", "", shown::line(&client_learning(r.id, c)));
        }
    }
    // With a registry: the fleet's rules too (scope `fleet`; the lines above are this worker's).
    if let Some(reg) = &config.registry {
        match fleet_rules(reg, false) {
            Ok(rules) if rules.is_empty() => println!("no fleet rules in the registry"),
            Ok(rules) => {
                println!("fleet rules (registry {}):", reg.shown_url());
                for r in &rules {
                    println!("  {}", shown::line(&fleet_rule_line(r)));
                }
            }
            Err(e) => println!("fleet rules: the registry cannot be read: {e:#}"),
        }
        // And the fleet's evidence: the human approvals each signature has in the registry's
        // decision rows (`ask::evidence`), which teach it on every worker at the threshold.
        let counts = crate::registry::connect(reg).and_then(|mut c| {
            crate::registry::check_version(&mut c)?;
            crate::ask::evidence::list(&mut c)
        });
        match counts {
            Ok(n) if n.is_empty() => println!("no fleet evidence in the registry"),
            Ok(n) => {
                println!(
                    "fleet evidence (human decisions in the registry; {} approvals and no denial teach a signature here):",
                    config.signature_approvals
                );
                for x in &n {
                    println!(
                        "  `{}` for client {}: {} approval(s) from {} worker(s), {} denial(s)",
                        shown::line(&x.signature),
                        shown::line(&x.client_id),
                        x.approvals,
                        x.workers,
                        x.denials
                    );
                }
            }
            Err(e) => println!("fleet evidence: the registry cannot be read: {e:#}"),
        }
    }
    Ok(0)
}

fn fleet_rules(
    reg: &crate::registry::Settings,
    all: bool,
) -> Result<Vec<crate::ask::learned::LearnedRule>> {
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    crate::ask::learned::list(&mut c, all, crate::time::now_ms())
}

/// One fleet rule: id, scope (and its project or worker), kind, text, client, who taught it
/// from which validation, when, its expiry or revocation (`cli::rules::line`).
fn fleet_rule_line(r: &crate::ask::learned::LearnedRule) -> String {
    super::rules::line(r, crate::time::now_ms())
}

/// `signatures --fleet` / `--revoke` with a fleet registry.
fn fleet_signatures(reg: &crate::registry::Settings, a: &SignaturesArgs) -> Result<i32> {
    if let Some(key) = &a.revoke {
        let mut c = crate::registry::connect(reg)?;
        crate::registry::check_version(&mut c)?;
        let done =
            crate::ask::learned::revoke(&mut c, key, &super::operator(), crate::time::now_ms())?;
        if a.json {
            println!("{}", crate::shown::json(&done)?);
            return Ok(0);
        }
        for r in &done {
            println!(
                "revoked fleet:{} `{}` for client {}: every worker asks again for it within a second",
                r.id,
                shown::line(&r.rule),
                shown::line(&r.client_id)
            );
        }
        return Ok(0);
    }
    let rules = fleet_rules(reg, true)?;
    if a.json {
        println!("{}", crate::shown::json(&rules)?);
        return Ok(0);
    }
    if rules.is_empty() {
        println!("no fleet rules in the registry {}", reg.shown_url());
    }
    for r in &rules {
        println!("{}", shown::line(&fleet_rule_line(r)));
    }
    Ok(0)
}

/// One line of who learned a signature, when and from which job (or how far it got, or why it
/// was retired or suspended: `cli::explain::provenance`).
fn client_learning(id: i64, c: &signatures::ClientLearning) -> String {
    format!(
        "client {}: {}",
        c.client_id,
        super::explain::provenance(id, c)
    )
}

#[cfg(test)]
mod tests {
    use super::host_rules;
    use crate::egress::resolve::Resolved;
    use crate::egress::rules::AddrClass;
    use crate::egress::store::Request;

    fn request(resolved: Vec<Resolved>) -> Request {
        Request {
            validation_id: "v".into(),
            job_id: 1,
            client_id: "c".into(),
            command_hash: "h".into(),
            hosts: resolved.iter().map(|r| r.host.clone()).collect(),
            resolved,
        }
    }

    fn shown(host: &str, addrs: &[(&str, AddrClass)]) -> Resolved {
        Resolved {
            host: host.into(),
            addresses: addrs.iter().map(|(a, c)| (a.to_string(), *c)).collect(),
            error: None,
        }
    }

    /// The first prompt (issue 36): a plain approve allows the hosts shown public (and a name
    /// that did not resolve: it reaches public addresses only); a host shown at a non-public
    /// address, name or address, only with --allow-private-hosts.
    #[test]
    fn a_plain_approve_of_a_first_prompt_allows_its_public_hosts_only() {
        use super::up_front_rules;
        let mut r = request(vec![
            shown("pypi.org:443", &[("151.101.0.223", AddrClass::Public)]),
            shown("svc.test:80", &[("127.0.0.1", AddrClass::Loopback)]),
            shown("10.0.0.5:22", &[("10.0.0.5", AddrClass::Private)]),
            shown("gone.test:80", &[]),
        ]);
        r.resolved[3].error = Some("no address".into());
        let (rules, left) = up_front_rules(&r, false).unwrap();
        assert_eq!(rules, ["pypi.org:443", "gone.test:80"]);
        assert_eq!(left, ["svc.test:80", "10.0.0.5:22"]);
        let (rules, left) = up_front_rules(&r, true).unwrap();
        assert_eq!(
            rules,
            [
                "pypi.org:443",
                "svc.test:80+loopback",
                "10.0.0.5:22",
                "gone.test:80"
            ]
        );
        assert!(left.is_empty());
        let public = request(vec![shown(
            "pypi.org:443",
            &[("151.101.0.223", AddrClass::Public)],
        )]);
        assert!(up_front_rules(&public, true).is_err());
    }

    #[test]
    fn allow_private_hosts_adds_the_classes_shown_and_refuses_when_none_was_shown() {
        let r = request(vec![
            shown("svc.test:80", &[("127.0.0.1", AddrClass::Loopback)]),
            shown("pypi.org:443", &[("151.101.0.223", AddrClass::Public)]),
            shown("[::1]:81", &[("::1", AddrClass::Loopback)]),
        ]);
        assert_eq!(
            host_rules(&[], Some(&r), false).unwrap(),
            ["svc.test:80", "pypi.org:443", "[::1]:81"]
        );
        assert_eq!(
            host_rules(&[], Some(&r), true).unwrap(),
            ["svc.test:80+loopback", "pypi.org:443", "[::1]:81"]
        );
        // --host names one of them: the class shown for it.
        assert_eq!(
            host_rules(&["SVC.test:80".into()], Some(&r), true).unwrap(),
            ["svc.test:80+loopback"]
        );
        // Nothing non-public shown for a name: nothing to widen, refused.
        let public = request(vec![shown(
            "pypi.org:443",
            &[("151.101.0.223", AddrClass::Public)],
        )]);
        assert!(host_rules(&[], Some(&public), true).is_err());
        assert!(host_rules(&["svc.test:80".into()], None, true).is_err());
        // A class named per host needs no flag.
        assert_eq!(
            host_rules(&["svc.test:80+private".into()], None, false).unwrap(),
            ["svc.test:80+private"]
        );
    }
}
