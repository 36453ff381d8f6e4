//! The program entry's format: the types a `src/programs/*.toml` file (or an operator's
//! `programs.d/*.toml`) deserializes into, and their conversion into the shapes the mechanisms
//! use (`classify`'s judge, `bash::run_on_use`'s compiled rules). ARCHITECTURE.md ("Program
//! entries") lists every key.

use serde::{Deserialize, Deserializer};
use std::collections::HashMap;

/// A flag rule: an option (long names match their getopt abbreviations) that adds, takes away
/// (after every add) or sets effects, and how learning treats it.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct FlagRule {
    pub opt: String,
    pub value: Option<String>,
    pub add: Vec<String>,
    /// Effects the option takes away, after every `add` (`cargo --offline`: no registry).
    pub remove: Vec<String>,
    pub set: Option<Vec<String>>,
    /// Overrides what operands are (`gzip -c FILE` reads FILE instead of replacing it).
    pub operands: Option<String>,
    pub note: String,
    /// `never`: a command with this flag is never learned (it writes or runs what its operands
    /// do not name); `neutral`: the flag does not change what the command does.
    pub learn: Option<Learn>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Learn {
    Never,
    Neutral,
}

/// A `[[flag]]` as written: `name`, `effect` = add | remove | set with `effects`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawFlag {
    name: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    effect: Option<String>,
    #[serde(default)]
    effects: Vec<String>,
    #[serde(default)]
    operands: Option<String>,
    #[serde(default)]
    note: String,
    #[serde(default)]
    learn: Option<Learn>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawSub {
    name: String,
    effects: Vec<String>,
    #[serde(default)]
    neutral: Vec<String>,
    #[serde(default)]
    operands: Option<SubOperands>,
}

/// What a subcommand's positional arguments are, for its signature.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SubOperands {
    /// Paths whatever they look like (`git add docs`).
    Paths,
    /// Names of refs (`git merge docs` names the branch, not the directory).
    Refs,
}

/// A subcommand's effects, and the flags that do not change what it does (for learning:
/// `git add -A` stages what `git add PATH` does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sub {
    pub effects: Vec<String>,
    pub neutral: Vec<String>,
    pub operands: Option<SubOperands>,
}

fn flags<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<FlagRule>, D::Error> {
    let raw: Vec<RawFlag> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|f| {
            let mut r = FlagRule {
                opt: f.name,
                value: f.value,
                operands: f.operands,
                note: f.note,
                learn: f.learn,
                ..FlagRule::default()
            };
            match f.effect.as_deref() {
                Some("add") => r.add = f.effects,
                Some("remove") => r.remove = f.effects,
                Some("set") => r.set = Some(f.effects),
                None if f.effects.is_empty() => {}
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "flag {:?}: effect must be \"add\", \"remove\" or \"set\" (with `effects`), not {other:?}",
                        r.opt
                    )))
                }
            }
            Ok(r)
        })
        .collect()
}

fn subcommands<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<String, Sub>, D::Error> {
    let raw: Vec<RawSub> = Vec::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|s| {
            let sub = Sub {
                effects: s.effects,
                neutral: s.neutral,
                operands: s.operands,
            };
            (s.name, sub)
        })
        .collect())
}

/// Which arguments make a program cover what lies beneath a directory it names (`rm -r`,
/// `chmod -R`; `mv`: always). One-letter flags also count inside a bundle (`-rf`, `-av`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recursive {
    Always,
    Flags(Vec<String>),
}

impl<'de> Deserialize<'de> for Recursive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Flags(Vec<String>),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "always" => Ok(Recursive::Always),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "recursive = {w:?}: give \"always\" or the flags that make it recursive"
            ))),
            Raw::Flags(f) => Ok(Recursive::Flags(f)),
        }
    }
}

impl Recursive {
    /// Whether `arg` is one of the flags (a one-letter flag also inside a bundle of letters).
    pub fn flag(&self, arg: &str) -> bool {
        let Recursive::Flags(flags) = self else {
            return false;
        };
        flags.iter().any(|f| flag_given(arg, f))
    }
}

/// Whether the argument `arg` gives the flag `f`: itself, or a one-letter flag inside a bundle of
/// letters (`-rf` gives `-r`).
pub fn flag_given(arg: &str, f: &str) -> bool {
    arg == f
        || (f.len() == 2
            && !f.starts_with("--")
            && arg.starts_with('-')
            && !arg.starts_with("--")
            && arg[1..].chars().all(|c| c.is_ascii_alphabetic())
            && arg[1..].contains(&f[1..]))
}

/// Two spellings of one operation, as normalised signature texts (`git checkout -b LITERAL`
/// is `git switch -c LITERAL`).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SameAs {
    pub from: String,
    pub to: String,
}

/// A family (`[[family]]`): operations of one kind a human teaches in one answer
/// (`bash::coverage` owns what membership means).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Family {
    pub name: String,
    /// The members, as the human reads them.
    pub shows: String,
    /// Signature classes that are members, exactly.
    #[serde(default)]
    pub classes: Vec<String>,
    /// Subcommands of programs that are members.
    #[serde(default)]
    pub members: Vec<Member>,
}

/// Subcommands of programs (exactly these names; `*`: any name the program takes as its first
/// operand) that are members of a family, with the flags they may carry besides their neutral
/// ones.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub programs: Vec<String>,
    pub subcommands: Vec<String>,
    /// A list of flags, `"any"` (a build tool's flags change what it builds, all inside the
    /// sandbox), or the name of a list of the first program's entry (`lists`).
    pub flags: MemberFlags,
    /// A flag that must be given (`pip install --no-index`).
    #[serde(default)]
    pub requires: Option<String>,
}

#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum MemberFlags {
    Only(Vec<String>),
    /// `"any"` or a list's name (resolved when the table loads: `Only` after).
    Named(String),
}

/// A program's classification (what `classify`'s judge reads).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct ProgramSpec {
    pub aliases: Vec<String>,
    pub effects: Vec<String>,
    pub operands: String,
    pub value_opts: Vec<String>,
    pub opt_value_opts: Vec<String>,
    pub data_operands: usize,
    pub data_opts: Vec<String>,
    pub read_opts: Vec<String>,
    pub write_opts: Vec<String>,
    pub script: Option<String>,
    #[serde(rename = "flag", deserialize_with = "flags")]
    pub flags: Vec<FlagRule>,
    #[serde(rename = "subcommand", deserialize_with = "subcommands")]
    pub subcommands: HashMap<String, Sub>,
    pub sub_default: Vec<String>,
    /// Effects with no subcommand (default: readonly).
    pub sub_none: Option<Vec<String>>,
    /// Interpreters: `-m MODULE` → the program of the table that judges the module's arguments.
    pub modules: HashMap<String, String>,
    /// Interpreters: options with which it runs workspace files it finds itself (`node --test`).
    pub run_opts: Vec<String>,
    pub shell: bool,
    pub interpreter: bool,
    pub code_opts: Vec<String>,
    pub decoder_flags: Vec<String>,
    /// Always decodes its input (zcat, gunzip).
    pub decoder: bool,
    pub source_kind: Option<String>,
    pub block: Option<String>,
    pub note: Option<String>,
    /// Classified by a special form of `classify`, not by these keys; its flags still say how
    /// learning treats them.
    pub form: Option<Form>,
    /// After the keys, a refinement of `classify` the keys cannot say.
    pub refine: Option<Refine>,
    /// Its first argument may be an option cluster without a dash (`tar czf x.tgz dir`).
    pub bare_first_options: bool,
    /// Options end at the first operand (`ssh HOST ls -l`: `-l` is the remote command's).
    pub options_end_at_operand: bool,
    /// Operands of the form `NAME=VALUE` are assignments, not files (`awk -f x v=1 file`).
    pub assignment_operands: bool,
    /// Which arguments make it cover what lies beneath a directory it names.
    pub recursive: Option<Recursive>,
    /// Spellings of one operation (learning treats them as one).
    pub same_as: Vec<SameAs>,
    /// Named lists a mechanism in code reads (`classify::npm` reads npm's `install_spellings`,
    /// `local_install_flags`, `init_flags`), and a family member may name.
    pub lists: HashMap<String, Vec<String>>,
    /// Named maps (key → list) a mechanism in code reads (`bash::protected` reads git's
    /// `companions` and `local_companions`).
    pub maps: HashMap<String, std::collections::BTreeMap<String, Vec<String>>>,
    /// What it writes in the workspace by its nature, besides its arguments.
    #[serde(deserialize_with = "companions")]
    pub companions: Vec<CompanionRule>,
    /// Files it runs by itself when it builds, installs or tests (`build.rs`, `package.json`):
    /// never a companion of any program.
    pub implicitly_run: Vec<String>,
    /// The environment of every overlay run for it (`bash::runners`): `caches` = variable →
    /// subdirectory of the client's runner cache; `set` = variable → value (`{cache}` is the
    /// runner cache's path).
    pub runner_env: RunnerEnv,
}

/// Where a runner puts its output and caches, and how it is told to stay offline.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerEnv {
    pub caches: std::collections::BTreeMap<String, String>,
    pub set: std::collections::BTreeMap<String, String>,
}

/// What a program writes in the workspace by its nature, besides its arguments
/// (`bash::effects` owns what each kind covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Companion {
    /// These files in the working directory or a directory above it in the workspace.
    Lock(Vec<String>),
    /// Files with these extensions beneath each directory argument (or the working directory);
    /// `file_dir`: a file argument covers its own directory (rustfmt formats the modules a file
    /// declares).
    Sources {
        extensions: Vec<String>,
        file_dir: bool,
    },
    /// Files of the working directory the subcommand exists to edit (`npm pkg set`).
    Edits(Vec<String>),
    /// The directories the command names, with everything beneath them.
    Beneath,
    /// The new project directory `cargo new PATH` makes; for `init`, only these files in it.
    NewProject(Vec<String>),
    /// The virtual environment the program runs from (`D/bin/pip`).
    Environment,
    /// These directories of the working directory, with everything beneath them.
    Outputs(Vec<String>),
    /// The working tree `git clone` of a local path checks out.
    CloneTree,
    /// The executables the package in the working directory declares gain execute bits.
    BinModes,
}

/// A companion and when it applies: for which of the entry's names, with which subcommand
/// (none: the command has no subcommand; `*`: any), and a flag that must be given.
#[derive(Debug, Clone)]
pub struct CompanionRule {
    pub names: Names,
    pub subcommands: Vec<String>,
    pub flag: Option<String>,
    pub companion: Companion,
}

/// A `companions` item as written: `kind` and the fields that kind takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompanion {
    kind: String,
    #[serde(default)]
    names: Option<Names>,
    #[serde(default)]
    subcommands: Vec<String>,
    #[serde(default)]
    flag: Option<String>,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    extensions: Vec<String>,
    #[serde(default)]
    dirs: Vec<String>,
    #[serde(default)]
    file_dir: bool,
}

fn companions<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<CompanionRule>, D::Error> {
    let raw: Vec<RawCompanion> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|r| {
            let companion = match r.kind.as_str() {
                "lock" => Companion::Lock(r.files),
                "sources" => Companion::Sources {
                    extensions: r.extensions,
                    file_dir: r.file_dir,
                },
                "edits" => Companion::Edits(r.files),
                "beneath" => Companion::Beneath,
                "new_project" => Companion::NewProject(r.files),
                "environment" => Companion::Environment,
                "outputs" => Companion::Outputs(r.dirs),
                "clone_tree" => Companion::CloneTree,
                "bin_modes" => Companion::BinModes,
                k => {
                    return Err(serde::de::Error::custom(format!(
                        "companion kind {k:?}: one of lock, sources, edits, beneath, new_project, environment, outputs, clone_tree, bin_modes"
                    )))
                }
            };
            Ok(CompanionRule {
                names: r.names.unwrap_or(Names::All),
                subcommands: r.subcommands,
                flag: r.flag,
                companion,
            })
        })
        .collect()
}

/// A wrapper: a program that runs another command given as its operands.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct WrapperSpec {
    pub name: String,
    pub aliases: Vec<String>,
    pub value_opts: Vec<String>,
    pub string_opts: Vec<String>,
    pub skip_operands: usize,
    pub join_operands: bool,
    pub no_command: bool,
    pub effects: Vec<String>,
    pub block: Option<String>,
    pub remote: bool,
}

/// What a program runs or obeys on use (`bash::run_on_use` compiles and judges it).
#[derive(Debug, Clone, Default)]
pub struct RunOnUse {
    /// The program names it speaks for.
    pub names: Vec<String>,
    /// The program runs or obeys no workspace file beyond what it is told: why.
    pub none: Option<String>,
    pub rules: Vec<Rule>,
    pub environments: Vec<Environment>,
    pub manifests: Vec<Manifest>,
    pub examples: Examples,
    pub manifest_examples: Vec<ManifestExample>,
}

/// Paths the program runs or obeys, and why.
#[derive(Debug, Clone)]
pub struct Rule {
    pub why: String,
    pub paths: Vec<String>,
}

/// Directories the program runs code from: by name at any depth, or any directory holding
/// `marker` once the change set is applied; `run`: globs relative to the directory.
#[derive(Debug, Clone)]
pub struct Environment {
    pub why: String,
    pub names: Vec<String>,
    pub marker: Option<String>,
    pub run: Vec<String>,
}

/// A manifest judged key by key: by an allowlist (`inert`, `deps`, `placeholders`: every
/// other key asks), or — an operator's entry — by `fields`, keys that ask.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub why: String,
    pub paths: Vec<String>,
    pub except: Vec<String>,
    pub format: Format,
    /// Dotted keys that may change freely, with everything beneath them.
    pub inert: Vec<String>,
    /// Dotted keys of dependency tables (or lists): an entry may change when its new value is a
    /// registry version.
    pub deps: Vec<String>,
    /// Exact values a key may take.
    pub placeholders: Vec<Placeholder>,
    /// The `package.json` of a package `node_modules/.bin` links to is run-on-use.
    pub linked_bins: bool,
    /// Dotted keys that always ask, with everything beneath them (empty: the allowlist decides).
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Json,
    Toml,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placeholder {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Default)]
pub struct Examples {
    pub asks: Vec<String>,
    pub ordinary: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ManifestExample {
    pub path: String,
    pub before: Option<String>,
    pub after: String,
    pub verdict: String,
}

/// A `[[run_on_use]]` as written: `reason` and one of `paths`, `environment` (+ `marker`,
/// `run`) or `manifest` (+ `format`, `except`, `inert`, `deps`, `placeholders`,
/// `linked_bins`, `fields`).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    reason: String,
    #[serde(default)]
    paths: Option<Vec<String>>,
    #[serde(default)]
    environment: Option<Vec<String>>,
    #[serde(default)]
    marker: Option<String>,
    #[serde(default)]
    run: Vec<String>,
    #[serde(default)]
    manifest: Option<Vec<String>>,
    #[serde(default)]
    except: Vec<String>,
    #[serde(default)]
    format: Option<Format>,
    #[serde(default)]
    inert: Vec<String>,
    #[serde(default)]
    deps: Vec<String>,
    #[serde(default)]
    placeholders: Vec<Placeholder>,
    #[serde(default)]
    linked_bins: bool,
    #[serde(default)]
    fields: Vec<String>,
}

/// An `[[example]]`: a command and what brainloop decides of it, or a path (with a manifest's
/// `before`/`after`) and whether it is run-on-use.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Example {
    pub command: Option<String>,
    /// `ok` (valid, not blocked) | `block` | `invalid`.
    pub verdict: Option<String>,
    /// The most privileged category (`pure` < `readonly` < … < `unknown`).
    pub category: Option<String>,
    /// The permission set (`none`, `read`, `write`, `network`, …).
    pub set: Option<String>,
    /// The learned signature's text.
    pub signature: Option<String>,
    pub learnable: Option<bool>,
    pub path: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub run_on_use: Option<bool>,
    /// The entry the example came from (set when it is loaded).
    #[serde(skip)]
    pub from: Option<super::Origin>,
}

impl RawRun {
    /// Adds this rule to `r`; Err: a rule that is none or several of the three kinds.
    pub(super) fn into_run(self, r: &mut RunOnUse) -> Result<(), String> {
        let kinds = [
            self.paths.is_some(),
            self.environment.is_some(),
            self.manifest.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(format!(
                "run_on_use {:?}: give exactly one of `paths`, `environment` or `manifest`",
                self.reason
            ));
        }
        let why = self.reason;
        if let Some(paths) = self.paths {
            r.rules.push(Rule { why, paths });
        } else if let Some(names) = self.environment {
            r.environments.push(Environment {
                why,
                names,
                marker: self.marker,
                run: self.run,
            });
        } else if let Some(paths) = self.manifest {
            let format = self
                .format
                .ok_or_else(|| format!("run_on_use {why:?}: a manifest needs `format`"))?;
            r.manifests.push(Manifest {
                why,
                paths,
                except: self.except,
                format,
                inert: self.inert,
                deps: self.deps,
                placeholders: self.placeholders,
                linked_bins: self.linked_bins,
                fields: self.fields,
            });
        }
        Ok(())
    }
}

impl Example {
    /// Adds a path example to `r`'s examples; false: not a path example.
    pub(super) fn add_to(&self, r: &mut RunOnUse) -> bool {
        let (Some(path), Some(asks)) = (&self.path, self.run_on_use) else {
            return false;
        };
        if let Some(after) = &self.after {
            r.manifest_examples.push(ManifestExample {
                path: path.clone(),
                before: self.before.clone(),
                after: after.clone(),
                verdict: if asks { "asks" } else { "ordinary" }.to_string(),
            });
        } else if asks {
            r.examples.asks.push(path.clone());
        } else {
            r.examples.ordinary.push(path.clone());
        }
        true
    }
}

/// Which of an entry's names a key speaks for: `true` (every name), `false`, or a list of its
/// names (an entry's aliases may read alike but sign differently: `python` keeps `-m MODULE`,
/// `perl` has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Names {
    #[default]
    None,
    All,
    Some(Vec<String>),
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            List(Vec<String>),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Flag(true) => Names::All,
            Raw::Flag(false) => Names::None,
            Raw::List(l) => Names::Some(l),
        })
    }
}

impl Names {
    /// Whether the key speaks for `name` (one of the entry's names).
    pub fn has(&self, name: &str) -> bool {
        match self {
            Names::None => false,
            Names::All => true,
            Names::Some(l) => l.iter().any(|n| n == name),
        }
    }

    /// The names it lists that are not in `names` (a list must name the entry's own names).
    pub fn strangers<'a>(&'a self, names: &[&str]) -> Vec<&'a str> {
        match self {
            Names::Some(l) => l
                .iter()
                .map(String::as_str)
                .filter(|n| !names.contains(n))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// How a learned signature reads the program's arguments (`bash::signatures`), and whether the
/// overlay captures what it runs. Each key says for which of the entry's names it holds.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(default, deny_unknown_fields)]
pub struct SignatureSpec {
    /// Its `process`/`unknown` effects come from running workspace code (hooks, makefiles, test
    /// runners, build scripts): on the overlay it runs in the sandbox and its effects are
    /// captured, so a signature of it may be learned.
    pub runner: Names,
    /// The first positional argument is a subcommand, kept literally (`cargo build`).
    pub subcommand: Names,
    /// The first positional argument is an expression (script), not a file (`grep PATTERN`).
    pub expression_first: Names,
    /// After its expression, every positional argument is a path (`sed EXPR FILE`).
    pub paths_after_expression: Names,
    /// Every positional argument is a path (`mkdir -p build` signs as `mkdir -p WS_PATH`).
    pub path_operands: Names,
    /// `-m`/`--message`/`--msg`/`-M` take a free-form message (also in a bundle: `-am MSG`).
    pub message_flags: Names,
    /// `-m MODULE` is kept literally (another module is another signature).
    pub keep_module: Names,
    /// Its flags may carry inline code (`-c`, `-e`, `--eval`, `-E`, `-p`, `--print`): a command
    /// with one is never learned.
    pub inline_code: Names,
    /// `classify::scripts` analyses its script argument: a script that writes, reads or runs
    /// beyond its operands is never learned.
    pub script: Names,
    /// Flags whose value is a path, not an expression (pip's `-e` is `--editable PATH`).
    pub path_flags: Vec<String>,
}

/// The special forms of `classify` an entry may name (`form = "find"`): a closed set of Rust
/// predicates for what the keys cannot say.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `classify::forms::find`: its predicates, `-exec`/`-delete` and what they reach.
    Find,
}

/// Refinements of `classify` after an entry's keys (`refine = "git"`): a closed set of Rust
/// predicates.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Refine {
    /// `classify::git::apply`: `-c` keys, local forms, local clones, what git writes.
    Git,
    /// `classify::npm::apply`: installs of local packages, `init -y`.
    Npm,
}

impl Form {
    pub fn name(self) -> &'static str {
        match self {
            Form::Find => "find",
        }
    }
}
