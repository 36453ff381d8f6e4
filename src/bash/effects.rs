//! Signatures bound to effects (issue 18, item 3): this module owns *what a learned signature may
//! apply without a human*. A command made only of learned signatures ran on the overlay; before
//! its change set is applied automatically, `auto_apply_refusals` checks it against what the
//! command names. Any reason it returns sends the change set to a human instead, with the reasons
//! in the prompt.
//!
//! The rule:
//!
//! 1. **Protected paths** (`bash::protected`, the one decision of what may make a tool run code:
//!    git's own files, what a repository's config points at, what its program entry says
//!    each program runs or obeys, the operator's `protected_paths`, dot-files that are not data)
//!    are never applied without a human, whatever was learned or promoted; each reason names the
//!    rule and why.
//! 2. **Every path the change set touches is named by the command**: an argument of one of its
//!    write operations (the ones the signature abstracts as `WS_PATH`, or a plain name, or a
//!    `--flag=FILE` value), a redirect target, or what git writes through a declared *companion*
//!    of one of its operations in the repository it runs in (git's `companions` in its entry). A
//!    directory argument covers the paths beneath it only for programs whose semantics are
//!    recursive on it
//!    (the program entry's `recursive`: `rm -r`, `cp -r`/`-a`, `mv`, `chmod -R`, ...), never for the workspace root
//!    itself; `mkdir -p` also covers the directories it creates above its argument, `sed -i.bak`
//!    its backups. Conservative on purpose: globs, computed
//!    arguments (`$x`, `$(...)`) and one-letter flags with the value attached name nothing, so a
//!    change set they produce asks.
//! 3. **git rewriting its working tree** (issue 35): `git switch` / `checkout` / `restore` /
//!    `stash` / `stash pop` / `merge` in their plain forms (git's `tree_forms`) rewrite
//!    tracked files the command does not name, from the repository's objects — content that
//!    earlier change sets (a human's, or learned ones, each judged path by path) put there. Such
//!    a change (outside any git dir, inside that repository's working tree) is covered only when
//!    nothing else in the command could have written it: every other operation that needs a
//!    human is a git form with declared companions or a redirect (never a runner such as
//!    `make` / `python`, nor `tar -x`, `patch`, `git apply`, which write what they do not name),
//!    and the repository runs no hook of its own (`protected::RunRepo::hooks`: a hook could write
//!    anything). Every such path is still judged by `protected::judge` first: a branch that
//!    brings a `.npmrc`, a hook or a path the config points at asks like any other write.
//!
//! Pure functions and data over `protected::judge`'s judgement (which reads the workspace);
//! `bash::overlay` calls `auto_apply_refusals` before an automatic apply, `bash::learn` before
//! `approve --learn` or a reviewer's approve. What signatures are never learned at all (scripts that write or run elsewhere) is in
//! `signatures::construct_why_not`.

use crate::bash::changes::{ChangeSet, Kind};
use crate::bash::protected::Judgement;
use crate::bash::signatures;
use crate::classify::types::OpKind;
use crate::classify::{CheckReport, Operation};
use crate::programs::Companion;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn has_flag(op: &Operation, flags: &[&str]) -> bool {
    op.args
        .iter()
        .any(|a| flags.iter().any(|f| crate::programs::flag_given(a, f)))
}

/// Whether `op`'s directory arguments cover what lies beneath them (its entry's `recursive`:
/// `rm -r`, `cp -a`, `chmod -R`; `mv` always).
fn recursive(op: &Operation) -> bool {
    let Ok(t) = crate::programs::table() else {
        return false;
    };
    match t.recursive(&op.program) {
        Some(crate::programs::Recursive::Always) => true,
        Some(r) => op.args.iter().any(|a| r.flag(a)),
        None => false,
    }
}

/// `sed -i.bak` / `--in-place=.bak` keeps a backup next to each file it edits (a suffix with `*`,
/// which names the backup otherwise, is not handled: its backups name nothing). `sed -i` alone
/// leaves nothing: its temporary file is renamed over the target.
fn backup_suffix(op: &Operation) -> Option<&str> {
    if !matches!(op.program.as_str(), "sed" | "gsed") {
        return None;
    }
    op.args
        .iter()
        .find_map(|a| {
            a.strip_prefix("--in-place=")
                .or_else(|| a.strip_prefix("-i").filter(|s| !s.is_empty()))
        })
        .filter(|s| !s.contains(['*', '/']))
}

/// What a runner or formatter writes in the workspace by its nature, besides its arguments
/// (issue 35), is its program entry's `companions` (`src/programs/`), like git's companions
/// (git's `companions` in its entry), so that a learned signature's change set counts as named. Build
/// output and caches are not there: they go to the runner cache outside the workspace
/// (`bash::runners`). What each kind covers is this module's:
///
/// - `lock`: these files in the working directory or a directory above it in the workspace (a
///   member of a cargo workspace updates the root's `Cargo.lock`);
/// - `sources`: files with these extensions beneath each directory argument (`./...` is its
///   directory), or beneath the working directory when the operation names none — the workspace
///   root included, since `prettier --write .` is the point; with `file_dir`, a file argument
///   covers its own directory (rustfmt formats the modules a file declares);
/// - `edits`: files of the working directory the subcommand exists to edit (`npm pkg set` edits
///   `package.json`): named by the command, so an implicitly run file is no exception;
/// - `beneath`: the directories the command names, with everything beneath them
///   (`python3 -m venv DIR`);
/// - `new_project`: the directory `cargo new PATH` makes, with everything beneath it; for
///   `cargo init [PATH]` only the files it lists (the git dir stays `bash::protected`'s);
/// - `environment`: the virtual environment the program runs from (`D/bin/pip install
///   --no-index …` installs beneath `D` when `D/pyvenv.cfg` is a file, read without following
///   symlinks);
/// - `outputs`: these directories of the working directory, with everything beneath them;
/// - `clone_tree`: the working tree `git clone` of a local path checks out;
/// - `bin_modes`: the executables `package.json`'s `bin` declares gain execute bits, nothing
///   else.
///
/// Never a companion, whatever the entries say: a protected path (judged first), and a file the
/// operator's tools run by themselves when they build, install or test (an entry's
/// `implicitly_run`): a formatter that rewrote `build.rs` or `package.json` asks.
fn implicitly_run(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    crate::programs::table().map_or(true, |t| t.implicitly_run(name))
        || name.starts_with('.')
        || name
            .rsplit_once('.')
            .is_some_and(|(stem, _)| stem.ends_with(".config") || stem.ends_with(".setup"))
}

/// What a command names: exact paths, paths covering their subtree, paths whose missing
/// parents it may create, and runner companions.
#[derive(Debug, Default)]
struct Named {
    exact: Vec<String>,
    beneath: Vec<String>,
    parents_of: Vec<String>,
    /// Lock files: (name, directories it may be in).
    locks: Vec<(&'static str, Vec<String>)>,
    /// Sources: (directory, extensions).
    sources: Vec<(String, &'static [String])>,
    /// Files found by one name pattern beneath a directory (`find ROOT -name PATTERN` feeding
    /// `-delete` or `-exec rm`): (root, pattern, recursive) — deletions only.
    found: Vec<(String, String, bool)>,
    /// Files that may gain execute bits and nothing else (a `bin_modes` companion).
    bin_modes: Vec<String>,
}

/// The workspace-relative directories from the working directory up to the workspace root.
fn up_to_root(workdir: &Path, workspace: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut d = relative(".", workdir, workspace);
    while let Some(cur) = d {
        out.push(cur.clone());
        d = (!cur.is_empty()).then(|| {
            cur.rsplit_once('/')
                .map_or(String::new(), |(h, _)| h.to_string())
        });
    }
    out
}

/// The runner companions of one operation, added to `n`.
fn runner_companions(n: &mut Named, op: &Operation, workdir: &Path, workspace: &Path) {
    let Some(here) = signatures::op_dir(op, workdir) else {
        return;
    };
    let workdir = here.as_path();
    let w = signatures::walk_args(op, workdir, workspace);
    let sub = w.sub.as_deref().unwrap_or("");
    let Ok(table) = crate::programs::table() else {
        return;
    };
    for c in table.companions(&op.program, sub, &op.args) {
        match c {
            Companion::Edits(names) => {
                n.exact.extend(names.iter().filter_map(|f| {
                    relative(&workdir.join(f).to_string_lossy(), workdir, workspace)
                }));
            }
            Companion::Beneath => {
                n.beneath.extend(
                    w.kinds
                        .iter()
                        .filter(|(k, _)| k == "WS_PATH" || k == "LITERAL")
                        .filter_map(|(_, a)| relative(a, workdir, workspace))
                        .filter(|r| !r.is_empty()),
                );
            }
            Companion::NewProject(init_files) => {
                let Some(dir) =
                    signatures::cargo_new(op).and_then(|(p, _)| relative(&p, workdir, workspace))
                else {
                    continue;
                };
                if sub == "init" {
                    let file = |f: &String| match dir.as_str() {
                        "" => f.clone(),
                        d => format!("{d}/{f}"),
                    };
                    n.exact.extend(init_files.iter().map(file));
                    n.exact.extend(Some(dir).filter(|d| !d.is_empty()));
                } else if !dir.is_empty() {
                    n.beneath.push(dir);
                }
            }
            Companion::Environment => {
                n.beneath.extend(environment(op, workdir, workspace));
            }
            Companion::Outputs(dirs) => {
                n.beneath.extend(dirs.iter().filter_map(|d| {
                    relative(&workdir.join(d).to_string_lossy(), workdir, workspace)
                }));
            }
            Companion::CloneTree => {
                n.beneath.extend(
                    op.args
                        .split_first()
                        .filter(|(s, _)| *s == "clone")
                        .and_then(|(_, rest)| crate::classify::git::local_clone(rest))
                        .and_then(|c| relative(&c.dest, workdir, workspace))
                        .filter(|r| !r.is_empty()),
                );
            }
            Companion::BinModes => {
                n.bin_modes.extend(package_bins(workdir, workspace));
            }
            Companion::Lock(names) => {
                let dirs = up_to_root(workdir, workspace);
                n.locks
                    .extend(names.iter().map(|l| (l.as_str(), dirs.clone())));
            }
            Companion::Sources {
                extensions,
                file_dir,
            } => {
                let mut dirs: Vec<String> = Vec::new();
                for (k, a) in w
                    .kinds
                    .iter()
                    .filter(|(k, _)| k == "WS_PATH" || k == "LITERAL")
                {
                    let _ = k;
                    let a = a
                        .strip_suffix("/...")
                        .or((a == "...").then_some("."))
                        .unwrap_or(a);
                    let Some(rel) = relative(a, workdir, workspace) else {
                        continue;
                    };
                    if workspace.join(&rel).is_dir() || rel.is_empty() {
                        dirs.push(rel);
                    } else if *file_dir {
                        dirs.push(
                            rel.rsplit_once('/')
                                .map_or(String::new(), |(h, _)| h.to_string()),
                        );
                    }
                }
                if w.kinds.is_empty() {
                    dirs.extend(relative(".", workdir, workspace));
                }
                n.sources
                    .extend(dirs.into_iter().map(|d| (d, extensions.as_slice())));
            }
        }
    }
}

/// The workspace directory `D` of a program run as `D/bin/NAME` when `D/pyvenv.cfg` is a
/// regular file (no symlink in any component): a virtual environment, not any directory that
/// happens to hold a `bin/`.
fn environment(op: &Operation, workdir: &Path, workspace: &Path) -> Option<String> {
    let bin = op.program_path.as_deref()?.trim_end_matches('/');
    let dir = match bin.rsplit_once('/') {
        Some((d, "bin")) => d,
        None if bin == "bin" => ".",
        _ => return None,
    };
    let rel = relative(dir, workdir, workspace).filter(|r| !r.is_empty())?;
    let ws = crate::fs::beneath::Beneath::open(workspace).ok()?;
    matches!(
        ws.entry(&format!("{rel}/pyvenv.cfg")),
        Ok(crate::fs::beneath::Entry::File(..))
    )
    .then_some(rel)
}

/// The workspace-relative files `package.json`'s `bin` names in `workdir` (a string: the one
/// executable; an object: its values), read beneath the workspace without following symlinks.
fn package_bins(workdir: &Path, workspace: &Path) -> Vec<String> {
    let Some(dir) = relative(".", workdir, workspace) else {
        return Vec::new();
    };
    let manifest = if dir.is_empty() {
        "package.json".to_string()
    } else {
        format!("{dir}/package.json")
    };
    let Some(text) = crate::fs::beneath::Beneath::open(workspace)
        .ok()
        .and_then(|ws| ws.read_up_to(&manifest, 1 << 20).ok().flatten())
    else {
        return Vec::new();
    };
    let bins: Vec<String> = match serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("bin").cloned())
    {
        Some(serde_json::Value::String(s)) => vec![s],
        Some(serde_json::Value::Object(m)) => m
            .values()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    bins.iter()
        .filter_map(|b| relative(b, workdir, workspace))
        .filter(|r| r.starts_with(&format!("{dir}/")) || dir.is_empty())
        .collect()
}

/// A modification that only adds execute bits to a regular file (same content, no other bit).
fn gains_execute_only(c: &crate::bash::changes::Change) -> bool {
    let parse = |s: Option<&str>| {
        let (hash, mode) = s?.strip_prefix("file:")?.rsplit_once(':')?;
        Some((hash.to_string(), u32::from_str_radix(mode, 8).ok()?))
    };
    match (parse(c.before.as_deref()), parse(c.after.as_deref())) {
        (Some((h1, m1)), Some((h2, m2))) => {
            h1 == h2 && m1 != m2 && m2 & !0o111 == m1 & !0o111 && m2 & m1 == m1
        }
        _ => false,
    }
}

fn companion_covers(n: &Named, path: &str) -> bool {
    if implicitly_run(path) {
        return false;
    }
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    n.locks
        .iter()
        .any(|(l, dirs)| *l == name && dirs.iter().any(|d| d == dir))
        || n.sources.iter().any(|(d, exts)| {
            (d.is_empty()
                || path
                    .strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/')))
                && name
                    .rsplit_once('.')
                    .is_some_and(|(s, e)| !s.is_empty() && exts.iter().any(|x| x == e))
        })
}

/// A workspace-relative, `/`-separated, lexically normalised path; None outside the workspace
/// or when the argument is not a plain path (computed, glob, home-relative).
fn relative(arg: &str, workdir: &Path, workspace: &Path) -> Option<String> {
    let computed = ['…', '\u{FFFC}', '\u{FFFD}', '*', '?', '[', '$', '\u{1F}'];
    if arg.is_empty() || arg.starts_with('~') || arg.contains(computed) {
        return None;
    }
    let p = if Path::new(arg).is_absolute() {
        PathBuf::from(arg)
    } else {
        workdir.join(arg)
    };
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
        }
    }
    let ws: Vec<String> = workspace
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    out.starts_with(&ws).then(|| out[ws.len()..].join("/"))
}

/// The paths one write operation names (its arguments as the signature walks them, minus
/// scripts, messages, URLs and numbers; its redirect target).
pub fn named_paths(op: &Operation, workdir: &Path, workspace: &Path) -> Vec<String> {
    let Some(here) = signatures::op_dir(op, workdir) else {
        return Vec::new();
    };
    let workdir = here.as_path();
    let args: Vec<String> = if op.kind == OpKind::Redirect {
        op.writes.clone()
    } else {
        let w = signatures::walk_args(op, workdir, workspace);
        w.kinds
            .into_iter()
            .chain(w.flag_values)
            .filter(|(k, _)| k == "WS_PATH" || k == "LITERAL")
            .map(|(_, a)| a)
            .collect()
    };
    args.iter()
        .filter_map(|a| relative(a, workdir, workspace))
        .collect()
}

fn named(report: &CheckReport, workdir: &Path, workspace: &Path) -> Named {
    let mut n = Named::default();
    for op in &report.operations {
        if signatures::of_operation(op, workdir, workspace).is_none() {
            continue; // pure or read-only: names nothing it may write
        }
        let paths = named_paths(op, workdir, workspace);
        if op.program == "mkdir" && has_flag(op, &["-p", "--parents"]) {
            n.parents_of.extend(paths.iter().cloned());
        }
        if recursive(op) {
            n.beneath.extend(paths.iter().cloned());
        }
        runner_companions(&mut n, op, workdir, workspace);
        found_by_name(&mut n, op, workdir, workspace);
        if let Some(suffix) = backup_suffix(op) {
            n.exact.extend(paths.iter().map(|p| format!("{p}{suffix}")));
        }
        n.exact.extend(paths);
    }
    n
}

/// What `find ROOT -name PATTERN -delete` (the find operation's placeholders) or
/// `find … -exec rm [-r] {} +` (rm's operands) may delete, added to `n`.
fn found_by_name(n: &mut Named, op: &Operation, workdir: &Path, workspace: &Path) {
    if !op.is_find() && op.program != "rm" {
        return;
    }
    let Some(here) = signatures::op_dir(op, workdir) else {
        return;
    };
    let words = if op.is_find() { &op.writes } else { &op.args };
    for (root, pattern) in words.iter().filter_map(|w| signatures::found(w)) {
        if let Some(r) = relative(root, &here, workspace) {
            n.found
                .push((r, pattern.to_string(), op.program == "rm" && recursive(op)));
        }
    }
}

/// A deletion `find_by_name` allows: beneath the root, its own name matching the pattern, or
/// (recursive) beneath a directory whose name does.
fn found_covers(n: &Named, path: &str) -> bool {
    n.found.iter().any(|(root, pattern, rec)| {
        let rest = if root.is_empty() {
            Some(path)
        } else {
            path.strip_prefix(root.as_str())
                .and_then(|r| r.strip_prefix('/'))
        };
        let Some(rest) = rest.filter(|r| !r.is_empty()) else {
            return false;
        };
        let Ok(glob) = globset::Glob::new(pattern) else {
            return false;
        };
        let m = glob.compile_matcher();
        let name = rest.rsplit('/').next().unwrap_or(rest);
        m.is_match(name) || (*rec && rest.split('/').any(|c| m.is_match(c)))
    })
}

/// `path` is `dir` or lies beneath it. The workspace root (`""`) covers nothing beneath it: a
/// recursive `mv x .` or `cp -r x .` would otherwise name the whole workspace, and with it the
/// unnamed effects of every other operation in the command.
fn is_under(path: &str, dir: &str) -> bool {
    !dir.is_empty() && (path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/')))
}

fn covered(n: &Named, by_git: &BTreeSet<String>, c: &crate::bash::changes::Change) -> bool {
    let path = c.path.as_str();
    let added_dir = c.kind == Kind::Added && c.after.as_deref() == Some("dir");
    (c.kind == Kind::Deleted && found_covers(n, path))
        || n.exact.iter().any(|e| e == path)
        || n.beneath.iter().any(|d| is_under(path, d))
        || (added_dir && n.parents_of.iter().any(|p| is_under(p, path)))
        || by_git.contains(path)
        || companion_covers(n, path)
        || (c.kind == Kind::Modified
            && n.bin_modes.iter().any(|b| b == path)
            && gains_execute_only(c))
}

/// The working tree git rewrote (rule 3 of the module doc), when nothing else in the command
/// may write a path it does not name: every operation that needs a human is a git operation
/// with declared companions (`protected::git_write`) or a redirect (which names its target).
/// Any other program — a runner (`make`, `python`), an archive or patch tool (`tar -x`,
/// `patch`, `git apply`) — turns the rule off.
fn git_tree<'a>(
    report: &CheckReport,
    workdir: &Path,
    workspace: &Path,
    judged: &'a Judgement,
) -> Option<&'a str> {
    let root = judged.git_tree.as_deref()?;
    let only_git = report.operations.iter().all(|op| {
        op.kind == OpKind::Redirect
            || signatures::of_operation(op, workdir, workspace).is_none()
            || (crate::classify::git::is_git(&op.program)
                && crate::bash::protected::git_write(op, workdir, workspace).is_some())
    });
    only_git.then_some(root)
}

fn in_tree(path: &str, root: &str) -> bool {
    let beneath = root.is_empty() || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'));
    beneath && !path.split('/').any(|c| c.eq_ignore_ascii_case(".git"))
}

/// Why this change set may not be applied automatically under the command's learned
/// signatures; empty: it may. `judged`: `protected::judge` of the same change set and command.
/// Each reason names the path and why, for the human's prompt.
pub fn auto_apply_refusals(
    report: &CheckReport,
    workdir: &Path,
    workspace: &Path,
    change_set: &ChangeSet,
    judged: &Judgement,
) -> Vec<String> {
    let n = named(report, workdir, workspace);
    let tree = git_tree(report, workdir, workspace, judged);
    let mut out = judged.reasons();
    for c in &change_set.changes {
        if judged.is_protected(&c.path) {
            continue;
        }
        if !covered(&n, &judged.by_git, c) && !tree.is_some_and(|root| in_tree(&c.path, root)) {
            let verb = match c.kind {
                Kind::Added => "adds",
                Kind::Modified => "modifies",
                Kind::Deleted => "deletes",
            };
            out.push(format!(
                "{verb} {}, which the command does not name",
                c.path
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bash::protected::{judge, Table};
    use crate::classify::{check, Context};
    use crate::permset::PathLists;

    const F: &str = "file:00:644";

    fn cs(changes: &[(&str, Kind, &str)]) -> ChangeSet {
        crate::bash::changes::for_tests(changes, F)
    }

    fn refusals_in(
        cmd: &str,
        sub: &str,
        changes: &[(&str, Kind, &str)],
        p: &PathLists,
    ) -> Vec<String> {
        let (_d, ws) = workspace(&[]);
        refusals_at(&ws, sub, cmd, changes, p)
    }

    fn refusals_at(ws: &Path, sub: &str, cmd: &str, changes: &[Ch], p: &PathLists) -> Vec<String> {
        let wd = ws.join(sub);
        let r = check(
            cmd,
            &Context {
                workdir: Some(wd.clone()),
            },
        );
        let set = cs(changes);
        let t = Table::new(p).unwrap();
        let j = judge(&t, &set, ws, Some((&r, &wd)));
        auto_apply_refusals(&r, &wd, ws, &set, &j)
    }

    /// One table row's verdict: `None`, no refusal (applied automatically); `Some(w)`, a
    /// refusal containing `w`.
    fn expect(cmd: &str, got: &[String], want: Option<&str>) {
        match want {
            None => assert!(got.is_empty(), "{cmd}: expected no refusal, got {got:?}"),
            Some(w) => assert!(
                got.iter().any(|g| g.contains(w)),
                "{cmd}: expected {w:?}, got {got:?}"
            ),
        }
    }

    fn refusals(cmd: &str, changes: &[(&str, Kind, &str)]) -> Vec<String> {
        refusals_in(cmd, "", changes, &PathLists::default())
    }

    /// A workspace with a repository on branch master (what `git commit` companions read) and
    /// `files` (path, content).
    fn workspace(files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/master\n").unwrap();
        for (f, text) in files {
            let at = ws.join(f);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        (d, ws)
    }

    /// [`refusals`] in a workspace holding `files` besides its repository.
    fn refusals_with(cmd: &str, files: &[(&str, &str)], changes: &[Ch]) -> Vec<String> {
        let (_d, ws) = workspace(files);
        refusals_at(&ws, "", cmd, changes, &PathLists::default())
    }

    /// npm's local work (issue 35): `init -y` writes package.json; a local install its
    /// manifest, lock file and node_modules; scripts and tools their build's output
    /// directories, and the execute bits of the package's own `bin`; `--fix` the sources it
    /// is given. Anything else asks.
    #[test]
    fn npm_local_work_covers_its_manifest_modules_outputs_and_bins_only() {
        const X: &str = "file:00:755";
        let pkg = r#"{"name":"t","bin":{"t":"bin/t.js"},"scripts":{"build":"node build.js"}}"#;
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            ("npm init -y", &[("package.json", A, F)], None),
            (
                "npm init -y",
                &[("package.json", A, F), ("index.js", A, F)],
                Some("adds index.js"),
            ),
            (
                "npm install --no-audit -D ./vendor/x.tgz",
                &[
                    ("package.json", M, F),
                    ("package-lock.json", A, F),
                    ("node_modules", A, "dir"),
                    ("node_modules/x/index.js", A, F),
                ],
                None,
            ),
            // `.bin` shims are run by the operator's next `npm test` (issue 48): shown, not applied
            (
                "npm install --no-audit -D ./vendor/x.tgz",
                &[("node_modules/.bin", A, "dir")],
                Some("(rule **/node_modules/.bin/**:"),
            ),
            (
                "npm install ./vendor/x.tgz",
                &[("src/evil.js", A, F)],
                Some("adds src/evil.js"),
            ),
            (
                "npm install ./vendor/x.tgz",
                &[("node_modules/x/.npmrc", A, F)],
                Some(".npmrc"),
            ),
            (
                "npm install ./vendor/x.tgz",
                &[(".husky/pre-commit", A, F)],
                Some(".husky"),
            ),
            (
                "npm run build",
                &[("dist", A, "dir"), ("dist/t.js", A, F)],
                None,
            ),
            ("npm run build", &[("dist/t.js", M, F)], None),
            ("npm test", &[("coverage/lcov.info", A, F)], None),
            (
                "npm run build",
                &[("src/t.js", M, F)],
                Some("modifies src/t.js"),
            ),
            (
                "npm run build",
                &[("node_modules/x/i.js", M, F)],
                Some("modifies node_modules/x/i.js"),
            ),
            ("npx tsc", &[("build/t.js", A, F)], None),
            ("npx t --title", &[("bin/t.js", M, X)], None),
            (
                "npx t --title",
                &[("bin/t.js", M, "file:11:755")],
                Some("modifies bin/t.js"),
            ),
            (
                "npx t --title",
                &[("bin/other.js", M, X)],
                Some("modifies bin/other.js"),
            ),
            (
                "npx t --title",
                &[("bin/t.js", M, "file:00:4755")],
                Some("modifies bin/t.js"),
            ),
            ("npx tinylint --fix src", &[("src/a.js", M, F)], None),
            (
                "npx tinylint --fix src",
                &[("test/a.js", M, F)],
                Some("modifies test/a.js"),
            ),
            (
                "npx tinylint src",
                &[("src/a.js", M, F)],
                Some("modifies src/a.js"),
            ),
            (
                "npx tinylint --fix src",
                &[("src/.eslintrc.js", M, F)],
                Some("src/.eslintrc.js"),
            ),
        ];
        for (cmd, changes, want) in cases {
            let got = refusals_with(cmd, &[("package.json", pkg), ("src/a.js", "")], changes);
            expect(cmd, &got, *want);
        }
    }

    /// `cargo init` in place: its manifest, sources and `.gitignore`, nothing else;
    /// `git clone` of a workspace path: the directory it makes.
    #[test]
    fn cargo_init_and_a_local_clone_cover_what_they_make_only() {
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            (
                "cargo init --name todo",
                &[
                    ("Cargo.toml", A, F),
                    ("src", A, "dir"),
                    ("src/main.rs", A, F),
                    (".gitignore", A, F),
                ],
                None,
            ),
            (
                "cargo init --lib sub",
                &[
                    ("sub", A, "dir"),
                    ("sub/Cargo.toml", A, F),
                    ("sub/src", A, "dir"),
                    ("sub/src/lib.rs", A, F),
                ],
                None,
            ),
            (
                "cargo init",
                &[("Cargo.toml", A, F), ("build.rs", A, F)],
                Some("adds build.rs"),
            ),
            (
                "cargo init",
                &[("Cargo.toml", A, F), ("src/other.rs", A, F)],
                Some("adds src/other.rs"),
            ),
            (
                "git clone -q remotes/kv.git",
                &[
                    ("kv", A, "dir"),
                    ("kv/src", A, "dir"),
                    ("kv/src/a.rs", A, F),
                ],
                None,
            ),
            (
                "git clone remotes/kv.git mine",
                &[("mine", A, "dir"), ("mine/a.rs", A, F)],
                None,
            ),
            (
                "git clone remotes/kv.git mine",
                &[("kv/a.rs", A, F)],
                Some("adds kv/a.rs"),
            ),
            (
                "git clone -q remotes/kv.git",
                &[("kv", A, "dir"), ("kv/.envrc", A, F)],
                Some(".envrc"),
            ),
        ];
        for (cmd, changes, want) in cases {
            let got = refusals_with(cmd, &[], changes);
            expect(cmd, &got, *want);
        }
    }

    use Kind::{Added as A, Deleted as D, Modified as M};
    /// (path, kind, state after)
    type Ch<'a> = (&'a str, Kind, &'a str);

    /// (command, change set, None = may be applied automatically / Some(part of a reason)).
    #[test]
    fn the_change_set_must_be_what_the_command_names() {
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            ("sed -i 's/a/b/' a.txt", &[("a.txt", M, F)], None),
            (
                "sed -i.bak 's/a/b/' a.txt",
                &[("a.txt", M, F), ("a.txt.bak", A, F)],
                None,
            ),
            (
                "sed --in-place=.orig 's/a/b/' a.txt",
                &[("a.txt", M, F), ("a.txt.orig", A, F)],
                None,
            ),
            (
                "sed -i 's/a/b/' a.txt",
                &[("a.txt", M, F), ("a.txt.bak", A, F)],
                Some("adds a.txt.bak"),
            ),
            (
                "sed -i'*.x' 's/a/b/' a.txt",
                &[("a.txt", M, F), ("a.txt.x", A, F)],
                Some("adds a.txt.x"),
            ),
            (
                "sed -i 's/a/b/' a.txt",
                &[("a.txt", M, F), ("b.txt", M, F)],
                Some("modifies b.txt, which the command does not name"),
            ),
            ("echo hi > notes.txt", &[("notes.txt", A, F)], None),
            ("echo hi >> ./d/../notes.txt", &[("notes.txt", M, F)], None),
            // written through a planted symlink: the overlay shows the target
            (
                "echo hi > link.txt",
                &[("other.txt", M, F)],
                Some("modifies other.txt"),
            ),
            ("sort -o out.txt in.txt", &[("out.txt", A, F)], None),
            ("sort --output=out.txt in.txt", &[("out.txt", A, F)], None),
            ("cp a.txt b.txt", &[("b.txt", A, F)], None),
            ("touch $X", &[("a.txt", A, F)], Some("adds a.txt")),
            ("touch *.txt", &[("a.txt", M, F)], Some("modifies a.txt")),
            // directories: beneath only for recursive semantics
            (
                "rm -rf build",
                &[("build/x.o", D, F), ("build", D, "dir")],
                None,
            ),
            (
                "rm build/x.o",
                &[("build/x.o", D, F), ("build", D, "dir")],
                Some("deletes build,"),
            ),
            (
                "rm -f build",
                &[("build/x.o", D, F)],
                Some("deletes build/x.o"),
            ),
            (
                "mv a b",
                &[
                    ("a/x", D, F),
                    ("a", D, "dir"),
                    ("b", A, "dir"),
                    ("b/x", A, F),
                ],
                None,
            ),
            ("cp -a src dst", &[("dst", A, "dir"), ("dst/x", A, F)], None),
            (
                "cp src dst",
                &[("dst", A, "dir"), ("dst/x", A, F)],
                Some("adds dst/x"),
            ),
            ("chmod -R u+w lib", &[("lib/a", M, F)], None),
            (
                "cp -r x . && echo evil > link.txt",
                &[("x", A, "dir"), ("other.txt", M, F)],
                Some("modifies other.txt"),
            ),
            ("chmod -R u+w .", &[("lib/a", M, F)], Some("modifies lib/a")),
            ("chmod u+w lib", &[("lib/a", M, F)], Some("modifies lib/a")),
            (
                "mkdir -p a/b/c",
                &[("a", A, "dir"), ("a/b", A, "dir"), ("a/b/c", A, "dir")],
                None,
            ),
            (
                "mkdir a/b/c",
                &[("a", A, "dir"), ("a/b", A, "dir"), ("a/b/c", A, "dir")],
                Some("adds a,"),
            ),
            ("mkdir -p a/b", &[("a", A, F)], Some("adds a,")),
            // companions: what git writes under .git
            (
                "git add a.txt",
                &[
                    (".git/index", M, F),
                    (".git/objects/78", A, "dir"),
                    (".git/objects/78/98", A, F),
                ],
                None,
            ),
            (
                "git add a.txt",
                &[(".git/index", M, F), (".git/refs/heads/main", M, F)],
                Some("protected path .git/refs/heads/main"),
            ),
            (
                "git commit -m 'x y'",
                &[
                    (".git/COMMIT_EDITMSG", A, F),
                    (".git/index", M, F),
                    (".git/logs", A, "dir"),
                    (".git/logs/HEAD", A, F),
                    (".git/logs/refs/heads/master", A, F),
                    (".git/objects/08", A, "dir"),
                    (".git/objects/08/58", A, F),
                    (".git/refs/heads/master", A, F),
                ],
                None,
            ),
            // a hook that wrote elsewhere
            (
                "git commit -m 'x y'",
                &[(".git/index", M, F), ("src/x.rs", M, F)],
                Some("modifies src/x.rs"),
            ),
            (
                "git rm a.txt",
                &[("a.txt", D, F), (".git/index", M, F)],
                None,
            ),
            ("git status", &[("x", A, F)], Some("adds x")),
        ];
        for (cmd, changes, want) in cases {
            let got = refusals(cmd, changes);
            expect(cmd, &got, *want);
        }
    }

    /// Runners and formatters (issue 35): their declared companions (lock files, sources of
    /// their language beneath their argument), never a protected path nor an implicitly run file.
    #[test]
    fn runners_and_formatters_cover_their_companions_only() {
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            ("cargo test", &[("Cargo.lock", A, F)], None),
            ("cargo build --release", &[("Cargo.lock", M, F)], None),
            (
                "cargo test",
                &[("src/main.rs", M, F)],
                Some("modifies src/main.rs"),
            ),
            (
                "cargo test",
                &[("target/debug/x", A, F)],
                Some("adds target/debug/x"),
            ),
            (
                "cargo test",
                &[("sub/Cargo.lock", A, F)],
                Some("adds sub/Cargo.lock"),
            ),
            (
                "cargo fmt",
                &[("src/main.rs", M, F), ("src/a/b.rs", M, F)],
                None,
            ),
            (
                "cargo fmt",
                &[("build.rs", M, F)],
                Some("modifies build.rs"),
            ),
            (
                "cargo fmt",
                &[("src/x.py", M, F)],
                Some("modifies src/x.py"),
            ),
            (
                "cargo fmt",
                &[("Cargo.lock", M, F)],
                Some("modifies Cargo.lock"),
            ),
            (
                "cargo fmt",
                &[(".cargo/config.toml", A, F)],
                Some("protected path .cargo/config.toml"),
            ),
            (
                "cargo test",
                &[(".git/hooks/pre-commit", A, F)],
                Some("protected path .git/hooks/pre-commit"),
            ),
            (
                "cargo clippy",
                &[("src/a.rs", M, F)],
                Some("modifies src/a.rs"),
            ),
            ("cargo clippy --fix", &[("src/a.rs", M, F)], None),
            ("gofmt -w .", &[("main.go", M, F), ("pkg/a.go", M, F)], None),
            (
                "gofmt -w main.go",
                &[("other.go", M, F)],
                Some("modifies other.go"),
            ),
            ("go fmt ./...", &[("a/b.go", M, F)], None),
            (
                "go test ./...",
                &[("a/b.go", M, F)],
                Some("modifies a/b.go"),
            ),
            (
                "npx prettier --write .",
                &[("src/a.ts", M, F), ("README.md", M, F)],
                None,
            ),
            (
                "npx prettier --write .",
                &[("package.json", M, F)],
                Some("modifies package.json"),
            ),
            (
                "npx prettier --write .",
                &[("jest.config.js", M, F)],
                Some("modifies jest.config.js"),
            ),
            (
                "npx prettier --check .",
                &[("a.ts", M, F)],
                Some("modifies a.ts"),
            ),
            ("npx eslint --fix .", &[("a.js", M, F)], None),
            ("npx eslint .", &[("a.js", M, F)], Some("modifies a.js")),
            ("black .", &[("pkg/a.py", M, F)], None),
            (
                "black .",
                &[("conftest.py", M, F)],
                Some("modifies conftest.py"),
            ),
            ("black .", &[("setup.py", M, F)], Some("modifies setup.py")),
            ("black .", &[("a.rs", M, F)], Some("modifies a.rs")),
            ("ruff format .", &[("a.py", M, F)], None),
            (
                "npm test",
                &[("package-lock.json", M, F)],
                Some("modifies package-lock.json"),
            ),
            (
                "python3 -m unittest",
                &[("a.py", M, F)],
                Some("modifies a.py"),
            ),
            // what a subcommand exists to edit, and a venv's own directory
            (
                "npm pkg set scripts.test='node --test'",
                &[("package.json", M, F), ("package-lock.json", M, F)],
                None,
            ),
            (
                "npm pkg set a=b",
                &[("other.json", M, F)],
                Some("modifies other.json"),
            ),
            ("npm version patch", &[("package.json", M, F)], None),
            ("go mod tidy", &[("go.sum", A, F), ("go.mod", M, F)], None),
            (
                "go mod tidy",
                &[("main.go", M, F)],
                Some("modifies main.go"),
            ),
            // a new environment's start-up code is run by the operator's next `python` (issue 48)
            (
                "python3 -m venv .venv",
                &[(".venv/lib/python3.11/site-packages", A, "dir")],
                None,
            ),
            (
                "python3 -m venv .venv",
                &[(".venv/bin/python", A, F), (".venv/pyvenv.cfg", A, F)],
                Some("(rule **/.venv/bin/**:"),
            ),
            (
                "python3 -m venv .venv",
                &[("sitecustomize.py", A, F)],
                Some("adds sitecustomize.py"),
            ),
        ];
        for (cmd, changes, want) in cases {
            let got = refusals(cmd, changes);
            expect(cmd, &got, *want);
        }
    }

    /// Issue 35: `find ROOT -name PATTERN` feeding `-delete` or `rm` deletes only what lies
    /// beneath ROOT and the pattern names (with `rm -r`, what lies beneath a directory it names);
    /// an expression the pattern does not bound (an operator, another test, `-name '*'`, a
    /// bracket) names nothing, and nothing found is ever added or modified.
    #[test]
    fn find_deletes_only_what_its_one_pattern_names_beneath_its_root() {
        let pyc = "pkg/__pycache__/a.cpython-311.pyc";
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            (
                "find . -name __pycache__ -type d -prune -exec rm -rf {} +",
                &[("pkg/__pycache__", D, ""), (pyc, D, "")],
                None,
            ),
            ("find . -name '*.pyc' -delete", &[(pyc, D, "")], None),
            (
                "find pkg -name '*.pyc' -exec rm -f {} \\;",
                &[(pyc, D, "")],
                None,
            ),
            (
                "find . -name '*.pyc' -delete",
                &[("pkg/__pycache__", D, "")],
                Some("deletes pkg/__pycache__"),
            ),
            (
                "find . -name '*.pyc' -exec rm {} +",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find tests -name '*.pyc' -delete",
                &[(pyc, D, "")],
                Some("deletes pkg/__pycache__"),
            ),
            (
                "find . -name __pycache__ -exec rm -rf {} +",
                &[("pkg/__pycache__/new.py", A, F)],
                Some("adds pkg/__pycache__/new.py"),
            ),
            (
                "find . -name '*' -delete",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find . -name '*.pyc' -o -name '*.py' -delete",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find . ! -name '*.keep' -delete",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find . -name '[a-z]*' -delete",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find . -newer x -name '*.py' -delete",
                &[("src/app.py", D, "")],
                Some("deletes src/app.py"),
            ),
            (
                "find . -name hooks -exec rm -rf {} +",
                &[(".git/hooks/pre-commit", D, "")],
                Some("protected path .git/hooks/pre-commit"),
            ),
        ];
        for (cmd, changes, want) in cases {
            let got = refusals(cmd, changes);
            expect(cmd, &got, *want);
        }
    }

    /// Issue 35: pip run from a virtual environment of the workspace installs beneath it, and
    /// nowhere else; a directory that only holds a `bin/`, a `pyvenv.cfg` that is a symlink, a
    /// venv reached through a symlink, or an install that may reach the index name nothing.
    #[test]
    fn pip_installs_beneath_the_environment_it_runs_from_only() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        for dir in [".venv/bin", "fake/bin", "linked/bin", "real/bin"] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        std::fs::write(ws.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(ws.join("real/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::os::unix::fs::symlink(ws.join("real/pyvenv.cfg"), ws.join("linked/pyvenv.cfg"))
            .unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("via")).unwrap();
        let site = ".venv/lib/python3.11/site-packages/wheel/__init__.py";
        let cases: &[(&str, &[Ch], Option<&str>)] = &[
            (
                ".venv/bin/pip install --no-index --find-links vendor wheel",
                &[(site, A, F)],
                None,
            ),
            (
                ".venv/bin/pip install --no-index -e .",
                &[(site, A, F)],
                None,
            ),
            (
                ".venv/bin/python -m pip install --no-index -r r.txt",
                &[(site, A, F)],
                None,
            ),
            (".venv/bin/pip uninstall -y wheel", &[(site, D, "")], None),
            (
                ".venv/bin/pip install --no-index wheel",
                &[("src/app.py", M, F)],
                Some("modifies src/app.py"),
            ),
            (
                ".venv/bin/pip install wheel",
                &[(site, A, F)],
                Some("adds .venv/lib"),
            ),
            (
                "fake/bin/pip install --no-index x",
                &[("fake/lib/x.py", A, F)],
                Some("adds fake/lib/x.py"),
            ),
            (
                "linked/bin/pip install --no-index x",
                &[("linked/lib/x.py", A, F)],
                Some("adds linked/lib/x.py"),
            ),
            (
                "via/bin/pip install --no-index x",
                &[("via/lib/x.py", A, F)],
                Some("adds via/lib/x.py"),
            ),
            (
                "pip install --no-index x",
                &[(site, A, F)],
                Some("adds .venv/lib"),
            ),
        ];
        for (cmd, changes, want) in cases {
            let r = check(
                cmd,
                &Context {
                    workdir: Some(ws.clone()),
                },
            );
            let set = cs(changes);
            let t = Table::new(&PathLists::default()).unwrap();
            let j = judge(&t, &set, &ws, Some((&r, &ws)));
            let got = auto_apply_refusals(&r, &ws, &ws, &set, &j);
            expect(cmd, &got, *want);
        }
    }

    /// Issue 35: git rewriting its working tree covers the tracked files it rewrites, only for
    /// the tree forms, only when nothing else in the command runs workspace code; protected
    /// paths and git's own files beyond the companions still refuse. Long because the cases
    /// read as one table.
    #[test]
    fn git_tree_rewrites_are_covered_only_for_the_tree_forms() {
        use sha2::{Digest, Sha256};
        let head = |b: &str| {
            format!(
                "file:{}:644",
                hex::encode(Sha256::digest(format!("ref: refs/heads/{b}\n").as_bytes()))
            )
        };
        let feat = head("feat");
        let other = head("other");
        let switch: Vec<Ch> = vec![
            (".git/HEAD", M, feat.as_str()),
            (".git/index", M, F),
            (".git/logs/HEAD", M, F),
            ("a.txt", M, F),
            ("src/b.txt", A, F),
            ("old.txt", D, F),
        ];
        let cases: Vec<(&str, Vec<Ch>, Option<&str>)> = vec![
            ("git switch feat", switch.clone(), None),
            ("git checkout feat", switch.clone(), None),
            ("git -c user.name=a switch -q feat", switch.clone(), None),
            (
                "git switch feat",
                vec![(".git/HEAD", M, other.as_str()), ("a.txt", M, F)],
                Some("protected path .git/HEAD"),
            ),
            (
                "git switch feat",
                vec![(".git/index", M, F), (".git/hooks/post-checkout", A, F)],
                Some("protected path .git/hooks/post-checkout"),
            ),
            (
                "git switch feat",
                vec![(".git/index", M, F), (".envrc", A, F)],
                Some("protected path .envrc"),
            ),
            (
                "git switch feat",
                vec![(".git/index", M, F), (".git/refs/heads/other", A, F)],
                Some("protected path .git/refs/heads/other"),
            ),
            // a runner beside it could write anything
            (
                "git switch feat && make",
                switch.clone(),
                Some("adds src/b.txt"),
            ),
            (
                "git switch feat && tar -xf x.tar",
                switch.clone(),
                Some("adds src/b.txt"),
            ),
            (
                "git switch feat && git apply x.patch",
                switch.clone(),
                Some("adds src/b.txt"),
            ),
            (
                "git switch feat && echo x > notes.txt",
                switch.clone(),
                None,
            ),
            (
                "git switch --detach feat",
                vec![("a.txt", M, F)],
                Some("modifies a.txt"),
            ),
            (
                "git switch -c feat",
                vec![
                    (".git/HEAD", M, feat.as_str()),
                    (".git/logs/HEAD", M, F),
                    (".git/refs/heads/feat", A, F),
                    (".git/logs/refs/heads/feat", A, F),
                ],
                None,
            ),
            (
                "git stash -u",
                vec![
                    (".git/refs/stash", A, F),
                    (".git/logs/refs", A, "dir"),
                    (".git/logs/refs/stash", A, F),
                    (".git/ORIG_HEAD", A, F),
                    (".git/index", M, F),
                    (".git/objects/6e", A, "dir"),
                    (".git/objects/6e/11", A, F),
                    ("a.txt", M, F),
                    ("n.txt", D, F),
                ],
                None,
            ),
            (
                "git stash pop",
                vec![
                    (".git/refs/stash", D, F),
                    (".git/logs/refs/stash", D, F),
                    (".git/AUTO_MERGE", A, F),
                    (".git/index", M, F),
                    ("a.txt", M, F),
                ],
                None,
            ),
            (
                "git stash drop",
                vec![(".git/refs/stash", D, F), ("a.txt", M, F)],
                Some("modifies a.txt"),
            ),
            ("git tag v1", vec![(".git/refs/tags/v1", A, F)], None),
            (
                "git tag v1",
                vec![(".git/refs/tags/v1", A, F), ("a.txt", M, F)],
                Some("modifies a.txt"),
            ),
            (
                "git restore src",
                vec![(".git/index", M, F), ("src/a.rs", M, F)],
                None,
            ),
            (
                "git checkout -- a.txt",
                vec![(".git/index", M, F), ("a.txt", M, F)],
                None,
            ),
            (
                "git merge --no-edit feat",
                vec![
                    (".git/refs/heads/master", M, F),
                    (".git/logs/refs/heads/master", M, F),
                    (".git/logs/HEAD", M, F),
                    (".git/ORIG_HEAD", A, F),
                    (".git/index", M, F),
                    ("a.txt", M, F),
                    ("b.txt", A, F),
                ],
                None,
            ),
            (
                "git merge feat",
                vec![(".git/MERGE_HEAD", A, F), ("a.txt", M, F)],
                Some("protected path .git/MERGE_HEAD"),
            ),
            (
                "git branch -d feat",
                vec![
                    (".git/refs/heads/feat", D, F),
                    (".git/logs/refs/heads/feat", D, F),
                ],
                None,
            ),
            (
                "git branch -d feat",
                vec![(".git/refs/heads/master", D, F)],
                Some("protected path .git/refs/heads/master"),
            ),
        ];
        for (cmd, changes, want) in &cases {
            let got = refusals(cmd, changes);
            expect(cmd, &got, *want);
        }
    }

    #[test]
    fn paths_resolve_from_the_workdir() {
        let p = PathLists::default();
        let sub = |cmd: &str, path: &str| refusals_in(cmd, "sub", &[(path, A, F)], &p);
        assert!(sub("echo hi > n.txt", "sub/n.txt").is_empty());
        assert!(sub("echo hi > ../n.txt", "n.txt").is_empty());
        assert!(!sub("echo hi > n.txt", "n.txt").is_empty());
        assert!(
            !sub("echo hi > ../../n.txt", "n.txt").is_empty(),
            "outside names nothing"
        );
    }

    /// A static `cd` moves where the rest of the command's operands are (issue 35); a subshell,
    /// a pipeline stage or a substitution keeps its `cd` to itself; a computed `cd` names nothing.
    #[test]
    fn paths_resolve_after_a_static_cd_in_the_shells_scope() {
        let p = PathLists::default();
        let at = |cmd: &str, path: &str| refusals_in(cmd, "", &[(path, A, F)], &p).is_empty();
        let table: &[(&str, &str, bool)] = &[
            ("mkdir -p d && cd d && echo x > f", "d/f", true),
            ("cd d && echo x > f", "f", false),
            ("cd d; cd e && touch f", "d/e/f", true),
            ("cd d && cd .. && touch f", "f", true),
            ("cd d/ && touch ../g", "g", true),
            ("(cd d && touch f) && touch g", "g", true),
            ("(cd d && touch f) && touch g", "d/g", false),
            ("cd d | true; touch f", "f", true),
            ("echo $(cd d) > f", "f", true),
            ("cd \"$D\" && touch f", "f", false),
            ("cd \"$D\" && touch f", "d/f", false),
            ("cd - && touch f", "f", false),
            ("cd && touch f", "f", false),
            ("cd /tmp && touch f", "f", false),
            ("env -C d touch f", "d/f", true),
        ];
        for (cmd, path, named) in table {
            assert_eq!(at(cmd, path), *named, "{cmd}: {path}");
        }
    }

    #[test]
    fn protected_paths_always_ask() {
        for (cmd, path) in [
            (
                "echo evil > .git/hooks/post-checkout",
                ".git/hooks/post-checkout",
            ),
            ("echo x > .envrc", ".envrc"),
            ("echo x > vendor/lib/.git/config", "vendor/lib/.git/config"),
            (
                "sed -i 's/a/b/' .github/workflows/ci.yml",
                ".github/workflows/ci.yml",
            ),
            ("git add .gitattributes", ".gitattributes"),
        ] {
            let got = refusals(cmd, &[(path, M, F)]);
            assert_eq!(got.len(), 1, "{cmd}: {got:?}");
            assert!(
                got[0].starts_with(&format!(
                    "touches a protected path {path}: never applied without a human (rule "
                )),
                "{cmd}: {got:?}"
            );
        }
        // a companion never covers a protected path
        let got = refusals(
            "git add a.txt",
            &[(".git/index", M, F), (".git/hooks/pre-commit", A, F)],
        );
        assert!(
            got.iter()
                .any(|g| g.contains("protected path .git/hooks/pre-commit")),
            "{got:?}"
        );
    }

    #[test]
    fn operators_extend_the_table() {
        let p = PathLists {
            protected: vec!["deploy/**".to_string()],
            data: vec![],
        };
        let got = refusals_in("echo x > deploy/run.sh", "", &[("deploy/run.sh", A, F)], &p);
        assert!(got[0].contains("protected path deploy/run.sh"), "{got:?}");
        assert!(
            got[0].contains("rule deploy/**: the operator's protected_paths"),
            "{got:?}"
        );
        assert!(refusals("echo x > deploy/run.sh", &[("deploy/run.sh", A, F)]).is_empty());
    }
}
