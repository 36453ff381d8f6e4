//! Clients and their grants (seed 004, DESIGN §2 trust model and §6).
//!
//! Every job acts for a `client_id`. What that client may do is the union of
//! - its entry in the operator's config (`[clients.NAME]`), or the built-in default when it has
//!   none (`local`: the workspace, any program, LLM, network; anyone else: seed 004's minimal
//!   default — read the workspace, run `echo`), and
//! - the grants the operator added at run time with `brainloop grant` (command_security.db
//!   `client_permissions`, which only the operator's CLI and the worker can write), and
//! - with a fleet registry, the grants shared with this worker's scope (`brainloop grant
//!   --scope`, read from the worker's fresh copy of the registry by the job's caller).
//!
//! Grants are re-read for every job whenever the database changed, so `brainloop revoke` takes
//! effect on the next job (`cache.rs`).

pub mod cache;
pub mod paths;
pub mod store;
pub mod write;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A typed permission (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Permission {
    FileRead,
    FileWrite,
    SystemCommand,
    Network,
    Llm,
    ForceExecute,
    /// A configured secret (`[secrets.NAME]`) the client's runs may use (issue 38); pattern:
    /// the name. Granted by the operator only (`brainloop grant CLIENT SECRET NAME`), never
    /// through a permission request.
    Secret,
}

impl Permission {
    pub const ALL: [Permission; 7] = [
        Permission::FileRead,
        Permission::FileWrite,
        Permission::SystemCommand,
        Permission::Network,
        Permission::Llm,
        Permission::ForceExecute,
        Permission::Secret,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::FileRead => "FILE_READ",
            Permission::FileWrite => "FILE_WRITE",
            Permission::SystemCommand => "SYSTEM_COMMAND",
            Permission::Network => "NETWORK",
            Permission::Llm => "LLM",
            Permission::ForceExecute => "FORCE_EXECUTE",
            Permission::Secret => "SECRET",
        }
    }

    pub fn parse(s: &str) -> Result<Permission> {
        let up = s.trim().to_ascii_uppercase().replace('-', "_");
        Permission::ALL
            .into_iter()
            .find(|p| p.as_str() == up)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown permission {s:?}; one of FILE_READ, FILE_WRITE, SYSTEM_COMMAND, NETWORK, LLM, FORCE_EXECUTE, SECRET"
                )
            })
    }

    pub fn is_path(self) -> bool {
        matches!(self, Permission::FileRead | Permission::FileWrite)
    }
}

/// Where a grant comes from (shown by `brainloop grants`; only `operator` grants can be revoked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Default,
    Config,
    Operator,
    /// Shared through the fleet registry (`brainloop grant --scope`, `ask::learned`): in force
    /// on this worker while its copy of the registry is fresh.
    Registry,
}

/// One grant: a permission and the pattern it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub permission: Permission,
    /// FILE_*: an absolute path glob (`{workspace}` expands to the workspace);
    /// SYSTEM_COMMAND: a program name or `*`; NETWORK: a host pattern or `*`; LLM/FORCE_EXECUTE: `*`.
    pub pattern: String,
    /// FILE_WRITE only: writes there are approved without asking a human.
    pub auto: bool,
    pub source: Source,
}

/// A client's entry in the config file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    pub file_read: Vec<String>,
    pub file_write: Vec<String>,
    /// FILE_WRITE grants whose writes need no human validation.
    pub file_write_auto: Vec<String>,
    pub system_command: Vec<String>,
    pub network: Vec<String>,
    pub llm: bool,
    pub force_execute: bool,
}

impl ClientConfig {
    /// `local`: whoever can write input.db directly (DESIGN §6).
    pub fn local_default() -> ClientConfig {
        ClientConfig {
            file_read: vec!["{workspace}/**".into()],
            file_write: vec!["{workspace}/**".into()],
            file_write_auto: vec![],
            system_command: vec!["*".into()],
            network: vec!["*".into()],
            llm: true,
            force_execute: false,
        }
    }

    /// Seed 004's minimal default for any other client: read the workspace, run `echo`.
    pub fn minimal_default() -> ClientConfig {
        ClientConfig {
            file_read: vec!["{workspace}/**".into()],
            system_command: vec!["echo".into()],
            ..ClientConfig::default()
        }
    }

    fn grants(&self, source: Source) -> Vec<Grant> {
        let mut out = Vec::new();
        let mut add = |permission, pattern: &str, auto| {
            out.push(Grant {
                permission,
                pattern: pattern.to_string(),
                auto,
                source,
            })
        };
        for p in &self.file_read {
            add(Permission::FileRead, p, false);
        }
        for p in &self.file_write {
            add(Permission::FileWrite, p, false);
        }
        for p in &self.file_write_auto {
            add(Permission::FileWrite, p, true);
        }
        for p in &self.system_command {
            add(Permission::SystemCommand, p, false);
        }
        for p in &self.network {
            add(Permission::Network, p, false);
        }
        if self.llm {
            add(Permission::Llm, "*", false);
        }
        if self.force_execute {
            add(Permission::ForceExecute, "*", false);
        }
        out
    }
}

/// The operator's `[clients.NAME]` sections, by name (the clients' own configuration section).
pub type Configured = std::collections::BTreeMap<String, ClientConfig>;

/// The client the operator configured, or the built-in default.
pub fn configured(clients: &Configured, client_id: &str) -> (ClientConfig, Source) {
    if let Some(c) = clients.get(client_id) {
        return (c.clone(), Source::Config);
    }
    if client_id == "local" {
        (ClientConfig::local_default(), Source::Default)
    } else if let Some(c) = clients.get("default") {
        (c.clone(), Source::Config)
    } else {
        (ClientConfig::minimal_default(), Source::Default)
    }
}

/// A client's effective grants, with path patterns compiled.
#[derive(Debug, Clone)]
pub struct ClientGrants {
    pub client_id: String,
    pub grants: Vec<Grant>,
    workspace: PathBuf,
    path_rules: Vec<paths::PathRule>,
}

impl ClientGrants {
    pub fn new(client_id: &str, grants: Vec<Grant>, workspace: &Path) -> Result<ClientGrants> {
        let mut path_rules = Vec::new();
        for g in &grants {
            if g.permission.is_path() {
                match paths::PathRule::new(g, workspace) {
                    Ok(r) => path_rules.push(r),
                    Err(e) => {
                        tracing::warn!(client = client_id, pattern = %g.pattern, error = %e, "ignoring an invalid path grant")
                    }
                }
            }
        }
        Ok(ClientGrants {
            client_id: client_id.to_string(),
            grants,
            workspace: workspace.to_path_buf(),
            path_rules,
        })
    }

    /// Whether the client holds `p` for at least one pattern.
    pub fn has(&self, p: Permission) -> bool {
        self.grants.iter().any(|g| g.permission == p)
    }

    /// Whether the client may run `program` (SYSTEM_COMMAND names or `*`).
    pub fn may_run(&self, program: &str) -> bool {
        self.grants.iter().any(|g| {
            g.permission == Permission::SystemCommand && (g.pattern == "*" || g.pattern == program)
        })
    }

    /// SYSTEM_COMMAND `*`: any program, including computed names.
    pub fn may_run_any(&self) -> bool {
        self.grants
            .iter()
            .any(|g| g.permission == Permission::SystemCommand && g.pattern == "*")
    }

    /// Whether a path grant of kind `p` covers directory `dir` (the directory itself or what is in it).
    pub fn covers_dir(&self, p: Permission, dir: &Path) -> bool {
        self.path_rules
            .iter()
            .any(|r| r.permission == p && (r.matches(dir) || r.matches(&dir.join("x"))))
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn path_rules(&self) -> &[paths::PathRule] {
        &self.path_rules
    }

    /// The error a refusal carries: names the missing permission and the operator's fix.
    pub fn missing(&self, p: Permission, what: &str) -> String {
        format!(
            "client {:?} lacks {} for {what} (an operator can grant it: brainloop grant {} {} '{what}', or the client can file a request_permission job)",
            self.client_id,
            p.as_str(),
            self.client_id,
            p.as_str()
        )
    }
}

/// Loads a client's effective grants (config or default, plus operator grants in the database).
pub fn load(
    clients: &Configured,
    workspace: &Path,
    security: &rusqlite::Connection,
    client_id: &str,
) -> Result<ClientGrants> {
    load_with(clients, workspace, security, client_id, Vec::new())
}

/// [`load`], plus `shared`: the grants the fleet registry gives the client on this worker now
/// (`ask::learned::grants_for`, the job's caller passes them).
pub fn load_with(
    clients: &Configured,
    workspace: &Path,
    security: &rusqlite::Connection,
    client_id: &str,
    shared: Vec<Grant>,
) -> Result<ClientGrants> {
    if client_id.is_empty() {
        bail!("empty client id");
    }
    let (cfg, source) = configured(clients, client_id);
    let mut grants = cfg.grants(source);
    grants.extend(store::list(security, Some(client_id))?);
    grants.extend(shared);
    ClientGrants::new(client_id, grants, workspace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_local_is_broad_others_minimal() {
        let cfg = Configured::new();
        let (local, _) = configured(&cfg, "local");
        assert!(local.llm && local.system_command == vec!["*"]);
        let (other, src) = configured(&cfg, "mcp-agent");
        assert_eq!(src, Source::Default);
        assert_eq!(other.system_command, vec!["echo"]);
        assert!(!other.llm && other.file_write.is_empty() && other.network.is_empty());
    }

    #[test]
    fn permissions_parse_case_insensitively_and_refuse_unknown() {
        assert_eq!(
            Permission::parse("file_read").unwrap(),
            Permission::FileRead
        );
        assert_eq!(Permission::parse("LLM").unwrap(), Permission::Llm);
        assert!(Permission::parse("ROOT")
            .unwrap_err()
            .to_string()
            .contains("FILE_READ"));
    }
}
