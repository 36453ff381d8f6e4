//! The API key: from `CEREBRAS_API_KEY`, else `[llm] api_key_file`, else the systemd credential
//! `$CREDENTIALS_DIRECTORY/cerebras_api_key` (`LoadCredential=`). Trimmed; an empty key means no
//! key. The key lives only in this process's memory (the worker is not dumpable): it is never
//! logged (`Debug` is redacted, there is no `Display`), never stored in a database, and never
//! passed to commands (their environment is an allowlist).

use super::LlmConfig;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The environment variable holding the key.
pub const ENV_VAR: &str = "CEREBRAS_API_KEY";
/// The credential name under `$CREDENTIALS_DIRECTORY`.
pub const CREDENTIAL: &str = "cerebras_api_key";

/// A secret; deliberately without `Display` or `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl ApiKey {
    /// A trimmed key, or `None` if it is empty.
    pub fn new(raw: &str) -> Option<ApiKey> {
        let t = raw.trim();
        (!t.is_empty()).then(|| ApiKey(t.to_string()))
    }

    /// The value for the `Authorization` header (only the HTTP client calls this).
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// Where the key came from (logged instead of the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env,
    File(PathBuf),
    Credential(PathBuf),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Env => write!(f, "${ENV_VAR}"),
            KeySource::File(p) => write!(f, "file {}", p.display()),
            KeySource::Credential(p) => write!(f, "systemd credential {}", p.display()),
        }
    }
}

/// The outcome of looking for a key.
#[derive(Debug)]
pub enum Found {
    Key(ApiKey, KeySource),
    /// No key anywhere (not an error: LLM actions say so).
    None,
    /// A configured source exists but cannot be used (the reason, without the key).
    Unusable(String),
}

fn read_file(p: &Path) -> Result<Option<ApiKey>, String> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| format!("cannot read the API key file {}: {e}", p.display()))?;
    if let Ok(m) = std::fs::metadata(p) {
        if m.permissions().mode() & 0o077 != 0 {
            tracing::warn!(file = %p.display(), "the API key file is readable by other users; chmod 600 it");
        }
    }
    Ok(ApiKey::new(&text))
}

/// Looks for the key; `get` reads the environment (injectable for tests).
pub fn find(cfg: &LlmConfig, get: impl Fn(&str) -> Option<String>) -> Found {
    if let Some(k) = get(ENV_VAR).as_deref().and_then(ApiKey::new) {
        return Found::Key(k, KeySource::Env);
    }
    if let Some(p) = &cfg.api_key_file {
        return match read_file(p) {
            Ok(Some(k)) => Found::Key(k, KeySource::File(p.clone())),
            Ok(None) => Found::Unusable(format!("the API key file {} is empty", p.display())),
            Err(e) => Found::Unusable(e),
        };
    }
    if let Some(dir) = get("CREDENTIALS_DIRECTORY") {
        let p = Path::new(&dir).join(CREDENTIAL);
        if p.exists() {
            return match read_file(&p) {
                Ok(Some(k)) => Found::Key(k, KeySource::Credential(p)),
                Ok(None) => Found::Unusable(format!("the credential {} is empty", p.display())),
                Err(e) => Found::Unusable(e),
            };
        }
    }
    Found::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_first_trimmed_and_empty_means_none() {
        let cfg = LlmConfig::default();
        let f = find(&cfg, |k| (k == ENV_VAR).then(|| "  sk-123\n".to_string()));
        assert!(matches!(f, Found::Key(ref k, KeySource::Env) if k.expose() == "sk-123"));
        assert!(matches!(
            find(&cfg, |k| (k == ENV_VAR).then(|| "  \n".to_string())),
            Found::None
        ));
        assert_eq!(
            format!("{:?}", ApiKey::new("secret").unwrap()),
            "ApiKey([redacted])"
        );
    }

    #[test]
    fn files_and_credentials() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(CREDENTIAL), "cred-key\n").unwrap();
        let cfg = LlmConfig::default();
        let dir = d.path().display().to_string();
        match find(&cfg, |k| {
            (k == "CREDENTIALS_DIRECTORY").then(|| dir.clone())
        }) {
            Found::Key(k, KeySource::Credential(_)) => assert_eq!(k.expose(), "cred-key"),
            other => panic!("{other:?}"),
        }
        let empty = d.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let cfg = LlmConfig {
            api_key_file: Some(empty),
            ..LlmConfig::default()
        };
        assert!(matches!(find(&cfg, |_| None), Found::Unusable(ref m) if m.contains("empty")));
        let cfg = LlmConfig {
            api_key_file: Some(d.path().join("missing")),
            ..LlmConfig::default()
        };
        assert!(matches!(find(&cfg, |_| None), Found::Unusable(_)));
    }
}
