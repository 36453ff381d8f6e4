//! `brainloop registry migrate|status|add-role|import|accept-restore` (issue 37, 50): the fleet registry's schema and
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
    /// The operator's role, after restoring the registry from a backup: every worker that
    /// noticed the restore (`status`: registry-restored) uses the registry's permissive rules
    /// again from its next pass. Check the restored rules first: what was revoked after the
    /// backup is in force again until revoked again.
    AcceptRestore,
    /// The operator's role, on a worker's machine (its data dir): copy that worker's local
    /// signature overrides and operator grants (the hosts `approve --always-host` remembered
    /// are NETWORK grants) into the registry, as rules and grants of scope worker:ROLE. The
    /// local ones stay; a second run adds nothing.
    Import {
        /// The worker's login role in the registry (its name there).
        #[arg(long)]
        worker: String,
        #[arg(long)]
        json: bool,
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
        RegistryCommand::Import { worker, json } => import(config, &mut c, worker, *json),
        RegistryCommand::AcceptRestore => {
            let epoch =
                crate::ask::epoch::accept(&mut c, &super::operator(), crate::time::now_ms())?;
            println!(
                "registry {}: new epoch {epoch} — the workers that noticed the restore use its rules again at their next pass (a rule revoked after the backup is in force again: revoke it again with `brainloop signatures --revoke` / `rules revoke`)",
                s.shown_url()
            );
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

/// What `registry import` did with one local item.
#[derive(serde::Serialize)]
struct Imported {
    /// `override`, `grant`.
    kind: &'static str,
    /// What it is (the signature and its value, or the grant).
    what: String,
    /// `added` (new in the registry), `present` (already there), `local` (not importable:
    /// why in `id`'s place).
    outcome: &'static str,
    /// The registry's `fleet:N` / `fleet-grant:N`, or why it stays local.
    id: String,
}

/// `registry import --worker ROLE`: this data dir's local overrides of signatures and operator
/// grants → the registry, scope worker:ROLE (idempotent: `add_once`, `grant`).
fn import(config: &Config, c: &mut registry::Client, worker: &str, json: bool) -> Result<i32> {
    use crate::ask::learned::{self, NewGrant, NewRule, Scope};
    use crate::db::{self, DbKind};
    registry::check_version(c)?;
    if !DbKind::Security.path(&config.data_dir).exists() {
        bail!(
            "{} does not exist: run `registry import` on the worker's machine, with its data dir (--data-dir or BRAINLOOP_DATA_DIR)",
            DbKind::Security.path(&config.data_dir).display()
        );
    }
    let scope = Scope::parse(&format!("worker:{worker}"))?;
    let exists: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)",
            &[&worker],
        )?
        .get(0);
    if !exists {
        bail!("no role {worker:?} in the registry: name the worker's login role (`brainloop registry add-role worker NAME`)");
    }
    let sec = db::open_read_only(&config.data_dir, DbKind::Security)?;
    let overrides: Vec<(String, String)> = {
        let mut st = sec.prepare(
            "SELECT signature, user_override FROM signatures WHERE user_override IS NOT NULL ORDER BY id",
        )?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
    };
    let command_overrides: i64 = sec.query_row(
        "SELECT count(*) FROM commands_registry WHERE user_override IS NOT NULL",
        [],
        |r| r.get(0),
    )?;
    let grants = crate::clients::store::list_with_clients(&sec, None)?;
    let by = super::operator();
    let now = crate::time::now_ms();
    let mut out = Vec::new();
    for (sig, value) in &overrides {
        let (r, new) = learned::add_once(
            c,
            &NewRule {
                kind: "override",
                rule: sig,
                client: "*",
                scope: &scope,
                value: Some(value),
                by: &by,
                expires_at: None,
            },
            now,
        )?;
        out.push(Imported {
            kind: "override",
            what: format!("{value} of signature `{sig}`"),
            outcome: if new { "added" } else { "present" },
            id: format!("fleet:{}", r.id),
        });
    }
    for (client, g) in &grants {
        let what = format!(
            "{client} {} {}{}",
            g.permission.as_str(),
            g.pattern,
            if g.auto { " (auto)" } else { "" }
        );
        match learned::grant(
            c,
            &NewGrant {
                client,
                permission: g.permission,
                pattern: &g.pattern,
                auto: g.auto,
                scope: &scope,
                by: &by,
                expires_at: None,
            },
            now,
        ) {
            Ok((r, new)) => out.push(Imported {
                kind: "grant",
                what,
                outcome: if new { "added" } else { "present" },
                id: format!("fleet-grant:{}", r.id),
            }),
            // A grant the registry's checks refuse (edited by hand) stays local, said so.
            Err(e) if format!("{e:#}").contains("permission denied") => return Err(e),
            Err(e) => out.push(Imported {
                kind: "grant",
                what,
                outcome: "local",
                id: format!("{e:#}"),
            }),
        }
    }
    if json {
        println!(
            "{}",
            shown::json(&serde_json::json!({
                "worker": worker,
                "imported": out,
                "command_overrides_kept_local": command_overrides,
            }))?
        );
        return Ok(0);
    }
    let added = out.iter().filter(|i| i.outcome == "added").count();
    let present = out.iter().filter(|i| i.outcome == "present").count();
    for i in &out {
        println!(
            "{:<8} {:<8} {} [worker:{}] {}",
            i.outcome,
            i.kind,
            shown::line(&i.id),
            shown::line(worker),
            shown::line(&i.what)
        );
    }
    println!(
        "imported into the registry for worker {}: {added} added, {present} already there ({} overrides of signatures, {} grants read from {}); the local ones stay in force beside them (the strictest override wins; grants add up)",
        shown::line(worker),
        overrides.len(),
        grants.len(),
        config.data_dir.display()
    );
    if command_overrides > 0 {
        println!(
            "{command_overrides} override(s) of a command hash stay local: a command's hash includes its working directory, one machine's (override its signature instead)"
        );
    }
    Ok(0)
}
