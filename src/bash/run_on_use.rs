//! What the operator's tools run or obey (issue 48): this module owns *the knowledge of which
//! workspace paths, environments and manifest fields each program runs or obeys when the
//! operator uses it for something other than running that very file* — the run-on-use part of each program's
//! entry (`src/programs/*.toml`, `crate::programs`), with its examples — and the pure judgements that need only that knowledge:
//! the rules a path may match, whether a path lies in a program's environment, which keys of a
//! manifest change a human must see ([`offending_keys`]). `bash::protected::judge` is the one
//! decision that uses it; `bash::changes` records a manifest's keys when it computes a change set.
//!
//! Data lifts only the dot-file rule (`permset::DATA`), and only for content no known tool
//! executes: every rule here is consulted before it.

use anyhow::{Context, Result};
use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::OnceLock;

pub use crate::programs::{
    Environment, Examples, Format, Manifest, ManifestExample, Placeholder, Rule, RunOnUse as Entry,
};

/// Bytes of a manifest read to judge its keys; a larger one asks.
pub const MAX_MANIFEST: u64 = 1024 * 1024;

/// A named environment's run-on-use paths, as workspace globs (`**/.venv/bin/**`).
struct Marked {
    marker: String,
    run: GlobSet,
    why: String,
}

struct CompiledManifest {
    paths: GlobSet,
    except: GlobSet,
    manifest: Manifest,
    program: String,
}

/// The file, loaded and compiled once.
pub struct Knowledge {
    /// (program key, entry), in key order.
    pub entries: Vec<(String, Entry)>,
    /// (glob, why) of every path rule and every named environment's run paths.
    pub rules: Vec<(String, String)>,
    marked: Vec<Marked>,
    manifests: Vec<CompiledManifest>,
}

/// A glob of a workspace path: `*` never crosses a `/`.
pub fn glob(p: &str) -> Result<Glob> {
    GlobBuilder::new(p)
        .literal_separator(true)
        .build()
        .with_context(|| format!("path pattern {p:?}"))
}

/// A glob set of patterns where `X/**` also matches `X`; `idx[i]`: the pattern of glob `i`.
pub fn globs<'a>(patterns: impl Iterator<Item = &'a str>) -> Result<(GlobSet, Vec<usize>)> {
    let mut b = GlobSetBuilder::new();
    let mut idx = Vec::new();
    for (i, p) in patterns.enumerate() {
        b.add(glob(p)?);
        idx.push(i);
        if let Some(dir) = p.strip_suffix("/**") {
            b.add(glob(dir)?);
            idx.push(i);
        }
    }
    Ok((b.build().context("path patterns")?, idx))
}

/// The run-on-use knowledge of the program table in use (compiled once; Err: a glob of the
/// table does not compile, which `programs check` and start-up refuse first).
pub fn knowledge() -> Result<&'static Knowledge> {
    static K: OnceLock<std::result::Result<Knowledge, String>> = OnceLock::new();
    K.get_or_init(|| {
        crate::programs::table()
            .and_then(compile)
            .map_err(|e| format!("{e:#}"))
    })
    .as_ref()
    .map_err(|e| anyhow::anyhow!("the program table's run-on-use rules: {e}"))
}

/// Compiles the run-on-use knowledge of a program table.
pub fn compile(t: &crate::programs::Table) -> Result<Knowledge> {
    let mut rules = Vec::new();
    let mut marked = Vec::new();
    let mut manifests = Vec::new();
    let mut entries = Vec::new();
    let mut sorted: Vec<&crate::programs::Entry> = t.programs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for p in sorted {
        let Some(e) = p.run_on_use.clone() else {
            continue;
        };
        let key = p.name.clone();
        for r in &e.rules {
            globs(r.paths.iter().map(String::as_str)).with_context(|| p.origin.to_string())?;
            rules.extend(r.paths.iter().map(|p| (p.clone(), r.why.clone())));
        }
        for env in &e.environments {
            for n in &env.names {
                rules.extend(
                    env.run
                        .iter()
                        .map(|r| (format!("**/{n}/{r}"), env.why.clone())),
                );
            }
            if let Some(m) = &env.marker {
                marked.push(Marked {
                    marker: m.clone(),
                    run: globs(env.run.iter().map(String::as_str))?.0,
                    why: env.why.clone(),
                });
            }
        }
        for m in &e.manifests {
            manifests.push(CompiledManifest {
                paths: globs(m.paths.iter().map(String::as_str))?.0,
                except: globs(m.except.iter().map(String::as_str))?.0,
                manifest: m.clone(),
                program: key.clone(),
            });
        }
        entries.push((key, e));
    }
    // every glob compiles
    globs(rules.iter().map(|(p, _)| p.as_str()))?;
    Ok(Knowledge {
        entries,
        rules,
        marked,
        manifests,
    })
}

impl Knowledge {
    /// The markers that make a directory an environment (`pyvenv.cfg`).
    pub fn markers(&self) -> BTreeSet<&str> {
        self.marked.iter().map(|m| m.marker.as_str()).collect()
    }

    /// Whether `rel` (relative to a directory holding `marker`) is run-on-use there: why.
    pub fn in_marked(&self, marker: &str, rel: &str) -> Option<&str> {
        self.marked
            .iter()
            .find(|m| m.marker == marker && m.run.is_match(rel))
            .map(|m| m.why.as_str())
    }

    /// The manifest `rel` is (judged key by key), with the program it belongs to.
    pub fn manifest_of(&self, rel: &str) -> Option<(&str, &Manifest)> {
        self.manifests
            .iter()
            .find(|m| m.paths.is_match(rel) && !m.except.is_match(rel))
            .map(|m| (m.program.as_str(), &m.manifest))
    }

    /// Whether some manifest of `node_modules` packages linked from `.bin` is run-on-use.
    pub fn linked_bins(&self) -> bool {
        self.manifests.iter().any(|m| m.manifest.linked_bins)
    }

    /// The entry that speaks for `name`.
    pub fn entry_for(&self, name: &str) -> Option<(&str, &Entry)> {
        self.entries
            .iter()
            .find(|(_, e)| e.names.iter().any(|n| n == name))
            .map(|(k, e)| (k.as_str(), e))
    }
}

/// The "Protected paths" section of `docs/permission-sets.md`: git's rule, then each program's
/// paths, environments and manifests, then the data list (`tests/permsets.rs` renders it with
/// the sets and checks the document).
pub fn markdown(git: (&str, &str), data: &[&str]) -> Result<String> {
    let k = knowledge()?;
    let mut o = String::from(
        "\n## Protected paths\n\n\
         What the filesystem set's change sets never apply without a human, whatever was learned,\n\
         promoted, a reviewer said or a client's `auto` grant allows (`bash::protected`; the prompt\n\
         names the rule and why). The rules: [security.md](security.md#protected-paths). Generated\n\
         from the program entries, `src/programs/*.toml`.\n\n\
         | program | protected | why |\n|---|---|---|\n",
    );
    o.push_str(&format!("| git | `{}` | {} |\n", git.0, git.1));
    let cell = |v: &[String]| {
        v.iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (key, e) in &k.entries {
        for r in &e.rules {
            o.push_str(&format!("| {key} | {} | {} |\n", cell(&r.paths), r.why));
        }
        for env in &e.environments {
            let mut at = cell(&env.names);
            if let Some(m) = &env.marker {
                at.push_str(&format!(", any directory holding `{m}`"));
            }
            o.push_str(&format!(
                "| {key} | {}, in {at} | {} |\n",
                cell(&env.run),
                env.why
            ));
        }
        for m in &e.manifests {
            let mut allowed = cell(&m.inert);
            if !m.deps.is_empty() {
                allowed.push_str(&format!("; registry versions in {}", cell(&m.deps)));
            }
            let linked = if m.linked_bins {
                "; the `package.json` of a package `node_modules/.bin` links to: always"
            } else {
                ""
            };
            o.push_str(&format!(
                "| {key} | {} (not in {}), a change of any key but {allowed}{linked} | {} |\n",
                cell(&m.paths),
                cell(&m.except),
                m.why
            ));
        }
    }
    o.push_str("\nRun or obey nothing of the workspace (each entry says why): ");
    let none: Vec<String> = k
        .entries
        .iter()
        .filter(|(_, e)| e.none.is_some())
        .map(|(key, _)| key.clone())
        .collect();
    o.push_str(&none.join(", "));
    o.push_str(".\n\nData (lifts only the default rule for dot-files): ");
    o.push_str(
        &data
            .iter()
            .map(|d| format!("`{d}`"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    o.push_str(".\n");
    Ok(o)
}

/// The keys of a manifest change that a human must see: those it adds, changes or removes that
/// are neither inert, nor a dependency on a registry version, nor a placeholder. `before` /
/// `after`: the file's bytes (None: absent). A side that cannot be parsed is one offending key,
/// `(the whole file: …)`.
pub fn offending_keys(m: &Manifest, before: Option<&[u8]>, after: Option<&[u8]>) -> Vec<String> {
    let parse = |b: Option<&[u8]>| -> std::result::Result<Value, String> {
        let Some(b) = b else {
            return Ok(Value::Object(Map::new()));
        };
        let text = std::str::from_utf8(b).map_err(|_| "not UTF-8".to_string())?;
        match m.format {
            Format::Json => serde_json::from_str(text).map_err(|e| e.to_string()),
            Format::Toml => toml::from_str::<toml::Value>(text)
                .map_err(|e| e.message().to_string())
                .and_then(|v| serde_json::to_value(v).map_err(|e| e.to_string())),
        }
    };
    let (b, a) = match (parse(before), parse(after)) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => {
            return vec![format!(
                "(the whole file: it cannot be read as {:?}: {e})",
                m.format
            )]
        }
    };
    let mut out = Vec::new();
    walk(m, &mut Vec::new(), Some(&b), Some(&a), &mut out);
    if !m.fields.is_empty() {
        fields(m, &b, &a, &mut out);
    }
    out
}

/// `fields`, keys that always ask: added to what the allowlist found, or — a manifest with
/// no allowlist (an operator's) — the only keys that ask.
fn fields(m: &Manifest, b: &Value, a: &Value, out: &mut Vec<String>) {
    let bare = Manifest {
        inert: Vec::new(),
        deps: Vec::new(),
        placeholders: Vec::new(),
        ..m.clone()
    };
    let mut changed = Vec::new();
    walk(&bare, &mut Vec::new(), Some(b), Some(a), &mut changed);
    let hit = |k: &String| {
        covered_by(k, &m.fields) || m.fields.iter().any(|f| f.starts_with(&format!("{k}.")))
    };
    if m.inert.is_empty() && m.deps.is_empty() && m.placeholders.is_empty() {
        out.clear();
    }
    for k in changed.into_iter().filter(hit) {
        if !out.contains(&k) {
            out.push(k);
        }
    }
}

fn covered_by(key: &str, list: &[String]) -> bool {
    list.iter().any(|i| {
        key == i
            || key
                .strip_prefix(i.as_str())
                .is_some_and(|r| r.starts_with('.'))
    })
}

fn walk(
    m: &Manifest,
    path: &mut Vec<String>,
    b: Option<&Value>,
    a: Option<&Value>,
    out: &mut Vec<String>,
) {
    if b == a {
        return;
    }
    let key = path.join(".");
    if covered_by(&key, &m.inert) {
        return;
    }
    let placeholder = |v: Option<&Value>| {
        v.is_none_or(|v| {
            m.placeholders
                .iter()
                .any(|p| p.key == key && v.as_str() == Some(p.value.as_str()))
        })
    };
    if m.placeholders.iter().any(|p| p.key == key) && placeholder(b) && placeholder(a) {
        return;
    }
    if m.deps.contains(&key) {
        deps(&key, b, a, out);
        return;
    }
    let empty = Map::new();
    fn obj<'a>(
        v: Option<&'a Value>,
        empty: &'a Map<String, Value>,
    ) -> Option<&'a Map<String, Value>> {
        match v {
            None => Some(empty),
            Some(v) => v.as_object(),
        }
    }
    if let (Some(bo), Some(ao)) = (obj(b, &empty), obj(a, &empty)) {
        let keys: BTreeSet<&String> = bo.keys().chain(ao.keys()).collect();
        for k in keys {
            path.push(k.clone());
            walk(m, path, bo.get(k), ao.get(k), out);
            path.pop();
        }
        return;
    }
    out.push(if key.is_empty() {
        "(the whole file)".into()
    } else {
        key
    });
}

/// A dependency table (or list) changed: each entry that changed must now be a registry
/// version, or gone.
fn deps(key: &str, b: Option<&Value>, a: Option<&Value>, out: &mut Vec<String>) {
    if a.is_some_and(Value::is_array) || (a.is_none() && b.is_some_and(Value::is_array)) {
        if !a.is_none_or(registry) {
            out.push(key.to_string());
        }
        return;
    }
    let empty = Map::new();
    let (Some(bo), Some(ao)) = (
        b.map_or(Some(&empty), Value::as_object),
        a.map_or(Some(&empty), Value::as_object),
    ) else {
        out.push(key.to_string());
        return;
    };
    let names: BTreeSet<&String> = bo.keys().chain(ao.keys()).collect();
    for n in names {
        if bo.get(n) != ao.get(n) && !ao.get(n).is_none_or(registry) {
            out.push(format!("{key}.{n}"));
        }
    }
}

/// A dependency on a registry version: a version requirement (`^1.2`, `~1`, `1.x`, `latest`,
/// `requests>=2`, `npm:other@^1`), a cargo table of only `version` and its features, or a list
/// of such requirements. Never a path, `file:`, `link:`, `workspace:`, git, URL or `user/repo`
/// spec, nor a PEP 508 direct reference (`name @ URL`).
fn registry(v: &Value) -> bool {
    const CARGO_KEYS: &[&str] = &[
        "version",
        "features",
        "optional",
        "default-features",
        "default_features",
        "package",
    ];
    match v {
        Value::String(s) => registry_str(s),
        Value::Array(items) => items.iter().all(|i| i.as_str().is_some_and(registry_str)),
        Value::Object(o) => {
            o.get("version")
                .and_then(Value::as_str)
                .is_some_and(registry_str)
                && o.keys().all(|k| CARGO_KEYS.contains(&k.as_str()))
                && o.get("package")
                    .is_none_or(|p| p.as_str().is_some_and(registry_str))
        }
        _ => false,
    }
}

fn registry_str(s: &str) -> bool {
    let s = s.trim();
    if let Some(alias) = s.strip_prefix("npm:") {
        return !alias.contains(':') && !alias.starts_with(['.', '/', '~']);
    }
    !s.contains([':', '/', '@', '\\']) && !s.starts_with('.')
}

#[cfg(test)]
mod tests;
