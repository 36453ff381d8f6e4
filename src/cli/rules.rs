//! `brainloop rules add|list|revoke` (issue 37): the operator's rules shared through the fleet
//! registry — a learned signature, an override of a signature, or a host rule — each for a
//! client (or `*`) and a scope: the fleet, a project (`project:NAME`, the workers whose
//! `horos_name` is NAME) or one worker (`worker:ROLE`, its login role). Written and revoked
//! only with the operator's role (`ask::learned`, PostgreSQL's grants and row security); every
//! worker of the scope applies a change within a second (`brainloop_learned`).

use crate::ask::learned::{self, NewRule, Scope};
use crate::config::Config;
use crate::shown;
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: Option<RulesCommand>,
    /// With no subcommand: list the active rules (`--all`: revoked and expired ones too).
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum RulesCommand {
    /// Add a rule: `signature SIG` (learned), `override SIG --value always_allow|always_ask|never`,
    /// `command 'TEXT' --value …` (a command's override, by its exact text), or `host PATTERN`
    /// (`HOST[:PORT][+CLASS]`, as `egress` reads it).
    Add {
        /// signature, override, command or host
        kind: String,
        /// The signature's text (see `brainloop signatures`), the command's or the host rule.
        rule: String,
        /// An override's value: always_allow, always_ask or never.
        #[arg(long)]
        value: Option<String>,
        /// The client it is for (`*`: every client).
        #[arg(long, default_value = "*")]
        client: String,
        /// fleet, project:NAME (the workers whose horos_name is NAME) or worker:ROLE.
        #[arg(long, default_value = "fleet")]
        scope: String,
        /// Expires after this long (e.g. 7d, 12h).
        #[arg(long)]
        expires: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List the registry's rules this role may read (`--all`: revoked and expired too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Revoke `fleet:N`, or every active rule with this exact text (a signature or host rule).
    Revoke {
        key: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(config: &Config, a: &RulesArgs) -> Result<i32> {
    let Some(reg) = &config.registry else {
        bail!("`brainloop rules` works on a fleet registry: set [registry] url = \"postgres://…\" (or BRAINLOOP_REGISTRY_URL); on one machine use `brainloop override` and `approve --always-host`");
    };
    let mut c = crate::registry::connect(reg)?;
    crate::registry::check_version(&mut c)?;
    let now = crate::time::now_ms();
    match &a.command {
        None => list(&mut c, a.all, a.json, now),
        Some(RulesCommand::List { all, json }) => list(&mut c, *all, *json, now),
        Some(RulesCommand::Add {
            kind,
            rule,
            value,
            client,
            scope,
            expires,
            json,
        }) => {
            let scope = Scope::parse(scope)?;
            match (kind.as_str(), value.as_deref()) {
                ("override" | "command", Some(v)) => {
                    if crate::bash::policy::Override::parse(v).is_none() {
                        bail!("--value {v:?}: always_allow, always_ask or never");
                    }
                }
                ("override" | "command", None) => {
                    bail!("an override needs --value always_allow|always_ask|never")
                }
                ("signature" | "host", Some(_)) => {
                    bail!("--value goes with `rules add override` and `rules add command` only")
                }
                ("host", None) => {
                    if let Err(e) = crate::egress::rules::HostRule::parse(rule, "registry") {
                        bail!("{rule:?} is not a host rule: {e}");
                    }
                }
                ("signature", None) => {}
                (other, _) => bail!("rules add {other:?}: signature, override, command or host"),
            }
            if rule.trim().is_empty() || client.trim().is_empty() {
                bail!("the rule and --client must not be empty");
            }
            let expires_at = match expires {
                Some(age) => Some(
                    now + super::reviewer::parse_age(age)?
                        .as_millis()
                        .min(i64::MAX as u128) as i64,
                ),
                None => None,
            };
            let by = super::operator();
            let r = learned::add(
                &mut c,
                &NewRule {
                    kind,
                    rule,
                    client,
                    scope: &scope,
                    value: value.as_deref(),
                    by: &by,
                    expires_at,
                },
                now,
            )?;
            if *json {
                println!("{}", shown::json(&r)?);
            } else {
                println!(
                    "added {}; every worker of its scope applies it within a second (`brainloop rules revoke fleet:{}` takes it back)",
                    shown::line(&line(&r, now)),
                    r.id
                );
            }
            Ok(0)
        }
        Some(RulesCommand::Revoke { key, json }) => {
            let done = learned::revoke(&mut c, key, &super::operator(), now)?;
            if *json {
                println!("{}", shown::json(&done)?);
            } else {
                for r in &done {
                    println!(
                        "revoked {}: every worker of its scope stops applying it within a second",
                        shown::line(&line(r, now))
                    );
                }
            }
            Ok(0)
        }
    }
}

/// `brainloop override SIG VALUE --scope S`: the registry's override of a signature (by its
/// text), as `rules add override`.
pub(crate) fn override_in_registry(
    config: &Config,
    sig: &str,
    value: &str,
    client: &str,
    scope: &str,
    expires: Option<&str>,
) -> Result<i32> {
    if value == "clear" {
        bail!("a registry override is taken back with `brainloop rules revoke fleet:N` (see `brainloop rules`)");
    }
    if sig.starts_with("sig:") || (sig.len() >= 8 && sig.chars().all(|c| c.is_ascii_hexdigit())) {
        bail!("with --scope, give the signature's exact text (`brainloop signatures` shows it, e.g. 'sed -i EXPR WS_PATH'): a signature id is this machine's, a command hash includes its workdir");
    }
    run(
        config,
        &RulesArgs {
            command: Some(RulesCommand::Add {
                kind: "override".into(),
                rule: sig.into(),
                value: Some(value.into()),
                client: client.into(),
                scope: scope.into(),
                expires: expires.map(String::from),
                json: false,
            }),
            all: false,
            json: false,
        },
    )
}

fn list(c: &mut crate::registry::Client, all: bool, json: bool, now: i64) -> Result<i32> {
    let rules = learned::list(c, all, now)?;
    if json {
        println!("{}", shown::json(&rules)?);
        return Ok(0);
    }
    if rules.is_empty() {
        println!("no rules in the registry");
    }
    for r in &rules {
        println!("{}", shown::line(&line(r, now)));
    }
    Ok(0)
}

/// One rule: id, kind, scope, text, client, provenance, expiry or revocation.
pub(crate) fn line(r: &learned::LearnedRule, now: i64) -> String {
    let scope = match &r.target {
        Some(t) => format!("{}:{t}", r.scope),
        None => r.scope.clone(),
    };
    let what = match (r.kind.as_str(), &r.value) {
        ("override", Some(v)) => format!("override {v} of signature `{}`", r.rule),
        ("command", Some(v)) => format!("override {v} of command `{}`", r.rule),
        ("host", _) => format!("host `{}`", r.rule),
        _ => format!("`{}`", r.rule),
    };
    let mut s = format!(
        "fleet:{} [{scope}] {what} for client {}: learned_by {} (role {})",
        r.id, r.client_id, r.learned_by, r.db_role
    );
    if let Some(v) = &r.validation_id {
        s.push_str(&format!(" from validation {v}"));
    }
    s.push_str(&format!(" at {}", crate::time::local(r.created_at)));
    match (r.revoked_at, r.expires_at) {
        (Some(at), _) => s.push_str(&format!(
            "; REVOKED by {} at {}",
            r.revoked_by.as_deref().unwrap_or("?"),
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
