//! One command run's egress: the proxy started with the run's rules, the sandbox spec routed
//! through it, and afterwards what it saw recorded (command_security.db, worker counters).

use super::proxy::{self, Connection, JobProxy};
use super::resolve::Resolver;
use super::rules::{HostRule, Rules};
use super::store;
use crate::clients::{ClientGrants, Permission};
use crate::db::Stores;
use crate::sandbox::Spec;
use crate::stats::Stats;
use std::sync::Arc;
use std::time::Duration;

/// What a run's egress needs of its job (built by `job::JobCtx::egress`).
pub struct Job<'a> {
    pub stores: &'a Stores,
    pub stats: &'a Stats,
    pub job_id: i64,
    pub client_id: &'a str,
    /// The client's grants (its NETWORK rules), when loaded.
    pub grants: Option<&'a ClientGrants>,
    pub config: &'a super::EgressConfig,
    /// The worker's data dir (the proxy's socket lives under its temp prefix).
    pub data_dir: &'a std::path::Path,
}

/// Which rules a run gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scope {
    /// A run a human, an override, a promotion or the policy allowed: the client's NETWORK
    /// grants and the hosts a human approved for the command.
    Granted,
    /// A run nobody looked at yet (the overlay): only the hosts a human approved for the command.
    ApprovedOnly,
}

/// The rules of one run of `command_hash` for the job's client.
pub async fn rules(ctx: &Job<'_>, command_hash: &str, scope: Scope) -> Result<Rules, String> {
    let mut rules = Rules::default();
    if scope == Scope::Granted {
        let grants = ctx.grants.iter().flat_map(|g| g.grants.iter());
        for g in grants.filter(|g| g.permission == Permission::Network) {
            match HostRule::parse(&g.pattern, "grant") {
                Ok(r) => rules.rules.push(r),
                Err(e) => {
                    tracing::warn!(client = %ctx.client_id, error = %e, "ignoring a NETWORK grant that is not a host rule")
                }
            }
        }
    }
    let (client, hash) = (ctx.client_id.to_string(), command_hash.to_string());
    let approved = ctx
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
    Ok(rules)
}

/// Starts the run's proxy and routes `spec` through it.
pub async fn start(
    ctx: &Job<'_>,
    command_hash: &str,
    scope: Scope,
    spec: &mut Spec,
) -> Result<JobProxy, String> {
    let rules = rules(ctx, command_hash, scope).await?;
    let hosts_file = ctx.config.hosts_file.clone();
    let resolver = tokio::task::spawn_blocking(move || Resolver::new(hosts_file.as_deref()))
        .await
        .map_err(|e| format!("egress: {e}"))?
        .map_err(|e| format!("egress: {e:#}"))?;
    let timeout = Duration::from_millis(ctx.config.connect_timeout_ms.max(1));
    let prefix = crate::sandbox::tmp_prefix(ctx.data_dir);
    let proxy = JobProxy::start(rules, Arc::new(resolver), timeout, &prefix)
        .map_err(|e| format!("{e:#}"))?;
    spec.route_through(proxy.socket(), proxy::PORT);
    Ok(proxy)
}

/// Stops the proxy, records what it saw with the job and counts it; returns the connections.
pub async fn finish(ctx: &Job<'_>, command_hash: &str, proxy: JobProxy) -> Vec<Connection> {
    let conns = proxy.finish().await;
    for c in &conns {
        let name = match c.outcome.as_str() {
            "allowed" => "egress_allowed",
            "refused" => "egress_refused",
            _ => "egress_failed",
        };
        ctx.stats.incr(name, 1.0);
        ctx.stats
            .incr("egress_bytes", (c.bytes_up + c.bytes_down) as f64);
    }
    let (job, client, hash, c2) = (
        ctx.job_id,
        ctx.client_id.to_string(),
        command_hash.to_string(),
        conns.clone(),
    );
    if let Err(e) = ctx
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
