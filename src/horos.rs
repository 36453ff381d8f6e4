//! Registration in a HOROS registry database (seed 001: "Projet enregistré dans HOROS.db, type
//! worker, pattern 5-BDD, temporalité streaming 24/7") when `horos_registry` is configured. A
//! separate connection to that file — never an ATTACH from the worker's databases. Failures are
//! logged, never fatal: the registry is informational.

use rusqlite::{params, Connection};
use std::path::Path;

fn write(path: &Path, name: &str, state: &str, data_dir: &Path) -> anyhow::Result<()> {
    let c = Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS projects (
            name        TEXT PRIMARY KEY,
            type        TEXT NOT NULL,
            pattern     TEXT NOT NULL,
            state       TEXT NOT NULL,
            temporality TEXT NOT NULL,
            data_dir    TEXT,
            pid         INTEGER,
            version     TEXT,
            updated_at  INTEGER NOT NULL
        )",
    )?;
    let data_dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    c.execute(
        "INSERT INTO projects(name, type, pattern, state, temporality, data_dir, pid, version, updated_at)
         VALUES (?1, 'worker', '5-BDD', ?2, 'streaming 24/7', ?3, ?4, ?5, ?6)
         ON CONFLICT(name) DO UPDATE SET state = excluded.state, data_dir = excluded.data_dir,
             pid = excluded.pid, version = excluded.version, updated_at = excluded.updated_at",
        params![
            name,
            state,
            data_dir.display().to_string(),
            std::process::id(),
            env!("CARGO_PKG_VERSION"),
            crate::time::now_ms()
        ],
    )?;
    Ok(())
}

/// Where and as what the worker registers (`horos_registry`, `horos_name`, its data dir).
pub struct Registration<'a> {
    pub registry: Option<&'a Path>,
    pub name: &'a str,
    pub data_dir: &'a Path,
}

/// Records the worker's state (`running`, `stopped`) if a registry is configured.
pub fn register(r: &Registration, state: &str) {
    let Some(path) = r.registry else {
        return;
    };
    if let Err(e) = write(path, r.name, state, r.data_dir) {
        tracing::warn!(registry = %path.display(), error = format!("{e:#}"), "cannot update the HOROS registry");
    }
}
