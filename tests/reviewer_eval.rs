//! A reviewer that is measured and escalates (issue 35), through the real binary.
//!
//! - `brainloop reviewer eval` replays the validations a human decided through the real CLI
//!   (approve / deny) through a scripted reviewer with known answers (it answers by the command
//!   text): exact counts in all and per signature, a validation whose change set is gone listed
//!   as not rebuilt, and not one byte of any database changed by the eval.
//! - A reviewer never approves a signature a human denied for that client — not even after the
//!   operator's `override sig:N clear` forgot the signature's evidence (on main before this
//!   change the approve was applied then); another client's approve of it still is.
//! - N reviewer denials in a row for one client run `[notify]` once, with the validations, and
//!   the count survives a restart; a human decision resets it. (`[notify]` posts to a webhook on
//!   127.0.0.1, as in `tests/operator_side.rs`: a confined hook cannot write the test's files.)
//!
//! Canary files in temp dirs only; nothing leaves 127.0.0.1.

mod common;

use common::collector::Collector;
use common::{cli_ok, final_result, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Answers by the command text only (`"command":"…"`, the first in the payload's JSON):
/// REVAPPROVE → approve, REVDENY → deny, anything else → ask.
const SCRIPT: &str = r#"cmd=$(grep -o '"command":"[^"]*"' | head -n 1)
case "$cmd" in
  *REVAPPROVE*) echo 'approve scripted' ;;
  *REVDENY*) echo 'deny scripted' ;;
  *) echo 'ask scripted' ;;
esac
"#;

/// The `[reviewer]` section running [`SCRIPT`], plus `extra` lines in it.
fn reviewer_section(env: &Env, extra: &str) -> String {
    let dir = env.root.path().join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("review.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    format!(
        "[reviewer]\ncommand = \"bash {}\"\nread = [\"{}\"]\ntimeout_ms = 10000\nhosts = [\"127.0.0.1\"]\n{extra}",
        script.display(),
        dir.display()
    )
}

fn write_config(env: &Env, name: &str, toml: &str) -> String {
    let f = env.root.path().join(name);
    std::fs::write(&f, toml).unwrap();
    f.to_str().unwrap().to_string()
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

/// Submits `cmd` as `client`; it must ask. (job, validation id)
fn asks_as(env: &Env, client: &str, cmd: &str) -> (i64, String) {
    let id = common::job(env, client, "execute_bash", &json!({ "command": cmd }));
    let (st, v, err) = common::settled(env, id);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {err} {v}");
    (id, v["validation_id"].as_str().unwrap().to_string())
}

/// The human answers through the CLI; the job ends.
fn human(env: &Env, vid: &str, job: i64, approve: bool) {
    cli_ok(env, &[if approve { "approve" } else { "deny" }, vid]);
    let (st, v, err) = final_result(env, job);
    let want = if approve { "succeeded" } else { "denied" };
    assert_eq!(st, want, "{err} {v}");
}

/// Every row of every table of every database, as text (the eval must change none).
fn dump(env: &Env) -> String {
    let mut out = String::new();
    for f in [
        "brainloop.input.db",
        "brainloop.output.db",
        "brainloop.lifecycle.db",
        "brainloop.metadata.db",
        "command_security.db",
    ] {
        let c = env.db(f);
        let tables: Vec<String> = c
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for t in tables {
            let mut s = c.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
            let n = s.column_count();
            let mut rows: Vec<String> = s
                .query_map([], |r| {
                    let mut line = Vec::new();
                    for i in 0..n {
                        let v: rusqlite::types::Value = r.get(i)?;
                        line.push(format!("{v:?}"));
                    }
                    Ok(line.join("|"))
                })
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            rows.sort();
            out.push_str(&format!("{f}:{t}\n{}\n", rows.join("\n")));
        }
    }
    out
}

#[test]
fn reviewer_eval_of_a_scripted_reviewer_over_human_decisions_gives_exact_counts_and_changes_nothing(
) {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(env.workspace.join("src.txt"), "s\n").unwrap();
    // The worker runs with no reviewer: a human decides every validation.
    let d = env.start(&[]);
    // (command, the human approves) — the script's answer is in the command text.
    let steps: &[(&str, bool)] = &[
        ("sed -i s/one/REVAPPROVE1/ a.txt", true), // approve / approved: agreement
        ("echo REVDENY > b.txt", true),            // deny / approved: needless (denied)
        ("touch t.txt", true),                     // ask / approved: needless (asked)
        ("cp src.txt REVAPPROVE-copy.txt", false), // approve / denied: false approval
        ("mkdir REVDENY-dir", false),              // deny / denied: agreement
        ("sed -i s/two/REVAPPROVE2/ a.txt", false), // approve / denied: false approval
        // approve, refused (the human denied `sed -i` for this client just before) → ask /
        // approved: needless (asked)
        ("sed -i s/three/REVAPPROVE3/ a.txt", true),
        ("echo plain > c.txt", false), // ask / denied: escalated denial
        ("echo nine > d.txt", true),   // its kept change set removed below: not rebuilt
    ];
    let mut ids = Vec::new();
    for (cmd, approve) in steps {
        let (job, vid) = asks_as(&env, "local", cmd);
        human(&env, &vid, job, *approve);
        ids.push((job, vid));
    }
    assert_eq!(
        read(&env, "a.txt").as_deref(),
        Some("REVAPPROVE1\ntwo\nREVAPPROVE3\n")
    );
    drop(d);
    // What the human was shown is kept; one copy removed (as pruning would).
    let gone = ids[8].0;
    let kept = env.data.join("decided").join(format!("{gone}.json"));
    assert!(kept.exists(), "the decided change set is kept");
    std::fs::remove_file(&kept).unwrap();
    // An applied change set's overlay stays until the next start's sweep: gone too.
    let _ = std::fs::remove_dir_all(env.data.join("changes").join(gone.to_string()));

    let cfg = write_config(&env, "eval.toml", &reviewer_section(&env, ""));
    let before = dump(&env);
    let decided_before = std::fs::read_dir(env.data.join("decided")).unwrap().count();
    let out = cli_ok(&env, &["--config", &cfg, "reviewer", "eval", "--json"]);
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(dump(&env), before, "the eval changed a database");
    assert_eq!(
        std::fs::read_dir(env.data.join("decided")).unwrap().count(),
        decided_before
    );

    assert_eq!(r["selected"], 9, "{r:#}");
    let total = &r["total"];
    assert_eq!(
        total,
        &json!({
            "replayed": 8,
            "agreement": 2,
            "approved_agreed": 1,
            "denied_agreed": 1,
            "false_approvals": 2,
            "needless_escalations": 3,
            "needless_asks": 2,
            "needless_denials": 1,
            "escalated_denials": 1,
        }),
        "{r:#}"
    );
    let nr = r["not_rebuilt"].as_array().unwrap();
    assert_eq!(nr.len(), 1, "{r:#}");
    assert_eq!(nr[0]["job_id"], gone);
    assert!(
        nr[0]["why"].as_str().unwrap().contains("no longer on disk"),
        "{r:#}"
    );

    // Per validation: what the reviewer said and what the worker would have done.
    let vals = r["validations"].as_array().unwrap();
    let of = |i: usize| {
        vals.iter()
            .find(|v| v["validation_id"] == ids[i].1.as_str())
            .unwrap_or_else(|| panic!("step {i}: {r:#}"))
    };
    let want = [
        ("approve", "approve", "agreement"),
        ("deny", "deny", "needless_escalation"),
        ("ask", "ask", "needless_escalation"),
        ("approve", "approve", "false_approval"),
        ("deny", "deny", "agreement"),
        ("approve", "approve", "false_approval"),
        ("approve", "ask", "needless_escalation"),
        ("ask", "ask", "escalated_denial"),
    ];
    for (i, (answer, applied, verdict)) in want.iter().enumerate() {
        let v = of(i);
        assert_eq!(v["answer"], *answer, "step {i}: {v:#}");
        assert_eq!(v["applied"], *applied, "step {i}: {v:#}");
        assert_eq!(v["verdict"], *verdict, "step {i}: {v:#}");
    }
    assert!(
        of(6)["refusals"]
            .to_string()
            .contains("a human denied `sed -i EXPR WS_PATH`")
            && of(6)["refusals"].to_string().contains(&ids[5].1),
        "{:#}",
        of(6)
    );
    // The false approvals were approves the worker would have applied.
    assert_eq!(of(3)["refusals"], json!([]), "{:#}", of(3));
    assert_eq!(of(5)["refusals"], json!([]), "{:#}", of(5));

    // Per signature: the three `sed -i` validations under one signature.
    let sed = &r["per_signature"]["sed -i EXPR WS_PATH"];
    assert_eq!(sed["replayed"], 3, "{r:#}");
    assert_eq!(sed["agreement"], 1, "{r:#}");
    assert_eq!(sed["false_approvals"], 1, "{r:#}");
    assert_eq!(sed["needless_escalations"], 1, "{r:#}");
    assert_eq!(sed["needless_asks"], 1, "{r:#}");
    // Every replayed validation counts under each of its signatures.
    let sum: u64 = r["per_signature"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["replayed"].as_u64().unwrap())
        .sum();
    let sigs: u64 = vals
        .iter()
        .map(|v| v["signatures"].as_array().unwrap().len().max(1) as u64)
        .sum();
    assert_eq!(sum, sigs, "{r:#}");
    let cp_sig = of(3)["signatures"][0].as_str().unwrap().to_string();
    assert_eq!(r["per_signature"][&cp_sig]["false_approvals"], 1, "{r:#}");

    // The text report says the same, and `--limit` / `--client` select.
    let text = cli_ok(&env, &["--config", &cfg, "reviewer", "eval"]);
    assert!(
        text.contains("8 replayed: agreement 2 (approved 1, denied 1), false approvals 2, needless escalations 3 (asked 2, denied 1), escalated denials 1"),
        "{text}"
    );
    assert!(text.contains("not rebuilt"), "{text}");
    let last2: Value = serde_json::from_str(&cli_ok(
        &env,
        &[
            "--config", &cfg, "reviewer", "eval", "--json", "--limit", "2",
        ],
    ))
    .unwrap();
    assert_eq!(last2["selected"], 2);
    assert_eq!(last2["total"]["escalated_denials"], 1, "{last2:#}");
    let none: Value = serde_json::from_str(&cli_ok(
        &env,
        &[
            "--config", &cfg, "reviewer", "eval", "--json", "--client", "other",
        ],
    ))
    .unwrap();
    assert_eq!(none["selected"], 0);
    assert_eq!(dump(&env), before, "the eval changed a database");

    // Without a [reviewer] there is nothing to measure: said, exit 1.
    let (st, _, err) = env.cli(&["reviewer", "eval"]);
    assert!(
        !st.success() && err.contains("no [reviewer] is configured"),
        "{err}"
    );
}

fn signature_id(env: &Env, sig: &str) -> i64 {
    let rows: Value = serde_json::from_str(&cli_ok(env, &["signatures", "--json"])).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["signature"] == sig)
        .unwrap_or_else(|| panic!("{sig}: {rows}"))["id"]
        .as_i64()
        .unwrap()
}

fn reviewer_event(env: &Env, vid: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let c = env.metadata();
        let mut s = c
            .prepare("SELECT detail FROM events WHERE kind = 'reviewer' ORDER BY id")
            .unwrap();
        let found = s
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|d| serde_json::from_str::<Value>(&d.unwrap()).unwrap())
            .find(|e| e["validation_id"] == vid);
        if let Some(e) = found {
            return e;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(40)),
            "no reviewer event for {vid}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reviewer_cannot_approve_a_signature_a_human_denied_for_that_client_even_after_override_clear()
{
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\ntwo\n").unwrap();
    let cfg = write_config(&env, "brainloop.toml", &reviewer_section(&env, ""));
    let _d = env.start(&[("BRAINLOOP_CONFIG", &cfg)]);

    // The reviewer asks; the human denies this `sed -i`.
    let (job, vid) = asks_as(&env, "local", "sed -i s/one/uno/ a.txt");
    assert_eq!(reviewer_event(&env, &vid)["applied"], "ask");
    human(&env, &vid, job, false);
    // The operator forgets the signature's evidence (learning starts over).
    let id = signature_id(&env, "sed -i EXPR WS_PATH");
    cli_ok(&env, &["override", &format!("sig:{id}"), "clear"]);

    // The reviewer approves the same signature for the same client: not applied, asked.
    let (_, vid) = asks_as(&env, "local", "sed -i s/two/REVAPPROVE/ a.txt");
    let e = reviewer_event(&env, &vid);
    assert_eq!(e["answer"], "approve", "{e}");
    assert_eq!(e["applied"], "ask", "{e}");
    assert!(
        e["refusals"]
            .to_string()
            .contains("a human denied `sed -i EXPR WS_PATH` for client local"),
        "{e}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let st: String = env
        .output()
        .query_row(
            "SELECT status FROM validations WHERE id = ?1",
            [&vid],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(st, "pending", "{e}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
    let shown = cli_ok(&env, &["validations"]);
    assert!(shown.contains("a human denied"), "{shown}");

    // Another client's approve of the signature: nobody denied it for that client.
    cli_ok(&env, &["grant", "other", "SYSTEM_COMMAND", "sed"]);
    let id = common::job(
        &env,
        "other",
        "execute_bash",
        &json!({"command": "sed -i s/one/REVAPPROVE/ a.txt"}),
    );
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(v["policy_used"], "reviewer_approved", "{v}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("REVAPPROVE\ntwo\n"));
}

/// A `reviewer_denials` notification.
fn streak(b: &Value) -> bool {
    b["event"] == "reviewer_denials"
}

/// The job is denied by the reviewer.
fn reviewer_denies(env: &Env, cmd: &str) -> String {
    let id = common::job(env, "local", "execute_bash", &json!({ "command": cmd }));
    let (st, v, err) = final_result(env, id);
    assert_eq!(st, "denied", "{cmd}: {err} {v}");
    assert!(err.contains("reviewer:"), "{err}");
    v["validation_id"].as_str().unwrap().to_string()
}

#[test]
fn n_reviewer_denials_in_a_row_notify_the_human_once_across_a_restart_and_a_human_decision_resets_them(
) {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let hook = Collector::start();
    let toml = format!(
        "{}[notify]\ncommand = \"{}\"\ntimeout_ms = 10000\nhosts = [\"127.0.0.1\"]\n",
        reviewer_section(&env, "escalate_after_denials = 3\n"),
        hook.command().replace('"', "\\\"")
    );
    let cfg = write_config(&env, "brainloop.toml", &toml);
    let d = env.start(&[("BRAINLOOP_CONFIG", &cfg)]);
    let v1 = reviewer_denies(&env, "sed -i s/one/REVDENY1/ a.txt");
    let v2 = reviewer_denies(&env, "echo REVDENY2 > b.txt");
    drop(d);
    // The count is the decision rows': a restart keeps it.
    let d = env.start(&[("BRAINLOOP_CONFIG", &cfg)]);
    // An escape sequence in the command: the `text` shows it escaped.
    let v3 = reviewer_denies(&env, "echo REVDENY3 > c.txt # \u{1b}[2J");
    let got = hook.wait_matching(1, "reviewer_denials notifications", streak);
    let b = &got[0];
    assert_eq!(b["client"], "local", "{b}");
    assert_eq!(b["denials"], 3, "{b}");
    assert_eq!(b["escalate_after_denials"], 3, "{b}");
    let vids: Vec<&str> = b["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(vids, [v3.as_str(), v2.as_str(), v1.as_str()], "{b}");
    assert_eq!(
        b["validations"][2]["command"],
        "sed -i s/one/REVDENY1/ a.txt"
    );
    let text = b["text"].as_str().unwrap();
    assert!(
        text.contains("the reviewer denied the last 3 validations of client local in a row")
            && text.contains(&v1)
            && !text.contains('\u{1b}'),
        "{text}"
    );
    // `validations` says so.
    let out = cli_ok(&env, &["--config", &cfg, "validations", "--all"]);
    assert!(
        out.contains("REVIEWER denied the last 3 validations of client local in a row"),
        "{out}"
    );

    let st: Value =
        serde_json::from_str(&cli_ok(&env, &["--config", &cfg, "status", "--json"])).unwrap();
    assert_eq!(st["reviewer_denials_in_a_row"], json!({"local": 3}), "{st}");

    // A fourth denial: no second notice (the next at six).
    reviewer_denies(&env, "echo REVDENY4 > d.txt");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        hook.matching(streak).len(),
        1,
        "{:?}",
        hook.matching(streak)
    );

    // A human decision for the client resets the count: three more denials, one more notice.
    let (job, vid) = asks_as(&env, "local", "echo human > e.txt");
    human(&env, &vid, job, true);
    reviewer_denies(&env, "echo REVDENY5 > f.txt");
    reviewer_denies(&env, "echo REVDENY6 > g.txt");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        hook.matching(streak).len(),
        1,
        "two after the reset: no notice yet"
    );
    let v7 = reviewer_denies(&env, "echo REVDENY7 > h.txt");
    let got = hook.wait_matching(2, "reviewer_denials notifications", streak);
    assert_eq!(got[1]["denials"], 3, "{:?}", got[1]);
    assert_eq!(got[1]["validations"][0]["id"], v7.as_str());
    drop(d);
    // Nothing denied by the reviewer was applied.
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\n"));
    assert!(read(&env, "b.txt").is_none() && read(&env, "h.txt").is_none());
}
