//! The knowledge base: loads `programs.toml` (programs, flags, wrappers → effects) once,
//! parses a command's options the way getopt would (clusters, attached values, long-option
//! abbreviations), and judges one resolved argv: its effects, the files it reads and
//! writes, and the nested commands it would run (`find -exec`, `sh -c`, `eval`, wrappers,
//! `xargs`). The walker in `parse.rs` feeds it; `danger.rs` reads its findings.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use super::scripts;
use super::types::{Category, ANY_FILE, DYN};

const TABLE: &str = include_str!("programs.toml");

/// Directories programs are resolved from (DESIGN §5.2: a fixed PATH, never the workspace).
pub const TRUSTED_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// A set of effects (bitset over the non-pure categories; empty = pure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effects(u8);

impl Effects {
    const READ: u8 = 1;
    const WRITE: u8 = 2;
    const NET: u8 = 4;
    const PROC: u8 = 8;
    const ENV: u8 = 16;
    const UNKNOWN: u8 = 32;

    fn bit(c: Category) -> u8 {
        match c {
            Category::Pure => 0,
            Category::Readonly => Self::READ,
            Category::Filesystem => Self::WRITE,
            Category::Network => Self::NET,
            Category::Process => Self::PROC,
            Category::Env => Self::ENV,
            Category::Unknown => Self::UNKNOWN,
        }
    }
    pub fn add(&mut self, c: Category) {
        self.0 |= Self::bit(c);
    }
    pub fn has(&self, c: Category) -> bool {
        let b = Self::bit(c);
        if b == 0 {
            self.0 == 0
        } else {
            self.0 & b != 0
        }
    }
    pub fn is_pure(&self) -> bool {
        self.0 == 0
    }
    pub fn union(&mut self, o: Effects) {
        self.0 |= o.0;
    }
    pub fn from_names(names: &[String]) -> Effects {
        let mut e = Effects::default();
        for n in names {
            e.add(Category::parse(n).unwrap_or(Category::Unknown));
        }
        e
    }
    /// Every category present (just `Pure` when empty).
    pub fn categories(&self) -> Vec<Category> {
        let all = [
            Category::Readonly,
            Category::Filesystem,
            Category::Network,
            Category::Process,
            Category::Env,
            Category::Unknown,
        ];
        let v: Vec<Category> = all.into_iter().filter(|c| self.has(*c)).collect();
        if v.is_empty() {
            vec![Category::Pure]
        } else {
            v
        }
    }
    /// The single most privileged category, for display.
    pub fn primary(&self) -> Category {
        self.categories()
            .into_iter()
            .fold(Category::Pure, |a, b| a.escalate(b))
    }
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct FlagRule {
    pub opt: String,
    pub value: Option<String>,
    pub add: Vec<String>,
    pub set: Option<Vec<String>>,
    /// Overrides what operands are (`gzip -c FILE` reads FILE instead of replacing it).
    pub operands: Option<String>,
    pub note: String,
}

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
    pub flags: Vec<FlagRule>,
    pub subcommands: HashMap<String, Vec<String>>,
    pub sub_default: Vec<String>,
    pub shell: bool,
    pub interpreter: bool,
    pub code_opts: Vec<String>,
    pub decoder_flags: Vec<String>,
    /// Always decodes its input (zcat, gunzip).
    pub decoder: bool,
    pub source_kind: Option<String>,
    pub block: Option<String>,
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct WrapperSpec {
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

#[derive(Deserialize)]
struct RawTable {
    programs: HashMap<String, ProgramSpec>,
    wrappers: HashMap<String, WrapperSpec>,
}

/// The loaded table, with aliases resolved.
pub struct Knowledge {
    programs: HashMap<String, (String, ProgramSpec)>,
    wrappers: HashMap<String, (String, WrapperSpec)>,
    /// Set when the table failed to load: everything is then `unknown` (fail closed).
    pub load_error: Option<String>,
}

impl Knowledge {
    pub fn program(&self, name: &str) -> Option<&(String, ProgramSpec)> {
        self.programs.get(name)
    }
    pub fn wrapper(&self, name: &str) -> Option<&(String, WrapperSpec)> {
        self.wrappers.get(name)
    }
    pub fn len(&self) -> usize {
        self.programs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }
}

/// Parse a table text (public for tests of alternative tables).
pub fn load(text: &str) -> Result<Knowledge, String> {
    let raw: RawTable = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut programs = HashMap::new();
    for (name, spec) in raw.programs {
        for a in spec.aliases.clone() {
            programs.insert(a, (name.clone(), spec.clone()));
        }
        programs.insert(name.clone(), (name, spec));
    }
    let mut wrappers = HashMap::new();
    for (name, spec) in raw.wrappers {
        for a in spec.aliases.clone() {
            wrappers.insert(a, (name.clone(), spec.clone()));
        }
        wrappers.insert(name.clone(), (name, spec));
    }
    Ok(Knowledge {
        programs,
        wrappers,
        load_error: None,
    })
}

/// The shipped table (parsed once).
pub fn knowledge() -> &'static Knowledge {
    static K: OnceLock<Knowledge> = OnceLock::new();
    K.get_or_init(|| match load(TABLE) {
        Ok(k) => k,
        Err(e) => Knowledge {
            programs: HashMap::new(),
            wrappers: HashMap::new(),
            load_error: Some(e),
        },
    })
}

// ───────────────────────────── option parsing ─────────────────────────────

/// One parsed option: its canonical name (`-i`, `--in-place`), the name as written and
/// its value if it took one.
#[derive(Debug, Clone)]
pub struct Opt {
    pub name: String,
    pub given: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub opts: Vec<Opt>,
    pub operands: Vec<String>,
}

impl Parsed {
    pub fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|o| opt_matches(o, name))
    }
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|o| opt_matches(o, name))
            .filter_map(|o| o.value.as_deref())
            .collect()
    }
}

/// Does a parsed option match a rule's option name? Long options also match when written
/// as an abbreviation (getopt accepts `--compress-prog` for `--compress-program`).
pub fn opt_matches(o: &Opt, rule: &str) -> bool {
    if o.name == rule {
        return true;
    }
    o.given.starts_with("--")
        && o.given.len() > 2
        && rule.starts_with("--")
        && rule.starts_with(o.given.as_str())
}

/// getopt-like parsing. `value_opts` take a value (attached or next word); `opt_value`
/// options take only an attached value; `whole` lists single-dash long options
/// (`-exec`, `-wrapper`, `-TT`). With `stop_at_operand`, the first operand ends options.
pub fn parse_opts(
    args: &[String],
    value_opts: &[String],
    opt_value: &[String],
    whole: &[&str],
    stop_at_operand: bool,
) -> Parsed {
    let mut p = Parsed::default();
    let mut i = 0;
    let longs: Vec<&String> = value_opts
        .iter()
        .chain(opt_value.iter())
        .filter(|o| o.starts_with("--"))
        .collect();
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            p.operands.extend(args[i..].iter().cloned());
            break;
        }
        if a.starts_with("--") && a.len() > 2 {
            let (given, val) = match a.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (a.clone(), None),
            };
            // resolve an abbreviation when unique among the options we know
            let name = if value_opts.contains(&given) || opt_value.contains(&given) {
                given.clone()
            } else {
                let cands: Vec<&&String> = longs
                    .iter()
                    .filter(|l| l.starts_with(given.as_str()))
                    .collect();
                if cands.len() == 1 {
                    cands[0].to_string()
                } else {
                    given.clone()
                }
            };
            let takes = value_opts.contains(&name);
            let value = if val.is_some() {
                val
            } else if takes && i < args.len() {
                i += 1;
                Some(args[i - 1].clone())
            } else {
                None
            };
            p.opts.push(Opt { name, given, value });
            continue;
        }
        if a.starts_with('-') && a.len() > 1 && !a.starts_with(DYN) {
            if whole.contains(&a.as_str()) || (a.len() > 2 && value_opts.iter().any(|v| v == a)) {
                let takes = value_opts.iter().any(|v| v == a);
                let value = if takes && i < args.len() {
                    i += 1;
                    Some(args[i - 1].clone())
                } else {
                    None
                };
                p.opts.push(Opt {
                    name: a.clone(),
                    given: a.clone(),
                    value,
                });
                continue;
            }
            let chars: Vec<char> = a.chars().skip(1).collect();
            let mut j = 0;
            while j < chars.len() {
                let name = format!("-{}", chars[j]);
                let rest: String = chars[j + 1..].iter().collect();
                if value_opts.contains(&name) {
                    let value = if !rest.is_empty() {
                        Some(rest)
                    } else if i < args.len() {
                        i += 1;
                        Some(args[i - 1].clone())
                    } else {
                        None
                    };
                    p.opts.push(Opt {
                        given: name.clone(),
                        name,
                        value,
                    });
                    break;
                }
                if opt_value.contains(&name) {
                    p.opts.push(Opt {
                        given: name.clone(),
                        name,
                        value: if rest.is_empty() { None } else { Some(rest) },
                    });
                    break;
                }
                p.opts.push(Opt {
                    given: name.clone(),
                    name,
                    value: None,
                });
                j += 1;
            }
            continue;
        }
        p.operands.push(a.clone());
        if stop_at_operand {
            p.operands.extend(args[i..].iter().cloned());
            break;
        }
    }
    p
}

// ───────────────────────────── judging one argv ─────────────────────────────

/// A command that the judged command would itself run.
#[derive(Debug, Clone)]
pub enum Nested {
    /// An argv (wrappers, `find -exec`, `xargs`). `stdin_args`: more arguments come from stdin.
    Argv {
        argv: Vec<String>,
        via: String,
        stdin_args: bool,
        /// xargs -I: this string in `argv` is replaced by each input item.
        replace: Option<String>,
        /// Runs in this directory (`env -C DIR`).
        cwd: Option<String>,
    },
    /// Shell code given as a string (`sh -c`, `eval`, `env -S`, `trap`, `ssh host CMD`).
    Script {
        text: String,
        via: String,
        remote: bool,
        /// Positional parameters `$0 $1 ...` (`sh -c SCRIPT NAME ARGS...`).
        args: Vec<String>,
    },
    /// Code in another language (`python -c`, `perl -e`): scanned by the regex line.
    Code { lang: String, text: String },
}

/// The verdict on one argv.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub effects: Effects,
    pub notes: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub nested: Vec<Nested>,
    /// Table-level block (mkfs, useradd, sudo ...).
    pub block: Option<String>,
    /// Executes program text read from stdin (`sh`, `bash -s`, `python -`).
    pub stdin_exec: bool,
    /// Decodes data to stdout (`base64 -d`): its output piped to a shell is blocked.
    pub decoder: bool,
    /// Its output comes from the network.
    pub network_source: bool,
    /// Runs a file as code (interpreter with a script, `source f`, `./x`).
    pub runs_file: bool,
    /// Parsed options/operands, for the danger rules.
    pub parsed: Parsed,
    /// Canonical program name in the table (`gawk` → `awk`), if known.
    pub canonical: Option<String>,
    /// The program is a shell.
    pub is_shell: bool,
}

const SHELL_NAMES: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish", "csh", "tcsh", "rbash",
    "posh",
];

pub fn is_shell_name(p: &str) -> bool {
    SHELL_NAMES.contains(&p)
}

fn has_dyn(s: &str) -> bool {
    s.contains(DYN)
}

/// Judge one resolved argv whose program is `prog` (basename) found in `dir` (if named by path).
pub fn analyze(prog: &str, dir: Option<&str>, args: &[String]) -> Analysis {
    let k = knowledge();
    let mut a = Analysis::default();
    if let Some(e) = &k.load_error {
        a.effects.add(Category::Unknown);
        a.notes.push(format!("knowledge table failed to load: {e}"));
        return a;
    }
    if has_dyn(prog) {
        a.effects.add(Category::Unknown);
        a.notes.push("program name is computed at run time".into());
        return a;
    }
    if let Some(d) = dir {
        if !TRUSTED_DIRS.contains(&d) {
            // judged by location (a file, not the program) *and* by basename (for the
            // danger rules: `./rm -rf /` is still a recursive delete)
            let g = generic(prog, args);
            a.parsed = g.parsed;
            a.writes = g.writes;
            a.canonical = g.canonical;
            a.effects.add(Category::Unknown);
            a.runs_file = true;
            a.notes.push(format!(
                "runs the file {d}/{prog}, not a program from the fixed PATH"
            ));
            return a;
        }
    }
    // special forms first
    match prog {
        "find" => return find(args),
        "xargs" => return xargs(args),
        "env" => return env(args),
        "command" => return command(args),
        "ssh" => {
            let mut a = generic(prog, args);
            let p = parse_opts(args, &spec_value_opts("ssh"), &[], &[], true);
            if p.operands.len() > 1 {
                a.nested.push(Nested::Script {
                    text: p.operands[1..].join(" "),
                    via: "ssh".into(),
                    remote: true,
                    args: Vec::new(),
                });
            }
            return a;
        }
        "eval" => {
            let mut a = generic(prog, args);
            let text = args.join(" ");
            if has_dyn(&text) {
                a.effects.add(Category::Unknown);
                a.notes.push("eval of computed text".into());
            }
            a.nested.push(Nested::Script {
                text,
                via: "eval".into(),
                remote: false,
                args: Vec::new(),
            });
            return a;
        }
        "source" | "." => {
            let mut a = generic(prog, args);
            match args.first().map(|s| s.as_str()) {
                None | Some("/dev/stdin") | Some("-") => a.stdin_exec = true,
                Some(f) => {
                    a.reads.push(f.to_string());
                    a.runs_file = true;
                    a.notes
                        .push(format!("runs the commands of {f} in this shell"));
                }
            }
            return a;
        }
        "trap" => {
            let mut a = generic(prog, args);
            if let Some(cmd) = args.iter().find(|s| !s.starts_with('-')) {
                a.nested.push(Nested::Script {
                    text: cmd.clone(),
                    via: "trap".into(),
                    remote: false,
                    args: Vec::new(),
                });
            }
            return a;
        }
        "alias" => {
            let mut a = generic(prog, args);
            for arg in args {
                if let Some((_, v)) = arg.split_once('=') {
                    a.nested.push(Nested::Script {
                        text: v.to_string(),
                        via: "alias".into(),
                        remote: false,
                        args: Vec::new(),
                    });
                }
            }
            return a;
        }
        "test" | "[" | "[[" => {
            let mut a = generic(prog, args);
            const FILE_TESTS: &[&str] = &[
                "-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-b", "-c", "-p", "-S", "-g",
                "-u", "-k", "-O", "-G", "-N", "-nt", "-ot", "-ef", "-a",
            ];
            if args.iter().any(|x| FILE_TESTS.contains(&x.as_str())) {
                a.effects.add(Category::Readonly);
                a.notes.push("tests file metadata".into());
            }
            return a;
        }
        "set" if args.is_empty() => {
            let mut a = generic(prog, args);
            a.effects.add(Category::Env);
            a.notes.push("prints every shell variable".into());
            return a;
        }
        _ => {}
    }
    if let Some((canon, w)) = k.wrapper(prog) {
        return wrapper(canon, w, args);
    }
    let mut a = generic(prog, args);
    if let Some((_, spec)) = k.program(prog) {
        if spec.shell {
            shell(prog, args, &mut a);
        } else if spec.interpreter {
            interpreter(prog, spec, args, &mut a);
        }
    }
    a
}

fn spec_value_opts(name: &str) -> Vec<String> {
    knowledge()
        .program(name)
        .map(|(_, s)| s.value_opts.clone())
        .unwrap_or_default()
}

/// Table-driven judgement of an ordinary program.
fn generic(prog: &str, args: &[String]) -> Analysis {
    let mut a = Analysis::default();
    let Some((canon, spec)) = knowledge().program(prog) else {
        a.effects.add(Category::Unknown);
        a.notes
            .push(format!("`{prog}` is not in the knowledge table"));
        a.parsed = parse_opts(args, &[], &[], &[], false);
        return a;
    };
    a.canonical = Some(canon.clone());
    a.is_shell = spec.shell;
    let whole: Vec<&str> = spec
        .flags
        .iter()
        .map(|f| f.opt.as_str())
        .filter(|o| o.starts_with('-') && !o.starts_with("--") && o.len() > 2)
        .collect();
    let stop = spec.shell || spec.interpreter || !spec.subcommands.is_empty() || canon == "ssh";
    // tar's old-style first argument (`tar czf x.tgz dir`) is an option cluster
    let owned: Vec<String>;
    let args: &[String] = if canon == "tar"
        && args
            .first()
            .map(|a| {
                !a.starts_with('-') && !a.is_empty() && a.chars().all(|c| c.is_ascii_alphabetic())
            })
            .unwrap_or(false)
    {
        owned = std::iter::once(format!("-{}", args[0]))
            .chain(args[1..].iter().cloned())
            .collect();
        &owned
    } else {
        args
    };
    let p = parse_opts(args, &spec.value_opts, &spec.opt_value_opts, &whole, stop);
    // flag rules see every option, also those after a subcommand (`git log --ext-diff`)
    let p_flags = if !spec.subcommands.is_empty() {
        parse_opts(args, &spec.value_opts, &spec.opt_value_opts, &whole, false)
    } else {
        p.clone()
    };
    let mut fx = if spec.effects.is_empty() {
        Effects::from_names(&["unknown".to_string()])
    } else {
        Effects::from_names(&spec.effects)
    };
    if let Some(n) = &spec.note {
        a.notes.push(n.clone());
    }
    // subcommands (git)
    let mut operands: Vec<String> = p.operands.clone();
    if !spec.subcommands.is_empty() {
        if let Some(sub) = operands.first().cloned() {
            operands.remove(0);
            let sfx = match spec.subcommands.get(&sub) {
                Some(e) => Effects::from_names(e),
                None if has_dyn(&sub) => Effects::from_names(&["unknown".to_string()]),
                None => Effects::from_names(&spec.sub_default),
            };
            fx = sfx;
            a.notes.push(format!("subcommand `{sub}`"));
        } else {
            fx = Effects::from_names(&["readonly".to_string()]);
        }
    }
    // flag rules: `set` rules first, then `add`
    let mut operand_kind = spec.operands.clone();
    for rule in spec.flags.iter().filter(|r| r.set.is_some()) {
        if flag_hit(&p_flags, rule) {
            if let Some(set) = &rule.set {
                fx = Effects::from_names(set);
            }
            if let Some(o) = &rule.operands {
                operand_kind = o.clone();
            }
            a.notes.push(rule.note.clone());
        }
    }
    for rule in spec.flags.iter().filter(|r| r.set.is_none()) {
        if flag_hit(&p_flags, rule) {
            for c in &rule.add {
                fx.add(Category::parse(c).unwrap_or(Category::Unknown));
            }
            a.notes.push(rule.note.clone());
        }
    }
    // option values that are files
    for o in &p.opts {
        if let Some(v) = &o.value {
            if spec.read_opts.iter().any(|r| opt_matches(o, r)) {
                a.reads.push(v.clone());
            }
            if spec.write_opts.iter().any(|r| opt_matches(o, r)) && v != "-" && v != "/dev/stdout" {
                a.writes.push(v.clone());
            }
        }
    }
    // data operands (pattern / script)
    let data_given = spec.data_opts.iter().any(|d| p.has(d));
    let ndata = if data_given {
        0
    } else {
        spec.data_operands.min(operands.len())
    };
    let data: Vec<String> = operands.drain(..ndata).collect();
    // scripts (GTFOBins flag rules for sed / awk / jq)
    if let Some(lang) = &spec.script {
        let mut texts: Vec<String> = data.clone();
        for d in ["-e", "--expression"] {
            if lang == "sed" {
                texts.extend(p.values(d).into_iter().map(|s| s.to_string()));
            }
        }
        for t in texts {
            let sfx = match lang.as_str() {
                "sed" => scripts::sed(&t),
                "awk" => scripts::awk(&t),
                _ => scripts::jq(&t),
            };
            if has_dyn(&t) {
                fx.add(Category::Unknown);
                a.notes
                    .push(format!("{lang} program is computed at run time"));
            }
            if sfx.exec {
                fx.add(Category::Process);
            }
            for cmd in &sfx.commands {
                a.nested.push(Nested::Script {
                    text: cmd.clone(),
                    via: format!("{lang} command"),
                    remote: false,
                    args: Vec::new(),
                });
            }
            if !sfx.writes.is_empty() {
                fx.add(Category::Filesystem);
                a.writes.extend(sfx.writes);
            }
            if !sfx.reads.is_empty() {
                fx.add(Category::Readonly);
                a.reads.extend(sfx.reads);
            }
            if sfx.env {
                fx.add(Category::Env);
            }
            if sfx.network {
                fx.add(Category::Network);
            }
            if sfx.unknown {
                fx.add(Category::Unknown);
            }
            a.notes.extend(sfx.notes);
        }
    }
    // operands
    let positional: Vec<String> = operands
        .into_iter()
        .filter(|o| !(canon == "awk" && is_awk_assignment(o)))
        .collect();
    let harmless = |f: &String| {
        matches!(
            f.as_str(),
            "-" | "/dev/stdout" | "/dev/stderr" | "/dev/null" | "/dev/stdin"
        )
    };
    let files: Vec<String> = positional
        .iter()
        .filter(|f| !harmless(f))
        .cloned()
        .collect();
    match operand_kind.as_str() {
        "read" => a.reads.extend(files),
        "write" => a.writes.extend(files),
        "read_then_write" => {
            if positional.len() >= 2 {
                let mut f = positional;
                let last = f.pop().unwrap_or_default();
                a.reads.extend(f.into_iter().filter(|x| !harmless(x)));
                if !harmless(&last) {
                    a.writes.push(last);
                }
            } else {
                a.reads.extend(files);
            }
        }
        "dd" => {
            for f in &files {
                if let Some(v) = f.strip_prefix("if=") {
                    a.reads.push(v.to_string());
                } else if let Some(v) = f.strip_prefix("of=") {
                    if v != "/dev/stdout" && v != "/dev/null" {
                        a.writes.push(v.to_string());
                    }
                }
            }
        }
        _ => {}
    }
    if !a.reads.is_empty() {
        fx.add(Category::Readonly);
    }
    if !a.writes.is_empty() && a.writes.iter().any(|w| w != "/dev/null") {
        fx.add(Category::Filesystem);
    }
    if spec.decoder || spec.decoder_flags.iter().any(|d| p.has(d)) {
        a.decoder = true;
    }
    if spec.source_kind.as_deref() == Some("network") {
        a.network_source = true;
    }
    if let Some(b) = &spec.block {
        a.block = Some(b.clone());
    }
    a.effects = fx;
    a.parsed = p;
    a
}

fn is_awk_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((n, _)) => !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        None => false,
    }
}

fn flag_hit(p: &Parsed, rule: &FlagRule) -> bool {
    p.opts.iter().any(|o| {
        opt_matches(o, &rule.opt)
            && match &rule.value {
                Some(v) => o.value.as_deref() == Some(v.as_str()),
                None => true,
            }
    })
}

fn shell(prog: &str, args: &[String], a: &mut Analysis) {
    // sh [-opts] -c STRING [name args...] | sh [-opts] FILE args | sh [-s]
    let mut i = 0;
    let mut c_mode = false;
    let mut s_mode = false;
    while i < args.len() {
        let x = &args[i];
        if x == "--" {
            i += 1;
            break;
        }
        if x == "-o" || x == "+o" || x == "-O" || x == "+O" || x == "--rcfile" || x == "--init-file"
        {
            i += 2;
            continue;
        }
        if (x.starts_with('-') || x.starts_with('+')) && x.len() > 1 {
            if !x.starts_with("--") {
                c_mode |= x.contains('c');
                s_mode |= x.contains('s');
            }
            i += 1;
            continue;
        }
        break;
    }
    let rest = &args[i.min(args.len())..];
    a.effects = Effects::default();
    a.reads.clear();
    if c_mode {
        match rest.first() {
            Some(text) => {
                if has_dyn(text) {
                    a.effects.add(Category::Unknown);
                    a.notes.push(format!("{prog} -c runs computed code"));
                }
                a.nested.push(Nested::Script {
                    text: text.clone(),
                    via: format!("{prog} -c"),
                    remote: false,
                    args: rest[1..].to_vec(),
                });
            }
            None => {
                a.effects.add(Category::Unknown);
            }
        }
    } else if s_mode || rest.is_empty() || rest[0] == "-" || rest[0] == "/dev/stdin" {
        a.stdin_exec = true;
        a.effects.add(Category::Unknown);
        a.notes.push(format!("{prog} runs code read from stdin"));
    } else {
        a.effects.add(Category::Unknown);
        a.runs_file = true;
        a.reads.push(rest[0].clone());
        a.effects.add(Category::Readonly);
        a.notes.push(format!("{prog} runs the script {}", rest[0]));
    }
}

fn interpreter(prog: &str, spec: &ProgramSpec, args: &[String], a: &mut Analysis) {
    let p = parse_opts(args, &spec.value_opts, &[], &[], true);
    let mut code = false;
    for o in &p.opts {
        if spec.code_opts.iter().any(|c| opt_matches(o, c)) {
            if let Some(v) = &o.value {
                code = true;
                a.nested.push(Nested::Code {
                    lang: prog.to_string(),
                    text: v.clone(),
                });
            }
        }
        if o.name == "-m" {
            code = true;
        }
    }
    a.reads.clear();
    a.effects = Effects::default();
    a.effects.add(Category::Unknown);
    if !code {
        match p.operands.first().map(|s| s.as_str()) {
            None | Some("-") | Some("/dev/stdin") => {
                a.stdin_exec = true;
                a.notes.push(format!("{prog} runs code read from stdin"));
            }
            Some(f) => {
                a.runs_file = true;
                a.reads.push(f.to_string());
                a.notes.push(format!("{prog} runs the script {f}"));
            }
        }
    }
}

fn wrapper(canon: &str, w: &WrapperSpec, args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some(canon.to_string()),
        ..Default::default()
    };
    let vo: Vec<String> = w
        .value_opts
        .iter()
        .chain(w.string_opts.iter())
        .cloned()
        .collect();
    let mut p = parse_opts(args, &vo, &[], &[], true);
    if !w.string_opts.is_empty() {
        // `flock FILE -c CMD`: a string option may follow the operands
        let full = parse_opts(args, &vo, &[], &[], false);
        if full
            .opts
            .iter()
            .any(|o| w.string_opts.iter().any(|s| opt_matches(o, s)))
        {
            p = full;
        }
    }
    a.effects = Effects::from_names(&w.effects);
    if let Some(b) = &w.block {
        a.block = Some(b.clone());
    }
    for o in &p.opts {
        if w.string_opts.iter().any(|s| opt_matches(o, s)) {
            if let Some(v) = &o.value {
                a.nested.push(Nested::Script {
                    text: v.clone(),
                    via: format!("{canon} {}", o.name),
                    remote: w.remote,
                    args: Vec::new(),
                });
            }
        }
        if canon == "time" && (o.name == "-o" || o.name == "--output") {
            if let Some(v) = &o.value {
                a.writes.push(v.clone());
                a.effects.add(Category::Filesystem);
            }
        }
    }
    let mut ops = p.operands.clone();
    let skip = w.skip_operands.min(ops.len());
    let skipped: Vec<String> = ops.drain(..skip).collect();
    if canon == "flock" {
        a.writes.extend(skipped.iter().cloned());
    }
    if canon == "chroot" {
        if let Some(d) = skipped.first() {
            a.notes.push(format!("changes root to {d}"));
        }
    }
    if !ops.is_empty() && !w.no_command {
        if w.join_operands {
            a.nested.push(Nested::Script {
                text: ops.join(" "),
                via: canon.to_string(),
                remote: w.remote,
                args: Vec::new(),
            });
        } else {
            a.nested.push(Nested::Argv {
                argv: ops,
                via: canon.to_string(),
                stdin_args: false,
                replace: None,
                cwd: None,
            });
        }
    }
    a.parsed = p;
    a
}

fn find(args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some("find".into()),
        ..Default::default()
    };
    a.effects.add(Category::Readonly);
    let mut i = 0;
    // leading global options -H -L -P -D x -Olevel
    while i < args.len()
        && (args[i] == "-H" || args[i] == "-L" || args[i] == "-P" || args[i].starts_with("-O"))
    {
        i += 1;
    }
    if i < args.len() && args[i] == "-D" {
        i += 2;
    }
    let mut starts = Vec::new();
    while i < args.len() && !args[i].starts_with('-') && args[i] != "(" && args[i] != "!" {
        starts.push(args[i].clone());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(".".to_string());
    }
    a.reads.extend(starts.iter().cloned());
    const TESTS: &[&str] = &[
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-wholename",
        "-iwholename",
        "-regex",
        "-iregex",
        "-type",
        "-xtype",
        "-newer",
        "-anewer",
        "-cnewer",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-size",
        "-user",
        "-group",
        "-uid",
        "-gid",
        "-perm",
        "-empty",
        "-mindepth",
        "-links",
        "-inum",
        "-samefile",
        "-lname",
        "-ilname",
        "-nouser",
        "-nogroup",
        "-used",
        "-readable",
        "-writable",
        "-executable",
        "-fstype",
        "-context",
    ];
    let filtered = args[i..].iter().any(|x| TESTS.contains(&x.as_str()));
    let placeholder: Vec<String> = starts
        .iter()
        .map(|s| {
            if filtered {
                format!("{}/{ANY_FILE}", s.trim_end_matches('/'))
            } else {
                s.clone()
            }
        })
        .collect();
    let mut deletes = false;
    while i < args.len() {
        let x = args[i].as_str();
        i += 1;
        match x {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let mut argv = Vec::new();
                while i < args.len() && args[i] != ";" && args[i] != "+" {
                    argv.push(args[i].clone());
                    i += 1;
                }
                i += 1;
                let mut out = Vec::new();
                for w in argv {
                    if w == "{}" {
                        out.extend(placeholder.iter().cloned());
                    } else if w.contains("{}") {
                        out.push(w.replace("{}", &placeholder.join(" ")));
                    } else {
                        out.push(w);
                    }
                }
                if out.is_empty() {
                    a.effects.add(Category::Unknown);
                } else {
                    a.nested.push(Nested::Argv {
                        argv: out,
                        via: format!("find {x}"),
                        stdin_args: false,
                        replace: None,
                        cwd: None,
                    });
                }
                a.notes
                    .push(format!("find {x} runs a command for each file"));
            }
            "-delete" => {
                deletes = true;
                a.effects.add(Category::Filesystem);
                a.notes.push("find -delete deletes the files found".into());
            }
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                if i < args.len() {
                    a.writes.push(args[i].clone());
                    i += 1;
                }
                if x == "-fprintf" {
                    i += 1;
                }
                a.effects.add(Category::Filesystem);
                a.notes.push(format!("find {x} writes a file (GTFOBins)"));
            }
            _ => {}
        }
    }
    if deletes {
        a.writes.extend(placeholder);
    }
    a.parsed = Parsed {
        opts: if deletes {
            vec![Opt {
                name: "-delete".into(),
                given: "-delete".into(),
                value: None,
            }]
        } else {
            vec![]
        },
        operands: starts,
    };
    a
}

fn xargs(args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some("xargs".into()),
        ..Default::default()
    };
    let vo: Vec<String> = [
        "-I",
        "-n",
        "--max-args",
        "-L",
        "--max-lines",
        "-P",
        "--max-procs",
        "-s",
        "--max-chars",
        "-d",
        "--delimiter",
        "-E",
        "-a",
        "--arg-file",
        "--process-slot-var",
        "--replace",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let ov: Vec<String> = ["-i", "-e", "-l"].iter().map(|s| s.to_string()).collect();
    let p = parse_opts(args, &vo, &ov, &[], true);
    let mut replace: Option<String> = None;
    for o in &p.opts {
        match o.name.as_str() {
            "-a" | "--arg-file" => {
                if let Some(v) = &o.value {
                    a.reads.push(v.clone());
                    a.effects.add(Category::Readonly);
                }
            }
            "-I" | "--replace" => replace = Some(o.value.clone().unwrap_or_else(|| "{}".into())),
            "-i" => replace = Some(o.value.clone().unwrap_or_else(|| "{}".into())),
            _ => {}
        }
    }
    let mut argv: Vec<String> = if p.operands.is_empty() {
        vec!["echo".to_string()]
    } else {
        p.operands.clone()
    };
    if argv.is_empty() {
        argv.push("echo".into());
    }
    a.nested.push(Nested::Argv {
        argv,
        via: "xargs".into(),
        stdin_args: replace.is_none(),
        replace,
        cwd: None,
    });
    a.parsed = p;
    a
}

fn env(args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some("env".into()),
        ..Default::default()
    };
    let mut i = 0;
    let mut split: Option<String> = None;
    let mut chdir: Option<String> = None;
    while i < args.len() {
        let x = &args[i];
        if x == "--" {
            i += 1;
            break;
        }
        if x == "-"
            || x == "-i"
            || x == "--ignore-environment"
            || x == "-0"
            || x == "--null"
            || x == "-v"
            || x == "--debug"
        {
            i += 1;
            continue;
        }
        if x == "-C" || x == "--chdir" {
            chdir = args.get(i + 1).cloned();
            i += 2;
            continue;
        }
        if let Some(d) = x
            .strip_prefix("--chdir=")
            .or_else(|| x.strip_prefix("-C").filter(|d| !d.is_empty()))
        {
            chdir = Some(d.to_string());
            i += 1;
            continue;
        }
        if x == "-u" || x == "--unset" || x == "-P" || x == "--argv0" || x == "-a" {
            i += 2;
            continue;
        }
        if let Some(s) = x
            .strip_prefix("-S")
            .or_else(|| x.strip_prefix("--split-string="))
        {
            if s.is_empty() {
                split = args.get(i + 1).cloned();
                i += 2;
            } else {
                split = Some(s.to_string());
                i += 1;
            }
            break;
        }
        if x == "--split-string" {
            split = args.get(i + 1).cloned();
            i += 2;
            break;
        }
        if x.starts_with("-u")
            || x.starts_with("-C")
            || x.starts_with("--unset=")
            || x.starts_with("--chdir=")
        {
            i += 1;
            continue;
        }
        if let Some((name, _)) = x.split_once('=') {
            if !name.is_empty() && !name.starts_with('-') {
                if super::parse::sensitive_var(name) {
                    a.effects.add(Category::Env);
                    a.notes.push(format!("sets {name} for the command"));
                }
                i += 1;
                continue;
            }
        }
        if x.starts_with('-') {
            i += 1;
            continue;
        }
        break;
    }
    let rest: Vec<String> = args[i.min(args.len())..].to_vec();
    if let Some(s) = split {
        a.notes
            .push("env -S splits a string into a command (GTFOBins)".into());
        let mut text = s;
        for r in &rest {
            text.push(' ');
            text.push_str(r);
        }
        a.nested.push(Nested::Script {
            text,
            via: "env -S".into(),
            remote: false,
            args: Vec::new(),
        });
    } else if rest.is_empty() {
        a.effects.add(Category::Env);
        a.notes.push("prints the environment".into());
    } else {
        a.nested.push(Nested::Argv {
            argv: rest,
            via: "env".into(),
            stdin_args: false,
            replace: None,
            cwd: chdir,
        });
    }
    a
}

fn command(args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some("command".into()),
        ..Default::default()
    };
    let mut i = 0;
    let mut lookup = false;
    while i < args.len() && args[i].starts_with('-') && args[i] != "--" {
        if args[i].contains('v') || args[i].contains('V') {
            lookup = true;
        }
        i += 1;
    }
    if i < args.len() && args[i] == "--" {
        i += 1;
    }
    if lookup {
        a.effects.add(Category::Readonly);
        a.notes.push("looks a program up in PATH".into());
        return a;
    }
    if i < args.len() {
        a.nested.push(Nested::Argv {
            argv: args[i..].to_vec(),
            via: "command".into(),
            stdin_args: false,
            replace: None,
            cwd: None,
        });
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn table_loads() {
        assert!(
            knowledge().load_error.is_none(),
            "{:?}",
            knowledge().load_error
        );
        assert!(knowledge().len() > 200);
    }

    #[test]
    fn getopt_like() {
        let p = parse_opts(
            &v(&["-n5", "-rf", "--lines=3", "x"]),
            &v(&["-n", "--lines"]),
            &[],
            &[],
            false,
        );
        assert_eq!(p.operands, v(&["x"]));
        assert_eq!(p.values("-n"), vec!["5"]);
        assert!(p.has("-r") && p.has("-f"));
        let p = parse_opts(
            &v(&["--compress-prog=sh"]),
            &v(&["--compress-program"]),
            &[],
            &[],
            false,
        );
        assert!(p.has("--compress-program"));
    }

    #[test]
    fn judge() {
        assert!(analyze("grep", None, &v(&["x"])).effects.is_pure());
        assert!(analyze("grep", None, &v(&["x", "f"]))
            .effects
            .has(Category::Readonly));
        assert!(analyze("sort", None, &v(&["-o", "f"]))
            .effects
            .has(Category::Filesystem));
        assert!(analyze("sort", None, &v(&["--compress-program=sh"]))
            .effects
            .has(Category::Process));
        assert!(analyze("cat", Some("./bin"), &v(&[]))
            .effects
            .has(Category::Unknown));
        assert!(analyze("cat", Some("/bin"), &v(&[])).effects.is_pure());
    }
}
