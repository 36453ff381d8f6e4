//! What a fleet worker's registry bridge (`ask::fleet`, issue 37) needs of the layers above
//! `ask`: the payload a new validation is published with (`hooks::payload`, what the
//! operator's `show` and `review` print on any machine), this worker's applied change sets
//! (`bash::journal`), the undo an operator requested (`bash::journal::undo`, the local `undo`
//! with its checks), and this worker's limits on a reviewer's approve (`hooks::refusals_now`).
//! It owns no decision: it hands each to its owner.

use crate::ask::fleet::Local;
use crate::ask::validations::{FleetApplied, Validation};
use crate::db::{self, DbKind, Stores};
use anyhow::Result;
use std::sync::Arc;

pub struct FleetLocal {
    pub stores: Arc<Stores>,
    pub paths: crate::permset::PathLists,
}

impl FleetLocal {
    fn payload(&self, v: &Validation) -> Result<serde_json::Value> {
        let life = db::open_read_only(&self.stores.data_dir, DbKind::Lifecycle)?;
        let mut p = crate::hooks::payload::build(&life, &self.stores.data_dir, v, "validation");
        let request = self
            .stores
            .security
            .with(|s| crate::egress::store::request(s, &v.id))?;
        crate::hooks::payload::add_network(&mut p, request.as_ref());
        Ok(p)
    }
}

impl Local for FleetLocal {
    fn detail(&self, v: &Validation) -> Option<String> {
        match self.payload(v) {
            Ok(p) => Some(p.to_string()),
            Err(e) => {
                tracing::warn!(validation_id = %v.id, error = format!("{e:#}"), "cannot build the validation's detail for the registry");
                None
            }
        }
    }

    fn applied(&self, since: i64) -> Result<Vec<FleetApplied>> {
        let rows = self
            .stores
            .security
            .with(|s| crate::bash::journal::since(s, since))?;
        Ok(rows
            .into_iter()
            .map(|j| FleetApplied {
                worker: String::new(),
                job_id: j.job_id,
                validation_id: j.validation_id,
                command: j.command,
                summary: j.summary,
                policy_used: j.policy_used,
                decided_by: j.decided_by,
                applied_at: j.applied_at,
                undone_at: j.undone_at,
                diff: j
                    .diff
                    .map(|d| crate::quote::prefix(&d, crate::hooks::payload::DIFF_MAX)),
            })
            .collect())
    }

    fn undo(&self, job_id: i64) -> Result<Vec<String>> {
        // Through a connection of its own, as the operator's `undo` writes.
        let mut sec = db::open(&self.stores.data_dir, DbKind::Security)?;
        crate::bash::journal::undo(&mut sec, &self.stores.data_dir, job_id)
    }

    fn reviewer_refusals(&self, v: &Validation) -> Vec<String> {
        let p = match self.payload(v) {
            Ok(p) => p,
            Err(e) => return vec![format!("cannot build what the reviewer was shown: {e:#}")],
        };
        let out = match self.stores.output_readers.get() {
            Ok(o) => o,
            Err(e) => return vec![format!("no output.db reader: {e}")],
        };
        let dd = self.stores.data_dir.clone();
        self.stores
            .security
            .with(|s| Ok(crate::hooks::refusals_now(s, &out, &self.paths, &dd, v, &p)))
            .unwrap_or_else(|e| vec![format!("cannot check the change set: {e:#}")])
    }
}
