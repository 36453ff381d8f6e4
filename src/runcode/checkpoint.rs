//! Checkpoints of a run in lifecycle.db `sessions` (one row per job, `session_id =
//! "run_code:<job>"`, mode `run_code`): the completed tool calls with their answers, the seed
//! of `Math.random`, the clock readings and the validations already granted. A re-run of the
//! same job (after a pause and approval, a shutdown, or a crash) re-executes the code
//! deterministically and answers completed calls from here instead of repeating their side
//! effects. The rows are written through `db::sessions`; the state is bound to the code's hash.

use crate::db::Db;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// One completed tool call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CallRecord {
    /// SHA-256 of tool, op and params.
    pub key: String,
    /// Occurrence of this key in the run (the n-th identical call).
    pub n: usize,
    pub tool: String,
    pub op: String,
    pub ok: bool,
    /// The answer as JSON text, or the error message.
    pub answer: String,
    pub ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct State {
    /// Hash of language + code: a checkpoint of other code is ignored.
    pub code_key: String,
    pub seed: i32,
    pub times: Vec<i64>,
    pub calls: Vec<CallRecord>,
    /// Validations granted so far (`layer:N`, `all`).
    pub approved: Vec<String>,
}

/// Clock readings kept at most (later readings of a long loop are not replayed).
pub const MAX_TIMES: usize = 10_000;

impl State {
    pub fn find(&self, key: &str, n: usize) -> Option<&CallRecord> {
        self.calls.iter().find(|c| c.key == key && c.n == n)
    }
    pub fn is_approved(&self, gate: &str) -> bool {
        self.approved.iter().any(|g| g == gate || g == "all")
    }
}

pub fn call_key(tool: &str, op: &str, params: &str) -> String {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(op.as_bytes());
    h.update([0]);
    h.update(params.as_bytes());
    hex::encode(h.finalize())
}

/// The stored state of a job, if any (any status: a committed one is simply not used again).
pub async fn load(db: &Arc<Db>, job_id: i64) -> Result<Option<State>> {
    let text = crate::db::sessions::load_run_code(db, job_id).await?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Writes the state (`open`), or marks the session `committed` when the job ended.
pub async fn save(
    db: &Arc<Db>,
    job_id: i64,
    client: &str,
    state: &State,
    done: bool,
) -> Result<()> {
    crate::db::sessions::save_run_code(db, job_id, client, serde_json::to_string(state)?, done)
        .await
}
