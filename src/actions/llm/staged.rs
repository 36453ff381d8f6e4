//! An action's writes as one change set (issue 54): the files `generate_file` or a loop commit
//! writes are staged in the job's `changes/<job>/` exactly as a command's overlay run leaves its
//! upper layer ([`stage`]: `bash::changes::stage_files`, the manifest saved with the action's
//! name), so the same store, bound hash, budget, expiry, retention, previewer (`show`,
//! `validations`, the notify payload, the review TUI) hold for them; and they reach the
//! workspace only through the one apply of change sets ([`apply`]: `bash::apply_recorded`, the
//! apply journal and the undo journal), so `undo`, `history` and start-up recovery know them.

use crate::actions::{JobCtx, Outcome};
use crate::bash::changes::{self, Manifest};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file an action writes: its real path (checked under FILE_WRITE: `clients::write::check`),
/// the root of the grant that allows it, whether something is there now, and the bytes.
pub struct Write {
    pub real_path: PathBuf,
    pub grant_root: PathBuf,
    pub exists: bool,
    pub content: Vec<u8>,
}

/// Where a write at `real_path` is staged as a change set: (root, its path beneath it) — the
/// workspace when the file is beneath it (the paths `show`, `history` and `undo` name), else the
/// root of the grant that allows it; both by their real paths (`real_path` is real).
fn staged_at(
    workspace: &Path,
    real_path: &Path,
    grant_root: &Path,
) -> Result<(PathBuf, String), String> {
    for root in [workspace, grant_root] {
        let Ok(real) = std::fs::canonicalize(root) else {
            continue;
        };
        if let Ok(rel) = real_path.strip_prefix(&real) {
            match rel.to_str() {
                Some(r) if !r.is_empty() => return Ok((real, r.to_string())),
                Some(_) => {}
                None => return Err(format!("{} is not UTF-8", real_path.display())),
            }
        }
    }
    Err(format!(
        "{} is beneath neither the workspace nor the root of its grant",
        real_path.display()
    ))
}

/// The writes staged as the job's one change set and its manifest saved (`action`, `summary`
/// as its command, `command_hash` what the action's request hashes to; the bound hash is
/// `changes::effect_hash` of it and the change set's). `result`: the fields the job's result
/// carries once it is applied. `account`: what the action says its change does beyond the
/// diff (a SQL script's statements and rows changed per table; `show` prints it), kept as the
/// manifest's `stdout`. Every write must stage beneath one root (the workspace, or one
/// grant's root): a change set has one. Refused, nothing staged, over the client's
/// `pending_max_bytes_per_client`.
pub async fn stage(
    ctx: &JobCtx,
    action: &str,
    writes: Vec<Write>,
    command_hash: String,
    summary: String,
    result: Value,
    account: String,
) -> Result<Manifest, Outcome> {
    let (config, job_id, client) = (ctx.config.clone(), ctx.job_id, ctx.client_id.clone());
    let action = action.to_string();
    tokio::task::spawn_blocking(move || -> Result<Manifest, String> {
        let dd = &config.data_dir;
        let waiting = changes::pending_bytes(dd, &client).map_err(|e| format!("{e:#}"))?;
        let budget = config.pending_max_bytes_per_client;
        if waiting >= budget {
            return Err(format!("client {client} already has {waiting} bytes of change sets waiting for a human, at or over pending_max_bytes_per_client ({budget}); nothing was written — answer or deny its pending validations (`brainloop validations`)"));
        }
        let mut root: Option<PathBuf> = None;
        let mut files = Vec::with_capacity(writes.len());
        for w in writes {
            let (r, rel) = staged_at(&config.workspace, &w.real_path, &w.grant_root)?;
            match &root {
                Some(first) if *first != r => {
                    return Err(format!(
                        "{} is beneath {}, the other files beneath {}: one change set has one root — write them in separate jobs",
                        w.real_path.display(),
                        r.display(),
                        first.display()
                    ))
                }
                _ => root = Some(r),
            }
            // The replaced file's permission bits (never setuid/setgid), else 0644.
            let mode = std::fs::symlink_metadata(&w.real_path)
                .ok()
                .filter(|m| w.exists && m.is_file())
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0o644);
            files.push((rel, w.content, mode));
        }
        let Some(root) = root else {
            return Err("no file to stage".into());
        };
        let (cs, upper_bytes) = changes::stage_files(dd, job_id, &root, &files)
            .map_err(|e| format!("cannot stage the write as a change set: {e:#}"))?;
        let m = Manifest {
            job_id,
            command: summary,
            effect_hash: changes::effect_hash(&command_hash, &cs.hash),
            command_hash,
            workspace: root.clone(),
            workdir: root,
            exit_code: None,
            success: true,
            stdout: account,
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            sandbox: String::new(),
            signatures: Vec::new(),
            change_set: cs,
            created_at: crate::time::now_ms(),
            client_id: client,
            upper_bytes,
            signal: None,
            timed_out: false,
            timeout_ms: 0,
            action: Some(action),
            result: Some(result),
        };
        if let Err(e) = changes::save_manifest(dd, &m) {
            changes::discard(dd, job_id);
            return Err(format!("cannot keep the change set: {e:#}"));
        }
        Ok(m)
    })
    .await
    .map_err(|e| Outcome::failed(format!("stage task failed: {e}")))?
    .map_err(Outcome::failed)
}

/// Applies a staged change set through the one apply of change sets (`bash::apply_recorded`:
/// `applying` recorded before the first byte, journaled, conflict-checked, `applied` with the
/// job's outcome after), so `undo`, `show`, `history` and start-up recovery know it as they
/// know a command's. Holds on the apply test hooks (`bash::test_knob`).
pub async fn apply(
    ctx: &JobCtx,
    m: Manifest,
    policy_used: &'static str,
    validation_id: Option<String>,
) -> Result<Outcome, Outcome> {
    let hold = |var: &'static str| {
        let ms = crate::bash::test_knob(ctx.config.test_actions, var);
        async move {
            if let Some(ms) = ms {
                tracing::info!(hook = var, ms, "test hook: holding the job");
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
    };
    hold("BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS").await;
    let stores = ctx.stores.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::bash::apply_recorded(
            &stores,
            &m,
            policy_used,
            validation_id.as_deref(),
            &mut |_| {},
        )
    })
    .await
    .map_err(|e| Outcome::failed(format!("apply task failed: {e}")))?;
    if out.is_ok() {
        hold("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS").await;
    }
    out
}

/// The job's change set as saved when it asked (None: none, or unreadable).
pub async fn saved(ctx: &JobCtx) -> Option<Manifest> {
    let (dd, job) = (ctx.config.data_dir.clone(), ctx.job_id);
    tokio::task::spawn_blocking(move || changes::load_manifest(&dd, job).ok().flatten())
        .await
        .ok()
        .flatten()
}

/// Drops the job's staged change set (denied, refused, or nothing to apply).
pub fn discard(ctx: &JobCtx) {
    changes::discard(&ctx.config.data_dir, ctx.job_id);
}
