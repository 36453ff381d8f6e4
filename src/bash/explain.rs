//! Rules a human can read and check (issue 35). This module owns **the approved examples of a
//! learned signature and what they show**: the commands of human-approved change sets that
//! carried it (`signature_examples`, a few per client and signature), the load-time check that
//! each still signs as the signature ([`check`]: when one no longer does, the rule no longer
//! says what the human approved, and it is suspended for that client — `signatures::set_suspended`),
//! and the explanation `brainloop signatures --explain` prints ([`explain`]): what the signature
//! matches in words, its approved examples, and variants of an example that it matches and
//! refuses.
//!
//! The variants are generated from an approved example's own words, one argument, flag or
//! written path changed at a time, and **decided by the real rules**, never by a written
//! expectation: `classify::check` and `signatures::of_report` say what each variant signs as;
//! for one that signs the same, `protected::judge` and `effects::auto_apply_refusals` say
//! whether a learned signature could apply the paths it names. What is printed is what the rules
//! do. Nothing is run and nothing is written by the explanation itself.

use crate::bash::changes::{Change, ChangeSet, Kind};
use crate::bash::effects;
use crate::bash::protected::{self, Table};
use crate::bash::signatures::{self, Row, Signature};
use crate::classify::types::OpKind;
use crate::classify::{check as classify, CheckReport, Context, Operation};
use crate::db::write_tx;
use anyhow::Result;
use rusqlite::{params, Connection};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Approved examples kept per (client, signature): the one that taught it with `--learn` first,
/// then the most recent. Bounded so the load-time check stays cheap.
pub const EXAMPLES_KEPT: i64 = 3;
/// Changed paths kept per example.
const PATHS_KEPT: usize = 50;

/// The command of a human-approved change set that carried a signature.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    pub client_id: String,
    pub signature: String,
    pub job_id: i64,
    pub validation_id: Option<String>,
    pub command: String,
    pub workdir: String,
    pub workspace: String,
    /// The approved change set's paths (workspace-relative) and kinds (added/modified/deleted).
    pub paths: Vec<(String, String)>,
    pub decided_by: String,
    pub decided_at: i64,
    /// Approved with `--learn`.
    pub learn: bool,
}

fn kind_str(k: Kind) -> &'static str {
    match k {
        Kind::Added => "added",
        Kind::Modified => "modified",
        Kind::Deleted => "deleted",
    }
}

fn kind_of(s: &str) -> Kind {
    match s {
        "added" => Kind::Added,
        "deleted" => Kind::Deleted,
        _ => Kind::Modified,
    }
}

/// Keeps a human-approved change set as an example of each of its signatures for the job's
/// client (only a human's approval of a change set is an example: what the human saw).
pub fn record(
    conn: &mut Connection,
    m: &crate::bash::changes::Manifest,
    client: &str,
    validation_id: &str,
    by: &str,
    learn: bool,
    now: i64,
) -> Result<()> {
    let paths: Vec<(String, &str)> = m
        .change_set
        .changes
        .iter()
        .take(PATHS_KEPT)
        .map(|c| (c.path.clone(), kind_str(c.kind)))
        .collect();
    let paths = serde_json::to_string(&paths)?;
    write_tx(conn, |tx| {
        for sig in &m.signatures {
            tx.execute(
                "INSERT INTO signature_examples(client_id, signature, job_id, validation_id, command, workdir,
                     workspace, paths, decided_by, decided_at, learn)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT(client_id, signature, job_id) DO UPDATE SET learn = max(learn, ?11)",
                params![
                    client,
                    sig,
                    m.job_id,
                    validation_id,
                    m.command,
                    m.workdir.to_string_lossy(),
                    m.workspace.to_string_lossy(),
                    paths,
                    by,
                    now,
                    learn
                ],
            )?;
            tx.execute(
                "DELETE FROM signature_examples WHERE client_id = ?1 AND signature = ?2 AND id NOT IN
                   (SELECT id FROM signature_examples WHERE client_id = ?1 AND signature = ?2
                     ORDER BY learn DESC, decided_at DESC, id DESC LIMIT ?3)",
                params![client, sig, EXAMPLES_KEPT],
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The approved examples of `sig` (of `client`, or every client), the one that taught it first.
pub fn examples(conn: &Connection, sig: &str, client: Option<&str>) -> Result<Vec<Example>> {
    let mut s = conn.prepare(
        "SELECT client_id, signature, job_id, validation_id, command, workdir, workspace, paths,
                decided_by, decided_at, learn
         FROM signature_examples WHERE signature = ?1 AND (?2 IS NULL OR client_id = ?2)
         ORDER BY client_id, learn DESC, decided_at DESC, id DESC",
    )?;
    let v = s
        .query_map(params![sig, client], |r| {
            let paths: String = r.get(7)?;
            Ok(Example {
                client_id: r.get(0)?,
                signature: r.get(1)?,
                job_id: r.get(2)?,
                validation_id: r.get(3)?,
                command: r.get(4)?,
                workdir: r.get(5)?,
                workspace: r.get(6)?,
                paths: serde_json::from_str(&paths).unwrap_or_default(),
                decided_by: r.get(8)?,
                decided_at: r.get(9)?,
                learn: r.get(10)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(v)
}

/// What an example's command signs as with the current classifier.
pub fn signs_now(e: &Example) -> Vec<Signature> {
    let (wd, ws) = (PathBuf::from(&e.workdir), PathBuf::from(&e.workspace));
    let r = classify(
        &e.command,
        &Context {
            workdir: Some(wd.clone()),
        },
    );
    signatures::of_report(&r, &wd, &ws)
}

/// Why an example no longer shows its signature (None: it still signs as it, learnable).
pub fn mismatch(e: &Example, now: &[Signature]) -> Option<String> {
    if now.iter().any(|s| s.text == e.signature && s.learnable) {
        return None;
    }
    let texts: Vec<String> = now
        .iter()
        .map(|s| match (&s.why_not, s.learnable) {
            (Some(w), false) => format!("{} (never learned: {w})", s.text),
            _ => s.text.clone(),
        })
        .collect();
    let as_ = if texts.is_empty() {
        "nothing (it needs no approval now)".to_string()
    } else {
        format!("`{}`", texts.join("` and `"))
    };
    Some(format!(
        "the approved example `{}` (job {}) now signs as {as_}",
        e.command, e.job_id
    ))
}

/// One signature suspended (or reinstated) for one client by [`check`].
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    pub client_id: String,
    pub signature: String,
    /// Why it is suspended; None: every example still signs as it.
    pub suspended: Option<String>,
    pub examples: usize,
}

/// The load-time check, the way a test would: every approved example of every (client,
/// signature) without a denial is re-signed with the current classifier; an example that no
/// longer yields its signature suspends what the client learned of it (it asks again, and says
/// why), one that does again reinstates it. Cheap: at most [`EXAMPLES_KEPT`] examples each.
pub fn check(conn: &mut Connection, now: i64) -> Result<Vec<Checked>> {
    let pairs: Vec<(String, String)> = {
        let mut s = conn.prepare(
            "SELECT DISTINCT x.client_id, x.signature FROM signature_examples x
               JOIN signature_evidence e ON e.client_id = x.client_id AND e.signature = x.signature
             WHERE e.denials = 0 ORDER BY x.signature, x.client_id",
        )?;
        let v = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        v
    };
    let mut out = Vec::new();
    for (client, sig) in pairs {
        let ex = examples(conn, &sig, Some(&client))?;
        let why = ex.iter().find_map(|e| mismatch(e, &signs_now(e)));
        signatures::set_suspended(conn, &client, &sig, why.as_deref(), now)?;
        out.push(Checked {
            client_id: client,
            signature: sig,
            suspended: why,
            examples: ex.len(),
        });
    }
    Ok(out)
}

/// A human taught `sigs` again with `approve --learn` (its example recorded first): the examples
/// of the client that no longer sign as their signature are dropped (the new one is what the
/// human approved under the current classifier), so the check does not suspend it again.
pub fn relearned(conn: &mut Connection, client: &str, sigs: &[String]) -> Result<()> {
    let mut stale = Vec::new();
    for sig in sigs {
        for e in examples(conn, sig, Some(client))? {
            if mismatch(&e, &signs_now(&e)).is_some() {
                stale.push((e.signature, e.job_id));
            }
        }
    }
    write_tx(conn, |tx| {
        for (sig, job) in &stale {
            tx.execute(
                "DELETE FROM signature_examples WHERE client_id = ?1 AND signature = ?2 AND job_id = ?3",
                params![client, sig, job],
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

/// `override SIGNATURE clear` forgets what every client learned of it, its examples too.
pub fn forget(conn: &mut Connection, sig: &str) -> Result<usize> {
    Ok(write_tx(conn, |tx| {
        tx.execute("DELETE FROM signature_examples WHERE signature = ?1", [sig])
    })?)
}

// ---------------------------------------------------------------------------------------------
// In words.

/// One element of a signature's text, said plainly.
fn kind_words(k: &str, program: &str) -> Option<String> {
    let (k, many) = match k.strip_suffix("...") {
        Some(k) => (k, true),
        None => (k, false),
    };
    let one = match k {
        "WS_PATH" => {
            return Some(if many {
                "one or more paths inside the workspace".into()
            } else {
                "a path inside the workspace".into()
            })
        }
        "EXPR" => match program {
            "sed" | "gsed" => "a sed script that only edits its operands (no w/W/r/R/e commands, no s///w or s///e)".into(),
            "awk" | "gawk" | "mawk" | "nawk" => "an awk program that only reads its operands and prints (no print > FILE, pipes, system() or getline)".into(),
            "jq" => "a jq filter".into(),
            "grep" | "egrep" | "fgrep" | "rg" => "a search pattern".into(),
            _ => "an expression".into(),
        },
        "MSG" => "any message".into(),
        "URL" => "a URL".into(),
        "NUM" => "a number".into(),
        "DYN" => "a value computed at run time".into(),
        "LITERAL" => "a plain word that names no file in the workspace".into(),
        _ => {
            let p = k.strip_prefix("PATH(")?.strip_suffix(')')?;
            format!("exactly the path {p} (outside the workspace: kept literally)")
        }
    };
    Some(if many {
        format!("one or more of: {one}")
    } else {
        one
    })
}

/// What a signature matches, in words.
pub fn words(sig: &str) -> String {
    let (sig, hidden) = match sig.strip_suffix(" [writes or runs elsewhere]") {
        Some(s) => (s, true),
        None => (sig, false),
    };
    let mut toks: Vec<String> = Vec::new();
    // `PATH(a b)` may hold spaces: rejoin up to its `)`.
    for t in sig.split(' ') {
        match toks.last_mut() {
            Some(last) if last.starts_with("PATH(") && !last.ends_with(')') => {
                last.push(' ');
                last.push_str(t);
            }
            _ => toks.push(t.to_string()),
        }
    }
    let Some(first) = toks.first().cloned() else {
        return String::new();
    };
    let mut out = if let Some(op) = first.strip_prefix("redirect:") {
        let target = toks
            .get(1)
            .and_then(|k| kind_words(k, ""))
            .unwrap_or_else(|| "a target".into());
        match op {
            "write" => {
                format!("a redirection that writes (`>` or `>>`) a command's output to {target}")
            }
            "read" => format!("a redirection that reads from {target}"),
            o => format!("a redirection ({o}) to {target}"),
        }
    } else if first == "<dynamic>" {
        "a command whose program name is computed at run time".to_string()
    } else if toks.len() == 1 && first.contains('=') {
        format!("the shell assignment `{first}`")
    } else {
        let prog = first.clone();
        let mut parts = vec![format!("the program `{prog}`")];
        let mut flags = Vec::new();
        for (i, t) in toks.iter().enumerate().skip(1) {
            if t.starts_with('-') && t.len() > 1 {
                flags.push(match t.strip_suffix("=…") {
                    Some(f) => format!("{f}=VALUE (any value)"),
                    None => t.clone(),
                });
                continue;
            }
            if !flags.is_empty() {
                parts.push(format!(
                    "exactly the flag{} {} (in any order; another flag is another signature)",
                    if flags.len() > 1 { "s" } else { "" },
                    flags.join(", ")
                ));
                flags.clear();
            }
            match kind_words(t, &prog) {
                Some(w) => parts.push(w),
                None if i == 1 => parts.push(format!("the subcommand `{t}`")),
                None => parts.push(format!("the word `{t}` literally")),
            }
        }
        if !flags.is_empty() {
            parts.push(format!(
                "exactly the flag{} {} (in any order; another flag is another signature)",
                if flags.len() > 1 { "s" } else { "" },
                flags.join(", ")
            ));
        }
        if toks.len() == 1 {
            parts.push("no flags and no arguments".into());
        }
        parts.join(", then ")
    };
    if hidden {
        out.push_str(", with a construct the abstraction hides (a script or flag that writes or runs what its operands do not name): never learned");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Generated examples.

/// What the rules do with a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Signs as the signature, and a learned signature could apply what it names.
    Matches,
    /// Another signature, never learned, or the same signature with a path a learned signature
    /// never applies: it asks.
    Refused,
    /// Needs no approval at all (pure or read-only: no signature).
    NotNeeded,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Matches => "matches",
            Outcome::Refused => "refused",
            Outcome::NotNeeded => "no approval needed",
        }
    }
}

/// A variant of an approved example and what the rules do with it.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    /// The example it was made from.
    pub from_job: i64,
    /// What was changed, in words.
    pub change: String,
    /// The variant command (or the example's, for a variant of its change set).
    pub command: String,
    pub outcome: Outcome,
    /// What it signs as.
    pub signs_as: Vec<String>,
    /// Why, from the rules.
    pub reason: String,
}

/// Quotes a word for the shell when it needs it.
fn sh(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

fn join(words: &[String]) -> String {
    words.iter().map(|w| sh(w)).collect::<Vec<_>>().join(" ")
}

/// Another file next to `p` (`src/lib.rs` → `src/other.rs`).
fn sibling(p: &str) -> String {
    let (dir, name) = match p.rsplit_once('/') {
        Some((d, n)) => (format!("{d}/"), n),
        None => (String::new(), p),
    };
    let ext = name
        .rsplit_once('.')
        .filter(|(s, _)| !s.is_empty())
        .map(|(_, e)| format!(".{e}"))
        .unwrap_or_default();
    let other = if name == format!("other{ext}") {
        "another"
    } else {
        "other"
    };
    format!("{dir}{other}{ext}")
}

/// A path outside the workspace with `p`'s file name.
fn outside(p: &str, workspace: &Path) -> String {
    let name = p
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("x");
    for d in ["/tmp", "/var/tmp", "/opt"] {
        let c = Path::new(d).join(name);
        if !c.starts_with(workspace) {
            return c.to_string_lossy().into_owned();
        }
    }
    format!("/{name}")
}

/// The example's command with its redirect target `from` replaced by `to` (`>` kept), or with
/// the operator changed (`to` None: `>` ↔ `>>`). None when the target is not found as written.
fn redirect_variant(cmd: &str, from: &str, to: Option<&str>) -> Option<String> {
    for quoted in [from.to_string(), sh(from)] {
        let mut best = None;
        for (i, _) in cmd.match_indices('>') {
            if cmd[..i].ends_with('>') {
                continue; // the second half of `>>`
            }
            let rest = &cmd[i + 1..];
            let (op_end, rest2) = match rest.strip_prefix('>') {
                Some(r) => (i + 2, r),
                None => (i + 1, rest),
            };
            let ws = rest2.len() - rest2.trim_start().len();
            let t = &rest2[ws..];
            let ends = t
                .strip_prefix(quoted.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', ';', '&', '|', ')', '\n']));
            if ends {
                best = Some((i, op_end, op_end + ws, op_end + ws + quoted.len()));
            }
        }
        if let Some((op_start, op_end, t_start, t_end)) = best {
            return Some(match to {
                Some(new) => format!("{}{}{}", &cmd[..t_start], sh(new), &cmd[t_end..]),
                None => {
                    let op = if op_end - op_start == 2 { ">" } else { ">>" };
                    format!("{}{op}{}", &cmd[..op_start], &cmd[op_end..])
                }
            });
        }
    }
    None
}

/// A flag that the program accepts and that changes its signature.
fn added_flag(program: &str, sub: Option<&str>) -> &'static str {
    match (program, sub) {
        ("git", Some("add")) => "--force",
        ("git", Some("commit")) => "--amend",
        ("git", _) => "--verbose",
        ("sed" | "gsed", _) => "-E",
        ("cp" | "mv" | "rm" | "mkdir" | "touch" | "chmod", _) => "-v",
        _ => "--verbose",
    }
}

/// Flags whose value is the next word (dropping them alone would shift the arguments).
const VALUE_FLAGS: &[&str] = &["-m", "--message", "-e", "--expression", "-c", "-C", "-o"];

/// Variants of one example's operation: (what changed, command).
fn command_variants(op: &Operation, e: &Example, ws: &Path) -> Vec<(String, String)> {
    let (wd, prog) = (PathBuf::from(&e.workdir), op.program.as_str());
    let words: Vec<String> = std::iter::once(prog.to_string())
        .chain(op.args.iter().cloned())
        .collect();
    let with = |i: usize, v: &str| {
        let mut w = words.clone();
        w[i] = v.to_string();
        join(&w)
    };
    let walked = signatures::walk_args(op, &wd, ws);
    let mut out: Vec<(String, String)> = Vec::new();
    let mut cursor = 1;
    let mut at: Vec<(usize, &str, &str)> = Vec::new();
    for (kind, value) in &walked.kinds {
        if let Some(i) = (cursor..words.len()).find(|&i| words[i] == *value) {
            cursor = i + 1;
            at.push((i, kind.as_str(), value.as_str()));
        }
    }
    // Each kind changed at its first place (repeated ones are interchangeable: `WS_PATH...`),
    // and at its last for programs whose last operand is the one written (`cp SRC DST`: its
    // entry's `operands = "read_then_write"`).
    let last_too = crate::programs::table()
        .ok()
        .and_then(|t| t.spec(prog))
        .is_some_and(|s| s.operands == "read_then_write");
    let kept: Vec<(usize, &str, &str)> = at
        .iter()
        .enumerate()
        .filter(|(n, (_, k, _))| {
            !at[..*n].iter().any(|(_, k2, _)| k2 == k)
                || (last_too && !at[n + 1..].iter().any(|(_, k2, _)| k2 == k))
        })
        .map(|(_, x)| *x)
        .collect();
    for (i, kind, value) in kept {
        let value = &value.to_string();
        match kind {
            "WS_PATH" => {
                let other = sibling(value);
                out.push((
                    format!("another path inside the workspace ({other})"),
                    with(i, &other),
                ));
                let far = outside(value, ws);
                out.push((
                    format!("a path outside the workspace ({far})"),
                    with(i, &far),
                ));
                out.push(("a protected dot-file (.envrc)".into(), with(i, ".envrc")));
            }
            "EXPR" if matches!(prog, "sed" | "gsed") => {
                out.push(("another sed script".into(), with(i, "s/TODO/DONE/g")));
                let w = if value.starts_with('s') && !value.contains(';') && !value.contains('\n') {
                    format!("{value}w out.txt")
                } else {
                    format!("{value};w out.txt")
                };
                out.push((
                    "a sed script that also writes out.txt (`w FILE`)".into(),
                    with(i, &w),
                ));
                out.push((
                    "a sed script that runs a command (`e`)".into(),
                    with(i, "1e id"),
                ));
            }
            "EXPR" if matches!(prog, "awk" | "gawk" | "mawk" | "nawk") => {
                out.push(("another awk program".into(), with(i, "{print $1}")));
                out.push((
                    "an awk program that writes out.txt".into(),
                    with(i, "{print > \"out.txt\"}"),
                ));
            }
            "EXPR" => out.push(("another expression".into(), with(i, "TODO"))),
            "MSG" => out.push((
                "another message".into(),
                with(i, "another message, other words"),
            )),
            "NUM" => {
                let n = value.parse::<u64>().unwrap_or(0).saturating_add(1);
                out.push(("another number".into(), with(i, &n.to_string())));
            }
            "LITERAL" if words.get(i - 1).is_some_and(|p| p == "-c") => {}
            "LITERAL" => out.push(("another plain word".into(), with(i, "other"))),
            _ => {}
        }
    }
    // `git -c KEY=VALUE`: another value of the same key, another key.
    if crate::classify::git::is_git(prog) {
        for i in 2..words.len() {
            if words[i - 1] != "-c" {
                continue;
            }
            if let Some((key, _)) = words[i].split_once('=') {
                out.push((
                    format!("another value of the same -c key ({key})"),
                    with(i, &format!("{key}=someone-else")),
                ));
                for k in [
                    "color.ui=never",
                    "core.pager=less",
                    "core.fsmonitor=./watch.sh",
                ] {
                    if !k.starts_with(&format!("{key}=")) {
                        let name = k.split('=').next().unwrap_or(k);
                        out.push((format!("another -c key ({name})"), with(i, k)));
                    }
                }
            }
        }
    }
    // Flags: one added, each dropped.
    let sub_at = walked
        .sub
        .as_ref()
        .and_then(|s| (1..words.len()).find(|&i| words[i] == *s));
    let flag = added_flag(prog, walked.sub.as_deref());
    let at = sub_at.map(|i| i + 1).unwrap_or(1);
    let mut w = words.clone();
    w.insert(at, flag.to_string());
    out.push((format!("an added flag ({flag})"), join(&w)));
    let mut only_positional = false;
    for i in 1..words.len() {
        let a = &words[i];
        if a == "--" {
            only_positional = true;
        }
        if only_positional || !a.starts_with('-') || a.len() < 2 || a == "--" {
            continue;
        }
        if VALUE_FLAGS.contains(&a.as_str())
            || (i > 1 && VALUE_FLAGS.contains(&words[i - 1].as_str()))
        {
            continue;
        }
        let mut w = words.clone();
        w.remove(i);
        out.push((format!("without the flag {a}"), join(&w)));
    }
    out
}

/// Variants of a redirect example: other targets, the other operator.
fn redirect_variants(op: &Operation, e: &Example, ws: &Path) -> Vec<(String, String)> {
    let Some(target) = op.writes.first() else {
        return Vec::new();
    };
    let make = |to: Option<&str>| {
        redirect_variant(&e.command, target, to).or_else(|| {
            to.map(|t| {
                format!(
                    "echo example {} {}",
                    if op.op.contains(">>") { ">>" } else { ">" },
                    sh(t)
                )
            })
        })
    };
    let other = sibling(target);
    let far = outside(target, ws);
    let mut out = Vec::new();
    for (what, to) in [
        (
            format!("another file inside the workspace ({other})"),
            other.as_str(),
        ),
        (
            format!("a file outside the workspace ({far})"),
            far.as_str(),
        ),
        ("a protected dot-file (.envrc)".to_string(), ".envrc"),
        (
            "a git hook (.git/hooks/post-checkout)".to_string(),
            ".git/hooks/post-checkout",
        ),
    ] {
        if let Some(c) = make(Some(to)) {
            out.push((what, c));
        }
    }
    if let Some(c) = make(None) {
        out.push(("the other redirection operator (`>` / `>>`)".into(), c));
    }
    out
}

/// A change set of `paths` (what the rules judge for a variant).
fn change_set(paths: &[(String, Kind)]) -> ChangeSet {
    ChangeSet {
        changes: paths
            .iter()
            .map(|(p, k)| Change {
                path: p.clone(),
                kind: *k,
                before: (*k != Kind::Added).then(|| "file:0:644".to_string()),
                after: (*k != Kind::Deleted).then(|| "file:0:644".to_string()),
                diff: None,
                privilege_bits_removed: false,
                run_keys: None,
            })
            .collect(),
        hash: String::new(),
        diff_truncated: false,
    }
}

/// Why a learned signature could not apply `paths` for this command (empty: it could).
fn apply_refusals(
    r: &CheckReport,
    wd: &Path,
    ws: &Path,
    paths: &[(String, Kind)],
    table: &Table,
) -> Vec<String> {
    let cs = change_set(paths);
    let judged = protected::judge(table, &cs, ws, Some((r, wd)));
    effects::auto_apply_refusals(r, wd, ws, &cs, &judged)
}

/// A written path, workspace-relative (None outside it, or computed).
fn relative(w: &str, wd: &Path, ws: &Path) -> Option<String> {
    if w.contains(['…', '*', '$']) || w.starts_with('~') {
        return None;
    }
    let p = signatures::normalise(&wd.join(w));
    let rel = p.strip_prefix(ws).ok()?.to_string_lossy().into_owned();
    (!rel.is_empty()).then_some(rel)
}

/// What the rules do with a variant command (for one that signs as `sig`, the paths the
/// classifier says it writes, judged as a change set).
fn decide(sig: &str, cmd: &str, e: &Example, table: &Table) -> (Outcome, Vec<String>, String) {
    let (wd, ws) = (PathBuf::from(&e.workdir), PathBuf::from(&e.workspace));
    let r = classify(
        cmd,
        &Context {
            workdir: Some(wd.clone()),
        },
    );
    let sigs = signatures::of_report(&r, &wd, &ws);
    let texts: Vec<String> = sigs.iter().map(|s| s.text.clone()).collect();
    if !r.valid {
        let why = r.error.clone().unwrap_or_default();
        return (
            Outcome::Refused,
            texts,
            format!("refused by the classifier: {why}"),
        );
    }
    if r.blocked {
        return (
            Outcome::Refused,
            texts,
            format!("blocked: {}", r.reasons.join("; ")),
        );
    }
    if sigs.is_empty() {
        return (
            Outcome::NotNeeded,
            texts,
            "no signature: it reads only or changes nothing, so it needs no approval".into(),
        );
    }
    // A variant of `sig`, or a member of its family, is covered by it (`bash::coverage`).
    let covered = |s: &Signature| s.learnable && crate::bash::coverage::covers(sig, &s.text);
    let others: Vec<&Signature> = sigs
        .iter()
        .filter(|s| s.text != sig && !covered(s))
        .collect();
    if let Some(o) = others.first() {
        let never = match (&o.why_not, o.learnable) {
            (Some(w), false) => format!(" — never learned: {w}"),
            _ => String::new(),
        };
        let also = if texts.iter().any(|t| t == sig) {
            "also "
        } else {
            ""
        };
        return (
            Outcome::Refused,
            texts.clone(),
            format!("{also}signs as `{}`, another signature{never}", o.text),
        );
    }
    if r.starting_policy == "ask_warning" {
        return (
            Outcome::Refused,
            texts,
            format!(
                "asked up front with a warning (risk {:.2}), never on the overlay where a learned signature applies: {}",
                r.risk_score,
                r.reasons.join("; ")
            ),
        );
    }
    // What the classifier says it writes (a `git add` writes its index, not its operands).
    let named: Vec<(String, Kind)> = r
        .operations
        .iter()
        .filter(|op| signatures::of_operation(op, &wd, &ws).is_some())
        .filter_map(|op| Some((signatures::op_dir(op, &wd)?, op)))
        .flat_map(|(here, op)| op.writes.iter().map(move |w| (here.clone(), w)))
        .filter_map(|(here, w)| relative(w, &here, &ws))
        .map(|p| (p, Kind::Modified))
        .collect();
    let why = apply_refusals(&r, &wd, &ws, &named, table);
    if why.is_empty() {
        let how = match sigs.iter().find(|s| s.text != sig) {
            Some(c) => format!(
                "signs as `{}`, which `{sig}` covers ({})",
                c.text,
                match crate::bash::coverage::family(sig) {
                    Some(f) => format!("both of the family \"{}\"", f.name),
                    None => "it does no more".into(),
                }
            ),
            None => format!("signs as `{sig}`"),
        };
        (
            Outcome::Matches,
            texts,
            format!("{how}; a learned signature applies what it names"),
        )
    } else {
        (
            Outcome::Refused,
            texts,
            format!(
                "signs as `{sig}`, but a learned signature never applies it: {}",
                why.join("; ")
            ),
        )
    }
}

/// The example's operation that signs as `sig`, with its report.
fn operation_of(e: &Example) -> Option<(CheckReport, usize)> {
    let (wd, ws) = (PathBuf::from(&e.workdir), PathBuf::from(&e.workspace));
    let r = classify(
        &e.command,
        &Context {
            workdir: Some(wd.clone()),
        },
    );
    let i = r.operations.iter().position(|op| {
        signatures::of_operation(op, &wd, &ws).is_some_and(|s| s.text == e.signature)
    })?;
    Some((r, i))
}

/// Variants of an approved example, each decided by the rules (see the module comment).
pub fn variants(e: &Example, table: &Table) -> Vec<Variant> {
    let Some((r, i)) = operation_of(e) else {
        return Vec::new();
    };
    let op = &r.operations[i];
    let (wd, ws) = (PathBuf::from(&e.workdir), PathBuf::from(&e.workspace));
    let mut out = Vec::new();
    // The approved change set itself, then with one more path written.
    let approved: Vec<(String, Kind)> = e
        .paths
        .iter()
        .map(|(p, k)| (p.clone(), kind_of(k)))
        .collect();
    let named: Vec<String> = r
        .operations
        .iter()
        .flat_map(|o| effects::named_paths(o, &wd, &ws))
        .collect();
    let unnamed = ["unnamed.txt", "unnamed-2.txt"]
        .into_iter()
        .find(|p| !named.iter().any(|n| n == p) && !e.paths.iter().any(|(q, _)| q == p))
        .unwrap_or("unnamed-3.txt");
    let sig = e.signature.as_str();
    let sigs_now: Vec<String> = signs_now(e).into_iter().map(|s| s.text).collect();
    for (what, extra) in [
        ("the approved change set itself", None),
        (
            "its change set also adds .git/hooks/pre-commit",
            Some(".git/hooks/pre-commit"),
        ),
        (
            "its change set also adds a file the command does not name",
            Some(unnamed),
        ),
    ] {
        let mut paths = approved.clone();
        if let Some(x) = extra {
            paths.push((x.to_string(), Kind::Added));
        }
        let why = apply_refusals(&r, &wd, &ws, &paths, table);
        let shown: Vec<&str> = paths.iter().map(|(p, _)| p.as_str()).collect();
        let (outcome, reason) = if why.is_empty() {
            (
                Outcome::Matches,
                format!(
                    "a learned signature applies it (writes {})",
                    shown.join(", ")
                ),
            )
        } else {
            (
                Outcome::Refused,
                format!("a learned signature never applies it: {}", why.join("; ")),
            )
        };
        out.push(Variant {
            from_job: e.job_id,
            change: what.to_string(),
            command: e.command.clone(),
            outcome,
            signs_as: sigs_now.clone(),
            reason,
        });
    }
    let cmds = if op.kind == OpKind::Redirect {
        redirect_variants(op, e, &ws)
    } else if op.dynamic {
        Vec::new()
    } else {
        command_variants(op, e, &ws)
    };
    let mut seen = std::collections::BTreeSet::new();
    for (change, cmd) in cmds {
        if !seen.insert(cmd.clone()) || cmd == e.command {
            continue;
        }
        let (outcome, signs_as, reason) = decide(sig, &cmd, e, table);
        out.push(Variant {
            from_job: e.job_id,
            change,
            command: cmd,
            outcome,
            signs_as,
            reason,
        });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The explanation.

/// An approved example and what it signs as now.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedExample {
    #[serde(flatten)]
    pub example: Example,
    pub signs_now: Vec<String>,
    /// Why it no longer shows the signature (None: it still does).
    pub mismatch: Option<String>,
}

/// Everything `signatures --explain` says about one signature.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub id: i64,
    pub signature: String,
    /// What it matches, in words.
    pub matches: String,
    pub state: String,
    pub learnable: bool,
    pub why_not: Option<String>,
    pub user_override: Option<String>,
    pub clients: Vec<signatures::ClientLearning>,
    pub examples: Vec<CheckedExample>,
    /// Generated from the first example (the one that taught it, else the most recent).
    pub variants: Vec<Variant>,
}

/// The explanation of one signature row (`signatures::list`).
pub fn explain(conn: &Connection, row: &Row, table: &Table) -> Result<Explanation> {
    let ex = examples(conn, &row.signature, None)?;
    let variants = ex.first().map(|e| variants(e, table)).unwrap_or_default();
    let examples = ex
        .into_iter()
        .map(|e| {
            let now = signs_now(&e);
            CheckedExample {
                mismatch: mismatch(&e, &now),
                signs_now: now.into_iter().map(|s| s.text).collect(),
                example: e,
            }
        })
        .collect();
    Ok(Explanation {
        id: row.id,
        signature: row.signature.clone(),
        matches: words(&row.signature),
        state: row.state.clone(),
        learnable: row.learnable,
        why_not: row.why_not.clone(),
        user_override: row.user_override.clone(),
        clients: row.clients.clone(),
        examples,
        variants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_in_words() {
        let w = words("sed -i EXPR WS_PATH");
        assert!(w.contains("the program `sed`"), "{w}");
        assert!(w.contains("exactly the flag -i"), "{w}");
        assert!(
            w.contains("a sed script that only edits its operands"),
            "{w}"
        );
        assert!(w.ends_with("a path inside the workspace"), "{w}");
        let w = words("git add WS_PATH...");
        assert!(w.contains("the subcommand `add`"), "{w}");
        assert!(w.contains("one or more paths inside the workspace"), "{w}");
        let w = words("git commit -m -q MSG");
        assert!(w.contains("exactly the flags -m, -q"), "{w}");
        assert!(w.contains("any message"), "{w}");
        let w = words("redirect:write WS_PATH");
        assert!(w.contains("writes (`>` or `>>`)"), "{w}");
        let w = words("sed -i EXPR PATH(/etc/a b)");
        assert!(w.contains("exactly the path /etc/a b"), "{w}");
        let w = words("sort --output=… WS_PATH");
        assert!(w.contains("--output=VALUE (any value)"), "{w}");
        assert!(words("sed -i EXPR WS_PATH [writes or runs elsewhere]").contains("never learned"));
    }

    #[test]
    fn redirect_targets_are_replaced_where_written() {
        assert_eq!(
            redirect_variant("echo hi > notes.txt", "notes.txt", Some("other.txt")).as_deref(),
            Some("echo hi > other.txt")
        );
        assert_eq!(
            redirect_variant("echo hi >>notes.txt && ls", "notes.txt", None).as_deref(),
            Some("echo hi >notes.txt && ls")
        );
        assert_eq!(
            redirect_variant("echo hi > 'a b.txt'", "a b.txt", Some(".envrc")).as_deref(),
            Some("echo hi > .envrc")
        );
        assert_eq!(redirect_variant("echo hi > $X", "x", Some("y")), None);
        assert_eq!(sibling("src/lib.rs"), "src/other.rs");
        assert_eq!(sibling("other.txt"), "another.txt");
        assert_eq!(sh("it's"), r"'it'\''s'");
    }
}
