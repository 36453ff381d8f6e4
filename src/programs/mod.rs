//! What brainloop knows about each program, as data (issue 52): this module owns *the program
//! table* — the built-in entries of `src/programs/*.toml` (one file per program or family,
//! compiled in) and an operator's `programs.d/` entries, loaded into one typed table, each entry
//! naming the file and line it came from. An entry holds a program's classification (effects,
//! operands, options, subcommands, flags and how learning treats them, blocks), what it runs or
//! obeys on use, and its examples. The mechanisms stay in code: `classify` judges a command with
//! the classification, `bash::run_on_use` compiles the run-on-use rules, `bash::examples` checks
//! every example against both. An operator's entry may add, never weaken
//! (`programs::operator`).
//!
//! The table is installed once at start-up ([`install`]); before that (and in unit tests) the
//! built-in table is used. It is read-only afterwards.

mod format;
pub mod operator;

pub use format::{
    flag_given, Companion, CompanionRule, Environment, Example, Examples, Family, FlagRule, Form,
    Format, Learn, Manifest, ManifestExample, Member, MemberFlags, Names, Placeholder, ProgramSpec,
    Recursive, Refine, Rule, RunOnUse, SameAs, SignatureSpec, Sub, SubOperands, WrapperSpec,
};

use anyhow::{anyhow, bail, Context, Result};
use std::sync::OnceLock;

/// The built-in entries, compiled into the binary (the embedded default needs no file).
const BUILTIN: &[(&str, &str)] = &[
    ("archives.toml", include_str!("archives.toml")),
    ("build.toml", include_str!("build.toml")),
    ("clients.toml", include_str!("clients.toml")),
    ("editors.toml", include_str!("editors.toml")),
    ("files.toml", include_str!("files.toml")),
    ("git.toml", include_str!("git.toml")),
    ("go.toml", include_str!("go.toml")),
    ("interpreters.toml", include_str!("interpreters.toml")),
    ("network.toml", include_str!("network.toml")),
    ("node.toml", include_str!("node.toml")),
    ("packages.toml", include_str!("packages.toml")),
    ("pure.toml", include_str!("pure.toml")),
    ("python.toml", include_str!("python.toml")),
    ("readers.toml", include_str!("readers.toml")),
    ("rust.toml", include_str!("rust.toml")),
    ("shells.toml", include_str!("shells.toml")),
    ("system.toml", include_str!("system.toml")),
    ("text.toml", include_str!("text.toml")),
    ("toolchains.toml", include_str!("toolchains.toml")),
    ("wrappers.toml", include_str!("wrappers.toml")),
];

/// Environment variables and their values (or cache subdirectories).
pub type Vars<'a> = Vec<(&'a str, &'a str)>;

/// Where an entry came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `src/programs/git.toml` for a built-in entry, the file's path for an operator's.
    pub file: String,
    pub line: usize,
    pub builtin: bool,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One program's entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub origin: Origin,
    /// Its classification; None: judged as an unknown program (the entry only says what it
    /// runs on use).
    pub spec: Option<ProgramSpec>,
    /// What it runs or obeys on use; None: the entry says nothing of it.
    pub run_on_use: Option<RunOnUse>,
    /// Its examples (the path examples are also in `run_on_use`, where `bash::run_on_use`'s
    /// tests judge them).
    pub examples: Vec<Example>,
    /// The classification keys the file gives (an operator's entry may give only some).
    pub keys: Vec<String>,
    /// How a learned signature reads its arguments (also for a program it does not classify).
    pub signature: Option<SignatureSpec>,
}

impl Entry {
    /// Every name the entry's classification answers to.
    pub fn names(&self) -> Vec<&str> {
        let mut v = vec![self.name.as_str()];
        if let Some(s) = &self.spec {
            v.extend(s.aliases.iter().map(String::as_str));
        }
        v
    }
}

/// A wrapper's entry.
#[derive(Debug, Clone)]
pub struct Wrapper {
    pub spec: WrapperSpec,
    pub origin: Origin,
}

/// The loaded table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub programs: Vec<Entry>,
    pub wrappers: Vec<Wrapper>,
    /// The learning families (`[[family]]`, built-in only).
    pub families: Vec<Family>,
    /// Name → index into `programs`: classified entries (built when first asked; a merge
    /// resets it).
    index: OnceLock<std::collections::HashMap<String, usize>>,
    /// Name → index into `programs`: entries with a `signature`.
    signed: OnceLock<std::collections::HashMap<String, usize>>,
    /// Every entry's `implicitly_run` files.
    run_files: OnceLock<std::collections::HashSet<String>>,
}

impl Table {
    /// The entry whose classification answers to `name`.
    pub fn classified(&self, name: &str) -> Option<&Entry> {
        let index = self
            .index
            .get_or_init(|| self.index_of(|e| e.spec.is_some()));
        index.get(name).map(|i| &self.programs[*i])
    }

    /// Name → index of the entries `which` selects (the first entry for a name wins).
    fn index_of(&self, which: impl Fn(&Entry) -> bool) -> std::collections::HashMap<String, usize> {
        let mut m = std::collections::HashMap::new();
        for (i, e) in self.programs.iter().enumerate().filter(|(_, e)| which(e)) {
            for n in e.names() {
                m.entry(n.to_string()).or_insert(i);
            }
        }
        m
    }

    /// The table's entries changed (an operator's merge): the indexes are built again.
    pub fn changed(&mut self) {
        self.index = OnceLock::new();
        self.signed = OnceLock::new();
        self.run_files = OnceLock::new();
    }

    /// Whether some program runs a file named `name` by itself when it builds, installs or
    /// tests (an entry's `implicitly_run`).
    pub fn implicitly_run(&self, name: &str) -> bool {
        self.run_files
            .get_or_init(|| {
                self.programs
                    .iter()
                    .filter_map(|e| e.spec.as_ref())
                    .flat_map(|s| s.implicitly_run.iter().cloned())
                    .collect()
            })
            .contains(name)
    }

    /// Every entry's runner environment: (variable, subdirectory of the runner cache) and
    /// (variable, value), each variable once.
    pub fn runner_env(&self) -> (Vars<'_>, Vars<'_>) {
        let specs = || self.programs.iter().filter_map(|e| e.spec.as_ref());
        let caches = specs()
            .flat_map(|s| &s.runner_env.caches)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let set = specs()
            .flat_map(|s| &s.runner_env.set)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        (caches, set)
    }

    /// The companions of `program` (one of its entry's names) with subcommand `sub` ("" for
    /// none) and arguments `args`.
    pub fn companions(&self, program: &str, sub: &str, args: &[String]) -> Vec<&Companion> {
        let Some(s) = self.spec(program) else {
            return Vec::new();
        };
        s.companions
            .iter()
            .filter(|r| {
                r.names.has(program)
                    && (r
                        .subcommands
                        .iter()
                        .any(|s| s == sub || (s == "*" && !sub.is_empty()))
                        || (r.subcommands.is_empty() && sub.is_empty()))
                    && r.flag
                        .as_deref()
                        .is_none_or(|f| args.iter().any(|a| flag_given(a, f)))
            })
            .map(|r| &r.companion)
            .collect()
    }

    /// Whether `program`'s entry says `key` of it (`bash::signatures`: `|s| &s.runner`).
    pub fn signs(&self, program: &str, key: impl Fn(&SignatureSpec) -> &Names) -> bool {
        self.signature(program).is_some_and(|s| key(s).has(program))
    }

    /// The signature knowledge of the entry that answers to `program`.
    pub fn signature(&self, program: &str) -> Option<&SignatureSpec> {
        let index = self
            .signed
            .get_or_init(|| self.index_of(|e| e.signature.is_some()));
        index
            .get(program)
            .and_then(|i| self.programs[*i].signature.as_ref())
    }

    /// Every entry that says something of `name` (its classification, or its run-on-use
    /// knowledge speaks for it, or it is its name).
    pub fn about(&self, name: &str) -> Vec<&Entry> {
        self.programs
            .iter()
            .filter(|e| {
                e.names().contains(&name)
                    || e.run_on_use
                        .as_ref()
                        .is_some_and(|r| r.names.iter().any(|n| n == name))
            })
            .collect()
    }

    /// The classification of the entry that answers to `name`.
    pub fn spec(&self, name: &str) -> Option<&ProgramSpec> {
        self.classified(name).and_then(|e| e.spec.as_ref())
    }

    /// Whether `flag` changes nothing `program` (with subcommand `sub`) writes or runs: learning
    /// drops it.
    pub fn neutral(&self, program: &str, sub: Option<&str>, flag: &str) -> bool {
        let Some(s) = self.spec(program) else {
            return false;
        };
        s.flags
            .iter()
            .any(|f| f.learn == Some(Learn::Neutral) && f.opt == flag)
            || sub
                .and_then(|n| s.subcommands.get(n))
                .is_some_and(|x| x.neutral.iter().any(|f| f == flag))
    }

    /// The one spelling of the normalised signature text `normal`, when its program spells the
    /// operation several ways.
    pub fn same_as(&self, normal: &str) -> Option<&str> {
        let program = normal.split(' ').next()?;
        self.spec(program)?
            .same_as
            .iter()
            .find(|x| x.from == normal)
            .map(|x| x.to.as_str())
    }

    /// Which arguments make `program` cover what lies beneath a directory it names.
    pub fn recursive(&self, program: &str) -> Option<&Recursive> {
        self.spec(program)?.recursive.as_ref()
    }

    /// The named list `key` of `program`'s entry (empty when it has none).
    pub fn list(&self, program: &str, key: &str) -> &[String] {
        self.spec(program)
            .and_then(|s| s.lists.get(key))
            .map_or(&[], Vec::as_slice)
    }

    /// The flags a command of `program` is never learned with.
    pub fn never_learned(&self, program: &str) -> Vec<&str> {
        self.classified(program)
            .and_then(|e| e.spec.as_ref())
            .map(|s| {
                s.flags
                    .iter()
                    .filter(|f| f.learn == Some(Learn::Never))
                    .map(|f| f.opt.as_str())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// The line of the `n`-th program (or wrapper) header of `text` (`[program]`, `[[program]]`).
fn header_lines(text: &str, kind: &str) -> Vec<usize> {
    let (one, many) = (format!("[{kind}]"), format!("[[{kind}]]"));
    let mut out = Vec::new();
    let mut at = 0;
    for l in text.split_inclusive('\n') {
        let t = l.trim();
        if t == one || t == many {
            out.push(line_of(text, at));
        }
        at += l.len();
    }
    out
}

/// Parses one file's entries. `file` names it in every error (`FILE:LINE: …`).
pub fn parse(file: &str, text: &str, builtin: bool) -> Result<Table> {
    let mut doc: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        anyhow!("{file}:{line}: {}", e.message())
    })?;
    let lines = header_lines(text, "program");
    let mut out = Table::default();
    let programs = match doc.remove("program") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a,
        // the single form: `[program]` with `[[subcommand]]`, `[[flag]]`, `[[run_on_use]]` and
        // `[[example]]` at the top level
        Some(toml::Value::Table(mut t)) => {
            for k in ["subcommand", "flag", "run_on_use", "example"] {
                if let Some(v) = doc.remove(k) {
                    t.insert(k.to_string(), v);
                }
            }
            vec![toml::Value::Table(t)]
        }
        Some(_) => bail!("{file}:1: `program` must be a table or an array of tables"),
    };
    for (i, p) in programs.into_iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(1);
        let origin = Origin {
            file: file.to_string(),
            line,
            builtin,
        };
        let toml::Value::Table(t) = p else {
            bail!("{origin}: a program entry must be a table");
        };
        out.programs
            .push(entry(t, origin.clone()).with_context(|| origin.to_string())?);
    }
    if let Some(f) = doc.remove("family") {
        out.families = f
            .try_into()
            .map_err(|e| anyhow!("{file}: family: {}", e.message()))?;
    }
    let wlines = header_lines(text, "wrapper");
    if let Some(w) = doc.remove("wrapper") {
        let specs: Vec<WrapperSpec> = w
            .try_into()
            .map_err(|e| anyhow!("{file}: wrapper: {}", e.message()))?;
        for (i, spec) in specs.into_iter().enumerate() {
            let origin = Origin {
                file: file.to_string(),
                line: wlines.get(i).copied().unwrap_or(1),
                builtin,
            };
            out.wrappers.push(Wrapper { spec, origin });
        }
    }
    if let Some(k) = doc.keys().next() {
        bail!(
            "{file}:1: unknown top-level key `{k}` (a file holds `program`, `wrapper` and `family` tables)"
        );
    }
    Ok(out)
}

/// One `[[program]]` table into an entry.
fn entry(mut t: toml::Table, origin: Origin) -> Result<Entry> {
    let name = match t.remove("name") {
        Some(toml::Value::String(s)) if !s.is_empty() => s,
        _ => bail!("a program entry needs `name`"),
    };
    let take = |t: &mut toml::Table, k: &str| t.remove(k);
    let run_for: Option<Vec<String>> = take(&mut t, "run_on_use_for")
        .map(|v| {
            v.try_into()
                .map_err(|e: toml::de::Error| anyhow!("run_on_use_for: {}", e.message()))
        })
        .transpose()?;
    let none: Option<String> = take(&mut t, "run_on_use_none")
        .map(|v| {
            v.try_into()
                .map_err(|e: toml::de::Error| anyhow!("run_on_use_none: {}", e.message()))
        })
        .transpose()?;
    let rules: Vec<format::RawRun> = take(&mut t, "run_on_use")
        .map(|v| {
            v.try_into()
                .map_err(|e: toml::de::Error| anyhow!("run_on_use: {}", e.message()))
        })
        .transpose()?
        .unwrap_or_default();
    let mut examples: Vec<Example> = take(&mut t, "example")
        .map(|v| {
            v.try_into()
                .map_err(|e: toml::de::Error| anyhow!("example: {}", e.message()))
        })
        .transpose()?
        .unwrap_or_default();
    let signature: Option<SignatureSpec> = take(&mut t, "signature")
        .map(|v| {
            v.try_into()
                .map_err(|e: toml::de::Error| anyhow!("signature: {}", e.message()))
        })
        .transpose()?;
    let classified = t.contains_key("effects") || t.contains_key("form");
    let keys: Vec<String> = t.keys().filter(|k| *k != "aliases").cloned().collect();
    let aliases: Vec<String> = match t.get("aliases") {
        Some(v) => v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| anyhow!("aliases: {}", e.message()))?,
        None => Vec::new(),
    };
    let spec = if classified {
        let s: ProgramSpec = toml::Value::Table(t)
            .try_into()
            .map_err(|e: toml::de::Error| anyhow!("{}", e.message()))?;
        Some(s)
    } else {
        if let Some(k) = t.keys().find(|k| *k != "aliases") {
            bail!("`{k}` is classification: an entry that classifies needs `effects` (or `form`)");
        }
        None
    };
    let mut run = RunOnUse::default();
    for r in rules {
        r.into_run(&mut run).map_err(|e| anyhow!(e))?;
    }
    for ex in &mut examples {
        ex.from = Some(origin.clone());
        if !ex.add_to(&mut run) && ex.command.is_none() {
            bail!("an example needs `command`, or `path` with `run_on_use`");
        }
    }
    let says = !run.rules.is_empty() || !run.environments.is_empty() || !run.manifests.is_empty();
    if says && none.is_some() {
        bail!("`run_on_use_none` and `run_on_use` rules contradict each other");
    }
    let run_on_use = if says || none.is_some() {
        run.none = none;
        run.names = run_for.unwrap_or_else(|| {
            std::iter::once(name.clone())
                .chain(aliases.iter().cloned())
                .collect()
        });
        Some(run)
    } else {
        // its path examples say what other entries' rules decide: `bash::examples` checks them
        None
    };
    let e = Entry {
        name,
        origin,
        spec,
        run_on_use,
        examples,
        keys,
        signature,
    };
    if let Some(c) = &e.spec {
        let names = e.names();
        if let Some(n) = c
            .companions
            .iter()
            .flat_map(|r| r.names.strangers(&names))
            .next()
        {
            bail!("companions: `{n}` is not one of the entry's names {names:?}");
        }
    }
    if let Some(s) = &e.signature {
        let names = e.names();
        let keys = [
            &s.runner,
            &s.subcommand,
            &s.expression_first,
            &s.paths_after_expression,
            &s.path_operands,
            &s.message_flags,
            &s.keep_module,
            &s.inline_code,
            &s.script,
        ];
        if let Some(n) = keys.iter().flat_map(|k| k.strangers(&names)).next() {
            bail!("signature: `{n}` is not one of the entry's names {names:?}");
        }
    }
    Ok(e)
}

/// The built-in table (every file of `src/programs/`).
pub fn builtin() -> Result<Table> {
    let mut t = Table::default();
    for (file, text) in BUILTIN {
        let part = parse(&format!("src/programs/{file}"), text, true)?;
        t.programs.extend(part.programs);
        t.wrappers.extend(part.wrappers);
        t.families.extend(part.families);
    }
    unique(&t)?;
    resolve_families(&mut t)?;
    let (caches, set) = t.runner_env();
    let mut vars: Vec<&str> = caches.iter().chain(&set).map(|(k, _)| *k).collect();
    vars.sort_unstable();
    if let Some(w) = vars.windows(2).find(|w| w[0] == w[1]) {
        bail!("runner_env: `{}` is given by two entries", w[0]);
    }
    Ok(t)
}

/// Each family once; a member's flags that name a list become that list (of the entry of the
/// member's first program).
fn resolve_families(t: &mut Table) -> Result<()> {
    let mut resolved = Vec::new();
    for (i, f) in t.families.iter().enumerate() {
        if t.families[..i].iter().any(|g| g.name == f.name) {
            bail!("family {:?} is defined twice", f.name);
        }
        let mut f = f.clone();
        for m in &mut f.members {
            let MemberFlags::Named(n) = &m.flags else {
                continue;
            };
            if n == "any" {
                continue;
            }
            let program = m.programs.first().map_or("", String::as_str);
            let list = t
                .spec(program)
                .and_then(|s| s.lists.get(n))
                .ok_or_else(|| {
                    anyhow!(
                    "family {:?}: flags = {n:?} is neither \"any\" nor a list of {program}'s entry",
                    f.name
                )
                })?;
            m.flags = MemberFlags::Only(list.clone());
        }
        resolved.push(f);
    }
    t.families = resolved;
    Ok(())
}

/// Every classified name belongs to one entry, every wrapper name to one wrapper.
fn unique(t: &Table) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, &Origin> = Default::default();
    for e in t.programs.iter().filter(|e| e.spec.is_some()) {
        for n in e.names() {
            if let Some(o) = seen.insert(n, &e.origin) {
                bail!(
                    "{}: `{n}` is already classified by the entry at {o}",
                    e.origin
                );
            }
        }
    }
    let mut seen: std::collections::HashMap<&str, &Origin> = Default::default();
    for w in &t.wrappers {
        for n in std::iter::once(&w.spec.name).chain(&w.spec.aliases) {
            if let Some(o) = seen.insert(n, &w.origin) {
                bail!("{}: wrapper `{n}` is already defined at {o}", w.origin);
            }
        }
    }
    Ok(())
}

static INSTALLED: OnceLock<Table> = OnceLock::new();

/// Installs the table the process uses (the built-in one merged with the operator's entries):
/// once, at start-up, before anything classifies. Err: a table was already installed or used.
pub fn install(t: Table) -> Result<()> {
    INSTALLED
        .set(t)
        .map_err(|_| anyhow!("the program table is already in use"))
}

/// The table in use: the installed one, else the built-in one. Err: the built-in files are
/// broken (their unit tests catch it before a release).
pub fn table() -> Result<&'static Table> {
    static BUILT_IN: OnceLock<std::result::Result<Table, String>> = OnceLock::new();
    if let Some(t) = INSTALLED.get() {
        return Ok(t);
    }
    let b = BUILT_IN.get_or_init(|| builtin().map_err(|e| format!("{e:#}")));
    match b {
        Ok(t) => {
            // the first use fixes the table: a later install is refused
            let _ = INSTALLED.set(t.clone());
            INSTALLED.get().ok_or_else(|| anyhow!("program table"))
        }
        Err(e) => Err(anyhow!("{e}")),
    }
}

#[cfg(test)]
mod tests;
