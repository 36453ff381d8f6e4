//! One command run's egress: the proxy started with the run's rules, the sandbox spec routed
//! through it, and afterwards what it saw recorded (command_security.db, worker counters).
//! It takes [`Who`] (the job's ids, stores and grants), never a whole job context.

use super::proxy::{self, Connection, JobProxy};
use super::resolve::Resolver;
use super::rules::{HostRule, Rules};
use super::secrets::{RunSecrets, Secrets};
use super::store;
use super::EgressConfig;
use crate::clients::{ClientGrants, Permission};
use crate::db::Stores;
use crate::sandbox::Spec;
use crate::stats::Stats;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Which rules a run gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scope {
    /// A run a human, an override, a promotion or the policy allowed: the client's NETWORK
    /// grants and the hosts a human approved for the command.
    Granted,
    /// A run nobody looked at yet (the overlay): only the hosts a human approved for the command.
    ApprovedOnly,
}

/// The job whose run it is: where its rules are read and its connections recorded.
#[derive(Clone, Copy)]
pub struct Who<'a> {
    pub stores: &'a Arc<Stores>,
    pub stats: &'a Stats,
    pub job_id: i64,
    pub client_id: &'a str,
    pub grants: Option<&'a ClientGrants>,
    /// The host rules a fleet registry grants the client now (`ask::learned::hosts_for`,
    /// given by the command path: this layer cannot read the registry's copy).
    pub shared_hosts: fn(&str, i64) -> Vec<String>,
}

/// No shared host rules (no registry, or a run that is not a job's).
pub fn no_shared_hosts(_: &str, _: i64) -> Vec<String> {
    Vec::new()
}

/// The rules of one run of `command_hash` for the job's client.
pub async fn rules(who: &Who<'_>, command_hash: &str, scope: Scope) -> Result<Rules, String> {
    let mut rules = Rules::default();
    if scope == Scope::Granted {
        let grants = who.grants.iter().flat_map(|g| g.grants.iter());
        for g in grants.filter(|g| g.permission == Permission::Network) {
            match HostRule::parse(&g.pattern, "grant") {
                Ok(r) => rules.rules.push(r),
                Err(e) => {
                    tracing::warn!(client = %who.client_id, error = %e, "ignoring a NETWORK grant that is not a host rule")
                }
            }
        }
    }
    let (client, hash) = (who.client_id.to_string(), command_hash.to_string());
    let approved = who
        .stores
        .security
        .call(move |c| store::approved_hosts(c, &client, &hash))
        .await
        .map_err(|e| format!("egress: cannot read the approved hosts: {e:#}"))?;
    for a in approved {
        match HostRule::parse(&a, "approved") {
            Ok(r) => rules.rules.push(r),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring an approved host that is not a host rule")
            }
        }
    }
    // The operator's host rules shared through the registry (fleet, project or this worker),
    // like the hosts a human approved.
    for h in (who.shared_hosts)(who.client_id, crate::time::now_ms()) {
        match HostRule::parse(&h, "registry") {
            Ok(r) => rules.rules.push(r),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a registry host rule that is not a host rule")
            }
        }
    }
    Ok(rules)
}

/// The secrets of one run of the job's client: those its SECRET grants name, each with a fresh
/// placeholder (`super::secrets`). A value that cannot be read fails the run (the error names
/// the fix, never the value).
pub async fn secrets(who: &Who<'_>, config: &Secrets) -> Result<RunSecrets, String> {
    let names: Vec<String> = who
        .grants
        .iter()
        .flat_map(|g| g.grants.iter())
        .filter(|g| g.permission == Permission::Secret)
        .map(|g| g.pattern.clone())
        .collect();
    if names.is_empty() || config.is_empty() {
        return Ok(RunSecrets::default());
    }
    let config = config.clone();
    tokio::task::spawn_blocking(move || RunSecrets::load(&config, &names))
        .await
        .map_err(|e| format!("secrets: {e}"))?
}

/// Starts a proxy allowing `rules` and routes `spec` through it (a job's run, an operator hook);
/// the command's environment gets the placeholders of `secrets`.
pub async fn start_with(
    rules: Rules,
    secrets: RunSecrets,
    cfg: &EgressConfig,
    data_dir: &Path,
    spec: &mut Spec,
) -> Result<JobProxy, String> {
    let hosts_file = cfg.hosts_file.clone();
    let resolver = tokio::task::spawn_blocking(move || Resolver::new(hosts_file.as_deref()))
        .await
        .map_err(|e| format!("egress: {e}"))?
        .map_err(|e| format!("egress: {e:#}"))?;
    let bounds = proxy::Bounds {
        connect_timeout: Duration::from_millis(cfg.connect_timeout_ms.max(1)),
        head_timeout: Duration::from_millis(cfg.head_timeout_ms.max(1)),
        max_connections: cfg.max_connections.max(1),
    };
    let dir = super::sockdir::get(data_dir).map_err(|e| format!("{e:#}"))?;
    let mut env = secrets.env();
    // A run that carries secrets gets its own CA (HTTPS to their hosts); any other, none.
    let tls = match (secrets.is_empty(), spec.tmp_dir.clone()) {
        (false, Some(tmp)) => {
            let s2 = secrets.clone();
            let (tls, vars) = tokio::task::spawn_blocking(move || {
                let tls = super::tls::RunTls::new(&s2)?;
                let vars = tls.install(&tmp)?;
                Ok::<_, String>((tls, vars))
            })
            .await
            .map_err(|e| format!("egress TLS: {e}"))??;
            env.extend(vars);
            Some(Arc::new(tls))
        }
        _ => None,
    };
    let proxy = JobProxy::start_carrying(rules, secrets, tls, Arc::new(resolver), bounds, &dir)
        .map_err(|e| format!("{e:#}"))?;
    proxy.route(spec);
    // The one exception to the environment filter: a secret's NAME, holding only its placeholder.
    for (k, v) in env {
        spec.env.retain(|(n, _)| *n != k);
        spec.env.push((k, v));
    }
    Ok(proxy)
}

/// Starts the run's proxy with the job's rules and routes `spec` through it.
pub async fn start(
    who: &Who<'_>,
    cfg: &EgressConfig,
    data_dir: &Path,
    command_hash: &str,
    scope: Scope,
    spec: &mut Spec,
) -> Result<JobProxy, String> {
    let rules = rules(who, command_hash, scope).await?;
    start_with(rules, RunSecrets::default(), cfg, data_dir, spec).await
}

/// Stops the proxy, records what it saw with the job and counts it; returns the connections.
pub async fn finish(who: &Who<'_>, command_hash: &str, proxy: JobProxy) -> Vec<Connection> {
    let conns = proxy.finish().await;
    for c in &conns {
        let name = match c.outcome.as_str() {
            "allowed" => "egress_allowed",
            "refused" | super::secrets::EXFILTRATION => "egress_refused",
            _ => "egress_failed",
        };
        who.stats.incr(name, 1.0);
        who.stats
            .incr("egress_bytes", (c.bytes_up + c.bytes_down) as f64);
    }
    let (job, client, hash, c2) = (
        who.job_id,
        who.client_id.to_string(),
        command_hash.to_string(),
        conns.clone(),
    );
    if let Err(e) = who
        .stores
        .security
        .call(move |db| store::record(db, job, &client, &hash, &c2))
        .await
    {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot record the job's egress connections"
        );
    }
    conns
}
