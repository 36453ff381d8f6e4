//! Issue 19 item 2 (follow-up): plain read-only git works in the readonly set with git's
//! configuration neutralised. The real worker runs the agent's `git diff` / `git log -p` /
//! `git show` at once (readonly set, no human) in a plain repository and in one whose
//! `.gitattributes` and `.git/config` name a textconv driver: each command succeeds and shows
//! the diff of the stored bytes, and the configured program never runs. A repository that names
//! an external diff (`diff.external`) makes `git diff` fail closed (it would need temp files
//! for that program; it runs nothing), while `git log -p` still works.

mod common;

use common::{job, require_sandbox, settled, Env};
use serde_json::json;
use std::path::Path;

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("CANNOT RUN HERE: this test needs git");
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

/// A repository with two commits and a worktree change to a.bin and t.txt.
fn repo(dir: &Path, config: &str) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    std::fs::write(dir.join("a.bin"), "AAAA\n").unwrap();
    std::fs::write(dir.join("t.txt"), "hello\n").unwrap();
    if !config.is_empty() {
        std::fs::write(
            dir.join(".gitattributes"),
            "*.bin diff=hex\n*.txt diff=hex\n",
        )
        .unwrap();
        let cfg = dir.join(".git/config");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(config);
        std::fs::write(&cfg, text).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "one"]);
    std::fs::write(dir.join("a.bin"), "BBBB\n").unwrap();
    std::fs::write(dir.join("t.txt"), "world\n").unwrap();
    git(dir, &["commit", "-qam", "two"]);
    std::fs::write(dir.join("a.bin"), "CCCC\n").unwrap();
}

fn run(env: &Env, workdir: &str, cmd: &str) -> (String, serde_json::Value) {
    let id = job(
        env,
        "local",
        "execute_bash",
        &json!({"command": cmd, "workdir": workdir}),
    );
    let (status, result, error) = settled(env, id);
    (format!("{status} {error}"), result)
}

#[test]
fn plain_git_diff_log_and_show_work_in_the_readonly_set_and_run_no_configured_program() {
    require_sandbox();
    let env = Env::new();
    repo(&env.workspace.join("plain"), "");
    repo(
        &env.workspace.join("textconv"),
        "[diff \"hex\"]\n\ttextconv = \"echo RAN-TEXTCONV >&2; od -c\"\n",
    );
    repo(
        &env.workspace.join("external"),
        "[diff]\n\texternal = \"echo RAN-EXTERNAL >&2\"\n",
    );
    let _d = env.start(&[]);
    // (command, what its output must show)
    let cases: &[(&str, &[&str])] = &[
        ("git diff", &["-BBBB", "+CCCC"]),
        ("git diff HEAD~1", &["-AAAA", "+CCCC", "-hello", "+world"]),
        ("git log -p", &["-AAAA", "+BBBB", "-hello", "+world"]),
        ("git show HEAD", &["-AAAA", "+BBBB"]),
        ("git diff --stat", &["a.bin"]),
    ];
    for repo in ["plain", "textconv"] {
        for (cmd, want) in cases {
            let (status, r) = run(&env, repo, cmd);
            let out = format!("{}{}", r["stdout"].as_str().unwrap_or(""), r["stderr"]);
            assert!(
                status.starts_with("succeeded") && r["exit_code"] == 0,
                "{repo}: `{cmd}`: {status} {r}"
            );
            assert_eq!(
                r["permission_set"], "readonly",
                "{repo}: `{cmd}` ran in the readonly set"
            );
            for w in *want {
                assert!(out.contains(w), "{repo}: `{cmd}` must show {w:?}: {out}");
            }
            assert!(
                !out.contains("RAN-"),
                "{repo}: `{cmd}` ran a configured program: {out}"
            );
        }
    }

    // diff.external: `git diff` fails closed, running nothing; `git log -p` works.
    let (status, r) = run(&env, "external", "git diff");
    let out = format!("{}{}", r["stdout"].as_str().unwrap_or(""), r["stderr"]);
    assert!(
        r["exit_code"] != 0 && !out.contains("RAN-"),
        "external: `git diff`: {status} {r}"
    );
    let (status, r) = run(&env, "external", "git log -p");
    let out = format!("{}{}", r["stdout"].as_str().unwrap_or(""), r["stderr"]);
    assert!(
        status.starts_with("succeeded") && out.contains("+BBBB") && !out.contains("RAN-"),
        "external: `git log -p`: {status} {r}"
    );
}
