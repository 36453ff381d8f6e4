//! `brainloop programs list|show NAME|check FILE`: what brainloop knows about each program and
//! from which file each rule came; and the start-up step that installs the program table (the
//! built-in entries with the operator's `programs.d/` merged in, their examples checked).

use crate::config::Config;
use crate::programs::{self, Entry, Table};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ProgramsArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Subcommand, Debug)]
pub enum What {
    /// Every program entry: its names, the file and line it comes from, what it knows.
    List,
    /// Everything known about one program (classification, flags and how learning treats
    /// them, run-on-use paths and fields, examples), each with the file it came from.
    Show { name: String },
    /// Validate an entry file as the worker would load it (with the configured `programs.d`):
    /// syntax, that it weakens no built-in rule, and that its examples hold. Exit 0: it loads.
    Check { file: PathBuf },
}

/// The table for this process: built-in entries, then the operator's files (`extra` too).
fn load(config: &Config, extra: Option<&PathBuf>) -> Result<Table> {
    let mut places = config.program_places()?;
    let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    // a file checked from the configured programs.d is loaded once, where it is
    if let Some(x) = extra.filter(|x| !places.iter().any(|p| canon(p) == canon(x))) {
        places.push(x.clone());
    }
    let mut forbidden = vec![config.workspace.clone()];
    forbidden.extend(config.sandbox.readable_roots.iter().cloned());
    let uid = nix::unistd::geteuid().as_raw();
    programs::operator::load(programs::builtin()?, &places, &forbidden, uid)
}

/// Installs the program table before anything classifies; Err: an operator's entry is refused
/// (the process must not start), naming the file, the line and the rule.
pub fn install(config: &Config) -> Result<()> {
    let t = load(config, None).context("the program entries")?;
    programs::install(t)?;
    crate::bash::examples::check(programs::table()?, false).context("the program entries")?;
    Ok(())
}

pub fn run(config: &Config, args: &ProgramsArgs) -> Result<i32> {
    match &args.what {
        What::List => {
            let t = programs::table()?;
            print!("{}", list(t));
            Ok(0)
        }
        What::Show { name } => {
            let t = programs::table()?;
            let about = t.about(name);
            if about.is_empty() {
                eprintln!(
                    "brainloop: no entry knows {}: it is judged as an unknown program (every command of it asks); `brainloop programs list` shows the known ones",
                    crate::shown::line(name)
                );
                return Ok(1);
            }
            for e in about {
                print!("{}{}", show(e), learning(t, e));
            }
            Ok(0)
        }
        What::Check { file } => {
            let t = match load(config, Some(file)) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("brainloop: {} is refused: {e:#}", file.display());
                    return Ok(1);
                }
            };
            let mine: Vec<&Entry> = t
                .programs
                .iter()
                .filter(|e| {
                    e.examples.iter().any(|x| from(x, file))
                        || e.origin.file == file.display().to_string()
                })
                .collect();
            programs::install(t.clone())?;
            match crate::bash::examples::check(programs::table()?, false) {
                Ok(n) => {
                    println!(
                        "{}: loads; {} entr{} touched, {n} operator example(s) hold",
                        file.display(),
                        mine.len(),
                        if mine.len() == 1 { "y" } else { "ies" }
                    );
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("brainloop: {} is refused: {e:#}", file.display());
                    Ok(1)
                }
            }
        }
    }
}

fn from(x: &programs::Example, file: &std::path::Path) -> bool {
    x.from
        .as_ref()
        .is_some_and(|o| o.file == file.display().to_string())
}

fn list(t: &Table) -> String {
    let mut o =
        String::from("program                  from                                   knows\n");
    let mut v: Vec<&Entry> = t.programs.iter().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    for e in v {
        let mut knows = Vec::new();
        if let Some(s) = &e.spec {
            knows.push(if s.block.is_some() {
                "blocked"
            } else {
                "classified"
            });
        }
        if let Some(r) = &e.run_on_use {
            knows.push(if r.none.is_some() {
                "runs nothing on use"
            } else {
                "run-on-use"
            });
        }
        if !e.examples.is_empty() {
            knows.push("examples");
        }
        o.push_str(&format!(
            "{:<24} {:<38} {}\n",
            crate::shown::line(&e.name),
            crate::shown::line(&e.origin.to_string()),
            knows.join(", ")
        ));
    }
    for w in &t.wrappers {
        o.push_str(&format!(
            "{:<24} {:<38} wrapper\n",
            crate::shown::line(&w.spec.name),
            crate::shown::line(&w.origin.to_string())
        ));
    }
    o
}

/// What learning knows of an entry: how its signature reads it, what bounds its change set,
/// the families its names are members of.
fn learning(t: &programs::Table, e: &Entry) -> String {
    let s = |x: &str| crate::shown::line(x);
    let mut o = String::new();
    if let Some(g) = &e.signature {
        let keys = [
            ("runner (the overlay captures what it runs)", &g.runner),
            ("first operand a subcommand", &g.subcommand),
            ("first operand an expression", &g.expression_first),
            (
                "operands after the expression are paths",
                &g.paths_after_expression,
            ),
            ("operands are paths", &g.path_operands),
            ("-m/--message take a message", &g.message_flags),
            ("-m MODULE kept", &g.keep_module),
            ("inline code never learned", &g.inline_code),
            ("script analysed", &g.script),
        ];
        for (what, names) in keys {
            let who = match names {
                programs::Names::None => continue,
                programs::Names::All => "all its names".to_string(),
                programs::Names::Some(l) => l.join(", "),
            };
            o.push_str(&format!("  signature: {what}: {}\n", s(&who)));
        }
    }
    if let Some(c) = &e.spec {
        match &c.recursive {
            Some(programs::Recursive::Always) => {
                o.push_str("  covers what lies beneath a directory it names, always\n")
            }
            Some(programs::Recursive::Flags(f)) => o.push_str(&format!(
                "  covers what lies beneath a directory it names with {}\n",
                s(&f.join(" "))
            )),
            None => {}
        }
        for x in &c.same_as {
            o.push_str(&format!("  `{}` signs as `{}`\n", s(&x.from), s(&x.to)));
        }
    }
    let names = e.names();
    for f in &t.families {
        let member = f
            .members
            .iter()
            .any(|m| m.programs.iter().any(|p| names.contains(&p.as_str())))
            || f.classes.iter().any(|c| {
                c.split([' ', ':'])
                    .next()
                    .is_some_and(|p| names.contains(&p))
            });
        if member {
            o.push_str(&format!("  family \"{}\": {}\n", s(&f.name), s(&f.shows)));
        }
    }
    o
}

/// One entry, whole (long: it prints every part of the format in turn).
fn show(e: &Entry) -> String {
    let s = |x: &str| crate::shown::line(x);
    let mut o = format!("{} — {}\n", s(&e.name), s(&e.origin.to_string()));
    if let Some(c) = &e.spec {
        if !c.aliases.is_empty() {
            o.push_str(&format!("  aliases: {}\n", s(&c.aliases.join(", "))));
        }
        o.push_str(&format!("  effects: {}\n", s(&c.effects.join(", "))));
        if let Some(b) = &c.block {
            o.push_str(&format!("  blocked: {}\n", s(b)));
        }
        if let Some(f) = c.form {
            o.push_str(&format!(
                "  classified by the special form `{}`\n",
                f.name()
            ));
        }
        let mut subs: Vec<_> = c.subcommands.iter().collect();
        subs.sort_by(|a, b| a.0.cmp(b.0));
        for (n, sub) in subs {
            let neutral = if sub.neutral.is_empty() {
                String::new()
            } else {
                format!("; neutral for learning: {}", sub.neutral.join(" "))
            };
            o.push_str(&format!(
                "  subcommand {}: {}{}\n",
                s(n),
                s(&sub.effects.join(", ")),
                s(&neutral)
            ));
        }
        for f in &c.flags {
            let (how, fx) = if !f.add.is_empty() {
                ("adds", f.add.join(", "))
            } else if !f.remove.is_empty() {
                ("removes", f.remove.join(", "))
            } else {
                ("sets", f.set.clone().unwrap_or_default().join(", "))
            };
            let learn = match f.learn {
                Some(programs::Learn::Never) => "; never learned",
                Some(programs::Learn::Neutral) => "; neutral for learning",
                None => "",
            };
            o.push_str(&format!("  flag {}: {how} {}{learn}\n", s(&f.opt), s(&fx)));
        }
    } else {
        o.push_str("  not classified: judged as an unknown program (asks)\n");
    }
    if let Some(r) = &e.run_on_use {
        o.push_str(&format!(
            "  run-on-use knowledge for: {}\n",
            s(&r.names.join(", "))
        ));
        if let Some(n) = &r.none {
            o.push_str(&format!(
                "  runs nothing of the workspace on use: {}\n",
                s(n)
            ));
        }
        for x in &r.rules {
            o.push_str(&format!(
                "  asks for {}: {}\n",
                s(&x.paths.join(", ")),
                s(&x.why)
            ));
        }
        for x in &r.environments {
            o.push_str(&format!(
                "  asks for {} in {}: {}\n",
                s(&x.run.join(", ")),
                s(&x.names.join(", ")),
                s(&x.why)
            ));
        }
        for m in &r.manifests {
            o.push_str(&format!(
                "  manifest {}: {}\n",
                s(&m.paths.join(", ")),
                s(&m.why)
            ));
            if !m.fields.is_empty() {
                o.push_str(&format!(
                    "    fields that ask: {}\n",
                    s(&m.fields.join(", "))
                ));
            }
        }
    }
    for x in &e.examples {
        let at = x.from.as_ref().map(|o| o.to_string()).unwrap_or_default();
        let what = match (&x.command, &x.path) {
            (Some(c), _) => format!("`{}`", s(c)),
            (_, Some(p)) => format!("{} run_on_use = {}", s(p), x.run_on_use.unwrap_or(false)),
            _ => String::new(),
        };
        o.push_str(&format!("  example {what} ({})\n", s(&at)));
    }
    o
}
