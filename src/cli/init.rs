//! `brainloop init`: creates or upgrades the databases (also done by `run` at start).

use crate::config::Config;
use crate::db::migrate;
use anyhow::Result;
use std::os::unix::fs::PermissionsExt;

pub fn run(config: &Config) -> Result<i32> {
    migrate::migrate_all(&config.data_dir)?;
    println!("brainloop data dir: {}", config.data_dir.display());
    for (kind, version) in migrate::versions(&config.data_dir) {
        let path = kind.path(&config.data_dir);
        let mode = std::fs::metadata(&path)
            .map(|m| format!("{:o}", m.permissions().mode() & 0o7777))
            .unwrap_or_else(|_| "?".into());
        println!(
            "  {:<26} schema v{}  mode {}",
            kind.file_name(),
            version.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
            mode
        );
    }
    Ok(0)
}
