//! Name resolution for the egress proxy: the proxy resolves every name itself (the command has
//! no resolver that works: its network namespace has only loopback). An operator hosts file
//! (`[egress] hosts_file`, `/etc/hosts` syntax) is consulted first — it is how tests give a name
//! a private address without touching `/etc/hosts` — then the system resolver.

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
