//! Name resolution for the egress proxy: the proxy resolves every name itself (the command has
//! no resolver that works: its network namespace has only loopback). An operator hosts file
//! (`[egress] hosts_file`, `/etc/hosts` syntax) is consulted first — it is how tests give a name
//! a private address without touching `/etc/hosts` — then the system resolver.
//!
//! [`shown`] resolves the hosts of a host request the same way, when a human is asked, so the
//! prompt says where each name points and of which class ([`super::rules::class`]).

use super::rules::{class, AddrClass, HostRule};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

#[derive(Debug, Clone, Default)]
pub struct Resolver {
    hosts: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// Loads the hosts file (none: the system resolver only).
    pub fn new(hosts_file: Option<&Path>) -> anyhow::Result<Resolver> {
        let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
        if let Some(p) = hosts_file {
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("[egress] hosts_file {}: {e}", p.display()))?;
            for line in text.lines() {
                let line = line.split('#').next().unwrap_or("");
                let mut words = line.split_whitespace();
                let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
                    continue;
                };
                for name in words {
                    hosts
                        .entry(super::rules::normalise_host(name))
                        .or_default()
                        .push(ip);
                }
            }
        }
        Ok(Resolver { hosts })
    }

    /// The addresses of `host` (an IP literal is itself).
    pub async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let h = super::rules::normalise_host(host);
        if let Ok(ip) = h.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        if let Some(ips) = self.hosts.get(&h) {
            return Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let found: Vec<SocketAddr> = tokio::net::lookup_host((h.as_str(), port)).await?.collect();
        Ok(found)
    }
}

/// Hosts resolved for a prompt at most (the rest is shown unresolved, saying so). The names
/// come from the command: resolving them lets the resolver's upstream see them (as a rule
/// allowing them would), so few are.
const MAX_SHOWN: usize = 8;

/// Where a refused host pointed when a human was asked: shown in the prompt (`validations`,
/// `show`, `review`, the pending result's `egress_resolved`), stored with the host request, and
/// what `approve --allow-private-hosts` allows (the non-public classes shown, no other).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// The host rule text asked about (`name:port`).
    pub host: String,
    /// The addresses with their class (`127.0.0.1 (loopback)`), in resolver order.
    #[serde(default)]
    pub addresses: Vec<(String, AddrClass)>,
    /// Why there are no addresses (resolution failed or timed out; not resolved).
    #[serde(default)]
    pub error: Option<String>,
}

impl Resolved {
    /// The non-public classes among the addresses, sorted.
    pub fn non_public(&self) -> Vec<AddrClass> {
        let mut v: Vec<AddrClass> = self
            .addresses
            .iter()
            .map(|(_, c)| *c)
            .filter(|c| *c != AddrClass::Public)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// One line for the prompt: `svc:80 resolves to 127.0.0.1 (loopback)`.
    pub fn line(&self) -> String {
        if let Some(e) = &self.error {
            return format!("{} did not resolve: {e}", self.host);
        }
        let addrs: Vec<String> = self
            .addresses
            .iter()
            .map(|(a, c)| format!("{a} ({c})"))
            .collect();
        let literal = HostRule::parse(&self.host, "shown")
            .ok()
            .and_then(|r| r.literal())
            .is_some();
        if literal {
            format!("{} is {}", self.host, addrs.join(", "))
        } else {
            format!("{} resolves to {}", self.host, addrs.join(", "))
        }
    }
}

/// Resolves the `host:port` rule texts of a host request with the proxy's resolver, all at
/// once within `timeout` (the system resolver runs on the blocking pool, never on the async
/// threads); a failure or a timeout is shown as such.
pub async fn shown(
    hosts_file: Option<&Path>,
    timeout: std::time::Duration,
    hosts: &[String],
) -> Vec<Resolved> {
    let file = hosts_file.map(Path::to_path_buf);
    let resolver = match tokio::task::spawn_blocking(move || Resolver::new(file.as_deref())).await {
        Ok(Ok(r)) => std::sync::Arc::new(r),
        Ok(Err(e)) => return unresolved(hosts, &format!("{e:#}")),
        Err(e) => return unresolved(hosts, &e.to_string()),
    };
    let mut set = tokio::task::JoinSet::new();
    for (i, h) in hosts.iter().enumerate().take(MAX_SHOWN) {
        let (r, h) = (resolver.clone(), h.clone());
        set.spawn(async move {
            let got = match HostRule::parse(&h, "shown") {
                Err(e) => Err(e),
                Ok(rule) => {
                    let port = rule.port.unwrap_or(443);
                    match tokio::time::timeout(timeout, r.resolve(&rule.host, port)).await {
                        Ok(Ok(a)) if a.is_empty() => Err("no address".to_string()),
                        Ok(Ok(a)) => Ok(a),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("timed out after {} ms", timeout.as_millis())),
                    }
                }
            };
            (i, h, got)
        });
    }
    let mut out: Vec<Option<Resolved>> = vec![None; hosts.len()];
    while let Some(j) = set.join_next().await {
        let Ok((i, host, got)) = j else { continue };
        let mut r = Resolved {
            host,
            addresses: Vec::new(),
            error: None,
        };
        match got {
            Ok(addrs) => {
                for a in addrs {
                    let entry = (a.ip().to_string(), class(a.ip()));
                    if !r.addresses.contains(&entry) {
                        r.addresses.push(entry);
                    }
                }
            }
            Err(e) => r.error = Some(e),
        }
        out[i] = Some(r);
    }
    out.into_iter()
        .zip(hosts)
        .map(|(r, h)| {
            r.unwrap_or_else(|| Resolved {
                host: h.clone(),
                addresses: Vec::new(),
                error: Some(format!(
                    "not resolved (only the first {MAX_SHOWN} hosts of a request are)"
                )),
            })
        })
        .collect()
}

fn unresolved(hosts: &[String], why: &str) -> Vec<Resolved> {
    hosts
        .iter()
        .map(|h| Resolved {
            host: h.clone(),
            addresses: Vec::new(),
            error: Some(format!("not resolved: {why}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refused_hosts_are_shown_with_their_addresses_and_class_or_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(&file, "127.0.0.1 svc.test\n10.0.0.5 db.test\n").unwrap();
        let hosts: Vec<String> = ["svc.test:80", "[::ffff:0:127.0.0.1]:81", "db.test:5432"]
            .map(String::from)
            .to_vec();
        let got = shown(Some(&file), std::time::Duration::from_secs(5), &hosts).await;
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0].line(),
            "svc.test:80 resolves to 127.0.0.1 (loopback)"
        );
        assert_eq!(got[0].non_public(), [AddrClass::Loopback]);
        assert_eq!(
            got[1].line(),
            "[::ffff:0:127.0.0.1]:81 is ::ffff:0:7f00:1 (loopback)"
        );
        assert_eq!(got[2].non_public(), [AddrClass::Private]);
        let bad = Resolved {
            host: "x.invalid:1".into(),
            addresses: Vec::new(),
            error: Some("timed out after 5 ms".into()),
        };
        assert_eq!(
            bad.line(),
            "x.invalid:1 did not resolve: timed out after 5 ms"
        );
    }
}
