//! Operator commands for clients (DESIGN §7): `grant`, `revoke`, `grants`, `requests`.
//! They write command_security.db directly — the operator's privilege; no agent-facing path
//! (a job, MCP, a sandboxed command) can reach these.

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
}

#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    pub client: String,
    pub permission: String,
    pub pattern: String,
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

pub fn grant(config: &Config, a: &GrantArgs) -> Result<i32> {
    let p = Permission::parse(&a.permission)?;
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
        "{} has no operator grant {} {} (see `brainloop grants {}`)",
        a.client,
        p.as_str(),
        a.pattern,
        a.client
    )
}

pub fn list(config: &Config, a: &GrantsArgs) -> Result<i32> {
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
        println!("{}", crate::shown::json(&out)?);
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
    Ok(0)
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
