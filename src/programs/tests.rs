//! The built-in table loads (every file, every name once), and an operator's entry adds but
//! never weakens.

use super::*;

#[test]
fn the_builtin_table_loads_with_every_name_once() {
    let t = builtin().unwrap();
    assert!(t.programs.len() > 120, "{}", t.programs.len());
    assert!(t.wrappers.len() > 30, "{}", t.wrappers.len());
    let git = t.classified("git").unwrap();
    assert_eq!(git.origin.file, "src/programs/git.toml");
    assert!(git.spec.as_ref().unwrap().subcommands.contains_key("push"));
    assert!(t.never_learned("find").contains(&"-exec"));
    assert!(t.never_learned("tar").contains(&"--to-command"));
    assert!(t.never_learned("cat").is_empty());
    // run-on-use knowledge answers for its names
    assert!(t.about("lefthook").iter().any(|e| e.run_on_use.is_some()));
}

#[test]
fn an_entry_is_refused_naming_file_and_line() {
    let bad = "[[program]]\nname = \"x\"\neffects = [\"pure\"]\nbogus = 1\n";
    let e = parse("d/x.toml", bad, false).unwrap_err().to_string();
    assert!(e.starts_with("d/x.toml:1"), "{e}");
    let e = parse(
        "d/x.toml",
        "[[program]]\nname = \"x\"\nvalue_opts = [\"-n\"]\n",
        false,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("needs `effects`"), "{e:#}");
    let e = parse(
        "d/y.toml",
        "\n\n[program]\nname = \"y\"\nform = \"sudo\"\neffects = []\n",
        false,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("d/y.toml:3"), "{e:#}");
}

fn merged(text: &str) -> std::result::Result<Table, String> {
    let mut t = builtin().unwrap();
    operator::merge(&mut t, "/etc/brainloop/programs.d/op.toml", text)
        .map(|_| t)
        .map_err(|e| format!("{e:#}"))
}

#[test]
fn an_operator_adds_a_program_and_stricter_rules() {
    let t = merged(
        "[program]\nname = \"mytool\"\neffects = [\"readonly\"]\noperands = \"data\"\n\
         [[subcommand]]\nname = \"write\"\neffects = [\"filesystem\"]\n\
         [[run_on_use]]\nreason = \"mytool runs its hooks\"\npaths = ['**/.mytool/hooks/**']\n",
    )
    .unwrap();
    let e = t.classified("mytool").unwrap();
    assert!(!e.origin.builtin);
    assert_eq!(e.origin.line, 1);
    // a built-in program gains a never-learned flag, a stricter subcommand and a path
    let t = merged(
        "[program]\nname = \"git\"\n\
         [[flag]]\nname = \"--my-exec\"\neffect = \"add\"\neffects = [\"process\"]\nlearn = \"never\"\n\
         [[subcommand]]\nname = \"status\"\neffects = [\"readonly\", \"process\"]\n\
         [[run_on_use]]\nreason = \"our hooks\"\npaths = ['**/.githooks/**']\n",
    );
    // `git` without `effects` is not a classification: the flag and subcommand need one
    assert!(t.is_err(), "{t:?}");
    let t = merged(
        "[program]\nname = \"git\"\neffects = [\"unknown\"]\n\
         [[flag]]\nname = \"--my-exec\"\neffect = \"add\"\neffects = [\"process\"]\nlearn = \"never\"\n\
         [[subcommand]]\nname = \"status\"\neffects = [\"readonly\", \"process\"]\n\
         [[run_on_use]]\nreason = \"our hooks\"\npaths = ['**/.githooks/**']\n",
    )
    .unwrap();
    let git = t.classified("git").unwrap();
    assert!(git.origin.builtin);
    assert!(t.never_learned("git").contains(&"--my-exec"));
    assert_eq!(
        git.spec.as_ref().unwrap().subcommands["status"].effects,
        vec!["readonly", "process"]
    );
    let r = git.run_on_use.as_ref().unwrap();
    assert!(r.rules.iter().any(|x| x.why == "our hooks"));
}

#[test]
fn an_operator_entry_that_weakens_a_builtin_rule_is_refused() {
    let cases = [
        (
            "[program]\nname = \"find\"\neffects = [\"readonly\"]\n\n[[flag]]\nname = \"-exec\"\nlearn = \"neutral\"\n",
            "op.toml:6: find -exec: `learn = \"neutral\"`",
        ),
        (
            "[program]\nname = \"find\"\neffects = [\"readonly\"]\n[[flag]]\nname = \"-exec\"\neffect = \"remove\"\neffects = [\"process\"]\n",
            "op.toml:5: find -exec: `effect = \"remove\"`",
        ),
        (
            "[program]\nname = \"git\"\neffects = [\"unknown\"]\n[[subcommand]]\nname = \"push\"\neffects = [\"readonly\"]\n",
            "op.toml:5: git push: effects [\"readonly\"] drop [\"network\", \"process\"]",
        ),
        (
            "[program]\nname = \"git\"\neffects = [\"unknown\"]\noperands = \"read\"\n",
            "op.toml:4: `operands` would change how brainloop reads git",
        ),
        (
            "[program]\nname = \"direnv\"\nrun_on_use_none = \"nothing, really\"\n",
            "`run_on_use_none` says direnv runs nothing",
        ),
        (
            "[program]\nname = \"lefthook\"\neffects = [\"pure\"]\n",
            "classifies lefthook, which the built-in entry leaves unknown",
        ),
        ("[[wrapper]]\nname = \"sudo\"\n", "redefines the wrapper sudo"),
        (
            "[program]\nname = \"rm2\"\naliases = [\"rm\"]\neffects = [\"pure\"]\n",
            "`aliases` would change how brainloop reads rm",
        ),
    ];
    for (text, want) in cases {
        let e = merged(text).unwrap_err();
        assert!(e.contains(want), "{text}\n→ {e}\nwant {want}");
        assert!(e.contains("the built-in rule: src/programs/"), "{e}");
    }
}

#[test]
fn learning_knowledge_is_read_from_the_entries() {
    let t = builtin().unwrap();
    // neutral flags: the program's and a subcommand's own
    assert!(t.neutral("rm", None, "-f"));
    assert!(t.neutral("git", Some("add"), "-A"));
    assert!(
        !t.neutral("git", Some("add"), "-f"),
        "staging what .gitignore keeps out is more"
    );
    assert!(!t.neutral("git", Some("push"), "-A"));
    assert!(t.neutral("cargo", Some("build"), "--offline"));
    // spellings, recursion
    assert_eq!(
        t.same_as("git checkout -b LITERAL"),
        Some("git switch -c LITERAL")
    );
    assert_eq!(t.recursive("mv"), Some(&Recursive::Always));
    assert!(t
        .recursive("cp")
        .is_some_and(|r| r.flag("-av") && !r.flag("-f")));
    assert!(
        t.recursive("ln").is_none(),
        "`ln -r` is relative, not recursive"
    );
    // signatures speak for the names they list
    assert!(t.signs("python3", |s| &s.keep_module));
    assert!(!t.signs("perl", |s| &s.keep_module));
    assert!(t.signs("perl", |s| &s.expression_first));
    assert!(
        t.signs("hg", |s| &s.message_flags),
        "an unclassified entry signs too"
    );
    // a family member's flags named by a list are that list
    let npm = t
        .families
        .iter()
        .find(|f| f.name.starts_with("npm's"))
        .unwrap();
    let install = npm
        .members
        .iter()
        .find(|m| m.subcommands.iter().any(|s| s == "install"))
        .unwrap();
    assert_eq!(
        install.flags,
        MemberFlags::Only(t.list("npm", "local_install_flags").to_vec())
    );
    assert!(t
        .list("npm", "local_install_flags")
        .iter()
        .any(|f| f == "--save-dev"));
}

#[test]
fn learning_keys_that_would_widen_are_refused() {
    // a signature key naming a name the entry does not have
    let e = parse(
        "d/z.toml",
        "[[program]]\nname = \"z\"\neffects = [\"pure\"]\nsignature.runner = [\"y\"]\n",
        false,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("`y` is not one of the entry's names"),
        "{e:#}"
    );
    // an operator may not add a family, neutral subcommand flags or a built-in's signature
    for (text, want) in [
        ("[[family]]\nname = \"f\"\nshows = \"x\"\nclasses = [\"rm WS_PATH\"]\n", "families are built-in only"),
        ("[program]\nname = \"git\"\neffects = [\"unknown\"]\n[[subcommand]]\nname = \"push\"\neffects = [\"network\", \"process\"]\nneutral = [\"--force\"]\n", "would change how learning reads"),
        ("[program]\nname = \"git\"\nsignature.runner = true\n", "`signature` would change how learning reads git"),
    ] {
        let e = merged(text).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
}
