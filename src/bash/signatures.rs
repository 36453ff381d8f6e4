//! Operation signatures (DESIGN §5.12): approvals accrue per *kind* of operation, not per exact
//! command text. A signature is the program, its subcommand, its flag set, and its arguments
//! abstracted by kind — `sed -i EXPR WS_PATH`, `git commit -m MSG`, `> WS_PATH`. Only operations
//! that need a human (writes; not pure or read-only ones) get one.
//!
//! A signature is *learned* after `signature_approvals` (default 5) approved change sets that
//! contained it and no denial; a command all of whose signatures are learned is applied on the
//! overlay without asking (still journaled, still undoable). A human denial of a command carrying
//! a learned signature retires it for that client (`count_decision` records when, which job and
//! validation, by whom); a learned signature whose approved example no longer signs as it is
//! suspended (`bash::explain::check`, `set_suspended`). Never learned: operations with
//! network, process control, environment or unknown effects, writes outside the workspace,
//! computed program names, scripts and flags that write or run what the operands do not name
//! (`construct_why_not`: sed `w`/`e`, awk `system()`, `find -fprint`, `git -c` with a key that can run code, ...); blocked and `ask_warning` commands never reach the overlay at all, and
//! approvals of commands asked up front are counted apart (`upfront_approvals`), never toward
//! learning. Operator overrides per signature: `never` denies any command containing it,
//! `always_ask` keeps asking, `always_allow` treats it as learned (on the overlay only).

use crate::bash::policy::Override;
use crate::classify::{CheckReport, Operation};
use crate::db::write_tx;
use crate::programs::{Names, SignatureSpec, SubOperands};
use anyhow::{bail, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// Flags whose value is a free-form message (for the programs whose entry's `signature` says
/// `message_flags`).
const MSG_FLAGS: &[&str] = &["-m", "--message", "--msg", "-M"];
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
pub fn normalise(p: &Path) -> PathBuf {
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

/// Whether `program`'s entry says `key` of it in its `signature` (no: the table failed to load,
/// and nothing is a runner — every such command asks).
fn signs(program: &str, key: impl Fn(&SignatureSpec) -> &Names) -> bool {
    crate::programs::table().is_ok_and(|t| t.signs(program, key))
}

/// Whether a written path stays in the workspace (or is a harmless device).
pub fn write_in_workspace(w: &str, workdir: &Path, workspace: &Path) -> bool {
    if matches!(w, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty") {
        return true;
    }
    if let Some((root, _)) = found(w) {
        return write_in_workspace(root, workdir, workspace);
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
        return path_kind(a, workdir, workspace);
    }
    "LITERAL".into()
}

/// A word known to be a path: `WS_PATH` inside the workspace, else kept literally (a signature
/// never widens to other places).
fn path_kind(a: &str, workdir: &Path, workspace: &Path) -> String {
    if a.contains(DYN) || a.contains('$') {
        return "DYN".into();
    }
    if let Some((root, pattern)) = found(a) {
        return if path_kind(root, workdir, workspace) == "WS_PATH" {
            format!("FOUND({pattern})")
        } else {
            "GLOB".into()
        };
    }
    // Where `write_in_workspace` cannot say the path stays inside, neither does the kind: a
    // `~/.bashrc` signed `WS_PATH` made the learnable `> WS_PATH` unlearnable for good, and a
    // human's denial of it counted against every later redirect (issue 35).
    if a.starts_with('~') {
        return format!("PATH({a})");
    }
    if a.contains('*') || a.contains('?') || a.contains('[') {
        return "GLOB".into();
    }
    let p = if Path::new(a).is_absolute() {
        PathBuf::from(a)
    } else {
        workdir.join(a)
    };
    if normalise(&p).starts_with(workspace) {
        return "WS_PATH".into();
    }
    format!("PATH({a})")
}

/// The files named by one pattern beneath a root: `ROOT/**/PATTERN`, as `classify` shows the
/// files `find ROOT -name PATTERN` acts on (its `FOUND` placeholder) and as a `**` glob spells
/// them — (root, pattern). None when the root holds a glob or the pattern is not a plain name
/// pattern (`classify::types::plain_name_pattern`): `./**/x` gives (".", "x").
pub fn found(a: &str) -> Option<(&str, &str)> {
    let (root, pattern) = a.split_once("/**/")?;
    let root = if root.is_empty() { "/" } else { root };
    let plain_root = !root.contains(['*', '?', '[', crate::classify::types::ANY_FILE]);
    (plain_root && crate::classify::types::plain_name_pattern(pattern)).then_some((root, pattern))
}

/// Programs whose `process` / `unknown` category comes from running workspace code (git hooks,
/// makefiles, test runners, scripts) rather than from controlling the system: on the overlay they
/// run in the same sandbox (no network, writes only to the overlay and a private tmp), so their
/// effects are captured. Anything else with process, unknown, env or network effects asks up
/// front.
///
/// A runner is a program whose entry's `signature` says `runner`.
/// Package managers and toolchains (issue 35) are runners too: their program entries give their
/// subcommands that reach the network (`cargo install`, `npm install`, `go get`, `npx` of a tool
/// it would download) the `network` effect, which no runner lifts, so only the ones that build,
/// test, lint, format or run the workspace's own code reach the overlay. Their build output and
/// caches go to the client's runner cache outside the workspace (`bash::runners`).
/// Flags whose value is inline code, for the programs whose entry's `signature` says
/// `inline_code`: such a signature is never learned (the code is the whole effect and cannot be
/// abstracted away).
const INLINE_CODE: &[&str] = &["-c", "-e", "--eval", "-E", "-p", "--print"];
/// Why the overlay cannot capture this operation's effects, if it cannot.
pub fn not_capturable(op: &Operation) -> Option<String> {
    use crate::classify::Category::*;
    for c in &op.categories {
        match c {
            Network => return Some("network".into()),
            Env => return Some("changes the environment".into()),
            Process | Unknown if !signs(&op.program, |s| &s.runner) && !workspace_program(op) => {
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

/// The operation runs a program the workspace holds, named by a relative path that stays
/// beneath the working directory (`./target/release/tool`, `.venv/bin/pip`, `./csvq`): workspace
/// code like a test runner's (issue 35), so on the overlay its effects are captured.
fn workspace_program(op: &Operation) -> bool {
    // (`./tool` is named with the directory `.`)
    op.program_path.as_deref().is_some_and(|p| {
        (p.contains('/') || p == ".")
            && !p.starts_with('/')
            && !p.starts_with('~')
            && !p.contains(DYN)
            && !p.contains('$')
            && !Path::new(p)
                .components()
                .any(|c| matches!(c, Component::ParentDir))
    })
}

fn category_learnable(op: &Operation) -> Option<String> {
    if let Some(why) = not_capturable(op) {
        return Some(why);
    }
    if signs(&op.program, |s| &s.inline_code)
        && op.args.iter().any(|a| INLINE_CODE.contains(&a.as_str()))
    {
        return Some("inline code".into());
    }
    None
}

/// Whether `arg` is `flag` (a flag its entry marks `learn = "never"`): long flags match also as
/// `--flag=VALUE`; one-letter flags also with the value attached.
fn flag_hit(arg: &str, flag: &str) -> bool {
    if arg == flag {
        return true;
    }
    if flag.starts_with("--") {
        return arg.strip_prefix(flag).is_some_and(|r| r.starts_with('='));
    }
    // `-I` with its value attached (`-Ixz`); find's one-dash predicates only match whole.
    flag.len() == 2 && arg.starts_with(flag) && !arg.starts_with("--")
}

/// Whether `path` (a write or read the classifier found) is one of the operation's arguments,
/// alone or as a flag's attached value (`of=FILE`, `--output=FILE`).
fn is_operand(op: &Operation, path: &str) -> bool {
    op.args.iter().any(|a| {
        a == path
            || a.strip_suffix(path)
                .is_some_and(|head| head.ends_with('=') && !head.is_empty())
    })
}

/// Why an operation's signature cannot stand for its effects, naming the construct: a script
/// (sed `w`/`W`/`r`/`R`/`e`, `s///w`, `s///e`, awk redirections, pipes, `system()`, `getline`)
/// that writes, reads or runs something beyond its operands, a flag its program entry marks `learn = "never"`, or
/// classified writes to a path that is not one of its arguments.
pub fn construct_why_not(op: &Operation) -> Option<String> {
    construct(op).map(|(why, _)| why)
}

/// Marks the signature of an operation whose construct the abstraction hides (a script's
/// `w FILE` inside `EXPR`, a write the arguments do not show): its text differs from the
/// learnable one, so trying it never taints (`learnable AND ...`) the learned signature.
const ELSEWHERE_TAG: &str = "[writes or runs elsewhere]";

/// `construct_why_not`, and whether the signature text would hide the construct.
fn construct(op: &Operation) -> Option<(String, bool)> {
    use crate::classify::Category::*;
    let prog = op.program.as_str();
    if signs(prog, |s| &s.script) {
        let escapes = op
            .categories
            .iter()
            .any(|c| matches!(c, Process | Env | Network | Unknown))
            || op.writes.iter().any(|w| !is_operand(op, w))
            || op.reads.iter().any(|r| !is_operand(op, r));
        if escapes {
            let what: Vec<&str> = op
                .notes
                .iter()
                .filter(|n| n.starts_with("sed ") || n.starts_with("awk ") || n.starts_with("jq "))
                .map(String::as_str)
                .collect();
            let what = if what.is_empty() {
                "its script does more than edit its operands".to_string()
            } else {
                what.join("; ")
            };
            return Some((format!("script construct: {what}"), true));
        }
    }
    if crate::classify::git::is_git(prog) {
        if let Some(k) = crate::classify::git::unsafe_config_key(&op.args) {
            let why = format!(
                "git -c {k} can make git run a program or read a file it names; only the keys of the safe table are learned (user.*, author.*, committer.*, color.*, advice.*, core.quotepath, init.defaultBranch, …: `brainloop check` shows it)"
            );
            return Some((why, false));
        }
    }
    // `find ROOT -name PATTERN -delete`: its writes say what it deletes (`found`)
    let found_delete =
        op.is_find() && !op.writes.is_empty() && op.writes.iter().all(|w| found(w).is_some());
    // the flags its program entry marks `learn = "never"` (a table that failed to load
    // learns nothing: every flag is then suspect)
    let never = match crate::programs::table() {
        Ok(t) => t.never_learned(prog),
        Err(e) => return Some((format!("the program table failed to load: {e:#}"), false)),
    };
    if let Some(a) = op
        .args
        .iter()
        .filter(|a| !(found_delete && *a == "-delete"))
        .find(|a| never.iter().any(|f| flag_hit(a, f)))
    {
        let why = format!("{prog} {a} writes or runs what its operands do not name");
        return Some((why, false));
    }
    if op.kind == crate::classify::types::OpKind::Command && !found_delete {
        if let Some(w) = op.writes.iter().find(|w| !is_operand(op, w)) {
            return Some((
                format!("writes {w}, which is not one of its operands"),
                true,
            ));
        }
    }
    None
}

/// A command's arguments as the signature sees them.
#[derive(Debug, Default)]
pub struct Walked {
    /// Flags (with `=…` for attached values).
    pub flags: Vec<String>,
    /// git's global options with their values, before the subcommand (`-c user.name=…`).
    pub global: Vec<String>,
    /// The subcommand kept literally (`git add`).
    pub sub: Option<String>,
    /// Positional arguments (and values of separate-value flags) with their kind.
    pub kinds: Vec<(String, String)>,
    /// Values attached to long flags (`--output=FILE` → `FILE`), with their kind.
    pub flag_values: Vec<(String, String)>,
}

/// Walks a command's arguments: flags, subcommand, and every other argument with its kind
/// (`WS_PATH`, `EXPR`, `MSG`, ...). The signature and the named paths (`effects`) both use it.
pub fn walk_args(op: &Operation, workdir: &Path, workspace: &Path) -> Walked {
    let prog = op.program.as_str();
    let mut w = Walked::default();
    let mut expr_seen = false;
    let mut next_kind: Option<&str> = None;
    let mut only_positional = false;
    let mut module_next = false;
    // git's global option waiting for its value (`-c`, `-C`, `--git-dir`, ...)
    let mut git_global: Option<&str> = None;
    for a in &op.args {
        if module_next {
            module_next = false;
            w.sub = Some(format!("-m {a}"));
            continue;
        }
        if let Some(k) = next_kind.take() {
            w.kinds.push((k.to_string(), a.clone()));
            continue;
        }
        if let Some(opt) = git_global.take() {
            w.global.push(git_global_flag(opt, a, workdir, workspace));
            continue;
        }
        if !only_positional && a == "--" {
            only_positional = true;
            continue;
        }
        if !only_positional && a.starts_with('-') && a.len() > 1 {
            if w.sub.is_none() && crate::classify::git::is_git(prog) {
                if let Some(opt) = crate::classify::git::global_value()
                    .iter()
                    .find(|o| *o == a)
                {
                    git_global = Some(opt.as_str());
                    continue;
                }
            }
            if let Some((letters, attached)) = msg_bundle(prog, a) {
                w.flags.extend(letters);
                match attached {
                    Some(m) => w.kinds.push(("MSG".into(), m.to_string())),
                    None => next_kind = Some("MSG"),
                }
                continue;
            }
            let (name, value) = match a.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v)),
                None => (a.clone(), None),
            };
            if name == "-m" && value.is_none() && signs(prog, |s| &s.keep_module) && w.sub.is_none()
            {
                module_next = true;
            } else if MSG_FLAGS.contains(&name.as_str()) && signs(prog, |s| &s.message_flags) {
                w.flags.push(name);
                if value.is_none() {
                    next_kind = Some("MSG");
                }
            } else if EXPR_FLAGS.contains(&name.as_str()) && !path_flag(prog, &name) {
                w.flags.push(name);
                expr_seen = true;
                if value.is_none() {
                    next_kind = Some("EXPR");
                }
            } else if let Some(v) = value {
                w.flags.push(format!("{name}=…"));
                w.flag_values
                    .push((arg_kind(v, workdir, workspace), v.to_string()));
            } else {
                w.flags.push(name);
            }
            continue;
        }
        if w.sub.is_none() && w.kinds.is_empty() && signs(prog, |s| &s.subcommand) {
            w.sub = Some(a.clone());
            continue;
        }
        if !expr_seen && w.kinds.is_empty() && signs(prog, |s| &s.expression_first) {
            expr_seen = true;
            w.kinds.push(("EXPR".into(), a.clone()));
            continue;
        }
        let kind = if operands_are_paths(prog, w.sub.as_deref(), expr_seen) {
            path_kind(a, workdir, workspace)
        } else if sub_operands(prog, w.sub.as_deref()) == Some(SubOperands::Refs)
            && !a.contains(DYN)
        {
            "LITERAL".into()
        } else {
            arg_kind(a, workdir, workspace)
        };
        w.kinds.push((kind, a.clone()));
    }
    w
}

/// Whether `flag` of `prog` takes a path, not an expression (its entry's `path_flags`: pip's
/// `-e` is `--editable PATH`, its value an operand like any other).
fn path_flag(prog: &str, flag: &str) -> bool {
    crate::programs::table().is_ok_and(|t| {
        t.signature(prog)
            .is_some_and(|s| s.path_flags.iter().any(|f| f == flag))
    })
}

/// What the positional arguments of `prog`'s subcommand `sub` are (its entry's subcommand
/// `operands`: `git add` takes paths, `git merge` refs).
fn sub_operands(prog: &str, sub: Option<&str>) -> Option<SubOperands> {
    let t = crate::programs::table().ok()?;
    t.spec(prog)?.subcommands.get(sub?)?.operands
}

/// Whether a positional argument of `prog` (after its subcommand, after its script for sed and
/// awk) is a path whatever it looks like (`mkdir -p build` signs as `mkdir -p WS_PATH`, as
/// `mkdir -p build/x` does, not `LITERAL`).
fn operands_are_paths(prog: &str, sub: Option<&str>, expr_seen: bool) -> bool {
    signs(prog, |s| &s.path_operands)
        || sub_operands(prog, sub) == Some(SubOperands::Paths)
        || (expr_seen && signs(prog, |s| &s.paths_after_expression))
}

/// A git global option with its value, as the signature keeps it: `-c KEY=…` (the key literal,
/// the value abstracted: whether the key is safe is `construct`'s question), `-C WS_PATH`.
fn git_global_flag(opt: &str, value: &str, workdir: &Path, workspace: &Path) -> String {
    if opt == "-c" {
        return match value.split_once('=') {
            Some((k, _)) => format!("-c {k}=…"),
            None => format!("-c {value}"),
        };
    }
    let kind = match opt {
        "-C" | "--git-dir" | "--work-tree" => path_kind(value, workdir, workspace),
        _ => arg_kind(value, workdir, workspace),
    };
    format!("{opt} {kind}")
}

/// One-letter flags a commit-like command takes before its message in one word (`-am`, `-qm`).
const BUNDLE_BEFORE_MSG: &str = "aqvsn";

/// A short-flag word of a version-control program that ends in its message flag (`-qm`, `-am`)
/// or carries the message attached (`-mfix`, `-qmfix`): the letters as separate flags, and the
/// attached message if any. None for anything else.
fn msg_bundle<'a>(prog: &str, a: &'a str) -> Option<(Vec<String>, Option<&'a str>)> {
    if a.starts_with("--") || a.len() < 3 || !signs(prog, |s| &s.message_flags) {
        return None;
    }
    let body = &a[1..];
    let at = body.find('m')?;
    let before = &body[..at];
    if !before.chars().all(|c| BUNDLE_BEFORE_MSG.contains(c)) {
        return None;
    }
    let mut letters: Vec<String> = before.chars().map(|c| format!("-{c}")).collect();
    letters.push("-m".into());
    let rest = &body[at + 1..];
    Some((letters, (!rest.is_empty()).then_some(rest)))
}

/// Where `op` runs: the command's working directory moved by the static `cd`s before it
/// (`Operation::dir`, relative or absolute). None when a `cd` before it is computed at run
/// time: nothing it names can be placed, so it names nothing and is never learned. Every
/// reading of an operation's operands as paths (signatures, the paths a change set may touch,
/// git's companions) starts here.
pub fn op_dir(op: &Operation, workdir: &Path) -> Option<PathBuf> {
    let d = op.dir.as_deref()?;
    Some(normalise(&workdir.join(d)))
}

/// The directory `cargo new [FLAGS] PATH` creates, or `cargo init [FLAGS] [PATH]` makes its
/// project in (`.` without an operand) — the one operand, the values of `--vcs`, `--name`,
/// `--edition` and `--registry` skipped — and whether it makes a git repository there (`--vcs
/// git` or no `--vcs`: cargo's default inside no repository). None: not that form.
pub fn cargo_new(op: &Operation) -> Option<(String, bool)> {
    let init = match op.args.first().map(String::as_str) {
        Some("new") => false,
        Some("init") => true,
        _ => return None,
    };
    if op.program != "cargo" {
        return None;
    }
    let (mut path, mut vcs) = (None, None);
    let mut it = op.args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--vcs" => vcs = it.next().cloned(),
            "--name" | "--edition" | "--registry" => {
                it.next();
            }
            f if f.starts_with('-') => {
                if let Some(v) = f.strip_prefix("--vcs=") {
                    vcs = Some(v.to_string());
                }
            }
            _ if path.is_none() => path = Some(a.clone()),
            _ => return None,
        }
    }
    let git = vcs.as_deref().is_none_or(|v| v == "git");
    let path = if init {
        path.or_else(|| Some(".".to_string()))
    } else {
        path
    };
    path.filter(|p| !p.contains(DYN)).map(|p| (p, git))
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
    let here = op_dir(op, workdir);
    let placed = here.is_some();
    let workdir = here.as_deref().unwrap_or(workdir);
    let outside = op
        .writes
        .iter()
        .find(|w| !write_in_workspace(w, workdir, workspace))
        .map(|w| format!("writes outside the workspace ({w})"));
    let hidden = construct(op);
    let tagged = hidden.as_ref().is_some_and(|(_, t)| *t);
    let mut why_not = hidden
        .map(|(why, _)| why)
        .or_else(|| category_learnable(op))
        .or(outside)
        .or_else(|| {
            (!placed).then(|| {
                "runs after a `cd` computed at run time: where it writes is not known".to_string()
            })
        });
    let (text, program) = match op.kind {
        OpKind::Assignment => {
            why_not = Some("assigns a shell variable that matters".into());
            (op.op.clone(), String::new())
        }
        OpKind::Redirect => {
            if !needs && op.writes.is_empty() {
                return None;
            }
            // a redirect's target is a path, whatever it looks like (`> Makefile`)
            let target = op
                .writes
                .first()
                .map(|w| path_kind(w, workdir, workspace))
                .unwrap_or_else(|| "DYN".into());
            (format!("{} {target}", op.op), String::new())
        }
        OpKind::Command => {
            if op.dynamic && (op.op == "bash:<dynamic>" || op.program.is_empty()) {
                why_not = Some("its program name is computed at run time".into());
                ("<dynamic>".to_string(), String::new())
            } else if op.is_find() && op.writes.iter().any(|w| found(w).is_some()) {
                // `find ROOT -name PATTERN -delete`: what it deletes, not how it was spelled
                let kinds: Vec<String> = op
                    .writes
                    .iter()
                    .map(|w| path_kind(w, workdir, workspace))
                    .collect();
                (
                    format!("find -delete {}", kinds.join(" ")),
                    op.program.clone(),
                )
            } else {
                let prog = op.program.clone();
                let w = walk_args(op, workdir, workspace);
                let mut flags = w.flags;
                flags.sort();
                flags.dedup();
                // Repeated kinds collapse: `git add a b c` and `git add a` share a signature.
                let mut collapsed: Vec<String> = Vec::new();
                for (k, _) in w.kinds {
                    match collapsed.last_mut() {
                        Some(last) if *last == k || *last == format!("{k}...") => {
                            *last = format!("{k}...")
                        }
                        _ => collapsed.push(k),
                    }
                }
                let mut global = w.global;
                global.sort();
                global.dedup();
                let mut parts = vec![prog.clone()];
                parts.extend(global);
                parts.extend(w.sub);
                parts.extend(flags);
                parts.extend(collapsed);
                (parts.join(" "), prog)
            }
        }
    };
    let text = if tagged {
        format!("{text} {ELSEWHERE_TAG}")
    } else {
        text
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

/// The signatures learned for `client` (taught, enough approvals without a denial, or the
/// operator's `always_allow`): what `bash::coverage` may let stand for another signature.
fn learned_for(conn: &Connection, client: &str, threshold: u32) -> rusqlite::Result<Vec<String>> {
    // The fleet's rules for this client (a fresh copy only, `ask::learned`), each still held to
    // this worker's stored verdict, overrides, denials and suspensions.
    // And the signatures the fleet's human approvals alone teach (`ask::evidence`: decision
    // rows of the registry; a fresh copy only), held to the same checks.
    let mut fleet = crate::ask::learned::learned_for(client, crate::time::now_ms());
    fleet.extend(crate::ask::evidence::reached(client, threshold));
    let mut out: Vec<String> = Vec::new();
    if !fleet.is_empty() {
        let mut st = conn.prepare_cached(
            "SELECT s.signature FROM signatures s LEFT JOIN signature_evidence e
               ON e.signature = s.signature AND e.client_id = ?1
             WHERE s.signature = ?2 AND s.learnable AND s.user_override IS NULL
               AND coalesce(e.denials, 0) = 0 AND NOT coalesce(e.suspended, 0)",
        )?;
        for f in &fleet {
            if let Some(sig) = st
                .query_row(params![client, f], |r| r.get::<_, String>(0))
                .optional()?
            {
                out.push(sig);
            }
        }
    }
    let mut st = conn.prepare_cached(
        "SELECT s.signature FROM signatures s LEFT JOIN signature_evidence e
           ON e.signature = s.signature AND e.client_id = ?1
         WHERE s.user_override = 'always_allow'
            OR (s.learnable AND s.user_override IS NULL AND coalesce(e.denials, 0) = 0
                AND NOT coalesce(e.suspended, 0)
                AND (e.learned_at IS NOT NULL OR coalesce(e.approvals, 0) >= ?2))",
    )?;
    let rows = st.query_map(params![client, threshold], |r| r.get(0))?;
    for r in rows {
        out.push(r?);
    }
    Ok(out)
}

/// The more restrictive of two overrides (`never` > `always_ask` > `always_allow`).
pub(crate) fn strictest(a: Option<Override>, b: Option<Override>) -> Option<Override> {
    let rank = |o: &Option<Override>| match o {
        Some(Override::Never) => 3,
        Some(Override::AlwaysAsk) => 2,
        Some(Override::AlwaysAllow) => 1,
        None => 0,
    };
    if rank(&b) > rank(&a) {
        b
    } else {
        a
    }
}

/// Records the signatures (creating rows) and reads their state for `client`: learned means the
/// operator's `always_allow`, or this client's human approvals reached the threshold (or a human
/// taught it with `--learn`) with no denial (a denial retires it) and no suspension (its approved
/// examples no longer sign as it) — evidence is per client (issue 18).
pub fn observe(
    conn: &mut Connection,
    client: &str,
    sigs: &[Signature],
    threshold: u32,
    now: i64,
) -> Result<SigState> {
    let mut write = false;
    for s in sigs {
        write = write || needs_write(conn, s, now)?;
    }
    if write {
        return Ok(write_tx(conn, |tx| {
            state(tx, client, sigs, threshold, now, true)
        })?);
    }
    // Nothing to record: the same reads in one read transaction, no commit to sync.
    let tx = conn.transaction()?;
    let st = state(&tx, client, sigs, threshold, now, false)?;
    tx.commit()?;
    Ok(st)
}

/// How far a signature's `last_seen` may lag (issue 39): a signature seen again within this
/// long, whose row already says what this sighting would write, is not written again — so a
/// known command's plan reads, and commits (and syncs to disk) nothing.
const SEEN_GRANULARITY_MS: i64 = 60_000;

/// Whether seeing `s` now changes its row: new, newly not learnable, a first reason why not,
/// or `last_seen` older than [`SEEN_GRANULARITY_MS`] (or in the future: a clock step).
fn needs_write(c: &Connection, s: &Signature, now: i64) -> rusqlite::Result<bool> {
    let row: Option<(bool, Option<String>, i64)> = c
        .prepare_cached(
            "SELECT learnable, why_not, last_seen FROM signatures WHERE signature = ?1",
        )?
        .query_row([&s.text], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(match row {
        None => true,
        Some((learnable, why_not, seen)) => {
            (learnable && !s.learnable)
                || (why_not.is_none() && s.why_not.is_some())
                || now - seen >= SEEN_GRANULARITY_MS
                || now < seen
        }
    })
}

/// [`observe`] inside its transaction; `write`: record the sighting first.
fn state(
    tx: &Connection,
    client: &str,
    sigs: &[Signature],
    threshold: u32,
    now: i64,
    write: bool,
) -> rusqlite::Result<SigState> {
    {
        let mut st = SigState {
            all_learned: !sigs.is_empty(),
            ..Default::default()
        };
        for s in sigs {
            if write {
                tx.prepare_cached(
                    "INSERT INTO signatures(signature, program, learnable, why_not, first_seen, last_seen)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                     ON CONFLICT(signature) DO UPDATE SET last_seen = ?5,
                       learnable = learnable AND excluded.learnable,
                       why_not = coalesce(why_not, excluded.why_not)",
                )?
                .execute(params![s.text, s.program, s.learnable, s.why_not, now])?;
            }
            let (learnable, approvals, denials, ov, taught, suspended): (bool, i64, i64, Option<String>, bool, bool) = tx.prepare_cached(
                "SELECT s.learnable, coalesce(e.approvals, 0), coalesce(e.denials, 0), s.user_override,
                        e.learned_at IS NOT NULL, e.suspended IS NOT NULL
                 FROM signatures s LEFT JOIN signature_evidence e
                   ON e.signature = s.signature AND e.client_id = ?2
                 WHERE s.signature = ?1",
            )?.query_row(
                params![&s.text, client],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
            )?;
            // Taught to the whole fleet by the operator (`ask::learned`: a fresh copy of the
            // registry's rules, none while this worker is cut off from it).
            let taught = taught || crate::ask::learned::teaches(client, &s.text, now).is_some();
            // The human approvals that count: this worker's own, or the fleet's when the
            // registry's decision rows have more (`ask::evidence`, the one owner).
            let approvals = crate::ask::evidence::approvals(client, &s.text, approvals);
            // The registry's override of this signature for this client (`ask::learned`:
            // fleet, project or this worker), beside the local one: the more restrictive wins.
            let ov = strictest(
                ov.as_deref().and_then(Override::parse),
                crate::ask::learned::override_of(client, &s.text, now)
                    .as_deref()
                    .and_then(Override::parse),
            );
            match ov {
                Some(Override::Never) => st.never = Some(s.text.clone()),
                Some(Override::AlwaysAsk) => st.always_ask = true,
                _ => {}
            }
            let learned = ov == Some(Override::AlwaysAllow)
                || (learnable
                    && s.learnable
                    && denials == 0
                    && !suspended
                    && (taught
                        || approvals >= threshold as i64
                        // a learned signature that does as much (`bash::coverage`)
                        || (ov.is_none()
                            && learned_for(tx, client, threshold)?
                                .iter()
                                .any(|l| crate::bash::coverage::covers(l, &s.text)))));
            if !learned || ov == Some(Override::AlwaysAsk) {
                st.all_learned = false;
            }
        }
        Ok(st)
    }
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

/// What `remember_job` recorded of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSignatures {
    pub client: Option<String>,
    /// The human saw a change set (else the command was asked up front).
    pub overlay: bool,
    pub signatures: Vec<String>,
}

/// The signatures a job's validation covers (`remember_job`).
pub fn of_job(conn: &Connection, job_id: i64) -> Result<Option<JobSignatures>> {
    let row: Option<(Option<String>, bool, String)> = conn
        .query_row(
            "SELECT client_id, overlay, signatures FROM job_signatures WHERE job_id = ?1",
            [job_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    Ok(row.map(|(client, overlay, s)| JobSignatures {
        client,
        overlay,
        signatures: serde_json::from_str(&s).unwrap_or_default(),
    }))
}

/// Of `sigs`, those a human denied for `client` (`signature_evidence.denials`, which only
/// `count_decision` of a human's decision writes), with how many times.
pub fn human_denials(
    conn: &Connection,
    client: &str,
    sigs: &[String],
) -> Result<Vec<(String, i64)>> {
    let mut s = conn.prepare_cached(
        "SELECT denials FROM signature_evidence WHERE client_id = ?1 AND signature = ?2 AND denials > 0",
    )?;
    let mut out = Vec::new();
    for sig in sigs {
        if let Some(n) = s
            .query_row(params![client, sig], |r| r.get::<_, i64>(0))
            .optional()?
        {
            out.push((sig.clone(), n));
        }
    }
    Ok(out)
}

/// Counts a human decision toward the job's signatures (once per job), in the totals and in the
/// deciding job's client's evidence — the only counts learning reads. A client's first denial of
/// a signature is recorded with it (`denied_at/by/job/validation`, and how many approvals it had
/// then): a denial of a learned signature **retires** it for that client ([`ClientLearning`]'s
/// `retired`); its commands ask again until `override SIGNATURE clear` forgets the denial.
pub fn count_decision(
    conn: &mut Connection,
    job_id: i64,
    approved: bool,
    by: &str,
    validation_id: &str,
) -> Result<()> {
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
                if col == "denials" {
                    // The first denial is the one that retires (SET reads the old row).
                    tx.execute(
                        "INSERT INTO signature_evidence(client_id, signature, denials, updated_at, denied_at, denied_by, denied_job, denied_validation, approvals_before_denial)
                         VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5, ?6, 0)
                         ON CONFLICT(client_id, signature) DO UPDATE SET denials = denials + 1, updated_at = ?3,
                           denied_by = CASE WHEN denied_at IS NULL THEN ?4 ELSE denied_by END,
                           denied_job = CASE WHEN denied_at IS NULL THEN ?5 ELSE denied_job END,
                           denied_validation = CASE WHEN denied_at IS NULL THEN ?6 ELSE denied_validation END,
                           approvals_before_denial = CASE WHEN denied_at IS NULL THEN approvals ELSE approvals_before_denial END,
                           denied_at = coalesce(denied_at, ?3)",
                        params![client, sig, now, by, job_id, validation_id],
                    )?;
                    continue;
                }
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

/// The job's signatures that are learned for `client` now (what a human denial of the job
/// retires), as `(id, text)`.
pub fn learned_in_job(
    conn: &Connection,
    job_id: i64,
    client: &str,
    threshold: u32,
) -> Result<Vec<(i64, String)>> {
    let sigs: Option<String> = conn
        .query_row(
            "SELECT signatures FROM job_signatures WHERE job_id = ?1",
            [job_id],
            |r| r.get(0),
        )
        .optional()?;
    let sigs: Vec<String> = sigs
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let rows = list(conn, threshold)?;
    Ok(rows
        .into_iter()
        .filter(|r| sigs.contains(&r.signature))
        .filter(|r| r.learnable && r.user_override.is_none())
        .filter(|r| r.clients.iter().any(|c| c.client_id == client && c.learned))
        .map(|r| (r.id, r.signature))
        .collect())
}

/// Suspends (`Some(why)`) or reinstates (`None`) what `client` learned of `sig`: the load-time
/// check of its approved examples (`bash::explain::check`). A suspended signature is not
/// learned (its commands ask) until the check passes again or `approve --learn` re-teaches it.
pub fn set_suspended(
    conn: &mut Connection,
    client: &str,
    sig: &str,
    why: Option<&str>,
    now: i64,
) -> Result<()> {
    write_tx(conn, |tx| {
        tx.execute(
            "UPDATE signature_evidence SET suspended = ?3,
               suspended_at = CASE WHEN ?3 IS NULL THEN NULL ELSE coalesce(suspended_at, ?4) END
             WHERE client_id = ?1 AND signature = ?2 AND suspended IS NOT ?3",
            params![client, sig, why, now],
        )
    })?;
    Ok(())
}

/// Marks `sigs` learned for `client` (`signature_evidence` `learned_at/by/job`), in one
/// transaction; a suspension ends (the human taught it again under the current classifier; the
/// examples that no longer sign as it were dropped, `bash::explain::relearned`). Call only after
/// `bash::learn::refusals` returned nothing for the validation.
pub fn mark_learned(
    security: &mut Connection,
    client: &str,
    sigs: &[String],
    job_id: i64,
    by: &str,
    now: i64,
) -> Result<()> {
    write_tx(security, |tx| {
        for s in sigs {
            tx.execute(
                "INSERT INTO signature_evidence(client_id, signature, approvals, denials, updated_at, learned_at, learned_by, learned_job)
                 VALUES (?1, ?2, 0, 0, ?3, ?3, ?4, ?5)
                 ON CONFLICT(client_id, signature) DO UPDATE SET updated_at = ?3, learned_at = ?3, learned_by = ?4, learned_job = ?5,
                   suspended = NULL, suspended_at = NULL",
                params![client, s, now, by, job_id],
            )?;
        }
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
    /// Per client: its human decisions, and who taught it the signature at once (`--learn`).
    pub clients: Vec<ClientLearning>,
}

/// One client's learning of one signature.
#[derive(Debug, Clone, Serialize)]
pub struct ClientLearning {
    pub client_id: String,
    pub approvals: i64,
    pub denials: i64,
    /// Learned for this client: no denial, and the threshold reached or taught with `--learn`.
    pub learned: bool,
    /// Set by `approve --learn`: when, by whom, from which job.
    pub learned_at: Option<i64>,
    pub learned_by: Option<String>,
    pub learned_job: Option<i64>,
    /// When its evidence last changed.
    pub updated_at: i64,
    /// The client's first human denial of it: when, by whom, which job and validation.
    pub denied_at: Option<i64>,
    pub denied_by: Option<String>,
    pub denied_job: Option<i64>,
    pub denied_validation: Option<String>,
    /// It was learned when that denial came: the denial retired it.
    pub retired: bool,
    /// Why what it learned no longer applies: an approved example now signs differently
    /// (`bash::explain::check`).
    pub suspended: Option<String>,
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
                clients: Vec::new(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut per_client = conn.prepare(
        "SELECT client_id, approvals, denials, learned_at, learned_by, learned_job, updated_at,
                denied_at, denied_by, denied_job, denied_validation, approvals_before_denial, suspended
         FROM signature_evidence WHERE signature = ?1 ORDER BY client_id",
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        r.clients = per_client
            .query_map([&r.signature], |x| {
                let (approvals, denials, learned_at): (i64, i64, Option<i64>) =
                    (x.get(1)?, x.get(2)?, x.get(3)?);
                let denied_at: Option<i64> = x.get(7)?;
                let before: Option<i64> = x.get(11)?;
                let suspended: Option<String> = x.get(12)?;
                Ok(ClientLearning {
                    client_id: x.get(0)?,
                    approvals,
                    denials,
                    learned: denials == 0
                        && suspended.is_none()
                        && (learned_at.is_some() || approvals >= threshold as i64),
                    learned_at,
                    learned_by: x.get(4)?,
                    learned_job: x.get(5)?,
                    updated_at: x.get(6)?,
                    retired: denied_at.is_some_and(|d| {
                        learned_at.is_some_and(|l| l <= d)
                            || before.unwrap_or(0) >= threshold as i64
                    }),
                    denied_at,
                    denied_by: x.get(8)?,
                    denied_job: x.get(9)?,
                    denied_validation: x.get(10)?,
                    suspended,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let ev = &r.clients;
        let learned: Vec<&str> = ev
            .iter()
            .filter(|c| c.learned)
            .map(|c| c.client_id.as_str())
            .collect();
        let best = ev
            .iter()
            .filter(|e| e.denials == 0)
            .map(|e| e.approvals)
            .max()
            .unwrap_or(0);
        let of = |f: fn(&ClientLearning) -> bool| -> Vec<&str> {
            ev.iter()
                .filter(|c| f(c))
                .map(|c| c.client_id.as_str())
                .collect()
        };
        let (retired, suspended) = (
            of(|c| c.retired),
            of(|c| c.suspended.is_some() && c.denials == 0),
        );
        let mut parts = Vec::new();
        if !learned.is_empty() {
            parts.push(format!("learned for {}", learned.join(", ")));
        }
        if !retired.is_empty() {
            parts.push(format!("retired for {} (denied)", retired.join(", ")));
        }
        if !suspended.is_empty() {
            parts.push(format!("suspended for {}", suspended.join(", ")));
        }
        r.state = match (&r.user_override, r.learnable) {
            (Some(o), _) => format!("override {o}"),
            (None, false) => {
                format!("never learned ({})", r.why_not.clone().unwrap_or_default())
            }
            _ if !parts.is_empty() => parts.join("; "),
            _ if !ev.is_empty() && ev.iter().all(|e| e.denials > 0) => {
                "not learned (denied before)".into()
            }
            _ => format!("learning ({best}/{threshold})"),
        };
        out.push(r);
    }
    Ok(out)
}

/// The id of a signature given as `sig:N`, `N`, or its exact text.
pub fn resolve(conn: &Connection, key: &str) -> Result<Option<i64>> {
    if let Some(n) = key.strip_prefix("sig:") {
        return Ok(n.parse::<i64>().ok());
    }
    let by_text: Option<i64> = conn
        .query_row(
            "SELECT id FROM signatures WHERE signature = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?;
    Ok(by_text.or_else(|| key.parse::<i64>().ok()))
}

/// Operator override of one signature (by id); `None` (clear) also forgets every client's
/// learning of it. Returns the signature and how many clients' learning was forgotten.
pub fn set_override(
    conn: &mut Connection,
    id: i64,
    ov: Option<Override>,
    reason: &str,
) -> Result<(String, usize)> {
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
    let forgotten = write_tx(conn, |tx| {
        tx.execute(
            "UPDATE signatures SET user_override = ?2, user_override_reason = ?3 WHERE id = ?1",
            params![id, ov.map(|o| o.as_str()), reason],
        )?;
        // `clear` also forgets what every client learned of it (issue 22): learning starts over.
        if ov.is_none() {
            return tx.execute(
                "DELETE FROM signature_evidence WHERE signature = ?1",
                [&sig],
            );
        }
        Ok(0)
    })?;
    Ok((sig, forgotten))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{check, Context};

    #[test]
    fn the_strictest_override_wins_whichever_side_it_comes_from() {
        use Override::*;
        assert_eq!(strictest(Some(AlwaysAllow), Some(Never)), Some(Never));
        assert_eq!(strictest(Some(Never), Some(AlwaysAllow)), Some(Never));
        assert_eq!(
            strictest(Some(AlwaysAsk), Some(AlwaysAllow)),
            Some(AlwaysAsk)
        );
        assert_eq!(strictest(None, Some(AlwaysAllow)), Some(AlwaysAllow));
        assert_eq!(strictest(Some(AlwaysAsk), None), Some(AlwaysAsk));
        assert_eq!(strictest(None, None), None);
    }

    fn sigs(cmd: &str) -> Vec<String> {
        sig_of(cmd).into_iter().map(|s| s.text).collect()
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

    fn sig_of(cmd: &str) -> Vec<Signature> {
        let ws = std::env::temp_dir();
        let r = check(
            cmd,
            &Context {
                workdir: Some(ws.clone()),
            },
        );
        of_report(&r, &ws, &ws)
    }

    /// Scripts and flags that write or run what the operands do not name are never learned,
    /// and the reason names the construct.
    #[test]
    fn constructs_that_write_or_run_elsewhere_are_never_learned() {
        let cases: &[(&str, &str)] = &[
            (
                "sed -i 's/x/y/w .git/config' a.txt",
                "s///w writes .git/config",
            ),
            ("sed -i -e 's/x/y/w out.txt' a.txt", "s///w writes out.txt"),
            ("sed -i '1w .git/config' a.txt", "`w` writes .git/config"),
            ("sed -n 'W out.txt' a.txt", "`W` writes out.txt"),
            ("sed -i '1r /etc/passwd' a.txt", "`r` reads /etc/passwd"),
            ("sed -i '1R notes.txt' a.txt", "`R` reads notes.txt"),
            ("sed -i 's/x/id/e' a.txt", "s///e"),
            ("sed -i '1e id' a.txt", "`e` runs a command"),
            ("awk '{print > \"f\"}' a.txt", "awk print > FILE"),
            ("awk '{print $1 >> \"f\"}' a.txt", "awk print > FILE"),
            ("awk 'BEGIN{system(\"id\")}' a.txt", "system()"),
            ("awk '{print | \"sh\"}' a.txt", "awk pipes"),
            (
                "awk 'BEGIN{\"id\" | getline l; print l}' > o.txt",
                "getline",
            ),
            ("find . -fprint out.txt", "-fprint"),
            ("find . -fprintf out.txt %p", "-fprintf"),
            ("find . -fls out.txt", "-fls"),
            ("find . -name x.o -o -name y -delete", "-delete"),
            ("find . -newer a -name x.o -delete", "-delete"),
            ("find . -name '*' -delete", "-delete"),
            ("tar -xf x.tar --to-command=sh", "--to-command"),
            ("tar -I sh -cf x.tar a", "tar -I"),
            (
                "tar --checkpoint-action=exec=sh -cf x.tar a",
                "--checkpoint-action",
            ),
            (
                "tar --use-compress-program=sh -cf x.tar a",
                "--use-compress-program",
            ),
            (
                "sort --compress-program=sh -o o.txt a.txt",
                "--compress-program",
            ),
            ("git -c core.fsmonitor=x status", "git -c core.fsmonitor"),
            (
                "git -c core.hooksPath=/tmp/h commit -m 'a b'",
                "git -c core.hooksPath",
            ),
            ("git -c alias.st='!sh -c id' st", "git -c alias.st"),
            (
                "git -c user.name=x -c core.editor=vim commit -m 'a b'",
                "git -c core.editor",
            ),
            (
                "git -c color.ui=auto -c include.path=/tmp/x commit -m 'a b'",
                "git -c include.path",
            ),
            (
                "git -cinclude.path=x commit -m 'a b'",
                "git -c include.path",
            ),
            (
                "git -c commit.gpgSign=true commit -m 'a b'",
                "git -c commit.gpgSign",
            ),
            (
                "git -c safe.directory=* commit -m 'a b'",
                "git -c safe.directory",
            ),
            ("git -c colorx.ui=1 commit -m 'a b'", "git -c colorx.ui"),
            (
                "git --config-env=core.pager=P commit -m 'a b'",
                "--config-env",
            ),
            ("python3 -c 'open(\"x\",\"w\")'", "inline code"),
        ];
        for (cmd, why) in cases {
            let sigs = sig_of(cmd);
            let bad: Vec<&Signature> = sigs.iter().filter(|s| !s.learnable).collect();
            assert!(
                !bad.is_empty(),
                "{cmd}: expected never learned, got {sigs:?}"
            );
            assert!(
                bad.iter()
                    .any(|s| s.why_not.as_deref().unwrap_or("").contains(why)),
                "{cmd}: why_not should name {why:?}: {sigs:?}"
            );
        }
    }

    /// The learned economy survives: ordinary edits stay learnable.
    #[test]
    fn ordinary_writes_stay_learnable() {
        for cmd in [
            "sed -i 's/a/b/g' a.txt",
            "sed -i -e 's/a/b/' -e '/x/d' a.txt",
            "echo hi > notes.txt",
            "echo hi >> notes.txt",
            "git add a.txt b.txt",
            "git commit -m 'fix the bug'",
            "git -c user.name=agent -c user.email=agent@example.com commit -qm 'step 1'",
            "git -c User.Name=agent -c color.diff.meta=blue commit -am wip",
            "git -c init.defaultBranch=main init",
            "git -C sub add a.txt",
            "sort -o out.txt in.txt",
            "sort --output=out.txt in.txt",
            "cp a.txt b.txt",
            "mkdir -p a/b",
            "dd if=a.txt of=b.txt",
            "touch a.txt",
            "rm -f a.txt",
        ] {
            let sigs = sig_of(cmd);
            assert!(!sigs.is_empty(), "{cmd}: no signature");
            assert!(sigs.iter().all(|s| s.learnable), "{cmd}: {sigs:?}");
        }
    }

    /// The refactored argument walk keeps the signature texts the database already holds.
    #[test]
    fn signature_texts_are_unchanged() {
        let t = |c: &str| sig_of(c).into_iter().map(|s| s.text).collect::<Vec<_>>();
        assert_eq!(t("sed -i 's/a/b/' x/a.txt"), vec!["sed -i EXPR WS_PATH"]);
        assert_eq!(t("git commit -q -m 'a b'"), vec!["git commit -m -q MSG"]);
        assert_eq!(t("echo hi > x/n.txt"), vec!["redirect:write WS_PATH"]);
        // a redirect's target is a path even when it does not look like one
        assert_eq!(
            t("cat > Makefile <<'EOF'\nall:\nEOF"),
            vec!["redirect:write WS_PATH"]
        );
        assert_eq!(t("echo x >> LICENSE"), vec!["redirect:write WS_PATH"]);
        assert_eq!(
            t("sort --output=o.txt a.txt"),
            vec!["sort --output=… WS_PATH"]
        );
        assert_eq!(t("git add a.txt b.txt"), vec!["git add WS_PATH..."]);
        // issue 35: a commit message bundled with its flags, git's global options in place
        assert_eq!(t("git commit -qm 'a b'"), vec!["git commit -m -q MSG"]);
        assert_eq!(t("git commit -qm fix"), vec!["git commit -m -q MSG"]);
        assert_eq!(t("git commit -am 'a b'"), vec!["git commit -a -m MSG"]);
        assert_eq!(t("git commit -mfix"), vec!["git commit -m MSG"]);
        assert_eq!(
            t("git -c user.name=agent -c user.email=a@example.com commit -qm 'step 1'"),
            vec!["git -c user.email=… -c user.name=… commit -m -q MSG"]
        );
        assert_eq!(
            t("git -c user.email=b@example.com -c user.name='Other Agent' commit -q -m 'step 2'"),
            t("git -c user.name=agent -c user.email=a@example.com commit -qm 'step 1'"),
        );
        assert_eq!(t("git -C x add a.txt"), vec!["git -C WS_PATH add WS_PATH"]);
        // a path the signature cannot place in the workspace never shares the learnable text
        assert_eq!(
            t("echo x >> ~/.bashrc"),
            vec!["redirect:write PATH(~/.bashrc)"]
        );
        assert_eq!(
            t("echo x > ~/notes/a.txt"),
            vec!["redirect:write PATH(~/notes/a.txt)"]
        );
        assert_eq!(t("rm -f *.pyc"), vec!["rm -f GLOB"]);
        assert_eq!(t("mkdir -p build"), vec!["mkdir -p WS_PATH"]);
        // a hidden construct never shares the learnable text
        assert_eq!(
            t("sed -i 's/a/b/w .git/config' a.txt"),
            vec!["sed -i EXPR WS_PATH [writes or runs elsewhere]"]
        );
    }

    /// A signature seen again within the window, its row unchanged, is read and not written
    /// (no commit on a known command's path); a downgrade, a first reason or the window's end
    /// is written. The state read is the same either way.
    #[test]
    fn a_known_signature_seen_again_is_read_not_written_and_reads_the_same() {
        use crate::db::{migrate, open, DbKind};
        let dir = tempfile::tempdir().unwrap();
        migrate::migrate(dir.path(), DbKind::Security).unwrap();
        let mut c = open(dir.path(), DbKind::Security).unwrap();
        let sig = |learnable: bool, why: Option<&str>| Signature {
            text: "sed -i EXPR WS_PATH".into(),
            program: "sed".into(),
            learnable,
            why_not: why.map(String::from),
        };
        let seen = |c: &Connection| -> (i64, bool, Option<String>) {
            c.query_row(
                "SELECT last_seen, learnable, why_not FROM signatures",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
        };
        let t0 = 1_000_000;
        let first = observe(&mut c, "bot", &[sig(true, None)], 3, t0).unwrap();
        assert_eq!(seen(&c), (t0, true, None));
        let before = c.total_changes();
        let again = observe(&mut c, "bot", &[sig(true, None)], 3, t0 + 59_000).unwrap();
        assert_eq!(
            c.total_changes(),
            before,
            "nothing written within the window"
        );
        assert_eq!(again, first);
        assert_eq!(seen(&c).0, t0);
        // The operator's override is read all the same.
        c.execute(
            "UPDATE signatures SET user_override = 'never' WHERE signature = 'sed -i EXPR WS_PATH'",
            [],
        )
        .unwrap();
        let st = observe(&mut c, "bot", &[sig(true, None)], 3, t0 + 59_500).unwrap();
        assert_eq!(st.never.as_deref(), Some("sed -i EXPR WS_PATH"));
        // A downgrade is written at once, with its reason.
        observe(
            &mut c,
            "bot",
            &[sig(false, Some("reads a secret"))],
            3,
            t0 + 59_600,
        )
        .unwrap();
        assert_eq!(
            seen(&c),
            (t0 + 59_600, false, Some("reads a secret".into()))
        );
        // The window's end moves last_seen.
        observe(&mut c, "bot", &[sig(false, None)], 3, t0 + 59_600 + 60_000).unwrap();
        assert_eq!(seen(&c).0, t0 + 119_600);
    }
}
