//! A registry that goes back in time (issue 50, finding 3): **whether this worker may trust the
//! registry's permissive rules after the registry was restored from a backup.** A restore from
//! an older `pg_dump` brings back what the operator revoked since; the worker notices it by the
//! registry's identity, read at each pass of the bridge (`ask::fleet`) and compared with the
//! one it saw last (saved in command_security.db `registry_epoch`, this module its one owner):
//!
//! * the database's oid and the oid of its `registry_epochs` table — a database dropped and
//!   recreated, or tables recreated in place (`pg_restore --clean`), get new ones;
//! * the generation — the sequence `registry_generation`, which every statement writing a
//!   registry table moves forward (registry migration 9) — moving backwards (a restore of the
//!   whole cluster to an earlier point);
//! * the epoch — the newest row of `registry_epochs`, which only the operator's
//!   `brainloop registry accept-restore` adds (none before the first) — going back to one seen
//!   before.
//!
//! Any of them and the registry is **restored** for this worker until the operator runs
//! `accept-restore` (an epoch this worker has never seen): meanwhile [`restored`] is true and
//! `ask::learned` uses none of the registry's permissive rules (learned signatures,
//! `always_allow`, host rules, shared grants) nor `ask::evidence` its approvals, while the
//! restrictive ones (`never`, `always_ask`) of both the registry and the worker's last copy
//! from before the restore stay in force; the bridge publishes again every validation it has
//! pending or closed in the last day (the restored registry lost them, or shows them pending);
//! `status` names the problem and the fix. The state is saved, so a restart does not forget it.

use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};

/// The `status` problem while the registry is restored and not accepted.
pub const PROBLEM: &str = "registry-restored";

/// The registry's identity as one pass reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The newest `registry_epochs.epoch` (accept-restore adds one); empty before the first.
    pub epoch: String,
    /// `registry_generation`'s last value.
    pub generation: i64,
    /// The registry database's oid.
    pub database_oid: i64,
    /// `registry_epochs`'s oid (a table recreated by a restore in place gets another).
    pub table_oid: i64,
    /// The database and table oids the newest epoch was written in: an epoch accepts only the
    /// database it was written in (one restored from a dump carries its old oids).
    pub epoch_oids: (i64, i64),
}

impl Identity {
    /// Whether the newest epoch was written in this very database and table.
    fn epoch_is_here(&self) -> bool {
        self.epoch_oids == (self.database_oid, self.table_oid)
    }
}

/// What the worker saved: the identity it last trusted, the epochs it has seen, and the
/// restore it noticed (None: none pending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub trusted: Identity,
    pub known: Vec<String>,
    pub restored: Option<(i64, String)>,
}

/// What one pass decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Trust the registry; `save`: the saved identity moved (a new generation or epoch).
    Trusted { save: bool },
    /// Restored, noticed at this pass: why.
    NewlyRestored(String),
    /// Restored, as noticed before (no acceptance yet): why.
    StillRestored(String),
    /// The operator accepted the restore (a new epoch): trust the registry again.
    Accepted,
}

static RESTORED: AtomicBool = AtomicBool::new(false);

/// Whether the registry is restored and not accepted: its permissive rules are not used.
pub fn restored() -> bool {
    RESTORED.load(Ordering::SeqCst)
}

/// The one decision: what `cur` means after `saved`.
pub fn judge(saved: Option<&Saved>, cur: &Identity) -> Verdict {
    let Some(s) = saved else {
        return Verdict::Trusted { save: true };
    };
    // An epoch this worker has never seen, written in this very database: the operator's
    // accept-restore, made after the restore (a dump's epochs carry the oids of the database
    // they were written in, and the worker marks the one it finds when it notices a restore).
    let accepted = !s.known.contains(&cur.epoch) && cur.epoch_is_here();
    if let Some((_, why)) = &s.restored {
        if accepted {
            return Verdict::Accepted;
        }
        return Verdict::StillRestored(why.clone());
    }
    let t = &s.trusted;
    let why = if cur.database_oid != t.database_oid {
        Some(format!(
            "its database was recreated (oid {} → {}: restored from a backup?)",
            t.database_oid, cur.database_oid
        ))
    } else if cur.table_oid != t.table_oid {
        Some("its tables were recreated (restored in place from a backup?)".to_string())
    } else if cur.generation < t.generation {
        Some(format!(
            "its generation went back from {} to {} (restored from an earlier backup?)",
            t.generation, cur.generation
        ))
    } else if cur.epoch != t.epoch && s.known.contains(&cur.epoch) {
        Some("its epoch went back to one seen before (restored from an earlier backup?)".into())
    } else {
        None
    };
    match why {
        // Accepted before this worker noticed the database or tables change: not restored for
        // it (a generation gone back with the same oids is a restore whatever the epoch says).
        Some(_)
            if accepted && (cur.database_oid, cur.table_oid) != (t.database_oid, t.table_oid) =>
        {
            Verdict::Accepted
        }
        Some(w) => Verdict::NewlyRestored(w),
        None => Verdict::Trusted {
            save: (&cur.epoch, cur.generation) != (&t.epoch, t.generation),
        },
    }
}

/// Reads the registry's identity (any role).
pub fn read(c: &mut crate::registry::Client) -> Result<Identity> {
    let r = c
        .query_one(
            "SELECT coalesce(e.epoch::text, ''), (SELECT last_value FROM registry_generation),
                    (SELECT oid::bigint FROM pg_database WHERE datname = current_database()),
                    to_regclass('registry_epochs')::oid::bigint,
                    coalesce(e.database_oid, 0), coalesce(e.table_oid, 0)
             FROM (SELECT 1) one
             LEFT JOIN (SELECT epoch, database_oid, table_oid FROM registry_epochs
                        ORDER BY id DESC LIMIT 1) e ON true",
            &[],
        )
        .context("reading the registry's epoch")?;
    Ok(Identity {
        epoch: r.try_get(0)?,
        generation: r.try_get(1)?,
        database_oid: r.try_get(2)?,
        table_oid: r.try_get(3)?,
        epoch_oids: (r.try_get(4)?, r.try_get(5)?),
    })
}

/// The saved state (None: this worker never saw the registry).
pub fn saved(sec: &rusqlite::Connection) -> Result<Option<Saved>> {
    use rusqlite::OptionalExtension;
    sec.query_row(
        "SELECT epoch, generation, database_oid, table_oid, known, restored_at, restored_why
         FROM registry_epoch WHERE id = 1",
        [],
        |r| {
            let (database_oid, table_oid) = (r.get(2)?, r.get(3)?);
            Ok((
                Identity {
                    epoch: r.get(0)?,
                    generation: r.get(1)?,
                    database_oid,
                    table_oid,
                    epoch_oids: (database_oid, table_oid),
                },
                r.get::<_, String>(4)?,
                r.get::<_, Option<i64>>(5)?,
                r.get::<_, Option<String>>(6)?,
            ))
        },
    )
    .optional()
    .context("reading registry_epoch (command_security.db)")?
    .map(|(trusted, known, at, why)| {
        Ok(Saved {
            trusted,
            known: serde_json::from_str(&known).unwrap_or_default(),
            restored: at.map(|a| (a, why.unwrap_or_default())),
        })
    })
    .transpose()
}

fn save(sec: &rusqlite::Connection, s: &Saved) -> Result<()> {
    let known = serde_json::to_string(&s.known)?;
    sec.execute(
        "INSERT INTO registry_epoch(id, epoch, generation, database_oid, table_oid, known, restored_at, restored_why)
         VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(id) DO UPDATE SET epoch = excluded.epoch, generation = excluded.generation,
           database_oid = excluded.database_oid, table_oid = excluded.table_oid, known = excluded.known,
           restored_at = excluded.restored_at, restored_why = excluded.restored_why",
        rusqlite::params![
            s.trusted.epoch,
            s.trusted.generation,
            s.trusted.database_oid,
            s.trusted.table_oid,
            known,
            s.restored.as_ref().map(|r| r.0),
            s.restored.as_ref().map(|r| r.1.clone()),
        ],
    )
    .context("saving registry_epoch (command_security.db)")?;
    Ok(())
}

/// Worker side, at each pass before the rules are pulled: reads the identity, judges it,
/// saves what changed and sets [`restored`]. Returns the verdict (the bridge publishes again
/// on `NewlyRestored`, and sets or clears the `status` problem).
pub fn check(c: &mut crate::registry::Client, sec: &rusqlite::Connection) -> Result<Verdict> {
    let cur = read(c)?;
    let old = saved(sec)?;
    let v = judge(old.as_ref(), &cur);
    let remember = |mut known: Vec<String>| {
        if !cur.epoch.is_empty() && !known.contains(&cur.epoch) {
            known.push(cur.epoch.clone());
        }
        // Bounded: an epoch is added only by an operator's accept-restore.
        let over = known.len().saturating_sub(1000);
        known.drain(..over);
        known
    };
    let known = old.as_ref().map(|s| s.known.clone()).unwrap_or_default();
    match &v {
        Verdict::Trusted { save: true } | Verdict::Accepted => save(
            sec,
            &Saved {
                trusted: cur.clone(),
                known: remember(known),
                restored: None,
            },
        )?,
        // The epoch found with the restore is not its acceptance.
        Verdict::NewlyRestored(why) => save(
            sec,
            &Saved {
                trusted: old.as_ref().map_or(cur.clone(), |s| s.trusted.clone()),
                known: remember(known),
                restored: Some((crate::time::now_ms(), why.clone())),
            },
        )?,
        Verdict::Trusted { save: false } | Verdict::StillRestored(_) => {}
    }
    RESTORED.store(
        matches!(v, Verdict::NewlyRestored(_) | Verdict::StillRestored(_)),
        Ordering::SeqCst,
    );
    Ok(v)
}

/// Worker side, at start-up (before any job): a restore noticed before the restart still
/// holds until the bridge sees it accepted.
pub fn load(sec: &rusqlite::Connection) -> Result<bool> {
    let r = saved(sec)?.is_some_and(|s| s.restored.is_some());
    RESTORED.store(r, Ordering::SeqCst);
    Ok(r)
}

/// Operator side (`brainloop registry accept-restore`): a new epoch, under the operator's role;
/// every worker that noticed the restore trusts the registry again at its next pass. Returns
/// the epoch.
pub fn accept(c: &mut crate::registry::Client, by: &str, now: i64) -> Result<String> {
    let r = c
        .query_one(
            "INSERT INTO registry_epochs(accepted_by, created_at, database_oid, table_oid)
             SELECT $1, $2, oid::bigint, to_regclass('registry_epochs')::oid::bigint
             FROM pg_database WHERE datname = current_database() RETURNING epoch::text",
            &[&by, &now],
        )
        .context("writing a new epoch in the registry (is this the operator's role?)")?;
    Ok(r.try_get(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An identity whose newest epoch was written in this database.
    fn id(epoch: &str, generation: i64, db: i64, table: i64) -> Identity {
        Identity {
            epoch: epoch.into(),
            generation,
            database_oid: db,
            table_oid: table,
            epoch_oids: (db, table),
        }
    }

    /// An identity restored from a dump: its newest epoch was written in database 5, table 7.
    fn dumped(epoch: &str, generation: i64, db: i64, table: i64) -> Identity {
        Identity {
            epoch_oids: (5, 7),
            ..id(epoch, generation, db, table)
        }
    }

    fn trusted(t: Identity) -> Saved {
        Saved {
            known: vec![t.epoch.clone()],
            trusted: t,
            restored: None,
        }
    }

    #[test]
    fn every_way_back_is_a_restore_and_only_a_new_epoch_accepts_it() {
        let t = id("e1", 100, 5, 7);
        let s = trusted(t.clone());
        assert_eq!(judge(None, &t), Verdict::Trusted { save: true });
        assert_eq!(judge(Some(&s), &t), Verdict::Trusted { save: false });
        assert_eq!(
            judge(Some(&s), &id("e1", 101, 5, 7)),
            Verdict::Trusted { save: true }
        );
        // accept-restore run needlessly: a new epoch, nothing went back.
        assert_eq!(
            judge(Some(&s), &id("e2", 101, 5, 7)),
            Verdict::Trusted { save: true }
        );
        for back in [
            dumped("e1", 100, 6, 7),
            dumped("e1", 100, 5, 8),
            id("e1", 99, 5, 7),
            // An epoch never seen, but written in the database the dump came from.
            dumped("e9", 100, 6, 9),
        ] {
            assert!(
                matches!(judge(Some(&s), &back), Verdict::NewlyRestored(_)),
                "{back:?}"
            );
        }
        let mut s2 = trusted(id("e2", 200, 5, 7));
        s2.known = vec!["e1".into(), "e2".into()];
        assert!(matches!(
            judge(Some(&s2), &id("e1", 250, 5, 7)),
            Verdict::NewlyRestored(_)
        ));
        // A generation gone back is a restore even under an epoch never seen.
        assert!(matches!(
            judge(Some(&s2), &id("e3", 150, 5, 7)),
            Verdict::NewlyRestored(_)
        ));
        // Restored: the dump's epochs do not accept it (known, or written elsewhere), a new
        // one written in this database does.
        let mut r = s2.clone();
        r.restored = Some((1, "why".into()));
        for still in [
            dumped("e1", 300, 6, 9),
            dumped("e2", 300, 6, 9),
            dumped("e4", 300, 6, 9),
        ] {
            assert_eq!(
                judge(Some(&r), &still),
                Verdict::StillRestored("why".into()),
                "{still:?}"
            );
        }
        assert_eq!(judge(Some(&r), &id("e3", 10, 6, 9)), Verdict::Accepted);
        // The operator accepted the new database before this worker first saw it.
        assert_eq!(judge(Some(&s2), &id("e5", 10, 6, 9)), Verdict::Accepted);
    }
}
