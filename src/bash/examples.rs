//! The program entries' examples, checked against the mechanisms that decide them: this module
//! owns *whether an entry's examples hold* — a command example's verdict, category, permission
//! set, signature and learnability as `classify::check` and `bash::signatures` decide them; a
//! path example's run-on-use verdict as `bash::protected::judge` decides it for a one-path change
//! set. Start-up checks the operator's examples (a failing one refuses to start, naming the
//! entry and the example); `programs check` and the unit tests check every example.

use crate::bash::changes;
use crate::bash::protected::{decide, Facts, Table as Rules};
use crate::classify::{check as classify, Context};
use crate::permset::PathLists;
use crate::programs::{Example, Table};
use anyhow::{bail, Result};
use std::path::Path;

/// What one example decides, or why it does not hold.
fn judge(ex: &Example, rules: &Rules) -> std::result::Result<(), String> {
    if let Some(cmd) = &ex.command {
        return judge_command(cmd, ex);
    }
    let (Some(path), Some(asks)) = (&ex.path, ex.run_on_use) else {
        return Err("an example needs `command`, or `path` with `run_on_use`".into());
    };
    if ex.after.is_some() {
        // manifest examples need a change set with contents: judged by the unit tests of
        // `bash::run_on_use`, which compute one on disk
        return Ok(());
    }
    let cs = changes::hypothetical(path);
    let j = decide(rules, &cs, &Facts::default(), &[]);
    match (asks, j.hits.first()) {
        (true, None) => Err(format!(
            "{path}: run_on_use = true, but no rule asks for it"
        )),
        (false, Some(h)) => Err(format!(
            "{path}: run_on_use = false, but the rule {} asks ({})",
            h.rule, h.why
        )),
        _ => Ok(()),
    }
}

fn judge_command(cmd: &str, ex: &Example) -> std::result::Result<(), String> {
    let r = classify(cmd, &Context::default());
    let verdict = r.verdict();
    let mut wrong = Vec::new();
    let mut want = |what: &str, want: &Option<String>, got: &str| {
        if let Some(w) = want {
            if w != got {
                wrong.push(format!("{what} {got} (the example says {w})"));
            }
        }
    };
    want("verdict", &ex.verdict, verdict);
    want("category", &ex.category, r.category.as_str());
    want("set", &ex.set, &r.permission_set.to_string());
    if ex.signature.is_some() || ex.learnable.is_some() {
        let ws = Path::new("/workspace");
        let sigs = crate::bash::signatures::of_report(&r, ws, ws);
        let text = sigs
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ; ");
        want("signature", &ex.signature, &text);
        if let Some(l) = ex.learnable {
            let got = !sigs.is_empty() && sigs.iter().all(|s| s.learnable);
            if got != l {
                let why: Vec<&str> = sigs.iter().filter_map(|s| s.why_not.as_deref()).collect();
                wrong.push(format!("learnable {got} (the example says {l}; {why:?})"));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("`{cmd}`: {}", wrong.join(", ")))
    }
}

/// Checks the examples of `t` (only the operator's when `all` is false) against the table in
/// use (`programs::install` it first): the count checked; Err names each failing example with
/// its entry's file and line.
pub fn check(t: &Table, all: bool) -> Result<usize> {
    let todo: Vec<(&crate::programs::Entry, &Example)> = t
        .programs
        .iter()
        .flat_map(|e| e.examples.iter().map(move |ex| (e, ex)))
        .filter(|(_, ex)| all || ex.from.as_ref().is_some_and(|o| !o.builtin))
        .collect();
    if todo.is_empty() {
        return Ok(0);
    }
    let rules = Rules::new(&PathLists::default())?;
    let failed: Vec<String> = todo
        .iter()
        .filter_map(|(e, ex)| {
            judge(ex, &rules).err().map(|why| {
                let at = ex.from.as_ref().unwrap_or(&e.origin);
                format!("{at}: program {}: example {why}", e.name)
            })
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} example(s) of the program entries do not hold:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    Ok(todo.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_builtin_example_holds() {
        let t = crate::programs::builtin().unwrap();
        let n = super::check(&t, true).unwrap();
        assert!(n > 900, "{n} examples");
    }

    #[test]
    fn a_failing_example_is_named_with_its_entry() {
        let mut t = crate::programs::builtin().unwrap();
        crate::programs::operator::merge(
            &mut t,
            "/etc/brainloop/programs.d/x.toml",
            "# x\n[program]\nname = \"cat\"\n\
             [[example]]\ncommand = \"cat a\"\ncategory = \"pure\"\n\
             [[example]]\npath = \"x-tool.rc\"\nrun_on_use = true\n",
        )
        .unwrap();
        let e = format!("{:#}", super::check(&t, false).unwrap_err());
        assert!(e.contains("2 example(s)"), "{e}");
        assert!(
            e.contains("/etc/brainloop/programs.d/x.toml:2: program cat: example `cat a`: category readonly (the example says pure)"),
            "{e}"
        );
        assert!(
            e.contains("x-tool.rc: run_on_use = true, but no rule asks"),
            "{e}"
        );
    }
}
