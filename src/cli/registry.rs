//! `brainloop registry migrate|status|add-role` (issue 37): the fleet registry's schema and
//! roles (`crate::registry`), with the URL of `[registry] url` (or `BRAINLOOP_REGISTRY_URL`).
//! `migrate` and `add-role` need the database owner's URL; `status` works with any role.

use crate::config::Config;
use crate::registry::{self, Role};
use crate::shown;
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct RegistryArgs {
    #[command(subcommand)]
    pub command: RegistryCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum RegistryCommand {
    /// Apply the registry's migrations: tables, the roles brainloop_operator and
    /// brainloop_worker, their grants and row security (the database owner's URL).
    Migrate,
    /// The registry's schema version, the role this configuration connects as, and the
    /// validations waiting per worker.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Create a login role in the group of workers or operators (a worker's login name is its
    /// name in the registry). Password: BRAINLOOP_REGISTRY_PASSWORD if set (else none: peer,
    /// certificate or trust authentication).
    AddRole {
        /// worker or operator
        kind: String,
        /// The login role's name (letters, digits, '_' and '-').
        name: String,
    },
}

fn settings(config: &Config) -> Result<&registry::Settings> {
    match &config.registry {
        Some(r) => Ok(r),
        None => bail!("no registry configured: set [registry] url = \"postgres://…\" in the config (or BRAINLOOP_REGISTRY_URL)"),
    }
}

pub fn run(config: &Config, a: &RegistryArgs) -> Result<i32> {
    let s = settings(config)?;
    let mut c = registry::connect(s)?;
    match &a.command {
        RegistryCommand::Migrate => {
            let (before, after) = registry::migrate(&mut c)?;
            if before == after {
                println!(
                    "registry {}: at version {after}, nothing to do",
                    s.shown_url()
                );
            } else {
                println!(
                    "registry {}: migrated from version {before} to {after}",
                    s.shown_url()
                );
            }
            Ok(0)
        }
        RegistryCommand::AddRole { kind, name } => {
            let role = match kind.as_str() {
                "worker" => Role::Worker,
                "operator" => Role::Operator,
                "reviewer" => Role::Reviewer,
                other => bail!("add-role {other:?}: worker, operator or reviewer"),
            };
            let pw = std::env::var("BRAINLOOP_REGISTRY_PASSWORD").ok();
            registry::add_role(&mut c, name, role, pw.as_deref())?;
            println!("role {name} is a member of {}", role.group());
            Ok(0)
        }
        RegistryCommand::Status { json } => {
            let version = registry::version(&mut c)?;
            let transport = registry::transport(&mut c)?;
            let me: String = c.query_one("SELECT current_user::text", &[])?.get(0);
            let groups: Vec<String> = c
                .query(
                    "SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                     JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = current_user ORDER BY 1",
                    &[],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let pending = if version == registry::latest() {
                crate::ask::validations::fleet_list(&mut c, true).unwrap_or_default()
            } else {
                Vec::new()
            };
            let mut per_worker = std::collections::BTreeMap::<String, usize>::new();
            for v in &pending {
                *per_worker.entry(v.worker.clone()).or_default() += 1;
            }
            if *json {
                println!(
                    "{}",
                    shown::json(&serde_json::json!({
                        "url": s.shown_url(),
                        "version": version,
                        "latest": registry::latest(),
                        "role": me,
                        "transport": transport,
                        "groups": groups,
                        "pending_by_worker": per_worker,
                    }))?
                );
            } else {
                println!("registry {}", s.shown_url());
                println!(
                    "  schema version {version} (this binary: {}){}",
                    registry::latest(),
                    if version < registry::latest() {
                        " — run `brainloop registry migrate` with the owner's URL"
                    } else {
                        ""
                    }
                );
                println!(
                    "  connected as {} (member of: {})",
                    shown::line(&me),
                    if groups.is_empty() {
                        "nothing".to_string()
                    } else {
                        groups.join(", ")
                    }
                );
                println!("  connection: {transport}");
                for (w, n) in &per_worker {
                    println!("  worker {}: {n} validation(s) waiting", shown::line(w));
                }
            }
            Ok(if version == registry::latest() { 0 } else { 4 })
        }
    }
}
