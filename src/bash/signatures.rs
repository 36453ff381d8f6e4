//! Operation signatures (DESIGN §5.12): approvals accrue per *kind* of operation, not per exact
//! command text. A signature is the program, its subcommand, its flag set, and its arguments
//! abstracted by kind — `sed -i EXPR WS_PATH`, `git commit -m MSG`, `> WS_PATH`. Only operations
//! that need a human (writes; not pure or read-only ones) get one.
//!
//! A signature is *learned* after `signature_approvals` (default 5) approved change sets that
//! contained it and no denial; a command all of whose signatures are learned is applied on the
//! overlay without asking (still journaled, still undoable). Never learned: operations with
//! network, process control, environment or unknown effects, writes outside the workspace,
//! computed program names; blocked and `ask_warning` commands never reach the overlay at all, and
//! approvals of commands asked up front are counted apart (`upfront_approvals`), never toward
//! learning. Operator overrides per signature: `never` denies any command containing it,
//! `always_ask` keeps asking, `always_allow` treats it as learned (on the overlay only).

use crate::bash::policy::Override;
use crate::classify::{CheckReport, Operation};
use crate::db::write_tx;
use anyhow::{bail, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// Programs whose first positional argument is a subcommand kept literally.
const SUBCOMMANDS: &[&str] = &[
    "git",
    "cargo",
    "npm",
    "pnpm",
    "yarn",
    "go",
    "pip",
    "pip3",
    "docker",
    "kubectl",
    "apt",
    "apt-get",
    "systemctl",
    "rustup",
    "poetry",
    "uv",
    "gh",
    "dotnet",
    "mvn",
    "gradle",
    "bundle",
];
/// Programs whose first positional argument is an expression (script), not a file.
const EXPR_FIRST: &[&str] = &[
    "sed", "awk", "gawk", "mawk", "grep", "egrep", "fgrep", "rg", "perl", "jq",
];
/// Flags whose value is a free-form message (for version-control programs).
const MSG_FLAGS: &[&str] = &["-m", "--message", "--msg", "-M"];
const MSG_PROGRAMS: &[&str] = &["git", "hg", "svn", "gh", "cvs", "jj"];
/// Flags whose value is an expression.
const EXPR_FLAGS: &[&str] = &["-e", "--expression", "--regexp"];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signature {
    pub text: String,
    pub program: String,
    pub learnable: bool,
    pub why_not: Option<String>,
}

/// Lexical normalisation (no file system access): `a/../b` → `b`.
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c.as_os_str()),
        }
    }
    out
}

const DYN: char = '…';

/// Whether a written path stays in the workspace (or is a harmless device).
pub fn write_in_workspace(w: &str, workdir: &Path, workspace: &Path) -> bool {
    if matches!(w, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty") {
        return true;
    }
    if w.contains(DYN) || w.contains('*') || w.starts_with('~') || w.contains('$') {
        // A computed path: the overlay still confines it, but we cannot say where it goes.
        return false;
    }
    let p = if Path::new(w).is_absolute() {
        PathBuf::from(w)
    } else {
        workdir.join(w)
    };
    normalise(&p).starts_with(workspace)
}

fn arg_kind(a: &str, workdir: &Path, workspace: &Path) -> String {
    if a.contains(DYN) {
        return "DYN".into();
    }
    if a.chars().any(char::is_whitespace) {
        return "MSG".into();
    }
    if a.contains("://") {
        return "URL".into();
    }
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_digit()) {
        return "NUM".into();
    }
    let path_like = a.contains('/')
        || a.starts_with('.')
        || workdir.join(a).exists()
        || a.rsplit_once('.')
            .is_some_and(|(s, e)| !s.is_empty() && !e.is_empty() && e.len() <= 5);
    if path_like {
        let p = if Path::new(a).is_absolute() {
            PathBuf::from(a)
        } else {
            workdir.join(a)
        };
        if normalise(&p).starts_with(workspace) {
            return "WS_PATH".into();
        }
        // Outside the workspace: kept literally (a signature never widens to other places).
        return format!("PATH({a})");
    }
    "LITERAL".into()
}

/// Programs whose `process` / `unknown` category comes from running workspace code (git hooks,
/// makefiles, test runners, scripts) rather than from controlling the system: on the overlay they
/// run in the same sandbox (no network, writes only to the overlay and a private tmp), so their
/// effects are captured. Anything else with process, unknown, env or network effects asks up
/// front.
pub const WORKSPACE_RUNNERS: &[&str] = &[
    "git", "make", "pytest", "python", "python3", "node", "ruby", "tox",
];
/// Interpreter flags whose value is inline code: such a signature is never learned (the code is
/// the whole effect and cannot be abstracted away).
const INLINE_CODE: &[&str] = &["-c", "-e", "--eval", "-E", "-p", "--print"];

/// Why the overlay cannot capture this operation's effects, if it cannot.
pub fn not_capturable(op: &Operation) -> Option<String> {
    use crate::classify::Category::*;
    for c in &op.categories {
        match c {
            Network => return Some("network".into()),
            Env => return Some("changes the environment".into()),
            Process | Unknown if !WORKSPACE_RUNNERS.contains(&op.program.as_str()) => {
                return Some(if *c == Process {
                    "process or system control".into()
                } else {
                    "effect unknown to the classifier".into()
                })
            }
            _ => {}
        }
    }
    None
}

fn category_learnable(op: &Operation) -> Option<String> {
    if let Some(why) = not_capturable(op) {
        return Some(why);
    }
    if WORKSPACE_RUNNERS.contains(&op.program.as_str())
        && op.program != "git"
        && op.args.iter().any(|a| INLINE_CODE.contains(&a.as_str()))
    {
        return Some("inline code".into());
    }
    None
}

/// The signature of one operation, or None when it needs no human (pure / read-only).
pub fn of_operation(op: &Operation, workdir: &Path, workspace: &Path) -> Option<Signature> {
    use crate::classify::{types::OpKind, Category};
    let needs = op
        .categories
        .iter()
        .any(|c| !matches!(c, Category::Pure | Category::Readonly));
    if !needs && op.kind != OpKind::Redirect {
        return None;
    }
    let outside = op
        .writes
        .iter()
        .find(|w| !write_in_workspace(w, workdir, workspace))
        .map(|w| format!("writes outside the workspace ({w})"));
    let mut why_not = category_learnable(op).or(outside);
    let (text, program) = match op.kind {
        OpKind::Assignment => {
            why_not = Some("assigns a shell variable that matters".into());
            (op.op.clone(), String::new())
        }
        OpKind::Redirect => {
            if !needs && op.writes.is_empty() {
                return None;
            }
            let target = op
                .writes
                .first()
                .map(|w| arg_kind(w, workdir, workspace))
                .unwrap_or_else(|| "DYN".into());
            (format!("{} {target}", op.op), String::new())
        }
        OpKind::Command => {
            if op.dynamic && (op.op == "bash:<dynamic>" || op.program.is_empty()) {
                why_not = Some("its program name is computed at run time".into());
                ("<dynamic>".to_string(), String::new())
            } else {
                let prog = op.program.clone();
                let mut flags: Vec<String> = Vec::new();
                let mut kinds: Vec<String> = Vec::new();
                let mut sub: Option<String> = None;
                let mut expr_seen = false;
                let mut next_kind: Option<&str> = None;
                let mut only_positional = false;
                for a in &op.args {
                    if let Some(k) = next_kind.take() {
                        kinds.push(k.to_string());
                        continue;
                    }
                    if !only_positional && a == "--" {
                        only_positional = true;
                        continue;
                    }
                    if !only_positional && a.starts_with('-') && a.len() > 1 {
                        let (name, value) = match a.split_once('=') {
                            Some((n, _)) => (n.to_string(), true),
                            None => (a.clone(), false),
                        };
                        if MSG_FLAGS.contains(&name.as_str())
                            && MSG_PROGRAMS.contains(&prog.as_str())
                        {
                            flags.push(name);
                            if !value {
                                next_kind = Some("MSG");
                            }
                        } else if EXPR_FLAGS.contains(&name.as_str()) {
                            flags.push(name);
                            expr_seen = true;
                            if !value {
                                next_kind = Some("EXPR");
                            }
                        } else {
                            flags.push(if value { format!("{name}=…") } else { name });
                        }
                        continue;
                    }
                    if sub.is_none() && kinds.is_empty() && SUBCOMMANDS.contains(&prog.as_str()) {
                        sub = Some(a.clone());
                        continue;
                    }
                    if !expr_seen && kinds.is_empty() && EXPR_FIRST.contains(&prog.as_str()) {
                        expr_seen = true;
                        kinds.push("EXPR".into());
                        continue;
                    }
                    kinds.push(arg_kind(a, workdir, workspace));
                }
                flags.sort();
                flags.dedup();
                // Repeated kinds collapse: `git add a b c` and `git add a` share a signature.
                let mut collapsed: Vec<String> = Vec::new();
                for k in kinds {
                    match collapsed.last_mut() {
                        Some(last) if *last == k || *last == format!("{k}...") => {
                            *last = format!("{k}...")
                        }
                        _ => collapsed.push(k),
                    }
                }
                let mut parts = vec![prog.clone()];
                parts.extend(sub);
                parts.extend(flags);
                parts.extend(collapsed);
                (parts.join(" "), prog)
            }
        }
    };
    Some(Signature {
        text,
        program,
        learnable: why_not.is_none(),
        why_not,
    })
}

/// The signatures of a command (deduplicated, in order).
pub fn of_report(r: &CheckReport, workdir: &Path, workspace: &Path) -> Vec<Signature> {
    let mut out: Vec<Signature> = Vec::new();
    for op in &r.operations {
        if let Some(s) = of_operation(op, workdir, workspace) {
            if !out.iter().any(|o| o.text == s.text) {
                out.push(s);
            }
        }
    }
    out
}

/// What the stored signatures say about a command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SigState {
    /// A signature the operator set to `never`.
    pub never: Option<String>,
    /// A signature the operator set to `always_ask`.
    pub always_ask: bool,
    /// There is at least one signature and every one is learned (or `always_allow`).
    pub all_learned: bool,
}

/// Records the signatures (creating rows) and reads their state for `client`: learned means the
/// operator's `always_allow`, or this client's human approvals reached the threshold with no
/// denial (evidence is per client — issue 18).
pub fn observe(
    conn: &mut Connection,
    client: &str,
    sigs: &[Signature],
    threshold: u32,
    now: i64,
) -> Result<SigState> {
    Ok(write_tx(conn, |tx| {
        let mut st = SigState {
            all_learned: !sigs.is_empty(),
            ..Default::default()
        };
        for s in sigs {
            tx.execute(
                "INSERT INTO signatures(signature, program, learnable, why_not, first_seen, last_seen)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT(signature) DO UPDATE SET last_seen = ?5,
                   learnable = learnable AND excluded.learnable,
                   why_not = coalesce(why_not, excluded.why_not)",
                params![s.text, s.program, s.learnable, s.why_not, now],
            )?;
            let (learnable, approvals, denials, ov): (bool, i64, i64, Option<String>) = tx.query_row(
                "SELECT s.learnable, coalesce(e.approvals, 0), coalesce(e.denials, 0), s.user_override
                 FROM signatures s LEFT JOIN signature_evidence e
                   ON e.signature = s.signature AND e.client_id = ?2
                 WHERE s.signature = ?1",
                params![&s.text, client],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
            let ov = ov.as_deref().and_then(Override::parse);
            match ov {
                Some(Override::Never) => st.never = Some(s.text.clone()),
                Some(Override::AlwaysAsk) => st.always_ask = true,
                _ => {}
            }
            let learned = ov == Some(Override::AlwaysAllow)
                || (learnable && s.learnable && denials == 0 && approvals >= threshold as i64);
            if !learned || ov == Some(Override::AlwaysAsk) {
                st.all_learned = false;
            }
        }
        Ok(st)
    })?)
}

/// Remembers which signatures a waiting job's validation covers.
pub fn remember_job(
    conn: &mut Connection,
    job_id: i64,
    client: &str,
    overlay: bool,
    sigs: &[String],
    now: i64,
) -> Result<()> {
    let j = serde_json::to_string(sigs)?;
    write_tx(conn, |tx| {
        tx.execute(
            "INSERT OR REPLACE INTO job_signatures(job_id, overlay, signatures, counted, created_at, client_id)
             VALUES (?1, ?2, ?3, 0, ?4, ?5)",
            params![job_id, overlay, j, now, client],
        )
    })?;
    Ok(())
}

/// Counts a human decision toward the job's signatures (once per job), in the totals and in the
/// deciding job's client's evidence — the only counts learning reads.
pub fn count_decision(conn: &mut Connection, job_id: i64, approved: bool) -> Result<()> {
    let now = crate::time::now_ms();
    write_tx(conn, |tx| {
        let row: Option<(bool, String, Option<String>)> = tx
            .query_row(
                "SELECT overlay, signatures, client_id FROM job_signatures WHERE job_id = ?1 AND counted = 0",
                [job_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let Some((overlay, sigs, client)) = row else {
            return Ok(());
        };
        let sigs_v: Vec<String> = serde_json::from_str(&sigs).unwrap_or_default();
        // Approvals of commands asked up front never teach a signature; denials always count.
        let per_client = match (approved, overlay) {
            (true, true) => Some("approvals"),
            (true, false) => None,
            (false, _) => Some("denials"),
        };
        if let (Some(col), Some(client)) = (per_client, client.as_deref()) {
            for sig in &sigs_v {
                tx.execute(
                    &format!(
                        "INSERT INTO signature_evidence(client_id, signature, {col}, updated_at) VALUES (?1, ?2, 1, ?3)
                         ON CONFLICT(client_id, signature) DO UPDATE SET {col} = {col} + 1, updated_at = ?3"
                    ),
                    params![client, sig, now],
                )?;
            }
        }
        let sigs: Vec<String> = serde_json::from_str(&sigs).unwrap_or_default();
        let col = match (approved, overlay) {
            (true, true) => "approvals",
            (true, false) => "upfront_approvals",
            (false, _) => "denials",
        };
        for s in sigs {
            tx.execute(
                &format!("UPDATE signatures SET {col} = {col} + 1 WHERE signature = ?1"),
                [&s],
            )?;
        }
        tx.execute(
            "UPDATE job_signatures SET counted = 1 WHERE job_id = ?1",
            [job_id],
        )?;
        Ok(())
    })?;
    Ok(())
}

pub fn count_auto_applied(conn: &mut Connection, sigs: &[String]) -> Result<()> {
    write_tx(conn, |tx| {
        for s in sigs {
            tx.execute(
                "UPDATE signatures SET auto_applied = auto_applied + 1 WHERE signature = ?1",
                [s],
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: i64,
    pub signature: String,
    pub learnable: bool,
    pub why_not: Option<String>,
    pub approvals: i64,
    pub denials: i64,
    pub upfront_approvals: i64,
    pub auto_applied: i64,
    pub user_override: Option<String>,
    /// learned / learning (n/N) / never (why) / override
    pub state: String,
}

pub fn list(conn: &Connection, threshold: u32) -> Result<Vec<Row>> {
    let mut s = conn.prepare(
        "SELECT id, signature, learnable, why_not, approvals, denials, upfront_approvals, auto_applied, user_override
         FROM signatures ORDER BY id",
    )?;
    let rows = s
        .query_map([], |r| {
            Ok(Row {
                id: r.get(0)?,
                signature: r.get(1)?,
                learnable: r.get(2)?,
                why_not: r.get(3)?,
                approvals: r.get(4)?,
                denials: r.get(5)?,
                upfront_approvals: r.get(6)?,
                auto_applied: r.get(7)?,
                user_override: r.get(8)?,
                state: String::new(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut per_client = conn.prepare(
        "SELECT client_id, approvals, denials FROM signature_evidence WHERE signature = ?1 ORDER BY client_id",
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        let ev: Vec<(String, i64, i64)> = per_client
            .query_map([&r.signature], |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let learned: Vec<&str> = ev
            .iter()
            .filter(|(_, a, d)| *d == 0 && *a >= threshold as i64)
            .map(|(c, _, _)| c.as_str())
            .collect();
        let best = ev.iter().filter(|e| e.2 == 0).map(|e| e.1).max().unwrap_or(0);
        r.state = match (&r.user_override, r.learnable) {
            (Some(o), _) => format!("override {o}"),
            (None, false) => {
                format!("never learned ({})", r.why_not.clone().unwrap_or_default())
            }
            _ if !learned.is_empty() => format!("learned for {}", learned.join(", ")),
            _ if !ev.is_empty() && ev.iter().all(|e| e.2 > 0) => "not learned (denied before)".into(),
            _ => format!("learning ({best}/{threshold})"),
        };
        out.push(r);
    }
    Ok(out)
}

/// Operator override of one signature (by id).
pub fn set_override(
    conn: &mut Connection,
    id: i64,
    ov: Option<Override>,
    reason: &str,
) -> Result<String> {
    let sig: Option<String> = conn
        .query_row(
            "SELECT signature FROM signatures WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(sig) = sig else {
        bail!("no signature {id} (see `brainloop signatures`)");
    };
    write_tx(conn, |tx| {
        tx.execute(
            "UPDATE signatures SET user_override = ?2, user_override_reason = ?3 WHERE id = ?1",
            params![id, ov.map(|o| o.as_str()), reason],
        )
    })?;
    Ok(sig)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{check, Context};

    fn sigs(cmd: &str) -> Vec<String> {
        let ws = std::env::temp_dir();
        let r = check(
            cmd,
            &Context {
                workdir: Some(ws.clone()),
            },
        );
        of_report(&r, &ws, &ws)
            .into_iter()
            .map(|s| s.text)
            .collect()
    }

    #[test]
    fn arguments_are_abstracted_by_kind() {
        assert_eq!(
            sigs("git commit -m 'fix the bug'"),
            sigs("git commit -m 'another message'")
        );
        assert_eq!(
            sigs("sed -i 's/a/b/' src/x.rs"),
            sigs("sed -i 's/foo/bar/g' lib/y.rs")
        );
        assert_ne!(
            sigs("sed -i 's/a/b/' src/x.rs"),
            sigs("sed 's/a/b/' src/x.rs")
        );
        assert!(sigs("echo hi").is_empty(), "pure: no signature");
        let net = check("curl -s http://example.com/x", &Context { workdir: None });
        let ws = std::env::temp_dir();
        let s = of_report(&net, &ws, &ws);
        assert!(s.iter().all(|s| !s.learnable), "{s:?}");
    }
}
