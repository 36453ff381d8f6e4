//! Operator commands for clients (DESIGN §7): `grant`, `revoke`, `grants`, `requests`.
//! They write command_security.db directly — the operator's privilege; no agent-facing path
//! (a job, MCP, a sandboxed command) can reach these. With `--scope fleet|project:NAME|
//! worker:ROLE` (and `[registry]`), `grant` / `revoke` write the fleet registry instead
//! (`ask::learned`, the operator's role only); without `--scope` they stay on this machine.

use crate::ask::learned::{self, Scope};
use crate::clients::{self, store, Permission};
use crate::config::Config;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Result};
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct GrantArgs {
    /// The client id (as in jobs.client_id / `brainloop mcp --client`).
    pub client: String,
    /// FILE_READ, FILE_WRITE, SYSTEM_COMMAND, NETWORK, LLM or FORCE_EXECUTE.
    pub permission: String,
    /// Path glob (FILE_*; `{workspace}` expands), program name (SYSTEM_COMMAND), host or `*`.
    pub pattern: String,
    /// FILE_WRITE only: writes there need no human validation.
    #[arg(long)]
    pub auto: bool,
    /// Share it through the fleet registry ([registry]): fleet, project:NAME (the workers
    /// whose horos_name is NAME) or worker:ROLE. Without it: this machine only.
    #[arg(long)]
    pub scope: Option<String>,
    /// With --scope: expires after this long (e.g. 7d, 12h).
    #[arg(long, requires = "scope")]
    pub expires: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    pub client: String,
    pub permission: String,
    pub pattern: String,
    /// Revoke the grant shared through the fleet registry with this scope (`all`: every
    /// scope). Without it: this machine's grant.
    #[arg(long)]
    pub scope: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct GrantsArgs {
    /// Only this client (default: every client with a grant or a config entry, plus `local`).
    pub client: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct RequestsArgs {
    #[command(subcommand)]
    pub decide: Option<Decide>,
    /// Include decided requests.
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum Decide {
    /// Grant a pending request (adds the grant).
    Grant { id: i64 },
    /// Refuse a pending request.
    Refuse { id: i64 },
}

fn security(config: &Config) -> Result<rusqlite::Connection> {
    if !DbKind::Security.path(&config.data_dir).exists() {
        bail!(
            "{} does not exist: run `brainloop init` first",
            DbKind::Security.path(&config.data_dir).display()
        );
    }
    db::open(&config.data_dir, DbKind::Security)
}

/// The registry's connection for `--scope`, checked at the binary's schema version.
fn registry(config: &Config) -> Result<crate::registry::Client> {
    let Some(reg) = &config.registry else {
        bail!("--scope shares a grant through a fleet registry: set [registry] url = \"postgres://…\" (or BRAINLOOP_REGISTRY_URL) with the operator's role; without --scope the grant is this machine's");
    };
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    Ok(c)
}

/// One shared grant, as `grants` and the CLI's answers show it.
fn shared_line(g: &learned::SharedGrant, now: i64) -> String {
    let mut s = format!(
        "fleet-grant:{} [{}] {} {} {}{}: granted_by {} (role {}) at {}",
        g.id,
        g.scope_text(),
        g.client_id,
        g.permission,
        g.pattern,
        if g.auto { " (auto)" } else { "" },
        g.granted_by,
        g.db_role,
        crate::time::local(g.created_at)
    );
    match (g.revoked_at, g.expires_at) {
        (Some(at), _) => s.push_str(&format!(
            "; REVOKED by {} at {}",
            g.revoked_by.as_deref().unwrap_or("?"),
            crate::time::local(at)
        )),
        (None, Some(e)) if e <= now => {
            s.push_str(&format!("; expired at {}", crate::time::local(e)))
        }
        (None, Some(e)) => s.push_str(&format!("; expires at {}", crate::time::local(e))),
        (None, None) => {}
    }
    s
}

fn grant_shared(config: &Config, a: &GrantArgs, p: Permission, scope: &str) -> Result<i32> {
    let scope = Scope::parse(scope)?;
    let now = crate::time::now_ms();
    let expires_at = match &a.expires {
        Some(age) => Some(
            now + super::reviewer::parse_age(age)?
                .as_millis()
                .min(i64::MAX as u128) as i64,
        ),
        None => None,
    };
    let mut c = registry(config)?;
    let by = super::operator();
    let (g, new) = learned::grant(
        &mut c,
        &learned::NewGrant {
            client: &a.client,
            permission: p,
            pattern: &a.pattern,
            auto: a.auto,
            scope: &scope,
            by: &by,
            expires_at,
        },
        now,
    )?;
    println!(
        "{} {}; every worker of the scope applies it from the client's next job (within a second)",
        if new { "granted" } else { "already granted" },
        shown::line(&shared_line(&g, now))
    );
    if p == Permission::Secret {
        println!(
            "note: only the grant is shared: each worker of the scope uses the secret from its own configuration ([secrets.{}]); a worker without it ignores the grant",
            a.pattern
        );
    }
    Ok(0)
}

pub fn grant(config: &Config, a: &GrantArgs) -> Result<i32> {
    let p = Permission::parse(&a.permission)?;
    if let Some(scope) = &a.scope {
        return grant_shared(config, a, p, scope);
    }
    let mut c = security(config)?;
    store::grant(&mut c, &a.client, p, &a.pattern, a.auto, &super::operator())?;
    if p == Permission::Secret && !config.secrets.contains_key(&a.pattern) {
        eprintln!(
            "note: the configuration has no [secrets.{}] yet: the grant takes effect once it does (and the worker restarted)",
            a.pattern
        );
    }
    println!(
        "granted {} {} {}{} (effective from the client's next job)",
        shown::line(&a.client),
        p.as_str(),
        shown::line(&a.pattern),
        if a.auto { " (auto)" } else { "" }
    );
    Ok(0)
}

pub fn revoke(config: &Config, a: &RevokeArgs) -> Result<i32> {
    let p = Permission::parse(&a.permission)?;
    if let Some(scope) = &a.scope {
        let scope = match scope.as_str() {
            "all" => None,
            s => Some(Scope::parse(s)?),
        };
        let mut c = registry(config)?;
        let now = crate::time::now_ms();
        let done = learned::revoke_grant(
            &mut c,
            &a.client,
            p,
            &a.pattern,
            scope.as_ref(),
            &super::operator(),
            now,
        )?;
        if done.is_empty() {
            bail!(
                "no active grant {} {} {} in the registry{} (see `brainloop grants`)",
                a.client,
                p.as_str(),
                a.pattern,
                a.scope
                    .as_deref()
                    .filter(|s| *s != "all")
                    .map(|s| format!(" for --scope {s}"))
                    .unwrap_or_default()
            );
        }
        for g in &done {
            println!(
                "revoked {}: every worker of the scope stops applying it within a second",
                shown::line(&shared_line(g, now))
            );
        }
        return Ok(0);
    }
    let mut c = security(config)?;
    if store::revoke(&mut c, &a.client, p, &a.pattern)? {
        println!(
            "revoked {} {} {} (effective from the client's next job)",
            shown::line(&a.client),
            p.as_str(),
            shown::line(&a.pattern)
        );
        return Ok(0);
    }
    let (cfg, source) = clients::configured(&config.clients, &a.client);
    let from_config = clients::load(&config.clients, &config.workspace, &c, &a.client)?
        .grants
        .iter()
        .any(|g| {
            g.permission == p && g.pattern == a.pattern && g.source != clients::Source::Operator
        });
    if from_config {
        bail!(
            "{} {} {} comes from the {} ({:?} client); change it in the config file ([clients.{}]) and restart the worker",
            a.client,
            p.as_str(),
            a.pattern,
            if source == clients::Source::Config { "config file" } else { "built-in default" },
            if cfg == clients::ClientConfig::local_default() { "local" } else { "minimal" },
            a.client
        );
    }
    bail!(
        "{} has no operator grant {} {} on this machine (see `brainloop grants {}`){}",
        a.client,
        p.as_str(),
        a.pattern,
        a.client,
        if config.registry.is_some() {
            "; a grant shared through the registry is revoked with --scope SCOPE (or --scope all)"
        } else {
            ""
        }
    )
}

pub fn list(config: &Config, a: &GrantsArgs) -> Result<i32> {
    // With a registry: its grants this role may read (the operator's: all of them; a
    // worker's: its scopes'), beside this machine's (none when it has no data dir).
    let shared = match &config.registry {
        Some(_) => {
            let mut c = registry(config)?;
            let now = crate::time::now_ms();
            let mut g = learned::list_grants(&mut c, false, now)?;
            if let Some(cl) = &a.client {
                g.retain(|x| &x.client_id == cl);
            }
            Some((g, now))
        }
        None => None,
    };
    if let Some((g, now)) = &shared {
        if !DbKind::Security.path(&config.data_dir).exists() {
            if a.json {
                println!("{}", crate::shown::json(&json!({"registry": g}))?);
            } else {
                print_shared(g, *now);
            }
            return Ok(0);
        }
    }
    let c = security(config)?;
    let mut ids: Vec<String> = match &a.client {
        Some(cl) => vec![cl.clone()],
        None => {
            let mut v: Vec<String> = store::list_with_clients(&c, None)?
                .into_iter()
                .map(|(c, _)| c)
                .collect();
            v.extend(config.clients.keys().cloned());
            v.push("local".into());
            v
        }
    };
    ids.sort();
    ids.dedup();
    let mut out = Vec::new();
    for id in &ids {
        let g = clients::load(&config.clients, &config.workspace, &c, id)?;
        out.push(json!({"client": id, "grants": g.grants}));
    }
    if a.json {
        match &shared {
            Some((g, _)) => println!(
                "{}",
                crate::shown::json(&json!({"local": out, "registry": g}))?
            ),
            None => println!("{}", crate::shown::json(&out)?),
        }
        return Ok(0);
    }
    for entry in &out {
        println!("{}", shown::line(entry["client"].as_str().unwrap_or("")));
        for g in entry["grants"].as_array().into_iter().flatten() {
            println!(
                "  {:<15} {:<40} {}{}",
                g["permission"].as_str().unwrap_or(""),
                shown::line(g["pattern"].as_str().unwrap_or("")),
                g["source"].as_str().unwrap_or(""),
                if g["auto"] == json!(true) {
                    " auto"
                } else {
                    ""
                }
            );
        }
    }
    if a.client.is_none() {
        println!("(any other client gets the minimal default: FILE_READ {{workspace}}/**, SYSTEM_COMMAND echo)");
    }
    if let Some((g, now)) = &shared {
        print_shared(g, *now);
    }
    Ok(0)
}

fn print_shared(g: &[learned::SharedGrant], now: i64) {
    println!(
        "\nshared through the fleet registry (each worker of the scope, while its copy is fresh):"
    );
    if g.is_empty() {
        println!("  none");
    }
    for x in g {
        println!("  {}", shown::line(&shared_line(x, now)));
    }
}

pub fn requests(config: &Config, a: &RequestsArgs) -> Result<i32> {
    let mut c = security(config)?;
    if let Some(d) = &a.decide {
        let (id, grant_it) = match d {
            Decide::Grant { id } => (*id, true),
            Decide::Refuse { id } => (*id, false),
        };
        let r = store::decide(&mut c, id, grant_it, &super::operator())?;
        println!(
            "request {} {}: {} {} {}",
            r.id,
            r.status,
            shown::line(&r.client_id),
            r.permission,
            shown::line(&r.pattern)
        );
        return Ok(0);
    }
    let list = store::requests(&c, !a.all)?;
    if a.json {
        println!("{}", crate::shown::json(&list)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!(
            "no {}permission requests",
            if a.all { "" } else { "pending " }
        );
    }
    for r in list {
        println!(
            "#{:<4} {:<8} {:<16} {:<15} {:<30} {}",
            r.id,
            r.status,
            shown::line(&r.client_id),
            r.permission,
            shown::line(&r.pattern),
            shown::line(&r.justification.unwrap_or_default())
        );
    }
    Ok(0)
}
