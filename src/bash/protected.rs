//! What may make the operator's tools run code (issue 33): this module owns *which paths of a
//! change set are never applied without a human*, whatever was learned, promoted or a reviewer
//! said, and says for each which rule matched and why (the reason is in every prompt about the
//! change set). [`judge`] is the one decision; `effects` (automatic apply), `learn` (`approve
//! --learn`, a reviewer's approve), the overlay's prompt and the CLI all go through it.
//!
//! A path is protected, in this order (the first rule that matches is the one named):
//!
//! 1. a path a **workspace repository's config points at** (`core.hooksPath`, `include.path`,
//!    `includeIf.*.path`, `core.attributesFile`, `core.excludesFile`, `init.templateDir`, and the
//!    paths in values git runs as commands: `core.fsmonitor`, filters, aliases, ...;
//!    `bash::gitconfig`). The repositories read are those whose `.git` is at the workspace root,
//!    above the command's working directory or above a changed path; their config (`commondir`,
//!    `config.worktree`, includes, submodules' configs under `modules/`) is read beneath the
//!    workspace without following a symlink (`crate::fs::beneath`); a config that cannot be read
//!    protects the whole change set;
//! 2. **git's own files**: anything under a `.git` component (directory, `gitdir:` file or
//!    symlink, at any depth, any case) and anything in a **directory shaped like a git dir**
//!    (`HEAD` beside `objects`, `refs`, `commondir` or `config`, after the change set), except
//!    what git itself writes through a declared companion of one of the command's operations,
//!    in the repository the command runs in only (git's `companions`; never `objects/info/**`, refs
//!    only of the branch `HEAD` names), and what the plain forms of git's local bookkeeping
//!    write there (git's `local_companions`, issue 35: refs only of the names the command gives,
//!    `HEAD` only as a ref to a branch it names — checked on the change set's content hash —,
//!    a fresh `git init` git dir only byte for byte as git makes it);
//! 3. the operator's `protected_paths`, and **what the operator's tools run or obey** — every
//!    program's entry (`src/programs/*.toml`, `bash::run_on_use`): the paths it runs or
//!    obeys (`.npmrc`, `lefthook.toml`, `.venv/bin/**`), any directory holding an environment's
//!    marker once the change set is applied (`pyvenv.cfg`: its `*.pth`, `sitecustomize.py`,
//!    `bin/**`), the `package.json` of a package `node_modules/.bin` links to, and a manifest
//!    (`package.json`, `Cargo.toml`, `pyproject.toml`) whose change adds, changes or removes a
//!    key off its entry's inert list (`Change::run_keys`, judged when the change set was
//!    computed);
//! 4. by default any other dot-file or dot-directory — unless it is data (`permset::DATA` and
//!    the operator's `data_paths`: caches and build output, so ordinary builds and test runs
//!    need no human).

use crate::bash::changes::{Change, ChangeSet, Kind as ChangeKind};
use crate::bash::gitconfig::{self, Pointer};
use crate::bash::run_on_use::{self, globs, Knowledge};
use crate::bash::signatures;
use crate::classify::CheckReport;
use crate::fs::beneath::{Beneath, Kind as FileKind, Lookup};
use crate::permset::{PathLists, DATA};
use anyhow::Result;
use globset::GlobSet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// git's own files (rule 2 of the module doc), the first built-in rule.
pub const GIT_RULE: (&str, &str) = ("**/.git/**", "git reads its config, hooks, HEAD, refs, commondir and alternates from here: `git status` runs what they name");

/// The rule for dot-files not otherwise listed.
pub const DOTFILE_RULE: &str = "**/.*";
const DOTFILE_WHY: &str = "a dot-file or dot-directory: tools read these as configuration (protected by default; caches and build output go in `data_paths`)";

/// What this module knows of git, from git's program entry (`src/programs/git.toml`, its
/// `maps` and `lists`):
///
/// - `companions`: what git writes besides its arguments, per subcommand, relative to the git
///   dir of the repository the command runs in (observed with git 2.x; the tests pin them).
///   `{branch}`: the branch `HEAD` names before the command, and any branch a `switch` form of
///   the same command names. Never `objects/info/**` ([`NEVER_COMPANION`]).
/// - `local_companions`: git's local bookkeeping (issue 35), keyed by the form
///   `classify::git::local_form` gives (the plain spellings only). `{named}`: each branch or tag
///   name the command gives that form. `HEAD -> {named}`: `HEAD` only when its content after
///   the command is exactly `ref: refs/heads/NAME` for a name the command gives. Not
///   companions, on purpose: `config`, `packed-refs`, `MERGE_*`, other refs and their logs,
///   `hooks/**`, `info/**`, `objects/info/**`. `init` is judged apart (`init_dirs`,
///   `init_configs`, the operator's template files).
/// - `tree_forms`: the forms that rewrite tracked files of the working tree (`effects` decides
///   what that covers); `init_dirs` (`""`: the git dir itself), `init_configs` (the only
///   `config` a fresh `git init` may leave, byte for byte), `template_dirs` (git's default
///   templates: a fresh git dir's `description`, `info/exclude`, `hooks/*.sample` with the same
///   bytes are companions of `init`), `hooks` (the names git runs from a hooks directory),
///   `clone_dirs` and `clone_refs` (what `git clone` makes in the new git dir).
struct Git {
    companions: &'static BTreeMap<String, Vec<String>>,
    local_companions: &'static BTreeMap<String, Vec<String>>,
    tree_forms: &'static [String],
    init_dirs: &'static [String],
    init_configs: &'static [String],
    template_dirs: &'static [String],
    hooks: &'static [String],
    clone_dirs: &'static [String],
    clone_refs: &'static [String],
}

/// git's knowledge, or why the program table has none (then every change set that needs it
/// asks: no companion, and a repository's hooks directory at the root protects everything).
fn git() -> Result<&'static Git, &'static str> {
    static GIT: std::sync::OnceLock<Result<Git, String>> = std::sync::OnceLock::new();
    GIT.get_or_init(|| {
        let t = crate::programs::table().map_err(|e| format!("{e:#}"))?;
        let spec = t
            .programs
            .iter()
            .filter_map(|e| e.spec.as_ref())
            .find(|s| s.refine == Some(crate::programs::Refine::Git))
            .ok_or("the program table has no entry with `refine = \"git\"`")?;
        let map = |k: &str| {
            spec.maps
                .get(k)
                .ok_or_else(|| format!("git's entry has no `maps.{k}`"))
        };
        let list = |k: &str| {
            spec.lists
                .get(k)
                .map(Vec::as_slice)
                .ok_or_else(|| format!("git's entry has no `lists.{k}`"))
        };
        Ok(Git {
            companions: map("companions")?,
            local_companions: map("local_companions")?,
            tree_forms: list("tree_forms")?,
            init_dirs: list("init_dirs")?,
            init_configs: list("init_configs")?,
            template_dirs: list("template_dirs")?,
            hooks: list("hooks")?,
            clone_dirs: list("clone_dirs")?,
            clone_refs: list("clone_refs")?,
        })
    })
    .as_ref()
    .map_err(String::as_str)
}

impl Git {
    /// The form and its companions (`companions` or `local_companions`).
    fn form(&self, form: &str) -> Option<(&'static str, &'static [String])> {
        self.companions
            .get_key_value(form)
            .or_else(|| self.local_companions.get_key_value(form))
            .map(|(k, v)| (k.as_str(), v.as_slice()))
    }
}

/// One git operation of the command that writes through declared companions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitWrite {
    /// A form of git's `companions` or `local_companions`.
    pub form: &'static str,
    /// The names the command gives (`{named}`).
    pub names: Vec<String>,
    /// `init`, `clone`: the new git dir, workspace-relative.
    pub gitdir: Option<String>,
    /// `clone`: the source's absolute path, which git writes as `remote.origin.url`.
    pub source: Option<String>,
}

impl GitWrite {
    /// A form without names (the table tests).
    pub fn plain(form: &'static str) -> GitWrite {
        GitWrite {
            form,
            names: Vec::new(),
            gitdir: None,
            source: None,
        }
    }
}

/// The state `changes` gives a file with this content and mode.
fn file_hash(text: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text))
}

/// The content hash of a change's state after (`file:<sha256>:<mode>`), if a file.
fn after_hash(c: &Change) -> Option<&str> {
    c.after
        .as_deref()
        .and_then(|a| a.strip_prefix("file:"))
        .and_then(|r| r.split(':').next())
}
const NEVER_COMPANION: &str = "objects/info";

/// Bytes read of one config file; a larger one cannot be judged, so it protects everything.
const MAX_CONFIG: u64 = 1024 * 1024;
/// Config files read per judgement (includes and submodules).
const MAX_FILES: usize = 1024;
/// Entries under one repository's `modules/` looked at (beyond: everything is protected).
const MAX_MODULES: usize = 512;

/// The path tables, built once from the configuration ([`Table::shared`]).
#[derive(Clone)]
pub struct Table {
    /// The operator's `protected_paths`, then [`GIT_RULE`] and the rules of every program of
    /// The program entries' run-on-use rules: (pattern, why).
    rules: Vec<(String, String)>,
    set: GlobSet,
    idx: Vec<usize>,
    data: GlobSet,
    known: &'static Knowledge,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("rules", &self.rules).finish()
    }
}

impl Table {
    /// The built-in tables plus the operator's lists (globs relative to the workspace; start one
    /// with `**/` to match at any depth). Err: a pattern is not a glob.
    pub fn new(lists: &PathLists) -> Result<Table> {
        let mut rules: Vec<(String, String)> = lists
            .protected
            .iter()
            .map(|p| {
                (
                    p.trim_start_matches('/').to_string(),
                    "the operator's protected_paths".to_string(),
                )
            })
            .collect();
        let known = run_on_use::knowledge()?;
        rules.push((GIT_RULE.0.to_string(), GIT_RULE.1.to_string()));
        rules.extend(known.rules.iter().cloned());
        let (set, idx) = globs(rules.iter().map(|(p, _)| p.as_str()))?;
        let data_patterns: Vec<String> = DATA
            .iter()
            .map(|d| d.to_string())
            .chain(
                lists
                    .data
                    .iter()
                    .map(|d| d.trim_start_matches('/').to_string()),
            )
            .collect();
        let (data, _) = globs(data_patterns.iter().map(String::as_str))?;
        Ok(Table {
            rules,
            set,
            idx,
            data,
            known,
        })
    }

    /// The table for these lists, built once per distinct lists and then shared.
    pub fn shared(lists: &PathLists) -> Result<Arc<Table>> {
        static CACHE: Mutex<Option<(PathLists, Arc<Table>)>> = Mutex::new(None);
        let mut g = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, t)) = g.as_ref() {
            if k == lists {
                return Ok(t.clone());
            }
        }
        let t = Arc::new(Table::new(lists)?);
        *g = Some((lists.clone(), t.clone()));
        Ok(t)
    }

    /// (pattern, why) of every listed rule, the operator's first.
    pub fn rules(&self) -> &[(String, String)] {
        &self.rules
    }

    /// The listed or default rule a workspace-relative path matches, without the workspace's
    /// repositories (rule 3 and 4 of the module doc; `.git` components included).
    pub fn matching(&self, rel: &str) -> Option<(&str, &str)> {
        self.listed(rel).or_else(|| self.default_rule(rel))
    }

    /// The listed rule (the operator's, git's, a program's) `rel` matches.
    pub fn listed(&self, rel: &str) -> Option<(&str, &str)> {
        let i = self.set.matches(rel).first().copied()?;
        let (p, w) = &self.rules[self.idx[i]];
        Some((p, w))
    }

    /// The dot-file rule, unless `rel` is data (rule 4).
    pub fn default_rule(&self, rel: &str) -> Option<(&str, &str)> {
        if self.data.is_match(rel) {
            return None;
        }
        rel.split('/')
            .any(|c| c.starts_with('.') && c != "." && c != "..")
            .then_some((DOTFILE_RULE, DOTFILE_WHY))
    }

    /// What the program entries say programs run or obey.
    pub fn known(&self) -> &'static Knowledge {
        self.known
    }
}

/// One protected path of a change set: the rule that matched and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub path: String,
    pub rule: String,
    pub why: String,
}

impl Hit {
    /// The reason shown in every prompt about the change set.
    pub fn reason(&self) -> String {
        format!(
            "touches a protected path {}: never applied without a human (rule {}: {})",
            self.path, self.rule, self.why
        )
    }
}

/// What [`judge`] decided about a change set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    /// The protected paths, one each, in change-set order.
    pub hits: Vec<Hit>,
    /// Paths under the command's repository's git dir that git writes through a companion of
    /// the command's operations: neither protected nor unnamed.
    pub by_git: BTreeSet<String>,
    /// The top of the working tree (workspace-relative; `""`: the workspace) that a form of
    /// git's `tree_forms` rewrote from the repository's objects, when the repository runs no hook
    /// of its own; `effects` decides what that covers.
    pub git_tree: Option<String>,
}

impl Judgement {
    pub fn reasons(&self) -> Vec<String> {
        self.hits.iter().map(Hit::reason).collect()
    }
    pub fn is_protected(&self, path: &str) -> bool {
        self.hits.iter().any(|h| h.path == path)
    }
}

/// The repository a command runs in: its git dir (workspace-relative) and the branch its
/// `HEAD` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRepo {
    pub gitdir: String,
    pub branch: Option<String>,
    /// The branch `git switch -` goes back to: the last `checkout: moving from X to …` of
    /// `logs/HEAD`.
    pub previous: Option<String>,
    /// The repository runs hooks of its own: a file of `hooks/` not named `*.sample`, or a
    /// `core.hooksPath` in its config (a hook may write anything: no tree rewrite is covered).
    pub hooks: bool,
}

/// A path a repository's config points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointed {
    /// Workspace-relative.
    pub path: String,
    /// Everything beneath it too.
    pub dir: bool,
    pub why: String,
}

/// What the workspace says, read beneath it ([`gather`]); [`decide`] is pure over it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub repo: Option<RunRepo>,
    /// Directories shaped like a git dir once the change set is applied (workspace-relative).
    pub git_dirs: BTreeSet<String>,
    pub pointed: Vec<Pointed>,
    /// What could not be read: each protects the whole change set.
    pub unreadable: Vec<String>,
    /// SHA-256 of git's default template files (relative to the template dir), read only when
    /// the command runs `git init`.
    pub templates: HashMap<String, BTreeSet<String>>,
    /// A repository read sets `core.hooksPath` (its hooks may write anything).
    pub hooks_path: bool,
    /// Directories that hold an environment's marker once the change set is applied
    /// (`pyvenv.cfg`): directory → marker.
    pub environments: BTreeMap<String, String>,
    /// The `package.json` of each changed package of a `node_modules` that its `.bin` links to.
    pub linked: BTreeSet<String>,
}

/// The one decision: the protected paths of `cs` (a change set of `workspace`), each with its
/// rule and why, and the paths git writes through a companion of `command`'s operations (its
/// report and working directory; None: no companion).
pub fn judge(
    table: &Table,
    cs: &ChangeSet,
    workspace: &Path,
    command: Option<(&CheckReport, &Path)>,
) -> Judgement {
    let mut facts = gather(workspace, cs, command.map(|c| c.1));
    let writes = command
        .map(|(r, wd)| git_writes(r, wd, workspace))
        .unwrap_or_default();
    if writes.iter().any(|w| w.form == "init" || w.form == "clone") {
        facts.templates = template_hashes();
    }
    decide_git(table, cs, &facts, &writes)
}

/// Why a FILE_WRITE `auto` grant may not write one file outside an overlay unasked
/// (generate_file, a loop's commit or agent write; empty: it may): the judgement of a change set
/// of that one file — against `workspace` when `real` lies in it, else against the grant's
/// `root` —, its old content read beneath that root without following a symlink, a
/// manifest's keys judged against `new` (None: the content is not a file's, as a SQL block's
/// database — a manifest then asks). Blocking: reads the workspace.
pub fn write_refusals(
    lists: &PathLists,
    workspace: &Path,
    root: &Path,
    real: &Path,
    new: Option<&[u8]>,
) -> Vec<String> {
    let base = if real.starts_with(workspace) {
        workspace
    } else {
        root
    };
    let refused = |why: String| {
        vec![format!(
            "{}: {why}; never written without a human",
            real.display()
        )]
    };
    let Some(rel) = real
        .strip_prefix(base)
        .ok()
        .map(|r| r.to_string_lossy().into_owned())
        .filter(|r| !r.is_empty())
    else {
        return refused("not beneath the workspace or its grant's root".into());
    };
    let table = match Table::shared(lists) {
        Ok(t) => t,
        Err(e) => return refused(format!("the protected-path table is unusable: {e:#}")),
    };
    let b = match Beneath::open(base) {
        Ok(b) => b,
        Err(e) => return refused(format!("cannot open {}: {e:#}", base.display())),
    };
    let before = match b.entry(&rel) {
        Ok(e) => e.state(),
        Err(e) => return refused(format!("cannot read it: {e:#}")),
    };
    let after = new.map(|n| format!("file:{}:644", file_hash(n)));
    let run_keys = table.known().manifest_of(&rel).and_then(|(_, m)| {
        let new = new?;
        let old = match before.as_deref() {
            Some(s) if s.starts_with("file:") => Some(
                b.read_up_to(&rel, run_on_use::MAX_MANIFEST)
                    .ok()
                    .flatten()?,
            ),
            Some(_) => return None,
            None => None,
        };
        Some(run_on_use::offending_keys(m, old.as_deref(), Some(new)))
    });
    let cs = ChangeSet {
        changes: vec![Change {
            path: rel,
            kind: if before.is_some() {
                ChangeKind::Modified
            } else {
                ChangeKind::Added
            },
            before,
            after: after.or(Some("file".into())),
            diff: None,
            privilege_bits_removed: false,
            run_keys,
        }],
        hash: String::new(),
        diff_truncated: false,
    };
    judge(&table, &cs, base, None).reasons()
}

/// SHA-256 of each file of git's default template dirs (the operator's system files).
fn template_hashes() -> HashMap<String, BTreeSet<String>> {
    let mut out: HashMap<String, BTreeSet<String>> = HashMap::new();
    for dir in git().map_or(&[][..], |g| g.template_dirs) {
        for sub in ["", "hooks", "info"] {
            let d = Path::new(dir).join(sub);
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let Ok(m) = e.metadata() else { continue };
                if !m.is_file() || m.len() > MAX_CONFIG {
                    continue;
                }
                let Ok(bytes) = std::fs::read(e.path()) else {
                    continue;
                };
                let name = e.file_name().to_string_lossy().into_owned();
                let rel = if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                };
                out.entry(rel).or_default().insert(file_hash(&bytes));
            }
        }
    }
    out
}

/// The git operations of the command that write through declared companions: the
/// subcommands of git's `companions`, the forms of its `local_companions` with the names they give.
/// `git -C DIR`, `--git-dir`, `--work-tree` write another repository, and a `-c` key off the
/// safe table may move what git writes: no companion.
pub fn git_writes(report: &CheckReport, workdir: &Path, workspace: &Path) -> Vec<GitWrite> {
    report
        .operations
        .iter()
        .filter_map(|op| git_write(op, workdir, workspace))
        .collect()
}

/// [`git_writes`] of one operation.
pub fn git_write(
    op: &crate::classify::Operation,
    workdir: &Path,
    workspace: &Path,
) -> Option<GitWrite> {
    if op.program == "cargo" {
        return cargo_new_git(op, workdir, workspace);
    }
    if !crate::classify::git::is_git(&op.program)
        || signatures::of_operation(op, workdir, workspace).is_none()
    {
        return None;
    }
    // `-c` with a key that may point git elsewhere (git's `safe_config_keys`)
    if crate::classify::git::unsafe_config_key(&op.args).is_some()
        || op
            .args
            .iter()
            .any(|a| a == "-C" || a.starts_with("--git-dir") || a.starts_with("--work-tree"))
    {
        return None;
    }
    let here = signatures::op_dir(op, workdir)?;
    let workdir = here.as_path();
    let sub = signatures::walk_args(op, workdir, workspace).sub;
    let git = git().ok()?;
    if let Some((s, _)) = sub.as_deref().and_then(|s| git.companions.get_key_value(s)) {
        return Some(GitWrite::plain(s));
    }
    let l = crate::classify::git::local_form(&op.args)?;
    let gitdir = match &l.dir {
        Some(d) => {
            let abs = signatures::normalise(&workdir.join(d).join(".git"));
            Some(
                abs.strip_prefix(workspace)
                    .ok()?
                    .to_string_lossy()
                    .into_owned(),
            )
        }
        None => None,
    };
    let (mut names, mut source) = (l.names, None);
    if l.form == "clone" {
        let c = crate::classify::git::local_clone(&op.args[1..])?;
        let abs = signatures::normalise(&workdir.join(&c.source));
        if names.is_empty() {
            names.extend(source_branch(&abs, workspace));
        }
        source = Some(abs.to_string_lossy().into_owned());
    }
    Some(GitWrite {
        form: l.form,
        names,
        gitdir,
        source,
    })
}

/// The branch a repository of the workspace at `abs` (bare, or with a `.git` dir) has checked
/// out: what `git clone` of it checks out. Read beneath the workspace, no symlink followed.
fn source_branch(abs: &Path, workspace: &Path) -> Option<String> {
    let rel = abs
        .strip_prefix(workspace)
        .ok()?
        .to_string_lossy()
        .into_owned();
    let ws = Beneath::open(workspace).ok()?;
    ["HEAD", ".git/HEAD"].iter().find_map(|h| {
        let at = if rel.is_empty() {
            h.to_string()
        } else {
            format!("{rel}/{h}")
        };
        let text = ws.read_up_to(&at, 512).ok().flatten()?;
        let b = std::str::from_utf8(&text)
            .ok()?
            .strip_prefix("ref: refs/heads/")?
            .strip_suffix('\n')?;
        crate::classify::git::plain_ref_name(b).then(|| b.to_string())
    })
}

/// `cargo new PATH` makes a repository with libgit2, from git's templates, on branch master
/// (the sandbox's HOME has no `init.defaultBranch`): judged as a fresh `git init` of PATH.
fn cargo_new_git(
    op: &crate::classify::Operation,
    workdir: &Path,
    workspace: &Path,
) -> Option<GitWrite> {
    signatures::of_operation(op, workdir, workspace)?;
    let (dir, true) = signatures::cargo_new(op)? else {
        return None;
    };
    let here = signatures::op_dir(op, workdir)?;
    let abs = signatures::normalise(&here.join(&dir).join(".git"));
    Some(GitWrite {
        form: "init",
        names: vec!["master".into(), "main".into()],
        source: None,
        gitdir: Some(
            abs.strip_prefix(workspace)
                .ok()?
                .to_string_lossy()
                .into_owned(),
        ),
    })
}

fn under(path: &str, dir: &str) -> bool {
    dir.is_empty() || path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

fn has_git_component(path: &str) -> bool {
    path.split('/').any(|c| c.eq_ignore_ascii_case(".git"))
}

/// The names `{named}` stands for in one write (`-`: the previous branch).
fn resolved(repo: &RunRepo, w: &GitWrite) -> Vec<String> {
    w.names
        .iter()
        .filter_map(|n| match n.as_str() {
            "-" => repo.previous.clone(),
            _ => Some(n.clone()),
        })
        .collect()
}

/// The branches `{branch}` stands for: `HEAD`'s before the command, and those its `switch`
/// forms name.
fn branches(repo: &RunRepo, writes: &[GitWrite]) -> Vec<String> {
    let mut out: Vec<String> = repo.branch.iter().cloned().collect();
    for w in writes.iter().filter(|w| w.form.starts_with("switch")) {
        out.extend(resolved(repo, w));
    }
    out
}

/// Whether git writes the change `c` through one of `writes`' companions in `repo`.
fn companion(repo: &RunRepo, writes: &[GitWrite], c: &Change) -> bool {
    let path = c.path.as_str();
    let dir = c.after.as_deref() == Some("dir");
    let Some(q) = path
        .strip_prefix(repo.gitdir.as_str())
        .and_then(|r| r.strip_prefix('/'))
    else {
        return false;
    };
    if under(q, NEVER_COMPANION) {
        return false;
    }
    let branches = branches(repo, writes);
    let Ok(git) = git() else {
        return false;
    };
    for w in writes {
        let Some((_, globs)) = git.form(w.form) else {
            continue;
        };
        let named = resolved(repo, w);
        for g in globs.iter() {
            if let Some((p, target)) = g.split_once(" -> ") {
                // `HEAD -> {named}`: the path with exactly that content
                let want: Vec<String> = match target {
                    "{named}" => named.clone(),
                    _ => Vec::new(),
                };
                if q == p
                    && want.iter().any(|n| {
                        after_hash(c)
                            == Some(file_hash(format!("ref: refs/heads/{n}\n").as_bytes()).as_str())
                    })
                {
                    return true;
                }
                continue;
            }
            let expanded: Vec<String> = if g.contains("{branch}") {
                branches.iter().map(|b| g.replace("{branch}", b)).collect()
            } else if g.contains("{named}") {
                named.iter().map(|n| g.replace("{named}", n)).collect()
            } else {
                vec![g.to_string()]
            };
            let hit = expanded.iter().any(|g| match g.strip_suffix("/**") {
                Some(base) => under(q, base) || (dir && under(base, q)),
                None => q == g || (dir && under(g, q)),
            });
            if hit {
                return true;
            }
        }
    }
    false
}

/// Where `git clone` writes refs, reflogs and objects in the new git dir: data git reads as
/// hashes and names, never as configuration or a program (never `objects/info/**`).
fn clone_data(q: &str, dir: bool) -> bool {
    let beneath = |base: &str| q.strip_prefix(base).is_some_and(|r| !r.is_empty());
    let refs = git().map_or(&[][..], |g| g.clone_refs);
    if dir {
        return refs.iter().any(|b| beneath(b))
            || q.strip_prefix("objects/")
                .is_some_and(|o| o.len() == 2 && o.chars().all(|c| c.is_ascii_hexdigit()));
    }
    matches!(q, "packed-refs" | "index" | "logs/HEAD")
        || refs.iter().any(|b| beneath(b))
        || q.strip_prefix("objects/pack/pack-")
            .is_some_and(|f| f.ends_with(".pack") || f.ends_with(".idx") || f.ends_with(".rev"))
        || q.strip_prefix("objects/").is_some_and(|o| {
            o.len() == 41
                && o.as_bytes()[2] == b'/'
                && o.chars()
                    .filter(|c| *c != '/')
                    .all(|c| c.is_ascii_hexdigit())
        })
}

/// The `config` a clone of `source` on `branch` leaves: a fresh git dir's, the remote and the
/// branch's upstream (byte for byte as git 2.x writes them).
fn clone_configs(source: &str, branch: &str) -> Vec<String> {
    let inits = git().map_or(&[][..], |g| g.init_configs);
    inits[..inits.len().min(2)]
        .iter()
        .map(|init| {
            format!(
                "{init}[remote \"origin\"]\n\turl = {source}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"{branch}\"]\n\tremote = origin\n\tmerge = refs/heads/{branch}\n"
            )
        })
        .collect()
}

/// Whether `c` is a file or directory a fresh git dir of `writes` holds as git makes it: added,
/// in a git dir the change set adds (a `git init`'s or a local `git clone`'s); one of git's
/// `init_dirs`, `HEAD` naming the initial (or the source's) branch, `description` /
/// `info/exclude` / `hooks/*.sample` with the bytes of the operator's template; `config` of
/// git's `init_configs` for `init`, and for `clone` exactly that plus the remote and the branch's
/// upstream (the source's absolute path as URL) — with its refs, reflogs, index and objects as
/// data ([`clone_data`]).
fn fresh_repo_companion(facts: &Facts, cs: &ChangeSet, writes: &[GitWrite], c: &Change) -> bool {
    if c.kind != ChangeKind::Added {
        return false;
    }
    let dir = c.after.as_deref() == Some("dir");
    let Ok(git) = git() else {
        return false;
    };
    writes
        .iter()
        .filter(|w| w.form == "init" || w.form == "clone")
        .filter_map(|w| w.gitdir.as_deref().map(|g| (w, g)))
        .any(|(w, g)| {
            let fresh = cs.changes.iter().any(|x| {
                x.path == g && x.kind == ChangeKind::Added && x.after.as_deref() == Some("dir")
            });
            let q = if c.path == g {
                ""
            } else {
                match c.path.strip_prefix(g).and_then(|r| r.strip_prefix('/')) {
                    Some(q) => q,
                    None => return false,
                }
            };
            let clone = w.form == "clone";
            if !fresh {
                return false;
            }
            if dir {
                return git.init_dirs.iter().any(|d| d == q)
                    || (clone && (git.clone_dirs.iter().any(|d| d == q) || clone_data(q, true)));
            }
            let Some(h) = after_hash(c) else {
                return false;
            };
            match q {
                "HEAD" => w
                    .names
                    .iter()
                    .any(|n| h == file_hash(format!("ref: refs/heads/{n}\n").as_bytes())),
                "config" if clone => w.names.iter().any(|n| {
                    w.source.as_deref().is_some_and(|source| {
                        clone_configs(source, n)
                            .iter()
                            .any(|t| h == file_hash(t.as_bytes()))
                    })
                }),
                "config" => git
                    .init_configs
                    .iter()
                    .any(|t| h == file_hash(t.as_bytes())),
                "description" | "info/exclude" => {
                    facts.templates.get(q).is_some_and(|hs| hs.contains(h))
                }
                _ if q.starts_with("hooks/")
                    && q.ends_with(".sample")
                    && !q["hooks/".len()..].contains('/') =>
                {
                    facts.templates.get(q).is_some_and(|hs| hs.contains(h))
                }
                _ => clone && clone_data(q, false),
            }
        })
}

/// The judgement over gathered facts with plain companion subcommands (no names).
pub fn decide(table: &Table, cs: &ChangeSet, facts: &Facts, writes: &[&str]) -> Judgement {
    let writes: Vec<GitWrite> = writes
        .iter()
        .filter_map(|w| git().ok()?.form(w).map(|(s, _)| GitWrite::plain(s)))
        .collect();
    decide_git(table, cs, facts, &writes)
}

/// The judgement over gathered facts (pure; the table tests drive it directly).
pub fn decide_git(table: &Table, cs: &ChangeSet, facts: &Facts, writes: &[GitWrite]) -> Judgement {
    let mut j = Judgement::default();
    if let Some(r) = facts.repo.as_ref().filter(|r| !r.hooks) {
        let tree = git().map_or(&[][..], |g| g.tree_forms);
        if writes.iter().any(|w| tree.iter().any(|t| t == w.form)) {
            j.git_tree = Some(parent_of(&r.gitdir).to_string());
        }
    }
    for c in &cs.changes {
        let p = c.path.as_str();
        let hit = |rule: &str, why: &str| Hit {
            path: p.to_string(),
            rule: rule.to_string(),
            why: why.to_string(),
        };
        if let Some(u) = facts.unreadable.first() {
            j.hits.push(hit("repository configuration", u));
            continue;
        }
        if let Some(pt) = facts
            .pointed
            .iter()
            .find(|pt| p == pt.path || (pt.dir && under(p, &pt.path)))
        {
            j.hits
                .push(hit("pointed at by a repository's config", &pt.why));
            continue;
        }
        let git_dir = facts.git_dirs.iter().find(|d| under(p, d));
        if has_git_component(p) || git_dir.is_some() {
            if facts.repo.as_ref().is_some_and(|r| companion(r, writes, c))
                || fresh_repo_companion(facts, cs, writes, c)
            {
                j.by_git.insert(p.to_string());
                continue;
            }
            j.hits.push(match git_dir {
                Some(d) if !has_git_component(p) => hit(
                    &format!("a directory shaped like a git dir ({})", if d.is_empty() { "." } else { d }),
                    "git reads its config, hooks and objects when a command runs in or is pointed at it",
                ),
                _ => hit(GIT_RULE.0, GIT_RULE.1),
            });
            continue;
        }
        if let Some((rule, why)) = table.listed(p) {
            j.hits.push(hit(rule, why));
            continue;
        }
        if let Some((rule, why)) = run_on_use_rule(table.known(), facts, c) {
            j.hits.push(hit(&rule, &why));
            continue;
        }
        if let Some((rule, why)) = table.default_rule(p) {
            j.hits.push(hit(rule, why));
        }
    }
    j
}

/// A manifest's offending keys as the prompt names them: the first 20, each cut at 100
/// characters (the agent chose them: a manifest of a million keys makes no million-key prompt).
fn shown_keys(keys: &[String]) -> String {
    const KEYS: usize = 20;
    let mut out: Vec<String> = keys
        .iter()
        .take(KEYS)
        .map(|k| match k.char_indices().nth(100) {
            Some((i, _)) => format!("{}…", &k[..i]),
            None => k.clone(),
        })
        .collect();
    if keys.len() > KEYS {
        out.push(format!("and {} more", keys.len() - KEYS));
    }
    out.join(", ")
}

/// What the workspace as it will be makes run-on-use beyond the listed globs (rule 3): a path of
/// a directory holding an environment's marker, the manifest of a package `node_modules/.bin`
/// links to, a manifest key a human must see. (rule, why).
fn run_on_use_rule(known: &Knowledge, facts: &Facts, c: &Change) -> Option<(String, String)> {
    let p = c.path.as_str();
    for (d, marker) in &facts.environments {
        let rel = match p.strip_prefix(d.as_str()) {
            _ if d.is_empty() => p,
            Some(r) => match r.strip_prefix('/') {
                Some(r) => r,
                None => continue,
            },
            None => continue,
        };
        if let Some(why) = known.in_marked(marker, rel) {
            let at = if d.is_empty() { "." } else { d.as_str() };
            return Some((
                format!("an environment ({at} holds {marker})"),
                why.to_string(),
            ));
        }
    }
    if facts.linked.contains(p) {
        return Some((
            "a package `node_modules/.bin` links to".into(),
            "npm re-links its `bin` and runs its lifecycle `scripts` when the operator installs or rebuilds".into(),
        ));
    }
    let (program, m) = known.manifest_of(p)?;
    let glob = m.paths.first().map(String::as_str).unwrap_or(p);
    let rule = format!("{glob} ({program}, key by key)");
    match &c.run_keys {
        Some(keys) if keys.is_empty() => None,
        Some(keys) => Some((rule, format!("changes {} — {}", shown_keys(keys), m.why))),
        None => Some((
            rule,
            format!("its keys were not judged (the change set predates it, or the content is not at hand) — {}", m.why),
        )),
    }
}

/// Where a path git names lies: beneath the workspace (relative) or outside it (absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Loc {
    In(String),
    Out(PathBuf),
}

/// Reads the workspace beneath it (never following a symlink) and, for git dirs and includes
/// outside it, the operator's own files by path.
struct Reader<'a> {
    ws: Option<Beneath>,
    root: &'a Path,
    files: usize,
}

impl Reader<'_> {
    fn loc(&self, base: &Loc, p: &str) -> Loc {
        let abs = match base {
            _ if Path::new(p).is_absolute() => signatures::normalise(Path::new(p)),
            Loc::In(b) => signatures::normalise(&self.root.join(b).join(p)),
            Loc::Out(b) => signatures::normalise(&b.join(p)),
        };
        match abs.strip_prefix(self.root) {
            Ok(r) => Loc::In(r.to_string_lossy().into_owned()),
            Err(_) => Loc::Out(abs),
        }
    }

    fn join(l: &Loc, name: &str) -> Loc {
        match l {
            Loc::In(r) if r.is_empty() => Loc::In(name.to_string()),
            Loc::In(r) => Loc::In(format!("{r}/{name}")),
            Loc::Out(p) => Loc::Out(p.join(name)),
        }
    }

    fn show(l: &Loc) -> String {
        match l {
            Loc::In(r) => r.clone(),
            Loc::Out(p) => p.display().to_string(),
        }
    }

    fn lookup(&self, l: &Loc) -> Result<Lookup> {
        match l {
            Loc::In(r) => match &self.ws {
                Some(b) => b.lookup(r),
                None => Ok(Lookup::Absent),
            },
            Loc::Out(p) => {
                let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                    return Ok(Lookup::Absent);
                };
                match Beneath::open(dir) {
                    Ok(b) => b.lookup(&name.to_string_lossy()),
                    Err(_) => Ok(Lookup::Absent),
                }
            }
        }
    }

    /// The text of a regular file; None: absent. Err: there but not readable as a file (a
    /// symlink, too large, an I/O error) — what git would read there is unknown.
    fn read(&mut self, l: &Loc) -> Result<Option<String>> {
        match self.lookup(l)? {
            Lookup::Absent => return Ok(None),
            Lookup::Found(m) if m.kind == FileKind::File && m.size <= MAX_CONFIG => {}
            Lookup::Found(m) if m.kind == FileKind::Dir => return Ok(None),
            _ => anyhow::bail!(
                "{} is not a plain file of at most {MAX_CONFIG} bytes (a symlink is not followed)",
                Self::show(l)
            ),
        }
        self.files += 1;
        if self.files > MAX_FILES {
            anyhow::bail!("more than {MAX_FILES} repository config files");
        }
        let bytes = match l {
            Loc::In(r) => match &self.ws {
                Some(b) => b.read_up_to(r, MAX_CONFIG)?,
                None => None,
            },
            Loc::Out(p) => {
                let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                    return Ok(None);
                };
                Beneath::open(dir)?.read_up_to(&name.to_string_lossy(), MAX_CONFIG)?
            }
        };
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    fn list(&self, l: &Loc) -> Vec<String> {
        match l {
            Loc::In(r) => self.ws.as_ref().and_then(|b| b.list(r).ok()),
            Loc::Out(p) => Beneath::open(p).ok().and_then(|b| b.list("").ok()),
        }
        .unwrap_or_default()
    }
}

fn parent_of(p: &str) -> &str {
    p.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

/// Reads what [`decide`] needs of the workspace: the repository the command runs in (from
/// `workdir`), the directories shaped like a git dir, the paths the repositories' configs point
/// at. Long because it walks three kinds of fact over the same candidate directories.
pub fn gather(workspace: &Path, cs: &ChangeSet, workdir: Option<&Path>) -> Facts {
    let mut f = Facts::default();
    let ws = match Beneath::open(workspace) {
        Ok(b) => Some(b),
        Err(e) if workspace.exists() => {
            f.unreadable
                .push(format!("cannot open the workspace: {e:#}"));
            None
        }
        Err(_) => None,
    };
    let mut r = Reader {
        ws,
        root: workspace,
        files: 0,
    };
    let changes: HashMap<&str, bool> = cs
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.after.is_some()))
        .collect();
    // Candidate directories: the root, every directory above a changed path (and an added
    // directory itself), every directory above the working directory.
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    dirs.insert(String::new());
    let add_above = |p: &str, incl: bool, dirs: &mut BTreeSet<String>| {
        let mut cur = if incl { p } else { parent_of(p) };
        while !cur.is_empty() && dirs.insert(cur.to_string()) {
            cur = parent_of(cur);
        }
    };
    for c in &cs.changes {
        add_above(&c.path, c.after.as_deref() == Some("dir"), &mut dirs);
    }
    let wd_rel = workdir.and_then(|w| {
        signatures::normalise(w)
            .strip_prefix(workspace)
            .ok()
            .map(|r| r.to_string_lossy().into_owned())
    });
    if let Some(w) = &wd_rel {
        add_above(w, true, &mut dirs);
    }
    let present = |r: &Reader, rel: &str| match changes.get(rel) {
        Some(after) => *after,
        None => matches!(r.lookup(&Loc::In(rel.to_string())), Ok(Lookup::Found(_))),
    };
    let child = |d: &str, n: &str| {
        if d.is_empty() {
            n.to_string()
        } else {
            format!("{d}/{n}")
        }
    };
    for d in &dirs {
        if present(&r, &child(d, "HEAD"))
            && ["objects", "refs", "commondir", "config"]
                .iter()
                .any(|n| present(&r, &child(d, n)))
        {
            f.git_dirs.insert(d.clone());
        }
    }
    // Environments (`pyvenv.cfg`) and packages `.bin` links to, as the change set leaves them.
    if let Ok(k) = run_on_use::knowledge() {
        for d in &dirs {
            for m in k.markers() {
                if present(&r, &child(d, m)) {
                    f.environments.insert(d.clone(), m.to_string());
                }
            }
        }
        if k.linked_bins() {
            f.linked = linked_packages(r.ws.as_ref(), cs);
        }
    }
    // The repository the command runs in: the nearest `.git` directory above the workdir.
    if let Some(w) = &wd_rel {
        let mut cur = w.as_str();
        loop {
            let g = child(cur, ".git");
            match r.lookup(&Loc::In(g.clone())) {
                Ok(Lookup::Found(m)) if m.kind == FileKind::Dir => {
                    let head = r.read(&Loc::In(format!("{g}/HEAD"))).ok().flatten();
                    let branch = head.and_then(|h| {
                        h.trim()
                            .strip_prefix("ref: refs/heads/")
                            .filter(|b| {
                                !b.is_empty()
                                    && b.split('/').all(|c| !c.is_empty() && c != ".." && c != ".")
                            })
                            .map(str::to_string)
                    });
                    // `git switch -` goes back to the branch of the last checkout's "from"
                    let previous = r
                        .read(&Loc::In(format!("{g}/logs/HEAD")))
                        .ok()
                        .flatten()
                        .and_then(|log| {
                            log.lines().rev().find_map(|l| {
                                let (_, msg) = l.split_once('\t')?;
                                let rest = msg.strip_prefix("checkout: moving from ")?;
                                let (from, _) = rest.split_once(" to ")?;
                                crate::classify::git::plain_ref_name(from).then(|| from.to_string())
                            })
                        });
                    let hooks = r
                        .list(&Loc::In(format!("{g}/hooks")))
                        .iter()
                        .any(|n| !n.ends_with(".sample"));
                    f.repo = Some(RunRepo {
                        gitdir: g,
                        branch,
                        previous,
                        hooks,
                    });
                    break;
                }
                Ok(Lookup::Absent) if !cur.is_empty() => cur = parent_of(cur),
                _ => break,
            }
        }
    }
    // Every repository whose `.git` is in a candidate directory: what its config points at.
    for d in &dirs {
        let dot = Loc::In(child(d, ".git"));
        let gitdir = match r.lookup(&dot) {
            Ok(Lookup::Found(m)) if m.kind == FileKind::Dir => dot,
            Ok(Lookup::Found(m)) if m.kind == FileKind::File => match r.read(&dot) {
                Ok(Some(t)) => match t.lines().next().and_then(|l| l.strip_prefix("gitdir:")) {
                    Some(g) => r.loc(&Loc::In(d.clone()), g.trim()),
                    None => continue,
                },
                Ok(None) => continue,
                Err(e) => {
                    f.unreadable.push(format!("{e:#}"));
                    continue;
                }
            },
            Ok(Lookup::Found(m)) if m.kind == FileKind::Link => {
                match r.ws.as_ref().map(|b| b.entry(&child(d, ".git"))) {
                    Some(Ok(crate::fs::beneath::Entry::Link(t))) => r.loc(&Loc::In(d.clone()), &t),
                    _ => continue,
                }
            }
            _ => continue,
        };
        if let Err(e) = repository(&mut r, &mut f, &gitdir, Some(&Loc::In(d.clone())), 0) {
            f.unreadable.push(format!("{e:#}"));
        }
    }
    if f.hooks_path {
        if let Some(repo) = f.repo.as_mut() {
            repo.hooks = true;
        }
    }
    f
}

/// `P/node_modules` and the package (`x`, `@scope/x`) whose `package.json` `rel` is.
fn package_of(rel: &str) -> Option<(&str, &str)> {
    let dir = rel.strip_suffix("/package.json")?;
    let at = dir.rfind("node_modules/")?;
    let (nm, pkg) = (
        &dir[..at + "node_modules".len()],
        &dir[at + "node_modules/".len()..],
    );
    let plain = |n: &str| !n.is_empty() && !n.contains('/') && n != ".bin";
    let ok = match pkg.split_once('/') {
        Some((scope, name)) => scope.starts_with('@') && plain(name),
        None => plain(pkg),
    };
    ok.then_some((nm, pkg))
}

/// The `package.json` paths of `cs` whose package a `node_modules/.bin` symlink points into once
/// the change set is applied (the change set's links first, then the workspace's, read beneath
/// it): npm re-links what such a manifest's `bin` names and runs its lifecycle scripts.
fn linked_packages(ws: Option<&Beneath>, cs: &ChangeSet) -> BTreeSet<String> {
    let mut bins: HashMap<String, Vec<String>> = HashMap::new();
    let mut out = BTreeSet::new();
    for c in &cs.changes {
        let Some((nm, pkg)) = package_of(&c.path) else {
            continue;
        };
        let bin = format!("{nm}/.bin");
        let targets = bins.entry(bin.clone()).or_insert_with(|| {
            let mut t: Vec<String> = Vec::new();
            let prefix = format!("{bin}/");
            for x in &cs.changes {
                let name = x.path.strip_prefix(&prefix).filter(|n| !n.contains('/'));
                if let (Some(_), Some(l)) = (
                    name,
                    x.after.as_deref().and_then(|a| a.strip_prefix("link:")),
                ) {
                    t.push(l.to_string());
                }
            }
            let on_disk = ws
                .map(|b| b.list(&bin).unwrap_or_default())
                .unwrap_or_default();
            for name in on_disk {
                let at = format!("{prefix}{name}");
                if cs.changes.iter().any(|x| x.path == at) {
                    continue;
                }
                if let Some(Ok(crate::fs::beneath::Entry::Link(l))) = ws.map(|b| b.entry(&at)) {
                    t.push(l);
                }
            }
            t
        });
        let want = format!("../{pkg}/");
        if targets.iter().any(|t| t.starts_with(&want)) {
            out.insert(c.path.clone());
        }
    }
    out
}

/// What one repository's config (and its submodules') points at. `worktree`: the top of its
/// working tree when known (relative paths resolve there).
fn repository(
    r: &mut Reader,
    f: &mut Facts,
    gitdir: &Loc,
    worktree: Option<&Loc>,
    depth: usize,
) -> Result<()> {
    let common = match r.read(&Reader::join(gitdir, "commondir"))? {
        Some(c) => r.loc(gitdir, c.trim()),
        None => gitdir.clone(),
    };
    let mut files = vec![
        Reader::join(&common, "config"),
        Reader::join(gitdir, "config.worktree"),
    ];
    let mut entries: Vec<(Loc, gitconfig::Entry)> = Vec::new();
    let mut seen = BTreeSet::new();
    while let Some(file) = files.pop() {
        if !seen.insert(Reader::show(&file)) {
            continue;
        }
        let Some(text) = r.read(&file)? else {
            continue;
        };
        for e in gitconfig::parse(&text) {
            if gitconfig::pointer(&e) == Some(Pointer::Include) {
                if let Some(v) = e.value.as_deref().filter(|v| !v.starts_with('~')) {
                    let dir = match &file {
                        Loc::In(p) => Loc::In(parent_of(p).to_string()),
                        Loc::Out(p) => {
                            Loc::Out(p.parent().map(Path::to_path_buf).unwrap_or_default())
                        }
                    };
                    files.push(r.loc(&dir, v));
                }
            }
            if e.section == "core" && e.key == "hookspath" && e.subsection.is_none() {
                f.hooks_path = true;
            }
            entries.push((file.clone(), e));
        }
    }
    let worktree = entries
        .iter()
        .find(|(_, e)| e.section == "core" && e.key == "worktree" && e.subsection.is_none())
        .and_then(|(_, e)| e.value.as_deref())
        .map(|w| r.loc(gitdir, w))
        .or_else(|| worktree.cloned());
    for (file, e) in &entries {
        let (Some(kind), Some(v)) = (gitconfig::pointer(e), e.value.as_deref()) else {
            continue;
        };
        let why = |v: &str| {
            format!(
                "{} sets {} = {v}: {}",
                Reader::show(file),
                e.name(),
                kind.what()
            )
        };
        let base = match kind {
            Pointer::Include => match file {
                Loc::In(p) => Some(Loc::In(parent_of(p).to_string())),
                Loc::Out(p) => p.parent().map(|d| Loc::Out(d.to_path_buf())),
            },
            _ => worktree.clone(),
        };
        let values: Vec<String> = match kind {
            Pointer::Command => gitconfig::command_paths(v),
            _ if v.starts_with('~') || v.is_empty() => Vec::new(),
            _ => vec![v.to_string()],
        };
        for v in values {
            let target = match (&base, Path::new(&v).is_absolute()) {
                (_, true) => r.loc(&Loc::In(String::new()), &v),
                (Some(b), false) => r.loc(b, &v),
                // Relative to a working tree we do not know: the safe reading is unknown.
                (None, false) => continue,
            };
            let Loc::In(path) = target else { continue };
            let dir = matches!(kind, Pointer::Hooks | Pointer::Templates);
            if dir && path.is_empty() {
                // Hooks at the workspace root: only the hook names run.
                match git() {
                    Ok(g) => f.pointed.extend(g.hooks.iter().map(|h| Pointed {
                        path: h.clone(),
                        dir: false,
                        why: why(&v),
                    })),
                    Err(e) => f.unreadable.push(e.to_string()),
                }
            } else if !path.is_empty() {
                f.pointed.push(Pointed {
                    path,
                    dir,
                    why: why(&v),
                });
            }
        }
    }
    // Submodules: `modules/<name>` (nested: `modules/<a>/modules/<b>`), each a git dir whose
    // `core.worktree` says where its working tree is.
    if depth < 4 {
        let modules = Reader::join(&common, "modules");
        let mut stack = vec![modules];
        let mut n = 0;
        while let Some(m) = stack.pop() {
            for name in r.list(&m) {
                n += 1;
                if n > MAX_MODULES {
                    anyhow::bail!(
                        "more than {MAX_MODULES} submodule directories under {}",
                        Reader::show(gitdir)
                    );
                }
                let sub = Reader::join(&m, &name);
                if matches!(r.lookup(&Reader::join(&sub, "config"))?, Lookup::Found(_)) {
                    repository(r, f, &sub, None, depth + 1)?;
                } else if matches!(r.lookup(&sub)?, Lookup::Found(x) if x.kind == FileKind::Dir) {
                    stack.push(sub);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bash::changes::Kind;

    const F: &str = "file:00:644";

    fn cs(paths: &[(&str, Kind, &str)]) -> ChangeSet {
        crate::bash::changes::for_tests(paths, F)
    }

    fn table() -> Table {
        Table::new(&PathLists::default()).unwrap()
    }

    /// (path, the rule that protects it, or None) with no repository facts.
    #[test]
    fn the_table() {
        let t = table();
        let cases: &[(&str, Option<&str>)] = &[
            (".git/config", Some("**/.git/**")),
            (".git/HEAD", Some("**/.git/**")),
            (".git/commondir", Some("**/.git/**")),
            (".git/refs/heads/x", Some("**/.git/**")),
            (".git/objects/info/alternates", Some("**/.git/**")),
            ("sub/.git", Some("**/.git/**")),
            ("a/b/.git/hooks/pre-commit", Some("**/.git/**")),
            (".gitmodules", Some("**/.gitmodules")),
            (".husky/pre-commit", Some("**/.husky/**")),
            (".npmrc", Some("**/.npmrc")),
            ("pkg/.npmrc", Some("**/.npmrc")),
            (".yarnrc.yml", Some("**/.yarnrc.yml")),
            (".yarnrc", Some("**/.yarnrc")),
            ("rust-toolchain.toml", Some("**/rust-toolchain.toml")),
            ("rust-toolchain", Some("**/rust-toolchain")),
            (".cargo/config.toml", Some("**/.cargo/config.toml")),
            (".cargo/config", Some("**/.cargo/config")),
            (".mvn/jvm.config", Some("**/.mvn/jvm.config")),
            (".mvn/maven.config", Some("**/.mvn/maven.config")),
            (".sqliterc", Some("**/.sqliterc")),
            (".vimrc", Some("**/.vimrc")),
            (".exrc", Some("**/.exrc")),
            (".nvim.lua", Some("**/.nvim.lua")),
            (".nvimrc", Some("**/.nvimrc")),
            (".ssh/config", Some("**/.ssh/**")),
            (".config/git/config", Some("**/.config/**")),
            (".python-version", Some("**/.python-version")),
            ("pip.conf", Some("**/pip.conf")),
            (".pypirc", Some("**/.pypirc")),
            (".envrc", Some("**/.envrc")),
            (".github/workflows/ci.yml", Some("**/.github/workflows/**")),
            // the default rule for dot-files
            (".eslintrc.js", Some(DOTFILE_RULE)),
            (".github/CODEOWNERS", Some(DOTFILE_RULE)),
            ("src/.prettierrc.cjs", Some(DOTFILE_RULE)),
            (".editorconfig", Some(DOTFILE_RULE)),
            // data: caches and build output
            ("target/debug/.fingerprint/x/y", None),
            ("target/.rustc_info.json", None),
            (".pytest_cache/v/cache/lastfailed", None),
            ("node_modules/.package-lock.json", None),
            (".venv/lib/python3.12/site-packages/x/y.py", None),
            // what a tool runs on use is never data (issue 48)
            ("node_modules/.bin/x", Some("**/node_modules/.bin/**")),
            (".venv/bin/python", Some("**/.venv/bin/**")),
            (
                ".venv/lib/python3.12/site-packages/x.pth",
                Some("**/.venv/**/*.pth"),
            ),
            ("pkg/__pycache__/m.cpython-312.pyc", None),
            (".mypy_cache/3.12/x.json", None),
            (".ruff_cache/CACHEDIR.TAG", None),
            (".tox/py/log", None),
            (".gitignore", None),
            // data never lifts a listed rule
            ("node_modules/x/.npmrc", Some("**/.npmrc")),
            (".venv/pip.conf", Some("**/pip.conf")),
            ("target/.git/config", Some("**/.git/**")),
            // ordinary source
            ("Makefile", None),
            ("setup.cfg", None),
            ("src/main.rs", None),
            ("docs/bashrc.md", None),
            ("a.env", None),
            ("config", None),
        ];
        for (path, want) in cases {
            let j = decide(
                &t,
                &cs(&[(path, Kind::Modified, F)]),
                &Facts::default(),
                &[],
            );
            let got = j.hits.first().map(|h| h.rule.as_str());
            assert_eq!(got, *want, "{path}");
        }
    }

    #[test]
    fn operators_extend_both_lists() {
        let t = Table::new(&PathLists {
            protected: vec!["deploy/**".into(), "/**/Makefile".into()],
            data: vec!["**/.build-out/**".into()],
        })
        .unwrap();
        assert_eq!(t.matching("deploy/run.sh").map(|r| r.0), Some("deploy/**"));
        assert_eq!(t.matching("deploy").map(|r| r.0), Some("deploy/**"));
        assert!(t.matching("sub/deploy/run.sh").is_none(), "anchored");
        assert_eq!(t.matching("a/Makefile").map(|r| r.0), Some("**/Makefile"));
        assert!(t.matching(".build-out/x").is_none());
        assert!(t.matching(".git/config").is_some(), "defaults stay");
        // the operator's protected list wins over data
        let t = Table::new(&PathLists {
            protected: vec!["**/.venv/**".into()],
            data: vec![],
        })
        .unwrap();
        assert!(t.matching(".venv/bin/activate").is_some());
        assert!(Table::new(&PathLists {
            protected: vec!["a/[".into()],
            data: vec![]
        })
        .is_err());
        assert!(Table::new(&PathLists {
            protected: vec![],
            data: vec!["a/[".into()]
        })
        .is_err());
        let l = PathLists {
            protected: vec!["x/**".into()],
            data: vec![],
        };
        assert!(Arc::ptr_eq(
            &Table::shared(&l).unwrap(),
            &Table::shared(&l).unwrap()
        ));
    }

    /// (change, facts, companion subcommands, Some(rule) protected / None not / "git" by git).
    /// Long because the cases read as one table.
    #[test]
    fn git_rules_companions_and_facts() {
        use Kind::{Added as A, Modified as M};
        let t = table();
        let repo = Facts {
            repo: Some(RunRepo {
                gitdir: ".git".into(),
                branch: Some("main".into()),
                ..RunRepo::default()
            }),
            ..Facts::default()
        };
        let nested = Facts {
            repo: Some(RunRepo {
                gitdir: "sub/.git".into(),
                branch: Some("main".into()),
                ..RunRepo::default()
            }),
            ..Facts::default()
        };
        let shaped = Facts {
            git_dirs: ["evil".to_string()].into(),
            ..repo.clone()
        };
        let hooks = Facts {
            pointed: vec![Pointed {
                path: "tools/hooks".into(),
                dir: true,
                why: ".git/config sets core.hookspath = tools/hooks: git runs the hooks there"
                    .into(),
            }],
            ..repo.clone()
        };
        let unreadable = Facts {
            unreadable: vec![".git/config is not a plain file".into()],
            ..Facts::default()
        };
        type Case<'a> = (
            &'a str,
            Kind,
            &'a str,
            &'a Facts,
            &'a [&'a str],
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (".git/index", M, F, &repo, &["add"], Some("git")),
            (".git/objects/ab", A, "dir", &repo, &["add"], Some("git")),
            (".git/objects/ab/cd", A, F, &repo, &["add"], Some("git")),
            (
                ".git/objects/info/alternates",
                A,
                F,
                &repo,
                &["add"],
                Some("**/.git/**"),
            ),
            (
                ".git/objects/info",
                A,
                "dir",
                &repo,
                &["commit"],
                Some("**/.git/**"),
            ),
            (
                ".git/refs/heads/main",
                M,
                F,
                &repo,
                &["commit"],
                Some("git"),
            ),
            (
                ".git/refs/heads/x",
                A,
                F,
                &repo,
                &["commit"],
                Some("**/.git/**"),
            ),
            (
                ".git/refs/heads/main",
                M,
                F,
                &repo,
                &["add"],
                Some("**/.git/**"),
            ),
            (".git/logs", A, "dir", &repo, &["commit"], Some("git")),
            (
                ".git/logs/refs/heads/main",
                A,
                F,
                &repo,
                &["commit"],
                Some("git"),
            ),
            (
                ".git/logs/refs/heads/x",
                A,
                F,
                &repo,
                &["commit"],
                Some("**/.git/**"),
            ),
            (".git/HEAD", M, F, &repo, &["commit"], Some("**/.git/**")),
            (".git/COMMIT_EDITMSG", A, F, &repo, &["commit"], Some("git")),
            (".git/config", M, F, &repo, &["commit"], Some("**/.git/**")),
            (".git/commondir", A, F, &repo, &["add"], Some("**/.git/**")),
            (
                ".git/hooks/pre-commit",
                A,
                F,
                &repo,
                &["commit"],
                Some("**/.git/**"),
            ),
            (".git/index", M, F, &repo, &[], Some("**/.git/**")),
            // another repository's git dir: never a companion
            ("sub/.git/index", M, F, &repo, &["add"], Some("**/.git/**")),
            (
                "sub/.git/refs/heads/main",
                M,
                F,
                &repo,
                &["commit"],
                Some("**/.git/**"),
            ),
            ("sub/.git/index", M, F, &nested, &["add"], Some("git")),
            (".git/index", M, F, &nested, &["add"], Some("**/.git/**")),
            ("sub/.GIT/config", M, F, &repo, &[], Some("**/.git/**")),
            // a directory shaped like a git dir
            (
                "evil/config",
                A,
                F,
                &shaped,
                &["add"],
                Some("a directory shaped like a git dir (evil)"),
            ),
            (
                "evil/objects/x",
                A,
                F,
                &shaped,
                &[],
                Some("a directory shaped like a git dir (evil)"),
            ),
            ("evil2/config", A, F, &shaped, &[], None),
            // pointed at by the repository's config
            (
                "tools/hooks/pre-commit",
                M,
                F,
                &hooks,
                &["commit"],
                Some("pointed at by a repository's config"),
            ),
            (
                "tools/hooks",
                A,
                "dir",
                &hooks,
                &[],
                Some("pointed at by a repository's config"),
            ),
            ("tools/hooksx", A, F, &hooks, &[], None),
            (
                "src/a.rs",
                M,
                F,
                &unreadable,
                &[],
                Some("repository configuration"),
            ),
        ];
        for (path, kind, after, facts, writes, want) in cases {
            let j = decide(&t, &cs(&[(path, *kind, after)]), facts, writes);
            let got = if j.by_git.contains(*path) {
                Some("git")
            } else {
                j.hits.first().map(|h| h.rule.as_str())
            };
            assert_eq!(got, *want, "{path} with {writes:?}");
        }
        let j = decide(&t, &cs(&[("tools/hooks/x", M, F)]), &hooks, &[]);
        assert_eq!(
            j.reasons(),
            vec!["touches a protected path tools/hooks/x: never applied without a human (rule pointed at by a repository's config: .git/config sets core.hookspath = tools/hooks: git runs the hooks there)"]
        );
    }

    /// Issue 35: the companions of git's local bookkeeping, each limited to what the command
    /// names. (path, kind, state after, the writes, Some("git") by git / Some(rule) protected).
    /// Long because the cases read as one table.
    #[test]
    fn local_bookkeeping_companions_cover_only_what_the_command_names() {
        use Kind::{Added as A, Deleted as D, Modified as M};
        let t = table();
        let st = |text: &str| format!("file:{}:644", file_hash(text.as_bytes()));
        let head = |b: &str| st(&format!("ref: refs/heads/{b}\n"));
        let repo = Facts {
            repo: Some(RunRepo {
                gitdir: ".git".into(),
                branch: Some("main".into()),
                previous: Some("dev".into()),
                hooks: false,
            }),
            templates: [
                (
                    "hooks/pre-commit.sample".to_string(),
                    [file_hash(b"#!/bin/sh\n# sample\n")].into(),
                ),
                (
                    "info/exclude".to_string(),
                    [file_hash(b"# exclude\n")].into(),
                ),
            ]
            .into(),
            ..Facts::default()
        };
        let w = |form: &'static str, names: &[&str]| GitWrite {
            form,
            names: names.iter().map(|n| n.to_string()).collect(),
            gitdir: None,
            source: None,
        };
        let init = |gitdir: &str, b: &str| GitWrite {
            form: "init",
            names: vec![b.to_string()],
            gitdir: Some(gitdir.to_string()),
            source: None,
        };
        let p = "**/.git/**";
        let cases: Vec<(&str, Kind, String, Vec<GitWrite>, &str)> = vec![
            // git switch NAME: HEAD only as a ref to that name
            (
                ".git/HEAD",
                M,
                head("feat"),
                vec![w("switch", &["feat"])],
                "git",
            ),
            (
                ".git/HEAD",
                M,
                head("other"),
                vec![w("switch", &["feat"])],
                p,
            ),
            (
                ".git/HEAD",
                M,
                st("0123456789abcdef0123456789abcdef01234567\n"),
                vec![w("switch", &["feat"])],
                p,
            ),
            (
                ".git/HEAD",
                M,
                st("ref: refs/heads/feat"),
                vec![w("switch", &["feat"])],
                p,
            ),
            (".git/HEAD", M, head("feat"), vec![w("add", &[])], p),
            (
                ".git/HEAD",
                M,
                head("feat"),
                vec![w("switch -c", &["feat"]), w("stash", &[])],
                "git",
            ),
            (
                ".git/index",
                M,
                F.into(),
                vec![w("switch", &["feat"])],
                "git",
            ),
            (
                ".git/logs/HEAD",
                M,
                F.into(),
                vec![w("switch", &["feat"])],
                "git",
            ),
            (
                ".git/refs/heads/feat",
                M,
                F.into(),
                vec![w("switch", &["feat"])],
                p,
            ),
            (".git/config", M, F.into(), vec![w("switch", &["feat"])], p),
            (
                ".git/hooks/post-checkout",
                A,
                F.into(),
                vec![w("switch", &["feat"])],
                p,
            ),
            (
                ".git/packed-refs",
                M,
                F.into(),
                vec![w("switch", &["feat"])],
                p,
            ),
            // git switch -: the branch logs/HEAD says was checked out before
            (
                ".git/HEAD",
                M,
                head("dev"),
                vec![w("switch", &["-"])],
                "git",
            ),
            (".git/HEAD", M, head("main"), vec![w("switch", &["-"])], p),
            // git switch -c NAME / checkout -b NAME: that branch's ref and log
            (
                ".git/refs/heads/feat",
                A,
                F.into(),
                vec![w("switch -c", &["feat"])],
                "git",
            ),
            (
                ".git/logs/refs/heads/feat",
                A,
                F.into(),
                vec![w("switch -c", &["feat"])],
                "git",
            ),
            (
                ".git/refs/heads/feat",
                A,
                "dir".into(),
                vec![w("switch -c", &["feat/x"])],
                "git",
            ),
            (
                ".git/refs/heads/feat/x",
                A,
                F.into(),
                vec![w("switch -c", &["feat/x"])],
                "git",
            ),
            (
                ".git/refs/heads/other",
                A,
                F.into(),
                vec![w("switch -c", &["feat"])],
                p,
            ),
            (
                ".git/refs/heads/main",
                M,
                F.into(),
                vec![w("switch -c", &["feat"])],
                p,
            ),
            (
                ".git/refs/tags/feat",
                A,
                F.into(),
                vec![w("switch -c", &["feat"])],
                p,
            ),
            // a commit after a switch writes the switched-to branch
            (
                ".git/refs/heads/feat",
                M,
                F.into(),
                vec![w("switch", &["feat"]), w("commit", &[])],
                "git",
            ),
            (
                ".git/refs/heads/feat",
                M,
                F.into(),
                vec![w("commit", &[])],
                p,
            ),
            // git branch NAME / -d NAME
            (
                ".git/refs/heads/feat",
                A,
                F.into(),
                vec![w("branch", &["feat"])],
                "git",
            ),
            (
                ".git/HEAD",
                M,
                head("feat"),
                vec![w("branch", &["feat"])],
                p,
            ),
            (
                ".git/refs/heads/feat",
                D,
                F.into(),
                vec![w("branch -d", &["feat"])],
                "git",
            ),
            (
                ".git/logs/refs/heads/feat",
                D,
                F.into(),
                vec![w("branch -d", &["feat"])],
                "git",
            ),
            (
                ".git/refs/heads/main",
                D,
                F.into(),
                vec![w("branch -d", &["feat"])],
                p,
            ),
            (
                ".git/config",
                M,
                F.into(),
                vec![w("branch -d", &["feat"])],
                p,
            ),
            // git tag NAME
            (
                ".git/refs/tags/v1",
                A,
                F.into(),
                vec![w("tag", &["v1"])],
                "git",
            ),
            (
                ".git/objects/9f/ab",
                A,
                F.into(),
                vec![w("tag", &["v1"])],
                "git",
            ),
            (".git/refs/tags/v2", A, F.into(), vec![w("tag", &["v1"])], p),
            (
                ".git/refs/heads/v1",
                A,
                F.into(),
                vec![w("tag", &["v1"])],
                p,
            ),
            (
                ".git/refs/tags/v1",
                D,
                F.into(),
                vec![w("tag -d", &["v1"])],
                "git",
            ),
            // git stash / pop / drop
            (".git/refs/stash", A, F.into(), vec![w("stash", &[])], "git"),
            (
                ".git/logs/refs/stash",
                A,
                F.into(),
                vec![w("stash", &[])],
                "git",
            ),
            (".git/ORIG_HEAD", A, F.into(), vec![w("stash", &[])], "git"),
            (
                ".git/objects/6e",
                A,
                "dir".into(),
                vec![w("stash", &[])],
                "git",
            ),
            (
                ".git/refs/heads/main",
                M,
                F.into(),
                vec![w("stash", &[])],
                p,
            ),
            (".git/HEAD", M, head("main"), vec![w("stash", &[])], p),
            (
                ".git/AUTO_MERGE",
                A,
                F.into(),
                vec![w("stash pop", &[])],
                "git",
            ),
            (
                ".git/refs/stash",
                D,
                F.into(),
                vec![w("stash pop", &[])],
                "git",
            ),
            (
                ".git/refs/stash",
                D,
                F.into(),
                vec![w("stash drop", &[])],
                "git",
            ),
            // a commit removes the AUTO_MERGE a stash or merge left
            (
                ".git/AUTO_MERGE",
                D,
                F.into(),
                vec![w("commit", &[])],
                "git",
            ),
            (".git/ORIG_HEAD", D, F.into(), vec![w("commit", &[])], p),
            (".git/index", M, F.into(), vec![w("stash drop", &[])], p),
            // git restore / checkout -- FILE: the index
            (".git/index", M, F.into(), vec![w("restore", &[])], "git"),
            (
                ".git/objects/ab/cd",
                A,
                F.into(),
                vec![w("restore", &[])],
                p,
            ),
            // git merge NAME: the current branch, ORIG_HEAD; never MERGE_HEAD or NAME's ref
            (
                ".git/refs/heads/main",
                M,
                F.into(),
                vec![w("merge", &["feat"])],
                "git",
            ),
            (
                ".git/ORIG_HEAD",
                A,
                F.into(),
                vec![w("merge", &["feat"])],
                "git",
            ),
            (
                ".git/refs/heads/feat",
                M,
                F.into(),
                vec![w("merge", &["feat"])],
                p,
            ),
            (
                ".git/MERGE_HEAD",
                A,
                F.into(),
                vec![w("merge", &["feat"])],
                p,
            ),
            (
                ".git/MERGE_MSG",
                A,
                F.into(),
                vec![w("merge", &["feat"])],
                p,
            ),
            (
                ".git/objects/info/commit-graph",
                A,
                F.into(),
                vec![w("merge", &["feat"])],
                p,
            ),
            // git init: a fresh git dir as git makes it, nothing else
            (
                "new/.git",
                A,
                "dir".into(),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/objects/info",
                A,
                "dir".into(),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/refs/heads",
                A,
                "dir".into(),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/HEAD",
                A,
                head("main"),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/HEAD",
                A,
                head("evil"),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/config",
                A,
                st(&git().unwrap().init_configs[0]),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/config",
                A,
                st(&format!(
                    "{}[core]\n\tfsmonitor = x\n",
                    git().unwrap().init_configs[0]
                )),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/hooks/pre-commit.sample",
                A,
                st("#!/bin/sh\n# sample\n"),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/hooks/pre-commit.sample",
                A,
                st("#!/bin/sh\ntouch /tmp/x\n"),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/hooks/pre-commit",
                A,
                st("#!/bin/sh\n# sample\n"),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/info/exclude",
                A,
                st("# exclude\n"),
                vec![init("new/.git", "main")],
                "git",
            ),
            (
                "new/.git/info/attributes",
                A,
                st("# exclude\n"),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/objects/info/alternates",
                A,
                F.into(),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/refs/heads/main",
                A,
                F.into(),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "new/.git/commondir",
                A,
                F.into(),
                vec![init("new/.git", "main")],
                p,
            ),
            (
                "other/.git/HEAD",
                A,
                head("main"),
                vec![init("new/.git", "main")],
                p,
            ),
        ];
        for (path, kind, after, writes, want) in &cases {
            let mut set = crate::bash::changes::for_tests(&[(path, *kind, after.as_str())], F);
            // init: the git dir itself is added by the same change set (a fresh one)
            if path.starts_with("new/.git/") {
                set.changes
                    .extend(crate::bash::changes::for_tests(&[("new/.git", A, "dir")], F).changes);
            }
            let j = decide_git(&t, &set, &repo, writes);
            let got = if j.by_git.contains(*path) {
                "git"
            } else {
                j.hits.first().map(|h| h.rule.as_str()).unwrap_or("none")
            };
            let forms: Vec<&str> = writes.iter().map(|w| w.form).collect();
            assert_eq!(got, *want, "{path} ({kind:?}, {after}) with {forms:?}");
        }
        // an init in a git dir that already existed (no added git dir): nothing is covered
        let set = cs(&[("new/.git/HEAD", A, &head("main"))]);
        let j = decide_git(&t, &set, &repo, &[init("new/.git", "main")]);
        assert!(j.by_git.is_empty(), "{j:?}");
        // the working tree git rewrote: only for the tree forms, only without hooks
        let j = decide_git(
            &t,
            &cs(&[("a.txt", M, F)]),
            &repo,
            &[w("switch", &["feat"])],
        );
        assert_eq!(j.git_tree.as_deref(), Some(""));
        let j = decide_git(&t, &cs(&[("a.txt", M, F)]), &repo, &[w("tag", &["v1"])]);
        assert_eq!(j.git_tree, None);
        let hooked = Facts {
            repo: Some(RunRepo {
                hooks: true,
                ..repo.repo.clone().unwrap()
            }),
            ..Facts::default()
        };
        let j = decide_git(&t, &cs(&[("a.txt", M, F)]), &hooked, &[w("stash pop", &[])]);
        assert_eq!(j.git_tree, None);
    }

    /// Issue 35: `git clone` of a workspace path — its new git dir only as git makes it: the
    /// source's branch in `HEAD`, the remote and upstream in `config` byte for byte, refs,
    /// reflogs, the index and objects as data; hooks, other config, `objects/info` ask.
    #[test]
    fn a_local_clone_makes_its_git_dir_only_as_git_does() {
        use Kind::Added as A;
        let t = table();
        let st = |text: &str| format!("file:{}:644", file_hash(text.as_bytes()));
        let clone = GitWrite {
            form: "clone",
            names: vec!["main".into()],
            gitdir: Some("kv/.git".into()),
            source: Some("/ws/remotes/kv.git".into()),
        };
        let config = |url: &str, b: &str| {
            st(&format!(
                "{}[remote \"origin\"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"{b}\"]\n\tremote = origin\n\tmerge = refs/heads/{b}\n",
                git().unwrap().init_configs[0]
            ))
        };
        let p = "**/.git/**";
        let cases: Vec<(&str, String, &str)> = vec![
            ("kv/.git", "dir".into(), "git"),
            ("kv/.git/HEAD", st("ref: refs/heads/main\n"), "git"),
            ("kv/.git/HEAD", st("ref: refs/heads/other\n"), p),
            (
                "kv/.git/config",
                config("/ws/remotes/kv.git", "main"),
                "git",
            ),
            ("kv/.git/config", config("/elsewhere.git", "main"), p),
            ("kv/.git/config", config("/ws/remotes/kv.git", "other"), p),
            (
                "kv/.git/config",
                st(&format!(
                    "{}[core]\n\tfsmonitor = ./x\n",
                    git().unwrap().init_configs[0]
                )),
                p,
            ),
            (
                "kv/.git/packed-refs",
                st("x refs/remotes/origin/main\n"),
                "git",
            ),
            ("kv/.git/index", F.into(), "git"),
            ("kv/.git/logs/HEAD", F.into(), "git"),
            ("kv/.git/logs/refs/heads/main", F.into(), "git"),
            ("kv/.git/refs/remotes/origin/HEAD", F.into(), "git"),
            ("kv/.git/refs/heads/feat", "dir".into(), "git"),
            ("kv/.git/objects/15", "dir".into(), "git"),
            (
                "kv/.git/objects/15/fa102863b404fdd5f0f25782c673e55be449bc",
                F.into(),
                "git",
            ),
            ("kv/.git/objects/pack/pack-1a2b.pack", F.into(), "git"),
            ("kv/.git/objects/info/alternates", F.into(), p),
            ("kv/.git/objects/zz/evil", F.into(), p),
            ("kv/.git/hooks/pre-commit", F.into(), p),
            ("kv/.git/hooks/pre-commit.sample", F.into(), p),
            ("kv/.git/info/attributes", F.into(), p),
            ("kv/.git/refs/remotes/evil/x", F.into(), p),
            ("kv/.git/commondir", F.into(), p),
        ];
        for (path, after, want) in &cases {
            let mut set = crate::bash::changes::for_tests(&[(path, A, after.as_str())], F);
            set.changes
                .extend(crate::bash::changes::for_tests(&[("kv/.git", A, "dir")], F).changes);
            let j = decide_git(&t, &set, &Facts::default(), std::slice::from_ref(&clone));
            let got = if j.by_git.contains(*path) {
                "git"
            } else {
                j.hits.first().map(|h| h.rule.as_str()).unwrap_or("none")
            };
            assert_eq!(got, *want, "{path} ({after})");
        }
        // into a git dir that was there before: nothing is covered
        let set = cs(&[("kv/.git/HEAD", A, &st("ref: refs/heads/main\n"))]);
        let j = decide_git(&t, &set, &Facts::default(), &[clone]);
        assert!(j.by_git.is_empty(), "{j:?}");
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// `gather` on real files: configs, includes, commondir, `gitdir:` files, submodules, git
    /// dir shapes, the command's repository.
    #[test]
    fn gathers_what_the_workspace_says() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        let outside = d.path().join("outside");
        write(&ws, ".git/HEAD", "ref: refs/heads/feat/x\n");
        write(
            &ws,
            ".git/logs/HEAD",
            "0 1 A <a@b> 1 +0000\tcommit: x\n1 2 A <a@b> 2 +0000\tcheckout: moving from dev to main\n2 3 A <a@b> 3 +0000\tcheckout: moving from main to feat/x\n3 4 A <a@b> 3 +0000\tcommit: y\n",
        );
        write(&ws, ".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        write(
            &ws,
            ".git/config",
            "[core]\n\thooksPath = tools/hooks\n\tfsmonitor = \"sh scripts/fsmon.sh\"\n[include]\n\tpath = ../team.gitconfig\n[filter \"x\"]\n\tsmudge = bin/smudge\n[alias]\n\tst = status\n",
        );
        write(
            &ws,
            "team.gitconfig",
            "[core]\n\tattributesFile = conf/attrs\n",
        );
        // a nested repository by `gitdir:` file, its git dir outside the workspace
        write(
            &ws,
            "vendor/lib/.git",
            &format!("gitdir: {}\n", outside.join("lib.git").display()),
        );
        write(&outside, "lib.git/HEAD", "ref: refs/heads/main\n");
        write(&outside, "lib.git/config", "[core]\n\thooksPath = .hooks\n");
        // a submodule's config under modules/
        write(
            &ws,
            ".git/modules/m/config",
            "[core]\n\tworktree = ../../../m\n\thooksPath = githooks\n",
        );
        // an agent-made git dir in the change set
        let set = cs(&[
            ("evil", Kind::Added, "dir"),
            ("evil/HEAD", Kind::Added, F),
            ("evil/config", Kind::Added, F),
            ("src/a.rs", Kind::Modified, F),
            ("vendor/lib/x.c", Kind::Modified, F),
        ]);
        let f = gather(&ws, &set, Some(&ws.join("src")));
        assert!(f.unreadable.is_empty(), "{:?}", f.unreadable);
        assert_eq!(
            f.repo,
            Some(RunRepo {
                gitdir: ".git".into(),
                branch: Some("feat/x".into()),
                previous: Some("main".into()),
                // the config sets core.hooksPath
                hooks: true,
            })
        );
        assert!(f.git_dirs.contains("evil"), "{:?}", f.git_dirs);
        assert!(!f.git_dirs.contains("src"));
        let pointed: Vec<(&str, bool)> =
            f.pointed.iter().map(|p| (p.path.as_str(), p.dir)).collect();
        for want in [
            ("tools/hooks", true),
            ("scripts/fsmon.sh", false),
            ("bin/smudge", false),
            ("team.gitconfig", false),
            ("conf/attrs", false),
            ("vendor/lib/.hooks", true),
            ("m/githooks", true),
        ] {
            assert!(pointed.contains(&want), "{want:?} in {pointed:?}");
        }
        assert!(f
            .pointed
            .iter()
            .any(|p| p.why.contains("core.fsmonitor = scripts/fsmon.sh")));

        // commondir: the config that counts is the common dir's
        let ws2 = d.path().join("ws2");
        write(&ws2, ".git/HEAD", "ref: refs/heads/main\n");
        write(&ws2, ".git/commondir", "../common\n");
        write(&ws2, "common/config", "[core]\n\thooksPath = h\n");
        let f = gather(
            &ws2,
            &cs(&[("h/pre-commit", Kind::Modified, F)]),
            Some(&ws2),
        );
        assert!(f.pointed.iter().any(|p| p.path == "h"), "{:?}", f.pointed);

        // a config that is a symlink cannot be judged: everything is protected
        let ws3 = d.path().join("ws3");
        write(&ws3, "real.cfg", "[core]\n");
        std::fs::create_dir_all(ws3.join(".git")).unwrap();
        std::os::unix::fs::symlink("../real.cfg", ws3.join(".git/config")).unwrap();
        let f = gather(&ws3, &cs(&[("a", Kind::Added, F)]), Some(&ws3));
        assert!(!f.unreadable.is_empty());
        // hooks at the root: only hook names
        let ws4 = d.path().join("ws4");
        write(&ws4, ".git/config", "[core]\n\thooksPath = .\n");
        let f = gather(&ws4, &cs(&[("a", Kind::Added, F)]), Some(&ws4));
        assert!(f.pointed.iter().any(|p| p.path == "pre-commit" && !p.dir));
        // hooks of its own: a file of hooks/ not named *.sample
        let ws5 = d.path().join("ws5");
        write(&ws5, ".git/HEAD", "ref: refs/heads/main\n");
        write(&ws5, ".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        let f = gather(&ws5, &cs(&[("a", Kind::Added, F)]), Some(&ws5));
        assert!(!f.repo.as_ref().unwrap().hooks, "{:?}", f.repo);
        write(&ws5, ".git/hooks/post-checkout", "#!/bin/sh\n");
        let f = gather(&ws5, &cs(&[("a", Kind::Added, F)]), Some(&ws5));
        assert!(f.repo.as_ref().unwrap().hooks, "{:?}", f.repo);
        assert!(!f.pointed.iter().any(|p| p.path.is_empty()));
    }
}
