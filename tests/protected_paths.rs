//! What may make the operator's tools run code is never applied without a human (issue 33, item
//! 1), through the real binary and the real git, the agent as the attacker: with two ordinary
//! `approve --learn` answers (`> WS_PATH`, `mkdir -p WS_PATH`) — plus `git add` / `git commit`
//! where the companions are tested — each attack below was applied without a human before
//! `bash::protected`; now it asks, the prompt naming the rule and why, and the workspace is
//! unchanged. Where a test approves the held change set as a human, it then runs the operator's
//! own command (`git status`, `git commit`, `npm run`) to show what the attack would have done:
//! a canary that writes a marker file in the test's temp dir, nothing else. Ordinary build and
//! test output (`target/**`, `.pytest_cache/`, `node_modules/.*`) still applies without a human.

mod common;

use common::{cli_ok, final_result, submit, Env};
use std::path::Path;
use std::process::Command;

/// The operator's repository in the workspace (the real git), with one commit; the worker.
fn setup(config: Option<&str>) -> (Env, common::Daemon) {
    common::require_sandbox();
    let env = Env::new();
    let ws = &env.workspace;
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["config", "user.name", "Operator"]);
    git(ws, &["config", "user.email", "operator@example.invalid"]);
    git(ws, &["add", "a.txt"]);
    git(ws, &["commit", "-q", "-m", "first"]);
    let d = match config {
        Some(c) => {
            let f = env.root.path().join("brainloop.toml");
            std::fs::write(&f, c).unwrap();
            env.start(&[("BRAINLOOP_CONFIG", f.to_str().unwrap())])
        }
        None => env.start(&[]),
    };
    (env, d)
}

/// The operator runs git in `dir` (their own environment, no sandbox).
fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git")
}

/// One `approve --learn` answer on an ordinary command: its signature is learned.
fn learn(env: &Env, cmd: &str, sig: &str) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd}: {err} {v}");
    let out = cli_ok(
        env,
        &["approve", v["validation_id"].as_str().unwrap(), "--learn"],
    );
    assert!(out.contains(sig), "{cmd}: {out}");
    assert_eq!(final_result(env, id).0, "succeeded", "{cmd}");
}

/// The ordinary answer: `> WS_PATH`, which teaches its family (`mkdir -p WS_PATH` with it).
fn learn_two(env: &Env) {
    learn(env, "echo hi > notes.txt", "redirect:write WS_PATH");
    applied(env, "mkdir -p build/out");
}

/// The command is applied without a human (under what was learned).
fn applied(env: &Env, cmd: &str) {
    common::applied_unasked(env, cmd);
}

/// The command asks (nothing applied); its prompt says each of `why`. Returns the validation id.
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
    // `validations` shows the same reasons to the operator.
    let list = cli_ok(env, &["validations"]);
    assert!(
        list.contains("never applied without a human (rule "),
        "{list}"
    );
    (id, v["validation_id"].as_str().unwrap().to_string())
}

/// A human approves the held change set (it is applied).
fn human_applies(env: &Env, id: i64, vid: &str) {
    cli_ok(env, &["approve", vid]);
    assert_eq!(final_result(env, id).0, "succeeded");
}

fn canary(env: &Env, name: &str) -> String {
    env.root.path().join(name).display().to_string()
}

/// (a) `.git/commondir` pointing at a directory the agent made, whose `config` sets
/// `core.fsmonitor`: the operator's next `git status` would run the agent's program.
#[test]
fn a_git_commondir_to_an_agent_made_config_is_held() {
    let (env, _d) = setup(None);
    learn_two(&env);
    let mark = canary(&env, "fsmonitor-ran");
    let cmd = format!(
        "mkdir -p evil/objects && mkdir -p evil/refs && printf '[core]\\n\\tfsmonitor = \"touch {mark}; false\"\\n' > evil/config && echo ../evil > .git/commondir"
    );
    let (id, vid) = held(
        &env,
        &cmd,
        &["touches a protected path .git/commondir: never applied without a human (rule **/.git/**: git reads"],
    );
    assert!(!env.workspace.join(".git/commondir").exists());
    assert!(!env.workspace.join("evil").exists());
    git(&env.workspace, &["status"]);
    assert!(!Path::new(&mark).exists(), "held: git status runs nothing");

    // The attack is real: applied (a human's approval here), `git status` runs the canary.
    human_applies(&env, id, &vid);
    assert!(env.workspace.join(".git/commondir").exists());
    git(&env.workspace, &["status"]);
    assert!(
        Path::new(&mark).exists(),
        "the operator's git status ran the agent's fsmonitor"
    );
}

/// (b) A nested `.git` *file* (`gitdir: …`) naming an agent-made git dir; and such a git dir
/// alone (HEAD, objects, refs, config) is held too.
#[test]
fn a_nested_gitdir_file_and_a_git_dir_shape_are_held() {
    let (env, _d) = setup(None);
    learn_two(&env);
    let mark = canary(&env, "nested-ran");
    let make_gitdir = |d: &str| {
        format!(
            "mkdir -p {d}/objects && mkdir -p {d}/refs && echo 'ref: refs/heads/main' > {d}/HEAD && printf '[core]\\n\\tfsmonitor = \"touch {mark}; false\"\\n' > {d}/config"
        )
    };
    // The git dir alone: `cd gd && git …` would find it as a bare repository.
    held(
        &env,
        &make_gitdir("gd"),
        &["touches a protected path gd/config: never applied without a human (rule a directory shaped like a git dir (gd)"],
    );
    assert!(!env.workspace.join("gd").exists());
    // With the `.git` file that points at it.
    let cmd = format!(
        "{} && mkdir -p sub && echo 'gitdir: ../gd2' > sub/.git",
        make_gitdir("gd2")
    );
    let (id, vid) = held(
        &env,
        &cmd,
        &[
            "touches a protected path sub/.git: never applied without a human (rule **/.git/**",
            "touches a protected path gd2/HEAD",
        ],
    );
    assert!(!env.workspace.join("sub/.git").exists());

    human_applies(&env, id, &vid);
    git(&env.workspace.join("sub"), &["status"]);
    assert!(
        Path::new(&mark).exists(),
        "the operator's git status in sub/ ran the agent's fsmonitor"
    );
}

/// (c) What a repository's config points at: `core.hooksPath` (`.husky`, and a directory no
/// name table lists), `include.path`.
#[test]
fn what_the_repository_config_points_at_is_held() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    let mark = canary(&env, "hook-ran");
    for (dir, hook) in [
        (".husky", ".husky/pre-commit"),
        ("tools/githooks", "tools/githooks/pre-commit"),
    ] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
        std::fs::write(ws.join(hook), "#!/bin/sh\nexit 0\n").unwrap();
        let mut p = std::fs::metadata(ws.join(hook)).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        std::fs::set_permissions(ws.join(hook), p).unwrap();
    }
    std::fs::write(ws.join("team.gitconfig"), "[user]\n\tname = Operator\n").unwrap();
    git(&ws, &["config", "include.path", "../team.gitconfig"]);
    git(&ws, &["config", "core.hooksPath", "tools/githooks"]);
    learn_two(&env);

    let (id, vid) = held(
        &env,
        &format!("printf '#!/bin/sh\\ntouch {mark}\\n' > tools/githooks/pre-commit"),
        &["touches a protected path tools/githooks/pre-commit: never applied without a human (rule pointed at by a repository's config: .git/config sets core.hookspath = tools/githooks: git runs the hooks there)"],
    );
    held(
        &env,
        "echo '[core] fsmonitor = x/y' > team.gitconfig",
        &["touches a protected path team.gitconfig: never applied without a human (rule pointed at by a repository's config: .git/config sets include.path = ../team.gitconfig"],
    );
    git(&ws, &["config", "core.hooksPath", ".husky"]);
    held(
        &env,
        &format!("echo 'touch {mark}' > .husky/pre-commit"),
        &["touches a protected path .husky/pre-commit: never applied without a human (rule pointed at by a repository's config: .git/config sets core.hookspath = .husky"],
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".husky/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );

    // `brainloop protected` says the same, by the same decision.
    let out = Command::new(common::BIN)
        .args([
            "protected",
            "tools/githooks/pre-commit",
            ".husky/x",
            "src/main.rs",
        ])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_WORKSPACE", &ws)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(".husky/x: protected (rule pointed at by a repository's config: .git/config sets core.hookspath = .husky"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // what the config no longer points at is ordinary source again
    assert!(
        text.contains("tools/githooks/pre-commit: not protected"),
        "{text}"
    );
    assert!(text.contains("src/main.rs: not protected"), "{text}");

    // The attack is real: the held hook, applied, runs on the operator's commit.
    git(&ws, &["config", "core.hooksPath", "tools/githooks"]);
    human_applies(&env, id, &vid);
    git(&ws, &["commit", "-q", "--allow-empty", "-m", "operator"]);
    assert!(
        Path::new(&mark).exists(),
        "the operator's commit ran the agent's hook"
    );
}

/// (d) Package-manager, toolchain, editor and shell configuration, and by default any other
/// dot-file: held (the table, through the real binary).
#[test]
fn tool_configuration_is_held() {
    let (env, _d) = setup(None);
    learn_two(&env);
    let cases: &[(&str, &str)] = &[
        (".npmrc", "**/.npmrc"),
        (".yarnrc.yml", "**/.yarnrc.yml"),
        (".yarnrc", "**/.yarnrc"),
        ("rust-toolchain.toml", "**/rust-toolchain.toml"),
        ("rust-toolchain", "**/rust-toolchain"),
        (".cargo/config.toml", "**/.cargo/config.toml"),
        (".cargo/config", "**/.cargo/config"),
        (".mvn/jvm.config", "**/.mvn/jvm.config"),
        (".mvn/maven.config", "**/.mvn/maven.config"),
        (".sqliterc", "**/.sqliterc"),
        (".vimrc", "**/.vimrc"),
        (".exrc", "**/.exrc"),
        (".nvim.lua", "**/.nvim.lua"),
        (".nvimrc", "**/.nvimrc"),
        (".ssh/config", "**/.ssh/**"),
        (".config/git/config", "**/.config/**"),
        (".python-version", "**/.python-version"),
        ("pip.conf", "**/pip.conf"),
        ("web/.npmrc", "**/.npmrc"),
        (".eslintrc.js", "**/.*"),
        (".git/HEAD", "**/.git/**"),
    ];
    for (path, rule) in cases {
        let cmd = match path.rsplit_once('/') {
            Some((dir, _)) => format!("mkdir -p {dir} && echo x > {path}"),
            None => format!("echo x > {path}"),
        };
        held(
            &env,
            &cmd,
            &[&format!(
                "touches a protected path {path}: never applied without a human (rule {rule}:"
            )],
        );
        assert!(
            !env.workspace.join(path).exists() || *path == ".git/HEAD",
            "{path}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.workspace.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
}

/// (d) `.npmrc` with npm's own semantics: `script-shell` makes the operator's `npm run` run the
/// agent's program (shown once a human applied it).
#[test]
fn an_npmrc_script_shell_is_held_and_would_run_on_npm_run() {
    if Command::new("npm").arg("--version").output().is_err() {
        panic!("CANNOT RUN HERE: npm is not installed");
    }
    let (env, _d) = setup(None);
    learn_two(&env);
    let ws = env.workspace.clone();
    std::fs::write(
        ws.join("package.json"),
        "{\"name\":\"p\",\"version\":\"1.0.0\",\"scripts\":{\"build\":\"true\"}}\n",
    )
    .unwrap();
    let mark = canary(&env, "npm-ran");
    let shell = env.root.path().join("canary.sh");
    std::fs::write(&shell, format!("#!/bin/sh\ntouch {mark}\n")).unwrap();
    let mut p = std::fs::metadata(&shell).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(&shell, p).unwrap();
    let (id, vid) = held(
        &env,
        &format!("echo 'script-shell={}' > .npmrc", shell.display()),
        &["touches a protected path .npmrc: never applied without a human (rule **/.npmrc: npm"],
    );
    human_applies(&env, id, &vid);
    let home = env.root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("npm")
        .args(["run", "build"])
        .current_dir(&ws)
        .env("HOME", &home)
        .env("npm_config_cache", home.join("cache"))
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap();
    assert!(
        Path::new(&mark).exists(),
        "npm run used the agent's script-shell: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (e) git's own files stay held even beside `git add` / `git commit`, whose companions cover
/// only what git writes there: `HEAD`, another branch's ref, `objects/info/alternates`. The
/// ordinary `git add` / `git commit` still apply without a human.
#[test]
fn git_companions_never_cover_head_other_refs_or_alternates() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    for f in ["b.txt", "c.txt", "d.txt"] {
        std::fs::write(ws.join(f), "x\n").unwrap();
    }
    learn(&env, "echo hi > notes.txt", "redirect:write WS_PATH");
    learn(&env, "git add b.txt", "git add WS_PATH");
    applied(&env, "git commit -m 'second commit'");

    applied(&env, "git add c.txt");
    applied(&env, "git commit -m 'third commit'");
    let log = String::from_utf8(git(&ws, &["log", "--oneline"]).stdout).unwrap();
    assert!(log.contains("third commit"), "{log}");

    let head = String::from_utf8(git(&ws, &["rev-parse", "HEAD"]).stdout).unwrap();
    held(
        &env,
        "git add d.txt && echo 'ref: refs/heads/evil' > .git/HEAD",
        &["touches a protected path .git/HEAD: never applied without a human (rule **/.git/**"],
    );
    held(
        &env,
        &format!(
            "git add d.txt && git commit -m 'fourth commit' && echo {} > .git/refs/heads/x",
            head.trim()
        ),
        &["touches a protected path .git/refs/heads/x: never applied without a human (rule **/.git/**"],
    );
    held(
        &env,
        "git add d.txt && echo /tmp/objects > .git/objects/info/alternates",
        &["touches a protected path .git/objects/info/alternates: never applied without a human (rule **/.git/**"],
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert!(!ws.join(".git/refs/heads/x").exists());
    assert!(!ws.join(".git/objects/info/alternates").exists());
}

/// (f) Build and test output is data: written or removed under learned signatures, it still
/// applies without a human; a listed file inside it does not.
#[test]
fn build_and_test_output_still_applies_without_a_human() {
    let (env, _d) = setup(Some("data_paths = [\"**/.build-cache/**\"]\n"));
    let ws = env.workspace.clone();
    learn_two(&env);
    applied(
        &env,
        "mkdir -p target/debug/.fingerprint && echo h > target/debug/.fingerprint/hash",
    );
    applied(&env, "echo '{}' > target/.rustc_info.json");
    applied(
        &env,
        "mkdir -p .pytest_cache/v/cache && echo '{}' > .pytest_cache/v/cache/lastfailed",
    );
    applied(
        &env,
        "mkdir -p node_modules/.cache/x && echo x > node_modules/.package-lock.json",
    );
    applied(&env, "mkdir -p .build-cache && echo x > .build-cache/x");
    applied(&env, "echo 'target/' > .gitignore");
    assert!(ws.join("target/debug/.fingerprint/hash").exists());
    assert!(ws.join(".pytest_cache/v/cache/lastfailed").exists());

    learn(&env, "rm -rf build", "rm -rf WS_PATH");
    applied(&env, "rm -rf target");
    applied(&env, "rm -rf .pytest_cache");
    applied(&env, "rm -rf node_modules");
    assert!(!ws.join("target").exists() && !ws.join(".pytest_cache").exists());

    // Data never lifts a listed rule.
    held(
        &env,
        "mkdir -p node_modules/x && echo x > node_modules/x/.npmrc",
        &["touches a protected path node_modules/x/.npmrc: never applied without a human (rule **/.npmrc"],
    );
}

/// (g) Issue 35: the commit agents make without an identity, `git -c user.name=… -c
/// user.email=… commit -qm MSG`, is learned with its keys literal (it was refused: "git -c
/// writes or runs what its operands do not name"), and later commits apply without a human;
/// a `-c` key that can run code still refuses `--learn`, naming the key; a commit whose change
/// set also touches `.git/hooks` still asks, and nothing of it is applied.
#[test]
fn an_identity_git_c_commit_is_learned_and_a_hooks_write_still_asks() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    for f in ["b.txt", "c.txt", "d.txt"] {
        std::fs::write(ws.join(f), "x\n").unwrap();
    }
    let commit = |n: &str| {
        format!("git -c user.name=agent -c user.email=agent@example.com commit -qm 'step {n}'")
    };
    learn(&env, "echo hi > notes.txt", "redirect:write WS_PATH");
    learn(&env, "git add b.txt", "git add WS_PATH");
    applied(&env, &commit("1"));
    applied(&env, "git add c.txt");
    applied(&env, &commit("2"));
    // Another identity, the flags spelled apart: the same signature.
    applied(
        &env,
        "echo more >> c.txt && git add c.txt && git -c user.email=b@example.com -c user.name='Agent B' commit -q -m 'step 2b'",
    );
    let log = String::from_utf8(git(&ws, &["log", "--format=%an|%s"]).stdout).unwrap();
    assert!(log.contains("agent|step 2\n"), "{log}");
    assert!(log.contains("Agent B|step 2b\n"), "{log}");

    // A key that can make git run a program: asked, and `--learn` names the key.
    let (id, st, v, err) = submit(
        &env,
        "git -c user.name=agent -c core.hooksPath=/tmp commit -qm 'step 3'",
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    let (st, out, err) = env.cli(&["approve", &common::vid(&v), "--learn"]);
    assert!(!st.success(), "--learn must be refused: {out}");
    assert!(
        format!("{out}{err}").contains("git -c core.hooksPath can make git run a program"),
        "{out}{err}"
    );
    cli_ok(&env, &["deny", &common::vid(&v)]);
    assert_eq!(final_result(&env, id).0, "denied");

    // A commit whose change set also writes a hook: held, the rule named; nothing applied.
    let mark = canary(&env, "hook-ran");
    let (id, vid) = held(
        &env,
        &format!(
            "git add d.txt && {} && printf '#!/bin/sh\\ntouch {mark}\\n' > .git/hooks/pre-commit",
            commit("4")
        ),
        &["touches a protected path .git/hooks/pre-commit: never applied without a human (rule **/.git/**"],
    );
    cli_ok(&env, &["deny", &vid]);
    assert_eq!(final_result(&env, id).0, "denied");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    let log = String::from_utf8(git(&ws, &["log", "--format=%s"]).stdout).unwrap();
    assert!(!log.contains("step 4"), "{log}");
    assert!(!log.contains("step 3"), "{log}");
}

/// The operator reads a file of the workspace.
fn read(env: &Env, rel: &str) -> String {
    std::fs::read_to_string(env.workspace.join(rel)).unwrap_or_default()
}

/// (h) Issue 35: git's local bookkeeping (switch, switch -c, stash, stash pop, tag, init,
/// restore, merge) is learned in one `approve --learn` of one of them (its family,
/// `bash::coverage`) and then applied without a human — the ref it names, `HEAD` as a
/// ref to the branch it names, the stash, the tracked files git rewrites from its objects. A
/// switch whose change set also writes a hook, another ref, or `HEAD` to a branch it does not
/// name still asks, and nothing of it is applied. Each of these asked every time before (git's
/// writes under `.git` were protected paths no signature covered). Long because it is one
/// session: each step starts from the repository the previous one left.
#[test]
fn git_bookkeeping_is_learned_and_a_switch_writing_elsewhere_still_asks() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    std::fs::write(ws.join("b.txt"), "feat\n").unwrap();
    learn(&env, "echo hi > notes.txt", "redirect:write WS_PATH");
    learn(&env, "git switch -c feat", "git switch -c LITERAL");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/feat\n");
    applied(&env, "git add b.txt");
    applied(&env, "git commit -m 'on feat'");
    // Back to main: git removes b.txt (tracked on feat only), which the command does not name.
    applied(&env, "git switch main");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/main\n");
    assert!(!ws.join("b.txt").exists());

    // Learned: switch to an existing branch (b.txt back from the objects), create and switch.
    applied(&env, "git switch feat");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/feat\n");
    assert_eq!(read(&env, "b.txt"), "feat\n");
    applied(&env, "git switch -c topic");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/topic\n");
    assert!(ws.join(".git/refs/heads/topic").exists());
    applied(&env, "git switch main");
    assert!(!ws.join("b.txt").exists());

    // stash / stash pop: unasked (the family).
    std::fs::write(ws.join("a.txt"), "dirty 1\n").unwrap();
    applied(&env, "git stash");
    assert_eq!(read(&env, "a.txt"), "a\n");
    applied(&env, "git stash pop");
    assert_eq!(read(&env, "a.txt"), "dirty 1\n");
    applied(&env, "git stash");
    assert_eq!(read(&env, "a.txt"), "a\n");
    assert!(ws.join(".git/refs/stash").exists());
    applied(&env, "git stash pop");
    assert_eq!(read(&env, "a.txt"), "dirty 1\n");
    assert!(!ws.join(".git/refs/stash").exists());

    // tag: unasked (the family).
    applied(&env, "git tag v1");
    applied(&env, "git tag v2");
    assert!(ws.join(".git/refs/tags/v2").exists());

    // A switch that also writes a hook: held, the rule named; nothing applied.
    let head = String::from_utf8(git(&ws, &["rev-parse", "HEAD"]).stdout).unwrap();
    // (left pending: a human's denial would retire the learned signatures it contains)
    held(
        &env,
        "git switch feat && echo 'touch /tmp/x' > .git/hooks/post-checkout",
        &["touches a protected path .git/hooks/post-checkout: never applied without a human (rule **/.git/**"],
    );
    // … another ref.
    held(
        &env,
        &format!("git switch feat && echo {} > .git/refs/heads/x", head.trim()),
        &["touches a protected path .git/refs/heads/x: never applied without a human (rule **/.git/**"],
    );
    // … `HEAD` to a branch the command does not name.
    held(
        &env,
        "git switch feat && echo 'ref: refs/heads/topic' > .git/HEAD",
        &["touches a protected path .git/HEAD: never applied without a human (rule **/.git/**"],
    );
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/main\n");
    assert!(!ws.join(".git/hooks/post-checkout").exists());

    // git init: a fresh git dir as git makes it is applied; one with a config the agent added
    // to asks, and nothing of it is applied.
    applied(&env, "git init -q -b main lib1");
    applied(&env, "git init -q -b main lib2");
    assert_eq!(read(&env, "lib2/.git/HEAD"), "ref: refs/heads/main\n");
    held(
        &env,
        "git init -q -b main lib3 && echo '[core] fsmonitor = x' >> lib3/.git/config",
        &["touches a protected path lib3/.git/config: never applied without a human (rule **/.git/**"],
    );
    assert!(!ws.join("lib3").exists());
    assert!(!ws.join(".git/refs/heads/x").exists());
    assert!(!ws.join("b.txt").exists(), "no switch to feat was applied");
    assert_eq!(read(&env, "a.txt"), "dirty 1\n");

    // restore, merge: unasked (the family); `git switch -` back to the last branch.
    applied(&env, "git restore a.txt");
    assert_eq!(read(&env, "a.txt"), "a\n");
    applied(&env, "git merge --no-edit feat");
    assert_eq!(read(&env, "b.txt"), "feat\n");
    applied(&env, "git switch -c topic2");
    applied(&env, "echo c > c.txt");
    applied(&env, "git add c.txt");
    applied(&env, "git commit -m 'on topic2'");
    // `-` signs as `git switch LITERAL`, learned above; HEAD goes to the branch logs/HEAD names
    applied(&env, "git switch -");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/main\n");
    assert!(!ws.join("c.txt").exists());
    applied(&env, "git merge --no-edit topic2");
    assert_eq!(read(&env, "c.txt"), "c\n");
    applied(&env, "git switch feat");
    assert!(!ws.join("c.txt").exists());
    applied(&env, "git switch -");
    assert_eq!(read(&env, ".git/HEAD"), "ref: refs/heads/main\n");
    assert_eq!(read(&env, "c.txt"), "c\n");
}
