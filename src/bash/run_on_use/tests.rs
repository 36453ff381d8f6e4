//! The entries' own examples, judged by `bash::protected` as the worker judges a change set, and
//! the completeness of the file against the classifier's table, the workspace runners of
//! docs/security.md and the hook managers.

use super::*;
use crate::bash::changes::{self, Change, ChangeSet, Kind};
use crate::bash::protected::{decide, Facts, Table};
use crate::permset::PathLists;
use std::path::Path;

fn table() -> Table {
    Table::new(&PathLists::default()).unwrap()
}

fn modified(path: &str) -> ChangeSet {
    changes::for_tests(&[(path, Kind::Modified, "file:00:644")], "file:11:644")
}

/// The rule `bash::protected` names for a one-path change set (None: none, the path is left
/// to the other checks).
fn rule_of(t: &Table, cs: &ChangeSet) -> Option<String> {
    let j = decide(t, cs, &Facts::default(), &[]);
    j.hits.first().map(|h| format!("{} ({})", h.rule, h.why))
}

#[test]
fn the_file_loads_and_every_entry_knows_something_or_says_why_not() {
    let k = knowledge().unwrap();
    assert!(k.entries.len() > 30, "{}", k.entries.len());
    for (key, e) in &k.entries {
        let knows = !e.rules.is_empty() || !e.environments.is_empty() || !e.manifests.is_empty();
        if knows {
            assert!(
                !e.examples.asks.is_empty() || !e.manifest_examples.is_empty(),
                "program {key} has run-on-use paths but no example that asks"
            );
        } else {
            assert!(
                e.none.as_deref().is_some_and(|w| w.len() > 20),
                "program {key}: `run_on_use_none` needs a reason"
            );
        }
    }
    // An entry whose rules contradict `none`, or with an unknown key, is refused.
    let parse = |t: &str| crate::programs::parse("x.toml", t, true);
    assert!(parse(
        "[program]\nname = \"x\"\nrun_on_use_none = \"r\"\n[[run_on_use]]\nreason = \"w\"\npaths = [\"a\"]\n"
    )
    .is_err());
    assert!(parse("[program]\nname = \"x\"\nrun_on_use_none = \"r\"\nunknown_key = 1\n").is_err());
    assert!(parse("[program]\nname = \"x\"\n[[run_on_use]]\nreason = \"w\"\n").is_err());
}

/// Every path example of every entry: `asks` paths are never applied without a human,
/// `ordinary` ones are left to the other rules.
#[test]
fn every_example_is_judged_as_written() {
    let k = knowledge().unwrap();
    let t = table();
    let mut n = 0;
    for (key, e) in &k.entries {
        for p in &e.examples.asks {
            let got = rule_of(&t, &modified(p));
            assert!(
                got.is_some(),
                "program {key}: {p} should ask: no rule matched"
            );
            n += 1;
        }
        for p in &e.examples.ordinary {
            let got = rule_of(&t, &modified(p));
            assert!(
                got.is_none(),
                "program {key}: {p} should be ordinary, got {got:?}"
            );
            n += 1;
        }
    }
    assert!(n > 150, "{n} examples");
}

/// A manifest example: `before` in the workspace, `after` in the run's upper layer, the change
/// set computed by `changes::compute` (which judges the keys) and judged by `protected`.
fn judge_manifest(t: &Table, path: &str, before: Option<&str>, after: &str) -> Option<String> {
    let d = tempfile::tempdir().unwrap();
    let (lower, upper) = (d.path().join("lower"), d.path().join("upper"));
    let put = |root: &Path, text: &str| {
        let f = root.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    };
    std::fs::create_dir_all(&lower).unwrap();
    std::fs::create_dir_all(&upper).unwrap();
    if let Some(b) = before {
        put(&lower, b);
    }
    put(&upper, after);
    let mut cs = changes::compute(&upper, &lower).unwrap();
    // only the manifest itself (compute also lists the directories it added)
    cs.changes.retain(|c| c.path == path);
    assert_eq!(cs.changes.len(), 1, "{path}");
    rule_of(t, &cs)
}

#[test]
fn every_manifest_example_is_judged_key_by_key() {
    let k = knowledge().unwrap();
    let t = table();
    let mut n = 0;
    for (key, e) in &k.entries {
        for x in &e.manifest_examples {
            let got = judge_manifest(&t, &x.path, x.before.as_deref(), &x.after);
            match x.verdict.as_str() {
                "asks" => assert!(
                    got.is_some(),
                    "program {key}: {} {:?} -> {:?} should ask",
                    x.path,
                    x.before,
                    x.after
                ),
                "ordinary" => assert!(
                    got.is_none(),
                    "program {key}: {} {:?} -> {:?}: {got:?}",
                    x.path,
                    x.before,
                    x.after
                ),
                v => panic!("program {key}: verdict {v:?}"),
            }
            n += 1;
        }
    }
    assert!(n >= 15, "{n}");
}

/// The prompt names the keys, and a change set whose keys were never judged (computed before
/// this rule, or a path given by hand) asks.
#[test]
fn a_manifest_prompt_names_its_keys_and_unjudged_ones_ask() {
    let t = table();
    let got = judge_manifest(
        &t,
        "package.json",
        Some(r#"{"name":"p","scripts":{"test":"x"}}"#),
        r#"{"name":"p","scripts":{"test":"x","prepare":"y"},"bin":{"p":"c.js"},"version":"2"}"#,
    )
    .unwrap();
    assert!(
        got.contains("changes bin.p, scripts.prepare — npm runs"),
        "{got}"
    );
    assert!(
        got.starts_with("**/package.json (npm, key by key)"),
        "{got}"
    );
    let mut unjudged = modified("package.json");
    unjudged.changes[0].run_keys = None;
    let got = rule_of(&t, &unjudged).unwrap();
    assert!(got.contains("its keys were not judged"), "{got}");
    // the agent's keys are named, bounded
    let many: String = (0..50)
        .map(|i| format!("\"k{i}{}\":1", "x".repeat(300)))
        .collect::<Vec<_>>()
        .join(",");
    let got = judge_manifest(&t, "package.json", Some("{}"), &format!("{{{many}}}")).unwrap();
    assert!(
        got.contains("and 30 more") && got.len() < 4000,
        "{}",
        got.len()
    );
    // a manifest under node_modules is a package's source, not the project's manifest
    assert_eq!(rule_of(&t, &modified("node_modules/x/package.json")), None);
}

#[test]
fn registry_versions_and_the_rest() {
    for ok in [
        "^1.2.3",
        "~1.2",
        "1.x",
        "*",
        "latest",
        ">=1 <2",
        "",
        "requests>=2",
        "npm:other@^1",
        "npm:@s/o@1",
        "pkg[extra]>=1; python_version < \"3.9\"",
    ] {
        assert!(registry_str(ok), "{ok}");
    }
    for no in [
        "file:x",
        "link:../x",
        "workspace:*",
        "git+https://x/y",
        "github:u/r",
        "u/r",
        "./x",
        "../x",
        "/abs",
        "~/x",
        "https://x/y.tgz",
        "pkg @ file:///tmp/x",
        "npm:../x",
        "portal:x",
        "a\\b",
    ] {
        assert!(!registry_str(no), "{no}");
    }
    assert!(registry(
        &serde_json::json!({"version": "1", "features": ["derive"]})
    ));
    assert!(!registry(&serde_json::json!({"path": "../x"})));
    assert!(!registry(
        &serde_json::json!({"version": "1", "git": "https://x"})
    ));
    assert!(!registry(&serde_json::json!({"workspace": true})));
    assert!(registry(&serde_json::json!(["a>=1", "b"])));
    assert!(!registry(&serde_json::json!(["a @ https://x/a.whl"])));
}

#[test]
fn keys_are_judged_by_the_allowlist() {
    let k = knowledge().unwrap();
    let (_, npm) = k.manifest_of("package.json").unwrap();
    let keys = |b: &str, a: &str| offending_keys(npm, Some(b.as_bytes()), Some(a.as_bytes()));
    assert!(keys(r#"{"name":"a"}"#, r#"{"name":"b","author":{"name":"x"}}"#).is_empty());
    assert_eq!(
        keys(r#"{"name":"a"}"#, r#"{"name":"a","config":{"x":1}}"#),
        vec!["config.x"]
    );
    assert_eq!(
        keys(r#"{"name":"a"}"#, r#"{"name":"a","workspaces":["x"]}"#),
        vec!["workspaces"]
    );
    assert_eq!(
        keys(r#"{"name":"a"}"#, r#"{"name":"a","overrides":{"x":"1"}}"#),
        vec!["overrides.x"]
    );
    assert_eq!(
        keys(r#"{"dependencies":{"a":"1"}}"#, r#"{"dependencies":"x"}"#),
        vec!["dependencies"]
    );
    assert_eq!(
        keys(r#"{"scripts":{"test":"x"}}"#, r#"{}"#),
        vec!["scripts.test"]
    );
    assert_eq!(keys("[1]", "[2]"), vec!["(the whole file)"]);
    // removed: the file itself
    assert_eq!(
        offending_keys(npm, Some(br#"{"name":"a","scripts":{"a":"b"}}"#), None),
        vec!["scripts.a"]
    );
    assert!(offending_keys(npm, Some(br#"{"name":"a"}"#), None).is_empty());
    let (_, cargo) = k.manifest_of("crates/x/Cargo.toml").unwrap();
    let keys = |b: &str, a: &str| offending_keys(cargo, Some(b.as_bytes()), Some(a.as_bytes()));
    assert_eq!(
        keys("[package]\nname='a'\n", "[package]\nname='a'\nlinks='z'\n"),
        vec!["package.links"]
    );
    assert_eq!(
        keys(
            "[package]\nname='a'\n",
            "[package]\nname='a'\n[workspace]\nmembers=['x']\n"
        ),
        vec!["workspace.members"]
    );
    assert!(keys("[dependencies]\nx='1'\n", "[dependencies]\n").is_empty());
    assert!(k
        .manifest_of("target/debug/build/x/out/Cargo.toml")
        .is_none());
    let (_, py) = k.manifest_of("pyproject.toml").unwrap();
    let keys = |b: &str, a: &str| offending_keys(py, Some(b.as_bytes()), Some(a.as_bytes()));
    assert_eq!(
        keys(
            "[project]\nname='a'\n",
            "[project]\nname='a'\n[project.entry-points.x]\ny='z'\n"
        ),
        vec!["project.entry-points.x.y"]
    );
    assert_eq!(
        keys("", "[tool.poetry]\nname='a'\n"),
        vec!["tool.poetry.name"]
    );
}

/// The names of a classified program entry that may run code.
fn programs_that_may_run_code() -> Vec<String> {
    let t = crate::classify::knowledge::knowledge();
    assert!(t.load_error.is_none(), "{:?}", t.load_error);
    let mut out: Vec<String> = t
        .programs()
        .filter(|(_, _, spec)| spec.may_run_code())
        .map(|(n, _, _)| n.to_string())
        .collect();
    out.sort();
    out
}

/// The programs of docs/security.md's table of workspace runners (first column, each
/// backticked form's program: `npm/pnpm/yarn test/…` → npm, pnpm, yarn).
fn workspace_runners() -> Vec<String> {
    let doc = include_str!("../../../docs/security.md");
    let start = doc
        .find("### Package managers and toolchains: workspace runners")
        .expect("docs/security.md has the workspace runners section");
    let mut out = Vec::new();
    for line in doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| local"))
        .skip(2)
    {
        if !line.starts_with('|') {
            break;
        }
        let first = line.split('|').nth(1).unwrap_or("");
        for form in first.split('`').skip(1).step_by(2) {
            let prog = form.split_whitespace().next().unwrap_or("");
            out.extend(
                prog.split('/')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The hook managers, environment tools and editors the issue names.
const ALSO: &[&str] = &[
    "git",
    "husky",
    "lefthook",
    "pre-commit",
    "simple-git-hooks",
    "direnv",
    "mise",
    "asdf",
    "cargo",
    "rustup",
    "npm",
    "yarn",
    "pnpm",
    "python",
    "code",
    "vim",
    "emacs",
    "subl",
    "idea",
];

#[test]
fn every_program_that_may_run_code_has_an_entry_or_says_none() {
    let k = knowledge().unwrap();
    let runners = workspace_runners();
    for must in [
        "cargo", "npm", "pnpm", "yarn", "npx", "go", "gofmt", "rustfmt", "black", "python3", "pip",
        "uv", "poetry",
    ] {
        assert!(runners.iter().any(|r| r == must), "{must} in {runners:?}");
    }
    let code = programs_that_may_run_code();
    for must in [
        "git", "make", "python3", "bash", "npm", "vim", "docker", "sed",
    ] {
        assert!(code.iter().any(|r| r == must), "{must} in {code:?}");
    }
    let mut missing: Vec<String> = code
        .iter()
        .chain(&runners)
        .map(String::as_str)
        .chain(ALSO.iter().copied())
        .filter(|n| k.entry_for(n).is_none())
        .map(str::to_string)
        .collect();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "no run-on-use knowledge in src/programs/ (add one with its paths, or `none` with the reason): {missing:?}"
    );
}

/// A directory holding `pyvenv.cfg` is an environment wherever it is and whatever its name,
/// when the change set itself adds the marker too.
#[test]
fn a_marker_makes_any_directory_an_environment() {
    let t = table();
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    let add = |p: &str| Change {
        path: p.into(),
        kind: Kind::Added,
        before: None,
        after: Some("file:00:644".into()),
        diff: None,
        privilege_bits_removed: false,
        run_keys: None,
    };
    let cs = ChangeSet {
        changes: vec![
            add("tools/pyenv2/pyvenv.cfg"),
            add("tools/pyenv2/lib/python3.11/site-packages/evil.pth"),
            add("tools/pyenv2/lib/python3.11/site-packages/pkg/mod.py"),
            add("tools/other/x.pth"),
        ],
        hash: String::new(),
        diff_truncated: false,
    };
    let f = crate::bash::protected::gather(ws, &cs, Some(ws));
    assert_eq!(
        f.environments.get("tools/pyenv2").map(String::as_str),
        Some("pyvenv.cfg")
    );
    let j = decide(&t, &cs, &f, &[]);
    let hit: Vec<&str> = j.hits.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(
        hit,
        vec![
            "tools/pyenv2/pyvenv.cfg",
            "tools/pyenv2/lib/python3.11/site-packages/evil.pth"
        ]
    );
    assert!(
        j.hits[0]
            .rule
            .contains("an environment (tools/pyenv2 holds pyvenv.cfg)"),
        "{:?}",
        j.hits
    );
    // the marker already in the workspace counts too
    std::fs::create_dir_all(ws.join("e")).unwrap();
    std::fs::write(ws.join("e/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    let cs = ChangeSet {
        changes: vec![add("e/bin/activate")],
        hash: String::new(),
        diff_truncated: false,
    };
    let f = crate::bash::protected::gather(ws, &cs, Some(ws));
    assert_eq!(decide(&t, &cs, &f, &[]).hits.len(), 1);
}

/// The `package.json` of a package `node_modules/.bin` links to asks; another package's is
/// its source.
#[test]
fn a_linked_package_manifest_asks() {
    let t = table();
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    std::fs::create_dir_all(ws.join("node_modules/.bin")).unwrap();
    std::os::unix::fs::symlink("../jest/bin/jest.js", ws.join("node_modules/.bin/jest")).unwrap();
    let m = |p: &str| Change {
        path: p.into(),
        kind: Kind::Modified,
        before: Some("file:11:644".into()),
        after: Some("file:00:644".into()),
        diff: None,
        privilege_bits_removed: false,
        run_keys: None,
    };
    let mut cs = ChangeSet {
        changes: vec![
            m("node_modules/jest/package.json"),
            m("node_modules/left-pad/package.json"),
        ],
        hash: String::new(),
        diff_truncated: false,
    };
    // a link the change set adds counts as well
    cs.changes.push(Change {
        path: "node_modules/.bin/tool".into(),
        kind: Kind::Added,
        before: None,
        after: Some("link:../@s/tool/cli.js".into()),
        diff: None,
        privilege_bits_removed: false,
        run_keys: None,
    });
    cs.changes.push(m("node_modules/@s/tool/package.json"));
    let f = crate::bash::protected::gather(ws, &cs, Some(ws));
    let j = decide(&t, &cs, &f, &[]);
    let hit: Vec<&str> = j.hits.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(
        hit,
        vec![
            "node_modules/jest/package.json",
            "node_modules/.bin/tool",
            "node_modules/@s/tool/package.json"
        ]
    );
}
