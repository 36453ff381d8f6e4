//! **Whether a hook with `llm = true` reaches its model** (issue 36): the configured model's
//! host (`[llm] base_url`) is allowed through the hook's own egress proxy ([`model_rule`]: the
//! operator named it, so a name reaches the classes it resolves to when the hook runs, and an
//! address reaches that address — the hook's `hosts` alone, default `*`, never reach a local
//! model); at start-up the worker checks that the reviewer reaches it through that very proxy
//! ([`probe`]: a `CONNECT` to the model's `host:port`, decided by the same rules), and after
//! every reviewer run whose connection to the model was refused or failed ([`after_run`]). What
//! it found is a `reviewer_check` event (metadata.db), which `brainloop status` shows.

use super::{HookConfig, Settings};
use crate::egress::proxy::{Bounds, Connection, JobProxy};
use crate::egress::resolve::Resolver;
use crate::egress::rules::{HostRule, Rules};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The event kind `status` reads.
pub const EVENT: &str = "reviewer_check";

/// The rule that lets an `llm = true` hook reach the configured model's host: the host and
/// port of `[llm] base_url`; a name also reaches the non-public classes it resolves to now (the
/// operator's own configuration names it: a local model on 127.0.0.1 or a LAN address).
pub async fn model_rule(settings: &Settings) -> Option<HostRule> {
    let text = crate::egress::named::url_host(&settings.llm.base_url)?;
    let mut rule = HostRule::parse(&text, "llm").ok()?;
    if rule.literal().is_none() {
        let shown = crate::egress::resolve::shown(
            settings.egress.hosts_file.as_deref(),
            Duration::from_millis(settings.egress.connect_timeout_ms.max(1)),
            std::slice::from_ref(&text),
        )
        .await;
        for s in shown {
            rule.classes.extend(s.non_public());
        }
        rule.classes.sort();
        rule.classes.dedup();
    }
    Some(rule)
}

/// The rules of a hook's run: its `hosts`, and with `llm = true` the model's host.
pub async fn rules(settings: &Settings, h: &HookConfig) -> anyhow::Result<Rules> {
    let mut rules = Rules {
        rules: h
            .hosts
            .iter()
            .map(|r| HostRule::parse(r, "hook"))
            .collect::<Result<_, String>>()
            .map_err(|e| anyhow::anyhow!("hook hosts: {e}"))?,
    };
    if h.llm {
        if let Some(r) = model_rule(settings).await {
            rules.rules.push(r);
        }
    }
    Ok(rules)
}

/// What a check found (the `reviewer_check` event).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Reach {
    pub ok: bool,
    /// `host:port` of `[llm] base_url`.
    pub model_host: Option<String>,
    pub base_url: String,
    /// `startup` or `reviewer_run`.
    pub when: String,
    /// What failed, and the fix.
    pub error: Option<String>,
}

/// Checks at start-up that the reviewer reaches its model through its own proxy.
pub async fn probe(settings: &Settings, h: &HookConfig) -> Reach {
    let base_url = settings.llm.base_url.clone();
    let Some(host) = crate::egress::named::url_host(&base_url) else {
        return Reach {
            ok: false,
            model_host: None,
            base_url: base_url.clone(),
            when: "startup".into(),
            error: Some(format!(
                "[llm] base_url {base_url:?} names no host the reviewer could reach (http:// or https://)"
            )),
        };
    };
    let error = match connect_through(settings, h, &host).await {
        Ok(conns) => verdict(&conns, &host),
        Err(e) => Some(format!("{e:#}")),
    };
    Reach {
        ok: error.is_none(),
        model_host: Some(host),
        base_url,
        when: "startup".into(),
        error,
    }
}

/// A proxy with the hook's rules, one `CONNECT host:port` through it; what it recorded.
async fn connect_through(
    settings: &Settings,
    h: &HookConfig,
    host: &str,
) -> anyhow::Result<Vec<Connection>> {
    let rules = rules(settings, h).await?;
    let file = settings.egress.hosts_file.clone();
    let resolver = tokio::task::spawn_blocking(move || Resolver::new(file.as_deref())).await??;
    let e = &settings.egress;
    let bounds = Bounds {
        connect_timeout: Duration::from_millis(e.connect_timeout_ms.max(1)),
        head_timeout: Duration::from_millis(e.head_timeout_ms.max(1)),
        max_connections: 2,
    };
    let dir = crate::egress::sockdir::get(&settings.data_dir)?;
    let proxy = JobProxy::start(rules, Arc::new(resolver), bounds, &dir)?;
    let talk = async {
        let mut s = tokio::net::UnixStream::connect(proxy.socket()).await?;
        s.write_all(format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await?;
        anyhow::Ok(())
    };
    let limit = Duration::from_millis(e.connect_timeout_ms.max(1)) + Duration::from_secs(2);
    let talked = tokio::time::timeout(limit, talk).await;
    let conns = proxy.finish().await;
    match talked {
        Err(_) => anyhow::bail!("no answer from the reviewer's proxy within {limit:?}"),
        Ok(Err(e)) => anyhow::bail!("cannot talk to the reviewer's proxy: {e:#}"),
        Ok(Ok(())) => Ok(conns),
    }
}

/// Why the model's host was not reached, from the proxy's record (None: it was).
fn verdict(conns: &[Connection], host: &str) -> Option<String> {
    let c = conns.iter().find(|c| c.is_host())?;
    let why = c.reason.clone().unwrap_or_default();
    match c.outcome.as_str() {
        "allowed" => None,
        "refused" => Some(format!(
            "the reviewer's egress proxy refused the model's host {host}: {why} (set [reviewer] llm = true, or add it to [reviewer] hosts)"
        )),
        _ => Some(format!(
            "the model's host {host} did not answer: {why} (is the model server running? [llm] base_url)"
        )),
    }
}

/// After a reviewer run: what its connections to the model's host say (None: it did not try).
pub fn after_run(settings: &Settings, conns: &[Connection]) -> Option<Reach> {
    let host = crate::egress::named::url_host(&settings.llm.base_url)?;
    let norm = HostRule::parse(&host, "llm").ok()?;
    let tried: Vec<Connection> = conns
        .iter()
        .filter(|c| c.is_host() && norm.matches(&c.host, c.port))
        .cloned()
        .collect();
    if tried.is_empty() {
        return None;
    }
    let error = if tried.iter().any(|c| c.outcome == "allowed") {
        None
    } else {
        verdict(&tried, &host)
    };
    Some(Reach {
        ok: error.is_none(),
        model_host: Some(host),
        base_url: settings.llm.base_url.clone(),
        when: "reviewer_run".into(),
        error,
    })
}
