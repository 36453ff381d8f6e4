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

fn subcommands<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<String, Vec<String>>, D::Error> {
    let raw: Vec<RawSub> = Vec::deserialize(d)?;
    Ok(raw.into_iter().map(|s| (s.name, s.effects)).collect())
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
    pub subcommands: HashMap<String, Vec<String>>,
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
    /// Classified by a special form of `classify` (a closed set: `find`), not by these keys;
    /// its flags still say how learning treats them.
    pub form: Option<String>,
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
