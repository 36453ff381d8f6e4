//! Generated content that waits for a human, and the approval check on resume.
//!
//! [`ask`] stores the content in lifecycle `llm_pending` (private to the worker, written through
//! `db::lifecycle`), creates a
//! validation (output.db) whose `command_hash` is [`write_hash`] — SHA-256 over the action, the
//! target's real path, the overwrite flag and the content — records that hash in the job's
//! snapshot (`queue.command_hash`), and ends the run `pending_validation`. When the operator
//! approves, the supervisor resumes the job with `ctx.approval`; [`approved`] loads the stored
//! content and recomputes the hash from the claimed params and the target as it resolves *now*:
//! the content written is exactly the one shown and approved (never generated again), and a
//! target that moved (symlink swap) or a different content writes nothing.

use super::super::{JobCtx, Outcome};
use crate::db::lifecycle;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The identity of a write: what, where, how, and the exact bytes.
pub fn write_hash(action: &str, target: &Path, overwrite: bool, content: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"brainloop-llm-write\0");
    h.update(action.as_bytes());
    h.update(b"\0");
    h.update(target.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    h.update(if overwrite { b"1" } else { b"0" });
    h.update(b"\0");
    h.update(content.as_bytes());
    hex::encode(h.finalize())
}

pub fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// What a validation request shows.
pub struct Ask<'a> {
    pub action: &'static str,
    pub target: &'a Path,
    pub content: &'a str,
    pub hash: String,
    /// One line: what will happen.
    pub summary: String,
    /// Preview or diff of the content.
    pub preview: String,
    pub permission_set: PermissionSet,
    /// Extra fields for the pending result.
    pub extra: Value,
    /// Why an `auto` grant did not cover it (a protected path: `auto_refusals`), shown first.
    pub protected: Vec<String>,
    /// The write staged as a change set (`llm::staged::stage`, saved): the approval binds
    /// to its effect hash (`hash` must be it), the reasons name it and `brainloop show`, and
    /// the preview is its diff, never folded into a reason. None: the preview is a reason.
    pub change_set: Option<&'a crate::bash::changes::Manifest>,
}

/// Why a FILE_WRITE `auto` grant may not write `content` at `target` unasked (empty: it may):
/// `bash::protected::write_refusals` — a path the operator's tools run or obey, a manifest key
/// off its inert list (issue 48). `content` None: not a file's content (a SQL block's
/// database). Off the runtime threads.
pub async fn auto_refusals(
    ctx: &JobCtx,
    target: &crate::clients::write::Target,
    content: Option<&str>,
) -> Vec<String> {
    let (lists, ws, root, real) = (
        ctx.config.path_lists(),
        ctx.config.workspace.clone(),
        target.root().to_path_buf(),
        target.real_path.clone(),
    );
    let content = content.map(|c| c.as_bytes().to_vec());
    tokio::task::spawn_blocking(move || {
        crate::bash::protected::write_refusals(&lists, &ws, &root, &real, content.as_deref())
    })
    .await
    .unwrap_or_else(|e| vec![format!("the protected-path check failed: {e}")])
}

/// Stores the content, asks a human, and returns the `pending_validation` outcome.
pub async fn ask(ctx: &JobCtx, a: Ask<'_>) -> Outcome {
    let row = lifecycle::PendingContent {
        job_id: ctx.job_id,
        action: a.action.to_string(),
        target: a.target.display().to_string(),
        content: a.content.to_string(),
        content_hash: a.hash.clone(),
    };
    let stored = ctx
        .stores
        .lifecycle
        .call(move |c| lifecycle::store_pending(c, &row, crate::time::now_ms()))
        .await;
    if let Err(e) = stored {
        return Outcome::failed(format!("cannot store the generated content: {e:#}"));
    }
    let id = match crate::ask::new_id() {
        Ok(id) => id,
        Err(o) => return o,
    };
    let mut reasons = a.protected.clone();
    reasons.extend([
        a.summary.clone(),
        format!("content sha256 {}", sha256(a.content)),
    ]);
    match a.change_set {
        Some(m) => reasons.push(format!(
            "its effects: {} — `brainloop show {id}` for the diff; approve applies exactly this change set, deny discards it, `brainloop undo {}` takes it back once applied",
            m.change_set.summary(),
            ctx.job_id
        )),
        None => reasons.push(a.preview.clone()),
    }
    let request = crate::ask::Request {
        id: id.clone(),
        command: a.summary.clone(),
        bound_hash: a.hash.clone(),
        policy: "ask".into(),
        risk_score: Some(0.5),
        permission_set: a.permission_set.to_string(),
        workdir: None,
        reasons: reasons.clone(),
    };
    let mut result = match crate::ask::ask(&ctx.asker(), request).await {
        Ok((_, m)) => m,
        Err(o) => return o,
    };
    result.insert("action".into(), json!(a.action));
    result.insert("path".into(), json!(a.target));
    result.insert("bytes".into(), json!(a.content.len()));
    result.insert("content_sha256".into(), json!(sha256(a.content)));
    result.insert("preview".into(), json!(a.preview));
    if let Some(m) = a.change_set {
        result.insert("effects".into(), crate::bash::result::effects_json(m));
        result.insert("diff".into(), json!(m.change_set.diff()));
    }
    result.insert(
        "message".into(),
        json!(format!("waiting for a human: brainloop approve {id} (or deny); the approved content is written as shown, never regenerated")),
    );
    result.remove("risk_score");
    result.remove("permission_set");
    if let Some(e) = a.extra.as_object() {
        result.extend(e.clone());
    }
    crate::ask::pending(result)
}

/// The approved content of a resumed job (None: the job was not approved).
pub struct Approved {
    pub validation_id: String,
    pub target: String,
    pub content: String,
    pub hash: String,
}

/// Loads the stored content of an approved job; fails if there is none.
pub async fn approved(ctx: &JobCtx, action: &str) -> Option<Result<Approved, Outcome>> {
    let approval = ctx.approval.clone()?;
    let job = ctx.job_id;
    let action = action.to_string();
    let row = ctx
        .stores
        .lifecycle
        .call(move |c| lifecycle::pending_of(c, job, &action))
        .await;
    Some(match row {
        Ok(Some((target, content, hash))) if hash == approval.command_hash => Ok(Approved {
            validation_id: approval.validation_id,
            target,
            content,
            hash,
        }),
        Ok(Some(_)) => Err(Outcome::denied(
            "the stored content does not match the approved request; nothing was written",
        )),
        Ok(None) => Err(Outcome::failed(
            "approved, but the generated content is no longer stored; nothing was written (submit the job again)",
        )),
        Err(e) => Err(Outcome::failed(format!("cannot load the approved content: {e:#}"))),
    })
}

/// Forgets a job's stored content (written, or refused for good).
pub async fn forget(ctx: &JobCtx) {
    let job = ctx.job_id;
    let _ = ctx
        .stores
        .lifecycle
        .call(move |c| lifecycle::forget_pending(c, job))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_action_target_mode_and_content() {
        let p = Path::new("/ws/a.py");
        let h = write_hash("generate_file", p, false, "x");
        assert_ne!(h, write_hash("generate_sql", p, false, "x"));
        assert_ne!(
            h,
            write_hash("generate_file", Path::new("/ws/b.py"), false, "x")
        );
        assert_ne!(h, write_hash("generate_file", p, true, "x"));
        assert_ne!(h, write_hash("generate_file", p, false, "y"));
        assert_eq!(h, write_hash("generate_file", p, false, "x"));
    }
}
