//! Which learned signature stands for which other one (issue 35): this module owns *when a
//! signature learned for a client covers another signature that does no more*. A signature is
//! learned from a human's `approve --learn` (or enough approvals); without this, each spelling of
//! the same operation — `git commit -qm MSG` and `git commit -m MSG`, `mkdir a` and `mkdir -p a`,
//! `rm -f x` and `rm x`, `sed -i -E EXPR f` and `sed -i EXPR f`, one path or several — asked
//! again, and a human who taught "write this file" was asked again for `tee` and `sed -i`.
//!
//! [`canon`] reduces a signature text to a *class* and a *strength*:
//!
//! - flags that change nothing the command writes are dropped, per program ([`NEUTRAL`]: `-q`,
//!   `-v`, `rm -f`, `sed -E`, `cargo --offline` …), git's safe `-c KEY=…` options (identity,
//!   colour: `classify::git::SAFE_CONFIG_KEYS`) too, and a repeated argument kind is one
//!   (`WS_PATH...` → `WS_PATH`: each named path is still checked by `bash::effects`);
//! - spellings of one operation are one (`git checkout -b X` is `git switch -c X`; `git add -A`,
//!   `-u`, `.` and named paths all stage into the index);
//! - a [`FAMILIES`] entry ranks operations of equal or lesser power: writing any content to a
//!   named workspace file (`> f`, `tee f`, `sed -i EXPR f`: strength 2) can do what appending
//!   (`>> f`, `tee -a f`: 1) and `touch f` (0) can; `mkdir -p` (1) what `mkdir` (0) can.
//!
//! A learned signature C covers S when both have the same class and C's strength is at least
//! S's ([`covers`]). Coverage never widens what was learned: S must itself be learnable (scripts
//! and flags that write or run elsewhere never are), S has no human denial and no `never` /
//! `always_ask` override for the client (`signatures::observe` checks those), and a change set
//! applied under it is still bounded by `bash::effects` (only the paths the command names or
//! declares, never a protected one). A signature text the table does not know is its own class:
//! nothing is covered by default.

use crate::classify::git::{safe_config_key, GLOBAL_VALUE};

/// Flags that change nothing a program writes or runs, per program (`*`: of every git
/// subcommand). Bundles are split first for the programs in [`RECURSIVE_FLAG`].
const NEUTRAL: &[(&str, &[&str])] = &[
    ("git", &["-q", "--quiet", "-v", "--verbose"]),
    ("mkdir", &["-v", "--verbose"]),
    ("rm", &["-f", "--force", "-v", "--verbose"]),
    ("cp", &["-f", "--force", "-v", "--verbose"]),
    ("mv", &["-f", "--force", "-v", "--verbose"]),
    (
        "sed",
        &[
            "-E",
            "-r",
            "--regexp-extended",
            "-e",
            "--expression",
            "-s",
            "-u",
        ],
    ),
    (
        "cargo",
        &[
            "-q",
            "--quiet",
            "-v",
            "--verbose",
            "--offline",
            "--frozen",
            "--locked",
        ],
    ),
    (
        "npm",
        &[
            "-s",
            "--silent",
            "-q",
            "--quiet",
            "--no-audit",
            "--no-fund",
            "--offline",
        ],
    ),
    ("go", &["-v"]),
];

/// git subcommands' own neutral flags (what they write is the same with or without them).
const GIT_NEUTRAL: &[(&str, &[&str])] = &[
    (
        "add",
        // not `-f`: staging what `.gitignore` keeps out (an `.env`) is more
        &["-A", "--all", "-u", "--update", "--no-all"],
    ),
    (
        "commit",
        &["-a", "--all", "-s", "--signoff", "-n", "--no-verify"],
    ),
    // a merge of the branch it names, however it records it
    (
        "merge",
        &[
            "--no-edit",
            "--ff",
            "--ff-only",
            "--no-ff",
            "--stat",
            "--no-stat",
        ],
    ),
    (
        "stash",
        &["-u", "--include-untracked", "-k", "--keep-index"],
    ),
];

/// Programs whose recursive flag is kept as `-r` out of any bundle (`-rf`, `-Rv`, `-a`).
const RECURSIVE_FLAG: &[(&str, &[char], &[&str])] = &[
    ("rm", &['r', 'R'], &["--recursive"]),
    ("cp", &['r', 'R', 'a'], &["--recursive", "--archive"]),
];

/// Operations ranked by power within a family: (family, signature class, strength).
const FAMILIES: &[(&str, &str, u8)] = &[
    ("write a named workspace file", "redirect:write WS_PATH", 2),
    ("write a named workspace file", "tee WS_PATH", 2),
    ("write a named workspace file", "sed -i EXPR WS_PATH", 2),
    ("write a named workspace file", "redirect:append WS_PATH", 1),
    ("write a named workspace file", "tee -a WS_PATH", 1),
    ("write a named workspace file", "touch WS_PATH", 0),
    // `-p` also makes the parents of the directories it names: still directories, named
    ("make a workspace directory", "mkdir -p WS_PATH", 1),
    ("make a workspace directory", "mkdir WS_PATH", 1),
];

/// One spelling for operations git spells several ways.
const SAME_AS: &[(&str, &str)] = &[
    ("git checkout -b LITERAL", "git switch -c LITERAL"),
    ("git checkout LITERAL", "git switch LITERAL"),
    ("git stash -m LITERAL MSG", "git stash"),
    ("git init -b LITERAL", "git init"),
    ("git tag -a -m LITERAL MSG", "git tag LITERAL"),
    ("git checkout WS_PATH", "git restore WS_PATH"),
    ("git add", "git add WS_PATH"),
];

/// A signature's class and strength.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canon {
    /// The family's name, or the normalised signature text.
    pub class: String,
    pub strength: u8,
}

/// Whether the learned signature `learned` covers `sig` (see the module doc).
pub fn covers(learned: &str, sig: &str) -> bool {
    let (l, s) = (canon(learned), canon(sig));
    l.class == s.class && l.strength >= s.strength
}

/// The class and strength of a signature text.
pub fn canon(text: &str) -> Canon {
    let normal = normalise(text);
    let normal = SAME_AS
        .iter()
        .find(|(from, _)| *from == normal)
        .map_or(normal.clone(), |(_, to)| to.to_string());
    match FAMILIES.iter().find(|(_, class, _)| *class == normal) {
        Some((family, _, strength)) => Canon {
            class: (*family).to_string(),
            strength: *strength,
        },
        None => Canon {
            class: normal,
            strength: 0,
        },
    }
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
    if prog == "git" {
        while let Some(&t) = rest.get(i) {
            if t == "-c" {
                let key = rest.get(i + 1).map_or("", |kv| kv.trim_end_matches("=…"));
                if !safe_config_key(key) {
                    head.push(format!("-c {}", rest.get(i + 1).unwrap_or(&"")));
                }
                i += 2;
            } else if GLOBAL_VALUE.contains(&t) {
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
    let sub = (prog == "git").then(|| rest.first().copied()).flatten();
    let (sub_toks, args) = match sub {
        Some(s) => (vec![s.to_string()], &rest[1..]),
        None => (Vec::new(), rest),
    };
    let neutral = |t: &str| {
        NEUTRAL.iter().any(|(p, fl)| *p == prog && fl.contains(&t))
            || sub.is_some_and(|s| GIT_NEUTRAL.iter().any(|(g, fl)| *g == s && fl.contains(&t)))
    };
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
            let k = t.strip_suffix("...").unwrap_or(t).to_string();
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
    let (_, letters, long) = RECURSIVE_FLAG.iter().find(|(p, _, _)| *p == prog)?;
    let short = !t.starts_with("--") && t[1..].chars().any(|c| letters.contains(&c));
    (short || long.contains(&t)).then(|| "-r".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (learned, other, covered): what one learned signature stands for, and what it never does.
    #[test]
    fn a_learned_signature_covers_only_variants_that_do_no_more() {
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
            ("git add WS_PATH", "git rm WS_PATH", false),
            ("git add WS_PATH", "git add --force WS_PATH", false),
            ("rm WS_PATH", "rm -f WS_PATH...", true),
            ("rm -f WS_PATH", "rm -rf WS_PATH", false),
            ("rm -r WS_PATH", "rm -fr WS_PATH", true),
            ("cp WS_PATH...", "cp -a WS_PATH...", false),
            ("cp -r WS_PATH...", "cp -R -v WS_PATH...", true),
            ("sed -i EXPR WS_PATH", "sed -E -i EXPR WS_PATH...", true),
            (
                "sed -i EXPR WS_PATH",
                "sed -i EXPR WS_PATH [writes or runs elsewhere]",
                false,
            ),
            ("cargo test", "cargo test --offline -q", true),
            ("cargo test", "cargo build", false),
            // spellings of one operation
            ("git switch -c LITERAL", "git checkout -b LITERAL", true),
            ("git checkout LITERAL", "git switch LITERAL", true),
            ("git switch LITERAL", "git switch -c LITERAL", false),
            ("git restore WS_PATH", "git checkout WS_PATH", true),
            (
                "git merge LITERAL",
                "git merge --no-edit --no-ff -q LITERAL",
                true,
            ),
            ("git stash", "git stash -u", true),
            ("git stash", "git stash -m LITERAL MSG", true),
            ("git stash", "git stash LITERAL", false),
            // families, by strength
            ("redirect:write WS_PATH", "sed -i EXPR WS_PATH", true),
            ("sed -i EXPR WS_PATH", "tee WS_PATH", true),
            ("redirect:write WS_PATH", "redirect:append WS_PATH", true),
            ("redirect:write WS_PATH", "touch WS_PATH...", true),
            ("redirect:append WS_PATH", "redirect:write WS_PATH", false),
            ("touch WS_PATH", "redirect:append WS_PATH", false),
            ("tee -a WS_PATH", "sed -i EXPR WS_PATH", false),
            (
                "redirect:write WS_PATH",
                "redirect:write PATH(/etc/x)",
                false,
            ),
            ("redirect:write WS_PATH", "mkdir WS_PATH", false),
            ("mkdir -p WS_PATH", "mkdir WS_PATH", true),
            ("mkdir WS_PATH", "mkdir -p WS_PATH", true),
            ("git init", "git init -b -q LITERAL", true),
            (
                "git tag LITERAL",
                "git -c user.name=… tag -a -m LITERAL MSG",
                true,
            ),
            ("git tag LITERAL", "git tag -d LITERAL", false),
            ("mkdir -p LITERAL", "mkdir -p WS_PATH", false),
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
}
