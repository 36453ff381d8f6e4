//! Issue 54, through the real binary and the LLM mock: an action other than a command that
//! writes — `generate_file`, a new file and an overwrite — is one change set in the same store
//! as a command's overlay run. `show`, `validations` and the notify payload show its diff on
//! many lines (never `\x0a`-folded); `approve` applies exactly it, `history` lists it, `undo`
//! restores the previous bytes (the file gone for a new one) and refuses when a later change
//! touched the path; an auto FILE_WRITE grant applies it unasked as a change set `show` and
//! `undo` know. `show JOB` of a command that ran at once prints its command and output, `--json`
//! the whole story; `enqueue --wait` prints the diff on many lines. A kill -9 between the
//! apply and the job's result applies the file once, the result saying so (the same journal as
//! commands); one between the approval and the apply asks again, and a denial then writes
//! nothing. A loop commit's files are one change set, shown, applied and undone the same way.
//! Temp dirs only; nothing leaves 127.0.0.1.

mod common;

use common::collector::Collector;
use common::mock_llm::{MockLlm, Reply, Seen};
use common::{cli_ok, final_result, job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The generated file: several lines, `MARK:word` in the prompt shows up in it.
fn respond(req: &Seen) -> Reply {
    let mark = req
        .prompt()
        .split("MARK:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("generated")
        .to_string();
    Reply::text(&format!(
        "```python\nimport sys\n\ndef main():\n    print('{mark}')\n```"
    ))
}

/// [`respond`] for a loop block: asked with `response_format` (the default model takes
/// json_schema), the code comes as `{"code"}`.
fn respond_loop(req: &Seen) -> Reply {
    if req.prompt().contains("You write SQLite SQL") {
        return Reply::json(&json!({ "sql": SQL }));
    }
    if req.body["response_format"]["type"] == "json_schema" {
        let text = format!(
            "import sys\n\ndef main():\n    print('{}')\n",
            req.prompt()
                .split("MARK:")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("generated")
        );
        return Reply::json(&json!({ "code": text }));
    }
    respond(req)
}

/// What the model writes for `generate_sql`: one row added, one removed, on two lines.
const SQL: &str = "INSERT INTO t(a, b) VALUES (3, 'z');\nDELETE FROM t WHERE a = 1;";

fn content(mark: &str) -> String {
    format!("import sys\n\ndef main():\n    print('{mark}')\n")
}

fn config(env: &Env, notify: Option<&Collector>) -> String {
    let p = env.root.path().join("brainloop.toml");
    let mut cfg = String::from(
        "[clients.agent]\nfile_read = [\"{workspace}/**\"]\nfile_write_auto = [\"{workspace}/auto/**\"]\nllm = true\n",
    );
    if let Some(h) = notify {
        cfg = format!(
            "[notify]\ncommand = \"{}\"\ntimeout_ms = 10000\nhosts = [\"127.0.0.1\"]\n\n{cfg}",
            h.command().replace('"', "\\\"")
        );
    }
    std::fs::write(&p, cfg).unwrap();
    p.display().to_string()
}

fn gen(env: &Env, client: &str, params: Value) -> (i64, String, Value, String) {
    let id = job(env, client, "generate_file", &params);
    let (st, v, e) = settled(env, id);
    (id, st, v, e)
}

/// `show ID` prints the lines of `diff` one under the other, and no escaped newline.
fn assert_multiline(what: &str, text: &str, lines: &[&str]) {
    let joined = lines.join("\n");
    assert!(
        text.contains(&joined),
        "{what} shows the diff on many lines ({joined:?}):\n{text}"
    );
    assert!(!text.contains("\\x0a"), "{what} folds the diff:\n{text}");
}

/// `validations` (indented 4) and the notify payload's `text` (indented 2) show `lines` one
/// under the other; the payload's `change_set.diff` holds `in_diff`. The payload.
fn listed(env: &Env, hook: &Collector, id: i64, lines: &[&str], in_diff: &str) -> Value {
    let indent = |n: usize| -> Vec<String> {
        lines
            .iter()
            .map(|l| format!("{}{l}", " ".repeat(n)))
            .collect()
    };
    let listing = cli_ok(env, &["validations"]);
    let four = indent(4);
    assert_multiline(
        "validations",
        &listing,
        &four.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let note = hook.wait_matching(1, "the notify payload", |b| b["job_id"] == id);
    let two = indent(2);
    assert_multiline(
        "the notify text",
        note[0]["text"].as_str().unwrap(),
        &two.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(
        note[0]["change_set"]["diff"]
            .as_str()
            .unwrap()
            .contains(in_diff),
        "{}",
        note[0]
    );
    note[0].clone()
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

/// Long because it is one worker's story (one daemon for the file): a new file and an overwrite
/// asked, shown everywhere, applied, listed, undone (and refused); an auto grant's write; a
/// command that ran at once.
#[test]
fn generated_files_are_change_sets_shown_applied_listed_and_undone() {
    common::require_sandbox();
    let env = Env::new();
    let hook = Collector::start();
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, &config(&env, Some(&hook)), &mock, &[]);

    // A new file in a directory that does not exist yet.
    let (id, st, v, err) = gen(
        &env,
        "local",
        json!({"prompt": "A CLI. MARK:one", "output_path": "tools/cli.py", "code_type": "python"}),
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        read(&env, "tools/cli.py").is_none(),
        "nothing before approval"
    );
    let vid = common::vid(&v);
    let diff = ["+import sys", "+", "+def main():", "+    print('one')"];
    let shown = cli_ok(&env, &["show", &vid]);
    assert_multiline("show", &shown, &diff);
    assert!(shown.contains("tools/cli.py"), "{shown}");
    let note = listed(
        &env,
        &hook,
        id,
        &["+import sys", "+", "+def main():"],
        "+import sys\n+\n+def main():\n",
    );
    assert_eq!(note["kind"], "generated", "a reviewer never approves it");
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        read(&env, "tools/cli.py").as_deref(),
        Some(&*content("one"))
    );
    assert_eq!(v["policy_used"], "approved", "{v}");
    assert_eq!(v["undo"], format!("brainloop undo {id}"), "{v}");
    assert!(v["applied"].to_string().contains("tools/cli.py"), "{v}");
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(shown.contains("change set applied"), "{shown}");
    assert_multiline("show after the apply", &shown, &diff);
    let story: Value =
        serde_json::from_str(&cli_ok(&env, &["show", &id.to_string(), "--json"])).unwrap();
    assert_eq!(story["action"], "generate_file", "{story}");
    assert_eq!(story["params"]["output_path"], "tools/cli.py", "{story}");
    assert_eq!(story["status"], "succeeded", "{story}");
    assert_eq!(story["change_set"]["state"], "applied", "{story}");
    assert!(
        story["change_set"]["diff"]
            .as_str()
            .unwrap()
            .contains("+def main():\n"),
        "{story}"
    );
    assert!(
        story["decisions"].to_string().contains("approve"),
        "{story}"
    );
    let history = cli_ok(&env, &["history"]);
    assert!(
        history.contains("tools/cli.py") && history.contains(&format!("job {id}")),
        "{history}"
    );
    cli_ok(&env, &["undo", &id.to_string()]);
    assert!(
        read(&env, "tools/cli.py").is_none(),
        "undo removes the new file"
    );
    assert!(
        !env.workspace.join("tools").exists(),
        "and its new directory"
    );

    // An overwrite: a diff against the file it replaces; undo refused after a later change.
    std::fs::write(env.workspace.join("keep.py"), "print('old')\n").unwrap();
    let (id, st, v, err) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:two", "output_path": "keep.py", "overwrite": true}),
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = common::vid(&v);
    let shown = cli_ok(&env, &["show", &vid]);
    assert_multiline(
        "show of an overwrite",
        &shown,
        &["-print('old')", "+import sys"],
    );
    assert!(
        shown.contains("--- a/keep.py") && shown.contains("+++ b/keep.py"),
        "{shown}"
    );
    cli_ok(&env, &["approve", &vid]);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(read(&env, "keep.py").as_deref(), Some(&*content("two")));
    std::fs::write(env.workspace.join("keep.py"), "later\n").unwrap();
    let (st, out, err) = env.cli(&["undo", &id.to_string()]);
    assert!(!st.success(), "undo after a later change: {out}{err}");
    assert!(
        err.contains("later changes") && err.contains("keep.py"),
        "{err}"
    );
    assert_eq!(
        read(&env, "keep.py").as_deref(),
        Some("later\n"),
        "untouched"
    );
    std::fs::write(env.workspace.join("keep.py"), content("two")).unwrap();
    cli_ok(&env, &["undo", &id.to_string()]);
    assert_eq!(read(&env, "keep.py").as_deref(), Some("print('old')\n"));

    // An auto FILE_WRITE grant: applied unasked, as a change set show and undo know.
    std::fs::create_dir(env.workspace.join("auto")).unwrap();
    let (id, st, v, err) = gen(
        &env,
        "agent",
        json!({"prompt": "MARK:three", "output_path": "auto/x.py"}),
    );
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "auto_grant", "{v}");
    assert_eq!(read(&env, "auto/x.py").as_deref(), Some(&*content("three")));
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(
        shown.contains("change set applied (auto_grant)")
            && shown.contains("FILE_WRITE auto grant"),
        "{shown}"
    );
    assert_multiline("show of an auto write", &shown, &["+import sys", "+"]);
    cli_ok(&env, &["undo", &id.to_string()]);
    assert!(read(&env, "auto/x.py").is_none());

    // A command that ran at once: show prints its command and output, --json carries them.
    let (id, st, v, err) = common::submit(&env, "echo story-out");
    assert_eq!(st, "succeeded", "{err} {v}");
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(
        shown.contains("command: echo story-out") && shown.contains("--- stdout\nstory-out"),
        "{shown}"
    );
    let story: Value =
        serde_json::from_str(&cli_ok(&env, &["show", &id.to_string(), "--json"])).unwrap();
    assert_eq!(story["params"]["command"], "echo story-out", "{story}");
    assert_eq!(story["result"]["stdout"], "story-out\n", "{story}");
    assert_eq!(story["client"], "local", "{story}");
    assert!(
        story["started_at"].is_i64() && story["change_set"].is_null(),
        "{story}"
    );
    assert_eq!(
        mock.chats().len(),
        3,
        "each file generated once, never again on approval"
    );

    // `enqueue --wait` of a generated file: exit 5, the diff on many lines on stderr.
    let (st, out, err) = env.cli(&[
        "enqueue",
        "generate_file",
        "--params",
        r#"{"prompt": "MARK:waited", "output_path": "w.py"}"#,
        "--wait",
        "--timeout",
        "60",
    ]);
    assert_eq!(st.code(), Some(5), "{out}{err}");
    assert_multiline(
        "enqueue --wait",
        &err,
        &[
            "    +import sys",
            "    +",
            "    +def main():",
            "    +    print('waited')",
        ],
    );
    assert!(read(&env, "w.py").is_none(), "nothing before approval");
}

/// A worker started with the apply test hook `hook` held for a minute; a generated file
/// (`MARK:mark` at `path`) asked, approved, and held at the hook: (the worker, the job).
fn approved_and_held(
    env: &Env,
    cfg: &str,
    mock: &MockLlm,
    hook: &str,
    mark: &str,
    path: &str,
) -> (common::Daemon, i64) {
    let d = common::start_with_llm(env, cfg, mock, &[(hook, "60000")]);
    let (id, st, v, err) = gen(
        env,
        "local",
        json!({"prompt": format!("MARK:{mark}"), "output_path": path}),
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(env, &["approve", &common::vid(&v)]);
    let t0 = Instant::now();
    while !d.log_text().contains(hook) {
        assert!(t0.elapsed() < Duration::from_secs(60), "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(10));
    }
    (d, id)
}

/// Killed -9 after the approved file was applied, before the job's result: after the restart
/// the job ends `succeeded` with the file applied once and the result saying so; nobody is
/// asked again, and it undoes like any change set. Killed -9 between the approval and the
/// apply: asked again, and denied, never applied.
#[test]
fn a_generated_file_killed_after_its_apply_ends_succeeded_applied_once() {
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let cfg = config(&env, None);
    let (d, id) = approved_and_held(
        &env,
        &cfg,
        &mock,
        "BRAINLOOP_TEST_PAUSE_AFTER_APPLY_MS",
        "crash",
        "c.py",
    );
    assert_eq!(read(&env, "c.py").as_deref(), Some(&*content("crash")));
    let before = env.result(id).unwrap().0;
    assert!(["running", "queued"].contains(&before.as_str()), "{before}");
    d.kill9();
    let _d = common::start_with_llm(&env, &cfg, &mock, &[]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(
        st, "succeeded",
        "never denied with the file applied: {err} {v}"
    );
    assert_eq!(read(&env, "c.py").as_deref(), Some(&*content("crash")));
    let said = v["recovered"].as_str().unwrap_or_default();
    assert!(said.contains("applied before the worker stopped"), "{v}");
    assert_eq!(
        v["path"],
        env.workspace
            .canonicalize()
            .unwrap()
            .join("c.py")
            .display()
            .to_string(),
        "{v}"
    );
    assert_eq!(common::validations_count(&env, id), 1, "asked once");
    assert_eq!(mock.chats().len(), 1, "generated once");
    cli_ok(&env, &["undo", &id.to_string()]);
    assert!(read(&env, "c.py").is_none());
    drop(_d);

    // Killed -9 after the approval, before the apply's first byte: nothing is in the workspace,
    // so the job asks again (never re-run unapproved), and a denial then ends it `denied` with
    // nothing written.
    let (d, id) = approved_and_held(
        &env,
        &cfg,
        &mock,
        "BRAINLOOP_TEST_PAUSE_BEFORE_APPLY_MS",
        "before",
        "b.py",
    );
    assert!(read(&env, "b.py").is_none(), "held before the apply");
    d.kill9();
    let _d = common::start_with_llm(&env, &cfg, &mock, &[]);
    let t0 = Instant::now();
    let again: String = loop {
        let pending: Option<String> = env
            .output()
            .query_row(
                "SELECT id FROM validations WHERE job_id = ?1 AND status = 'pending'",
                [id],
                |r| r.get(0),
            )
            .ok();
        if let Some(p) = pending {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never asked again");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(common::validations_count(&env, id), 2, "asked again, once");
    assert!(read(&env, "b.py").is_none(), "nothing applied unapproved");
    cli_ok(&env, &["deny", &again]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "denied", "{err} {v}");
    assert!(read(&env, "b.py").is_none(), "denied: never applied");
    assert_eq!(mock.chats().len(), 2, "each file generated once");
}

/// `brainloop review` in tmux (a tmux server of its own, killed at the end): a waiting generated
/// file's diff is drawn line under line, and `a` applies exactly it. tmux missing: the test fails
/// saying CANNOT RUN HERE.
#[test]
fn review_in_tmux_shows_a_generated_file_on_many_lines_and_applies_it() {
    use std::process::Command;
    let v = Command::new("tmux").arg("-V").output();
    assert!(
        v.as_ref().is_ok_and(|o| o.status.success()),
        "CANNOT RUN HERE: tmux is missing ({v:?}); install tmux to test `brainloop review`"
    );
    let env = Env::new();
    let mock = MockLlm::start(respond);
    let _d = common::start_with_llm(&env, &config(&env, None), &mock, &[]);
    let (id, st, v, err) = gen(
        &env,
        "local",
        json!({"prompt": "MARK:tui", "output_path": "t.py"}),
    );
    assert_eq!(st, "pending_validation", "{err} {v}");
    let socket = format!("brainloop-change-sets-{}", std::process::id());
    /// Kills the test's own tmux server however the test ends.
    struct Server(String);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tmux")
                .args(["-L", &self.0, "kill-server"])
                .output();
        }
    }
    let _server = Server(socket.clone());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .unwrap()
    };
    let cmd = format!("{} --data-dir {} review", common::BIN, env.data.display());
    assert!(tmux(&[
        "new-session",
        "-d",
        "-s",
        "r",
        "-x",
        "160",
        "-y",
        "45",
        &cmd
    ])
    .status
    .success());
    let screen =
        || String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "r"]).stdout).into_owned();
    let t0 = Instant::now();
    let mut s = screen();
    while !(s.contains("+import sys") && s.contains("+def main():") && s.contains("print('tui')")) {
        assert!(t0.elapsed() < Duration::from_secs(20), "never drawn:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
        s = screen();
    }
    assert!(
        !s.lines()
            .any(|l| l.contains("+import sys") && l.contains("+def main():"))
            && !s.contains("\\x0a"),
        "one line under the other:\n{s}"
    );
    tmux(&["send-keys", "-t", "r", "a"]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(read(&env, "t.py").as_deref(), Some(&*content("tui")));
}

/// A loop commit of two blocks — an existing file replaced, a new one — is one change set:
/// `show`, `validations` and the notify payload show both files' diff on many lines; approve
/// applies exactly it, `history` lists it, `undo` refuses after a later change to one of its
/// paths, then restores the old bytes and removes the new file.
#[test]
fn a_loop_commit_is_one_change_set_shown_applied_and_undone() {
    let env = Env::new();
    let hook = Collector::start();
    let mock = MockLlm::start(respond_loop);
    let _d = common::start_with_llm(&env, &config(&env, Some(&hook)), &mock, &[]);
    std::fs::create_dir(env.workspace.join("gen")).unwrap();
    std::fs::write(env.workspace.join("gen/a.py"), "print('old')\n").unwrap();
    let (st, v, err) = common::run(
        &env,
        "local",
        "loop",
        json!({"mode": "propose", "blocks": [
            {"description": "A. MARK:alpha", "type": "python", "target": "gen/a.py", "overwrite": true},
            {"description": "B. MARK:beta", "type": "python", "target": "gen/new.py"}
        ]}),
    );
    assert_eq!(st, "succeeded", "{err} {v}");
    let sid = v["session_id"].as_str().unwrap().to_string();
    let id = job(
        &env,
        "local",
        "loop",
        &json!({"mode": "commit", "session_id": sid}),
    );
    let (st, v, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        !env.workspace.join("gen/new.py").exists(),
        "nothing before approval"
    );
    let vid = common::vid(&v);
    let shown = cli_ok(&env, &["show", &vid]);
    assert_multiline(
        "show of a loop commit",
        &shown,
        &[
            "-print('old')",
            "+import sys",
            "+",
            "+def main():",
            "+    print('alpha')",
        ],
    );
    assert_multiline(
        "show of its new file",
        &shown,
        &["+def main():", "+    print('beta')"],
    );
    assert!(
        shown.contains("--- a/gen/a.py") && shown.contains("+++ b/gen/new.py"),
        "{shown}"
    );
    listed(
        &env,
        &hook,
        id,
        &["+import sys", "+", "+def main():", "+    print('alpha')"],
        "+def main():\n+    print('beta')\n",
    );
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(read(&env, "gen/a.py").as_deref(), Some(&*content("alpha")));
    assert_eq!(read(&env, "gen/new.py").as_deref(), Some(&*content("beta")));
    assert_eq!(v["session_status"], "committed", "{v}");
    assert_eq!(v["undo"], format!("brainloop undo {id}"), "{v}");
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(shown.contains("change set applied"), "{shown}");
    assert_multiline(
        "show after the apply",
        &shown,
        &["+def main():", "+    print('beta')"],
    );
    let history = cli_ok(&env, &["history"]);
    assert!(
        history.contains("gen/new.py") && history.contains(&format!("job {id}")),
        "{history}"
    );
    // A later change to one of its paths: undo refuses and writes nothing.
    std::fs::write(env.workspace.join("gen/a.py"), "later\n").unwrap();
    let (st, out, err) = env.cli(&["undo", &id.to_string()]);
    assert!(!st.success(), "undo after a later change: {out}{err}");
    assert!(
        err.contains("later changes") && err.contains("gen/a.py"),
        "{err}"
    );
    assert_eq!(read(&env, "gen/a.py").as_deref(), Some("later\n"));
    assert_eq!(read(&env, "gen/new.py").as_deref(), Some(&*content("beta")));
    std::fs::write(env.workspace.join("gen/a.py"), content("alpha")).unwrap();
    cli_ok(&env, &["undo", &id.to_string()]);
    assert_eq!(read(&env, "gen/a.py").as_deref(), Some("print('old')\n"));
    assert!(
        read(&env, "gen/new.py").is_none(),
        "undo removes the new file"
    );
}

/// A database `t(a, b)` holding (1, 'x') and (2, 'y') at `rel`; `wal`: in WAL mode.
fn make_db(env: &Env, rel: &str, wal: bool) -> std::path::PathBuf {
    let p = env.workspace.join(rel);
    let c = rusqlite::Connection::open(&p).unwrap();
    if wal {
        c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
            .unwrap();
    }
    c.execute_batch("CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
        .unwrap();
    p
}

fn keys(db: &std::path::Path) -> Vec<i64> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut s = c.prepare("SELECT a FROM t ORDER BY a").unwrap();
    let v = s
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    v
}

/// A writing `generate_sql`: its effect measured on a copy (rows per table) is the change set
/// `show`, `validations` and the notify payload show, with the statements on many lines;
/// approve applies exactly it, `history` lists it, `undo` refuses after a later change to the
/// file and then restores the previous bytes. A database in WAL mode, and one over
/// `overlay_max_bytes`, ask with the statements only, saying it cannot be undone.
#[test]
fn a_writing_generate_sql_is_a_measured_change_set_applied_and_undone() {
    let env = Env::new();
    let hook = Collector::start();
    let mock = MockLlm::start(respond_loop);
    let cfg = config(&env, Some(&hook));
    let d = common::start_with_llm(&env, &cfg, &mock, &[]);
    let db = make_db(&env, "data.db", false);
    let id = job(
        &env,
        "local",
        "generate_sql",
        &json!({"prompt": "change rows", "database": "data.db"}),
    );
    let (st, v, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert_eq!(keys(&db), [1, 2], "nothing before approval");
    assert_eq!(v["tables"][0]["table"], "t", "{v}");
    let vid = common::vid(&v);
    let effect = "t: 1 row(s) added, 1 removed";
    let shown = cli_ok(&env, &["show", &vid]);
    assert!(
        shown.contains(effect) && shown.contains("data.db"),
        "{shown}"
    );
    let two_lines = |what: &str, text: &str| {
        assert!(
            text.contains("INSERT INTO t(a, b) VALUES (3, 'z');")
                && text.contains("DELETE FROM t WHERE a = 1;")
                && !text
                    .lines()
                    .any(|l| l.contains("INSERT") && l.contains("DELETE"))
                && !text.contains("\\x0a"),
            "{what} shows the statements on many lines:\n{text}"
        );
    };
    two_lines("show", &shown);
    let listing = cli_ok(&env, &["validations"]);
    assert!(listing.contains(effect), "{listing}");
    two_lines("validations", &listing);
    let note = hook.wait_matching(1, "the notify payload", |b| b["job_id"] == id);
    two_lines("the notify text", note[0]["text"].as_str().unwrap());
    assert!(
        note[0]["change_set"]["paths"]
            .to_string()
            .contains("data.db"),
        "{}",
        note[0]
    );
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(keys(&db), [2, 3], "exactly the measured change");
    assert_eq!(v["changes"], 2, "{v}");
    assert_eq!(v["undo"], format!("brainloop undo {id}"), "{v}");
    let history = cli_ok(&env, &["history"]);
    assert!(
        history.contains("data.db") && history.contains(&format!("job {id}")),
        "{history}"
    );
    // A later change to the file: undo refuses and writes nothing.
    let applied = std::fs::read(&db).unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("INSERT INTO t VALUES (9, 'later')", [])
        .unwrap();
    let (st, out, err) = env.cli(&["undo", &id.to_string()]);
    assert!(!st.success(), "undo after a later change: {out}{err}");
    assert!(
        err.contains("later changes") && err.contains("data.db"),
        "{err}"
    );
    assert_eq!(keys(&db), [2, 3, 9]);
    std::fs::write(&db, &applied).unwrap();
    cli_ok(&env, &["undo", &id.to_string()]);
    assert_eq!(keys(&db), [1, 2], "the previous bytes restored");

    // WAL mode: asked with the statements only, run in place on approval, not undoable.
    let wal = make_db(&env, "wal.db", true);
    unmeasured_runs_in_place(&env, "wal.db", &wal, "WAL mode");
    drop(d);

    // Over overlay_max_bytes: the same, saying why.
    let _d = common::start_with_llm(
        &env,
        &cfg,
        &mock,
        &[("BRAINLOOP_OVERLAY_MAX_BYTES", "1000")],
    );
    unmeasured_runs_in_place(&env, "data.db", &db, "over overlay_max_bytes (1000)");
}

/// A writing `generate_sql` on `rel` (the database `db`) whose effect cannot be measured on a
/// copy: `validations` says `why` and that it cannot be undone; approved, the script runs on the
/// database itself; `undo` knows no change set.
fn unmeasured_runs_in_place(env: &Env, rel: &str, db: &std::path::Path, why: &str) {
    let id = job(
        env,
        "local",
        "generate_sql",
        &json!({"prompt": "change rows", "database": rel}),
    );
    let (st, v, err) = settled(env, id);
    assert_eq!(st, "pending_validation", "{err} {v}");
    let listing = cli_ok(env, &["validations"]);
    assert!(
        listing.contains(why) && listing.contains("CANNOT be undone"),
        "{listing}"
    );
    assert_eq!(keys(db), [1, 2], "nothing before approval");
    cli_ok(env, &["approve", &common::vid(&v)]);
    let (st, v, err) = final_result(env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(keys(db), [2, 3]);
    let (st, _, err) = env.cli(&["undo", &id.to_string()]);
    assert!(
        !st.success() && err.contains("no applied change set"),
        "{err}"
    );
}
