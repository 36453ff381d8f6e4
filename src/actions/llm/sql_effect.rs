//! A writing SQL script's effect, measured before a human is asked (issue 54): the script runs
//! on a private copy of the database file in the job's change-set area, never on the file
//! itself, and what it changed is told per table (rows added and removed, tables created or
//! dropped). The copy as it is after the script is what `generate_sql` stages as its change set
//! (`llm::staged`): approve applies exactly it after the apply's conflict check (the file still
//! byte-identical to the copy's source, else `conflict`), `undo` restores the journaled
//! previous bytes and refuses when the file changed since. A database that cannot be measured
//! so — over `overlay_max_bytes`, in WAL mode or with a journal beside it (its file alone is not
//! the database) — is asked about with the statements only and cannot be undone ([`Measure`]).

use super::generate_sql::run_writing_on_copy;
use crate::clients::paths::Opened;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What measuring came to.
pub enum Measure {
    /// The script ran on the copy.
    Measured(Measured),
    /// Not measured, and why (said to the human, with "cannot be undone").
    Unmeasured(String),
}

pub struct Measured {
    /// The database file's bytes the copy was made of.
    pub before: Vec<u8>,
    /// The copy's bytes after the script: the database as the approval makes it.
    pub after: Vec<u8>,
    /// Each statement's rows and changes, and their total (as the script ran on the copy).
    pub statements: Vec<Value>,
    pub changes: u64,
    /// Per changed table: `{table, added, removed}`, or `{table, created, rows}` /
    /// `{table, dropped, rows}`, or `{table, rows_before, rows_after, schema_changed}`.
    pub tables: Vec<Value>,
}

/// Runs `sql` on a copy of the database `opened` made in `dir` (created, removed after), read
/// through the descriptor the grant check opened; Err: the script failed on the copy (nothing
/// changed anywhere) or the copy could not be made. Blocking.
pub fn measure(opened: &Opened, sql: &str, dir: &Path, max_bytes: u64) -> Result<Measure, String> {
    let len = opened
        .file
        .metadata()
        .map_err(|e| format!("cannot stat the database: {e}"))?
        .len();
    if len > max_bytes {
        return Ok(Measure::Unmeasured(format!(
            "the database is {len} bytes, over overlay_max_bytes ({max_bytes}): its effect was not measured on a copy"
        )));
    }
    for side in ["-wal", "-journal"] {
        let mut p = opened.real_path.clone().into_os_string();
        p.push(side);
        if std::fs::metadata(&p).is_ok_and(|m| m.len() > 0) {
            return Ok(Measure::Unmeasured(format!(
                "{} exists beside the database (it is open, or was not closed cleanly): the database file alone is not the database, so its effect was not measured on a copy",
                Path::new(&p).display()
            )));
        }
    }
    let mut before = Vec::with_capacity(len as usize);
    let mut f = &opened.file;
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.read_to_end(&mut before))
        .map_err(|e| format!("cannot read the database: {e}"))?;
    // Header bytes 18 and 19 are 2 in WAL mode: the file may lag behind its -wal.
    if before.len() >= 20 && (before[18] == 2 || before[19] == 2) {
        return Ok(Measure::Unmeasured(
            "the database is in WAL mode (its file may lag behind its -wal): its effect was not measured on a copy".into(),
        ));
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = measure_in(dir, &before, sql);
    let _ = std::fs::remove_dir_all(dir);
    let (after, statements, changes, tables) = out?;
    Ok(Measure::Measured(Measured {
        before,
        after,
        statements,
        changes,
        tables,
    }))
}

type Run = (Vec<u8>, Vec<Value>, u64, Vec<Value>);

fn measure_in(dir: &Path, before: &[u8], sql: &str) -> Result<Run, String> {
    let (b, a) = (dir.join("before.db"), dir.join("after.db"));
    for p in [&b, &a] {
        std::fs::write(p, before).map_err(|e| format!("cannot copy the database: {e}"))?;
    }
    let (statements, changes) = run_writing_on_copy(&a, sql).map_err(|e| {
        format!("the generated SQL failed on a copy of the database (nothing changed): {e:#}")
    })?;
    let tables = per_table(&a, &b).map_err(|e| format!("cannot measure the effect: {e:#}"))?;
    let after = std::fs::read(&a).map_err(|e| format!("cannot read the copy: {e}"))?;
    Ok((after, statements, changes, tables))
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What changed per table between the copies `before` and `after` (both private to the
/// measurement; opened with `trusted_schema=OFF`, nothing but SELECT runs).
fn per_table(after: &Path, before: &Path) -> anyhow::Result<Vec<Value>> {
    let conn = Connection::open_with_flags(after, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    conn.execute("ATTACH DATABASE ?1 AS b", [before.display().to_string()])?;
    let names = |schema: &str| -> rusqlite::Result<Vec<String>> {
        let mut s = conn.prepare(&format!(
            "SELECT name FROM {schema}.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ))?;
        let v = s.query_map([], |r| r.get(0))?.collect();
        v
    };
    let (now, was) = (names("main")?, names("b")?);
    let count = |q: &str| -> rusqlite::Result<i64> { conn.query_row(q, [], |r| r.get(0)) };
    let mut out = Vec::new();
    for t in &now {
        let q = quoted(t);
        if !was.contains(t) {
            let rows = count(&format!("SELECT count(*) FROM main.{q}"))?;
            out.push(json!({"table": t, "created": true, "rows": rows}));
            continue;
        }
        let diff = |x: &str, y: &str| {
            count(&format!(
                "SELECT count(*) FROM (SELECT * FROM {x}.{q} EXCEPT SELECT * FROM {y}.{q})"
            ))
        };
        match (diff("main", "b"), diff("b", "main")) {
            (Ok(0), Ok(0)) => {}
            (Ok(added), Ok(removed)) => {
                out.push(json!({"table": t, "added": added, "removed": removed}))
            }
            // Another number of columns (ALTER TABLE): the counts say what they can.
            _ => out.push(json!({"table": t, "schema_changed": true,
                "rows_before": count(&format!("SELECT count(*) FROM b.{q}"))?,
                "rows_after": count(&format!("SELECT count(*) FROM main.{q}"))?})),
        }
    }
    for t in was.iter().filter(|t| !now.contains(t)) {
        let rows = count(&format!("SELECT count(*) FROM b.{}", quoted(t)))?;
        out.push(json!({"table": t, "dropped": true, "rows": rows}));
    }
    Ok(out)
}

/// One line per changed table, for the human (`generate_sql`'s reason).
pub fn tables_text(tables: &[Value]) -> String {
    if tables.is_empty() {
        return "no table's rows change".into();
    }
    tables
        .iter()
        .map(|t| {
            let name = t["table"].as_str().unwrap_or("?");
            if t["created"] == true {
                format!("{name}: created, {} row(s)", t["rows"])
            } else if t["dropped"] == true {
                format!("{name}: DROPPED, it had {} row(s)", t["rows"])
            } else if t["schema_changed"] == true {
                format!(
                    "{name}: columns changed, {} row(s) before, {} after",
                    t["rows_before"], t["rows_after"]
                )
            } else {
                format!(
                    "{name}: {} row(s) added, {} removed",
                    t["added"], t["removed"]
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
