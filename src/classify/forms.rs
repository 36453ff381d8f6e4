//! Special forms that the generic table cannot express: shells (`sh -c`, script files,
//! stdin), interpreters (`python -c`), wrappers (`timeout`, `nice`, `sudo`, `flock -c`...),
//! `find` (`-exec`, `-delete`, `-fprint`), `xargs`, `env` (`-S`, `-C`, assignments) and
//! `command`.

use super::judge::{has_dyn, Analysis, Nested};
use super::knowledge::{Effects, ProgramSpec, WrapperSpec};
use super::opts::{opt_matches, parse_opts, Opt, Parsed};
use super::types::{Category, ANY_FILE, FOUND};

pub(super) fn shell(prog: &str, args: &[String], a: &mut Analysis) {
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

/// `python -m MODULE ARGS`: the module and its arguments, when `-m` comes before any code option
/// or script operand.
fn module_of<'a>(spec: &ProgramSpec, args: &'a [String]) -> Option<(&'a str, &'a [String])> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-m" {
            return args.get(i + 1).map(|m| (m.as_str(), &args[i + 2..]));
        }
        if let Some(m) = a
            .strip_prefix("-m")
            .filter(|m| !m.is_empty() && !a.starts_with("--"))
        {
            return Some((m, &args[i + 1..]));
        }
        if spec.code_opts.iter().any(|c| c == a) || a == "--" || !a.starts_with('-') {
            return None;
        }
        i += if spec.value_opts.iter().any(|v| v == a) {
            2
        } else {
            1
        };
    }
    None
}

pub(super) fn interpreter(prog: &str, spec: &ProgramSpec, args: &[String], a: &mut Analysis) {
    // A module the table knows is judged as that program (`python3 -m pip install` is pip's).
    if let Some((module, rest)) = module_of(spec, args) {
        if let Some(target) = spec.modules.get(module) {
            let g = super::judge::generic(target, rest);
            a.effects = g.effects;
            a.reads = g.reads;
            a.writes = g.writes;
            a.notes.extend(g.notes);
            a.notes.push(format!(
                "{prog} -m {module}: judged as `{target}` (its program entry, src/programs/)"
            ));
            return;
        }
    }
    let p = parse_opts(args, &spec.value_opts, &[], &[], true);
    let mut code = false;
    if p.opts
        .iter()
        .any(|o| spec.run_opts.iter().any(|r| opt_matches(o, r)))
    {
        // `node --test`: runs the test files it finds in the working directory.
        code = true;
        a.runs_file = true;
        a.notes
            .push(format!("{prog} runs the workspace files it finds itself"));
    }
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

pub(super) fn wrapper(canon: &str, w: &WrapperSpec, args: &[String]) -> Analysis {
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

pub(super) fn find(args: &[String]) -> Analysis {
    let mut a = Analysis {
        canonical: Some(crate::programs::Form::Find.name().into()),
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
    let by_name = found_by_name(&args[i..]);
    let placeholder: Vec<String> = starts
        .iter()
        .map(|s| match &by_name {
            Some(p) => format!("{}/{FOUND}{p}", s.trim_end_matches('/')),
            None if filtered => format!("{}/{ANY_FILE}", s.trim_end_matches('/')),
            None => s.clone(),
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

/// The one `-name` pattern of a find expression every file it acts on matches, when the
/// expression is that plain: `-name PATTERN`, `-type f|d`, `-prune`, `-maxdepth N`,
/// `-mindepth N`, then one action (`-delete`, `-print`, `-exec … {} +|;`). An operator
/// (`-o`, `!`, `-not`, parentheses), any other test, a second `-name`, or a pattern beyond
/// `[A-Za-z0-9._*?+@%,=~:-]` (a `/`, a bracket, a blank, a computed part) or with no literal
/// character (`*`, `?*`) gives None.
fn found_by_name(expr: &[String]) -> Option<String> {
    let mut name = None;
    let mut i = 0;
    while i < expr.len() {
        match expr[i].as_str() {
            "-name" => {
                let p = expr.get(i + 1)?;
                if name.is_some() {
                    return None;
                }
                name = Some(p.clone());
                i += 2;
            }
            "-type" => {
                if !matches!(expr.get(i + 1)?.as_str(), "f" | "d") {
                    return None;
                }
                i += 2;
            }
            "-maxdepth" | "-mindepth" => {
                expr.get(i + 1)?.parse::<u32>().ok()?;
                i += 2;
            }
            "-prune" | "-print" | "-delete" => i += 1,
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                i += 1;
                while i < expr.len() && expr[i] != ";" && expr[i] != "+" {
                    i += 1;
                }
                i += 1;
            }
            _ => return None,
        }
    }
    name.filter(|p| super::types::plain_name_pattern(p))
}

pub(super) fn xargs(args: &[String]) -> Analysis {
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

pub(super) fn env(args: &[String]) -> Analysis {
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
        // It prints the command's own environment, which the executor filtered (and whose
        // secrets are placeholders): a read, not a change later commands inherit.
        a.effects.add(Category::Readonly);
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

pub(super) fn command(args: &[String]) -> Analysis {
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
