//! `generate_sql {prompt | verified_prompt, database | db_path}`: the model writes SQL for a
//! SQLite database from its schema (temperature 0.1, code fences stripped), then the script runs
//! under DESIGN §4's rules:
//! - the database is opened under FILE_READ like `read_sqlite` (never brainloop's own files);
//! - every statement is prepared on a read-only connection with ATTACH impossible (limit 0 and
//!   the authorizer), `trusted_schema=OFF`, and judged by SQLite's own `sqlite3_stmt_readonly`;
//! - a read-only script runs at once on `read_sqlite`'s guarded connection (rows capped);
//! - a writing script needs FILE_WRITE on the database file and a human's approval (unless the
//!   grant is `auto`: it runs at once), with ATTACH, transactions, savepoints, virtual tables and
//!   writing pragmas refused. Before the human is asked, it runs on a private copy of the
//!   database (`sql_effect`), and the copy as it leaves it is the job's change set (issue 54:
//!   `llm::staged`), shown with the rows changed per table and the statements; after approval
//!   exactly that change set is applied (conflict-checked: the file still byte-identical to the
//!   copy's source), and `undo` restores the previous bytes. A database that cannot be copied
//!   whole (over `overlay_max_bytes`, WAL mode, a journal beside it) is asked about with the
//!   statements only, saying it cannot be undone; after approval exactly the approved script
//!   runs on it, in one transaction.

use super::pending::{self, write_hash, Ask};
use super::sql_effect::{self, Measure};
use super::staged;
use super::{ask_model, ask_structured, llm_info, str_param};
use crate::actions::readers::sqlite;
use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::bash::changes::Manifest;
use crate::clients::paths::{self, Opened};
use crate::clients::write;
use crate::llm::{text, JobUsage, JsonSchema, Prompt};
use crate::permset::PermissionSet;
use anyhow::{bail, Context, Result};
use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Batch, Connection, OpenFlags};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

pub const NAME: &str = "generate_sql";
/// Rows returned per statement.
const MAX_ROWS: usize = 500;
/// Time budget of an approved writing script.
const WRITE_BUDGET: Duration = Duration::from_secs(30);

/// The shape of a structured reply: the statements in `sql`.
fn sql_schema() -> JsonSchema {
    JsonSchema {
        name: "sqlite_sql",
        schema: json!({
            "type": "object",
            "required": ["sql"],
            "additionalProperties": false,
            "properties": {"sql": {"type": "string", "minLength": 1, "description": "SQLite statements separated by semicolons"}}
        }),
    }
}

pub fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "Generates SQL for a SQLite database from its schema (LLM, temperature 0.1) and runs it: read-only statements at once under read_sqlite's guards (read-only, no ATTACH, time budget); a script that writes needs FILE_WRITE on that database and a human's approval (unless the grant is auto), then runs exactly as approved in one transaction. SQLite's own read-only verdict decides what writes. Never brainloop's own databases.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "minLength": 1, "maxLength": 100000},
                    "verified_prompt": {"type": "string", "minLength": 1, "maxLength": 100000, "description": "alias of prompt (seed 001)"},
                    "database": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the SQLite file: absolute, or relative to the workspace"},
                    "db_path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "alias of database (seed 001)"}
                },
                "allOf": [
                    {"anyOf": [{"required": ["prompt"]}, {"required": ["verified_prompt"]}]},
                    {"anyOf": [{"required": ["database"]}, {"required": ["db_path"]}]}
                ],
                "additionalProperties": false
            })
        },
        grants: &[Grant::Llm, Grant::FileRead],
        permission_set: PermissionSet::Readonly,
        handler: crate::actions::Run::Async(handle),
        hidden: false,
        on_decision: None,
    }
}

fn handle(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        match run(&ctx, &params).await {
            Ok(o) | Err(o) => o,
        }
    })
}

/// The authorizer for preparing (judging) and for running an approved writing script: reads and
/// ordinary writes, never ATTACH/DETACH, transactions, savepoints, virtual tables, writing
/// pragmas or extensions.
fn write_authorize(ctx: AuthContext<'_>) -> Authorization {
    use AuthAction::*;
    match ctx.action {
        Insert { .. }
        | Update { .. }
        | Delete { .. }
        | CreateTable { .. }
        | CreateIndex { .. }
        | CreateView { .. }
        | CreateTrigger { .. }
        | CreateTempTable { .. }
        | CreateTempIndex { .. }
        | CreateTempView { .. }
        | CreateTempTrigger { .. }
        | DropTable { .. }
        | DropIndex { .. }
        | DropView { .. }
        | DropTrigger { .. }
        | DropTempTable { .. }
        | DropTempIndex { .. }
        | DropTempView { .. }
        | DropTempTrigger { .. }
        | AlterTable { .. }
        | Reindex { .. }
        | Analyze { .. } => Authorization::Allow,
        _ => sqlite::authorize(ctx),
    }
}

fn guard(conn: &Connection, opened: &Opened, budget: Duration) -> Result<()> {
    let checked = opened.file.metadata()?;
    let now = std::fs::symlink_metadata(&opened.real_path)?;
    if (checked.dev(), checked.ino()) != (now.dev(), now.ino()) {
        bail!("the file changed between the grant check and the open; refused");
    }
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    conn.busy_timeout(Duration::from_millis(2000))?;
    let deadline = Instant::now() + budget;
    conn.progress_handler(10_000, Some(move || Instant::now() > deadline))?;
    Ok(())
}

/// The tables, views, indexes and triggers of the database (their SQL), for the prompt.
pub(crate) fn schema_text(opened: &Opened) -> Result<String> {
    let conn = sqlite::open_guarded(opened)?;
    let mut s = conn.prepare(
        "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type DESC, name LIMIT 500",
    )?;
    let rows = s
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut text = rows.join(";\n");
    if text.len() > 60_000 {
        let mut cut = 60_000;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n-- (schema truncated)");
    }
    Ok(text)
}

/// SQLite's verdict on a script: how many statements, and whether any writes. A statement that
/// cannot be prepared after a writing one (it may depend on it) leaves the rest to the approved
/// run, where each statement is prepared under the same authorizer.
#[derive(Debug, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) statements: usize,
    pub(crate) writes: bool,
}

pub(crate) fn judge(opened: &Opened, sql: &str) -> Result<Verdict> {
    let conn = Connection::open_with_flags(
        &opened.real_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("cannot open as a SQLite database")?;
    guard(&conn, opened, sqlite::BUDGET)?;
    conn.pragma_update(None, "query_only", "ON")?;
    conn.authorizer(Some(write_authorize))?;
    let mut batch = Batch::new(&conn, sql);
    let mut v = Verdict {
        statements: 0,
        writes: false,
    };
    loop {
        match batch.next() {
            Ok(Some(stmt)) => {
                v.statements += 1;
                if !stmt.readonly() {
                    v.writes = true;
                }
            }
            Ok(None) => break,
            Err(e) if v.writes => {
                tracing::debug!(error = %e, "statement after a write not preparable yet");
                break;
            }
            Err(e) => bail!("the generated SQL is refused or invalid: {e}"),
        }
    }
    if v.statements == 0 {
        bail!("the model returned no SQL statement");
    }
    Ok(v)
}

fn collect_rows(stmt: &mut rusqlite::Statement<'_>) -> Result<Value> {
    let columns: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let n = columns.len();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(r) = rows.next()? {
        if n == 0 {
            continue;
        }
        if out.len() >= MAX_ROWS {
            truncated = true;
            continue;
        }
        out.push(Value::Array(
            (0..n)
                .map(|i| r.get_ref(i).map(sqlite::cell).unwrap_or(Value::Null))
                .collect(),
        ));
    }
    Ok(json!({"columns": columns, "rows": out, "truncated": truncated}))
}

/// Runs a read-only script on read_sqlite's guarded connection.
pub(crate) fn run_read_only(opened: &Opened, sql: &str) -> Result<Vec<Value>> {
    let conn = sqlite::open_guarded(opened)?;
    let mut batch = Batch::new(&conn, sql);
    let mut out = Vec::new();
    while let Some(mut stmt) = batch.next()? {
        if !stmt.readonly() {
            bail!("a statement writes; refused on the read-only path");
        }
        let text = stmt.expanded_sql().unwrap_or_default();
        let mut r = collect_rows(&mut stmt)?;
        r["sql"] = json!(text);
        out.push(r);
    }
    Ok(out)
}

/// Runs an approved script in one transaction; nothing is kept if any statement fails.
pub(crate) fn run_writing(opened: &Opened, sql: &str) -> Result<(Vec<Value>, u64)> {
    let mut conn = Connection::open_with_flags(
        &opened.real_path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("cannot open the database for writing")?;
    guard(&conn, opened, WRITE_BUDGET)?;
    run_in_transaction(&mut conn, sql)
}

/// [`run_writing`] on the private copy at `copy` (`sql_effect`: the effect measured before a
/// human is asked), under the same limits and authorizer.
pub(crate) fn run_writing_on_copy(copy: &std::path::Path, sql: &str) -> Result<(Vec<Value>, u64)> {
    let mut conn = Connection::open_with_flags(
        copy,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("cannot open the copy of the database")?;
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    let deadline = Instant::now() + WRITE_BUDGET;
    conn.progress_handler(10_000, Some(move || Instant::now() > deadline))?;
    run_in_transaction(&mut conn, sql)
}

/// The script in one `BEGIN IMMEDIATE` transaction under [`write_authorize`]: each statement's
/// rows and changes, and the total; nothing kept if any statement fails.
fn run_in_transaction(conn: &mut Connection, sql: &str) -> Result<(Vec<Value>, u64)> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // Installed after BEGIN: the script itself may not open, end or nest transactions.
    tx.authorizer(Some(write_authorize))?;
    let mut out = Vec::new();
    let mut changes = 0u64;
    {
        let mut batch = Batch::new(&tx, sql);
        while let Some(mut stmt) = batch.next()? {
            let text = stmt.expanded_sql().unwrap_or_default();
            let writes = !stmt.readonly();
            let mut r = collect_rows(&mut stmt)?;
            if writes {
                let n = tx.changes();
                changes += n;
                r["changes"] = json!(n);
            }
            r["sql"] = json!(text);
            out.push(r);
        }
    }
    tx.authorizer(None::<fn(AuthContext<'_>) -> Authorization>)?;
    tx.commit()?;
    Ok((out, changes))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Outcome> + Send + 'static,
) -> Result<T, Outcome> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Outcome::failed(format!("SQLite task failed: {e}")))?
}

/// Long because it is the action's one linear story (grants, schema, the model's SQL, SQLite's
/// verdict, read at once or ask, the approved write), each step a call.
async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded"))?;
    let database = str_param(params, &["database", "db_path"])
        .unwrap_or_default()
        .to_string();
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let open = {
        let (g, d, db) = (grants.clone(), deny.clone(), database.clone());
        move || paths::open_for_read(&g, &db, &d).map_err(Outcome::from)
    };

    // Resumed after a human approved: apply exactly the change set measured and shown, or
    // (not measured) run exactly the stored script.
    if let Some(approved) = pending::approved(ctx, NAME).await {
        let a = approved?;
        let measured = staged::saved(ctx)
            .await
            .filter(|m| m.action() == NAME && m.effect_hash == a.hash);
        if let Some(m) = measured {
            let (open1, content, bound) = (open.clone(), a.content.clone(), m.command_hash.clone());
            let (g, d) = (grants.clone(), deny.clone());
            // The same database, and still under FILE_WRITE (the apply replaces its file).
            let same = blocking(move || {
                let opened = open1()?;
                write::check(&g, &opened.real_path.to_string_lossy(), &d).map_err(Outcome::from)?;
                Ok(write_hash(NAME, &opened.real_path, false, &content) == bound)
            })
            .await;
            if !matches!(same, Ok(true)) {
                pending::forget(ctx).await;
                staged::discard(ctx);
                return Err(same.err().unwrap_or_else(|| {
                    Outcome::denied(format!(
                        "{database} is not the approved database {}; nothing ran",
                        a.target
                    ))
                }));
            }
            let out = staged::apply(ctx, m, "approved", Some(a.validation_id.clone())).await;
            pending::forget(ctx).await;
            return out.map(|mut o| {
                if let Some(r) = o.result.as_mut() {
                    r["validation_id"] = json!(a.validation_id);
                }
                o
            });
        }
        let result = blocking(move || {
            let opened = open()?;
            if write_hash(NAME, &opened.real_path, false, &a.content) != a.hash {
                return Err(Outcome::denied(format!(
                    "{} is not the approved database {}; nothing ran",
                    opened.real_path.display(),
                    a.target
                )));
            }
            let (statements, changes) = run_writing(&opened, &a.content).map_err(|e| {
                Outcome::failed(format!(
                    "the approved SQL failed and was rolled back (nothing changed): {e:#}"
                ))
            })?;
            Ok(json!({
                "success": true,
                "database": opened.real_path,
                "sql": a.content,
                "read_only": false,
                "statements": statements,
                "changes": changes,
                "policy_used": "approved",
                "validation_id": a.validation_id,
            }))
        })
        .await;
        pending::forget(ctx).await;
        return result.map(Outcome::ok);
    }

    let open2 = open.clone();
    let (real, schema) = blocking(move || {
        let opened = open2()?;
        let schema = schema_text(&opened)
            .map_err(|e| Outcome::failed(format!("{}: {e:#}", opened.real_path.display())))?;
        Ok((opened.real_path, schema))
    })
    .await?;
    let prompt = str_param(params, &["prompt", "verified_prompt"]).unwrap_or_default();
    let job = JobUsage::default();
    let (value, answer) = if ctx.llm.structured() {
        let p = Prompt {
            system: "You write SQLite SQL. Reply with one JSON object whose \"sql\" field holds the SQL statements, separated by semicolons, with no explanation. Never use ATTACH, DETACH, PRAGMA, BEGIN, COMMIT or SAVEPOINT.".into(),
            user: format!("Database schema:\n{schema}\n\nTask: {prompt}\n"),
            temperature: 0.1,
            action: NAME,
        };
        ask_structured(ctx, &job, p, &sql_schema()).await?
    } else {
        let p = Prompt {
            system: "You write SQLite SQL. Reply with SQL statements only, separated by semicolons: no explanation, no Markdown code fences. Never use ATTACH, DETACH, PRAGMA, BEGIN, COMMIT or SAVEPOINT.".into(),
            user: format!("Database schema:\n{schema}\n\nTask: {prompt}\n"),
            temperature: 0.1,
            action: NAME,
        };
        (None, ask_model(ctx, &job, p).await?)
    };
    let sql = match &value {
        Some(v) => v["sql"].as_str().unwrap_or_default().to_string(),
        None => text::strip_code_fences(&answer.text, false),
    };
    let sql = sql.trim().to_string();
    let (open3, sql2) = (open.clone(), sql.clone());
    let verdict = blocking(move || {
        let opened = open3()?;
        judge(&opened, &sql2).map_err(|e| Outcome::failed(format!("{e:#}")))
    })
    .await
    .map_err(|mut o| {
        o.result = Some(json!({"sql": sql, "llm": llm_info(&answer)}));
        o
    })?;

    if !verdict.writes {
        let (open4, sql2) = (open.clone(), sql.clone());
        let statements = blocking(move || {
            let opened = open4()?;
            run_read_only(&opened, &sql2)
                .map_err(|e| Outcome::failed(format!("the generated SQL failed: {e:#}")))
        })
        .await?;
        return Ok(Outcome::ok(json!({
            "success": true,
            "database": real,
            "sql": sql,
            "read_only": true,
            "statements": statements,
            "llm": llm_info(&answer),
        })));
    }

    // Writing: FILE_WRITE on the database file itself.
    let target = write::check(&grants, &real.to_string_lossy(), &deny).map_err(|e| {
        let mut o = Outcome::from(e);
        if o.status == crate::db::output::JobStatus::Denied {
            o.error = Some(format!(
                "the generated SQL writes to {}, which needs FILE_WRITE on it: {}",
                real.display(),
                o.error.unwrap_or_default()
            ));
        }
        o.result = Some(json!({"sql": sql, "read_only": false, "llm": llm_info(&answer)}));
        o
    })?;
    let hash = write_hash(NAME, &real, false, &sql);
    let protected = if target.auto {
        pending::auto_refusals(ctx, &target, None).await
    } else {
        Vec::new()
    };
    if target.auto && protected.is_empty() {
        let (open5, sql2) = (open.clone(), sql.clone());
        let (statements, changes) = blocking(move || {
            let opened = open5()?;
            run_writing(&opened, &sql2).map_err(|e| {
                Outcome::failed(format!(
                    "the generated SQL failed and was rolled back (nothing changed): {e:#}"
                ))
            })
        })
        .await?;
        return Ok(Outcome::ok(json!({
            "success": true,
            "database": real,
            "sql": sql,
            "read_only": false,
            "statements": statements,
            "changes": changes,
            "policy_used": "auto_grant",
            "grant": target.grant,
            "llm": llm_info(&answer),
        })));
    }
    let mut summary = format!(
        "generate_sql: run {} statement(s) that WRITE to {}",
        verdict.statements,
        real.display()
    );
    let llm = llm_info(&answer);
    let measured = measured_change_set(ctx, &open, &target, &sql, &hash, &summary, &llm).await?;
    let mut reasons = protected;
    let mut extra = json!({"sql": sql, "read_only": false, "llm": llm});
    let (hash, change_set) = match measured {
        Ok(m) if m.change_set.is_empty() => {
            staged::discard(ctx);
            let mut r = m.result.clone().unwrap_or_default();
            r["policy_used"] = json!("unchanged");
            r["message"] = json!("the script changes nothing in the database (measured on a copy); nothing ran on it");
            return Ok(Outcome::ok(r));
        }
        Ok(m) => {
            let result = m.result.clone().unwrap_or_default();
            let tables = result["tables"].as_array().cloned().unwrap_or_default();
            reasons.push(format!(
                "its effect, measured on a copy of the database: {} ({} change(s) in all); approve applies exactly that copy, `brainloop undo {}` restores the previous bytes",
                sql_effect::tables_text(&tables),
                result["changes"],
                ctx.job_id
            ));
            reasons.push(format!("the statements:\n{sql}"));
            extra["tables"] = json!(tables);
            summary = m.command.clone();
            (m.effect_hash.clone(), Some(m))
        }
        Err(why) => {
            reasons.push(format!("{why}; approving runs the statements on the database itself in one transaction, and that CANNOT be undone (`brainloop undo` does not know it)"));
            (hash, None)
        }
    };
    Ok(pending::ask(
        ctx,
        Ask {
            action: NAME,
            target: &real,
            content: &sql,
            hash,
            summary,
            preview: sql.clone(),
            permission_set: PermissionSet::Filesystem,
            extra,
            protected: reasons,
            change_set: change_set.as_ref(),
        },
    )
    .await)
}

/// The script's effect measured on a copy of the database (`sql_effect::measure`) and staged
/// as the job's change set: the copy as the script leaves it replaces the file when a human
/// approves (`llm::staged`). Ok(Err(why)): not measured (the human is asked with the
/// statements only). Err: the script failed on the copy, or the file changed while it was
/// copied (nothing written).
async fn measured_change_set(
    ctx: &JobCtx,
    open: &(impl Fn() -> Result<Opened, Outcome> + Clone + Send + 'static),
    target: &write::Target,
    sql: &str,
    hash: &str,
    summary: &str,
    llm: &Value,
) -> Result<Result<Manifest, String>, Outcome> {
    let (open, sql2) = (open.clone(), sql.to_string());
    // In the job's change-set dir: swept with it (staging the change set replaces it).
    let dir = crate::bash::changes::job_dir(&ctx.config.data_dir, ctx.job_id).join("measure");
    let max = ctx.config.overlay_max_bytes;
    let measured = blocking(move || {
        let opened = open()?;
        sql_effect::measure(&opened, &sql2, &dir, max).map_err(Outcome::failed)
    })
    .await?;
    let ms = match measured {
        Measure::Unmeasured(why) => return Ok(Err(why)),
        Measure::Measured(ms) => ms,
    };
    let before = format!("file:{}:", hex::encode(Sha256::digest(&ms.before)));
    let effect = sql_effect::tables_text(&ms.tables);
    let summary = format!("{summary} ({effect})");
    let account = format!(
        "measured on a copy of the database: {effect} ({} change(s) in all)\n--- statements\n{sql}",
        ms.changes
    );
    let result = json!({
        "success": true,
        "database": target.real_path,
        "sql": sql,
        "read_only": false,
        "statements": ms.statements,
        "changes": ms.changes,
        "tables": ms.tables,
        "llm": llm,
    });
    let w = staged::Write {
        real_path: target.real_path.clone(),
        grant_root: target.root().to_path_buf(),
        exists: true,
        content: ms.after,
    };
    let m = staged::stage(
        ctx,
        NAME,
        vec![w],
        hash.to_string(),
        summary,
        result,
        account,
    )
    .await?;
    let from_source = m.change_set.is_empty()
        || m.change_set
            .changes
            .iter()
            .all(|c| c.before.as_deref().is_some_and(|b| b.starts_with(&before)));
    if !from_source {
        staged::discard(ctx);
        return Err(Outcome::failed(format!(
            "{} changed while its copy was measured; nothing was written — submit the job again",
            target.real_path.display()
        )));
    }
    Ok(Ok(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{ClientGrants, Grant as G, Permission, Source};

    fn open(path: &std::path::Path) -> Opened {
        let g = ClientGrants::new(
            "t",
            vec![G {
                permission: Permission::FileRead,
                pattern: "/**".into(),
                auto: false,
                source: Source::Config,
            }],
            std::path::Path::new("/"),
        )
        .unwrap();
        paths::open_for_read(&g, &path.to_string_lossy(), &[]).unwrap()
    }

    fn db() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.db");
        Connection::open(&p)
            .unwrap()
            .execute_batch(
                "CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');",
            )
            .unwrap();
        (d, p)
    }

    #[test]
    fn sqlite_decides_what_writes() {
        let (_d, p) = db();
        let o = open(&p);
        assert_eq!(
            judge(&o, "SELECT * FROM t; SELECT count(*) FROM t").unwrap(),
            Verdict {
                statements: 2,
                writes: false
            }
        );
        assert!(
            judge(&o, "SELECT 1; INSERT INTO t VALUES (3, 'z')")
                .unwrap()
                .writes
        );
        assert!(
            judge(&o, "WITH x AS (SELECT 1) DELETE FROM t")
                .unwrap()
                .writes
        );
        // Depends on an earlier write: left to the approved run.
        assert!(
            judge(&o, "CREATE TABLE u(c); INSERT INTO u VALUES (1)")
                .unwrap()
                .writes
        );
        for bad in [
            "ATTACH DATABASE '/tmp/evil.db' AS e",
            "SELECT 1; ATTACH 'x.db' AS e",
            "PRAGMA writable_schema = ON",
            "BEGIN; DELETE FROM t; COMMIT",
            "SELECT load_extension('x')",
            "SELECT * FROM nope",
        ] {
            assert!(judge(&o, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn read_only_runs_and_writing_is_one_transaction() {
        let (d, p) = db();
        let o = open(&p);
        let r = run_read_only(&o, "SELECT a, b FROM t ORDER BY a").unwrap();
        assert_eq!(r[0]["rows"], json!([[1, "x"], [2, "y"]]));
        assert!(run_read_only(&o, "DELETE FROM t").is_err());
        let (_, changes) = run_writing(
            &o,
            "INSERT INTO t VALUES (3, 'z'); UPDATE t SET b = 'w' WHERE a = 1",
        )
        .unwrap();
        assert_eq!(changes, 2);
        // A failing statement rolls everything back.
        assert!(run_writing(&o, "DELETE FROM t; INSERT INTO nope VALUES (1)").is_err());
        let n: i64 = Connection::open(&p)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
        // No ATTACH, no nested transaction, even after approval.
        let other = d.path().join("other.db");
        assert!(run_writing(&o, &format!("ATTACH '{}' AS o", other.display())).is_err());
        assert!(!other.exists());
        assert!(run_writing(&o, "COMMIT; DELETE FROM t").is_err());
        let n: i64 = Connection::open(&p)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 3);
    }
}
