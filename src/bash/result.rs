//! The results a command's job ends with (seed 001's shapes): the one finished-command result —
//! `{success, exit_code, signal, stdout, stderr, duration_ms, policy_used, truncated, timed_out,
//! sandbox, permission_set, command_hash}` and its error text — whether it ran directly (plus
//! `egress`, `executed_path`) or on the overlay (plus `effects`, `applied`, `undo`); the effects'
//! summary; the error of an overlay run over its cap.

use super::changes::Manifest;
use super::Outcome;
use crate::db::output::JobStatus;
use serde_json::{json, Map, Value};

/// A command that ran to an end, as its result shows it.
pub struct Finished<'a> {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// The timeout it had (named when it ran out).
    pub timeout_ms: u64,
    pub success: bool,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub truncated: bool,
    pub duration_ms: u64,
    pub sandbox: &'a str,
    pub permission_set: &'a str,
    pub command_hash: &'a str,
    pub policy_used: &'a str,
}

impl<'a> Finished<'a> {
    /// An overlay run, from its manifest.
    pub fn of_manifest(m: &'a Manifest, policy_used: &'a str) -> Finished<'a> {
        Finished {
            exit_code: m.exit_code,
            signal: m.signal,
            timed_out: m.timed_out,
            timeout_ms: m.timeout_ms,
            success: m.success,
            stdout: &m.stdout,
            stderr: &m.stderr,
            truncated: m.truncated,
            duration_ms: m.duration_ms,
            sandbox: &m.sandbox,
            permission_set: crate::permset::PermissionSet::Filesystem.as_str(),
            command_hash: &m.command_hash,
            policy_used,
        }
    }

    /// Why it failed, when it did.
    fn error(&self) -> Option<String> {
        if self.success {
            return None;
        }
        Some(if self.timed_out {
            format!(
                "timed out after {} ms (process tree killed)",
                self.timeout_ms
            )
        } else if let Some(code) = self.exit_code {
            format!("exit code {code}")
        } else if let Some(s) = self.signal {
            format!("killed by signal {s}")
        } else {
            "the command did not exit normally".into()
        })
    }
}

/// The outcome of a finished command, with the fields of its kind of run (`extra`).
pub fn finished(f: &Finished<'_>, extra: Map<String, Value>) -> Outcome {
    let mut result = json!({
        "success": f.success,
        "exit_code": f.exit_code,
        "signal": f.signal,
        "stdout": f.stdout,
        "stderr": f.stderr,
        "duration_ms": f.duration_ms,
        "policy_used": f.policy_used,
        "truncated": f.truncated,
        "timed_out": f.timed_out,
        "sandbox": f.sandbox,
        "permission_set": f.permission_set,
        "command_hash": f.command_hash,
    });
    if let Some(o) = result.as_object_mut() {
        o.extend(extra);
    }
    Outcome {
        status: if f.success {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        },
        error: f.error(),
        result: Some(result),
    }
}

/// The result of a command that ran on the overlay: its effects, what was applied, how to undo;
/// of another action's change set, that action's result (`Manifest::result`) with the same fields.
pub fn on_overlay(
    m: &Manifest,
    policy_used: &str,
    applied: Value,
    undo: Option<String>,
) -> Outcome {
    let mut extra = Map::new();
    extra.insert("effects".into(), effects_json(m));
    extra.insert("applied".into(), applied);
    if let Some(u) = undo {
        extra.insert("undo".into(), json!(u));
    }
    // Another action's change set (`generate_file`): its own result, with the same fields.
    if let Some(Value::Object(own)) = &m.result {
        let mut result = own.clone();
        result.insert("policy_used".into(), json!(policy_used));
        result.extend(extra);
        return Outcome {
            status: JobStatus::Succeeded,
            error: None,
            result: Some(Value::Object(result)),
        };
    }
    finished(&Finished::of_manifest(m, policy_used), extra)
}

/// A change set's summary: counts, hash, the first 200 paths.
pub fn effects_json(m: &Manifest) -> Value {
    let (a, md, d) = m.change_set.counts();
    json!({
        "added": a,
        "modified": md,
        "deleted": d,
        "change_set_hash": m.change_set.hash,
        "changes": m.change_set.changes.iter().take(200).map(|c| json!({"path": c.path, "kind": c.kind})).collect::<Vec<_>>(),
    })
}

/// `s` cut to `max` bytes on a character boundary, and whether it was cut.
pub fn cap_str(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_string(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}… (truncated)", &s[..end]), true)
}

/// The error of an overlay run the sandbox helper stopped over its cap (`what`: the helper's
/// record, `bytes LIMIT MEASURED` / `entries LIMIT MEASURED` / `unmeasured`).
pub fn over_cap_message(what: &str, max_bytes: u64, cap_key: &str, max_inodes: u64) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    let mut w = what.split_whitespace();
    match w.next() {
        Some("entries") => format!(
            "the command created more than {max_inodes} files and directories on the overlay (overlay_max_inodes); it was stopped and nothing was kept"
        ),
        Some("bytes") if cap_key == "pending_max_bytes_per_client" => format!(
            "the command wrote more than the {} left of this client's budget for change sets waiting for a human (pending_max_bytes_per_client); it was stopped and nothing was kept — answer or deny the client's pending validations (`brainloop validations`), or raise pending_max_bytes_per_client",
            mib(max_bytes)
        ),
        Some("bytes") => format!(
            "the command wrote more than {} on the overlay (overlay_max_bytes); it was stopped and nothing was kept",
            mib(max_bytes)
        ),
        _ => format!(
            "the command's writes on the overlay could not be measured (a tree too deep to walk), so they count as over the cap (overlay_max_bytes {}); it was stopped and nothing was kept",
            mib(max_bytes)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done<'a>(f: impl FnOnce(&mut Finished<'a>)) -> Outcome {
        let mut x = Finished {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            timeout_ms: 5000,
            success: true,
            stdout: "out",
            stderr: "",
            truncated: false,
            duration_ms: 3,
            sandbox: "strict",
            permission_set: "filesystem",
            command_hash: "h",
            policy_used: "auto_approve",
        };
        f(&mut x);
        finished(&x, Map::new())
    }

    /// One wording for every finished command, direct or on the overlay.
    #[test]
    fn the_error_names_how_it_ended() {
        assert_eq!(done(|_| {}).error, None);
        assert_eq!(done(|_| {}).status, JobStatus::Succeeded);
        let failed = |f: &mut Finished| f.success = false;
        let e = |o: Outcome| (o.status, o.error.unwrap_or_default());
        assert_eq!(
            e(done(|f| {
                failed(f);
                f.exit_code = Some(2)
            })),
            (JobStatus::Failed, "exit code 2".into())
        );
        assert_eq!(
            e(done(|f| {
                failed(f);
                f.exit_code = Some(143);
                f.timed_out = true
            })),
            (
                JobStatus::Failed,
                "timed out after 5000 ms (process tree killed)".into()
            )
        );
        assert_eq!(
            e(done(|f| {
                failed(f);
                f.exit_code = None;
                f.signal = Some(9)
            })),
            (JobStatus::Failed, "killed by signal 9".into())
        );
        let o = done(|_| {});
        let r = o.result.unwrap_or_default();
        for k in [
            "success",
            "exit_code",
            "signal",
            "stdout",
            "stderr",
            "duration_ms",
            "policy_used",
            "truncated",
            "timed_out",
            "sandbox",
            "permission_set",
            "command_hash",
        ] {
            assert!(r.get(k).is_some(), "{k} missing: {r}");
        }
    }
}
