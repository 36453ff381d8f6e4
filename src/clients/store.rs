//! Operator grants and client permission requests in command_security.db
//! (`client_permissions`, `permission_requests`). Grants are written only by the operator's CLI;
//! requests are filed by clients through the worker and decided by the operator.

use super::{Grant, Permission, Source};
use crate::db::write_tx;
use anyhow::{bail, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

/// Operator grants of one client (or of all, with `None`).
pub fn list(conn: &Connection, client: Option<&str>) -> Result<Vec<Grant>> {
    Ok(list_with_clients(conn, client)?
        .into_iter()
        .map(|(_, g)| g)
        .collect())
}

pub fn list_with_clients(conn: &Connection, client: Option<&str>) -> Result<Vec<(String, Grant)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT client_id, permission, pattern, auto_approve FROM client_permissions
         WHERE ?1 IS NULL OR client_id = ?1 ORDER BY client_id, permission, pattern",
    )?;
    let rows = stmt
        .query_map([client], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, bool>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for (c, p, pattern, auto) in rows {
        // A row with an unknown permission (edited by hand) is ignored, never widened.
        if let Ok(permission) = Permission::parse(&p) {
            out.push((
                c,
                Grant {
                    permission,
                    pattern,
                    auto,
                    source: Source::Operator,
                },
            ));
        }
    }
    Ok(out)
}

/// Validates a pattern for its permission.
pub fn check_pattern(p: Permission, pattern: &str) -> Result<()> {
    if pattern.is_empty() || pattern.contains('\0') {
        bail!("the pattern must not be empty");
    }
    if p.is_path() {
        let expanded = pattern.replace("{workspace}", "/workspace");
        if !expanded.starts_with('/') {
            bail!("{} patterns are absolute path globs (or start with {{workspace}}), e.g. '/srv/data/**'", p.as_str());
        }
        if expanded.split('/').any(|c| c == "..") {
            bail!("path patterns must not contain '..'");
        }
        globset::Glob::new(&expanded)
            .map_err(|e| anyhow::anyhow!("invalid glob {pattern:?}: {e}"))?;
    }
    if p == Permission::Secret
        && !pattern
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        bail!(
            "a SECRET grant names a configured secret ([secrets.NAME]: A-Z, 0-9, _), e.g. GH_TOKEN"
        );
    }
    Ok(())
}

pub fn grant(
    conn: &mut Connection,
    client: &str,
    p: Permission,
    pattern: &str,
    auto: bool,
    by: &str,
) -> Result<bool> {
    check_pattern(p, pattern)?;
    if auto && p != Permission::FileWrite {
        bail!("--auto applies only to FILE_WRITE grants");
    }
    let n = write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO client_permissions(client_id, permission, pattern, auto_approve, granted_by, granted_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(client_id, permission, pattern) DO UPDATE SET auto_approve = excluded.auto_approve",
            params![client, p.as_str(), pattern, auto, by, crate::time::now_ms()],
        )
    })?;
    Ok(n > 0)
}

/// Removes an operator grant; returns false if there was none.
pub fn revoke(conn: &mut Connection, client: &str, p: Permission, pattern: &str) -> Result<bool> {
    let n = write_tx(conn, |tx| {
        tx.execute(
            "DELETE FROM client_permissions WHERE client_id = ?1 AND permission = ?2 AND pattern = ?3",
            params![client, p.as_str(), pattern],
        )
    })?;
    Ok(n > 0)
}

#[derive(Debug, Clone, Serialize)]
pub struct Request {
    pub id: i64,
    pub client_id: String,
    pub permission: String,
    pub pattern: String,
    pub justification: Option<String>,
    pub status: String,
    pub requested_at: i64,
    pub decided_at: Option<i64>,
}

/// Pending requests a client may have at once (a flood of requests is refused).
pub const MAX_PENDING_REQUESTS: i64 = 20;

/// Files a request (from a job); returns its id, or the id of the same pending request.
pub fn file_request(
    conn: &mut Connection,
    client: &str,
    p: Permission,
    pattern: &str,
    justification: Option<&str>,
) -> Result<i64> {
    check_pattern(p, pattern)?;
    if p == Permission::Secret {
        bail!("SECRET is granted by the operator only (`brainloop grant CLIENT SECRET NAME`); a job cannot request it");
    }
    Ok(write_tx(conn, |tx| {
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM permission_requests WHERE client_id = ?1 AND permission = ?2 AND pattern = ?3 AND status = 'pending'",
                params![client, p.as_str(), pattern],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = existing {
            return Ok(id);
        }
        let pending: i64 = tx.query_row(
            "SELECT count(*) FROM permission_requests WHERE client_id = ?1 AND status = 'pending'",
            [client],
            |r| r.get(0),
        )?;
        if pending >= MAX_PENDING_REQUESTS {
            return Ok(-1);
        }
        tx.execute(
            "INSERT INTO permission_requests(client_id, permission, pattern, justification, status, requested_at)
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
            params![client, p.as_str(), pattern, justification, crate::time::now_ms()],
        )?;
        Ok(tx.last_insert_rowid())
    })?)
    .and_then(|id| {
        if id < 0 {
            bail!("client {client:?} already has {MAX_PENDING_REQUESTS} pending permission requests; wait for the operator")
        }
        Ok(id)
    })
}

pub fn requests(conn: &Connection, only_pending: bool) -> Result<Vec<Request>> {
    let mut stmt = conn.prepare(
        "SELECT id, client_id, permission, pattern, justification, status, requested_at, decided_at
         FROM permission_requests WHERE (?1 = 0 OR status = 'pending') ORDER BY id",
    )?;
    let rows = stmt
        .query_map([only_pending as i64], |r| {
            Ok(Request {
                id: r.get(0)?,
                client_id: r.get(1)?,
                permission: r.get(2)?,
                pattern: r.get(3)?,
                justification: r.get(4)?,
                status: r.get(5)?,
                requested_at: r.get(6)?,
                decided_at: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Grants (and records) or refuses a pending request.
pub fn decide(conn: &mut Connection, id: i64, grant_it: bool, by: &str) -> Result<Request> {
    let req = requests(conn, false)?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| anyhow::anyhow!("no permission request {id} (see `brainloop requests`)"))?;
    if req.status != "pending" {
        bail!("request {id} is already {}", req.status);
    }
    if grant_it {
        grant(
            conn,
            &req.client_id,
            Permission::parse(&req.permission)?,
            &req.pattern,
            false,
            by,
        )?;
    }
    write_tx(conn, |tx| {
        tx.execute(
            "UPDATE permission_requests SET status = ?2, decided_at = ?3 WHERE id = ?1",
            params![
                id,
                if grant_it { "granted" } else { "refused" },
                crate::time::now_ms()
            ],
        )
    })?;
    Ok(Request {
        status: if grant_it {
            "granted".into()
        } else {
            "refused".into()
        },
        ..req
    })
}
