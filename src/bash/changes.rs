//! Change sets (DESIGN §5.12 "effects over commands"): what a command run on an overlay of the
//! workspace changed, how it is shown (a capped unified diff), applied to the real workspace
//! (refused on conflict, journaled first) and undone.
//!
//! Layout under the data dir (never visible to commands):
//! - `changes/<job>/upper`, `changes/<job>/work`: the overlay's layers while the change set waits;
//!   `changes/<job>/manifest.json`: the run's output and the change set (survives a restart);
//! - `journal/<job>/entries.json` + `journal/<job>/<n>`: previous contents of every path an
//!   applied change set touched (what `brainloop undo` restores).
//! - `decided/<job>.json`: a copy of the manifest of a change set a human decided (the newest
//!   [`DECIDED_KEEP`]), what `brainloop reviewer eval` shows a reviewer ([`keep_decided`]).
//!
//! A path's *state* is what conflict detection compares: absent, `dir`, `link:<target>` or
//! `file:<sha256>:<mode>`. Apply requires every touched path to be in its pre-run state (or
//! already in its post-run state: an apply cut off by a crash resumes); undo requires the
//! post-run state.
//!
//! The worker reads the workspace only beneath it: both layers are read through
//! `beneath::Beneath` (no symlink followed in any component), so a workspace symlink to an
//! outside directory is a `link:<target>` state and a lower path under it is absent — what it
//! points to never reaches a state, a hash, a diff or a manifest. No privilege bits: `after`
//! states carry no setuid/setgid (flagged `privilege_bits_removed`, said in the diff and the
//! summary), and apply never writes them. Bounded overlays: manifests record `client_id` and
//! `upper_bytes` ([`pending_bytes`]); the sandbox helper's record of a run over its cap is read
//! with [`over_cap`].

use crate::fs::beneath::{Beneath, Entry, Kind as BKind, Lookup, Meta};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Diff text kept per file and per change set.
pub const FILE_DIFF_CAP: usize = 16 * 1024;
pub const TOTAL_DIFF_CAP: usize = 64 * 1024;
/// Files larger than this are not diffed (shown as a size change).
const DIFF_MAX_FILE: u64 = 1 << 20;
/// More entries than this in one change set is refused (nothing applied).
pub const MAX_CHANGES: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Added,
    Modified,
    Deleted,
}

/// One path the command changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    pub kind: Kind,
    /// State in the workspace when the command ran (None: absent).
    pub before: Option<String>,
    /// State the change set gives it (None: deleted).
    pub after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub diff: Option<String>,
    /// The command gave the file setuid/setgid bits; `after` (what apply writes) has them
    /// removed, and the diff says so.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub privilege_bits_removed: bool,
    /// For a manifest `bash::run_on_use` judges key by key (`package.json`, `Cargo.toml`,
    /// `pyproject.toml`): the keys this change adds, changes or removes that a human must see,
    /// read from both layers when the change set was computed ([`manifest_keys`]). None: not a
    /// manifest, or not judged (`bash::protected` then asks).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub run_keys: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
    /// SHA-256 over (path, kind, before, after) of every change: what an approval binds to.
    pub hash: String,
    pub diff_truncated: bool,
}

/// A change set of `(path, kind, after)` entries whose `before` is `before` (unit tests of the
/// modules that judge change sets). A manifest's keys are taken as judged inert
/// (`run_keys: Some([])`): `bash::run_on_use`'s tests judge real keys through [`compute`].
#[cfg(test)]
pub(crate) fn for_tests(paths: &[(&str, Kind, &str)], before: &str) -> ChangeSet {
    ChangeSet {
        changes: paths
            .iter()
            .map(|(p, k, after)| Change {
                path: p.to_string(),
                kind: *k,
                before: (*k != Kind::Added).then(|| before.to_string()),
                after: (*k != Kind::Deleted).then(|| after.to_string()),
                diff: None,
                privilege_bits_removed: false,
                run_keys: Some(Vec::new()),
            })
            .collect(),
        hash: String::new(),
        diff_truncated: false,
    }
}

/// A change set that modifies the file `path` (a manifest's keys taken as inert): how a path
/// alone is judged (`bash::examples`).
pub fn hypothetical(path: &str) -> ChangeSet {
    ChangeSet {
        changes: vec![Change {
            path: path.to_string(),
            kind: Kind::Modified,
            before: Some("file:00:644".into()),
            after: Some("file:11:644".into()),
            diff: None,
            privilege_bits_removed: false,
            run_keys: Some(Vec::new()),
        }],
        hash: String::new(),
        diff_truncated: false,
    }
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |k| self.changes.iter().filter(|c| c.kind == k).count();
        (n(Kind::Added), n(Kind::Modified), n(Kind::Deleted))
    }
    /// `[{path, kind}]` of every change (results and hook payloads).
    pub fn paths_json(&self) -> serde_json::Value {
        self.changes
            .iter()
            .map(|c| serde_json::json!({"path": c.path, "kind": c.kind}))
            .collect()
    }
    pub fn summary(&self) -> String {
        let (a, m, d) = self.counts();
        let stripped = self
            .changes
            .iter()
            .filter(|c| c.privilege_bits_removed)
            .count();
        if stripped > 0 {
            format!("{a} added, {m} modified, {d} deleted; setuid/setgid removed from {stripped} file(s)")
        } else {
            format!("{a} added, {m} modified, {d} deleted")
        }
    }
    /// The unified diff of the whole change set (capped).
    pub fn diff(&self) -> String {
        let mut out = String::new();
        for c in &self.changes {
            match &c.diff {
                Some(d) => out.push_str(d),
                None => out.push_str(&format!(
                    "{} {} ({} → {})\n",
                    match c.kind {
                        Kind::Added => "added",
                        Kind::Modified => "modified",
                        Kind::Deleted => "deleted",
                    },
                    c.path,
                    short_state(c.before.as_deref()),
                    short_state(c.after.as_deref())
                )),
            }
        }
        if self.diff_truncated {
            out.push_str("… (diff truncated)\n");
        }
        out
    }
}

fn short_state(s: Option<&str>) -> String {
    match s {
        None => "absent".into(),
        Some(s) if s.starts_with("file:") => {
            let parts: Vec<&str> = s.splitn(3, ':').collect();
            format!(
                "file {} mode {}",
                parts.get(1).map(|h| &h[..h.len().min(12)]).unwrap_or(""),
                parts.get(2).unwrap_or(&"")
            )
        }
        Some(s) => s.to_string(),
    }
}

/// The effect hash an approval of this change set binds to: command + change set.
pub fn effect_hash(command_hash: &str, change_set_hash: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"brainloop effect v1\n");
    h.update(command_hash.as_bytes());
    h.update(b"\n");
    h.update(change_set_hash.as_bytes());
    hex::encode(h.finalize())
}

/// The state of `rel` in the lower layer (the workspace), read beneath it without following
/// any symlink. A path whose parent is a symlink or a file does not exist there as far as a
/// change set is concerned: what the symlink points to is never read.
fn lower_state(lower: &Beneath, rel: &str) -> Result<Option<String>> {
    Ok(match lower.entry(rel)? {
        Entry::Unreachable => None,
        e => e.state(),
    })
}

/// Removes the setuid/setgid bits from a `file:<sha256>:<mode>` state; true if there were any.
fn strip_privilege_bits(state: Option<String>) -> (Option<String>, bool) {
    let Some(s) = state else { return (None, false) };
    if let Some(rest) = s.strip_prefix("file:") {
        if let Some((hash, mode)) = rest.rsplit_once(':') {
            if let Ok(m) = u32::from_str_radix(mode, 8) {
                if m & 0o6000 != 0 {
                    return (Some(format!("file:{hash}:{:o}", m & !0o6000)), true);
                }
            }
        }
    }
    (Some(s), false)
}

fn is_whiteout(upper: &Beneath, rel: &str, md: &Meta) -> bool {
    (md.kind == BKind::CharDevice && md.rdev == 0)
        || (md.kind == BKind::File
            && md.size == 0
            && (upper.xattr(rel, "user.overlay.whiteout").is_some()
                || upper.xattr(rel, "trusted.overlay.whiteout").is_some()))
}

fn is_opaque(upper: &Beneath, rel: &str) -> bool {
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|n| {
            upper
                .xattr(rel, n)
                .is_some_and(|v| v.first() == Some(&b'y'))
        })
}

fn rel_join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The walk of the upper layer against the lower one; both are read only through `Beneath`.
struct Walk<'a> {
    upper: &'a Beneath,
    lower: &'a Beneath,
    deletions: Vec<Change>,
    others: Vec<Change>,
}

impl Walk<'_> {
    fn count(&self) -> Result<()> {
        if self.deletions.len() + self.others.len() > MAX_CHANGES {
            bail!("the command changed more than {MAX_CHANGES} paths; refused (nothing applied)");
        }
        Ok(())
    }

    /// Everything under (and including) `rel` in the lower layer is deleted.
    fn delete_lower(&mut self, rel: &str) -> Result<()> {
        let before = lower_state(self.lower, rel)?;
        if before.as_deref() == Some("dir") {
            for name in self.lower.list(rel)? {
                self.delete_lower(&rel_join(rel, &name))?;
            }
        }
        if before.is_some() {
            self.deletions.push(Change {
                path: rel.to_string(),
                kind: Kind::Deleted,
                before,
                after: None,
                diff: None,
                privilege_bits_removed: false,
                run_keys: None,
            });
        }
        self.count()
    }

    fn dir(&mut self, rel: &str) -> Result<()> {
        let names = self.upper.list(rel)?;
        if !rel.is_empty() && is_opaque(self.upper, rel) {
            // A directory removed and recreated: what the lower layer had there is gone.
            if lower_state(self.lower, rel)?.as_deref() == Some("dir") {
                for name in self.lower.list(rel)? {
                    if !names.contains(&name) {
                        self.delete_lower(&rel_join(rel, &name))?;
                    }
                }
            }
        }
        for name in names {
            let r = rel_join(rel, &name);
            let md = match self.upper.lookup(&r)? {
                Lookup::Found(m) => m,
                _ => bail!("{r} vanished from the overlay's upper layer"),
            };
            let before = lower_state(self.lower, &r)?;
            if is_whiteout(self.upper, &r, &md) {
                self.delete_lower(&r)?;
                continue;
            }
            match md.kind {
                BKind::Dir => {
                    if before.is_some() && before.as_deref() != Some("dir") {
                        self.delete_lower(&r)?;
                    }
                    if before.as_deref() != Some("dir") {
                        self.others.push(Change {
                            path: r.clone(),
                            kind: Kind::Added,
                            before: None,
                            after: Some("dir".into()),
                            diff: None,
                            privilege_bits_removed: false,
                run_keys: None,
                        });
                    }
                    self.count()?;
                    self.dir(&r)?;
                }
                BKind::File | BKind::Link => {
                    let raw = self.upper.entry(&r)?.state();
                    if raw == before {
                        continue; // copied up, not changed
                    }
                    // No privilege bits: the change set records (and apply writes) the mode
                    // without setuid/setgid.
                    let (after, stripped) = strip_privilege_bits(raw);
                    if after == before {
                        continue;
                    }
                    let kind = if before.as_deref() == Some("dir") {
                        self.delete_lower(&r)?;
                        Kind::Added
                    } else if before.is_some() {
                        Kind::Modified
                    } else {
                        Kind::Added
                    };
                    let before = if kind == Kind::Added { None } else { before };
                    self.others.push(Change {
                        path: r,
                        kind,
                        before,
                        after,
                        diff: None,
                        privilege_bits_removed: stripped,
                        run_keys: None,
                    });
                    self.count()?;
                }
                _ => bail!(
                    "the command created a special file ({}); such effects cannot be applied — nothing applied",
                    r
                ),
            }
        }
        Ok(())
    }
}

/// The text of the regular file `rel` beneath `root` (never through a symlink), if it is UTF-8
/// and at most `DIFF_MAX_FILE` bytes.
fn read_text(root: &Beneath, rel: &str) -> Option<String> {
    String::from_utf8(root.read_up_to(rel, DIFF_MAX_FILE).ok()??).ok()
}

/// The last line of a file's diff cut at its cap (never a line of a unified diff's body, whose
/// lines start with ` `, `+`, `-`, `@` or `\\`).
const CUT_NOTE: &str = "… (diff of this file truncated)";

fn cap(s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}\n{CUT_NOTE}\n", &s[..end]), true)
}

/// The diff line of a file whose content is not shown (not UTF-8, or over `DIFF_MAX_FILE`).
fn binary_note(c: &Change) -> String {
    format!(
        "Binary file {} {}",
        c.path,
        match c.kind {
            Kind::Added => "added",
            Kind::Modified => "differs",
            Kind::Deleted => "deleted",
        }
    )
}

impl Change {
    /// Whether the diff shows this change whole: a change of a regular file's content is shown
    /// whole only by a text diff that was not cut (not binary, not over `DIFF_MAX_FILE`, not past
    /// the per-file or per-change-set cap); a directory, a symlink or a deletion of nothing but a
    /// state is shown whole by its states. What a reviewer may approve (`hooks::reviewer`).
    pub fn shown_whole(&self) -> bool {
        let is_file = |s: &Option<String>| s.as_deref().is_some_and(|s| s.starts_with("file:"));
        if !is_file(&self.before) && !is_file(&self.after) {
            return true;
        }
        let Some(d) = &self.diff else {
            return false;
        };
        let binary = binary_note(self);
        !(d.contains(&binary) || d.lines().any(|l| l == CUT_NOTE))
    }
}

fn file_diff(c: &Change, upper: &Beneath, lower: &Beneath) -> Option<String> {
    let is_file = |s: &Option<String>| s.as_deref().is_some_and(|s| s.starts_with("file:"));
    if !is_file(&c.before) && !is_file(&c.after) {
        return None;
    }
    let old = if is_file(&c.before) {
        read_text(lower, &c.path)
    } else {
        Some(String::new())
    };
    let new = if is_file(&c.after) {
        read_text(upper, &c.path)
    } else {
        Some(String::new())
    };
    match (old, new) {
        (Some(o), Some(n)) => {
            let (a, b) = (
                if c.before.is_some() {
                    format!("a/{}", c.path)
                } else {
                    "/dev/null".into()
                },
                if c.after.is_some() {
                    format!("b/{}", c.path)
                } else {
                    "/dev/null".into()
                },
            );
            let mut d = similar::TextDiff::from_lines(&o, &n)
                .unified_diff()
                .context_radius(3)
                .header(&a, &b)
                .to_string();
            if d.is_empty() {
                d = format!("mode changed: {}\n", c.path);
            }
            // A symlink (or directory) on one side: say so; a symlink is never followed.
            if c.before.is_some() && !is_file(&c.before) || c.after.is_some() && !is_file(&c.after)
            {
                d = format!(
                    "{}: {} → {}\n{d}",
                    c.path,
                    short_state(c.before.as_deref()),
                    short_state(c.after.as_deref())
                );
            }
            Some(d)
        }
        _ => Some(format!("{}\n", binary_note(c))),
    }
}

/// Computes the change set of an overlay run: `upper` against the workspace (`lower`). Both
/// layers are read beneath their roots without following any symlink (`beneath.rs`): a
/// workspace symlink is a `link:<target>` state, and what it points to is never read.
pub fn compute(upper: &Path, lower: &Path) -> Result<ChangeSet> {
    let upper = &Beneath::open(upper)?;
    let lower = &Beneath::open(lower)?;
    let mut w = Walk {
        upper,
        lower,
        deletions: Vec::new(),
        others: Vec::new(),
    };
    w.dir("")?;
    // Deepest first for deletions; additions in path order (parents before children).
    w.deletions.sort_by(|a, b| b.path.cmp(&a.path));
    w.deletions.dedup_by(|a, b| a.path == b.path);
    let mut changes = w.deletions;
    changes.extend(w.others);
    let mut h = Sha256::new();
    for c in &changes {
        h.update(
            serde_json::to_string(&(&c.path, c.kind, &c.before, &c.after))
                .unwrap_or_default()
                .as_bytes(),
        );
        h.update(b"\n");
    }
    for c in changes.iter_mut() {
        c.run_keys = manifest_keys(c, upper, lower);
    }
    let mut total = 0usize;
    let mut truncated = false;
    for c in changes.iter_mut() {
        if total >= TOTAL_DIFF_CAP {
            truncated = true;
            break;
        }
        let mut d = file_diff(c, upper, lower);
        if c.privilege_bits_removed {
            let note = format!(
                "note: {}: the command set the setuid/setgid bit; it is removed (applied as {})\n",
                c.path,
                short_state(c.after.as_deref())
            );
            d = Some(note + d.as_deref().unwrap_or(""));
        }
        if let Some(d) = d {
            let (d, t) = cap(d, FILE_DIFF_CAP.min(TOTAL_DIFF_CAP - total));
            truncated |= t;
            total += d.len();
            c.diff = Some(d);
        }
    }
    Ok(ChangeSet {
        changes,
        hash: hex::encode(h.finalize()),
        diff_truncated: truncated,
    })
}

/// The keys of a manifest change a human must see (`bash::run_on_use::offending_keys`), from
/// the workspace's file (`lower`) and the run's (`upper`), each read beneath its root and
/// checked against the change's states; None: not a manifest. A side that is not a plain file
/// of at most `run_on_use::MAX_MANIFEST` bytes, or no longer in its state, is one offending key.
pub fn manifest_keys(c: &Change, upper: &Beneath, lower: &Beneath) -> Option<Vec<String>> {
    let k = crate::bash::run_on_use::knowledge().ok()?;
    let (_, m) = k.manifest_of(&c.path)?;
    let side = |b: &Beneath, state: &Option<String>| -> Result<Option<Vec<u8>>, String> {
        let Some(state) = state else { return Ok(None) };
        if !state.starts_with("file:") {
            return Err(format!("{state} is not a file"));
        }
        let bytes = b
            .read_up_to(&c.path, crate::bash::run_on_use::MAX_MANIFEST)
            .map_err(|e| format!("{e:#}"))?
            .ok_or("too large or gone")?;
        let hash = hex::encode(Sha256::digest(&bytes));
        match state
            .strip_prefix("file:")
            .and_then(|r| r.split(':').next())
        {
            Some(h) if h == hash => Ok(Some(bytes)),
            _ => Err("changed since the run".into()),
        }
    };
    Some(match (side(lower, &c.before), side(upper, &c.after)) {
        (Ok(before), Ok(after)) => {
            crate::bash::run_on_use::offending_keys(m, before.as_deref(), after.as_deref())
        }
        (Err(e), _) | (_, Err(e)) => vec![format!("(the whole file: {e})")],
    })
}

/// Everything a pending change set needs to be shown and applied after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub job_id: i64,
    pub command: String,
    pub command_hash: String,
    pub effect_hash: String,
    pub workspace: PathBuf,
    pub workdir: PathBuf,
    pub exit_code: Option<i32>,
    pub success: bool,
    /// The command's output; for another action's change set, its account of what the change
    /// does beyond the diff (`generate_sql`: the rows changed per table and the statements).
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub duration_ms: u64,
    pub sandbox: String,
    pub signatures: Vec<String>,
    pub change_set: ChangeSet,
    pub created_at: i64,
    /// The client whose job ran (counts against its `pending_max_bytes_per_client`).
    #[serde(default)]
    pub client_id: String,
    /// Bytes the overlay's upper layer holds (allocated blocks), see [`pending_bytes`].
    #[serde(default)]
    pub upper_bytes: u64,
    /// The signal that ended the run, its timeout and whether it ran out (the result's error
    /// names them, as a direct run's does).
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub timeout_ms: u64,
    /// The action whose effect this is (None: `execute_bash`, a command's overlay run). Another
    /// action (`generate_file`, a loop commit) stages its writes as this same change set
    /// ([`stage_files`]): the same store, journal, apply and undo; `command` then says what it
    /// writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// For another action's change set: the result fields the job ends with once it is applied
    /// (`bash::result::on_overlay` adds `policy_used`, `effects`, `applied`, `undo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl Manifest {
    /// The action that made this change set (`execute_bash` for a command's overlay run).
    pub fn action(&self) -> &str {
        self.action.as_deref().unwrap_or("execute_bash")
    }
}

/// The one previewer (issue 54): the text a human reads for a change set, whatever action made
/// it — `show`, `validations`, `enqueue --wait`, the review TUI and the notify payload's `text`
/// print this and nothing else: the capped unified diff, multi-line, escaped by `shown::block`
/// (the agent chose every byte of it).
pub fn shown_diff(cs: &ChangeSet) -> String {
    crate::shown::block(&cs.diff())
}

/// [`shown_diff`] for a listing (`validations`, `enqueue --wait`, the notify payload's `text`):
/// each line after `indent`, at most `max_lines` of them, then how many more and where to see
/// them (`brainloop show ID`).
pub fn shown_diff_lines(cs: &ChangeSet, indent: &str, max_lines: usize, id: &str) -> String {
    let shown = shown_diff(cs);
    let lines: Vec<&str> = shown.lines().collect();
    let mut out: String = lines
        .iter()
        .take(max_lines)
        .map(|l| format!("{indent}{l}\n"))
        .collect();
    if lines.len() > max_lines {
        out.push_str(&format!(
            "{indent}… ({} more lines: brainloop show {id})\n",
            lines.len() - max_lines
        ));
    }
    out
}

/// Stages the writes of `files` — `(rel, content, mode)`: a file beneath `root`, `/`-separated,
/// its missing parent directories created, mode the replaced file's or 0644 — as job `job_id`'s
/// one change set (a loop commit writes several): the upper layer of a fresh `changes/<job>/`
/// holds the files, computed against `root` by [`compute`] exactly as a command's overlay run
/// is. Returns the change set and the upper layer's bytes. Blocking.
pub fn stage_files(
    data_dir: &Path,
    job_id: i64,
    root: &Path,
    files: &[(String, Vec<u8>, u32)],
) -> Result<(ChangeSet, u64)> {
    for (rel, _, _) in files {
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            bail!("{rel:?} is not a plain path beneath {}", root.display());
        }
    }
    let (upper, _) = create_layers(data_dir, job_id)?;
    for (rel, content, mode) in files {
        let file = upper.join(rel);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
        }
        // Written in place, never through a temp name: another staged file may have that name.
        {
            use std::io::Write;
            let mut f =
                fs::File::create(&file).with_context(|| format!("create {}", file.display()))?;
            f.write_all(content)?;
            f.sync_all()?;
        }
        fs::set_permissions(&file, fs::Permissions::from_mode(mode & 0o777))
            .with_context(|| format!("chmod {}", file.display()))?;
    }
    let cs = compute(&upper, root)?;
    Ok((cs, upper_bytes(&upper)))
}

pub fn job_dir(data_dir: &Path, job_id: i64) -> PathBuf {
    data_dir.join("changes").join(job_id.to_string())
}
pub fn journal_dir(data_dir: &Path, job_id: i64) -> PathBuf {
    data_dir.join("journal").join(job_id.to_string())
}

fn write_durable(p: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = p.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, p).with_context(|| format!("rename {}", p.display()))?;
    if let Some(d) = p.parent() {
        if let Ok(f) = fs::File::open(d) {
            let _ = f.sync_all();
        }
    }
    Ok(())
}

pub fn save_manifest(data_dir: &Path, m: &Manifest) -> Result<()> {
    let r = write_durable(
        &job_dir(data_dir, m.job_id).join("manifest.json"),
        &serde_json::to_vec(m)?,
    );
    unindex(data_dir, m.job_id);
    r
}

pub fn load_manifest(data_dir: &Path, job_id: i64) -> Result<Option<Manifest>> {
    let p = job_dir(data_dir, job_id).join("manifest.json");
    match fs::read(&p) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
            format!("corrupt change-set manifest {}", p.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", p.display())),
    }
}

/// How many decided change sets [`keep_decided`] keeps (the newest jobs'), for `brainloop reviewer
/// eval` to show a reviewer what the human was shown.
pub const DECIDED_KEEP: usize = 500;

/// Where the manifest of a change set a human decided is kept: `decided/<job>.json`.
pub fn decided_path(data_dir: &Path, job_id: i64) -> PathBuf {
    data_dir.join("decided").join(format!("{job_id}.json"))
}

/// Keeps a copy of job `job_id`'s manifest (the change set a human just decided) before the
/// overlay is applied or discarded, so `brainloop reviewer eval` can replay the validation as it
/// was asked; only the newest [`DECIDED_KEEP`] are kept. Best effort: a copy that cannot be made
/// is logged, and the eval says that validation could not be rebuilt.
pub fn keep_decided(data_dir: &Path, job_id: i64) {
    let from = job_dir(data_dir, job_id).join("manifest.json");
    let to = decided_path(data_dir, job_id);
    let kept = (|| -> Result<bool> {
        let bytes = match fs::read(&from) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e).with_context(|| format!("read {}", from.display())),
        };
        if let Some(d) = to.parent() {
            fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))?;
        }
        write_durable(&to, &bytes)?;
        Ok(true)
    })();
    match kept {
        Ok(true) => prune_decided(data_dir),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            job_id,
            error = format!("{e:#}"),
            "cannot keep the decided change set for `brainloop reviewer eval`"
        ),
    }
}

/// Removes all but the newest [`DECIDED_KEEP`] kept manifests (by job id).
fn prune_decided(data_dir: &Path) {
    let Ok(rd) = fs::read_dir(data_dir.join("decided")) else {
        return;
    };
    let mut ids: Vec<i64> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    if ids.len() <= DECIDED_KEEP {
        return;
    }
    ids.sort_unstable();
    for id in &ids[..ids.len() - DECIDED_KEEP] {
        let _ = fs::remove_file(decided_path(data_dir, *id));
    }
}

/// The manifest [`keep_decided`] kept for job `job_id`, if any.
pub fn load_decided(data_dir: &Path, job_id: i64) -> Result<Option<Manifest>> {
    let p = decided_path(data_dir, job_id);
    match fs::read(&p) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
            format!("corrupt kept manifest {}", p.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", p.display())),
    }
}

/// Bytes the upper layer at `upper` holds (see [`crate::fs::beneath::usage`]: the larger of the
/// allocated and apparent size of each file, so a sparse file counts for what apply would write).
pub fn upper_bytes(upper: &Path) -> u64 {
    crate::fs::beneath::usage(upper, u64::MAX, u64::MAX)
        .map(|u| u.bytes)
        .unwrap_or(u64::MAX)
}

/// The sum of `upper_bytes` over the change sets of `client_id` kept under
/// `data_dir/changes/` (waiting for a human, or applied and not yet swept): what the client's
/// `pending_max_bytes_per_client` is compared with before another overlay run starts.
///
/// Every overlay run asks, so the answer must not cost a read — nor a `stat` — of every waiting
/// manifest (issue 50: 1,000 pending change sets made 10 runs open 10,044 manifests; one `stat`
/// each still made a run with 10,000 waiting 2.2× slower). [`PENDING_INDEX`] keeps, per data
/// dir, each job dir by its inode (what listing `changes/` returns without a `stat`) with the
/// client and bytes of its manifest once read: a run lists `changes/` and looks each entry up,
/// and reads only the manifests of job dirs it has not seen with one (new, re-created, or still
/// running). A manifest is written only by [`save_manifest`] and a job dir removed by
/// [`discard`], which both drop the job's entry; a job dir removed by anything else is gone
/// from the next listing.
pub fn pending_bytes(data_dir: &Path, client_id: &str) -> Result<u64> {
    use std::os::unix::fs::DirEntryExt;
    let dir = data_dir.join("changes");
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("read {}", dir.display())),
    };
    let mut index = match PENDING_INDEX.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let known = index.entry(data_dir.to_path_buf()).or_default();
    known.pass = known.pass.wrapping_add(1);
    let pass = known.pass;
    let mut total = 0u64;
    let mut listed = 0usize;
    let mut unread: Vec<(i64, u64)> = Vec::new();
    for e in rd {
        let e = e.with_context(|| format!("read {}", dir.display()))?;
        let name = e.file_name();
        let Some(job) = name.to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        match known.jobs.get_mut(&job) {
            Some(k) if k.ino == e.ino() && k.manifest.is_some() => {
                k.pass = pass;
                listed += 1;
                if let Some((client, bytes)) = &k.manifest {
                    if client == client_id {
                        total = total.saturating_add(*bytes);
                    }
                }
            }
            _ => unread.push((job, e.ino())),
        }
    }
    for (job, ino) in unread {
        // No manifest yet (a run in progress), gone, unreadable or corrupt: not counted (a
        // corrupt one fails its job when it resumes), looked at again at the next run.
        let manifest = load_manifest(data_dir, job)
            .ok()
            .flatten()
            .map(|m| (m.client_id, m.upper_bytes));
        if let Some((client, bytes)) = &manifest {
            if client == client_id {
                total = total.saturating_add(*bytes);
            }
        }
        listed += 1;
        known.jobs.insert(
            job,
            Pending {
                ino,
                manifest,
                pass,
            },
        );
    }
    // What was not listed this time is gone (discarded, swept).
    if listed != known.jobs.len() {
        known.jobs.retain(|_, k| k.pass == pass);
    }
    Ok(total)
}

/// Drops job `job_id`'s entry of [`PENDING_INDEX`]: its manifest was (re)written or its job
/// dir removed.
fn unindex(data_dir: &Path, job_id: i64) {
    let mut index = match PENDING_INDEX.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if let Some(k) = index.get_mut(data_dir) {
        k.jobs.remove(&job_id);
    }
}

/// One job dir of `changes/` as [`pending_bytes`] last listed it.
struct Pending {
    /// The job dir's inode (a re-created dir is another).
    ino: u64,
    /// Its manifest's (client, upper_bytes); None: none read yet.
    manifest: Option<(String, u64)>,
    /// The listing that last saw it.
    pass: u64,
}

/// Per data dir: the job dirs of `changes/` (see [`pending_bytes`]).
#[derive(Default)]
struct PendingDirs {
    jobs: std::collections::HashMap<i64, Pending>,
    pass: u64,
}

type PendingIndex = std::collections::HashMap<PathBuf, PendingDirs>;
static PENDING_INDEX: std::sync::LazyLock<std::sync::Mutex<PendingIndex>> =
    std::sync::LazyLock::new(Default::default);

/// Name of the file (in `changes/<job>/`) where the sandbox helper records that an overlay run
/// went over its cap: `bytes LIMIT MEASURED`, `entries LIMIT MEASURED` or `unmeasured`.
pub const OVER_CAP_FILE: &str = "over_cap";

/// What the helper recorded when it stopped job `job_id`'s overlay run over its cap.
pub fn over_cap(data_dir: &Path, job_id: i64) -> Option<String> {
    fs::read_to_string(job_dir(data_dir, job_id).join(OVER_CAP_FILE)).ok()
}

/// Removes a job's overlay layers and manifest (the overlay's work dir is made removable first).
pub fn discard(data_dir: &Path, job_id: i64) {
    unindex(data_dir, job_id);
    let d = job_dir(data_dir, job_id);
    let work = d.join("work").join("work");
    if work.exists() {
        let _ = fs::set_permissions(&work, fs::Permissions::from_mode(0o700));
    }
    let _ = fs::remove_dir_all(&d);
}

/// Discards the change sets of jobs that have a final result; returns how many.
pub fn sweep_finished<S>(
    data_dir: &Path,
    finals_among: impl FnOnce(&[i64]) -> Result<S>,
) -> Result<usize>
where
    S: IntoIterator<Item = i64>,
{
    let dir = data_dir.join("changes");
    let Ok(rd) = fs::read_dir(&dir) else {
        return Ok(0);
    };
    let ids: Vec<i64> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let mut n = 0;
    for id in finals_among(&ids)? {
        discard(data_dir, id);
        n += 1;
    }
    Ok(n)
}

/// Creates the (empty) overlay layers of a job; returns (upper, work).
pub fn create_layers(data_dir: &Path, job_id: i64) -> Result<(PathBuf, PathBuf)> {
    discard(data_dir, job_id);
    let d = job_dir(data_dir, job_id);
    let (u, w) = (d.join("upper"), d.join("work"));
    for p in [&u, &w] {
        fs::create_dir_all(p).with_context(|| format!("create {}", p.display()))?;
        fs::set_permissions(p, fs::Permissions::from_mode(0o700))?;
    }
    if let Some(c) = d.parent() {
        let _ = fs::set_permissions(c, fs::Permissions::from_mode(0o700));
    }
    Ok((u, w))
}

/// One journaled path: its state before and after the apply, and where its previous content is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
    /// File (in the journal dir) holding the previous regular-file content.
    pub saved: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub job_id: i64,
    pub workspace: PathBuf,
    pub entries: Vec<JournalEntry>,
}

/// Refuses (with `what` and the offending paths) unless every path's current state is the
/// expected `from` or already `to`. `items` come in the order they will be written; a path
/// listed twice (a symlink or file replaced by a directory: deleted, then added) is expected in
/// the `from` of its first entry or the `to` of its last. States are read beneath the root
/// without following any symlink (a symlinked parent reads as `special`) — except that a path
/// expected absent whose parent is unreachable (a symlink or file in the way) is fine when the
/// change set itself replaces that non-directory ancestor (whose own state is checked here
/// too): e.g. a workspace symlink `evil` the command replaced with a directory holding `evil/x`.
fn ensure_no_conflicts<'a>(
    root: &Beneath,
    items: impl Iterator<Item = (&'a str, &'a Option<String>, &'a Option<String>)>,
    what: &str,
) -> Result<()> {
    let out = conflicts(root, items)?;
    if !out.is_empty() {
        bail!("conflict: {what} ({}){}", out.join("; "), CONFLICT_HINT);
    }
    Ok(())
}

/// What a conflict message tells the operator to do.
const CONFLICT_HINT: &str = " — put each path named back in one of the two states (or move the later change aside), then try again";

/// [`ensure_no_conflicts`]' check: the offending paths, each with what was expected and found.
/// Err: a path could not be read.
fn conflicts<'a>(
    root: &Beneath,
    items: impl Iterator<Item = (&'a str, &'a Option<String>, &'a Option<String>)>,
) -> Result<Vec<String>> {
    let mut order: Vec<&str> = Vec::new();
    let mut span: std::collections::HashMap<&str, (&Option<String>, &Option<String>)> =
        std::collections::HashMap::new();
    for (path, from, to) in items {
        match span.get_mut(path) {
            Some(s) => s.1 = to,
            None => {
                order.push(path);
                span.insert(path, (from, to));
            }
        }
    }
    let replaced = |p: &str| {
        span.get(p)
            .is_some_and(|(from, _)| from.is_some() && from.as_deref() != Some("dir"))
    };
    let replaced_ancestor = |path: &str| path.match_indices('/').any(|(i, _)| replaced(&path[..i]));
    let mut out = Vec::new();
    for path in order {
        let (from, to) = span[path];
        let entry = root.entry(path)?;
        if entry == Entry::Unreachable && from.is_none() && replaced_ancestor(path) {
            continue;
        }
        let cur = entry.state();
        if &cur != from && &cur != to {
            out.push(format!(
                "{path}: expected {}, found {}",
                short_state(from.as_deref()),
                short_state(cur.as_deref())
            ));
        }
    }
    Ok(out)
}

/// Puts state `to` at `rel` beneath `root` through the temp file `tmp`, taking file content
/// from `src` (a regular file beneath `src_root`). Nothing follows a symlink: see `beneath.rs`.
fn put(
    root: &Beneath,
    rel: &str,
    tmp: &str,
    to: &str,
    src: Option<(&Beneath, &str)>,
) -> Result<()> {
    if to == "dir" {
        return root.make_dir(rel);
    }
    if let Some(link) = to.strip_prefix("link:") {
        return root.put(rel, tmp, None, 0, Some(link));
    }
    let (src_root, src_rel) = src.ok_or_else(|| anyhow::anyhow!("no content for {rel}"))?;
    let mut f = src_root
        .open_file(src_rel)
        .with_context(|| format!("the new content of {rel}"))?;
    let mode = to
        .rsplit(':')
        .next()
        .and_then(|m| u32::from_str_radix(m, 8).ok())
        .unwrap_or(0o644);
    root.put(rel, tmp, Some(&mut f), mode, None)
}

/// The temp file through which the apply (or the undo) of job `job_id` writes the journal's
/// entry `i`, in that path's own directory. A fixed name derived from the journal: a kill -9
/// half-way through a write leaves only names that recovery finds again ([`remove_temps`]),
/// and the next write of the same entry replaces it.
pub fn temp_name(job_id: i64, i: usize, undo: bool) -> String {
    let phase = if undo { "undo" } else { "apply" };
    format!(".brainloop-{job_id}-{phase}-{i}.tmp")
}

/// Removes the temp files a killed apply or undo of `j` may have left beside its paths;
/// returns how many there were.
fn sweep_temps(root: &Beneath, j: &Journal) -> Result<usize> {
    let mut n = 0;
    for (i, e) in j.entries.iter().enumerate() {
        for undo in [false, true] {
            if root.remove_temp(&e.path, &temp_name(j.job_id, i, undo))? {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Job `job_id`'s journal as written before its apply's first byte (`journal/<job>/entries.json`),
/// if there is one.
pub fn load_journal(data_dir: &Path, job_id: i64) -> Result<Option<Journal>> {
    let f = journal_dir(data_dir, job_id).join("entries.json");
    match fs::read(&f) {
        Ok(b) => Ok(Some(
            serde_json::from_slice(&b).with_context(|| format!("corrupt {}", f.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", f.display())),
    }
}

/// Start-up recovery: removes the temp files that a worker killed during job `job_id`'s apply
/// or undo left in its workspace (none when the job has no journal). How many.
pub fn remove_temps(data_dir: &Path, job_id: i64) -> Result<usize> {
    let Some(j) = load_journal(data_dir, job_id)? else {
        return Ok(0);
    };
    let root = Beneath::open(&j.workspace)?;
    sweep_temps(&root, &j)
}

/// The paths of `j` that are in their applied state in its workspace now (what a cut-off
/// apply wrote, once its change set is gone).
pub fn landed_in(j: &Journal) -> Result<Vec<String>> {
    let root = Beneath::open(&j.workspace)?;
    let mut out = Vec::new();
    for e in &j.entries {
        if root.entry(&e.path)?.state() == e.after && e.after != e.before {
            out.push(e.path.clone());
        }
    }
    Ok(out)
}

/// Why an apply stopped, and how far it got: what the job's result and the journal say.
#[derive(Debug)]
pub struct ApplyError {
    /// Refused before this apply wrote anything: a path changed since the run.
    pub conflict: bool,
    /// The changes (indices into the change set) that are in their post-run state in the
    /// workspace: written by this apply, or by the cut-off one it resumed.
    pub landed: Vec<usize>,
    /// The journal, when it was written before the stop: `undo` takes `landed` back with it.
    pub journal: Option<Journal>,
    pub error: anyhow::Error,
}

impl ApplyError {
    fn new(error: anyhow::Error) -> ApplyError {
        ApplyError {
            conflict: false,
            landed: Vec::new(),
            journal: None,
            error,
        }
    }
}

/// Applies a pending change set to the workspace: refuses (nothing written) if any touched path
/// changed since the run, journals previous contents first, then writes each path atomically.
/// Returns the journal. `bash::overlay::apply_recorded` is the worker's one caller (it records
/// the apply in `db::applies` around this).
pub fn apply(data_dir: &Path, m: &Manifest) -> Result<Journal> {
    apply_with(data_dir, m, &mut |_| Ok(()), &mut |_| {}).map_err(|e| e.error)
}

/// The indices of `m`'s changes whose path is in its post-run state now.
fn landed_of(root: &Beneath, m: &Manifest) -> Vec<usize> {
    let cs = &m.change_set.changes;
    (0..cs.len())
        .filter(|&i| {
            root.entry(&cs[i].path)
                .is_ok_and(|e| e.state() == cs[i].after)
        })
        .collect()
}

/// The journal of `m` (its paths' previous contents saved under `journal/<job>/`), written
/// durably before the apply's first byte.
fn write_journal(data_dir: &Path, root: &Beneath, m: &Manifest) -> Result<Journal> {
    let jdir = journal_dir(data_dir, m.job_id);
    fs::create_dir_all(&jdir).with_context(|| format!("create {}", jdir.display()))?;
    let _ = fs::set_permissions(&jdir, fs::Permissions::from_mode(0o700));
    let mut entries = Vec::new();
    for (i, c) in m.change_set.changes.iter().enumerate() {
        let saved = if c.before.as_deref().is_some_and(|b| b.starts_with("file:")) {
            let name = i.to_string();
            let mut from = root
                .open_file(&c.path)
                .with_context(|| format!("journal {}", c.path))?;
            let mut to = fs::File::create(jdir.join(&name))
                .with_context(|| format!("journal {}", c.path))?;
            std::io::copy(&mut from, &mut to).with_context(|| format!("journal {}", c.path))?;
            to.sync_all()
                .with_context(|| format!("journal {}", c.path))?;
            Some(name)
        } else {
            None
        };
        entries.push(JournalEntry {
            path: c.path.clone(),
            before: c.before.clone(),
            after: c.after.clone(),
            saved,
        });
    }
    let j = Journal {
        job_id: m.job_id,
        workspace: m.workspace.clone(),
        entries,
    };
    write_durable(&jdir.join("entries.json"), &serde_json::to_vec(&j)?)?;
    Ok(j)
}

/// [`apply`], calling `journaled(journal)` once the journal is durable and before the first
/// byte reaches the workspace (an Err there stops the apply, nothing written), and `written(n)`
/// after the `n`-th path it wrote (1-based; a path already in its post-run state is not
/// written again): the test hook that holds an apply half-way. A resumed apply (its journal
/// already written for this very change set) first removes the temp files the cut-off one
/// left. Err: how far it got ([`ApplyError`]).
pub fn apply_with(
    data_dir: &Path,
    m: &Manifest,
    journaled: &mut dyn FnMut(&Journal) -> Result<()>,
    written: &mut dyn FnMut(usize),
) -> Result<Journal, ApplyError> {
    let root = Beneath::open(&m.workspace).map_err(ApplyError::new)?;
    let upper =
        Beneath::open(&job_dir(data_dir, m.job_id).join("upper")).map_err(ApplyError::new)?;
    // An apply cut off by a crash: the journal written before it is the truth — if it was
    // written for this very change set (a job's journal of another one is never reused).
    let resumed = load_journal(data_dir, m.job_id).map_err(ApplyError::new)?;
    if let Some(j) = &resumed {
        let same = j.entries.len() == m.change_set.changes.len()
            && j.entries
                .iter()
                .zip(&m.change_set.changes)
                .all(|(e, c)| e.path == c.path && e.before == c.before && e.after == c.after);
        if !same {
            return Err(ApplyError::new(anyhow::anyhow!(
                "the journal of job {} records another change set; nothing was applied",
                m.job_id
            )));
        }
        sweep_temps(&root, j).map_err(|e| ApplyError {
            landed: landed_of(&root, m),
            journal: resumed.clone(),
            ..ApplyError::new(e.context("removing the temp files of the cut-off apply"))
        })?;
    }
    let found = conflicts(
        &root,
        m.change_set
            .changes
            .iter()
            .map(|c| (c.path.as_str(), &c.before, &c.after)),
    );
    let stop = |conflict: bool, e: anyhow::Error| ApplyError {
        conflict,
        landed: if resumed.is_some() {
            landed_of(&root, m)
        } else {
            Vec::new()
        },
        journal: resumed.clone(),
        error: e,
    };
    match found {
        Err(e) => return Err(stop(false, e)),
        Ok(found) if !found.is_empty() => {
            return Err(stop(
                true,
                anyhow::anyhow!(
                    "conflict: the workspace changed since the change set was made (the command ran, or the file was generated), so nothing was applied ({}){CONFLICT_HINT}",
                    found.join("; ")
                ),
            ))
        }
        Ok(_) => {}
    }
    let journal = match &resumed {
        Some(j) => j.clone(),
        None => write_journal(data_dir, &root, m)
            .map_err(|e| stop(false, e.context("saving what the apply replaces")))?,
    };
    journaled(&journal).map_err(|e| ApplyError {
        journal: Some(journal.clone()),
        ..stop(false, e)
    })?;
    let mut landed = Vec::new();
    let mut n = 0;
    for (i, c) in m.change_set.changes.iter().enumerate() {
        let step = || -> Result<bool> {
            if root.entry(&c.path)?.state() == c.after {
                return Ok(false);
            }
            match &c.after {
                None => root.remove(&c.path)?,
                Some(to) => put(
                    &root,
                    &c.path,
                    &temp_name(m.job_id, i, false),
                    to,
                    Some((&upper, &c.path)),
                )?,
            }
            Ok(true)
        };
        match step() {
            Ok(wrote) => {
                landed.push(i);
                if wrote {
                    n += 1;
                    written(n);
                }
            }
            Err(e) => {
                return Err(ApplyError {
                    conflict: false,
                    landed,
                    journal: Some(journal),
                    error: e.context(format!("applying {}", c.path)),
                })
            }
        }
    }
    Ok(journal)
}

/// Restores what a journaled apply replaced — all of it, or the part a failed or cut-off apply
/// wrote (a path still in its previous state is left alone); refuses (nothing written) if any
/// path changed since the apply, naming each. A stop half-way (an I/O error) leaves every path
/// in one of its two states, so undoing again resumes: the error says which path stopped it
/// and what was restored already.
pub fn undo(data_dir: &Path, j: &Journal) -> Result<Vec<String>> {
    let root = Beneath::open(&j.workspace)?;
    sweep_temps(&root, j).context("removing the temp files of a cut-off apply or undo")?;
    ensure_no_conflicts(
        &root,
        // In the order undo writes them (reverse).
        j.entries
            .iter()
            .rev()
            .map(|e| (e.path.as_str(), &e.after, &e.before)),
        "later changes touched these paths, so nothing was undone",
    )?;
    let jdir = journal_dir(data_dir, j.job_id);
    let saved = Beneath::open(&jdir)?;
    let mut restored = Vec::new();
    // Reverse order: contents before their directories are removed, directories before contents.
    for (i, e) in j.entries.iter().enumerate().rev() {
        let step = || -> Result<bool> {
            if root.entry(&e.path)?.state() == e.before {
                return Ok(false);
            }
            match &e.before {
                None => root.remove(&e.path)?,
                Some(to) => {
                    let src = e.saved.as_deref().map(|s| (&saved, s));
                    put(&root, &e.path, &temp_name(j.job_id, i, true), to, src)?
                }
            }
            Ok(true)
        };
        match step() {
            Ok(true) => restored.push(e.path.clone()),
            Ok(false) => {}
            Err(err) => {
                return Err(err.context(format!(
                    "the undo of job {} stopped at {} after restoring {} path(s); nothing is marked undone and every path is in its applied or its previous state — fix the cause, then run `brainloop undo {}` again (it resumes)",
                    j.job_id,
                    e.path,
                    restored.len(),
                    j.job_id
                )))
            }
        }
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest of a successful run of job `id` over `ws` with change set `cs`.
    fn manifest(id: i64, ws: &Path, cs: ChangeSet) -> Manifest {
        Manifest {
            job_id: id,
            command: "x".into(),
            command_hash: "h".into(),
            effect_hash: effect_hash("h", &cs.hash),
            workspace: ws.to_path_buf(),
            workdir: ws.to_path_buf(),
            exit_code: Some(0),
            success: true,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            sandbox: String::new(),
            signatures: vec![],
            change_set: cs,
            created_at: 0,
            client_id: "local".into(),
            upper_bytes: 0,
            signal: None,
            timed_out: false,
            timeout_ms: 0,
            action: None,
            result: None,
        }
    }

    #[test]
    fn compute_apply_undo_without_overlay() {
        // A hand-made upper layer (no whiteouts): added + modified files.
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
        let (upper, _) = create_layers(&data, 7).unwrap();
        fs::write(upper.join("a.txt"), "one\nTWO\n").unwrap();
        fs::create_dir(upper.join("d")).unwrap();
        fs::write(upper.join("d/new.txt"), "hello\n").unwrap();
        let cs = compute(&upper, &ws).unwrap();
        assert_eq!(cs.counts(), (2, 1, 0), "{cs:?}");
        assert!(cs.diff().contains("-two\n+TWO"), "{}", cs.diff());
        let m = manifest(7, &ws, cs);
        let j = apply(&data, &m).unwrap();
        assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "one\nTWO\n");
        assert_eq!(fs::read_to_string(ws.join("d/new.txt")).unwrap(), "hello\n");
        // Applying again is a no-op (already in the post-run state).
        apply(&data, &m).unwrap();
        undo(&data, &j).unwrap();
        assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "one\ntwo\n");
        assert!(!ws.join("d").exists());
    }

    #[test]
    fn a_change_is_shown_whole_only_by_a_text_diff_that_was_not_cut() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("small.txt"), "one\n").unwrap();
        let (upper, _) = create_layers(&data, 11).unwrap();
        fs::write(upper.join("small.txt"), "two\n").unwrap();
        fs::write(upper.join("big.txt"), "x\n".repeat(FILE_DIFF_CAP)).unwrap();
        fs::write(upper.join("bin"), [0xffu8, 0xfe, 0]).unwrap();
        fs::write(upper.join("bin\nnamed"), [0xffu8]).unwrap();
        fs::create_dir(upper.join("d")).unwrap();
        std::os::unix::fs::symlink("small.txt", upper.join("l")).unwrap();
        let cs = compute(&upper, &ws).unwrap();
        let whole = |p: &str| {
            cs.changes
                .iter()
                .find(|c| c.path == p)
                .unwrap_or_else(|| panic!("{p}: {cs:?}"))
                .shown_whole()
        };
        assert!(whole("small.txt") && whole("d") && whole("l"), "{cs:?}");
        assert!(!whole("big.txt"), "cut at the per-file cap");
        assert!(!whole("bin") && !whole("bin\nnamed"), "binary");
        // Past the change set's cap a file has no diff at all.
        let mut c = cs
            .changes
            .iter()
            .find(|c| c.path == "small.txt")
            .unwrap()
            .clone();
        c.diff = None;
        assert!(!c.shown_whole());
    }

    #[test]
    fn a_journal_of_another_change_set_is_never_reused() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("a.txt"), "one\n").unwrap();
        let (upper, _) = create_layers(&data, 9).unwrap();
        fs::write(upper.join("a.txt"), "two\n").unwrap();
        let cs = compute(&upper, &ws).unwrap();
        let mut m = manifest(9, &ws, cs);
        apply(&data, &m).unwrap();
        assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");
        // The same job later holds another change set (a re-run after a crash): its apply must
        // not take the first journal for its own.
        fs::write(upper.join("b.txt"), "new\n").unwrap();
        m.change_set = compute(&upper, &ws).unwrap();
        let e = apply(&data, &m).unwrap_err().to_string();
        assert!(e.contains("another change set"), "{e}");
        assert!(!ws.join("b.txt").exists());
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_run_never_redirects_the_apply() {
        // The run modified `d/x`; before the apply, a concurrent command replaced `d` with a
        // symlink to a directory outside holding an identical `x` (so a check that followed
        // the symlink would see the expected state). Nothing outside may change.
        let t = tempfile::tempdir().unwrap();
        let (ws, data, outside) = (
            t.path().join("ws"),
            t.path().join("data"),
            t.path().join("outside"),
        );
        fs::create_dir_all(ws.join("d")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(ws.join("d/x"), "same\n").unwrap();
        let (upper, _) = create_layers(&data, 8).unwrap();
        fs::create_dir(upper.join("d")).unwrap();
        fs::write(upper.join("d/x"), "attacker\n").unwrap();
        let cs = compute(&upper, &ws).unwrap();
        assert_eq!(cs.counts(), (0, 1, 0), "{cs:?}");
        fs::write(outside.join("x"), "same\n").unwrap();
        fs::remove_file(ws.join("d/x")).unwrap();
        fs::remove_dir(ws.join("d")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("d")).unwrap();
        let m = manifest(8, &ws, cs);
        let e = apply(&data, &m).unwrap_err().to_string();
        assert!(e.contains("conflict") && e.contains("special"), "{e}");
        assert_eq!(fs::read_to_string(outside.join("x")).unwrap(), "same\n");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[test]
    fn a_conflicting_edit_refuses_the_apply() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("a.txt"), "one\n").unwrap();
        let (upper, _) = create_layers(&data, 1).unwrap();
        fs::write(upper.join("a.txt"), "two\n").unwrap();
        let cs = compute(&upper, &ws).unwrap();
        fs::write(ws.join("a.txt"), "someone else\n").unwrap();
        let m = Manifest {
            job_id: 1,
            command: "x".into(),
            command_hash: "h".into(),
            effect_hash: String::new(),
            workspace: ws.clone(),
            workdir: ws.clone(),
            exit_code: Some(0),
            success: true,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            duration_ms: 0,
            sandbox: String::new(),
            signatures: vec![],
            change_set: cs,
            created_at: 0,
            client_id: "local".into(),
            upper_bytes: 0,
            signal: None,
            timed_out: false,
            timeout_ms: 0,
            action: None,
            result: None,
        };
        let e = apply(&data, &m).unwrap_err().to_string();
        assert!(e.contains("conflict"), "{e}");
        assert_eq!(
            fs::read_to_string(ws.join("a.txt")).unwrap(),
            "someone else\n"
        );
    }

    #[test]
    fn a_symlink_in_the_lower_layer_is_never_followed_and_its_replacement_applies() {
        // Workspace: `evil -> outside`, `a/evil -> outside`; the command replaced both with
        // directories holding a file named like the outside one. Nothing outside may be read.
        let t = tempfile::tempdir().unwrap();
        let (ws, data, outside) = (
            t.path().join("ws"),
            t.path().join("data"),
            t.path().join("outside"),
        );
        fs::create_dir_all(ws.join("a")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "CANARY\n").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("evil")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("a/evil")).unwrap();
        let (upper, _) = create_layers(&data, 3).unwrap();
        for d in ["evil", "a/evil"] {
            fs::create_dir_all(upper.join(d)).unwrap();
            fs::write(upper.join(d).join("secret"), "x\n").unwrap();
        }
        let cs = compute(&upper, &ws).unwrap();
        let all = serde_json::to_string(&cs).unwrap();
        assert!(!all.contains("CANARY"), "{all}");
        let link = format!("link:{}", outside.display());
        for d in ["evil", "a/evil"] {
            let of = |p: &str| {
                cs.changes
                    .iter()
                    .filter(|c| c.path == p)
                    .map(|c| (c.kind, c.before.clone(), c.after.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                of(d),
                vec![
                    (Kind::Deleted, Some(link.clone()), None),
                    (Kind::Added, None, Some("dir".into()))
                ],
                "{cs:?}"
            );
            let secret = of(&format!("{d}/secret"));
            assert_eq!(secret.len(), 1, "{cs:?}");
            assert_eq!(secret[0].0, Kind::Added, "never `modified`: {cs:?}");
            assert_eq!(secret[0].1, None);
        }
        assert!(cs.diff().contains("+x"), "{}", cs.diff());
        let m = manifest(3, &ws, cs);
        let j = apply(&data, &m).unwrap();
        assert_eq!(fs::read_to_string(ws.join("a/evil/secret")).unwrap(), "x\n");
        assert!(fs::symlink_metadata(ws.join("evil")).unwrap().is_dir());
        assert_eq!(
            fs::read_to_string(outside.join("secret")).unwrap(),
            "CANARY\n"
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
        undo(&data, &j).unwrap();
        assert_eq!(fs::read_link(ws.join("evil")).unwrap(), outside);
        assert_eq!(fs::read_link(ws.join("a/evil")).unwrap(), outside);
        assert_eq!(
            fs::read_to_string(outside.join("secret")).unwrap(),
            "CANARY\n"
        );
    }

    #[test]
    fn a_lower_symlink_to_a_file_is_shown_as_a_link_never_its_content() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data, outside) = (
            t.path().join("ws"),
            t.path().join("data"),
            t.path().join("outside"),
        );
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "CANARY\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), ws.join("s")).unwrap();
        let (upper, _) = create_layers(&data, 4).unwrap();
        fs::write(upper.join("s"), "x\n").unwrap();
        // A new symlink in the upper layer to the outside file: a link, never its content.
        std::os::unix::fs::symlink(outside.join("secret"), upper.join("t")).unwrap();
        let cs = compute(&upper, &ws).unwrap();
        let all = serde_json::to_string(&cs).unwrap() + &cs.diff();
        assert!(!all.contains("CANARY"), "{all}");
        assert!(
            all.contains(&format!("link:{}", outside.join("secret").display())),
            "{all}"
        );
    }

    #[test]
    fn setuid_and_setgid_bits_are_recorded_removed_shown_and_never_applied() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("tool"), "v1\n").unwrap();
        fs::set_permissions(ws.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
        let (upper, _) = create_layers(&data, 5).unwrap();
        fs::write(upper.join("tool"), "v1\n").unwrap();
        fs::set_permissions(upper.join("tool"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(upper.join("new"), "n\n").unwrap();
        fs::set_permissions(upper.join("new"), fs::Permissions::from_mode(0o2750)).unwrap();
        let cs = compute(&upper, &ws).unwrap();
        // `tool` only gained the bit: stripped, it equals the lower state — no change at all.
        assert_eq!(cs.changes.len(), 1, "{cs:?}");
        let c = &cs.changes[0];
        assert_eq!(c.path, "new");
        assert!(c.privilege_bits_removed);
        assert!(c.after.as_deref().unwrap().ends_with(":750"), "{c:?}");
        assert!(
            cs.diff().contains("setuid/setgid bit; it is removed"),
            "{}",
            cs.diff()
        );
        assert!(
            cs.summary().contains("setuid/setgid removed from 1 file"),
            "{}",
            cs.summary()
        );
        apply(&data, &manifest(5, &ws, cs)).unwrap();
        let mode = fs::metadata(ws.join("new")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        assert_eq!(
            fs::metadata(ws.join("tool")).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn pending_bytes_sums_one_clients_manifests() {
        let t = tempfile::tempdir().unwrap();
        let (ws, data) = (t.path().join("ws"), t.path().join("data"));
        fs::create_dir_all(&ws).unwrap();
        assert_eq!(pending_bytes(&data, "local").unwrap(), 0);
        for (id, client, bytes) in [(1, "local", 100), (2, "agent", 1000), (3, "local", 10)] {
            create_layers(&data, id).unwrap();
            let mut m = manifest(id, &ws, ChangeSet::default());
            m.client_id = client.into();
            m.upper_bytes = bytes;
            save_manifest(&data, &m).unwrap();
        }
        assert_eq!(pending_bytes(&data, "local").unwrap(), 110);
        assert_eq!(pending_bytes(&data, "agent").unwrap(), 1000);
        // A manifest written before these fields existed still loads (no client, no bytes).
        let p = job_dir(&data, 1).join("manifest.json");
        let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("client_id");
        v.as_object_mut().unwrap().remove("upper_bytes");
        write_durable(&p, v.to_string().as_bytes()).unwrap();
        unindex(&data, 1); // as save_manifest does
        assert_eq!(load_manifest(&data, 1).unwrap().unwrap().upper_bytes, 0);
        assert_eq!(pending_bytes(&data, "local").unwrap(), 10);
        // A job dir removed by something else is gone from the next listing; one re-created
        // under the same job (another inode) is read again.
        fs::remove_dir_all(job_dir(&data, 3)).unwrap();
        assert_eq!(pending_bytes(&data, "local").unwrap(), 0);
        // Moved away (not removed), so the new dir cannot reuse its inode.
        fs::rename(job_dir(&data, 2), t.path().join("old2")).unwrap();
        create_layers(&data, 2).unwrap();
        let mut m = manifest(2, &ws, ChangeSet::default());
        m.client_id = "agent".into();
        m.upper_bytes = 7;
        write_durable(
            &job_dir(&data, 2).join("manifest.json"),
            &serde_json::to_vec(&m).unwrap(),
        )
        .unwrap();
        assert_eq!(pending_bytes(&data, "agent").unwrap(), 7);
    }
}
