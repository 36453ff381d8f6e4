//! Judging one resolved argv against the knowledge table: its effects (with the flag
//! rules and the sed/awk/jq script analysis), the files it reads and writes, the nested
//! commands it would run, and the facts the danger rules need (decoder, network source,
//! stdin execution). Special forms are delegated to `forms.rs`.

use super::forms::{command, env, find, interpreter, shell, wrapper, xargs};
use super::knowledge::{knowledge, Effects, FlagRule, TRUSTED_DIRS};
use super::opts::{opt_matches, parse_opts, Parsed};
use super::scripts;
use super::types::{Category, DYN};
use crate::programs::Refine;

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

/// Whether `p` names a shell (its entry says `shell = true`).
pub fn is_shell_name(p: &str) -> bool {
    knowledge().program(p).is_some_and(|(_, s)| s.shell)
}

pub(super) fn has_dyn(s: &str) -> bool {
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
    // special forms first (an entry names its form: `form = "find"`)
    if k.program(prog).and_then(|(_, s)| s.form) == Some(crate::programs::Form::Find) {
        return find(args);
    }
    match prog {
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
/// Long because it is the table of ordinary programs' argument rules, an arm per family.
pub(super) fn generic(prog: &str, args: &[String]) -> Analysis {
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
    let stop = spec.shell
        || spec.interpreter
        || !spec.subcommands.is_empty()
        || spec.options_end_at_operand;
    // an old-style first argument (`tar czf x.tgz dir`) is an option cluster
    let owned: Vec<String>;
    let args: &[String] = if spec.bare_first_options
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
                Some(s) => Effects::from_names(&s.effects),
                None if has_dyn(&sub) => Effects::from_names(&["unknown".to_string()]),
                None => Effects::from_names(&spec.sub_default),
            };
            fx = sfx;
            a.notes.push(format!("subcommand `{sub}`"));
        } else {
            fx = Effects::from_names(
                spec.sub_none
                    .as_deref()
                    .unwrap_or(&["readonly".to_string()]),
            );
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
    // (a flag that only says how learning treats it changes nothing here)
    let acts = |r: &&FlagRule| !(r.add.is_empty() && r.remove.is_empty() && r.note.is_empty());
    for rule in spec.flags.iter().filter(|r| r.set.is_none()).filter(acts) {
        if flag_hit(&p_flags, rule) {
            for c in &rule.add {
                fx.add(Category::parse(c).unwrap_or(Category::Unknown));
            }
            a.notes.push(rule.note.clone());
        }
    }
    // then what an option takes away (an unknown name takes nothing away)
    for rule in spec.flags.iter().filter(|r| !r.remove.is_empty()) {
        if flag_hit(&p_flags, rule) {
            for c in rule.remove.iter().filter_map(|c| Category::parse(c)) {
                fx.remove(c);
            }
        }
    }
    match spec.refine {
        Some(Refine::Git) => super::git::apply(args, &mut fx, &mut a.notes, &mut a.writes),
        Some(Refine::Npm) => super::npm::apply(prog, &p_flags, &mut fx, &mut a.notes),
        None => {}
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
        .filter(|o| !(spec.assignment_operands && is_awk_assignment(o)))
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
