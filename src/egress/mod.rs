//! Egress by host (issue 23): **what leaves the machine, and the record of it**.
//!
//! A command in a network set (and a command on the overlay) runs in its own network namespace
//! whose only way out is a proxy the worker runs for that run ([`proxy`]), reached through the
//! helper's forwarder (`sandbox/forward.rs`). The proxy decides by host name and port, never by
//! what the command says about itself:
//!
//! - the rules ([`rules`]) of a run are the client's NETWORK grants (operator: `brainloop grant
//!   CLIENT NETWORK 'pypi.org:443'`, globs `*.pythonhosted.org:443`) and the hosts a human
//!   approved for this client's command (`brainloop approve ID --host HOST:PORT`, [`store`]); an
//!   overlay run, which no human looked at before it ran, gets only the latter;
//! - names are resolved by the proxy ([`resolve`]); the class of the address it connects to
//!   ([`rules::class`]: public, private, loopback, link-local, …) decides with the rule: a rule
//!   reaches public addresses; a non-public one only the IP address it names, or a class it
//!   lists for the name it names (`svc.internal:8080+loopback`, from `brainloop approve ID
//!   --allow-private-hosts`) — a name a human approved plainly reaches public addresses only;
//! - every attempt is recorded with the job (command_security.db `egress_connections`): host,
//!   port, outcome, bytes. A run that was refused a host asks a human, naming the hosts, where
//!   each resolves and of which class ([`resolve::shown`]), and the commands that allow them
//!   ([`refusal_reasons`]); approving re-runs the command with them;
//! - what one run may make the worker hold is bounded ([`proxy`]): connections open at once
//!   (`max_connections`, past it closed unread and recorded once per run), the time a connection
//!   gets to send its request head or SOCKS greeting (`head_timeout_ms`), the record (the first
//!   attempts one by one, then per-host aggregates, every refused host kept); the sockets live
//!   in a short per-worker directory ([`sockdir`]) whatever `$TMPDIR` is.

pub mod echo;
pub mod job;
pub mod named;
pub mod proxy;
pub mod resolve;
pub mod rules;
pub mod secrets;
pub mod sockdir;
pub mod store;
pub mod tls;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[egress]` in the configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// A hosts file (`/etc/hosts` syntax) the proxy consults before the system resolver.
    pub hosts_file: Option<PathBuf>,
    /// Resolution and connection timeout of the proxy (ms).
    pub connect_timeout_ms: u64,
    /// Connections one run may have open through its proxy at once; past it a connection is
    /// closed unread (recorded once per run). The forwarder inside the run's namespace holds
    /// at most twice as many.
    pub max_connections: usize,
    /// Time a connection gets to send its whole request head (HTTP) or SOCKS greeting and
    /// request before the proxy closes it unanswered (ms).
    pub head_timeout_ms: u64,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            hosts_file: None,
            connect_timeout_ms: 10_000,
            max_connections: 128,
            head_timeout_ms: 10_000,
        }
    }
}

/// What an approval of a host request binds to: the command, asked about its hosts (distinct
/// from the command's own hash, so an up-front approval never answers a host request).
pub fn approval_hash(command_hash: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(format!("egress\0{command_hash}").as_bytes()))
}

/// The distinct `host:port` a run was refused, sorted, as rule texts. A name no rule could
/// ever allow (characters outside a host name: it came from the command) is left out, so
/// nothing the command chose ends up in a suggested shell command.
pub fn refused(conns: &[proxy::Connection]) -> Vec<String> {
    let mut v: Vec<String> = conns
        .iter()
        .filter(|c| c.outcome == "refused" && c.is_host())
        .filter_map(|c| {
            let h = if c.host.contains(':') {
                format!("[{}]", c.host)
            } else {
                c.host.clone()
            };
            rules::HostRule::parse(&format!("{h}:{}", c.port), "refused").ok()
        })
        .filter(|r| r.explicit())
        .map(|r| r.text())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// `s` as one shell word (single-quoted unless plain).
pub fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:@/[]+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The reasons of a host request: the hosts, where each resolved when asked and of which
/// class (`resolved`, from [`resolve::shown`]), and the exact operator commands that allow them.
pub fn refusal_reasons(
    client: &str,
    validation_id: &str,
    hosts: &[String],
    resolved: &[resolve::Resolved],
) -> Vec<String> {
    let c = shell_word(client);
    let mut v = vec![format!(
        "the egress proxy refused {} (no host rule of client {c} allows it, or it resolves to a non-public address no rule allows); only allowed hosts were reached",
        hosts.join(", ")
    )];
    let (lines, private) = host_lines(validation_id, resolved, false);
    v.extend(lines);
    let flags: Vec<String> = hosts
        .iter()
        .map(|h| format!("--host {}", shell_word(h)))
        .collect();
    v.push(format!(
        "allow for this command and re-run it: brainloop approve {validation_id} {}",
        flags.join(" ")
    ));
    if private {
        v.push(format!(
            "or, to reach the non-public addresses shown too: brainloop approve {validation_id} --allow-private-hosts"
        ));
    }
    for h in hosts {
        v.push(format!(
            "or for every command of the client: brainloop grant {c} NETWORK {} (then brainloop approve {validation_id} re-runs it)",
            shell_word(h)
        ));
    }
    v.push(format!(
        "or remember {} for every command of the client and re-run it: brainloop approve {validation_id} --always-host",
        if hosts.len() == 1 { "it" } else { "them" }
    ));
    v
}

/// One line per resolved host (where it points, of which class) and whether a host among them
/// needs `--allow-private-hosts` to reach where it points: a name at a non-public address, and,
/// `up_front` (the first prompt, before the command ran), an address that is not public too.
fn host_lines(
    validation_id: &str,
    resolved: &[resolve::Resolved],
    up_front: bool,
) -> (Vec<String>, bool) {
    let mut private = false;
    let mut v = Vec::new();
    for r in resolved {
        let classes = r.non_public();
        let literal = rules::HostRule::parse(&r.host, "shown")
            .ok()
            .and_then(|h| h.literal())
            .is_some();
        let line = match (classes.is_empty(), literal) {
            (true, _) => r.line(),
            (false, true) if up_front => {
                private = true;
                format!(
                    "{} — NOT PUBLIC: a plain approve does not allow it; to let the command reach that address: brainloop approve {validation_id} --allow-private-hosts",
                    r.line()
                )
            }
            (false, true) => format!(
                "{} — NOT PUBLIC, named by its address: approving it reaches that address",
                r.line()
            ),
            (false, false) => {
                private = true;
                let names: Vec<&str> = classes.iter().map(|c| c.as_str()).collect();
                format!(
                    "{} — NOT PUBLIC: a plain approve lets this name reach public addresses only; to let it reach {} addresses: brainloop approve {validation_id} --allow-private-hosts",
                    r.line(),
                    names.join("/")
                )
            }
        };
        v.push(line);
    }
    (v, private)
}

/// The reasons of the first prompt about a network command that names hosts (issue 36): the
/// hosts, where each resolves and of which class, what a plain approve allows (the hosts shown
/// public, for this command), the exact command for a host shown at a non-public address (name
/// or address: the operator's flag), and how to remember them for the client.
pub fn named_reasons(
    client: &str,
    validation_id: &str,
    hosts: &[String],
    resolved: &[resolve::Resolved],
) -> Vec<String> {
    let mut v = vec![format!(
        "the command names {} — approving it allows {} through the egress proxy for this command where shown public (a name: its public addresses only)",
        hosts.join(", "),
        if hosts.len() == 1 { "this host" } else { "these hosts" }
    )];
    let (lines, private) = host_lines(validation_id, resolved, true);
    v.extend(lines);
    if private {
        v.push(format!(
            "to run it and let the hosts above reach the non-public addresses shown: brainloop approve {validation_id} --allow-private-hosts"
        ));
    }
    v.push(format!(
        "to run it and remember the host{} for every command of client {}: brainloop approve {validation_id} --always-host{} (`brainloop grants` shows it, `brainloop revoke` forgets it)",
        if hosts.len() == 1 { "" } else { "s" },
        shell_word(client),
        if private { " --allow-private-hosts" } else { "" }
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_quote_what_is_not_plain() {
        assert_eq!(shell_word("pypi.org:443"), "pypi.org:443");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("x'$(rm)"), "'x'\\''$(rm)'");
        let r = refusal_reasons("loc al", "v1", &["pypi.org:443".into()], &[]);
        assert!(
            r[1].ends_with("brainloop approve v1 --host pypi.org:443"),
            "{r:?}"
        );
        assert!(
            r[2].contains("brainloop grant 'loc al' NETWORK pypi.org:443"),
            "{r:?}"
        );
    }
}
