//! Which learned signature stands for which other one (issue 35): this module owns *when a
//! signature learned for a client covers another signature that does no more*. A signature is
//! learned from a human's `approve --learn` (or enough approvals); without this, each spelling of
//! the same operation — `git commit -qm MSG` and `git commit -m MSG`, `mkdir a` and `mkdir -p a`,
//! `rm -f x` and `rm x`, `sed -i -E EXPR f` and `sed -i EXPR f`, one path or several — asked
//! again, and a human who taught "write this file" was asked again for `tee` and `sed -i`.
//!
//! [`canon`] reduces a signature text to a *class*:
//!
//! - flags that change nothing the command writes are dropped, per program (its entry's flags
//!   with `learn = "neutral"` and its subcommands' `neutral`: `-q`, `-v`, `rm -f`, `sed -E`,
//!   `cargo --offline` …), git's safe `-c KEY=…` options (identity,
//!   colour: git's `safe_config_keys`) too, and a repeated argument kind is one
//!   (`WS_PATH...` → `WS_PATH`: each named path is still checked by `bash::effects`);
//! - spellings of one operation are one (the entry's `same_as`: `git checkout -b X` is
//!   `git switch -c X`; `git add -A`, `-u`, `.` and named paths all stage into the index);
//! - a family member's class is its family (`[[family]]` in `src/programs/`, built-in only): operations of one kind a human teaches in one
//!   answer, the prompt naming the family and its members ([`taught_lines`]) — writing named
//!   workspace files (`> f`, `sed -i`, `tee`, `touch`, `mkdir`, `cp`), moving or deleting them,
//!   git's local bookkeeping (no force, amend, hard reset, config, hooks or remotes), a build
//!   tool's local build/test/format subcommands (cargo, go, npm scripts).
//!
//! A learned signature C covers S when both have the same class ([`covers`]). Coverage never
//! widens the confinement the human saw: S must itself be learnable (scripts and flags that write
//! or run elsewhere never are), S has no human denial and no `never` / `always_ask` override for
//! the client (`signatures::observe` checks those), and a change set applied under it is still
//! bounded by `bash::effects` (only the paths the command names or its program declares, never a
//! protected one) — the same bound for every member of a family, which is what makes a family.
//! A signature text the table does not know is its own class: nothing is covered by default.

use crate::classify::git::{is_git, is_global_value, safe_config_key};
use crate::programs::{self, Family, Member, MemberFlags, Table};

/// A member's subcommand standing for any name the program takes as its first operand (not an
/// argument kind: `WS_PATH`, `LITERAL`…).
const ANY_NAME: &str = "*";

/// Operand kinds a subcommand member may carry: inside the workspace or plain data, never
/// `PATH(…)`, a glob or an expansion.
const FAMILY_KINDS: &[&str] = &["WS_PATH", "LITERAL", "NUM", "MSG"];

/// The program table (None: it failed to load, and nothing is covered but a signature itself).
fn table() -> Option<&'static Table> {
    programs::table().ok()
}

/// A signature's class: its family's name, or the normalised signature text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canon {
    pub class: String,
}

/// Whether the learned signature `learned` covers `sig` (see the module doc).
pub fn covers(learned: &str, sig: &str) -> bool {
    canon(learned).class == canon(sig).class
}

/// The class of a signature text.
pub fn canon(text: &str) -> Canon {
    let normal = spelled(text);
    Canon {
        class: family_of_normal(&normal).map_or(normal, |f| f.name.to_string()),
    }
}

/// The family a signature text belongs to, if any.
pub fn family(text: &str) -> Option<&'static Family> {
    family_of_normal(&spelled(text))
}

/// What the prompt says `approve --learn` teaches, for a command with these signatures: one
/// line per family among them (empty: each signature is learned alone).
pub fn taught_lines(sigs: &[String]) -> Vec<String> {
    families_of(sigs).into_iter().map(taught_line).collect()
}

/// The families among `sigs`, each once, in order.
pub fn families_of(sigs: &[String]) -> Vec<&'static Family> {
    let mut out: Vec<&'static Family> = Vec::new();
    for f in sigs.iter().filter_map(|s| family(s)) {
        if !out.iter().any(|n| n.name == f.name) {
            out.push(f);
        }
    }
    out
}

/// What `approve --learn` of a member of `f` teaches, as the prompt says it.
pub fn taught_line(f: &Family) -> String {
    format!(
        "approve --learn teaches this client the family \"{}\": {} — each still applies only the paths it names and its program's declared companions, never a protected path",
        f.name, f.shows
    )
}

/// The normalised text, one spelling for a program's several (its entry's `same_as`).
fn spelled(text: &str) -> String {
    let normal = normalise(text);
    match table().and_then(|t| t.same_as(&normal)) {
        Some(to) => to.to_string(),
        None => normal,
    }
}

fn family_of_normal(normal: &str) -> Option<&'static Family> {
    table()?.families.iter().find(|f| {
        f.classes.iter().any(|c| c == normal) || f.members.iter().any(|m| member(m, normal))
    })
}

/// Whether the normalised text is a subcommand of the member's programs with only the flags
/// and operand kinds it may carry.
fn member(m: &Member, normal: &str) -> bool {
    let toks: Vec<&str> = normal.split(' ').collect();
    let Some(prog) = toks.first().filter(|p| m.programs.iter().any(|x| x == *p)) else {
        return false;
    };
    // git's subcommand comes right after it ([`normalise`] keeps any global option before it,
    // and one there is not a member); another program's flags are sorted before its subcommand.
    let at = if is_git(prog) {
        1
    } else {
        match toks.iter().skip(1).position(|t| !t.starts_with('-')) {
            Some(i) => i + 1,
            None => return false,
        }
    };
    let named = |sub: &str| {
        m.subcommands.iter().any(|s| {
            s == sub
                || (s == ANY_NAME
                    && !sub.starts_with("PATH(")
                    && sub.chars().any(|c| c.is_ascii_lowercase()))
        })
    };
    if !toks.get(at).is_some_and(|s| named(s)) {
        return false;
    }
    let flag_name = |t: &&str| t.split_once('=').map_or(*t, |(n, _)| n).to_string();
    if let Some(needed) = &m.requires {
        if !toks.iter().any(|t| flag_name(t) == *needed) {
            return false;
        }
    }
    toks.iter()
        .enumerate()
        .filter(|(i, _)| *i != 0 && *i != at)
        .all(|(_, t)| {
            if !t.starts_with('-') {
                return FAMILY_KINDS.contains(t);
            }
            let name = flag_name(t);
            m.requires.as_deref() == Some(name.as_str())
                || match &m.flags {
                    MemberFlags::Only(ok) => ok.contains(&name),
                    // "any" (a list's name was resolved when the table loaded)
                    MemberFlags::Named(_) => true,
                }
        })
}

/// The signature text without neutral flags, safe `-c` keys and repeated kinds; flags sorted.
fn normalise(text: &str) -> String {
    let toks: Vec<&str> = text.split(' ').collect();
    let Some((&prog, rest)) = toks.split_first() else {
        return text.to_string();
    };
    let mut head = vec![prog.to_string()];
    let mut i = 0;
    // git's global options (`-c KEY=…`, `-C WS_PATH`) up to the subcommand
    let git = is_git(prog);
    if git {
        while let Some(&t) = rest.get(i) {
            if t == "-c" {
                let key = rest.get(i + 1).map_or("", |kv| kv.trim_end_matches("=…"));
                if !safe_config_key(key) {
                    head.push(format!("-c {}", rest.get(i + 1).unwrap_or(&"")));
                }
                i += 2;
            } else if is_global_value(t) {
                head.push(format!("{t} {}", rest.get(i + 1).unwrap_or(&"")));
                i += 2;
            } else if t.starts_with('-') {
                head.push(t.to_string());
                i += 1;
            } else {
                break;
            }
        }
    }
    let rest = &rest[i.min(rest.len())..];
    let sub = git.then(|| rest.first().copied()).flatten();
    let (sub_toks, args) = match sub {
        Some(s) => (vec![s.to_string()], &rest[1..]),
        None => (Vec::new(), rest),
    };
    let neutral = |t: &str| table().is_some_and(|tb| tb.neutral(prog, sub, t));
    let mut flags: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    for t in args {
        if t.starts_with('-') {
            if let Some(f) = recursive_flag(prog, t) {
                flags.push(f);
            } else if !neutral(t) {
                flags.push(t.to_string());
            }
        } else {
            let k = t.strip_suffix("...").unwrap_or(t);
            // the files one pattern names: the pattern bounds the change set, not the class
            let k = if k.starts_with("FOUND(") { "FOUND" } else { k }.to_string();
            if kinds.last() != Some(&k) {
                kinds.push(k);
            }
        }
    }
    flags.sort();
    flags.dedup();
    head.extend(sub_toks);
    head.extend(flags);
    head.extend(kinds);
    head.join(" ")
}

/// `rm -rf` / `cp -av`: the recursive flag alone (`-r`), or None when `t` is not one.
fn recursive_flag(prog: &str, t: &str) -> Option<String> {
    let r = table()?.recursive(prog)?;
    r.flag(t).then(|| "-r".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (learned, other, covered): what one learned signature stands for, and what it never does.
    /// Long because the cases read as one table.
    #[test]
    fn a_learned_signature_covers_its_variants_and_its_family_only() {
        let cases: &[(&str, &str, bool)] = &[
            // neutral flags and repeated kinds
            ("git commit -m MSG", "git commit -m -q MSG", true),
            ("git commit -m -q MSG", "git commit -a -m MSG", true),
            (
                "git commit -m MSG",
                "git -c user.email=… -c user.name=… commit -m -q MSG",
                true,
            ),
            (
                "git commit -m MSG",
                "git -c core.pager=… commit -m MSG",
                false,
            ),
            ("git commit -m MSG", "git commit --amend -m MSG", false),
            ("git add WS_PATH", "git add WS_PATH...", true),
            ("git add WS_PATH...", "git add -A", true),
            ("git add -A", "git add WS_PATH", true),
            ("git add WS_PATH", "git add --force WS_PATH", false),
            ("rm WS_PATH", "rm -f WS_PATH...", true),
            ("rm -r WS_PATH", "rm -fr WS_PATH", true),
            ("cp WS_PATH...", "cp -a WS_PATH...", true),
            ("cp -r WS_PATH...", "cp -R -v WS_PATH...", true),
            ("sed -i EXPR WS_PATH", "sed -E -i EXPR WS_PATH...", true),
            (
                "sed -i EXPR WS_PATH",
                "sed -i EXPR WS_PATH [writes or runs elsewhere]",
                false,
            ),
            ("cargo test", "cargo test --offline -q", true),
            // spellings of one operation
            ("git switch -c LITERAL", "git checkout -b LITERAL", true),
            ("git checkout LITERAL", "git switch LITERAL", true),
            ("git restore WS_PATH", "git checkout WS_PATH", true),
            ("git stash", "git stash -m LITERAL MSG", true),
            ("git init", "git init -b -q LITERAL", true),
            // families: one answer teaches every member
            ("redirect:write WS_PATH", "sed -i EXPR WS_PATH", true),
            ("touch WS_PATH", "redirect:write WS_PATH", true),
            ("mkdir -p WS_PATH...", "cp WS_PATH...", true),
            ("redirect:append WS_PATH", "tee WS_PATH", true),
            ("git add -A", "git switch -c LITERAL", true),
            ("git init -q", "git stash LITERAL", true),
            ("git add -A", "git merge --no-edit LITERAL", true),
            ("git add -A", "git branch -d LITERAL...", true),
            (
                "git commit -m MSG",
                "git -c user.name=… tag -a -m LITERAL MSG",
                true,
            ),
            ("git add -A", "git restore WS_PATH", true),
            ("mv WS_PATH...", "rm -rf WS_PATH", true),
            ("cargo build", "cargo fmt", true),
            (
                "cargo check --offline -q",
                "cargo test --test LITERAL",
                true,
            ),
            ("go test WS_PATH", "go build -o LITERAL WS_PATH", true),
            ("go vet WS_PATH", "gofmt -w WS_PATH", true),
            ("npm test", "npm run --silent LITERAL", true),
            ("npm test", "npx tinylint --fix WS_PATH", true),
            ("npx mdtable --title", "npm run LITERAL", true),
            (
                "npm pkg LITERAL MSG...",
                "npm pkg LITERAL... WS_PATH MSG",
                true,
            ),
            (
                "npm pkg LITERAL MSG",
                "npm version --no-git-tag-version LITERAL",
                true,
            ),
            ("npm pkg LITERAL MSG", "npm version LITERAL", true),
            (
                "npm pkg LITERAL MSG",
                "npm version --allow-same-version LITERAL",
                false,
            ),
            // one family: the package's scripts, tools, manifest and local installs
            ("npm pkg LITERAL MSG", "npm test", true),
            ("npm init -y", "npm install --no-audit -D WS_PATH", true),
            ("npm test", "npm init --scope=… -y", true),
            ("npm init -y", "npx tinylint --fix WS_PATH", true),
            ("npm init -y", "npm install -g WS_PATH", false),
            (
                "npm init -y",
                "npm install --prefix PATH(/usr) WS_PATH",
                false,
            ),
            (
                "npm init -y",
                "npm install --foreground-scripts WS_PATH",
                false,
            ),
            ("npm init -y", "npm install PATH(/tmp/x.tgz)", false),
            ("npm init -y", "npm exec LITERAL", false),
            ("npm init -y", "npm publish", false),
            ("npm test", "npx WS_PATH", false),
            ("npm test", "npx PATH(/tmp/x)", false),
            // never across families, never beyond them
            ("redirect:write WS_PATH", "rm WS_PATH", false),
            ("rm WS_PATH", "redirect:write WS_PATH", false),
            ("redirect:write WS_PATH", "mkdir -p LITERAL", false),
            (
                "redirect:write WS_PATH",
                "redirect:write PATH(/etc/x)",
                false,
            ),
            ("redirect:write WS_PATH", "git add WS_PATH", false),
            // reading the host into the workspace is no member: a source outside it asks
            ("cp WS_PATH", "cp PATH(/etc/passwd) WS_PATH", false),
            ("cp -r WS_PATH", "cp -r PATH(~/.ssh) WS_PATH", false),
            ("redirect:write WS_PATH", "tee WS_PATH PATH(/tmp/x)", false),
            ("mv WS_PATH", "mv WS_PATH PATH(/tmp/x)", false),
            ("redirect:write WS_PATH", "cp GLOB WS_PATH", false),
            ("git add -A", "git commit --amend -m MSG", false),
            ("git add -A", "git reset --hard LITERAL", false),
            ("git add -A", "git branch -D LITERAL", false),
            ("git add -A", "git switch -C LITERAL", false),
            ("git add -A", "git clean -f -d", false),
            ("git add -A", "git -c core.hooksPath=… commit -m MSG", false),
            ("git add -A", "git -C WS_PATH add -A", false),
            ("git add -A", "git push LITERAL", false),
            ("git add -A", "git clone WS_PATH", true),
            ("git init", "git clone -b LITERAL WS_PATH WS_PATH", true),
            ("git add -A", "git clone URL", false),
            ("git add -A", "git clone PATH(/srv/r.git) WS_PATH", false),
            (
                "git add -A",
                "git clone --upload-pack LITERAL WS_PATH",
                false,
            ),
            ("git add -A", "git clone --template WS_PATH WS_PATH", false),
            ("git add -A", "git config LITERAL MSG", false),
            ("git add -A", "git remote LITERAL LITERAL", false),
            ("git add -A", "git stash PATH(/tmp/x)", false),
            ("git add -A", "cargo build", false),
            ("cargo build", "cargo install --path WS_PATH", false),
            ("cargo build", "cargo new --lib LITERAL", true),
            ("cargo build", "cargo new PATH(/tmp/x)", false),
            // the manifest offline is one family with the build (the registry's forms are
            // never learnable: asked up front as network)
            ("cargo build", "cargo add --path WS_PATH", true),
            ("cargo build", "cargo update", true),
            ("cargo build", "cargo init --name LITERAL", true),
            ("cargo build", "cargo init PATH(/tmp/x)", false),
            ("cargo build", "cargo publish", false),
            ("cargo build", "cargo package", false),
            (
                "cargo add --offline --path WS_PATH",
                "cargo update --offline",
                true,
            ),
            ("cargo update --offline", "cargo remove LITERAL", true),
            (
                "cargo add --offline --path WS_PATH",
                "cargo add --git URL",
                false,
            ),
            (
                "cargo add --offline --path WS_PATH",
                "cargo add --path PATH(/tmp/x)",
                false,
            ),
            (
                "cargo add --offline --path WS_PATH",
                "cargo install --path WS_PATH",
                false,
            ),
            ("cargo build", "cargo test GLOB", false),
            ("cargo build", "cargo run PATH(/etc/passwd)", false),
            ("go build WS_PATH", "go get LITERAL", false),
            ("go build WS_PATH", "go mod LITERAL", false),
            ("npm test", "npm install WS_PATH", true),
            ("npm test", "npm ci", false),
            // what one name pattern finds is deleted as named files are
            ("rm WS_PATH", "rm -r -f FOUND(__pycache__)", true),
            ("mv WS_PATH", "find -delete FOUND(*.pyc)", true),
            ("find -delete FOUND(*.pyc)", "rm -r WS_PATH", true),
            ("rm WS_PATH", "rm -r GLOB", false),
            ("rm WS_PATH", "redirect:write WS_PATH", false),
            // python's environment: offline installs only
            (
                "python3 -m venv WS_PATH",
                "pip install --find-links --no-index WS_PATH LITERAL",
                true,
            ),
            (
                "python3 -m venv WS_PATH",
                "pip install --no-build-isolation --no-index -e WS_PATH",
                true,
            ),
            ("python -m venv WS_PATH", "pip uninstall -y LITERAL", true),
            ("python3 -m venv WS_PATH", "pip install LITERAL", false),
            ("python3 -m venv WS_PATH", "pip install -r WS_PATH", false),
            (
                "python3 -m venv WS_PATH",
                "pip install --index-url --no-index LITERAL LITERAL",
                false,
            ),
            (
                "python3 -m venv WS_PATH",
                "pip install --no-index --target WS_PATH LITERAL",
                false,
            ),
            (
                "python3 -m venv WS_PATH",
                "pip install --no-index --user LITERAL",
                false,
            ),
            (
                "python3 -m venv WS_PATH",
                "pip install --find-links --no-index PATH(/tmp/w) LITERAL",
                false,
            ),
            (
                "python3 -m venv WS_PATH",
                "pip download --no-index LITERAL",
                false,
            ),
        ];
        for (learned, other, want) in cases {
            assert_eq!(
                covers(learned, other),
                *want,
                "{learned} covers {other}? {:?} vs {:?}",
                canon(learned),
                canon(other)
            );
        }
    }

    #[test]
    fn the_prompt_names_each_family_once() {
        let lines = taught_lines(&[
            "git add -A".into(),
            "git -c user.name=… commit -m -q MSG".into(),
            "redirect:write WS_PATH".into(),
            "python3 WS_PATH".into(),
        ]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("git's local bookkeeping"), "{lines:?}");
        assert!(
            lines[1].contains("write named workspace files"),
            "{lines:?}"
        );
        assert!(taught_lines(&["python3 WS_PATH".into()]).is_empty());
    }
}
