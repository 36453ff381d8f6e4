//! The fleet's evidence (issue 37): **how many human approvals, and denials, a signature has
//! for a client across the fleet**. The one answer to that question: the registry's
//! `fleet_evidence` view (migration 5), which counts only decision rows a member of
//! `brainloop_operator` wrote (never a reviewer's, `decided_by 'reviewer:…'`) — the first such
//! decision of each validation, joined to the signatures its worker published with it. Nothing
//! a worker reports counts: not its validations' `status`, not its applied change sets, not
//! the approvals and runs counted in its own SQLite files; a worker's role reads the view and
//! can write neither it nor the decision rows it counts (PostgreSQL refuses it), so a
//! compromised worker cannot forge its way into the fleet's learning.
//!
//! The worker's bridge (`ask::fleet`) pulls the counts at each pass (a decision anywhere
//! `NOTIFY`s every worker) into an in-memory copy, and `bash::signatures` — where a signature's
//! learning by approvals is decided — asks [`approvals`] / [`reached`] instead of reading only
//! its local count: the threshold (`signature_approvals`) and every other check stay the
//! local ones. Fail closed: the approvals are used only from a fresh copy (as the learned
//! rules, `[registry] learned_fresh_ms`; none before the first pull, none once the registry
//! fails), and a human denial of the signature for the client on any worker stops the fleet's
//! approvals from counting for it (the local count still does, as on one machine). Without
//! `[registry]` nothing here is ever filled: the local count alone, as before.

use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Mutex;

/// The fleet's human decisions on one signature for one client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Count {
    pub client_id: String,
    pub signature: String,
    /// Validations carrying it a human approved (`approve`, `--always`, `--always-ask`).
    pub approvals: i64,
    /// Validations carrying it a human denied (`deny`, `--never`).
    pub denials: i64,
    /// How many workers asked the approved ones.
    pub workers: i64,
    pub last_decided_at: Option<i64>,
}

/// Any role: the registry's counts (`fleet_evidence`), by client and signature.
pub fn list(c: &mut crate::registry::Client) -> Result<Vec<Count>> {
    let rows = c
        .query(
            "SELECT client_id, signature, approvals, denials, workers, last_decided_at
             FROM fleet_evidence ORDER BY client_id, signature",
            &[],
        )
        .context("reading the registry's fleet_evidence (registry migrate to version 5?)")?;
    rows.iter()
        .map(|r| {
            Ok(Count {
                client_id: r.try_get(0)?,
                signature: r.try_get(1)?,
                approvals: r.try_get(2)?,
                denials: r.try_get(3)?,
                workers: r.try_get(4)?,
                last_decided_at: r.try_get(5)?,
            })
        })
        .collect()
}

// ---- The worker's copy ----

struct Copy {
    /// (client, signature) → (approvals, denials).
    counts: HashMap<(String, String), (i64, i64)>,
    /// The registry's last decision id when pulled: unchanged, nothing to read again.
    last_decision: i64,
    /// `time::mono_ms()` of the last successful pull.
    pulled: i64,
    fresh_ms: i64,
}

static COPY: Mutex<Option<Copy>> = Mutex::new(None);

/// Worker side (the bridge, at each pass): refreshes the copy — read again only when a
/// decision was written since — fresh from now. Returns whether the counts changed.
pub fn pull(c: &mut crate::registry::Client, fresh_ms: u64) -> Result<bool> {
    let last: i64 = c
        .query_one("SELECT last_decision FROM fleet_evidence_version", &[])
        .context("reading the registry's fleet_evidence_version")?
        .try_get(0)?;
    let fresh_ms = fresh_ms.min(i64::MAX as u64) as i64;
    {
        let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(copy) = g.as_mut().filter(|k| k.last_decision == last) {
            copy.pulled = crate::time::mono_ms();
            copy.fresh_ms = fresh_ms;
            return Ok(false);
        }
    }
    let counts: HashMap<(String, String), (i64, i64)> = list(c)?
        .into_iter()
        .map(|n| ((n.client_id, n.signature), (n.approvals, n.denials)))
        .collect();
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    let changed = g.as_ref().is_none_or(|old| old.counts != counts);
    *g = Some(Copy {
        counts,
        last_decision: last,
        pulled: crate::time::mono_ms(),
        fresh_ms,
    });
    Ok(changed)
}

/// Worker side (the bridge, when the registry fails): drops the copy at once.
pub fn forget() {
    let mut g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    *g = None;
}

/// `f` over the copy's counts, if the copy is fresh.
fn fresh<T>(f: impl FnOnce(&HashMap<(String, String), (i64, i64)>) -> T) -> Option<T> {
    // A registry restored from a backup counts approvals the operator may have taken back.
    if super::epoch::restored() {
        return None;
    }
    let g = COPY.lock().unwrap_or_else(|p| p.into_inner());
    let copy = g.as_ref()?;
    if crate::time::mono_ms().saturating_sub(copy.pulled) > copy.fresh_ms {
        return None;
    }
    Some(f(&copy.counts))
}

/// The fleet's approvals that may count for (client, sig): none when a human denied it for
/// the client anywhere, or the copy is stale or absent.
fn fleet_approvals(counts: &HashMap<(String, String), (i64, i64)>, client: &str, sig: &str) -> i64 {
    match counts.get(&(client.to_string(), sig.to_string())) {
        Some(&(a, 0)) => a,
        _ => 0,
    }
}

/// **The human approvals that count toward learning `sig` for `client` on this worker**:
/// `local` (its own `signature_evidence`, as on one machine) or the fleet's count from the
/// registry's decision rows when that is larger (it includes this worker's own validations
/// decided there, so the two are never added).
pub fn approvals(client: &str, sig: &str, local: i64) -> i64 {
    let fleet = fresh(|c| fleet_approvals(c, client, sig)).unwrap_or(0);
    local.max(fleet)
}

/// The signatures whose fleet approvals alone reach `threshold` for `client` now (a fresh
/// copy only): what `bash::signatures` adds to the learned ones it checks itself.
pub fn reached(client: &str, threshold: u32) -> Vec<String> {
    fresh(|c| {
        c.keys()
            .filter(|(cl, s)| cl == client && fleet_approvals(c, cl, s) >= threshold as i64)
            .map(|(_, s)| s.clone())
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_denial_stops_the_fleets_approvals_and_the_larger_count_wins() {
        let mut m = HashMap::new();
        m.insert(
            ("local".to_string(), "sed -i EXPR WS_PATH".to_string()),
            (5, 0),
        );
        m.insert(("local".to_string(), "rm WS_PATH".to_string()), (9, 1));
        assert_eq!(fleet_approvals(&m, "local", "sed -i EXPR WS_PATH"), 5);
        assert_eq!(fleet_approvals(&m, "ci", "sed -i EXPR WS_PATH"), 0);
        assert_eq!(fleet_approvals(&m, "local", "rm WS_PATH"), 0, "denied once");
        // No copy (no registry, or not pulled yet): the local count alone.
        forget();
        assert_eq!(approvals("local", "sed -i EXPR WS_PATH", 3), 3);
        assert!(reached("local", 1).is_empty());
        *COPY.lock().unwrap() = Some(Copy {
            counts: m,
            last_decision: 1,
            pulled: crate::time::mono_ms(),
            fresh_ms: 60_000,
        });
        assert_eq!(approvals("local", "sed -i EXPR WS_PATH", 3), 5);
        assert_eq!(approvals("local", "sed -i EXPR WS_PATH", 7), 7);
        assert_eq!(reached("local", 5), vec!["sed -i EXPR WS_PATH".to_string()]);
        assert!(reached("local", 6).is_empty());
        // A stale copy counts nothing.
        COPY.lock().unwrap().as_mut().unwrap().pulled -= 120_000;
        assert_eq!(approvals("local", "sed -i EXPR WS_PATH", 3), 3);
        forget();
    }
}
