//! The JSON a hook reads on its stdin: one validation (id, client, command, the job's stated
//! `purpose`, risk, policy, reasons, deadline), its change set when it has one (summary, paths,
//! capped diff, the command's output, signatures), and the `approve` / `approve --learn` /
//! `deny` command lines for the operator. Everything in it but the command lines may come from
//! the agent: hooks must treat it as data. `text` is the same validation for a human to read (a
//! desktop notice, an e-mail): the agent's text in it escaped by `shown`, so a hook that renders
//! text uses `.text`, never a raw field.

use crate::ask::validations::Validation;
use crate::bash::changes;
use rusqlite::{Connection, OptionalExtension};
use serde_json::{json, Value};
use std::path::Path;

/// The longest diff a payload carries (bytes).
pub const DIFF_MAX: usize = 64 * 1024;

/// The payload of `v`; `lifecycle` (read) gives the job's action and stated purpose.
pub fn build(lifecycle: &Connection, data_dir: &Path, v: &Validation, event: &str) -> Value {
    let reasons: Vec<String> = v
        .reasons
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    let change_set = changes::load_manifest(data_dir, v.job_id)
        .ok()
        .flatten()
        .filter(|m| v.command_hash.as_deref() == Some(m.effect_hash.as_str()))
        .map(|m| {
            json!({
                "summary": m.change_set.summary(),
                "paths": m.change_set.paths_json(),
                "diff": crate::quote::prefix(&m.change_set.diff(), DIFF_MAX),
                "exit_code": m.exit_code,
                "stdout": m.stdout,
                "stderr": m.stderr,
                "signatures": m.signatures,
            })
        });
    let (action, purpose) = job_of(lifecycle, v.job_id);
    let cli = format!(
        "brainloop --data-dir {}",
        shell_word(&data_dir.display().to_string())
    );
    let text = text(
        v,
        purpose.as_deref(),
        change_set.as_ref().and_then(|c| c["summary"].as_str()),
        &reasons,
        &cli,
    );
    json!({
        "event": event,
        "id": v.id,
        "job_id": v.job_id,
        "client": v.client_id,
        "action": action,
        "command": v.command,
        "purpose": purpose,
        "risk": v.risk_score,
        "policy": v.policy,
        "permission_set": v.permission_set,
        "reasons": reasons,
        "requested_at": v.requested_at,
        "expires_at": v.expires_at,
        "change_set": change_set,
        "approve": format!("{cli} approve {}", v.id),
        "approve_learn": format!("{cli} approve {} --learn", v.id),
        "deny": format!("{cli} deny {}", v.id),
        "show": format!("{cli} show {}", v.id),
        "text": text,
    })
}

/// The validation as lines a human reads, every agent-derived value one escaped line
/// (`shown::line`): what asks, what for, what it changes, why, and how to answer.
fn text(
    v: &Validation,
    purpose: Option<&str>,
    summary: Option<&str>,
    reasons: &[String],
    cli: &str,
) -> String {
    use crate::shown::line;
    let mut t = format!(
        "brainloop: client {} asks (job {}, risk {:.2}): {}\n",
        line(&v.client_id),
        v.job_id,
        v.risk_score.unwrap_or(0.0),
        line(v.command.as_deref().unwrap_or(""))
    );
    if let Some(p) = purpose {
        t.push_str(&format!("purpose: {}\n", line(p)));
    }
    t.push_str(&format!(
        "changes: {}\n",
        summary.map(line).unwrap_or_else(|| "asked up front".into())
    ));
    for r in reasons {
        t.push_str(&format!("- {}\n", line(r)));
    }
    t.push_str(&format!(
        "{cli} show {id}\n{cli} approve {id}\n{cli} deny {id}",
        id = v.id
    ));
    t
}

/// The job's action and what it says it is for (`purpose`, or a loop's `goal`).
fn job_of(lifecycle: &Connection, job_id: i64) -> (Option<String>, Option<String>) {
    let row: Option<(Option<String>, Option<String>)> = lifecycle
        .query_row(
            "SELECT action, params FROM queue WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .ok()
        .flatten();
    let Some((action, params)) = row else {
        return (None, None);
    };
    let p: Value = params
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or(Value::Null);
    let purpose = ["purpose", "goal"]
        .iter()
        .find_map(|k| p[*k].as_str())
        .map(|s| crate::quote::prefix(s, 2000));
    (action, purpose)
}

/// A path as one shell word for the command lines shown to the operator.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
