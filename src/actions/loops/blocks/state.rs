//! The state of a block session (the `state` JSON of its `sessions` row) and its pure
//! transitions: a block's current code, iterations and history of versions, its commit claim
//! and its committed record. No I/O here: the modes load, call these, and save.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Session statuses of block mode.
pub const OPEN: &str = "open";
pub const COMMITTED: &str = "committed";
pub const ABANDONED: &str = "abandoned";
pub const EXPIRED: &str = "expired";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct State {
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Block {
    /// `b1`, `b2`… in the order of the propose request.
    pub id: String,
    pub description: String,
    /// As given: `code`, `sql` or a language name.
    #[serde(rename = "type")]
    pub kind: String,
    /// As given: the file (or, for sql, the database), absolute or relative to the workspace.
    pub target: String,
    /// The commit may replace an existing file (declared at propose, bound into the approval).
    pub overwrite: bool,
    /// The current code: what a commit writes.
    pub code: String,
    /// Refinements applied so far.
    pub iterations: u32,
    /// `open` or `committed`.
    pub status: String,
    /// Every version, oldest first; the last one is `code`.
    pub history: Vec<Version>,
    /// The job committing this block (running, or waiting for a human's approval). A claim of
    /// a job that has ended (denied, expired, failed) no longer counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committing: Option<i64>,
    /// What the commit did (path, bytes or changes, policy, job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<Value>,
    /// For sql blocks: SQLite's verdict on the current code (`statements`, `writes`) or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<Value>,
}

/// One version of a block's code and the feedback that produced it (none for the first).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Version {
    pub iteration: u32,
    pub code: String,
    pub feedback: Option<String>,
    pub job_id: i64,
    pub at: i64,
    pub tokens: u64,
}

impl Block {
    pub fn is_sql(&self) -> bool {
        is_sql(&self.kind)
    }
    pub fn is_open(&self) -> bool {
        self.status == OPEN
    }
}

pub fn is_sql(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("sql")
}

impl State {
    pub fn from_value(v: &Value) -> Result<State, String> {
        serde_json::from_value(v.clone())
            .map_err(|e| format!("the stored block session is unreadable: {e}"))
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn block(&self, id: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.id == id)
    }

    pub fn block_mut(&mut self, id: &str) -> Option<&mut Block> {
        self.blocks.iter_mut().find(|b| b.id == id)
    }

    /// All blocks committed: the session ends `committed`.
    pub fn all_committed(&self) -> bool {
        !self.blocks.is_empty() && self.blocks.iter().all(|b| b.status == COMMITTED)
    }
}

/// Applies a refinement produced from `base` (the code the model was shown): refused if the
/// block changed meanwhile (refined or committed by another job) or a live commit holds it.
pub fn apply_refinement(
    b: &mut Block,
    base: &str,
    v: Version,
    live_claim: Option<i64>,
) -> Result<(), String> {
    if !b.is_open() {
        return Err(format!(
            "block {} is committed; refinement refused (propose a new session to change it)",
            b.id
        ));
    }
    if let Some(job) = live_claim {
        return Err(format!(
            "block {} is being committed by job {job} (running or waiting for approval); refinement refused",
            b.id
        ));
    }
    if b.code != base {
        return Err(format!(
            "block {} was refined by another job meanwhile; this refinement was not kept (refine again)",
            b.id
        ));
    }
    b.iterations += 1;
    b.code = v.code.clone();
    b.history.push(v);
    b.committing = None;
    Ok(())
}

/// Claims a block for commit by `job`, for the exact `content` planned: refused if it is
/// committed, changed since the plan, or claimed by another job that is still live.
pub fn claim(
    b: &mut Block,
    job: i64,
    content: &str,
    live_claim: Option<i64>,
) -> Result<(), String> {
    if !b.is_open() {
        return Err(format!("block {} is already committed", b.id));
    }
    if b.code != content {
        return Err(format!(
            "block {} changed since this commit was planned (refined meanwhile); nothing was written",
            b.id
        ));
    }
    if let Some(other) = live_claim.filter(|j| *j != job) {
        return Err(format!(
            "block {} is being committed by job {other} (running or waiting for approval)",
            b.id
        ));
    }
    b.committing = Some(job);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> Block {
        Block {
            id: "b1".into(),
            description: "d".into(),
            kind: "python".into(),
            target: "a.py".into(),
            overwrite: false,
            code: "v0".into(),
            iterations: 0,
            status: OPEN.into(),
            history: vec![version(0, "v0", None)],
            committing: None,
            committed: None,
            sql: None,
        }
    }

    fn version(i: u32, code: &str, feedback: Option<&str>) -> Version {
        Version {
            iteration: i,
            code: code.into(),
            feedback: feedback.map(Into::into),
            job_id: i as i64 + 1,
            at: 0,
            tokens: 0,
        }
    }

    #[test]
    fn a_refinement_applies_to_the_code_it_was_made_from() {
        let mut b = block();
        apply_refinement(&mut b, "v0", version(1, "v1", Some("f1")), None).unwrap();
        assert_eq!(
            (b.code.as_str(), b.iterations, b.history.len()),
            ("v1", 1, 2)
        );
        assert_eq!(b.history[1].feedback.as_deref(), Some("f1"));
        assert_eq!(b.history[0].code, "v0", "previous versions are kept");
        // Made from v0 while v1 is current: refused, nothing changed.
        let e = apply_refinement(&mut b, "v0", version(2, "v2", Some("f2")), None).unwrap_err();
        assert!(e.contains("another job"), "{e}");
        assert_eq!((b.code.as_str(), b.iterations), ("v1", 1));
    }

    #[test]
    fn committed_or_claimed_blocks_are_not_refined() {
        let mut b = block();
        let e = apply_refinement(&mut b, "v0", version(1, "v1", None), Some(7)).unwrap_err();
        assert!(e.contains("job 7"), "{e}");
        b.status = COMMITTED.into();
        let e = apply_refinement(&mut b, "v0", version(1, "v1", None), None).unwrap_err();
        assert!(e.contains("committed"), "{e}");
        assert_eq!(b.code, "v0");
    }

    #[test]
    fn a_claim_binds_the_planned_content_and_one_live_job() {
        let mut b = block();
        assert!(claim(&mut b, 5, "other", None).is_err());
        assert!(claim(&mut b, 5, "v0", Some(4)).is_err());
        claim(&mut b, 5, "v0", Some(5)).unwrap();
        assert_eq!(b.committing, Some(5));
        // A claim by an ended job (None: not live) does not block.
        claim(&mut b, 6, "v0", None).unwrap();
        assert_eq!(b.committing, Some(6));
        b.status = COMMITTED.into();
        assert!(claim(&mut b, 6, "v0", None).is_err());
    }

    #[test]
    fn state_round_trips_and_ends_when_every_block_is_committed() {
        let mut s = State {
            blocks: vec![
                block(),
                Block {
                    id: "b2".into(),
                    ..block()
                },
            ],
        };
        assert_eq!(State::from_value(&s.to_value()).unwrap(), s);
        assert!(!s.all_committed());
        s.blocks[0].status = COMMITTED.into();
        assert!(!s.all_committed());
        s.blocks[1].status = COMMITTED.into();
        assert!(s.all_committed());
        assert!(State::from_value(&serde_json::json!({"blocks": 3})).is_err());
    }
}
