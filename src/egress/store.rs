//! The egress tables of command_security.db: connections recorded per job (the worker), hosts a
//! human approved per (client, command) (the operator CLI only), and open host requests (the
//! worker, read by `approve`). A connection row may stand for several attempts (`attempts`,
//! from `first_ms` to `at_ms`: the proxy's per-host aggregates past its one-by-one records, and
//! its one row per run of connections closed past the cap); every reader here counts attempts.

use super::proxy::Connection;
use crate::db::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection as Db, OptionalExtension};
use serde::Serialize;

/// The retention pass, inside its transaction: at most `batch` connection records older than
/// `before` are deleted (kept as long as executions, issue 23).
pub fn prune(tx: &rusqlite::Transaction<'_>, before: i64, batch: usize) -> rusqlite::Result<usize> {
    tx.execute(
        "DELETE FROM egress_connections WHERE id IN
             (SELECT id FROM egress_connections WHERE at_ms < ?1 LIMIT ?2)",
        params![before, batch as i64],
    )
}

/// Records what one run's proxy saw.
pub fn record(
    db: &mut Db,
    job_id: i64,
    client_id: &str,
    command_hash: &str,
    conns: &[Connection],
) -> Result<()> {
    if conns.is_empty() {
        return Ok(());
    }
    write_tx(db, |tx| {
        let mut st = tx.prepare_cached(
            "INSERT INTO egress_connections(job_id, client_id, command_hash, host, port, protocol, outcome, rule, address, reason, bytes_up, bytes_down, at_ms, attempts, first_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?;
        for c in conns {
            // The table knows allowed / refused / failed (a CHECK since schema 6): an
            // exfiltration attempt (issue 38) is stored refused, its reason saying what it was.
            let outcome = if c.outcome == super::secrets::EXFILTRATION {
                "refused"
            } else {
                c.outcome.as_str()
            };
            st.execute(params![
                job_id,
                client_id,
                command_hash,
                c.host,
                c.port,
                c.protocol,
                outcome,
                c.rule,
                c.address,
                c.reason,
                c.bytes_up as i64,
                c.bytes_down as i64,
                c.at_ms,
                c.attempts.max(1) as i64,
                c.first_ms
            ])?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The host rules a human approved for this client's command.
pub fn approved_hosts(db: &Db, client_id: &str, command_hash: &str) -> Result<Vec<String>> {
    let mut st = db.prepare_cached(
        "SELECT rule FROM egress_hosts WHERE client_id = ?1 AND command_hash = ?2 ORDER BY rule",
    )?;
    let v = st
        .query_map(params![client_id, command_hash], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(v)
}

/// Records the human's host approvals (operator CLI). A rule replaces the client's earlier rule
/// for the same `host:port` of the command (`name:80` approved plainly, then `name:80+private`
/// with `--allow-private-hosts`: the latter, decided on what the later prompt showed, stands).
pub fn approve_hosts(
    db: &mut Db,
    client_id: &str,
    command_hash: &str,
    rules: &[String],
    validation_id: &str,
    decided_by: &str,
) -> Result<()> {
    let now = crate::time::now_ms();
    write_tx(db, |tx| {
        for r in rules {
            let base = r.split('+').next().unwrap_or(r);
            tx.execute(
                "DELETE FROM egress_hosts WHERE client_id = ?1 AND command_hash = ?2 AND (rule = ?3 OR substr(rule, 1, length(?3) + 1) = ?3 || '+')",
                params![client_id, command_hash, base],
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO egress_hosts(client_id, command_hash, rule, validation_id, decided_by, decided_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![client_id, command_hash, r, validation_id, decided_by, now],
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

/// An open host request: the validation asking a human about refused hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub validation_id: String,
    pub job_id: i64,
    pub client_id: String,
    pub command_hash: String,
    pub hosts: Vec<String>,
    /// Where each host resolved when the human was asked (shown in the prompt).
    pub resolved: Vec<super::resolve::Resolved>,
}

/// The `hosts` column: `{"hosts": [...], "resolved": [...]}` (a bare array of hosts before
/// the resolution was stored).
#[derive(Serialize, serde::Deserialize)]
struct HostsColumn {
    hosts: Vec<String>,
    #[serde(default)]
    resolved: Vec<super::resolve::Resolved>,
}

pub fn save_request(db: &mut Db, r: &Request) -> Result<()> {
    let hosts = serde_json::to_string(&HostsColumn {
        hosts: r.hosts.clone(),
        resolved: r.resolved.clone(),
    })?;
    write_tx(db, |tx| {
        tx.execute(
            "INSERT OR REPLACE INTO egress_requests(validation_id, job_id, client_id, command_hash, hosts, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![r.validation_id, r.job_id, r.client_id, r.command_hash, hosts, crate::time::now_ms()],
        )
    })?;
    Ok(())
}

pub fn request(db: &Db, validation_id: &str) -> Result<Option<Request>> {
    let row: Option<(i64, String, String, String)> = db
        .query_row(
            "SELECT job_id, client_id, command_hash, hosts FROM egress_requests WHERE validation_id = ?1",
            [validation_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    Ok(row.map(|(job_id, client_id, command_hash, hosts)| {
        let col = serde_json::from_str::<HostsColumn>(&hosts).unwrap_or_else(|_| HostsColumn {
            hosts: serde_json::from_str(&hosts).unwrap_or_default(),
            resolved: Vec::new(),
        });
        Request {
            validation_id: validation_id.to_string(),
            job_id,
            client_id,
            command_hash,
            hosts: col.hosts,
            resolved: col.resolved,
        }
    }))
}

/// Every connection one job's runs made or tried, oldest first.
pub fn of_job(db: &Db, job_id: i64) -> Result<Vec<Connection>> {
    let mut st = db.prepare_cached(
        "SELECT host, port, protocol, outcome, rule, address, reason, bytes_up, bytes_down, at_ms, attempts, coalesce(first_ms, at_ms) FROM egress_connections WHERE job_id = ?1 ORDER BY id",
    )?;
    let v = st
        .query_map([job_id], |r| {
            Ok(Connection {
                host: r.get(0)?,
                port: r.get::<_, i64>(1)? as u16,
                protocol: r.get(2)?,
                outcome: r.get(3)?,
                rule: r.get(4)?,
                address: r.get(5)?,
                reason: r.get(6)?,
                bytes_up: r.get::<_, i64>(7)? as u64,
                bytes_down: r.get::<_, i64>(8)? as u64,
                at_ms: r.get(9)?,
                attempts: r.get::<_, i64>(10)?.max(1) as u64,
                first_ms: r.get(11)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// What one command reached or wanted, per `host:port` and outcome, over its recorded runs
/// (`connections` counts attempts; the cap's row is shown by its host alone).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostSummary {
    pub host: String,
    pub outcome: String,
    pub connections: i64,
    pub bytes: i64,
    pub last_ms: i64,
}

pub fn of_command(db: &Db, command_hash: &str) -> Result<Vec<HostSummary>> {
    let mut st = db.prepare_cached(
        "SELECT CASE WHEN protocol = 'cap' THEN host ELSE host || ':' || port END, outcome, sum(attempts), sum(bytes_up + bytes_down), max(at_ms) FROM egress_connections WHERE command_hash = ?1 GROUP BY host, port, outcome, protocol = 'cap' ORDER BY host, port, outcome",
    )?;
    let v = st
        .query_map([command_hash], |r| {
            Ok(HostSummary {
                host: r.get(0)?,
                outcome: r.get(1)?,
                connections: r.get(2)?,
                bytes: r.get(3)?,
                last_ms: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// The proxy's counters since `since_ms`: connections per outcome and bytes (status).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Counters {
    pub allowed: i64,
    pub refused: i64,
    pub failed: i64,
    pub bytes_up: i64,
    pub bytes_down: i64,
}

pub fn counters(db: &Db, since_ms: i64) -> Result<Counters> {
    Ok(db.query_row(
        "SELECT coalesce(sum((outcome = 'allowed') * attempts), 0), coalesce(sum((outcome = 'refused') * attempts), 0), coalesce(sum((outcome = 'failed') * attempts), 0), coalesce(sum(bytes_up), 0), coalesce(sum(bytes_down), 0) FROM egress_connections WHERE at_ms >= ?1",
        [since_ms],
        |r| {
            Ok(Counters {
                allowed: r.get(0)?,
                refused: r.get(1)?,
                failed: r.get(2)?,
                bytes_up: r.get(3)?,
                bytes_down: r.get(4)?,
            })
        },
    )?)
}
