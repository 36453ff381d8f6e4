//! `read_code`'s directory mode (issue 25): owns the bounded walk of a granted directory. Every
//! read goes through `fs::beneath` on the directory's descriptor (no symlink followed in any
//! component, a planted symlink is listed as skipped, never read); `.gitignore` files are read
//! the same way and applied with the `ignore` crate's gitignore matcher (nested files, negations);
//! hidden entries and `.git` are skipped; only files the grant covers and whose language is known
//! are read. Caps (files, bytes per file, bytes in all, entries visited, depth) end the walk and
//! are stated in the result.

use super::language_of;
use crate::clients::paths::OpenedDir;
use crate::fs::beneath::{Beneath, Kind, Lookup};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    pub max_files: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    pub max_entries: usize,
    pub max_depth: usize,
}

pub const DEFAULT_LIMITS: Limits = Limits {
    max_files: 200,
    max_file_bytes: 1024 * 1024,
    max_total_bytes: 8 * 1024 * 1024,
    max_entries: 20_000,
    max_depth: 32,
};

/// What the walk found.
#[derive(Debug, Default)]
pub struct Walked {
    /// (path relative to the directory, content), in walk order (sorted names).
    pub files: Vec<(String, String)>,
    /// Entries not read, with why (symlinks, too large, not UTF-8, not granted).
    pub skipped: Vec<Value>,
    /// Entries matched by a .gitignore.
    pub ignored: usize,
    /// Which cap ended the walk early, if one did.
    pub truncated: Option<String>,
}

const GITIGNORE_MAX_BYTES: u64 = 256 * 1024;
/// Skipped entries listed at most (the count goes on).
const MAX_SKIPPED_LISTED: usize = 200;

struct Dir {
    rel: String,
    depth: usize,
    /// The .gitignore matchers in force, outermost first.
    ignores: Vec<std::sync::Arc<Gitignore>>,
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The gitignore of `dir` read beneath the root (None when there is none).
fn gitignore(b: &Beneath, dir: &str) -> Option<Gitignore> {
    let bytes = b
        .read_up_to(&join(dir, ".gitignore"), GITIGNORE_MAX_BYTES)
        .ok()??;
    let root = Path::new("/").join(dir);
    let mut gb = GitignoreBuilder::new(&root);
    for line in String::from_utf8_lossy(&bytes).lines() {
        // A bad line is skipped, like git does.
        let _ = gb.add_line(None, line);
    }
    gb.build().ok()
}

fn ignored(ignores: &[std::sync::Arc<Gitignore>], rel: &str, is_dir: bool) -> bool {
    let p: PathBuf = Path::new("/").join(rel);
    for g in ignores.iter().rev() {
        match g.matched(&p, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

impl Walked {
    fn skip(&mut self, rel: &str, why: &str) {
        if self.skipped.len() < MAX_SKIPPED_LISTED {
            self.skipped.push(json!({"path": rel, "why": why}));
        }
    }
}

/// Walks the opened directory within `limits`.
pub fn walk(dir: &OpenedDir, b: &Beneath, limits: Limits) -> Walked {
    let mut out = Walked::default();
    let (mut entries, mut bytes) = (0usize, 0u64);
    let mut stack = vec![Dir {
        rel: String::new(),
        depth: 0,
        ignores: vec![],
    }];
    'dirs: while let Some(d) = stack.pop() {
        let mut ignores = d.ignores.clone();
        if let Some(g) = gitignore(b, &d.rel) {
            ignores.push(std::sync::Arc::new(g));
        }
        let names = match b.list(&d.rel) {
            Ok(n) => n,
            Err(e) => {
                out.skip(&d.rel, &format!("cannot list: {e:#}"));
                continue;
            }
        };
        let mut subdirs = vec![];
        for name in names {
            entries += 1;
            if entries > limits.max_entries {
                out.truncated = Some(format!("more than {} entries", limits.max_entries));
                break 'dirs;
            }
            if name.starts_with('.') {
                continue;
            }
            let rel = join(&d.rel, &name);
            let meta = match b.lookup(&rel) {
                Ok(Lookup::Found(m)) => m,
                Ok(_) => continue,
                Err(e) => {
                    out.skip(&rel, &format!("cannot stat: {e:#}"));
                    continue;
                }
            };
            let is_dir = meta.kind == Kind::Dir;
            if ignored(&ignores, &rel, is_dir) {
                out.ignored += 1;
                continue;
            }
            match meta.kind {
                Kind::Dir if dir.denied(&rel) => out.skip(&rel, "not readable by any client"),
                Kind::Dir if d.depth + 1 > limits.max_depth => {
                    out.skip(&rel, "deeper than max_depth")
                }
                Kind::Dir => subdirs.push(rel),
                Kind::Link => out.skip(&rel, "symlink (never followed)"),
                Kind::File if language_of(Path::new(&name)).is_none() => {}
                Kind::File => {
                    if out.files.len() >= limits.max_files {
                        out.truncated = Some(format!("more than {} files", limits.max_files));
                        break 'dirs;
                    }
                    if let Some(why) =
                        read_one(dir, b, &rel, meta.size, &mut bytes, limits, &mut out)
                    {
                        out.skip(&rel, &why);
                    }
                    if out.truncated.is_some() {
                        break 'dirs;
                    }
                }
                _ => out.skip(&rel, "not a regular file"),
            }
        }
        // Depth first, names in order: push in reverse so the first name is walked first.
        for rel in subdirs.into_iter().rev() {
            stack.push(Dir {
                rel,
                depth: d.depth + 1,
                ignores: ignores.clone(),
            });
        }
    }
    out
}

/// Reads one file into `out.files`; Some(why) when it is skipped.
fn read_one(
    dir: &OpenedDir,
    b: &Beneath,
    rel: &str,
    size: u64,
    bytes: &mut u64,
    limits: Limits,
    out: &mut Walked,
) -> Option<String> {
    if !dir.covers(rel) {
        return Some(format!("not covered by the grant {}", dir.grant));
    }
    if size > limits.max_file_bytes {
        return Some(format!("larger than {} bytes", limits.max_file_bytes));
    }
    if *bytes + size > limits.max_total_bytes {
        out.truncated = Some(format!("more than {} bytes in all", limits.max_total_bytes));
        return None;
    }
    match b.read_up_to(rel, limits.max_file_bytes) {
        Ok(Some(content)) => {
            *bytes += content.len() as u64;
            match String::from_utf8(content) {
                Ok(text) => {
                    out.files.push((rel.to_string(), text));
                    None
                }
                Err(_) => Some("not UTF-8 text".into()),
            }
        }
        // Replaced (by a symlink, say) between the listing and the read: never followed.
        Ok(None) => Some("no longer a regular file of at most max_file_bytes".into()),
        Err(e) => Some(format!("cannot read: {e:#}")),
    }
}
