//! Effects over commands (issue 14, DESIGN §5.12) through the real daemon: commands whose writes
//! stay in the workspace run on an overlay; the human approves the change set (a diff), which is
//! then applied exactly (or refused on conflict), journaled and undoable; operation signatures
//! are learned after 5 approvals (never for network ones). Everything touches only temp dirs.

mod common;

use common::{cli_ok, final_result, job, settled, submit, Env};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn sandbox_enforcing() -> bool {
    let out = std::process::Command::new(common::BIN)
        .args(["sandbox", "--json"])
        .output()
        .unwrap();
    out.status.success()
}

/// Every file under `root`: relative path → (bytes, mode); directories as empty entries.
fn snapshot(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Vec<u8>, u32)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                out.insert(format!("{rel}/"), (vec![], md.permissions().mode()));
                walk(root, &p, out);
            } else {
                out.insert(rel, (std::fs::read(&p).unwrap(), md.permissions().mode()));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn setup() -> Option<(Env, common::Daemon)> {
    // Never a silent skip: without an enforcing sandbox there is no overlay; fail, naming why.
    assert!(
        sandbox_enforcing(),
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine; run `brainloop sandbox`"
    );
    let env = Env::new();
    std::fs::write(
        env.workspace.join("a.txt"),
        "line one\nline two\nline three\n",
    )
    .unwrap();
    std::fs::create_dir(env.workspace.join("src")).unwrap();
    std::fs::write(env.workspace.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(env.workspace.join("old.txt"), "to be deleted\n").unwrap();
    let d = env.start(&[]);
    Some((env, d))
}

#[test]
fn an_applied_edit_equals_the_shown_diff_and_undo_restores_exactly() {
    let Some((env, _d)) = setup() else { return };
    let before = snapshot(&env.workspace);
    let cmd = "sed -i 's/two/TWO/' a.txt && echo 'pub fn x() {}' >> src/lib.rs && rm old.txt && mkdir -p docs && printf 'new\\n' > docs/n.md";
    let (id, st, v, _) = submit(&env, cmd);
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(
        snapshot(&env.workspace),
        before,
        "nothing touched before approval"
    );
    let vid = v["validation_id"].as_str().unwrap().to_string();
    assert_eq!(v["effects"]["added"], 2, "{v}");
    assert_eq!(v["effects"]["modified"], 2, "{v}");
    assert_eq!(v["effects"]["deleted"], 1, "{v}");
    let shown = cli_ok(&env, &["show", &vid]);
    assert!(shown.contains("-line two\n+line TWO"), "{shown}");
    assert!(shown.contains("+pub fn x() {}"), "{shown}");
    assert!(shown.contains("-to be deleted"), "{shown}");
    let listing = cli_ok(&env, &["validations"]);
    assert!(
        listing.contains("2 added, 2 modified, 1 deleted"),
        "{listing}"
    );
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "approved");
    // The applied workspace is exactly what the shown diff describes.
    let after = snapshot(&env.workspace);
    let a = String::from_utf8(after["a.txt"].0.clone()).unwrap();
    let expected_diff = similar::TextDiff::from_lines("line one\nline two\nline three\n", &a)
        .unified_diff()
        .context_radius(3)
        .header("a/a.txt", "b/a.txt")
        .to_string();
    assert!(
        shown.contains(&expected_diff),
        "shown:\n{shown}\nexpected:\n{expected_diff}"
    );
    assert_eq!(a, "line one\nline TWO\nline three\n");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("src/lib.rs")).unwrap(),
        "fn main() {}\npub fn x() {}\n"
    );
    assert!(!env.workspace.join("old.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("docs/n.md")).unwrap(),
        "new\n"
    );
    // Nothing ran twice: one execution in the registry.
    let runs: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT execution_count FROM commands_registry WHERE command_text = ?1",
            [cmd],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 1);
    // undo restores byte for byte.
    let out = cli_ok(&env, &["undo", &id.to_string()]);
    assert!(out.contains("restored"), "{out}");
    assert_eq!(snapshot(&env.workspace), before);
    let (st, _, err) = env.cli(&["undo", &id.to_string()]);
    assert!(!st.success() && err.contains("already undone"), "{err}");
}

#[test]
fn deny_leaves_the_workspace_byte_identical() {
    let Some((env, _d)) = setup() else { return };
    let before = snapshot(&env.workspace);
    let (id, st, v, _) = submit(
        &env,
        "rm -r src && chmod 600 a.txt && echo x > a.txt && touch z.txt",
    );
    assert_eq!(st, "pending_validation", "{v}");
    cli_ok(&env, &["deny", v["validation_id"].as_str().unwrap()]);
    let (st, _, _) = final_result(&env, id);
    assert_eq!(st, "denied");
    assert_eq!(snapshot(&env.workspace), before);
    // The discarded change set is gone from the data dir.
    let t0 = Instant::now();
    while env.data.join("changes").join(id.to_string()).exists() {
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_conflicting_edit_refuses_the_apply_and_a_later_edit_refuses_undo() {
    let Some((env, _d)) = setup() else { return };
    let (id, st, v, _) = submit(&env, "sed -i 's/one/ONE/' a.txt");
    assert_eq!(st, "pending_validation", "{v}");
    // Someone edits the file after the run, before the approval.
    std::fs::write(env.workspace.join("a.txt"), "edited by a human\n").unwrap();
    cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "failed", "{v}");
    assert!(err.contains("conflict") && err.contains("a.txt"), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "edited by a human\n"
    );

    // Undo refuses when a later change touched the same path.
    let (id, st, v, _) = submit(&env, "sed -i 's/human/robot/' a.txt");
    assert_eq!(st, "pending_validation", "{v}");
    cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    std::fs::write(env.workspace.join("a.txt"), "later\n").unwrap();
    let (st, _, err) = env.cli(&["undo", &id.to_string()]);
    assert!(!st.success() && err.contains("conflict"), "{err}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "later\n"
    );
}

#[test]
fn signatures_are_learned_after_5_approvals_but_never_for_network() {
    let Some((env, _d)) = setup() else { return };
    for i in 0..5 {
        let (id, st, v, _) = submit(&env, &format!("sed -i 's/$/ x{i}/' a.txt"));
        assert_eq!(st, "pending_validation", "approval {i}: {v}");
        cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
        assert_eq!(final_result(&env, id).0, "succeeded");
    }
    let sigs = cli_ok(&env, &["signatures"]);
    assert!(
        sigs.contains("learned") && sigs.contains("sed -i EXPR WS_PATH"),
        "{sigs}"
    );
    // A new expression on another file: same signature, applied without a human, undoable.
    let (id, st, v, err) = submit(&env, "sed -i 's/fn/FN/' src/lib.rs");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "signature_learned");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("src/lib.rs")).unwrap(),
        "FN main() {}\n"
    );
    cli_ok(&env, &["undo", &id.to_string()]);
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("src/lib.rs")).unwrap(),
        "fn main() {}\n"
    );
    // Another family (a move, not a write of a named file) still asks.
    let (_, st, _, _) = submit(&env, "mv a.txt b.txt");
    assert_eq!(st, "pending_validation");

    // Network: asked up front every time, approvals never make it learned. (The host is granted
    // so that the approved run ends instead of asking about the refused host, issue 23.)
    cli_ok(&env, &["grant", "local", "NETWORK", "127.0.0.1:9"]);
    for i in 0..6 {
        let (id, st, v, _) = submit(
            &env,
            &format!("curl -s -m 1 http://127.0.0.1:9/x{i} -o /dev/null"),
        );
        assert_eq!(st, "pending_validation", "network attempt {i}: {v}");
        assert!(v.get("effects").is_none(), "asked up front: {v}");
        cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
        final_result(&env, id);
    }
    let (_, st, _, _) = submit(&env, "curl -s -m 1 http://127.0.0.1:9/again -o /dev/null");
    assert_eq!(st, "pending_validation");
    let sigs = cli_ok(&env, &["signatures", "--json"]);
    let rows: Value = serde_json::from_str(&sigs).unwrap();
    let curl = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"].as_str().unwrap().starts_with("curl"))
        .unwrap_or_else(|| panic!("{sigs}"));
    assert_eq!(curl["learnable"], false, "{curl}");
    assert_eq!(curl["approvals"], 0, "{curl}");
    assert!(
        curl["state"].as_str().unwrap().contains("network"),
        "{curl}"
    );

    // `override` on a signature: never denies any command containing it.
    let sed_id = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == "sed -i EXPR WS_PATH")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    cli_ok(&env, &["override", &format!("sig:{sed_id}"), "never"]);
    let (_, st, _, err) = submit(&env, "sed -i 's/a/b/' a.txt");
    assert_eq!(st, "denied", "{err}");
    assert!(err.contains("sed -i EXPR WS_PATH"), "{err}");
}

#[test]
fn writes_outside_the_workspace_through_the_overlay_fail() {
    let Some((env, _d)) = setup() else { return };
    let outside = env.root.path().join("escaped.txt");
    let before = snapshot(&env.workspace);
    // The classifier cannot follow `cd ..` nor a symlink made by the command itself, so these
    // reach the overlay; the sandbox stops the writes there.
    let (id, st, v, _) = submit(&env, "cd .. && touch escaped.txt");
    assert_ne!(st, "succeeded", "{v}");
    assert!(!outside.exists());
    let (st2, v2, _) = if st == "pending_validation" {
        cli_ok(&env, &["deny", v["validation_id"].as_str().unwrap()]);
        final_result(&env, id)
    } else {
        (st, v, String::new())
    };
    assert!(st2 == "failed" || st2 == "denied", "{st2} {v2}");
    let (id, st, v, _) = submit(
        &env,
        &format!(
            "ln -s {} out && echo x > out/escaped.txt",
            env.root.path().display()
        ),
    );
    assert!(!outside.exists(), "{v}");
    assert!(
        v["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("Permission denied")
            || v["stderr"]
                .as_str()
                .unwrap_or("")
                .contains("Operation not permitted"),
        "{v}"
    );
    if st == "pending_validation" {
        cli_ok(&env, &["deny", v["validation_id"].as_str().unwrap()]);
        final_result(&env, id);
    }
    assert_eq!(snapshot(&env.workspace), before);
}

/// The state a crash leaves in lifecycle.db: job `id`'s progress row says `status`.
fn set_lifecycle(env: &Env, id: i64, status: &str) {
    env.lifecycle()
        .execute(
            "UPDATE processed_log SET status = ?2 WHERE job_id = ?1",
            rusqlite::params![id, status],
        )
        .unwrap();
}

#[test]
fn a_crash_between_run_and_apply_loses_nothing() {
    let Some((env, d)) = setup() else { return };
    let (id, st, v, _) = submit(&env, "sed -i 's/three/3/' a.txt && touch made.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    d.kill9();
    let _d = env.start(&[]);
    // Still waiting, with its change set.
    let shown = cli_ok(&env, &["show", &vid]);
    assert!(shown.contains("-line three\n+line 3"), "{shown}");
    assert_eq!(settled(&env, id).0, "pending_validation");
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "approved");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "line one\nline two\nline 3\n"
    );
    assert!(env.workspace.join("made.txt").exists());
}

/// The crash cut the result writer between its two commits: the results row says the job waits
/// for its validation, the lifecycle row still says it runs. It keeps waiting on the same
/// validation and change set (CI caught this window: the job ran again and left its first
/// validation pending with no change set).
#[test]
fn a_crash_between_the_result_and_the_lifecycle_commit_keeps_the_job_waiting() {
    let Some((env, d)) = setup() else { return };
    let (id, st, v, _) = submit(&env, "sed -i 's/three/3/' a.txt && touch made.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    d.kill9();
    set_lifecycle(&env, id, "running");
    let _d = env.start(&[]);
    let shown = cli_ok(&env, &["show", &vid]);
    assert!(shown.contains("-line three\n+line 3"), "{shown}");
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(v["validation_id"], vid.as_str(), "the same validation: {v}");
    assert_eq!(common::validations_count(&env, id), 1);
    let lc: String = env
        .lifecycle()
        .query_row(
            "SELECT status FROM processed_log WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(lc, "pending_validation");
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert!(env.workspace.join("made.txt").exists());
}

/// The crash came after the validation was created but before the job's result said so: the
/// job runs again and asks anew, and the first validation is expired, never left pending.
#[test]
fn a_crash_before_the_pending_result_expires_the_validation_and_asks_anew() {
    let Some((env, d)) = setup() else { return };
    let (id, st, v, _) = submit(&env, "sed -i 's/three/3/' a.txt && touch made.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let first = v["validation_id"].as_str().unwrap().to_string();
    d.kill9();
    env.output()
        .execute(
            "UPDATE results SET status = 'running', result = NULL WHERE job_id = ?1",
            [id],
        )
        .unwrap();
    set_lifecycle(&env, id, "running");
    let _d = env.start(&[]);
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{v}");
    let second = v["validation_id"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    let status_of = |vid: &str| -> String {
        env.output()
            .query_row("SELECT status FROM validations WHERE id = ?1", [vid], |r| {
                r.get(0)
            })
            .unwrap()
    };
    assert_eq!(status_of(&first), "expired");
    assert_eq!(status_of(&second), "pending");
    assert!(cli_ok(&env, &["show", &second]).contains("+line 3"));
    cli_ok(&env, &["approve", &second]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "line one\nline two\nline 3\n"
    );
}

#[test]
fn an_approval_cut_off_before_the_apply_asks_again_then_applies_without_rerunning() {
    let Some((env, d)) = setup() else { return };
    let (id, st, v, _) = submit(&env, "echo appended >> a.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    d.kill9();
    // The state a crash leaves right after the approval was consumed, before the apply.
    env.output()
        .execute(
            "UPDATE validations SET status = 'approved', decided_at = 1 WHERE id = ?1",
            [&vid],
        )
        .unwrap();
    set_lifecycle(&env, id, "claimed");
    let _d = env.start(&[]);
    let (st, v, _) = settled(&env, id);
    assert_eq!(st, "pending_validation", "asked again: {v}");
    let second = v["validation_id"].as_str().unwrap().to_string();
    assert_ne!(second, vid);
    assert!(cli_ok(&env, &["show", &second]).contains("+appended"));
    cli_ok(&env, &["approve", &second]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "line one\nline two\nline three\nappended\n"
    );
    let runs: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT execution_count FROM commands_registry WHERE command_text = 'echo appended >> a.txt'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 1, "the command ran once, on the overlay");
}

#[test]
fn a_replaced_directory_is_applied_and_undone_exactly() {
    let Some((env, _d)) = setup() else { return };
    let before = snapshot(&env.workspace);
    // `rm -r src && mkdir src` makes an opaque directory in the overlay's upper layer.
    let (id, st, v, _) = submit(&env, "rm -r src && mkdir src && echo n > src/new.rs");
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(v["effects"]["deleted"], 1, "{v}");
    assert_eq!(v["effects"]["added"], 1, "{v}");
    cli_ok(
        &env,
        &["approve", "--always", v["validation_id"].as_str().unwrap()],
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "approved", "applied, not re-run: {v}");
    assert!(!env.workspace.join("src/lib.rs").exists());
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("src/new.rs")).unwrap(),
        "n\n"
    );
    cli_ok(&env, &["undo", &id.to_string()]);
    assert_eq!(snapshot(&env.workspace), before);
}

#[test]
fn a_command_with_no_effect_returns_at_once() {
    let Some((env, _d)) = setup() else { return };
    // A write-class command that changes nothing: nobody is asked.
    let (_, st, v, err) = submit(&env, "sed -i 's/absent/x/' a.txt");
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "overlay_no_changes");
    let n: i64 = env
        .output()
        .query_row("SELECT count(*) FROM validations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

/// Regression (found by `scripts/soak.sh`): a kill -9 after the apply but before the job's
/// result was committed. The change set used to be discarded right after the apply, so the
/// approved re-ask found no manifest, re-ran the command on the already-changed workspace and
/// applied its effect a second time (`run` twice in the counter).
#[test]
fn a_crash_between_the_apply_and_the_result_applies_once() {
    if !sandbox_enforcing() {
        return;
    }
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS", "60000")]);
    let (id, st, v, _) = submit(&env, "echo run >> counter.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let first = v["validation_id"].as_str().unwrap().to_string();
    cli_ok(&env, &["approve", &first]);
    // Applied and journaled; the job is held before its result (test hook).
    let t0 = Instant::now();
    loop {
        let journaled: i64 = env
            .db("command_security.db")
            .query_row(
                "SELECT count(*) FROM journal WHERE job_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        if journaled == 1 {
            break;
        }
        assert!(
            t0.elapsed() < LONG,
            "the approved change set was never applied"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("counter.txt")).unwrap(),
        "run\n"
    );
    assert_ne!(
        env.result(id).unwrap().0,
        "succeeded",
        "result not yet committed"
    );
    d.kill9();
    let _d = env.start(&[]);
    // The operator approves whatever the job asks again.
    let mut approved = std::collections::HashSet::from([first]);
    let t0 = Instant::now();
    let (st, v, err) = loop {
        let (st, v, e) = settled(&env, id);
        if st != "pending_validation" {
            break (st, v, e);
        }
        let vid = v["validation_id"].as_str().unwrap_or_default().to_string();
        if !vid.is_empty() && approved.insert(vid.clone()) {
            cli_ok(&env, &["approve", &vid]);
        }
        assert!(t0.elapsed() < LONG, "job {id} still pending: {v}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("counter.txt")).unwrap(),
        "run\n",
        "the approved effect must be applied exactly once"
    );
}

/// Regression (found by `scripts/soak.sh`): a kill -9 after a job's overlay run was recorded but
/// before it asked. The retry at the next start was refused `duplicate_warning` ("the same command
/// was asked 1.4 s ago; nothing ran") — a duplicate of its own first attempt — a final status
/// for a job that never got its answer.
#[test]
fn a_retry_after_a_crash_is_not_a_duplicate_of_itself() {
    if !sandbox_enforcing() {
        return;
    }
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_TEST_PAUSE_AFTER_RUN_MS", "60000")]);
    let id = job(
        &env,
        "local",
        "execute_bash",
        &json!({"command": "echo run >> retried.txt"}),
    );
    // Its overlay run is recorded; the job is held before it asks (test hook).
    let t0 = Instant::now();
    loop {
        let ran: i64 = env
            .db("command_security.db")
            .query_row(
                "SELECT count(*) FROM executions WHERE job_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        if ran == 1 {
            break;
        }
        assert!(t0.elapsed() < LONG, "the command never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    // However long the restart takes, the retry falls inside the duplicate window.
    env.db("command_security.db")
        .execute(
            "UPDATE commands_registry SET duplicate_threshold_ms = 3600000",
            [],
        )
        .unwrap();
    d.kill9();
    let _d = env.start(&[]);
    let (st, v, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(&env, &["approve", v["validation_id"].as_str().unwrap()]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("retried.txt")).unwrap(),
        "run\n"
    );
    // Another job with the same command is still a duplicate (the window is an hour here).
    let (_, st, v, _) = submit(&env, "echo run >> retried.txt");
    assert_eq!(st, "duplicate_warning", "{v}");
}
