//! Rules a human can read and check (issue 35), through the real binary and the real git:
//! signatures learned with `approve --learn` on real jobs and validations, then
//!
//! - `signatures --explain` says what each matches, shows the approved example it was learned
//!   from, and variants of it it matches and refuses, each decided by the classifier and the apply
//!   rules (a learned redirect, `sed -i EXPR WS_PATH`, `git add WS_PATH...`, `git commit -m MSG`);
//! - a human denial of a command carrying a learned signature retires it for that client at once
//!   (the `deny` output and `signatures` say so, the next command of it asks, `--learn` is refused
//!   until `override sig:N clear`); a reviewer's denial retires nothing;
//! - the approved examples are checked when the rules load: one that no longer signs as its
//!   signature (simulated by editing the stored example with a separate connection, as a
//!   classifier change would) suspends it at the next start, and `status`, `signatures` and
//!   `--explain` say so; once it signs the same again, it applies again.
//!
//! Canary files in temp dirs only; nothing leaves 127.0.0.1.

mod common;

use common::{cli_ok, final_result, submit, Env};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A workspace with files to edit and the operator's repository (one commit).
fn workspace(env: &Env) {
    let ws = &env.workspace;
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("b.txt"), "b\n").unwrap();
    std::fs::write(ws.join("c.txt"), "c\n").unwrap();
    std::fs::write(ws.join("other.txt"), "TODO\n").unwrap();
    git(ws, &["init", "-q", "-b", "main"]);
    git(ws, &["config", "user.name", "Operator"]);
    git(ws, &["config", "user.email", "operator@example.invalid"]);
    git(ws, &["add", "a.txt"]);
    git(ws, &["commit", "-q", "-m", "first"]);
}

/// One `approve --learn` answer: `cmd`'s signature `sig` is learned. The job id.
fn learn(env: &Env, cmd: &str, sig: &str) -> i64 {
    learn_as(env, "local", cmd, sig)
}

/// `learn` for `client`.
fn learn_as(env: &Env, client: &str, cmd: &str, sig: &str) -> i64 {
    let (id, st, v, err) = common::submit_as(env, client, cmd);
    assert_eq!(st, "pending_validation", "{cmd}: {err} {v}");
    let out = cli_ok(
        env,
        &["approve", v["validation_id"].as_str().unwrap(), "--learn"],
    );
    assert!(out.contains(sig), "{cmd}: {out}");
    assert_eq!(final_result(env, id).0, "succeeded", "{cmd}");
    id
}

fn explain(env: &Env, sig: &str) -> Value {
    let out = cli_ok(env, &["signatures", "--explain", sig, "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    v[0].clone()
}

/// The variant whose change starts with `change`.
fn variant<'a>(e: &'a Value, change: &str) -> &'a Value {
    e["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["change"].as_str().unwrap().starts_with(change))
        .unwrap_or_else(|| panic!("no variant {change:?}: {e:#}"))
}

/// The variant `change` has `outcome`, its reason saying `why`.
fn decided(e: &Value, change: &str, outcome: &str, why: &str) {
    let v = variant(e, change);
    assert_eq!(v["outcome"], outcome, "{change}: {v:#}");
    assert!(
        v["reason"].as_str().unwrap().contains(why),
        "{change}: the reason should say {why:?}: {v:#}"
    );
}

fn example_of(e: &Value, job: i64, cmd: &str) {
    let ex = &e["examples"][0];
    assert_eq!(ex["job_id"], job, "{e:#}");
    assert_eq!(ex["command"], cmd, "{e:#}");
    assert_eq!(ex["learn"], true, "{e:#}");
    assert!(ex["decided_by"].as_str().unwrap().starts_with("operator:"));
    assert!(ex["mismatch"].is_null(), "{e:#}");
    assert!(!ex["validation_id"].as_str().unwrap().is_empty(), "{e:#}");
}

#[test]
fn explain_shows_a_learned_redirect_sed_and_git_signature_with_examples_decided_by_the_rules() {
    common::require_sandbox();
    let env = Env::new();
    workspace(&env);
    // A second client learns the sed signature: for `local`, the learned redirect covers it
    // (`bash::coverage`: any content to a named file), so it would never be asked there.
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        "[clients.agent2]\nsystem_command = [\"*\"]\nfile_read = [\"{workspace}/**\"]\n",
    )
    .unwrap();
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())]);
    let j_redirect = learn(&env, "echo hi > notes.txt", "redirect:write WS_PATH");
    let j_sed = learn_as(
        &env,
        "agent2",
        "sed -i 's/one/ONE/' a.txt",
        "sed -i EXPR WS_PATH",
    );
    let j_add = learn(&env, "git add b.txt c.txt", "git add WS_PATH...");
    // (for `local` the commit is of the family `git add` taught: agent2 teaches it, alone)
    let j_commit = learn_as(
        &env,
        "agent2",
        "git commit -m 'second commit'",
        "git commit -m MSG",
    );

    // > WS_PATH
    let e = explain(&env, "redirect:write WS_PATH");
    assert!(
        e["matches"]
            .as_str()
            .unwrap()
            .contains("a path inside the workspace"),
        "{e:#}"
    );
    assert_eq!(e["state"], "learned for local", "{e:#}");
    example_of(&e, j_redirect, "echo hi > notes.txt");
    decided(
        &e,
        "the approved change set itself",
        "matches",
        "writes notes.txt",
    );
    decided(
        &e,
        "another file inside the workspace (other.txt)",
        "matches",
        "signs as `redirect:write WS_PATH`",
    );
    assert_eq!(
        variant(&e, "another file inside the workspace")["command"],
        "echo hi > other.txt"
    );
    decided(
        &e,
        "a file outside the workspace (/tmp/notes.txt)",
        "refused",
        "signs as `redirect:write PATH(/tmp/notes.txt)`, another signature — never learned: writes outside the workspace",
    );
    decided(
        &e,
        "a protected dot-file (.envrc)",
        "refused",
        "protected path .envrc",
    );
    decided(
        &e,
        "a git hook (.git/hooks/post-checkout)",
        "refused",
        "protected path .git/hooks/post-checkout",
    );
    decided(
        &e,
        "its change set also adds a file the command does not name",
        "refused",
        "adds unnamed.txt, which the command does not name",
    );

    // sed -i EXPR WS_PATH
    let e = explain(&env, "sed -i EXPR WS_PATH");
    let words = e["matches"].as_str().unwrap();
    assert!(
        words.contains("exactly the flag -i")
            && words.contains("a sed script that only edits its operands (no w/W/r/R/e"),
        "{words}"
    );
    example_of(&e, j_sed, "sed -i 's/one/ONE/' a.txt");
    decided(
        &e,
        "another path inside the workspace (other.txt)",
        "matches",
        "a learned signature applies",
    );
    decided(
        &e,
        "another sed script",
        "matches",
        "signs as `sed -i EXPR WS_PATH`",
    );
    decided(
        &e,
        "a sed script that also writes out.txt",
        "refused",
        "signs as `sed -i EXPR WS_PATH [writes or runs elsewhere]`, another signature — never learned: script construct",
    );
    decided(
        &e,
        "a path outside the workspace (/tmp/a.txt)",
        "refused",
        "PATH(/tmp/a.txt)",
    );
    decided(
        &e,
        "an added flag (-E)",
        "matches",
        "which `sed -i EXPR WS_PATH` covers (both of the family \"write named workspace files\")",
    );
    decided(&e, "without the flag -i", "not_needed", "needs no approval");

    // git add WS_PATH...
    let e = explain(&env, "git add WS_PATH...");
    assert!(
        e["matches"]
            .as_str()
            .unwrap()
            .contains("the subcommand `add`, then one or more paths inside the workspace"),
        "{e:#}"
    );
    example_of(&e, j_add, "git add b.txt c.txt");
    decided(
        &e,
        "the approved change set itself",
        "matches",
        "applies it",
    );
    decided(
        &e,
        "another path inside the workspace",
        "matches",
        "signs as `git add WS_PATH...`",
    );
    decided(
        &e,
        "an added flag (--force)",
        "refused",
        "signs as `git add --force WS_PATH...`",
    );
    decided(
        &e,
        "its change set also adds .git/hooks/pre-commit",
        "refused",
        "protected path .git/hooks/pre-commit",
    );

    // git commit -m MSG
    let e = explain(&env, "git commit -m MSG");
    assert!(
        e["matches"].as_str().unwrap().contains("any message"),
        "{e:#}"
    );
    example_of(&e, j_commit, "git commit -m 'second commit'");
    decided(
        &e,
        "the approved change set itself",
        "matches",
        "applies it",
    );
    decided(
        &e,
        "another message",
        "matches",
        "signs as `git commit -m MSG`",
    );
    decided(
        &e,
        "an added flag (--amend)",
        "refused",
        "signs as `git commit --amend -m MSG`",
    );
    decided(
        &e,
        "its change set also adds .git/hooks/pre-commit",
        "refused",
        "touches a protected path .git/hooks/pre-commit",
    );

    // The text form: every learned signature, in words, with its examples and variants.
    let text = cli_ok(&env, &["signatures", "--explain"]);
    if std::env::var("SHOW_EXPLAIN").is_ok() {
        eprintln!("{text}");
    }
    for s in [
        "redirect:write WS_PATH",
        "sed -i EXPR WS_PATH",
        "git add WS_PATH...",
        "git commit -m MSG",
        "approved examples (re-signed with the current classifier):",
        "still signs as `sed -i EXPR WS_PATH`",
        "MATCHES  another sed script: sed -i s/TODO/DONE/g a.txt",
        "REFUSED  a path outside the workspace (/tmp/a.txt): sed -i s/one/ONE/ /tmp/a.txt",
        "learned with --learn by operator:",
    ] {
        assert!(text.contains(s), "--explain should say {s:?}:\n{text}");
    }
    // What the variants say is what the rules do: the "matched" ones apply without a human.
    let (_, st, v, err) = submit(&env, "sed -i s/TODO/DONE/g other.txt");
    assert_eq!(st, "succeeded", "{err} {v}");
    let (_, st, v, _) = common::submit_as(&env, "agent2", "sed -E -i s/two/TWO/ a.txt");
    assert_eq!(st, "succeeded", "a neutral flag is covered: {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    // ... and what `sed`'s family (writing named files) does not cover still asks for agent2
    let (_, st, v, _) = common::submit_as(&env, "agent2", "rm other.txt");
    assert_eq!(st, "pending_validation", "{v}");
}

fn signature_row(env: &Env, sig: &str) -> Value {
    let rows: Value = serde_json::from_str(&cli_ok(env, &["signatures", "--json"])).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == sig)
        .unwrap_or_else(|| panic!("{sig} not recorded: {rows}"))
        .clone()
}

#[test]
fn a_human_denial_retires_a_learned_signature_at_once_and_says_so() {
    common::require_sandbox();
    let env = Env::new();
    workspace(&env);
    let _d = env.start(&[]);
    learn(&env, "sed -i 's/one/ONE/' a.txt", "sed -i EXPR WS_PATH");
    let id = signature_row(&env, "sed -i EXPR WS_PATH")["id"]
        .as_i64()
        .unwrap();
    let (_, st, v, _) = submit(&env, "sed -i s/b/B/ b.txt");
    assert_eq!(st, "succeeded", "learned: {v}");

    // A command of it that still asks (a protected path), denied by the human.
    std::fs::write(env.workspace.join(".envrc"), "export X=1\n").unwrap();
    let (job, st, v, _) = submit(&env, "sed -i s/X/Y/ .envrc");
    assert_eq!(st, "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    let out = cli_ok(&env, &["deny", &vid]);
    assert!(
        out.contains(&format!(
            "retired signature sig:{id} `sed -i EXPR WS_PATH` for client local"
        )),
        "{out}"
    );
    assert_eq!(final_result(&env, job).0, "denied");

    // Recorded: when, which job and validation, by whom; the listing says retired.
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert_eq!(row["state"], "retired for local (denied)", "{row}");
    let c = &row["clients"][0];
    assert_eq!(c["retired"], true, "{row}");
    assert_eq!(c["learned"], false, "{row}");
    assert_eq!(c["denied_job"], job, "{row}");
    assert_eq!(c["denied_validation"], vid.as_str(), "{row}");
    assert!(
        c["denied_by"].as_str().unwrap().starts_with("operator:"),
        "{row}"
    );
    let text = cli_ok(&env, &["signatures"]);
    assert!(
        text.contains("RETIRED: learned with --learn by operator:")
            && text.contains(&format!("denied validation {vid} (job {job})")),
        "{text}"
    );
    let text = cli_ok(&env, &["signatures", "--explain", &format!("sig:{id}")]);
    assert!(text.contains("RETIRED"), "{text}");

    // The next command of it asks; `--learn` is refused until the operator clears the denial.
    let (job2, st, v, _) = submit(&env, "sed -i s/c/C/ c.txt");
    assert_eq!(st, "pending_validation", "retired: it asks again: {v}");
    let vid2 = v["validation_id"].as_str().unwrap().to_string();
    let (ok, o, e) = env.cli(&["approve", &vid2, "--learn"]);
    assert!(!ok.success(), "{o}");
    assert!(e.contains("--learn never overrides a denial"), "{e}");
    cli_ok(&env, &["override", &format!("sig:{id}"), "clear"]);
    cli_ok(&env, &["approve", &vid2, "--learn"]);
    assert_eq!(final_result(&env, job2).0, "succeeded");
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert_eq!(row["state"], "learned for local", "re-taught: {row}");
    let (_, st, v, _) = submit(&env, "sed -i s/C/c/ c.txt");
    assert_eq!(st, "succeeded", "{v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
}

#[test]
fn a_reviewers_denial_is_not_a_human_denial_and_retires_nothing() {
    common::require_sandbox();
    let env = Env::new();
    workspace(&env);
    // Denies what touches .envrc, leaves the rest to the human.
    let dir = env.root.path().join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("review.sh");
    std::fs::write(
        &script,
        "if grep -q envrc; then echo 'deny not the env file'; else echo 'ask'; fi\n",
    )
    .unwrap();
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        format!(
            "[reviewer]\ncommand = \"bash {}\"\nread = [\"{}\"]\ntimeout_ms = 5000\nhosts = [\"127.0.0.1\"]\n",
            script.display(),
            dir.display()
        ),
    )
    .unwrap();
    let _d = env.start(&[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())]);
    learn(&env, "sed -i 's/one/ONE/' a.txt", "sed -i EXPR WS_PATH");
    std::fs::write(env.workspace.join(".envrc"), "export X=1\n").unwrap();
    let (job, _, _, _) = submit(&env, "sed -i s/X/Y/ .envrc");
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "denied", "the reviewer denied it: {e} {v}");
    assert!(e.contains("reviewer:"), "{e}");
    let row = signature_row(&env, "sed -i EXPR WS_PATH");
    assert_eq!(row["state"], "learned for local", "{row}");
    assert_eq!(row["clients"][0]["denials"], 0, "{row}");
    let (_, st, v, _) = submit(&env, "sed -i s/b/B/ b.txt");
    assert_eq!(st, "succeeded", "still learned: {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
}

#[test]
fn an_approved_example_that_no_longer_signs_the_same_suspends_its_signature_when_the_rules_load() {
    common::require_sandbox();
    let env = Env::new();
    workspace(&env);
    let d = env.start(&[]);
    let job = learn(&env, "echo hi > notes.txt", "redirect:write WS_PATH");
    let (_, st, v, _) = submit(&env, "echo one > one.txt");
    assert_eq!(st, "succeeded", "learned: {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    d.sigterm();
    let _ = d.wait_exit(Duration::from_secs(60));

    // As if the classifier changed: the approved example now signs differently.
    let sec = env.db("command_security.db");
    let n = sec
        .execute(
            "UPDATE signature_examples SET command = 'echo hi > ../outside.txt' WHERE job_id = ?1",
            [job],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(sec);
    let d = env.start(&[]);

    // Suspended at start: it asks, and every surface says why.
    let (_, st, v, _) = submit(&env, "echo two > two.txt");
    assert_eq!(st, "pending_validation", "suspended: it asks again: {v}");
    assert!(!env.workspace.join("two.txt").exists());
    let why = "the approved example `echo hi > ../outside.txt`";
    let row = signature_row(&env, "redirect:write WS_PATH");
    assert_eq!(row["state"], "suspended for local", "{row}");
    let s = row["clients"][0]["suspended"].as_str().unwrap();
    assert!(
        s.contains(why) && s.contains("now signs as `redirect:write PATH(../outside.txt)"),
        "{s}"
    );
    let (st, out, _) = env.cli(&["status"]);
    assert!(st.success(), "a suspension warns, it does not block: {out}");
    assert!(
        out.contains("WARNING signature") && out.contains(why),
        "{out}"
    );
    let text = cli_ok(&env, &["signatures"]);
    assert!(text.contains("SUSPENDED") && text.contains(why), "{text}");
    let text = cli_ok(&env, &["signatures", "--explain"]);
    assert!(text.contains(&format!("SUSPENDS IT: {why}")), "{text}");
    assert!(
        d.log_text().contains("learned signature suspended"),
        "the start-up logs it"
    );

    // Once the example signs the same again, `--explain` (the rules load) reinstates it.
    env.db("command_security.db")
        .execute(
            "UPDATE signature_examples SET command = 'echo hi > notes.txt' WHERE job_id = ?1",
            [job],
        )
        .unwrap();
    let e = explain(&env, "redirect:write WS_PATH");
    assert_eq!(e["state"], "learned for local", "{e:#}");
    let (_, st, v, _) = submit(&env, "echo three > three.txt");
    assert_eq!(st, "succeeded", "{v}");
    assert_eq!(v["policy_used"], "signature_learned", "{v}");

    // An example is agent text: shown escaped on the operator's terminal, never raw.
    env.db("command_security.db")
        .execute(
            "UPDATE signature_examples SET command = ?2 WHERE job_id = ?1",
            rusqlite::params![job, "echo hi > 'n\u{1b}]0;x\u{7}\u{1b}[31m.txt'"],
        )
        .unwrap();
    let text = cli_ok(&env, &["signatures", "--explain"]);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains(r"n\x1b]0;x\x07\x1b[31m.txt"), "{text}");
}
