//! What the operator's tools run or obey is never applied without a human (issue 48), through
//! the real binary, the agent as the attacker. Each attack here was applied unasked on bfa80b1
//! after one ordinary `approve --learn` (`echo note > notes.txt`, which teaches the write family)
//! or under a FILE_WRITE `auto` grant; now it asks, the prompt naming the rule and why, and the
//! workspace is unchanged. Where a human then applies the held change set, the operator's own
//! tool (`python`, `npm test`, `npm install`) runs afterwards to show what the attack would have
//! done: a canary writing a marker file in the test's temp dir, nothing else. Ordinary writes of
//! the same family still apply unasked. The same tests run as uid 65534 (`tests/unprivileged.rs`).

mod common;

use common::{cli_ok, final_result, submit, Env};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn setup() -> (Env, common::Daemon) {
    common::require_sandbox();
    let env = Env::new();
    let d = env.start(&[]);
    (env, d)
}

/// One `approve --learn` of an ordinary write: its family (writing named files) is learned.
fn learn_writes(env: &Env) {
    let (id, st, v, err) = submit(env, "echo note > notes.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(env, id).0, "succeeded");
    applied(env, "echo more > more.txt");
}

/// The command is applied without a human (under what was learned).
fn applied(env: &Env, cmd: &str) {
    common::applied_unasked(env, cmd);
}

/// The command asks (nothing applied); its prompt says each of `why`.
fn held(env: &Env, cmd: &str, why: &[&str]) -> (i64, String) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(
        st, "pending_validation",
        "{cmd} must be held for a human: {err} {v}"
    );
    let reasons = v["reasons"].to_string();
    for w in why {
        assert!(
            reasons.contains(w),
            "{cmd}: the prompt should say {w:?}: {reasons}"
        );
    }
    (id, common::vid(&v))
}

fn human_applies(env: &Env, id: i64, vid: &str) {
    cli_ok(env, &["approve", vid]);
    assert_eq!(final_result(env, id).0, "succeeded");
}

fn canary(env: &Env, name: &str) -> PathBuf {
    env.root.path().join(name)
}

fn operator(dir: &Path, program: &str, args: &[&str], home: &Path) -> std::process::Output {
    std::fs::create_dir_all(home).unwrap();
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("npm_config_cache", home.join("npm-cache"))
        .env("npm_config_update_notifier", "false")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
        .output()
        .unwrap_or_else(|e| panic!("CANNOT RUN HERE: {program} is not installed: {e}"))
}

/// (1) Every name lefthook reads its config from: held (only three names were in the table).
#[test]
fn every_lefthook_config_name_is_held() {
    let (env, _d) = setup();
    learn_writes(&env);
    for name in [
        "lefthook-local.yaml",
        "lefthook-local.toml",
        "lefthook-local.json",
        "lefthook.toml",
        "lefthook.json",
        "lefthook.jsonc",
        "lefthook.yml",
        "web/lefthook.toml",
    ] {
        let cmd = match name.rsplit_once('/') {
            Some((dir, _)) => format!("mkdir -p {dir} && echo 'pre-commit: {{}}' > {name}"),
            None => format!("echo 'pre-commit: {{}}' > {name}"),
        };
        held(
            &env,
            &cmd,
            &[
                &format!("touches a protected path {name}: never applied without a human"),
                "git hooks (lefthook)",
            ],
        );
        assert!(!env.workspace.join(name).exists(), "{name} was applied");
    }
    for (name, rule) in [
        ("mise.local.toml", "**/mise.local.toml"),
        ("mise/config.toml", "**/mise/config.toml"),
        ("app.sublime-project", "**/*.sublime-project"),
    ] {
        let cmd = match name.rsplit_once('/') {
            Some((dir, _)) => format!("mkdir -p {dir} && echo x > {name}"),
            None => format!("echo x > {name}"),
        };
        held(&env, &cmd, &[&format!("(rule {rule}:")]);
        assert!(!env.workspace.join(name).exists(), "{name}");
    }
    // the family still applies ordinary writes
    applied(&env, "echo ok > lefthook-notes.md");
}

fn site_packages(venv: &Path) -> String {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("python"))
        .expect("a pythonX.Y dir in the venv");
    format!("lib/{py}/site-packages")
}

/// (2) A Python environment's start-up code — `*.pth`, `sitecustomize.py`, `bin/activate`,
/// `pyvenv.cfg` — in `.venv`, `venv` and any directory holding `pyvenv.cfg`: held; a human's
/// apply of the `.pth` shows the operator's next `.venv/bin/python` would have run it.
#[test]
fn a_python_environment_start_up_code_is_held_and_would_run() {
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    let home = env.root.path().join("home");
    for dir in [".venv", "venv", "tools/py"] {
        let out = operator(&ws, "python3", &["-m", "venv", "--without-pip", dir], &home);
        assert!(out.status.success(), "python3 -m venv {dir}: {out:?}");
    }
    learn_writes(&env);
    let sp = site_packages(&ws.join(".venv"));
    let mark = canary(&env, "pth-ran");
    let pth = format!(".venv/{sp}/evil.pth");
    let (id, vid) = held(
        &env,
        &format!(
            "echo 'import os; open(\"{}\", \"w\")' > {pth}",
            mark.display()
        ),
        &[
            &format!("touches a protected path {pth}"),
            "(rule **/.venv/**/*.pth: a Python environment",
        ],
    );
    assert!(!ws.join(&pth).exists());
    let vsp = site_packages(&ws.join("venv"));
    let tsp = site_packages(&ws.join("tools/py"));
    for (path, rule) in [
        (
            format!("venv/{vsp}/sitecustomize.py"),
            "**/venv/**/sitecustomize.py",
        ),
        (".venv/bin/activate".to_string(), "**/.venv/bin/**"),
        ("venv/pyvenv.cfg".to_string(), "**/venv/pyvenv.cfg"),
        (
            format!("tools/py/{tsp}/x.pth"),
            "an environment (tools/py holds pyvenv.cfg)",
        ),
        (
            "tools/py/bin/pytest".to_string(),
            "an environment (tools/py holds pyvenv.cfg)",
        ),
    ] {
        held(
            &env,
            &format!("echo 'import os' > {path}"),
            &[&format!("(rule {rule}")],
        );
    }
    // a package's own sources under site-packages stay ordinary source of the learned family
    applied(
        &env,
        &format!("mkdir -p .venv/{sp}/pkg && echo 'x = 1' > .venv/{sp}/pkg/mod.py"),
    );
    // what the attack does once applied: the operator's next python runs the agent's code
    human_applies(&env, id, &vid);
    let out = operator(&ws, ".venv/bin/python", &["-c", "pass"], &home);
    assert!(out.status.success(), "{out:?}");
    assert!(mark.exists(), "the operator's python ran the applied .pth");
}

fn need_npm() {
    let ok = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "CANNOT RUN HERE: npm is not installed");
}

/// (2) `node_modules/.bin` shims: held; once a human applied one, the operator's `npm test`
/// runs it.
#[test]
fn node_modules_bin_shims_are_held_and_npm_test_would_run_them() {
    need_npm();
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    std::fs::write(
        ws.join("package.json"),
        "{\"name\":\"p\",\"version\":\"1.0.0\",\"scripts\":{\"test\":\"jest\"}}\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("node_modules/.bin")).unwrap();
    learn_writes(&env);
    let mark = canary(&env, "shim-ran");
    let (id, vid) = held(
        &env,
        &format!("printf '#!/bin/sh\\ntouch {}\\n' > node_modules/.bin/jest && chmod +x node_modules/.bin/jest", mark.display()),
        &["touches a protected path node_modules/.bin/jest", "(rule **/node_modules/.bin/**:"],
    );
    assert!(!ws.join("node_modules/.bin/jest").exists());
    human_applies(&env, id, &vid);
    let out = operator(&ws, "npm", &["test"], &env.root.path().join("home"));
    assert!(mark.exists(), "npm test ran the shim: {out:?}");
}

/// (3) package.json's lifecycle scripts: `npm pkg set scripts.prepare=…` and a local tarball
/// whose sandboxed postinstall rewrites the root manifest are held, naming the keys; an inert
/// `npm pkg set` still applies unasked; once a human applied the scripts, the operator's next
/// `npm install` runs them.
#[test]
fn package_json_lifecycle_scripts_are_held_and_npm_install_would_run_them() {
    need_npm();
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    std::fs::write(
        ws.join("package.json"),
        "{\"name\":\"p\",\"version\":\"1.0.0\"}\n",
    )
    .unwrap();
    let (id, st, v, err) = submit(&env, "npm pkg set description=first");
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    applied(&env, "npm pkg set description=second version=1.0.1");
    let mark = canary(&env, "prepare-ran");
    let (id, vid) = held(
        &env,
        &format!("npm pkg set scripts.prepare='touch {}'", mark.display()),
        &[
            "touches a protected path package.json",
            "(rule **/package.json (npm, key by key): changes scripts.prepare",
        ],
    );
    let now = std::fs::read_to_string(ws.join("package.json")).unwrap();
    assert!(!now.contains("prepare"), "{now}");
    // a local package whose postinstall (sandboxed, on the overlay) rewrites the root manifest
    let evil = ws.join("vendor/evil");
    std::fs::create_dir_all(&evil).unwrap();
    std::fs::write(
        evil.join("package.json"),
        r#"{"name":"evil","version":"1.0.0","scripts":{"postinstall":"node -e \"const f=process.env.INIT_CWD+'/package.json';const p=require(f);p.scripts={prepare:'touch /tmp/never'};require('fs').writeFileSync(f,JSON.stringify(p))\""}}"#,
    )
    .unwrap();
    held(
        &env,
        "npm install --no-audit --no-fund ./vendor/evil",
        &["touches a protected path package.json", "dependencies.evil"],
    );
    let now = std::fs::read_to_string(ws.join("package.json")).unwrap();
    assert!(!now.contains("evil") && !now.contains("never"), "{now}");
    // what the attack does once applied: the operator's next npm install runs `prepare`
    human_applies(&env, id, &vid);
    let out = operator(
        &ws,
        "npm",
        &["install", "--offline"],
        &env.root.path().join("home"),
    );
    assert!(
        mark.exists(),
        "npm install ran the applied prepare script: {out:?}"
    );
}

/// Cargo.toml and pyproject.toml judged by key: a build script, a path dependency, a console
/// script are held; a version bump applies unasked.
#[test]
fn cargo_and_pyproject_manifests_are_judged_by_key() {
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("pyproject.toml"),
        "[project]\nname = \"p\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    learn_writes(&env);
    applied(&env, "sed -i 's/0.1.0/0.2.0/' Cargo.toml");
    held(
        &env,
        "echo 'build = \"gen.rs\"' >> Cargo.toml",
        &["(rule **/Cargo.toml (cargo, key by key): changes package.build"],
    );
    held(
        &env,
        "printf '[dependencies]\\nx = { path = \"../x\" }\\n' >> Cargo.toml",
        &["changes dependencies.x"],
    );
    applied(&env, "sed -i 's/0.1.0/0.3.0/' pyproject.toml");
    held(
        &env,
        "printf '[project.scripts]\\np = \"p:main\"\\n' >> pyproject.toml",
        &["(rule **/pyproject.toml (pip, key by key): changes project.scripts"],
    );
}

/// The lows: the git family's forms that discard work no commit holds — `git restore` of the
/// operator's edits, `branch -d`, `tag -d` — are named as such in the prompt that teaches the
/// family, and apply only what `brainloop undo` restores: undo brings the edit, the branch and
/// the tag back.
#[test]
fn git_forms_that_discard_work_say_so_and_undo_restores_them() {
    let (env, _d) = setup();
    let ws = env.workspace.clone();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Op")
            .env("GIT_AUTHOR_EMAIL", "op@example.invalid")
            .env("GIT_COMMITTER_NAME", "Op")
            .env("GIT_COMMITTER_EMAIL", "op@example.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "first"]);
    git(&["branch", "feat"]);
    git(&["tag", "v1"]);
    // one git form learned: its family, whose prompt names what discards work
    let (id, st, v, err) = submit(&env, "git branch topic");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let prompt = v["reasons"].to_string();
    assert!(
        prompt.contains(
            "`restore`, `stash drop`, `branch -d` and `tag -d` discard work no commit holds"
        ) && prompt.contains("`brainloop undo JOB` restores them"),
        "{prompt}"
    );
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    // the operator's uncommitted edit, dropped by a learned `git restore`, then undone
    std::fs::write(ws.join("a.txt"), "the operator's edit\n").unwrap();
    let mut undone = Vec::new();
    for cmd in ["git restore a.txt", "git branch -d feat", "git tag -d v1"] {
        let (id, st, v, err) = submit(&env, cmd);
        assert_eq!(st, "succeeded", "{cmd}: {err} {v}");
        assert_eq!(v["policy_used"], "signature_learned", "{cmd}: {v}");
        undone.push(id);
    }
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
    assert!(!ws.join(".git/refs/heads/feat").exists() && !ws.join(".git/refs/tags/v1").exists());
    for id in undone.iter().rev() {
        cli_ok(&env, &["undo", &id.to_string()]);
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "the operator's edit\n"
    );
    assert!(ws.join(".git/refs/heads/feat").exists() && ws.join(".git/refs/tags/v1").exists());
}

/// (4) A FILE_WRITE `auto` grant (generate_file) never writes a run-on-use path or an
/// unparseable manifest unasked; an ordinary file under the same grant still is written.
#[test]
fn an_auto_write_grant_never_writes_what_the_operator_s_tools_run() {
    let env = Env::new();
    std::fs::create_dir_all(env.workspace.join("auto")).unwrap();
    let mock =
        common::mock_llm::MockLlm::start(|_| common::mock_llm::Reply::text("pre-commit: {}\n"));
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        "[clients.agent]\nfile_read = [\"{workspace}/**\"]\nfile_write_auto = [\"{workspace}/auto/**\"]\nllm = true\n",
    )
    .unwrap();
    let _d = common::start_with_llm(&env, cfg.to_str().unwrap(), &mock, &[]);
    let gen = |path: &str| -> (String, Value, String) {
        let id = common::job(
            &env,
            "agent",
            "generate_file",
            &json!({"prompt": "a file", "output_path": path}),
        );
        common::settled(&env, id)
    };
    let (st, v, err) = gen("auto/notes.yml");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "auto_grant");
    for (path, why) in [
        (
            "auto/lefthook.toml",
            "(rule **/lefthook.{yml,yaml,toml,json,jsonc}: git hooks (lefthook)",
        ),
        (
            "auto/.venv/lib/python3.11/site-packages/x.pth",
            "(rule **/.venv/**/*.pth:",
        ),
        (
            "auto/package.json",
            "(rule **/package.json (npm, key by key): changes (the whole file",
        ),
        ("auto/.husky/pre-commit", "(rule **/.husky/**:"),
    ] {
        let (st, v, err) = gen(path);
        assert_eq!(st, "pending_validation", "{path}: {err} {v}");
        assert!(v["reasons"].to_string().contains(why), "{path}: {v}");
        assert!(!env.workspace.join(path).exists(), "{path} was written");
    }
}
