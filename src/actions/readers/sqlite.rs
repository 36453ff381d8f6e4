//! `read_sqlite` digest. The database is opened as safely as SQLite allows:
//! - by the real path of a descriptor already opened beneath the granted root, with
//!   `SQLITE_OPEN_NOFOLLOW` (a path component swapped to a symlink makes the open fail) and
//!   read-only; the opened file's device + inode must equal the checked descriptor's;
//! - `trusted_schema=OFF`, `query_only=ON`, `SQLITE_LIMIT_ATTACHED = 0` and an authorizer that
//!   allows only reads (no ATTACH, no writes, only a few read-only pragmas);
//! - a 5 s time budget enforced by a progress handler.

use crate::clients::paths::Opened;
use anyhow::{bail, Context, Result};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

pub const BUDGET: Duration = Duration::from_secs(5);
const MAX_TABLES: usize = 200;
const MAX_CELL_CHARS: usize = 200;

pub(crate) fn authorize(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Function { function_name } => {
            if function_name.eq_ignore_ascii_case("load_extension") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Pragma { pragma_name, .. } => {
            const READ_ONLY: &[&str] = &[
                "table_info",
                "table_xinfo",
                "index_list",
                "index_info",
                "foreign_key_list",
                "page_size",
                "page_count",
                "journal_mode",
                "user_version",
                "encoding",
                "data_version",
            ];
            if READ_ONLY
                .iter()
                .any(|p| pragma_name.eq_ignore_ascii_case(p))
            {
                Authorization::Allow
            } else {
                Authorization::Deny
            }
        }
        _ => Authorization::Deny,
    }
}

/// Opens the database behind `opened` read-only with every guard above.
pub fn open_guarded(opened: &Opened) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        &opened.real_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("cannot open as a SQLite database")?;
    // The file SQLite opened must be the one the grant check opened.
    let checked = opened.file.metadata()?;
    let now = std::fs::symlink_metadata(&opened.real_path)?;
    if (checked.dev(), checked.ino()) != (now.dev(), now.ino()) {
        bail!("the file changed between the grant check and the open; refused");
    }
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    conn.pragma_update(None, "query_only", "ON")?;
    conn.busy_timeout(Duration::from_millis(1000))?;
    conn.authorizer(Some(authorize))?;
    let deadline = Instant::now() + BUDGET;
    conn.progress_handler(10_000, Some(move || Instant::now() > deadline))?;
    Ok(conn)
}

pub(crate) fn cell(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => json!(f),
        ValueRef::Text(t) => {
            let s = String::from_utf8_lossy(t);
            if s.chars().count() > MAX_CELL_CHARS {
                json!(format!(
                    "{}…",
                    s.chars().take(MAX_CELL_CHARS).collect::<String>()
                ))
            } else {
                json!(s)
            }
        }
        ValueRef::Blob(b) => json!(format!("<blob {} bytes>", b.len())),
    }
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

pub fn digest(opened: &Opened, max_sample_rows: usize) -> Result<Value> {
    let conn = open_guarded(opened)?;
    let objects: Vec<(String, String, Option<String>, Option<String>)> = {
        let mut s = conn.prepare(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
        )?;
        let rows = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows
    };
    let mut tables = Vec::new();
    let mut views = Vec::new();
    let mut indexes = Vec::new();
    let mut triggers = Vec::new();
    let mut truncated = false;
    for (kind, name, tbl, sql) in &objects {
        match kind.as_str() {
            "table" => {
                if tables.len() >= MAX_TABLES {
                    truncated = true;
                    continue;
                }
                let columns: Vec<Value> = {
                    let mut s = conn.prepare(&format!("PRAGMA table_info({})", quote(name)))?;
                    let cols = s
                        .query_map([], |r| {
                            Ok(json!({
                                "name": r.get::<_, String>(1)?,
                                "type": r.get::<_, String>(2)?,
                                "not_null": r.get::<_, bool>(3)?,
                                "primary_key": r.get::<_, i64>(5)? > 0,
                            }))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    cols
                };
                let count: Option<i64> = conn
                    .query_row(&format!("SELECT count(*) FROM {}", quote(name)), [], |r| {
                        r.get(0)
                    })
                    .ok();
                let mut sample = Vec::new();
                if max_sample_rows > 0 {
                    if let Ok(mut s) = conn.prepare(&format!(
                        "SELECT * FROM {} LIMIT {max_sample_rows}",
                        quote(name)
                    )) {
                        let n = s.column_count();
                        let mut rows = s.query([])?;
                        while let Ok(Some(row)) = rows.next() {
                            let vals: Vec<Value> = (0..n)
                                .map(|i| row.get_ref(i).map(cell).unwrap_or(Value::Null))
                                .collect();
                            sample.push(Value::Array(vals));
                        }
                    }
                }
                tables.push(json!({"name": name, "columns": columns, "row_count": count, "sample_rows": sample, "sql": sql}));
            }
            "view" => views.push(json!({"name": name, "sql": sql})),
            "index" => indexes.push(json!({"name": name, "table": tbl, "sql": sql})),
            "trigger" => triggers.push(json!({"name": name, "table": tbl})),
            _ => {}
        }
    }
    let pragma = |p: &str| -> Value {
        conn.query_row(&format!("PRAGMA {p}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => json!(i),
            rusqlite::types::Value::Text(t) => json!(t),
            _ => Value::Null,
        })
        .unwrap_or(Value::Null)
    };
    Ok(json!({
        "tables": tables,
        "views": views,
        "indexes": indexes,
        "triggers": triggers,
        "tables_truncated": truncated,
        "page_size": pragma("page_size"),
        "page_count": pragma("page_count"),
        "journal_mode": pragma("journal_mode"),
        "user_version": pragma("user_version"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{ClientGrants, Grant, Permission, Source};

    fn open(path: &std::path::Path) -> Opened {
        let g = ClientGrants::new(
            "t",
            vec![Grant {
                permission: Permission::FileRead,
                pattern: "/**".into(),
                auto: false,
                source: Source::Config,
            }],
            std::path::Path::new("/"),
        )
        .unwrap();
        crate::clients::paths::open_for_read(&g, &path.to_string_lossy(), &[]).unwrap()
    }

    #[test]
    fn digest_lists_tables_counts_and_samples() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        let c = Connection::open(&p).unwrap();
        c.execute_batch(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB);
             INSERT INTO t(name, data) VALUES ('a', x'0102'), ('b', NULL), ('c', NULL);
             CREATE VIEW v AS SELECT name FROM t; CREATE INDEX t_name ON t(name);",
        )
        .unwrap();
        drop(c);
        let d = digest(&open(&p), 2).unwrap();
        let t = &d["tables"][0];
        assert_eq!(t["name"], "t");
        assert_eq!(t["row_count"], 3);
        assert_eq!(t["sample_rows"].as_array().unwrap().len(), 2);
        assert_eq!(t["sample_rows"][0][2], "<blob 2 bytes>");
        assert_eq!(t["columns"][1]["not_null"], true);
        assert_eq!(d["views"][0]["name"], "v");
        assert_eq!(d["indexes"][0]["name"], "t_name");
    }

    #[test]
    fn attach_writes_and_pragmas_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        Connection::open(&p)
            .unwrap()
            .execute_batch("CREATE TABLE t(a)")
            .unwrap();
        let conn = open_guarded(&open(&p)).unwrap();
        let other = dir.path().join("other.db");
        for sql in [
            format!("ATTACH DATABASE '{}' AS o", other.display()),
            "INSERT INTO t VALUES (1)".to_string(),
            "PRAGMA writable_schema = ON".to_string(),
            "CREATE TABLE u(b)".to_string(),
            "SELECT load_extension('x')".to_string(),
        ] {
            assert!(conn.execute_batch(&sql).is_err(), "{sql} should be refused");
        }
        assert!(!other.exists(), "ATTACH must not create a file");
    }

    #[test]
    fn runaway_queries_stop_at_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        Connection::open(&p)
            .unwrap()
            .execute_batch("CREATE TABLE t(a)")
            .unwrap();
        let conn = open_guarded(&open(&p)).unwrap();
        conn.progress_handler(1000, Some(|| true)).unwrap();
        let r: rusqlite::Result<i64> = conn.query_row(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
            [],
            |r| r.get(0),
        );
        assert!(r.is_err(), "an endless query is interrupted");
    }
}
