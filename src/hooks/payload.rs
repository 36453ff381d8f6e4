//! The JSON a hook reads on its stdin: one validation of any kind (`kind`: `change_set`, a
//! command's overlay run; `generated`, content a model generated for `generate_file`,
//! `generate_sql` or a loop's write; `hosts`, hosts a run was refused; `command`, asked before
//! it runs) — id, client, command, the job's stated `purpose`, risk, policy, reasons, deadline —,
//! its change set when it has one (summary, every changed path apart from the diff with whether
//! the diff shows it whole, the capped diff, the command's output, signatures), the generated
//! content (path, the content up to [`CONTENT_MAX`]), the hosts it asks about (`network`: each
//! with where it resolved and of which class, [`add_network`]), and the `approve` /
//! `approve --learn` / `deny` command lines for the operator. Everything in it but the command
//! lines may come from the agent: hooks must treat it as data. `text` is the same validation for a
//! human to read (a desktop notice, an e-mail): the agent's text in it escaped by `shown`, so a
//! hook that renders text uses `.text`, never a raw field.
//!
//! This module owns *what a payload says it cut*: `truncated` is true when anything was (the
//! purpose, the diff, the command's output, a file whose content the diff does not show whole —
//! binary, over the per-file cap, past the change set's cap —, or generated content past its
//! cap), and `cut` names each such thing.
//! A reviewer's `approve` of a payload with anything cut is never applied (`reviewer.rs`).

use crate::ask::validations::Validation;
use crate::bash::changes;
use rusqlite::{Connection, OptionalExtension};
use serde_json::{json, Value};
use std::path::Path;

/// The longest diff a payload carries (bytes).
pub const DIFF_MAX: usize = 64 * 1024;

/// The longest generated content a payload carries (bytes).
pub const CONTENT_MAX: usize = 64 * 1024;

/// How many lines of the diff `text` carries (the whole capped diff is in `change_set.diff`).
pub const TEXT_DIFF_LINES: usize = 80;

/// The longest purpose a payload carries (bytes).
pub const PURPOSE_MAX: usize = 4000;

/// The payload of `v`; `lifecycle` (read) gives the job's action and stated purpose.
pub fn build(lifecycle: &Connection, data_dir: &Path, v: &Validation, event: &str) -> Value {
    let m = changes::load_manifest(data_dir, v.job_id).ok().flatten();
    build_with(lifecycle, data_dir, v, event, m)
}

/// [`build`] with the change set's manifest given (`brainloop reviewer eval` replays the copy
/// kept when the human decided, `changes::load_decided`): shown only when it is the one the
/// validation is bound to (its effect hash).
pub fn build_with(
    lifecycle: &Connection,
    data_dir: &Path,
    v: &Validation,
    event: &str,
    manifest: Option<changes::Manifest>,
) -> Value {
    let reasons: Vec<String> = v
        .reasons
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    let mut cut = Vec::new();
    let manifest = manifest.filter(|m| v.command_hash.as_deref() == Some(m.effect_hash.as_str()));
    // What `text` shows of it: the one previewer's lines (`changes::shown_diff_lines`).
    let diff_text = manifest
        .as_ref()
        .map(|m| changes::shown_diff_lines(&m.change_set, "  ", TEXT_DIFF_LINES, &v.id));
    let change_set = manifest
        .map(|m| {
            let cs = &m.change_set;
            let full = cs.diff();
            let diff_cut = full.len() > DIFF_MAX || cs.diff_truncated;
            if diff_cut {
                cut.push(format!(
                    "change_set.diff: the diff stops at its cap ({} bytes in all)",
                    full.len()
                ));
            }
            if m.truncated {
                cut.push("change_set.stdout/stderr: the command's output was cut".into());
            }
            let paths: Vec<Value> = cs
                .changes
                .iter()
                .map(|c| {
                    let whole = c.shown_whole();
                    if !whole {
                        cut.push(format!(
                            "change_set.paths: the diff does not show {:?} whole (binary, too large, or past a cap)",
                            crate::quote::prefix(&c.path, crate::quote::VALUE_MAX)
                        ));
                    }
                    json!({"path": c.path, "kind": c.kind, "shown_whole": whole})
                })
                .collect();
            json!({
                "summary": cs.summary(),
                "paths": paths,
                "diff": crate::quote::prefix(&full, DIFF_MAX),
                "diff_truncated": diff_cut,
                "exit_code": m.exit_code,
                "stdout": m.stdout,
                "stderr": m.stderr,
                "output_truncated": m.truncated,
                "signatures": m.signatures,
            })
        });
    // Generated content this validation is bound to (`generate_file`, `generate_sql`, a loop's
    // write): shown whole up to its cap, so a reviewer judges what would be written.
    let generated = generated_of(lifecycle, v).map(|(action, target, content)| {
        if content.len() > CONTENT_MAX {
            cut.push(format!(
                "generated.content: cut at {CONTENT_MAX} bytes ({} in all)",
                content.len()
            ));
        }
        json!({
            "action": action,
            "path": target,
            "bytes": content.len(),
            "content": crate::quote::prefix(&content, CONTENT_MAX),
            "content_truncated": content.len() > CONTENT_MAX,
        })
    });
    // Generated content staged as a change set (`generate_file`) carries both, and stays of
    // kind `generated`: a reviewer never approves it.
    let kind = match (&change_set, &generated) {
        (_, Some(_)) => "generated",
        (Some(_), None) => "change_set",
        (None, None) => "command",
    };
    let (action, purpose, purpose_cut) = job_of(lifecycle, v.job_id);
    if purpose_cut {
        cut.insert(0, format!("purpose: cut at {PURPOSE_MAX} bytes"));
    }
    let cli = format!(
        "brainloop --data-dir {}",
        shell_word(&data_dir.display().to_string())
    );
    let text = text(
        v,
        purpose.as_deref(),
        change_set.as_ref().and_then(|c| c["summary"].as_str()),
        diff_text.as_deref(),
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
        "command_hash": v.command_hash,
        "purpose": purpose,
        "risk": v.risk_score,
        "policy": v.policy,
        "permission_set": v.permission_set,
        "reasons": reasons,
        "requested_at": v.requested_at,
        "expires_at": v.expires_at,
        "kind": kind,
        "change_set": change_set,
        "generated": generated,
        "network": Value::Null,
        "truncated": !cut.is_empty(),
        "cut": cut,
        "approve": format!("{cli} approve {}", v.id),
        "approve_learn": format!("{cli} approve {} --learn", v.id),
        "deny": format!("{cli} deny {}", v.id),
        "show": format!("{cli} show {}", v.id),
        "text": text,
    })
}

/// The host request of the validation (`egress::store::request`), added to its payload: the
/// hosts with where each resolved and of which class, under `network`; a validation that asks
/// about hosts a run was refused is of kind `hosts` (one asked up front stays `command`, its
/// hosts named).
pub fn add_network(p: &mut Value, request: Option<&crate::egress::store::Request>) {
    let Some(r) = request else {
        return;
    };
    let up_front = p["command_hash"].as_str() == Some(r.command_hash.as_str());
    if p["kind"] == "command" && !up_front {
        p["kind"] = json!("hosts");
    }
    p["network"] = json!({
        "hosts": r.hosts,
        "resolved": r.resolved,
        "asked": if up_front { "named by the command, before it runs" } else { "refused to the command's run" },
    });
}

/// The generated content `v` is bound to: (action, target, content), when its hash is the
/// validation's.
fn generated_of(lifecycle: &Connection, v: &Validation) -> Option<(String, String, String)> {
    let (action, target, content, hash): (String, String, String, String) = lifecycle
        .query_row(
            "SELECT action, target, content, content_hash FROM llm_pending WHERE job_id = ?1",
            [v.job_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .ok()
        .flatten()?;
    (v.command_hash.as_deref() == Some(hash.as_str())).then_some((action, target, content))
}

/// What the payload `p` says it cut (`build`); a payload that says nothing about it (one that
/// could not be built) counts as cut.
pub fn cut(p: &Value) -> Vec<String> {
    match (p["truncated"].as_bool(), p["cut"].as_array()) {
        (Some(false), Some(c)) if c.is_empty() => Vec::new(),
        (Some(_), Some(c)) if !c.is_empty() => c
            .iter()
            .map(|x| x.as_str().unwrap_or("?").to_string())
            .collect(),
        _ => vec!["the payload does not say what it cut (it could not be built)".into()],
    }
}

/// The validation as lines a human reads, every agent-derived value one escaped line
/// (`shown::line`): what asks, what for, what it changes (and its diff, multi-line, from the one
/// previewer), why, and how to answer.
fn text(
    v: &Validation,
    purpose: Option<&str>,
    summary: Option<&str>,
    diff: Option<&str>,
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
        t.push_str(&format!("- {}\n", crate::shown::item(r, "  ")));
    }
    if let Some(d) = diff {
        t.push_str(d);
    }
    t.push_str(&format!(
        "{cli} show {id}\n{cli} approve {id}\n{cli} deny {id}",
        id = v.id
    ));
    t
}

/// The job's action, what it says it is for (`purpose`, or a loop's `goal`) and whether that
/// was cut at [`PURPOSE_MAX`].
fn job_of(lifecycle: &Connection, job_id: i64) -> (Option<String>, Option<String>, bool) {
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
        return (None, None, false);
    };
    let p: Value = params
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or(Value::Null);
    let purpose = ["purpose", "goal"].iter().find_map(|k| p[*k].as_str());
    let purpose_cut = purpose.is_some_and(|s| s.len() > PURPOSE_MAX);
    (
        action,
        purpose.map(|s| crate::quote::prefix(s, PURPOSE_MAX)),
        purpose_cut,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_counts_as_cut_unless_it_says_it_cut_nothing() {
        assert!(cut(&json!({"truncated": false, "cut": []})).is_empty());
        assert_eq!(
            cut(&json!({"truncated": true, "cut": ["purpose: cut at 4000 bytes"]})),
            vec!["purpose: cut at 4000 bytes".to_string()]
        );
        // What could not be built, or says nothing, or contradicts itself: cut.
        for p in [
            json!({"event": "validation", "id": "x", "error": "cannot read"}),
            json!({"truncated": false}),
            json!({"truncated": true, "cut": []}),
            json!({"truncated": "no", "cut": []}),
            json!({"truncated": false, "cut": ["diff"]}),
        ] {
            assert!(!cut(&p).is_empty(), "{p}");
        }
    }
}
