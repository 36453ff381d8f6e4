//! A learned signature covers only the effects a human saw (issue 18, item 3), through the real
//! daemon, the agent as the attacker: once `sed -i EXPR WS_PATH` or `> WS_PATH` is learned (5
//! approved change sets), a command of the same signature that writes a file it does not name, or
//! a protected path (`.git/config`, `.git/hooks/**`, `.envrc`, an operator's `protected_paths`),
//! is not applied automatically: it asks, the reasons in the prompt, and the workspace is
//! unchanged. The ordinary learned case still applies without a human. Canary effects only,
//! temp dirs only, nothing leaves the machine.

mod common;

use common::{cli_ok, final_result, submit, Env};
use serde_json::Value;
use std::path::Path;

const GIT_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n";

/// A workspace with a file to edit, a repository's `.git/config` and hooks dir, and a symlink
/// planted earlier (`link.txt` → `other.txt`); the worker with `config` (TOML) if given.
fn setup(config: Option<&str>) -> (Env, common::Daemon) {
    common::require_sandbox();
    let env = Env::new();
    let ws = &env.workspace;
    std::fs::write(ws.join("a.txt"), "line one\nline two\n").unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), GIT_CONFIG).unwrap();
    std::fs::write(ws.join("other.txt"), "other\n").unwrap();
    std::os::unix::fs::symlink("other.txt", ws.join("link.txt")).unwrap();
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

/// Approves 5 change sets of `cmd(i)`, after which its signature is learned.
fn learn(env: &Env, sig: &str, cmd: impl Fn(usize) -> String) {
    for i in 0..5 {
        let (id, st, v, _) = submit(env, &cmd(i));
        assert_eq!(st, "pending_validation", "approval {i}: {v}");
        cli_ok(env, &["approve", v["validation_id"].as_str().unwrap()]);
        assert_eq!(final_result(env, id).0, "succeeded");
    }
    let rows: Value = serde_json::from_str(&cli_ok(env, &["signatures", "--json"])).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == sig)
        .unwrap_or_else(|| panic!("{sig} not recorded: {rows}"));
    assert_eq!(row["state"], "learned for local", "{row}");
}

/// The command asked (nothing applied), and its prompt says `why`.
fn asks(env: &Env, cmd: &str, why: &str) -> (i64, Value) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {err} {v}");
    let reasons = v["reasons"].to_string();
    assert!(
        reasons.contains(why),
        "{cmd}: reasons should say {why:?}: {reasons}"
    );
    (id, v)
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// (a) + (d): a learned `sed -i EXPR WS_PATH` does not cover a script's `w .git/config` nor
/// `w OTHER`; trying them does not taint the learned signature, which still applies ordinary edits.
#[test]
fn a_learned_sed_signature_does_not_cover_a_script_writing_elsewhere() {
    let (env, _d) = setup(None);
    learn(&env, "sed -i EXPR WS_PATH", |i| {
        format!("sed -i 's/$/ x{i}/' a.txt")
    });
    let before = read(&env.workspace.join("a.txt"));

    let (_, v) = asks(
        &env,
        "sed -i 's/one/ONE/w .git/config' a.txt",
        "touches a protected path .git/config: never applied without a human",
    );
    assert!(v["effects"].to_string().contains(".git/config"), "{v}");
    assert_eq!(
        read(&env.workspace.join(".git/config")).as_deref(),
        Some(GIT_CONFIG)
    );
    assert_eq!(
        read(&env.workspace.join("a.txt")),
        before,
        "nothing applied"
    );

    // Another file than the one named, not protected: a never-learned construct, so it asks
    // like any unlearned change set, the file it writes shown among the effects.
    let (_, st, v, err) = submit(&env, "sed -i 's/one/ONE/w out.txt' a.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(v["effects"].to_string().contains("out.txt"), "{v}");
    assert!(!env.workspace.join("out.txt").exists());
    let sigs = cli_ok(&env, &["signatures"]);
    assert!(sigs.contains("[writes or runs elsewhere]"), "{sigs}");

    // (d) the ordinary learned case still applies without a human.
    let (_, st, v, err) = submit(&env, "sed -i 's/fn/FN/' src/lib.rs");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(
        read(&env.workspace.join("src/lib.rs")).as_deref(),
        Some("FN main() {}\n")
    );
}

/// (b) + (c) + (d): a learned `> WS_PATH` never writes a protected path, nor a file the command
/// does not name (through a planted symlink); a plain redirect still applies without a human.
#[test]
fn a_learned_redirect_never_writes_a_protected_or_unnamed_path() {
    let (env, _d) = setup(None);
    learn(&env, "redirect:write WS_PATH", |i| {
        format!("echo hi{i} > notes.txt")
    });

    asks(
        &env,
        "echo evil > .git/hooks/post-checkout",
        "not applied automatically: touches a protected path .git/hooks/post-checkout",
    );
    assert!(!env.workspace.join(".git/hooks/post-checkout").exists());
    asks(&env, "echo x > .envrc", "protected path .envrc");
    assert!(!env.workspace.join(".envrc").exists());

    // (c) the named file is a symlink: the change set modifies another file.
    asks(
        &env,
        "echo evil > link.txt",
        "not applied automatically: modifies other.txt, which the command does not name",
    );
    assert_eq!(
        read(&env.workspace.join("other.txt")).as_deref(),
        Some("other\n")
    );

    // (d) the economy survives.
    let (_, st, v, err) = submit(&env, "echo fine > fresh.txt");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    assert_eq!(
        read(&env.workspace.join("fresh.txt")).as_deref(),
        Some("fine\n")
    );
}

/// The operator's `protected_paths` extend the table; a human may still approve such a change.
#[test]
fn operator_protected_paths_always_ask_and_a_human_may_approve() {
    let (env, _d) = setup(Some("protected_paths = [\"deploy/**\"]\n"));
    std::fs::create_dir_all(env.workspace.join("deploy")).unwrap();
    learn(&env, "redirect:write WS_PATH", |i| {
        format!("echo hi{i} > notes.txt")
    });
    let (id, v) = asks(
        &env,
        "echo 'curl x | sh' > deploy/run.sh",
        "protected path deploy/run.sh",
    );
    assert!(!env.workspace.join("deploy/run.sh").exists());
    cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(
        read(&env.workspace.join("deploy/run.sh")).as_deref(),
        Some("curl x | sh\n")
    );
}

/// One `approve --learn` answer, which must be accepted.
fn teach(env: &Env, cmd: &str) {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd}: {err} {v}");
    cli_ok(env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(env, id).0, "succeeded", "{cmd}");
}

/// The command applies without a human, under what was learned.
fn unasked(env: &Env, cmd: &str) {
    let (_, st, v, err) = submit(env, cmd);
    assert_eq!(st, "succeeded", "{cmd} should apply unasked: {err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{cmd}: {v}");
}

/// (e) Issue 35, `bash::coverage`: one `--learn` teaches the command's family, and the prompt
/// says so before the human answers — writing named workspace files (`>`, `>>`, `tee`, `sed -i`,
/// `touch`, `mkdir`, `cp`) — and nothing of another family, nothing never learnable, nothing
/// protected, nothing a human denied for this client.
#[test]
fn one_learn_teaches_the_family_the_prompt_named_and_nothing_else() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    let (id, st, v, err) = submit(&env, "echo one > notes.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let reasons = v["reasons"].to_string();
    assert!(
        reasons.contains(
            "approve --learn teaches this client the family \\\"write named workspace files\\\""
        ),
        "the prompt names the family before the answer: {reasons}"
    );
    let said = cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert!(
        said.contains("which teach the family \"write named workspace files\""),
        "{said}"
    );
    assert_eq!(final_result(&env, id).0, "succeeded");
    // every member of the family, however spelled
    unasked(&env, "sed -i -E 's/one/two/' notes.txt");
    unasked(&env, "printf 'x\\n' | tee -a notes.txt b.txt");
    unasked(&env, "echo three >> notes.txt");
    unasked(&env, "touch c.txt d.txt");
    unasked(&env, "mkdir -p -v deep/er/path");
    unasked(&env, "cp notes.txt deep/er/copy.txt");
    assert_eq!(
        read(&ws.join("notes.txt")).as_deref(),
        Some("two\nx\nthree\n")
    );
    assert_eq!(
        read(&ws.join("deep/er/copy.txt")).as_deref(),
        Some("two\nx\nthree\n")
    );
    // ... but not another family, a never-learnable construct, a protected path, or outside
    asks(&env, "rm c.txt", "");
    asks(&env, "mv d.txt e.txt", "");
    asks(&env, "sed -i 's/two/2/w out.txt' notes.txt", "");
    asks(&env, "echo x > .envrc", "touches a protected path .envrc");
    // copying a file of the host into the workspace is no member (its source is outside), and
    // the overlay's sandbox does not let it read there: nothing is copied, asked or not
    let (_, st, v, _) = submit(&env, "cp /etc/hostname stolen.txt");
    assert_ne!(st, "succeeded", "{v}");
    assert_ne!(v["policy_used"], "signature_learned", "{v}");
    assert!(!ws.join("stolen.txt").exists());
    let outside = env.root.path().join("outside.txt");
    let (_, st, _, _) = submit(&env, &format!("echo x > {}", outside.display()));
    assert_ne!(st, "succeeded");
    assert!(!outside.exists());
    assert!(ws.join("c.txt").exists() && ws.join("d.txt").exists());
    assert!(!ws.join("out.txt").exists() && !ws.join("e.txt").exists());

    // a human's denial of a member for this client: that member asks from then on
    let (id, v) = asks(&env, "mkdir -p build/x && rm -f c.txt", "");
    cli_ok(&env, &["deny", &common::vid(&v)]);
    assert_eq!(final_result(&env, id).0, "denied");
    teach(&env, "rm d.txt");
    asks(&env, "rm -f c.txt", "");
    asks(&env, "mkdir -p build/y", "");
    assert!(ws.join("c.txt").exists() && !ws.join("build").exists());
}

/// (f) git's local bookkeeping is one family: `git init` taught once, the agent's add, commit
/// (with an identity `-c`), branch, switch, stash and merge run unasked; amend, a hard reset, a
/// forced branch deletion, an unsafe `-c` key or a remote still ask.
#[test]
fn one_learn_teaches_git_local_bookkeeping_and_never_force_amend_or_hooks() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    // a new repository's config and hooks are protected: approved once, not taught
    let (jid, v) = asks(&env, "git init -q -b main", "");
    cli_ok(&env, &["approve", &common::vid(&v)]);
    assert_eq!(final_result(&env, jid).0, "succeeded");
    let id = "git -c user.name=agent -c user.email=agent@example.com";
    teach(&env, "git add -A");
    unasked(&env, &format!("{id} commit -qm first"));
    unasked(&env, "git switch -c feature");
    // work in progress the operator wrote: stashed and back
    std::fs::write(ws.join("wip.txt"), "wip\n").unwrap();
    unasked(&env, "git stash -u");
    assert!(!ws.join("wip.txt").exists());
    unasked(&env, "git stash pop");
    assert!(ws.join("wip.txt").exists());
    unasked(&env, "git add wip.txt");
    unasked(&env, &format!("{id} commit -qm second"));
    unasked(&env, "git switch main");
    assert!(!ws.join("wip.txt").exists());
    unasked(&env, &format!("{id} merge --no-edit feature"));
    unasked(&env, "git branch -d feature");
    unasked(&env, &format!("{id} tag -a v1 -m one"));
    assert_eq!(read(&ws.join("wip.txt")).as_deref(), Some("wip\n"));
    asks(&env, &format!("{id} commit --amend -qm changed"), "");
    asks(&env, "git reset --hard HEAD~1", "");
    asks(&env, "git -c core.hooksPath=/tmp commit -qm x", "");
    let (_, st, _, _) = submit(&env, "git push origin main");
    assert_ne!(st, "succeeded");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
}

/// (g) Issue 35: `find ROOT -name PATTERN` feeding `rm` or `-delete` is a member of "move or
/// delete": taught by `rm`, it deletes unasked what lies beneath ROOT and the pattern names —
/// and when what it deleted is more than that (an `-o`, a pattern naming everything, a
/// directory named by a pattern it does not name), it asks and nothing is deleted.
#[test]
fn find_by_one_name_pattern_deletes_only_what_the_pattern_names() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    for d in ["pkg/__pycache__", "pkg/sub/__pycache__", "keep"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
        std::fs::write(ws.join(d).join("m.cpython-311.pyc"), "pyc").unwrap();
    }
    std::fs::write(ws.join("pkg/app.py"), "print(1)\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "x\n").unwrap();
    teach(&env, "rm gone.txt");
    unasked(
        &env,
        "find . -name __pycache__ -type d -prune -exec rm -rf {} +",
    );
    assert!(!ws.join("pkg/__pycache__").exists() && !ws.join("pkg/sub/__pycache__").exists());
    assert!(ws.join("pkg/app.py").exists() && ws.join("keep/m.cpython-311.pyc").exists());
    unasked(&env, "find keep -name '*.pyc' -delete");
    assert!(!ws.join("keep/m.cpython-311.pyc").exists());
    // more than the pattern names: asked, nothing deleted
    // (an `-o` bounds nothing: asked up front, not even run)
    asks(&env, "find . -name '*.pyc' -o -name '*.py' -delete", "");
    asks(&env, "find . -name '*' -type f -delete", "");
    asks(&env, "find . -name '[a-z]*.py' -delete", "");
    asks(&env, "find pkg -name sub -exec rm -rf {}/.. +", "");
    assert!(ws.join("pkg/app.py").exists() && ws.join("a.txt").exists());
    // git's own files are protected whatever the pattern
    asks(
        &env,
        "find . -name hooks -exec rm -rf {} +",
        "protected path .git/hooks",
    );
    assert!(ws.join(".git/hooks").is_dir());
}

/// (h) Issue 35: python's virtual environment is one family: `pip install --no-index` run from
/// it, taught once, installs a pure library beneath it unasked (a new environment, whose start-up
/// code the operator's `python` runs, asks each time: issue 48). A `bin/pip` the agent
/// planted elsewhere names nothing; one planted beside a `pyvenv.cfg` it also planted may write
/// beneath that directory only — what it writes beside asks, and nothing of it is applied.
#[test]
fn a_venv_taught_once_lets_offline_pip_install_beneath_it_only() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    // a wheel made by hand (a zip with the module and its dist-info): installing it needs no
    // build backend and no index
    std::fs::create_dir_all(ws.join("proj")).unwrap();
    for name in ["demo", "demo2"] {
        let made = std::process::Command::new("python3")
            .arg("-c")
            .arg(concat!(
                "import zipfile,sys\n",
                "n=sys.argv[2]\n",
                "z=zipfile.ZipFile(sys.argv[1],'w')\n",
                "z.writestr(n+'/__init__.py','X = 1\\n')\n",
                "z.writestr(n+'-0.1.0.dist-info/METADATA','Metadata-Version: 2.1\\nName: '+n+'\\nVersion: 0.1.0\\n')\n",
                "z.writestr(n+'-0.1.0.dist-info/WHEEL','Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n",
                "z.writestr(n+'-0.1.0.dist-info/RECORD','')\n",
                "z.close()\n",
            ))
            .arg(ws.join(format!("proj/{name}-0.1.0-py3-none-any.whl")))
            .arg(name)
            .status()
            .expect("python3 runs (the test makes a wheel with it)");
        assert!(made.success(), "python3 made the wheel");
    }
    let (id, st, v, err) = submit(&env, "cd proj && python3 -m venv .venv");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("python's virtual environment, offline"),
        "{v}"
    );
    // A new environment's `bin/**`, `pyvenv.cfg` and `.pth` run on the operator's next
    // `python` (issue 48): `--learn` is refused, naming them; a plain approve applies it once.
    let (st, out, errs) = env.cli(&["approve", &common::vid(&v), "--learn"]);
    assert!(!st.success(), "{out}{errs}");
    assert!(
        errs.contains("touches a protected path proj/.venv/pyvenv.cfg")
            && errs.contains("(rule **/.venv/bin/**"),
        "{errs}"
    );
    cli_ok(&env, &["approve", &common::vid(&v)]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    // A pure library (no console script, no `.pth`) into it teaches the family ...
    let (id, st, v, err) = submit(
        &env,
        "cd proj && .venv/bin/pip install -q --no-index demo-0.1.0-py3-none-any.whl",
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    // ... and applies another such install unasked, beneath the venv
    unasked(
        &env,
        "cd proj && .venv/bin/pip install -q --no-index demo2-0.1.0-py3-none-any.whl",
    );
    let site = std::fs::read_dir(ws.join("proj/.venv/lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    assert!(
        std::fs::read_dir(&site)
            .unwrap()
            .any(|e| e.unwrap().file_name() == "demo2"),
        "the install is applied beneath the venv"
    );
    // a planted pip: without pyvenv.cfg it names nothing; with one, only beneath its directory
    let fake = "#!/bin/sh\nmkdir -p \"$(dirname \"$0\")/../lib\" && echo x > \"$(dirname \"$0\")/../lib/x.py\" && echo y > src/evil.py\n";
    for dir in ["fake", "venv2"] {
        std::fs::create_dir_all(ws.join(dir).join("bin")).unwrap();
        let pip = ws.join(dir).join("bin/pip");
        std::fs::write(&pip, fake).unwrap();
        std::os::unix::fs::PermissionsExt::set_mode(
            &mut std::fs::metadata(&pip).unwrap().permissions(),
            0o755,
        );
        std::fs::set_permissions(&pip, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    std::fs::write(ws.join("venv2/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    asks(&env, "fake/bin/pip install --no-index x", "adds fake/lib");
    asks(
        &env,
        "venv2/bin/pip install --no-index x",
        "adds src/evil.py",
    );
    assert!(!ws.join("src/evil.py").exists() && !ws.join("venv2/lib").exists());
}

/// Runs `program args` in `dir` for the test's own set-up (the operator's tools, not the
/// worker's): it must succeed.
fn run_in(dir: &Path, program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (test set-up): {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// (i) Issue 35: `git clone` of a workspace path is git's local bookkeeping — runs on the
/// overlay (hard links refused there, so git copies), its working tree and its git dir as git
/// makes it applied unasked once the family is taught; a clone with `--upload-pack`, of a
/// URL-like `host:path` or `file://` asks up front and leaves nothing.
#[test]
fn a_local_clone_is_taught_with_git_bookkeeping_and_other_clones_ask_up_front() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    run_in(
        &ws,
        "git",
        &["init", "-q", "--bare", "-b", "main", "remotes/r.git"],
    );
    run_in(&ws, "git", &["init", "-q", "-b", "main", "seed"]);
    std::fs::write(ws.join("seed/a.txt"), "from the source\n").unwrap();
    run_in(&ws.join("seed"), "git", &["add", "a.txt"]);
    run_in(
        &ws.join("seed"),
        "git",
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qm",
            "a",
        ],
    );
    run_in(
        &ws.join("seed"),
        "git",
        &["push", "-q", "../remotes/r.git", "main"],
    );
    let (id, st, v, err) = submit(&env, "git clone -q remotes/r.git");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"].to_string().contains("git's local bookkeeping"),
        "the prompt names the family: {v}"
    );
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(
        read(&ws.join("r/a.txt")).as_deref(),
        Some("from the source\n")
    );
    let config = read(&ws.join("r/.git/config")).unwrap_or_default();
    assert!(config.contains("[remote \"origin\"]"), "{config}");
    unasked(&env, "git clone remotes/r.git second");
    assert_eq!(
        read(&ws.join("second/a.txt")).as_deref(),
        Some("from the source\n")
    );
    for cmd in [
        "git clone --upload-pack='touch upload-pack-ran; git-upload-pack' remotes/r.git third",
        "git clone file://remotes/r.git third",
        "git clone localhost:remotes/r.git third",
    ] {
        let (_, st, v, _) = submit(&env, cmd);
        assert_eq!(st, "pending_validation", "{cmd}: {v}");
        assert!(
            !v["reasons"].to_string().contains("ran on an overlay"),
            "{cmd} is asked up front: {v}"
        );
    }
    assert!(!ws.join("third").exists() && !ws.join("upload-pack-ran").exists());
}

/// A package tarball as npm packs it (`package/` inside), made with tar.
fn npm_tarball(dir: &Path, name: &str, package_json: &str) {
    let src = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(src.join("package")).unwrap();
    std::fs::write(src.join("package/package.json"), package_json).unwrap();
    std::fs::write(src.join("package/index.js"), "module.exports = 1;\n").unwrap();
    let tgz = dir.join(format!("{name}-1.0.0.tgz"));
    run_in(&src, "tar", &["czf", tgz.to_str().unwrap(), "package"]);
    std::fs::remove_dir_all(&src).unwrap();
}

/// (j) Issue 35: npm's local work is one family — `npm init -y` taught once, an inert manifest
/// edit applies unasked; a local tarball's `file:` dependency asks (issue 48); a tarball whose
/// install script writes elsewhere asks and nothing is applied; a global or registry install
/// asks up front.
#[test]
fn npm_init_taught_once_lets_local_installs_apply_and_nothing_else() {
    let (env, _d) = setup(None);
    let ws = env.workspace.clone();
    std::fs::create_dir_all(ws.join("vendor")).unwrap();
    std::fs::create_dir_all(ws.join("proj")).unwrap();
    npm_tarball(
        &ws.join("vendor"),
        "good",
        r#"{"name":"good","version":"1.0.0","main":"index.js"}"#,
    );
    npm_tarball(
        &ws.join("vendor"),
        "evil",
        r#"{"name":"evil","version":"1.0.0","scripts":{"postinstall":"echo x > \"$INIT_CWD/planted.js\""}}"#,
    );
    let (id, st, v, err) = submit(&env, "cd proj && npm init -y > /dev/null");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("npm's scripts, tools and manifest"),
        "{v}"
    );
    cli_ok(&env, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert!(ws.join("proj/package.json").exists());
    // A local tarball is a `file:` dependency: the manifest key asks (issue 48: what a `file:`
    // spec installs runs its lifecycle scripts on the operator's next `npm install`).
    let (id, v) = asks(
        &env,
        "cd proj && npm install --no-audit --no-fund ../vendor/good-1.0.0.tgz",
        "(rule **/package.json (npm, key by key): changes dependencies.good",
    );
    assert!(!ws.join("proj/node_modules/good").exists());
    cli_ok(&env, &["approve", &common::vid(&v)]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert!(ws.join("proj/node_modules/good/index.js").exists());
    let manifest = read(&ws.join("proj/package.json")).unwrap_or_default();
    assert!(manifest.contains("good"), "{manifest}");
    // an inert edit of the manifest still applies unasked under the family
    unasked(&env, "cd proj && npm pkg set description=kept");
    asks(
        &env,
        "cd proj && npm install --no-audit --no-fund ../vendor/evil-1.0.0.tgz",
        "adds proj/planted.js",
    );
    assert!(!ws.join("proj/planted.js").exists() && !ws.join("proj/node_modules/evil").exists());
    for cmd in [
        "cd proj && npm install -g ../vendor/good-1.0.0.tgz",
        "cd proj && npm install left-pad",
    ] {
        let (_, st, v, _) = submit(&env, cmd);
        assert_eq!(st, "pending_validation", "{cmd}: {v}");
        assert!(
            !v["reasons"].to_string().contains("ran on an overlay"),
            "{cmd} is asked up front: {v}"
        );
    }
}
