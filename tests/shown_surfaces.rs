//! Agent text never reaches the operator's terminal raw (issue 33, `src/shown.rs`), through the
//! real binary. A client whose id, command, output, diff, file name, purpose and permission
//! request all carry the same hostile strings — an OSC 52 clipboard write, a CSI erase-line and a
//! carriage return that overprint the command, SGR conceal (`\e[8m`, which hid the "touches a
//! protected path" line), the bidi override U+202E and isolates U+2066–2069, the separators
//! U+2028/2029, NUL, DEL, the C1 CSI U+009B — is run by a real worker; then EVERY human-readable
//! surface is read: `validations`, `show` (validation and job), `commands` (and `--history`),
//! `signatures`, `requests`, `grants`, `status`, `check`, `approve`, `undo`, an error quoting the
//! text, the worker's log, and the `text` of the hooks' payload. None may carry a raw control,
//! format or separator character (newline and tab aside); each shows the hostile text escaped
//! (`\x1b]52`, `\u{202e}`); every `--json` form still carries the exact original. Canaries in a
//! temp dir only; nothing leaves the machine.

mod common;

use common::{cli_ok, final_result, job, settled, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The hostile string every field carries (no NUL: a command may not hold one).
const HOSTILE: &str = "A\x1b]52;c;cHduZWQ=\x07B\x1b[2K\rC\x1b[8mD\x1b[0mE\u{202e}F\u{2066}G\u{2067}H\u{2068}I\u{2069}J\u{2028}K\u{2029}L\x7fM\u{9b}2JN\u{200e}\u{200f}\u{61c}O";
/// The client: conceal, a bidi override and a clipboard write in its id.
const CLIENT: &str = "cl\x1b[8m\u{202e}i\x1b]52;c;eA==\x07ent";
/// A file name the command creates (so `undo`, the diff and the change set's paths carry it).
const FILE: &str = "f\x1b]52;c;eA==\x07\u{202e}txt.exe";

/// The characters no human-readable surface may print raw.
fn raw_hostile(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    c != '\n'
        && c != '\t'
        && matches!(
            get_general_category(c),
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
        )
}

/// Where raw characters got through: every surface is read before the test fails, so one run
/// lists them all.
static LEAKS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A surface's output carries no raw hostile byte (recorded in [`LEAKS`]).
fn inert(surface: &str, out: &str) {
    let bad: Vec<String> = out
        .char_indices()
        .filter(|(_, c)| raw_hostile(*c))
        .map(|(i, c)| {
            let from = out[..i]
                .char_indices()
                .rev()
                .nth(20)
                .map(|(j, _)| j)
                .unwrap_or(0);
            format!("{c:?} after {:?}", &out[from..i])
        })
        .take(5)
        .collect();
    if !bad.is_empty() {
        LEAKS.lock().unwrap().push(format!(
            "`brainloop {}` printed raw: {bad:?}",
            surface.escape_debug()
        ));
    }
}

/// What [`inert`] and [`shows_escaped`] found, as one failure.
fn no_leaks() {
    let leaks = LEAKS.lock().unwrap();
    assert!(
        leaks.is_empty(),
        "{} surface(s) leak:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
}

/// `brainloop ARGS` (any exit code): stdout and stderr, both checked.
fn surface(env: &Env, args: &[&str]) -> String {
    let (_, out, err) = env.cli(args);
    let name = args.join(" ");
    inert(&name, &out);
    inert(&format!("{name} (stderr)"), &err);
    out + &err
}

/// The escaped forms of the hostile string are on screen: shown, not dropped.
fn shows_escaped(surface: &str, out: &str) {
    for want in ["\\x1b]52;c;", "\\u{202e}"] {
        if !out.contains(want) {
            LEAKS.lock().unwrap().push(format!(
                "`brainloop {}` does not show {want}",
                surface.escape_debug()
            ));
        }
    }
}

/// A `--json` surface: inert on a terminal too (hidden characters `\uXXXX`-escaped), parsed.
fn json_of(env: &Env, args: &[&str]) -> Value {
    let text = cli_ok(env, args);
    inert(&args.join(" "), &text);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Some string anywhere in `v` equals (or, `whole = false`, contains) `want`.
fn carries(v: &Value, want: &str, whole: bool) -> bool {
    match v {
        Value::String(s) => {
            if whole {
                s == want
            } else {
                s.contains(want)
            }
        }
        Value::Array(a) => a.iter().any(|x| carries(x, want, whole)),
        Value::Object(m) => m.values().any(|x| carries(x, want, whole)),
        _ => false,
    }
}

/// Long because it is one scenario: the hostile client's jobs, then every surface in turn.
#[test]
fn every_operator_surface_shows_hostile_text_escaped_and_json_keeps_it_exact() {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let d = env.start(&[]);
    for (perm, pat) in [
        ("FILE_READ", "{workspace}/**"),
        ("FILE_WRITE", "{workspace}/**"),
        ("SYSTEM_COMMAND", "*"),
    ] {
        surface(&env, &["grant", CLIENT, perm, pat]);
    }

    // A command that asks (it writes the workspace): hostile text in the command itself, its
    // stdout (NUL included), its stderr, a new file's name and content (the diff), and its purpose.
    let cmd = format!(
        "printf '%s\\0' 'out {HOSTILE}'; printf '%s' 'err {HOSTILE}' >&2; printf '%s\\n' '{HOSTILE}' > '{FILE}'; echo '{HOSTILE}' >> a.txt"
    );
    let id = job(
        &env,
        CLIENT,
        "execute_bash",
        &json!({"command": cmd, "purpose": format!("tidy up {HOSTILE}")}),
    );
    let (st, v, err) = settled(&env, id);
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();

    // A permission request with a hostile justification, a job that fails quoting hostile text,
    // and one still running (its client on `status`).
    let req = job(
        &env,
        CLIENT,
        "request_permission",
        &json!({"permission": "NETWORK", "pattern": "example.org:443", "justification": format!("needed {HOSTILE}")}),
    );
    assert_eq!(settled(&env, req).0, "succeeded");
    let bad = job(
        &env,
        CLIENT,
        &format!("no_such_action{HOSTILE}"),
        &json!({}),
    );
    settled(&env, bad);
    let slow = job(
        &env,
        CLIENT,
        "execute_bash",
        &json!({"command": "sleep 15"}),
    );
    let t0 = Instant::now();
    while env.result(slow).map(|r| r.0) != Some("running".into()) {
        assert!(t0.elapsed() < Duration::from_secs(30), "sleep never ran");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Every human-readable surface.
    let out = surface(&env, &["validations"]);
    shows_escaped("validations", &out);
    let out = surface(&env, &["show", &vid]);
    shows_escaped("show VID", &out);
    if !out.contains("\\x00") {
        LEAKS
            .lock()
            .unwrap()
            .push("`show VID` does not show stdout's NUL".into());
    }
    surface(&env, &["show", &id.to_string()]);
    let out = surface(&env, &["commands"]);
    shows_escaped("commands", &out);
    let list = json_of(&env, &["commands", "--json"]);
    let hash = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["command_text"] == cmd.as_str())
        .map(|e| e["command_hash"].as_str().unwrap().to_string())
        .expect("commands --json carries the exact command");
    surface(&env, &["commands", "--history", &hash]);
    let out = surface(&env, &["requests"]);
    shows_escaped("requests", &out);
    surface(&env, &["requests", "--all"]);
    surface(&env, &["grants"]);
    surface(&env, &["grants", CLIENT]);
    let out = surface(&env, &["status"]);
    shows_escaped("status", &out);
    surface(&env, &["check", "--", &cmd]);
    surface(&env, &["signatures"]);
    // An error that quotes agent text (a validation id is what an operator pastes).
    let out = surface(&env, &["show", &format!("v{HOSTILE}")]);
    assert!(out.contains("no validation"), "{out}");
    surface(&env, &["deny", &format!("v{HOSTILE}")]);

    // The hooks' payload (what `[notify]` and `review --json` get): JSON keeps the agent's text
    // exact, and its `text` — the human-readable line for a notification — is inert.
    let payload = json_of(&env, &["review", "--json"]);
    let p = &payload[0];
    assert_eq!(p["command"], cmd.as_str());
    assert_eq!(p["client"], CLIENT);
    let text = p["text"].as_str().unwrap_or("(the payload has no `text`)");
    inert("review --json: .text", text);
    shows_escaped("review --json: .text", text);

    // --json keeps the exact original everywhere.
    let vals = json_of(&env, &["validations", "--json"]);
    assert!(carries(&vals, &cmd, true) && carries(&vals, CLIENT, true));
    let reqs = json_of(&env, &["requests", "--json"]);
    assert!(carries(&reqs, &format!("needed {HOSTILE}"), true));
    let status = json_of(&env, &["status", "--json"]);
    assert!(carries(&status, HOSTILE, false), "{status}");
    assert!(status["running_by_client"].get(CLIENT).is_some());

    // The review screen in a real terminal: its raw output carries none of the hostile sequences
    // (ratatui's own escapes aside), and the screen shows them escaped.
    review_in_a_terminal(&env);

    // Approve (its echo of the command), then undo (the restored paths name the hostile file).
    let out = surface(&env, &["approve", &vid]);
    shows_escaped("approve", &out);
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert!(env.workspace.join(FILE).exists());
    surface(&env, &["show", &id.to_string()]);
    let out = surface(&env, &["undo", &id.to_string()]);
    shows_escaped("undo", &out);

    // The worker's log quotes the client (every line of its jobs) and never raw.
    let log = d.log_text();
    inert("run (the worker's log)", &log);

    // The JSON log: inert too, and each line still JSON carrying the exact client id.
    drop(d);
    let d = env.start(&[("BRAINLOOP_LOG_FORMAT", "json")]);
    let failing = job(&env, CLIENT, "execute_bash", &json!({"command": "false"}));
    final_result(&env, failing);
    let t0 = Instant::now();
    while !d.log_text().contains("job ended") && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = d.log_text();
    inert("run (the worker's JSON log)", &log);
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| carries(l, CLIENT, true)),
        "no JSON log line carries the client id exactly:\n{}",
        log.escape_debug()
    );
    no_leaks();
}

/// Runs `brainloop review` in tmux, its raw output recorded by `script`; checks what reached the
/// terminal, then quits. tmux or script missing: fails saying CANNOT RUN HERE.
fn review_in_a_terminal(env: &Env) {
    use std::process::{Command, Stdio};
    for tool in ["tmux", "script"] {
        let ok = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "CANNOT RUN HERE: {tool} is missing; install it to test `brainloop review`"
        );
    }
    let socket = format!("brainloop-shown-test-{}", std::process::id());
    let raw = env.root.path().join("review.raw");
    let cmd = format!(
        "script -q -f -c '{} --data-dir {} review' {}",
        common::BIN,
        env.data.display(),
        raw.display()
    );
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .unwrap()
    };
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        "review",
        "-x",
        "200",
        "-y",
        "50",
        &cmd,
    ]);
    assert!(started.status.success(), "tmux new-session failed");
    let t0 = Instant::now();
    let screen = loop {
        let s = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "review"]).stdout)
            .into_owned();
        if s.contains("pending (1)") && s.contains("+A") || t0.elapsed() > Duration::from_secs(20) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = tmux(&["send-keys", "-t", "review", "q"]);
    std::thread::sleep(Duration::from_millis(500));
    let _ = tmux(&["kill-server"]);
    assert!(
        screen.contains("pending (1)"),
        "review never drew its list:\n{screen}"
    );
    inert("review (the tmux screen)", &screen);
    shows_escaped("review (the tmux screen)", &screen);
    let bytes = std::fs::read(&raw).unwrap_or_default();
    let out = String::from_utf8_lossy(&bytes);
    assert!(
        out.contains("pending (1)"),
        "script recorded nothing: {out:?}"
    );
    let hostile = [
        "\x1b]52;c;",
        "B\x1b[2K",
        "\rC",
        "C\x1b[8m",
        "\u{202e}",
        "\u{2066}",
        "\u{2067}",
        "\u{2068}",
        "\u{2069}",
        "\u{2028}",
        "\u{2029}",
        "\u{200e}",
        "\u{200f}",
        "\u{61c}",
        "\u{9b}",
        "\x7f",
        "\x07",
    ];
    for h in hostile {
        if out.contains(h) {
            LEAKS.lock().unwrap().push(format!(
                "`brainloop review` wrote {:?} raw to the terminal",
                h
            ));
        }
    }
}
