//! The grants a job starts with (issue 39): **a client's loaded grants are reused only while
//! command_security.db is unchanged**. Grants are written by the operator's CLI alone (another
//! connection, `store.rs`), so the worker's connection's `PRAGMA data_version` — which moves
//! whenever any other connection commits, and never for the worker's own writes — tells
//! whether a set loaded earlier is still the database's: `brainloop grant` / `revoke` (or any
//! other commit by another connection) makes the next job load again, exactly as when every job
//! re-read its grants. The version is read *before* the grants it stamps, so a commit landing
//! between the two only costs a reload, never a stale set. Entries are also tied to the
//! configuration they were built from (`owner`) and to the fleet registry's grants they
//! include (`shared`, compared whole: a pull that changes them, or a copy gone stale, reloads),
//! and the cache holds at most [`MAX`] clients.

use super::{ClientGrants, Configured, Grant};
use anyhow::{Context, Result};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Clients kept at most (job rows name any client: the cache is emptied beyond this).
pub const MAX: usize = 256;

/// The connection's `PRAGMA data_version`.
pub fn data_version(c: &Connection) -> Result<i64> {
    c.query_row("PRAGMA data_version", [], |r| r.get(0))
        .context("PRAGMA data_version")
}

struct Entry<K: ?Sized> {
    version: i64,
    owner: Arc<K>,
    shared: Vec<Grant>,
    grants: Arc<ClientGrants>,
}

/// Loaded grants by client, for one worker connection to command_security.db.
pub struct Cache<K: ?Sized> {
    slots: Mutex<HashMap<String, Entry<K>>>,
}

impl<K: ?Sized> Default for Cache<K> {
    fn default() -> Self {
        Cache {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: ?Sized> Cache<K> {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry<K>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `client`'s grants loaded under `owner` with the registry's `shared`, when `c` (the
    /// connection they were loaded on) has seen no other connection's commit since.
    pub fn fresh(
        &self,
        c: &Connection,
        owner: &Arc<K>,
        client: &str,
        shared: &[Grant],
    ) -> Option<Arc<ClientGrants>> {
        let version = data_version(c).ok()?;
        let slots = self.slots();
        let e = slots.get(client)?;
        (e.version == version && Arc::ptr_eq(&e.owner, owner) && e.shared == shared)
            .then(|| Arc::clone(&e.grants))
    }

    /// Loads `client`'s grants on `c` with the registry's `shared` (`super::load_with`) and
    /// keeps them for [`Cache::fresh`].
    pub fn load(
        &self,
        c: &Connection,
        owner: &Arc<K>,
        clients: &Configured,
        workspace: &Path,
        client: &str,
        shared: Vec<Grant>,
    ) -> Result<Arc<ClientGrants>> {
        let version = data_version(c)?;
        let grants = Arc::new(super::load_with(
            clients,
            workspace,
            c,
            client,
            shared.clone(),
        )?);
        let mut slots = self.slots();
        if slots.len() >= MAX && !slots.contains_key(client) {
            slots.clear();
        }
        slots.insert(
            client.to_string(),
            Entry {
                version,
                owner: Arc::clone(owner),
                shared,
                grants: Arc::clone(&grants),
            },
        );
        Ok(grants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{store, Grant, Permission};

    use crate::db::{migrate, open, DbKind};

    /// The data dir's command_security.db, migrated: (the operator's connection, the worker's).
    fn dbs(data: &Path) -> (Connection, Connection) {
        migrate::migrate(data, DbKind::Security).unwrap();
        (
            open(data, DbKind::Security).unwrap(),
            open(data, DbKind::Security).unwrap(),
        )
    }

    /// Another connection's grant and revoke reach the next load; the worker's own writes and
    /// nothing at all keep the loaded set.
    #[test]
    fn another_connections_commit_makes_the_next_job_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (mut cli, worker) = dbs(dir.path());
        let cfg = Configured::new();
        let owner = Arc::new(());
        let cache: Cache<()> = Cache::default();
        let ws = dir.path();
        assert!(
            cache.fresh(&worker, &owner, "bot", &[]).is_none(),
            "nothing loaded yet"
        );
        let g = cache
            .load(&worker, &owner, &cfg, ws, "bot", vec![])
            .unwrap();
        assert!(!g.may_run("make"));
        assert!(
            cache.fresh(&worker, &owner, "bot", &[]).is_some(),
            "unchanged: reused"
        );
        // The worker's own write does not move its data_version.
        worker
            .execute_batch("CREATE TABLE IF NOT EXISTS scratch(x); INSERT INTO scratch VALUES (1)")
            .unwrap();
        assert!(cache.fresh(&worker, &owner, "bot", &[]).is_some());
        // The operator's grant (another connection) does.
        store::grant(
            &mut cli,
            "bot",
            Permission::SystemCommand,
            "make",
            false,
            "operator:t",
        )
        .unwrap();
        assert!(
            cache.fresh(&worker, &owner, "bot", &[]).is_none(),
            "a grant must reload"
        );
        let g = cache
            .load(&worker, &owner, &cfg, ws, "bot", vec![])
            .unwrap();
        assert!(g.may_run("make"));
        store::revoke(&mut cli, "bot", Permission::SystemCommand, "make").unwrap();
        assert!(
            cache.fresh(&worker, &owner, "bot", &[]).is_none(),
            "a revoke must reload"
        );
        assert!(!cache
            .load(&worker, &owner, &cfg, ws, "bot", vec![])
            .unwrap()
            .may_run("make"));
        // Another configuration is another owner.
        assert!(cache.fresh(&worker, &Arc::new(()), "bot", &[]).is_none());
        // The registry's grants for the client changed (a pull, or its copy gone stale).
        let shared = vec![Grant {
            permission: Permission::SystemCommand,
            pattern: "make".into(),
            auto: false,
            source: crate::clients::Source::Registry,
        }];
        assert!(cache.fresh(&worker, &owner, "bot", &shared).is_none());
        let g = cache
            .load(&worker, &owner, &cfg, ws, "bot", shared.clone())
            .unwrap();
        assert!(g.may_run("make"));
        assert!(cache.fresh(&worker, &owner, "bot", &shared).is_some());
        assert!(
            cache.fresh(&worker, &owner, "bot", &[]).is_none(),
            "stale copy: none shared"
        );
    }

    #[test]
    fn many_clients_never_grow_it_past_max() {
        let dir = tempfile::tempdir().unwrap();
        let (_, c) = dbs(dir.path());
        let (cfg, owner, cache) = (Configured::new(), Arc::new(()), Cache::<()>::default());
        for i in 0..(MAX + 10) {
            cache
                .load(&c, &owner, &cfg, dir.path(), &format!("c{i}"), vec![])
                .unwrap();
        }
        assert!(cache.slots().len() <= MAX);
    }
}
