//! `docs/permission-sets.md` is rendered from the profile table (`brainloop::permset::markdown`)
//! and the programs' entries of `src/programs/*.toml` (`bash::run_on_use::markdown`):
//! the document and the code cannot drift. On a mismatch this fails and says how to regenerate;
//! `BRAINLOOP_BLESS=1 cargo test --release --test permsets` writes the file.

use std::path::Path;

#[test]
fn the_permission_sets_document_is_rendered_from_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/permission-sets.md");
    let want = brainloop::permset::markdown()
        + &brainloop::bash::run_on_use::markdown(
            brainloop::bash::protected::GIT_RULE,
            brainloop::permset::DATA,
        )
        .unwrap();
    if std::env::var_os("BRAINLOOP_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("docs/permission-sets.md is writable");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/permission-sets.md does not match the profile table in src/permset.rs; \
         regenerate it with `BRAINLOOP_BLESS=1 cargo test --release --test permsets`"
    );
}

#[test]
fn every_set_named_in_the_document_parses_back() {
    for p in brainloop::permset::PROFILES {
        assert_eq!(brainloop::permset::parse(p.name), Ok(p.set));
        assert!(brainloop::permset::markdown().contains(&format!("| `{}` |", p.name)));
    }
}

#[test]
fn brainloop_sandbox_lists_the_confined_sets_and_not_trusted() {
    use brainloop::sandbox::guarantees::{table, Mechanisms};
    let m = Mechanisms {
        namespaces: true,
        landlock_abi: 6,
        seccomp: true,
    };
    let names: Vec<&str> = table(&m).iter().map(|r| r.set).collect();
    assert_eq!(
        names,
        [
            "minimal",
            "readonly",
            "filesystem",
            "network-api",
            "mcp-standard"
        ]
    );
    // The network sets state no "no network"; the others do (9 guarantees against 8).
    let counts: Vec<usize> = table(&m).iter().map(|r| r.guarantees.len()).collect();
    assert_eq!(counts, [9, 9, 9, 8, 8]);
}
