//! The readers' digest cache in lifecycle.db `cache`: keyed by action, real path, size,
//! nanosecond mtime and params; entries live one hour (seed 001). A cache failure is never an
//! error for the job: the digest is simply recomputed.

use crate::db::{write_tx, Stores};
use rusqlite::{params, OptionalExtension};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;

pub const TTL_MS: i64 = 3_600_000;

pub fn key(action: &str, path: &Path, size: u64, mtime_ns: i128, params: &Value) -> String {
    let mut h = Sha256::new();
    for part in [
        action.as_bytes(),
        path.as_os_str().as_encoded_bytes(),
        &size.to_le_bytes(),
        &mtime_ns.to_le_bytes(),
        params.to_string().as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex::encode(h.finalize())
}

pub fn get(stores: &Stores, key: &str) -> Option<Value> {
    let now = crate::time::now_ms();
    stores
        .lifecycle
        .with(|c| {
            Ok(c.query_row(
                "SELECT value FROM cache WHERE cache_key = ?1 AND expires_at > ?2",
                params![key, now],
                |r| r.get::<_, String>(0),
            )
            .optional()?)
        })
        .ok()
        .flatten()
        .and_then(|s| serde_json::from_str(&s).ok())
}

pub fn put(stores: &Stores, key: &str, path: &Path, size: u64, mtime_ns: i128, value: &Value) {
    let now = crate::time::now_ms();
    let res = stores.lifecycle.with(|c| {
        Ok(write_tx(c, |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO cache(cache_key, path, size, mtime_ns, value, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    key,
                    path.to_string_lossy(),
                    size as i64,
                    mtime_ns as i64,
                    value.to_string(),
                    now,
                    now + TTL_MS
                ],
            )
        })?)
    });
    if let Err(e) = res {
        tracing::warn!(
            error = format!("{e:#}"),
            "cannot store a reader digest in the cache"
        );
    }
}
