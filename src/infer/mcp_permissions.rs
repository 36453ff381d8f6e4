//! The MCP tool → permission set mapping (seed 002's `mcp-permissions.yaml`, here TOML): shipped
//! defaults in `config/mcp-permissions.toml`, embedded at build time, with an operator file merged
//! over them. Unknown tools fall back to `[default]` (mcp-standard, validated); a set the profile
//! table marks as never inferred (`trusted`) is refused at load time, and so is an unknown set name.

use crate::permset::PermissionSet;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The shipped defaults.
pub const DEFAULT_MAPPING: &str = include_str!("../../config/mcp-permissions.toml");

/// Whether a call of the tool waits for a human (seed 000 `approvalMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    Hil,
    Auto,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolPermission {
    pub permission_set: PermissionSet,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default = "hil")]
    pub approval: Approval,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub read_ops: Vec<String>,
}

fn hil() -> Approval {
    Approval::Hil
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct MappingFile {
    default: Option<ToolPermission>,
    #[serde(default)]
    tools: BTreeMap<String, ToolPermission>,
}

/// The effective mapping.
#[derive(Debug, Clone, Serialize)]
pub struct McpPermissions {
    default: ToolPermission,
    tools: BTreeMap<String, ToolPermission>,
}

/// How one `mcp.<tool>.<op>` call is classified.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolClass {
    /// The tool's canonical name (`filesystem` for `fs`); `None` when the tool is unknown.
    pub canonical: Option<String>,
    pub permission_set: PermissionSet,
    pub approval: Approval,
}

impl McpPermissions {
    /// The shipped defaults only.
    pub fn defaults() -> McpPermissions {
        // The embedded file is checked by a unit test; fall back to an empty mapping (every
        // tool unknown → mcp-standard with validation) rather than panic.
        Self::from_toml_over(DEFAULT_MAPPING, None).unwrap_or_else(|_| McpPermissions {
            default: ToolPermission {
                permission_set: PermissionSet::McpStandard,
                read_only: false,
                approval: Approval::Hil,
                aliases: vec![],
                read_ops: vec![],
            },
            tools: BTreeMap::new(),
        })
    }

    /// Defaults with the operator file at `path` (if any) merged over them.
    pub fn load(path: Option<&Path>) -> Result<McpPermissions> {
        let base = Self::from_toml_over(DEFAULT_MAPPING, None)
            .context("the shipped config/mcp-permissions.toml is invalid")?;
        match path {
            None => Ok(base),
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| {
                    format!("cannot read MCP permission mapping {}", p.display())
                })?;
                Self::from_toml_over(&text, Some(base))
                    .with_context(|| format!("MCP permission mapping {} is invalid", p.display()))
            }
        }
    }

    /// Parses `text`, merged over `base` (or standing alone when `base` is `None`).
    pub fn from_toml_over(text: &str, base: Option<McpPermissions>) -> Result<McpPermissions> {
        let file: MappingFile = toml::from_str(text)?;
        let mut out = match base {
            Some(b) => b,
            None => McpPermissions {
                default: file.default.clone().context("missing [default] section")?,
                tools: BTreeMap::new(),
            },
        };
        if let Some(d) = file.default {
            out.default = d;
        }
        for (name, t) in file.tools {
            out.tools.insert(name, t);
        }
        out.check()?;
        Ok(out)
    }

    fn check(&self) -> Result<()> {
        let all = std::iter::once(("[default]", &self.default))
            .chain(self.tools.iter().map(|(n, t)| (n.as_str(), t)));
        for (name, t) in all {
            if !t.permission_set.profile().inferred {
                bail!("tool {name}: permission set `{}` is never inferred; map it to mcp-standard and grant trust per client instead", t.permission_set);
            }
        }
        Ok(())
    }

    fn find(&self, tool: &str) -> Option<(&String, &ToolPermission)> {
        self.tools.get_key_value(tool).or_else(|| {
            self.tools
                .iter()
                .find(|(_, t)| t.aliases.iter().any(|a| a == tool))
        })
    }

    /// Classifies a call of `op` (`"*"` when unknown) on `tool`.
    pub fn classify(&self, tool: &str, op: &str) -> ToolClass {
        match self.find(tool) {
            Some((name, t)) => {
                let reads = t.read_ops.iter().any(|r| r == op);
                let set = if reads && t.permission_set == PermissionSet::Filesystem {
                    PermissionSet::Readonly
                } else {
                    t.permission_set
                };
                ToolClass {
                    canonical: Some(name.clone()),
                    permission_set: set,
                    approval: t.approval,
                }
            }
            None => ToolClass {
                canonical: None,
                permission_set: self.default.permission_set,
                approval: self.default.approval,
            },
        }
    }

    /// A short fingerprint of the effective mapping: stored inference results are keyed by it
    /// so a changed mapping is never served stale results.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        hex::encode(&Sha256::digest(json.as_bytes())[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_defaults_parse_and_classify() {
        let m = McpPermissions::load(None).unwrap();
        assert_eq!(
            m.classify("fs", "read").permission_set,
            PermissionSet::Readonly
        );
        assert_eq!(
            m.classify("fs", "write").permission_set,
            PermissionSet::Filesystem
        );
        assert_eq!(
            m.classify("filesystem", "read").canonical.as_deref(),
            Some("filesystem")
        );
        assert_eq!(
            m.classify("github", "createIssue").permission_set,
            PermissionSet::NetworkApi
        );
        assert_eq!(
            m.classify("db", "query").permission_set,
            PermissionSet::Readonly
        );
        let u = m.classify("nobody_knows", "x");
        assert_eq!(
            (u.canonical, u.permission_set, u.approval),
            (None, PermissionSet::McpStandard, Approval::Hil)
        );
        assert_eq!(McpPermissions::defaults().fingerprint(), m.fingerprint());
    }

    #[test]
    fn operator_file_merges_and_trusted_is_refused() {
        let m = McpPermissions::from_toml_over(
            "[tools.slack]\npermission_set = \"network-api\"\napproval = \"auto\"\n[tools.mine]\npermission_set = \"readonly\"\nread_only = true\n",
            Some(McpPermissions::defaults()),
        )
        .unwrap();
        assert_eq!(m.classify("slack", "send").approval, Approval::Auto);
        assert_eq!(
            m.classify("mine", "x").permission_set,
            PermissionSet::Readonly
        );
        assert_eq!(
            m.classify("fs", "read").permission_set,
            PermissionSet::Readonly
        );
        assert_ne!(m.fingerprint(), McpPermissions::defaults().fingerprint());
        let e = McpPermissions::from_toml_over(
            "[tools.x]\npermission_set = \"trusted\"\n",
            Some(McpPermissions::defaults()),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("never inferred"), "{e:#}");
        assert!(McpPermissions::from_toml_over(
            "[tools.x]\npermission_set = \"root\"\n",
            Some(McpPermissions::defaults())
        )
        .is_err());
    }
}
