//! `commit {session_id, block_id?}`: writes the block's current (refined) code — never a
//! regeneration, no LLM call — and closes the block; without `block_id`, every open block.
//!
//! 1. Plan: each block becomes an [`Item`] checked like the LLM actions check theirs. A file
//!    goes through generate_file's path (`clients::write::check` under FILE_WRITE; an existing
//!    file only with the block's `overwrite`, declared at propose). A sql block goes through
//!    generate_sql's rules: the database opened under FILE_READ, SQLite's own read-only
//!    verdict; a writing script needs FILE_WRITE on the database file.
//! 2. Claim: in one transaction the blocks must still be open, hold exactly the planned code,
//!    and not be claimed by another live job; they are claimed by this job (a refine is refused
//!    while the claim lives: while the job runs or waits for a human).
//! 3. The files are staged as the job's one change set (`llm::staged`: `changes/<job>/`, the
//!    same store, previewer, apply journal and undo as a command's overlay run, issue 54). If
//!    any item writes without an `auto` grant, nothing happens now: the manifest (every item's
//!    block, kind, real path, overwrite flag and content) is stored in `llm_pending` and one
//!    validation asks a human, bound to the change set's effect hash (SHA-256 over the manifest
//!    and the change set; over the manifest alone when no file changes): `show`, `validations`,
//!    the notify payload and `review` show the files' diff, each SQL script is a reason of its
//!    own. Otherwise the items run at once.
//! 4. After approval the supervisor resumes the job: the stored manifest and change set are
//!    loaded (their hash is the approved one), every target must resolve to the same real path
//!    and every block still hold that content; then the change set is applied once
//!    (`bash::apply_recorded`: conflict-checked — a file changed or created since it was shown
//!    refuses the whole commit —, journaled, `brainloop undo JOB` takes it back), then the SQL
//!    items run in order: writing SQL in one transaction, read-only SQL on read_sqlite's
//!    guarded connection. Denied or expired: the job ends, its claim lapses, nothing was
//!    written and the blocks stay open.
//! 5. Record: committed blocks get their record; the session ends `committed` when all its
//!    blocks are (event `session_commit`).

use super::model::grants;
use super::state::{self, Block, State};
use super::{event, internal, live_claim, missing, open_session, require_open, str_param};
use crate::actions::llm::pending::{self, sha256, write_hash, Ask};
use crate::actions::llm::{current, judge, run_read_only, run_writing};
use crate::actions::llm::{preview, staged};
use crate::actions::loops::NAME;
use crate::actions::{JobCtx, Outcome};
use crate::bash::changes;
use crate::clients::write;
use crate::clients::{paths, ClientGrants};
use crate::db::sessions as store;
use crate::permset::PermissionSet;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One block's commit, as planned and (when a human is asked) approved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Item {
    block_id: String,
    /// `file` or `sql`.
    kind: String,
    /// The block's target as given.
    requested: String,
    /// The real path it resolved to when planned.
    real: String,
    overwrite: bool,
    /// A file always writes; sql: SQLite's verdict.
    writes: bool,
    content: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Manifest {
    session_id: String,
    items: Vec<Item>,
}

/// What planning learnt beyond the item (not part of the approval).
struct Planned {
    item: Item,
    /// Covered by an `auto` grant, and nothing the operator's tools run or obey (`protected`).
    auto: bool,
    /// Why an `auto` grant does not cover it (`pending::auto_refusals`' judgement).
    protected: Vec<String>,
    grant: Option<String>,
    preview: String,
    what: String,
    /// A file's grant root and whether something is there now (what `staged::Write` needs).
    root: Option<PathBuf>,
    exists: bool,
}

/// What `bash::protected` judges a write against: the operator's path lists and the workspace.
type Where = (crate::permset::PathLists, PathBuf);

fn manifest_hash(m: &str, session_id: &str) -> String {
    write_hash(NAME, Path::new(session_id), false, m)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Outcome> + Send + 'static,
) -> Result<T, Outcome> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Outcome::failed(format!("blocking task failed: {e}")))?
}

fn with_block(b: &str, mut o: Outcome) -> Outcome {
    o.error = Some(format!(
        "block {b}: {}; nothing was written",
        o.error.unwrap_or_default()
    ));
    o
}

/// Checks one block's target and content now.
async fn plan_one(
    g: &Arc<ClientGrants>,
    deny: &[PathBuf],
    b: &Block,
    w: &Where,
) -> Result<Planned, Outcome> {
    let (g, deny, b, w) = (Arc::clone(g), deny.to_vec(), b.clone(), w.clone());
    // an auto grant covers nothing the operator's tools run or obey (issue 48)
    let refusals = move |t: &write::Target, new: Option<&[u8]>| {
        if !t.auto {
            return Vec::new();
        }
        crate::bash::protected::write_refusals(&w.0, &w.1, t.root(), &t.real_path, new)
    };
    blocking(move || {
        if b.is_sql() {
            let opened = paths::open_for_read(&g, &b.target, &deny).map_err(Outcome::from)?;
            let verdict = judge(&opened, &b.code).map_err(|e| {
                Outcome::failed(format!("the block's SQL is refused or invalid: {e:#}"))
            })?;
            let real = opened.real_path.clone();
            let (auto, grant, protected) = if verdict.writes {
                let t = write::check(&g, &real.to_string_lossy(), &deny).map_err(|e| {
                    let mut o = Outcome::from(e);
                    o.error = Some(format!(
                        "the block's SQL writes to {}, which needs FILE_WRITE on it: {}",
                        real.display(),
                        o.error.unwrap_or_default()
                    ));
                    o
                })?;
                let protected = refusals(&t, None);
                (t.auto && protected.is_empty(), Some(t.grant), protected)
            } else {
                (true, None, Vec::new())
            };
            let what = if verdict.writes {
                format!(
                    "run {} statement(s) that WRITE to {} in one transaction",
                    verdict.statements,
                    real.display()
                )
            } else {
                format!(
                    "run {} read-only statement(s) on {}",
                    verdict.statements,
                    real.display()
                )
            };
            return Ok(Planned {
                item: Item {
                    block_id: b.id.clone(),
                    kind: "sql".into(),
                    requested: b.target.clone(),
                    real: real.to_string_lossy().into_owned(),
                    overwrite: false,
                    writes: verdict.writes,
                    content: b.code.clone(),
                },
                auto,
                protected,
                grant,
                preview: b.code.clone(),
                what,
                root: None,
                exists: true,
            });
        }
        let t = write::check(&g, &b.target, &deny).map_err(Outcome::from)?;
        let protected = refusals(&t, Some(b.code.as_bytes()));
        let old = if t.exists {
            current(&g, &t.real_path, &deny)
        } else {
            None
        };
        // Already there with exactly this content (a commit cut off after its write): allowed,
        // the write then finds it and records it.
        let same = old.as_deref() == Some(b.code.as_str());
        if t.exists && !b.overwrite && !same {
            return Err(Outcome::failed(format!(
                "{} already exists and the block was proposed without \"overwrite\": true",
                t.real_path.display()
            )));
        }
        let preview = match (&old, t.exists) {
            (Some(old), _) => preview::diff(old, &b.code),
            (None, true) => format!(
                "(replaces an existing file the client may not read; new content:)\n{}",
                preview::head(&b.code)
            ),
            (None, false) => preview::head(&b.code),
        };
        let what = format!(
            "write {} ({} bytes, {} lines, {})",
            t.real_path.display(),
            b.code.len(),
            b.code.lines().count(),
            if t.exists {
                "REPLACES the existing file"
            } else {
                "new file"
            }
        );
        Ok(Planned {
            item: Item {
                block_id: b.id.clone(),
                kind: "file".into(),
                requested: b.target.clone(),
                real: t.real_path.to_string_lossy().into_owned(),
                overwrite: b.overwrite,
                writes: true,
                content: b.code.clone(),
            },
            auto: t.auto && protected.is_empty(),
            protected,
            grant: Some(t.grant.clone()),
            preview,
            what,
            root: Some(t.root().to_path_buf()),
            exists: t.exists,
        })
    })
    .await
}

/// The blocks a commit covers: `block_id`, or every open block.
fn selected(st: &State, block_id: Option<&str>, id: &str) -> Result<Vec<Block>, Outcome> {
    match block_id {
        Some(b) => {
            let blk = st.block(b).ok_or_else(|| {
                Outcome::failed(format!("loop session {id:?} has no block {b:?}"))
            })?;
            if !blk.is_open() {
                return Err(Outcome::failed(format!("block {b} is already committed")));
            }
            Ok(vec![blk.clone()])
        }
        None => {
            let open: Vec<Block> = st.blocks.iter().filter(|b| b.is_open()).cloned().collect();
            if open.is_empty() {
                return Err(Outcome::failed(format!(
                    "loop session {id:?} has no open block to commit"
                )));
            }
            Ok(open)
        }
    }
}

/// Claims the items' blocks for this job (see the module doc, step 2).
async fn claim(ctx: &JobCtx, id: &str, items: &[Item]) -> Result<(), Outcome> {
    let (job, ttl) = (ctx.job_id, ctx.config.loop_session_ttl_ms);
    let items = items.to_vec();
    store::update(&ctx.stores.lifecycle, id, &ctx.client_id, move |tx, s| {
        super::still_open(s, ttl)?;
        let mut st = State::from_value(&s.state)?;
        for it in &items {
            let b = st
                .block_mut(&it.block_id)
                .ok_or_else(|| format!("block {} is gone", it.block_id))?;
            let live = live_claim(tx, b);
            state::claim(b, job, &it.content, live)?;
        }
        s.state = st.to_value();
        Ok::<_, String>(())
    })
    .await
    .map_err(|e| internal("cannot claim the blocks", e))?
    .ok_or_else(|| missing(id))?
    .map_err(|e| Outcome::failed(format!("{e}; nothing was written")))
}

/// The commit's files staged as the job's one change set (`llm::staged`, issue 54): what
/// `show`, `validations`, the notify payload and the review TUI show as a diff, what approve
/// applies, `history` lists and `undo` takes back. None: no file, or every file already holds
/// its block's content (a commit cut off after its apply).
async fn stage_files(
    ctx: &JobCtx,
    planned: &[Planned],
    command_hash: &str,
    summary: &str,
) -> Result<Option<changes::Manifest>, Outcome> {
    let writes: Vec<staged::Write> = planned
        .iter()
        .filter(|p| p.item.kind == "file")
        .map(|p| staged::Write {
            real_path: PathBuf::from(&p.item.real),
            grant_root: p.root.clone().unwrap_or_default(),
            exists: p.exists,
            content: p.item.content.as_bytes().to_vec(),
        })
        .collect();
    if writes.is_empty() {
        return Ok(None);
    }
    let m = staged::stage(
        ctx,
        NAME,
        writes,
        command_hash.to_string(),
        summary.to_string(),
        json!({}),
        String::new(),
    )
    .await?;
    if m.change_set.is_empty() {
        staged::discard(ctx);
        return Ok(None);
    }
    Ok(Some(m))
}

/// What a commit of `planned` asks and records: its one line per block.
fn summary_of(id: &str, planned: &[Planned]) -> String {
    format!(
        "loop commit (session {id}): {}",
        planned
            .iter()
            .map(|p| format!("block {}: {}", p.item.block_id, p.what))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// Long because it is the commit's one story (module doc, steps 1–4): resumed, the approved
/// manifest and change set checked against the blocks and targets as they are now, then run;
/// first run, planned, claimed, staged, then run under auto grants or asked.
pub async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let id = str_param(params, "session_id");
    let block_id = params.get("block_id").and_then(Value::as_str);
    let g = grants(ctx)?;
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let w: Where = (ctx.config.path_lists(), ctx.config.workspace.clone());

    // Resumed after a human approved: run exactly the stored manifest and apply exactly the
    // change set shown, nothing else.
    if let Some(approved) = pending::approved(ctx, NAME).await {
        let a = approved?;
        let m: Manifest = serde_json::from_str(&a.content)
            .map_err(|e| internal("the approved manifest is unreadable", e))?;
        let command_hash = manifest_hash(&a.content, id);
        let staged = staged::saved(ctx).await.filter(|s| s.action() == NAME);
        let bound = match &staged {
            Some(s) => s.command_hash == command_hash && s.effect_hash == a.hash,
            None => command_hash == a.hash,
        };
        if m.session_id != id || !bound {
            pending::forget(ctx).await;
            staged::discard(ctx);
            return Err(Outcome::denied(
                "the approved request does not match this session, or the change set on disk is not the one approved; nothing was written",
            ));
        }
        let (s, st) = open_session(ctx, id).await?;
        require_open(&s)?;
        for it in &m.items {
            let b = st.block(&it.block_id).ok_or_else(|| {
                Outcome::failed(format!(
                    "block {} is gone; nothing was written",
                    it.block_id
                ))
            })?;
            let now = plan_one(&g, &deny, b, &w)
                .await
                .map_err(|o| with_block(&it.block_id, o))?;
            if now.item != *it {
                pending::forget(ctx).await;
                staged::discard(ctx);
                return Err(Outcome::denied(format!(
                    "block {}: the approved commit no longer matches (target now {}, content {}); nothing was written",
                    it.block_id,
                    now.item.real,
                    if now.item.content == it.content { "unchanged" } else { "changed" }
                )));
            }
        }
        claim(ctx, id, &m.items).await?;
        let out = execute(
            ctx,
            &g,
            &deny,
            id,
            &m.items,
            "approved",
            Some(&a.validation_id),
            staged,
        )
        .await;
        pending::forget(ctx).await;
        return out;
    }

    let (s, st) = open_session(ctx, id).await?;
    require_open(&s)?;
    let blocks = selected(&st, block_id, id)?;
    let mut planned = Vec::with_capacity(blocks.len());
    for b in &blocks {
        planned.push(
            plan_one(&g, &deny, b, &w)
                .await
                .map_err(|o| with_block(&b.id, o))?,
        );
    }
    let items: Vec<Item> = planned.iter().map(|p| p.item.clone()).collect();
    claim(ctx, id, &items).await?;
    let manifest = serde_json::to_string(&Manifest {
        session_id: id.to_string(),
        items: items.clone(),
    })
    .map_err(|e| internal("cannot serialise the commit", e))?;
    let command_hash = manifest_hash(&manifest, id);
    let summary = summary_of(id, &planned);
    let staged = stage_files(ctx, &planned, &command_hash, &summary).await?;
    let ask: Vec<&Planned> = planned
        .iter()
        .filter(|p| p.item.writes && !p.auto)
        .collect();
    if ask.is_empty() {
        let policy = if items.iter().any(|i| i.writes) {
            "auto_grant"
        } else {
            "read_only"
        };
        return execute(ctx, &g, &deny, id, &items, policy, None, staged).await;
    }
    let hash = staged
        .as_ref()
        .map_or(command_hash, |m| m.effect_hash.clone());
    let shown = planned
        .iter()
        .map(|p| {
            format!(
                "== block {} → {}{}\n{}",
                p.item.block_id,
                p.item.real,
                if p.auto && p.item.writes {
                    " (covered by an auto grant)"
                } else {
                    ""
                },
                p.preview
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let listed: Vec<Value> = planned
        .iter()
        .map(|p| {
            json!({"block_id": p.item.block_id, "kind": p.item.kind, "path": p.item.real,
                   "writes": p.item.writes, "auto": p.auto, "grant": p.grant, "what": p.what})
        })
        .collect();
    let first = PathBuf::from(&ask[0].item.real);
    let mut reasons: Vec<String> = planned.iter().flat_map(|p| p.protected.clone()).collect();
    if staged.is_some() {
        // The files are the change set (its diff is shown); the SQL of a mixed commit is not in
        // it, so each script stays a reason of its own, shown whole.
        reasons.extend(planned.iter().filter(|p| p.item.kind == "sql").map(|p| {
            format!(
                "block {}: {} (after the files; not part of the change set, `undo` does not take it back):\n{}",
                p.item.block_id, p.what, p.item.content
            )
        }));
    }
    let extra = json!({"session_id": id, "items": listed});
    Ok(pending::ask(
        ctx,
        Ask {
            action: NAME,
            target: &first,
            content: &manifest,
            hash,
            summary,
            preview: shown,
            permission_set: PermissionSet::Filesystem,
            extra,
            protected: reasons,
            change_set: staged.as_ref(),
        },
    )
    .await)
}

/// Runs one SQL item; the record of what it did.
async fn execute_sql(g: &Arc<ClientGrants>, deny: &[PathBuf], it: &Item) -> Result<Value, String> {
    let (g, deny, it) = (Arc::clone(g), deny.to_vec(), it.clone());
    tokio::task::spawn_blocking(move || -> Result<Value, String> {
        let opened = paths::open_for_read(&g, &it.requested, &deny).map_err(|e| e.to_string())?;
        if opened.real_path.to_string_lossy() != it.real {
            return Err(format!(
                "{} now resolves to {}; nothing ran",
                it.requested,
                opened.real_path.display()
            ));
        }
        if it.writes {
            let (statements, changes) = run_writing(&opened, &it.content).map_err(|e| {
                format!("the SQL failed and was rolled back (nothing changed): {e:#}")
            })?;
            Ok(
                json!({"kind": "sql", "database": it.real, "read_only": false,
                      "statements": statements, "changes": changes,
                      "content_sha256": sha256(&it.content)}),
            )
        } else {
            let statements = run_read_only(&opened, &it.content)
                .map_err(|e| format!("the SQL failed: {e:#}"))?;
            Ok(
                json!({"kind": "sql", "database": it.real, "read_only": true,
                      "statements": statements, "content_sha256": sha256(&it.content)}),
            )
        }
    })
    .await
    .map_err(|e| format!("commit task failed: {e}"))?
}

/// Applies the staged change set (the commit's files, one apply: journaled, conflict-checked,
/// undoable), then runs the SQL items in order, stopping at the first failure, then records
/// what was committed. A file already holding its content (nothing staged for it) is recorded
/// `already_written`. Long because the record of each item, the session's and the job's result
/// are one account of the same run.
#[allow(clippy::too_many_arguments)]
async fn execute(
    ctx: &JobCtx,
    g: &Arc<ClientGrants>,
    deny: &[PathBuf],
    id: &str,
    items: &[Item],
    policy: &'static str,
    validation_id: Option<&str>,
    staged: Option<changes::Manifest>,
) -> Result<Outcome, Outcome> {
    let mut done: Vec<(String, Value)> = Vec::new();
    let mut failure = None;
    let record = |it: &Item, mut rec: Value| {
        rec["block_id"] = json!(it.block_id);
        rec["job_id"] = json!(ctx.job_id);
        rec["at"] = json!(crate::time::now_ms());
        rec["policy_used"] = json!(policy);
        if let Some(v) = validation_id {
            rec["validation_id"] = json!(v);
        }
        (it.block_id.clone(), rec)
    };
    let (mut change_set, mut not_applied) = (None, None);
    let mut written: Vec<String> = Vec::new();
    if let Some(m) = staged {
        let in_set: Vec<String> = m
            .change_set
            .changes
            .iter()
            .map(|c| c.path.clone())
            .collect();
        written = in_set
            .iter()
            .map(|p| m.workspace.join(p).to_string_lossy().into_owned())
            .collect();
        let applied = staged::apply(ctx, m, policy, validation_id.map(str::to_string)).await;
        match applied {
            Ok(o) => change_set = o.result,
            // No block is committed: the apply's account (conflict, what landed) is the job's.
            Err(mut o) => {
                o.error = Some(format!(
                    "the commit's change set ({}) was not applied: {}; no block was committed",
                    in_set.join(", "),
                    o.error.unwrap_or_default()
                ));
                not_applied = Some(o);
            }
        }
    }
    for it in items.iter().filter(|_| not_applied.is_none()) {
        if it.kind == "file" {
            let mut rec = json!({"kind": "file", "path": it.real, "bytes": it.content.len(),
                "content_sha256": sha256(&it.content), "overwrite": it.overwrite});
            if !written.contains(&it.real) {
                rec["already_written"] = json!(true);
            }
            done.push(record(it, rec));
            continue;
        }
        match execute_sql(g, deny, it).await {
            Ok(rec) => done.push(record(it, rec)),
            Err(e) => {
                failure = Some((it.block_id.clone(), e));
                break;
            }
        }
    }
    let job = ctx.job_id;
    let records = done.clone();
    let recorded = store::update(&ctx.stores.lifecycle, id, &ctx.client_id, move |_, s| {
        let mut st = State::from_value(&s.state)?;
        for b in st.blocks.iter_mut() {
            if let Some((_, rec)) = records.iter().find(|(bid, _)| *bid == b.id) {
                b.status = state::COMMITTED.into();
                b.committed = Some(rec.clone());
                b.committing = None;
            } else if b.committing == Some(job) {
                b.committing = None;
            }
        }
        if s.status == state::OPEN && st.all_committed() {
            s.status = state::COMMITTED.into();
        }
        s.state = st.to_value();
        Ok::<_, String>(s.status.clone())
    })
    .await;
    let session_status = match recorded {
        Ok(Some(Ok(status))) => status,
        Ok(Some(Err(e))) => e,
        Ok(None) => "missing".into(),
        Err(e) => {
            tracing::error!(
                session_id = id,
                error = format!("{e:#}"),
                "committed blocks not recorded"
            );
            format!("unrecorded: {e:#}")
        }
    };
    if let Some(o) = not_applied {
        return Err(o);
    }
    let committed: Vec<Value> = done.iter().map(|(_, r)| r.clone()).collect();
    let ids: Vec<&str> = done.iter().map(|(b, _)| b.as_str()).collect();
    if !done.is_empty() {
        event(
            ctx,
            "session_commit",
            json!({"session_id": id, "client_id": ctx.client_id, "blocks": ids,
                   "policy_used": policy, "validation_id": validation_id,
                   "session_status": session_status}),
        )
        .await;
        tracing::info!(session_id = id, blocks = ?ids, policy, "loop blocks committed");
    }
    let mut result = json!({
        "success": failure.is_none(),
        "session_id": id,
        "session_status": session_status,
        "committed": committed,
        "policy_used": policy,
        "validation_id": validation_id,
    });
    // The change set's account, as a command's: effects, applied paths, how to undo.
    if let Some(Value::Object(cs)) = change_set {
        for k in ["effects", "applied", "undo"] {
            if let Some(v) = cs.get(k) {
                result[k] = v.clone();
            }
        }
    }
    match failure {
        None => Ok(Outcome::ok(result)),
        Some((b, e)) => {
            let mut o = Outcome::failed(format!(
                "block {b}: {e}{}",
                if ids.is_empty() {
                    String::new()
                } else {
                    format!(" (committed before it: {})", ids.join(", "))
                }
            ));
            o.result = Some(result);
            Err(o)
        }
    }
}
