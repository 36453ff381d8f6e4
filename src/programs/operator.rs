//! An operator's program entries (`programs.d/` beside the configuration file, and
//! `[programs] dirs`): this module owns *what an operator's entry may do to the table* — add
//! programs, and add run-on-use paths, manifest fields, blocks, executing flags and stricter
//! subcommands to a built-in program; never remove or weaken what a built-in entry protects,
//! blocks or asks — and *where such a file may live* (not in the workspace or a readable root,
//! writable by nobody but root and the worker's user).

use super::{Entry, Learn, Origin, Table};
use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `[programs]` of the configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// More directories of entries (`*.toml`), read after `programs.d/` beside the config file.
    pub dirs: Vec<PathBuf>,
}

/// A refusal: the operator's file and line, what it tried, and the built-in rule it meets.
fn refuse(at: &Origin, line: usize, what: &str, rule: &Origin) -> anyhow::Error {
    anyhow!(
        "{}:{line}: {what} — an operator's entry may add to a built-in program, never weaken it (the built-in rule: {rule})",
        at.file
    )
}

/// The line of `file` at or after `from` that holds `needle` quoted (`"-exec"`), else `from`.
fn line_of(text: &str, from: usize, needle: &str) -> usize {
    let q = format!("\"{needle}\"");
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| l.contains(&q))
        .map(|(i, _)| i + 1)
        .unwrap_or(from)
}

/// Why `path` may not hold entries the worker trusts, if it may not: inside `forbidden` (the
/// workspace, a readable root), a symlink, or writable by someone other than root and `uid`.
pub fn unsafe_place(path: &Path, forbidden: &[PathBuf], uid: u32) -> Option<String> {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(f) = forbidden.iter().find(|f| {
        let f = std::fs::canonicalize(f).unwrap_or_else(|_| f.to_path_buf());
        abs.starts_with(&f)
    }) {
        return Some(format!(
            "it lies inside {}, which jobs can write or read: keep program entries beside the configuration",
            f.display()
        ));
    }
    let md = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot read it: {e}")),
    };
    if md.file_type().is_symlink() {
        return Some("it is a symbolic link: name the file itself".into());
    }
    if md.uid() != 0 && md.uid() != uid {
        return Some(format!(
            "it belongs to uid {}: only root or the worker's user (uid {uid}) may own it",
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Some(format!(
            "its mode {:o} lets others write it: chmod go-w",
            md.mode() & 0o7777
        ));
    }
    None
}

/// The `*.toml` files of the operator's directories, in name order per directory; a missing
/// implicit `programs.d` is no error, a missing named directory is.
pub fn files(implicit: Option<&Path>, dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let all = implicit
        .filter(|d| d.exists())
        .map(|d| (d.to_path_buf(), false))
        .into_iter()
        .chain(dirs.iter().map(|d| (d.clone(), true)));
    for (dir, named) in all {
        let rd = match std::fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) if !named && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => bail!(
                "[programs] dirs: cannot read {}: {e} (create it or remove it from the list)",
                dir.display()
            ),
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        v.sort();
        out.push(dir);
        out.extend(v);
    }
    Ok(out)
}

/// The table: the built-in one with the operator's files merged in. `places` are the files and
/// directories of [`files`]; each must pass [`unsafe_place`].
pub fn load(builtin: Table, places: &[PathBuf], forbidden: &[PathBuf], uid: u32) -> Result<Table> {
    let mut t = builtin;
    for p in places {
        if let Some(why) = unsafe_place(p, forbidden, uid) {
            bail!("program entries {}: refused: {why}", p.display());
        }
        if p.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(p)
            .map_err(|e| anyhow!("program entries {}: {e}", p.display()))?;
        merge(&mut t, &p.display().to_string(), &text)?;
    }
    super::unique(&t)?;
    Ok(t)
}

/// Merges one operator file (`file`, its `text`) into `t`.
pub fn merge(t: &mut Table, file: &str, text: &str) -> Result<()> {
    let part = super::parse(file, text, false)?;
    if let Some(f) = part.families.first() {
        bail!(
            "{file}: family {:?}: families are built-in only (a family widens what one approval teaches)",
            f.name
        );
    }
    for w in part.wrappers {
        let names: Vec<&String> = std::iter::once(&w.spec.name)
            .chain(&w.spec.aliases)
            .collect();
        if let Some(b) = t.wrappers.iter().find(|b| {
            std::iter::once(&b.spec.name)
                .chain(&b.spec.aliases)
                .any(|n| names.contains(&n))
        }) {
            return Err(refuse(
                &w.origin,
                w.origin.line,
                &format!("redefines the wrapper {}", b.spec.name),
                &b.origin,
            ));
        }
        t.wrappers.push(w);
    }
    for e in part.programs {
        let target = t.programs.iter().position(|b| {
            b.origin.builtin
                && (b.name == e.name || e.names().iter().any(|n| b.names().contains(n)))
        });
        match target {
            None => t.programs.push(e),
            Some(i) => extend(&mut t.programs[i], e, text)?,
        }
    }
    t.changed();
    Ok(())
}

/// Adds an operator's entry `e` to the built-in entry `b`, refusing anything that weakens it.
fn extend(b: &mut Entry, e: Entry, text: &str) -> Result<()> {
    let at = e.origin.clone();
    if let Some(n) = e.names().into_iter().find(|n| !b.names().contains(n)) {
        return Err(refuse(
            &at,
            line_of(text, at.line, n),
            &format!(
                "`aliases` would change how brainloop reads {} (`{n}` is not one of its names)",
                b.name
            ),
            &b.origin,
        ));
    }
    if e.signature.is_some() {
        return Err(refuse(
            &at,
            line_of(text, at.line, "signature"),
            &format!("`signature` would change how learning reads {}", b.name),
            &b.origin,
        ));
    }
    if let Some(spec) = &e.spec {
        let Some(bs) = b.spec.as_mut() else {
            return Err(refuse(&at, at.line, &format!("classifies {}, which the built-in entry leaves unknown (an unknown program always asks)", b.name), &b.origin));
        };
        for k in &e.keys {
            let line = text
                .lines()
                .enumerate()
                .skip(at.line)
                .find(|(_, l)| {
                    l.trim_start().starts_with(&format!("{k} "))
                        || l.trim_start().starts_with(&format!("{k}="))
                })
                .map(|(i, _)| i + 1)
                .unwrap_or(at.line);
            match k.as_str() {
                "effects" => {
                    let mut v = bs.effects.clone();
                    for x in &spec.effects {
                        if !v.contains(x) {
                            v.push(x.clone());
                        }
                    }
                    bs.effects = v;
                }
                "block" => {
                    if bs.block.is_none() {
                        bs.block = spec.block.clone();
                    }
                }
                "note" => {}
                "flag" => {
                    for f in &spec.flags {
                        let line = line_of(text, at.line, &f.opt);
                        if !f.remove.is_empty() || f.set.is_some() {
                            return Err(refuse(&at, line, &format!("{} {}: `effect = \"remove\"`/`\"set\"` takes effects away from a built-in program", b.name, f.opt), &b.origin));
                        }
                        if f.learn == Some(Learn::Neutral) {
                            return Err(refuse(&at, line, &format!("{} {}: `learn = \"neutral\"` would let learning ignore a flag of a built-in program", b.name, f.opt), &b.origin));
                        }
                        bs.flags.push(f.clone());
                    }
                }
                "subcommand" => {
                    for (name, sub) in &spec.subcommands {
                        let line = line_of(text, at.line, name);
                        let fx = &sub.effects;
                        if !sub.neutral.is_empty() || sub.operands.is_some() {
                            return Err(refuse(&at, line, &format!("{} {name}: `neutral` / `operands` would change how learning reads a built-in program", b.name), &b.origin));
                        }
                        let before = bs
                            .subcommands
                            .get(name)
                            .map_or(&bs.sub_default, |s| &s.effects)
                            .clone();
                        let lost: Vec<&String> =
                            before.iter().filter(|x| !fx.contains(x)).collect();
                        if !lost.is_empty() {
                            return Err(refuse(&at, line, &format!("{} {name}: effects {fx:?} drop {lost:?}, which the built-in entry gives it", b.name), &b.origin));
                        }
                        let kept = bs
                            .subcommands
                            .get(name)
                            .map(|s| s.neutral.clone())
                            .unwrap_or_default();
                        let operands = bs.subcommands.get(name).and_then(|s| s.operands);
                        bs.subcommands.insert(
                            name.clone(),
                            super::Sub {
                                effects: fx.clone(),
                                neutral: kept,
                                operands,
                            },
                        );
                    }
                }
                other => {
                    return Err(refuse(&at, line, &format!("`{other}` would change how brainloop reads {} (only `effects`, `block`, `note`, `flag` and `subcommand` may add to a built-in program)", b.name), &b.origin));
                }
            }
        }
    }
    if let Some(r) = e.run_on_use {
        if r.none.is_some() {
            return Err(refuse(
                &at,
                at.line,
                &format!(
                    "`run_on_use_none` says {} runs nothing of the workspace",
                    b.name
                ),
                &b.origin,
            ));
        }
        let names: Vec<String> = b.names().iter().map(|s| s.to_string()).collect();
        let br = b.run_on_use.get_or_insert_with(|| super::RunOnUse {
            names,
            ..Default::default()
        });
        br.none = None;
        br.rules.extend(r.rules);
        br.environments.extend(r.environments);
        for m in r.manifests {
            match br.manifests.iter_mut().find(|x| x.paths == m.paths) {
                Some(x) => x.fields.extend(m.fields),
                None => br.manifests.push(m),
            }
        }
        br.examples.asks.extend(r.examples.asks);
        br.examples.ordinary.extend(r.examples.ordinary);
        br.manifest_examples.extend(r.manifest_examples);
    }
    b.examples.extend(e.examples);
    Ok(())
}
