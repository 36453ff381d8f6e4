//! The input row decoder: one arbitrary `jobs` row (any SQLite type in any column, invalid
//! UTF-8 text, NUL bytes, oversized params) goes through `db::input::scan` (the claim path's
//! decoder) and `db::lifecycle::claim` / `start` (the snapshot a handler runs from).
//! Oracle: never panics; exactly the inserted row comes back; a rejected row has a named
//! reason, no params and reaches the snapshot unchanged; an accepted row has a non-empty
//! action without NUL, params holding a JSON object and a valid client id.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;

#[derive(Arbitrary, Debug)]
enum Val {
    /// The column is left out (its DEFAULT applies).
    Default,
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// Arbitrary bytes stored as TEXT (invalid UTF-8, NUL).
    RawText(Vec<u8>),
    /// A JSON-looking text built from a few fragments.
    Json(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Row {
    action: Val,
    params: Val,
    client_id: Val,
    priority: Val,
    not_before: Val,
    created_at: Val,
    cap: u16,
}

fn json_text(b: &[u8]) -> String {
    const PIECES: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        "\"command\"",
        "\"ls\"",
        "1",
        "-0",
        "1e400",
        "null",
        "true",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "\"",
        "{}",
        " ",
        "\"a\"",
        "0.5",
    ];
    b.iter()
        .map(|x| PIECES[*x as usize % PIECES.len()])
        .collect()
}

fn bind(v: &Val) -> Option<(String, Sql)> {
    Some(match v {
        Val::Default => return None,
        Val::Null => ("?".into(), Sql::Null),
        Val::Int(i) => ("?".into(), Sql::Integer(*i)),
        Val::Real(f) => ("?".into(), Sql::Real(*f)),
        Val::Text(s) => ("?".into(), Sql::Text(s.clone())),
        Val::Blob(b) => ("?".into(), Sql::Blob(b.clone())),
        Val::RawText(b) => ("CAST(? AS TEXT)".into(), Sql::Blob(b.clone())),
        Val::Json(b) => ("?".into(), Sql::Text(json_text(b))),
    })
}

fuzz_target!(|row: Row| {
    let input = Connection::open_in_memory().unwrap();
    input
        .execute_batch(brainloop::db::DbKind::Input.schema())
        .unwrap();
    let cols = [
        ("action", &row.action),
        ("params", &row.params),
        ("client_id", &row.client_id),
        ("priority", &row.priority),
        ("not_before", &row.not_before),
        ("created_at", &row.created_at),
    ];
    let mut names = Vec::new();
    let mut exprs = Vec::new();
    let mut values = Vec::new();
    for (name, v) in cols {
        if let Some((e, val)) = bind(v) {
            names.push(name);
            exprs.push(e);
            values.push(val);
        }
    }
    let sql = if names.is_empty() {
        "INSERT INTO jobs DEFAULT VALUES".to_string()
    } else {
        format!(
            "INSERT INTO jobs({}) VALUES ({})",
            names.join(", "),
            exprs.join(", ")
        )
    };
    // NOT NULL constraints refuse some rows: producers cannot write those either
    if input
        .execute(&sql, rusqlite::params_from_iter(values.iter()))
        .is_err()
    {
        return;
    }
    let id = input.last_insert_rowid();
    let cap = u64::from(row.cap);
    let rows = brainloop::db::input::scan(&input, 0, 10, cap).expect("scan must not fail");
    assert_eq!(rows.len(), 1, "one row in, one row out");
    let job = &rows[0];
    assert_eq!(job.id, id);
    match &job.reject {
        Some(reason) => {
            let prefix = format!("invalid job row {id}: ");
            assert!(reason.starts_with(&prefix), "unnamed reason: {reason:?}");
            let named = &reason[prefix.len()..];
            assert!(
                !named.trim().is_empty() && named.split("; ").all(|p| !p.trim().is_empty()),
                "empty reason: {reason:?}"
            );
            assert!(job.params.is_none() && job.not_before.is_none());
        }
        None => {
            let action = job.action.as_deref().expect("accepted row without action");
            assert!(!action.trim().is_empty() && !action.contains('\0'));
            let params = job.params.as_deref().expect("accepted row without params");
            assert!(
                params.len() as u64 <= cap.max(2),
                "params over the cap accepted"
            );
            let v: serde_json::Value =
                serde_json::from_str(params).expect("accepted params are JSON");
            assert!(v.is_object(), "accepted params are an object");
            assert!(!job.client_id.is_empty() && !job.client_id.contains('\0'));
        }
    }

    // the snapshot the handler runs from carries the decoder's verdict unchanged
    let mut life = Connection::open_in_memory().unwrap();
    life.execute_batch(brainloop::db::DbKind::Lifecycle.schema())
        .unwrap();
    let tx = life.transaction().unwrap();
    brainloop::db::lifecycle::claim(&tx, &rows, &Default::default(), &Default::default(), 1).expect("claim");
    let snaps = brainloop::db::lifecycle::start(&tx, &[id], 2).expect("start");
    tx.commit().unwrap();
    assert_eq!(snaps.len(), 1);
    let s = &snaps[0];
    assert_eq!(s.reject_reason, job.reject);
    assert_eq!(s.action, job.action);
    assert_eq!(s.params, job.params);
    assert_eq!(s.client_id, job.client_id);
});
